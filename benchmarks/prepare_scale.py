"""How ``autoint.preprocess.prepare`` scales: rows/s and peak memory on synthetic Criteo logs.

Writes a Criteo-format TSV of N synthetic rows (label, 13 integers, 26 hashed
categories; fixed per-column cardinalities with a skewed, Zipf-like draw, ~20 %
empty integers and ~5 % empty categories), runs ``prepare`` on it in a fresh
subprocess and reports wall time, rows/s and the subprocess's peak RSS. As the
vocabularies are bounded by the cardinalities, peak RSS should not grow with N.

    python benchmarks/prepare_scale.py --rows 1000000 5000000 --out scale.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

# Cardinality of C1..C26, roughly the shape of Criteo's (capped at 200k).
CARDINALITIES = (1_400, 550, 200_000, 150_000, 300, 24, 12_000, 630, 3, 90_000, 5_600, 200_000, 3_200, 27,
                 14_000, 180_000, 10, 5_600, 2_200, 4, 190_000, 17, 15, 80_000, 100, 60_000)
GEN_CHUNK = 250_000


def _tables(seed: int) -> list[np.ndarray]:
    """Per column, its values as 8-hex-digit strings (a fixed pseudo-hash of the value's rank)."""
    out = []
    for j, card in enumerate(CARDINALITIES):
        h = (np.arange(card, dtype=np.uint64) * np.uint64(2654435761) + np.uint64(j * 40503 + seed)) & np.uint64(
            0xFFFFFFFF
        )
        out.append(np.char.mod("%08x", h.astype(np.int64)).astype(object))
    return out


def write_criteo(path: Path, rows: int, seed: int = 0) -> float:
    """Write ``rows`` synthetic Criteo lines to ``path``; returns seconds taken."""
    t0 = time.perf_counter()
    rng = np.random.default_rng(seed)
    tables = _tables(seed)
    opts = pacsv.WriteOptions(include_header=False, delimiter="\t", quoting_style="none")
    names = ["label", *(f"I{i}" for i in range(1, 14)), *(f"C{i}" for i in range(1, 27))]
    with pacsv.CSVWriter(path, schema=_schema(names), write_options=opts) as writer:
        done = 0
        while done < rows:
            n = min(GEN_CHUNK, rows - done)
            cols = [pa.array(rng.random(n) < 0.25, type=pa.bool_()).cast(pa.int8())]
            for i in range(13):
                v = np.floor(rng.lognormal(1.5, 1.8, n)).astype(np.int64) - (1 if i == 1 else 0)
                cols.append(pa.array(v, mask=rng.random(n) < 0.2))
            for table in tables:
                idx = np.minimum((len(table) * rng.random(n) ** 3).astype(np.int64), len(table) - 1)
                cols.append(pa.array(table[idx], type=pa.string(), mask=rng.random(n) < 0.05))
            writer.write_table(pa.Table.from_arrays(cols, names=names))
            done += n
    return time.perf_counter() - t0


def _schema(names: list[str]) -> pa.Schema:
    return pa.schema([pa.field(names[0], pa.int8())] + [pa.field(n, pa.int64()) for n in names[1:14]]
                     + [pa.field(n, pa.string()) for n in names[14:]])


_CHILD = """
import json, resource, sys, time
from autoint.config import config_from_dict
from autoint.preprocess import prepare
cfg = config_from_dict({"data": {"format": "criteo", "min_count": 10, "chunk_size": int(sys.argv[3])}})
t0 = time.perf_counter()
report = prepare(cfg, sys.argv[1], sys.argv[2], progress=False)
print(json.dumps({"wall_s": time.perf_counter() - t0, "report": report,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def run_prepare(raw: Path, out: Path, chunk_size: int) -> dict:
    proc = subprocess.run([sys.executable, "-c", _CHILD, str(raw), str(out), str(chunk_size)],
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"prepare failed on {raw}:\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, nargs="+", default=[1_000_000, 5_000_000])
    p.add_argument("--chunk-size", type=int, default=200_000)
    p.add_argument("--workdir", type=Path, default=None, help="where the synthetic logs go (default: a temp dir)")
    p.add_argument("--out", type=Path, default=None, help="also write the JSON results here")
    args = p.parse_args(argv)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        work = args.workdir or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        for n in args.rows:
            raw = work / f"criteo_{n}.txt"
            gen_s = write_criteo(raw, n)
            child = run_prepare(raw, work / f"processed_{n}", args.chunk_size)
            rep = child["report"]
            results.append({
                "rows": n,
                "file_mb": round(raw.stat().st_size / 2**20, 1),
                "generate_s": round(gen_s, 2),
                "prepare_s": round(child["wall_s"], 2),
                "rows_per_s": round(n / child["wall_s"]),
                "peak_rss_mb": round(child["peak_rss_mb"], 1),
                "vocab_total": sum(rep["vocab_sizes"].values()),
                "timings": rep["timings"],
                "chunk_size": args.chunk_size,
            })
            print(json.dumps(results[-1]), file=sys.stderr, flush=True)
            raw.unlink()
    text = json.dumps(results, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
