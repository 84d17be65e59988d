"""How ``autoint prepare`` scales on Criteo-like logs: time against the bare parser, peak memory, many files, lookups.

For each row count it writes a Criteo-format TSV with ``criteo_like.py`` (long
tails, 25-35 % holes, five columns whose vocabulary grows with the log), then,
each in a fresh subprocess so peak RSS is the child's own, and each after reading its raw files once, so
that it finds them in the page cache:

* the bare parser: multi-threaded ``pyarrow.csv.read_csv`` of the whole file
  (best of ``--baseline-runs``; it holds the whole table, so it is skipped past
  ``--baseline-max-rows``, where it would not fit in this machine's memory);
* ``prepare`` with the shipped ``configs/criteo.yaml`` data settings (its
  ``permutation`` split) and again with ``split.method: random``.

Then: 24 gzip "day" files given as one glob, and one raw row scored through
:class:`autoint.predict.Scorer` against a 1k- and a 1M-value vocabulary.
``--parts blocks`` prepares the largest log with the shipped settings reading
and encoding in blocks of at most each ``--block-rows`` in turn, alternating,
``--block-repeats`` rounds (``prepare`` caps its blocks at a stage row group;
before, they were ``data.chunk_size`` rows). ``--parts stage`` does the same
with the stage written as before 2026-11-25 (plain strings, the bucketed
fields' numbers staged beside their buckets) and as now, ``--stage-repeats`` rounds.

    python benchmarks/prepare_scale.py --rows 1000000 10000000 30000000

Results go to ``benchmarks/results/prepare_scale.json``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import bench_results  # noqa: E402
import criteo_like  # noqa: E402

ROOT = HERE.parent

_BASELINE = """
import json, resource, sys, time
import pyarrow.csv as pacsv
names = ["label"] + [f"I{i}" for i in range(1, 14)] + [f"C{i}" for i in range(1, 27)]
t0 = time.perf_counter()
table = pacsv.read_csv(sys.argv[1], read_options=pacsv.ReadOptions(column_names=names),
                       parse_options=pacsv.ParseOptions(delimiter="\\t"))
print(json.dumps({"wall_s": time.perf_counter() - t0, "rows": table.num_rows,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""

_PREPARE = """
import json, resource, sys, time, yaml
from autoint.config import config_from_dict
shipped = yaml.safe_load(open(sys.argv[3]))["data"]
if len(sys.argv) > 5 and sys.argv[5] != "-":  # the largest block read and encoded at a time (the "blocks" part)
    import autoint.preprocess
    autoint.preprocess.STAGE_GROUP_ROWS = int(sys.argv[5])
if len(sys.argv) > 6 and sys.argv[6] == "plain":  # the stage as it was before 2026-11-25 (the "stage" part):
    import autoint.engine as engine                # plain strings, and the bucketed fields' numbers staged too
    init = engine.StageWriter.__init__
    def plain(self, folder, fields, with_time=False, buckets=(), keep=()):
        init(self, folder, fields, with_time, buckets, keep=buckets)
        self._writer.close()
        self._writer = engine.pq.ParquetWriter(self.path, self.schema, compression="none", use_dictionary=False,
                                               write_statistics=["_pos", "_row", "_split"])
    engine.StageWriter.__init__ = plain
if sys.argv[4] != "shipped":
    shipped["split"]["method"] = sys.argv[4]
cfg = config_from_dict({"data": shipped})
from autoint.preprocess import prepare
t0 = time.perf_counter()
report = prepare(cfg, sys.argv[1], sys.argv[2], progress=False, overwrite=True)  # a folder from an earlier run
print(json.dumps({"wall_s": time.perf_counter() - t0, "report": report,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""

_SCORER = """
import json, sys, time, yaml
import numpy as np, pandas as pd, pyarrow as pa
from autoint.config import config_from_dict
from autoint.datasets.criteo import CRITEO_FIELDS, CAT_NAMES
from autoint.encoder import Encoder, Vocabulary
from autoint.model import AutoInt
from autoint.predict import Scorer
n = int(sys.argv[1])
transform = yaml.safe_load(open(sys.argv[2]))["data"]["numeric_transform"]  # the shipped config's
cfg = config_from_dict({"data": {"format": "criteo"}, "model": {"embedding_dim": 16, "num_layers": 3,
                        "num_heads": 2, "head_dim": 32}, "train": {"precision": "32-true"}})
enc = Encoder(CRITEO_FIELDS, {"format": "criteo", "include_ids": False, "columns": None},
              {f.name: transform for f in CRITEO_FIELDS if f.kind == "numeric"})
values = pa.array([f"{i:08x}" for i in range(n)])
for name in CAT_NAMES:
    enc.vocabularies_[name] = Vocabulary.from_counts(values, np.arange(n, 0, -1))
buckets = pa.array([str(b) for b in range(-3, 300)])  # bucketed integer fields: floor(ln(z)^2) stays below 300
for name in enc.bucketed:
    enc.vocabularies_[name] = Vocabulary.from_counts(buckets, np.arange(len(buckets), 0, -1))
for t in enc.numeric_.values():
    t.finalize()
enc.fitted_ = True
model = AutoInt(enc.schema, cfg.model)
t0 = time.perf_counter()
scorer = Scorer(model, cfg, enc.schema, enc.to_state())
load_s = time.perf_counter() - t0
row = pd.DataFrame({**{f"I{i}": [str(i)] for i in range(1, 14)},
                    **{c: [f"{(7 * j) % n:08x}"] for j, c in enumerate(CAT_NAMES)}})
def timed(fn, repeats=1000):
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter(); fn(); out.append((time.perf_counter() - t0) * 1e3)
    return np.array(out)
t0 = time.perf_counter(); scorer.score_frame(row); first_ms = (time.perf_counter() - t0) * 1e3
timed(lambda: scorer.score_frame(row), 100)  # warm-up
rows = timed(lambda: scorer.score_frame(row))
batch = scorer.encode(row)
encode, model = timed(lambda: scorer.encode(row)), timed(lambda: scorer.score_tensors(batch))
builds = sum(v.index_builds_ for v in scorer.encoder.vocabularies_.values())
ms = lambda a, q: round(float(np.percentile(a, q)), 3)
print(json.dumps({"vocab_values_per_field": n, "fields": len(CAT_NAMES), "numeric_transform": transform,
                  "load_s": round(load_s, 2),
                  "first_row_ms": round(first_ms, 3), "median_row_ms": ms(rows, 50), "p10_row_ms": ms(rows, 10),
                  "p90_row_ms": ms(rows, 90), "median_encode_ms": ms(encode, 50), "median_model_ms": ms(model, 50),
                  "index_builds": builds}))
"""


def _child(code: str, *args: str) -> dict:
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, check=False,
                          cwd=ROOT)
    if proc.returncode != 0:
        raise SystemExit(f"child failed ({args}):\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _warm(pattern: str) -> None:
    """Read the raw files once, so that every timed run finds them in the page cache (a run right after the
    baseline's 10 GB table found part of the 10M-row log evicted, and read it from disk)."""
    for path in sorted(Path(pattern).parent.glob(Path(pattern).name)):
        with open(path, "rb") as f:
            while f.read(1 << 24):
                pass


def _prepare_row(raw: str, out: Path, split: str, rows: int, block_rows: int | None = None,
                 stage: str = "shipped") -> dict:
    _warm(raw)
    child = _child(_PREPARE, raw, str(out), str(ROOT / "configs" / "criteo.yaml"), split,
                   "-" if block_rows is None else str(block_rows), stage)
    rep = child["report"]
    return {"split": rep["data"]["split"]["method"], "wall_s": round(child["wall_s"], 2),
            "rows_per_s": round(rows / child["wall_s"]), "peak_rss_mb": round(child["peak_rss_mb"], 1),
            "timings": rep["timings"], "stage_mb": round(rep["stage_bytes"] / 2**20, 1),
            "vocab_total": sum(rep["vocab_sizes"].values()),
            "distinct_in_train_total": sum(rep["distinct_in_train"].values()),
            "rows_per_file": rep["rows_per_file"]}


def _alternating(work: Path, n: int, repeats: int, key: str, variants: dict) -> dict:
    """The ``n``-row log prepared with the shipped settings once per variant (``_prepare_row`` keyword
    arguments) in each of ``repeats`` rounds, alternating, so that the machine's drift falls on every variant."""
    raw = work / f"criteo_like_{n}.txt"
    if not raw.exists():
        criteo_like.write(raw, n)
    runs = []
    for r in range(repeats):
        for label, kwargs in variants.items():
            row = _prepare_row(str(raw), work / f"processed_{n}_{key}", "shipped", n, **kwargs)
            runs.append({"round": r + 1, key: label, **{k: row[k] for k in
                         ("split", "wall_s", "peak_rss_mb", "stage_mb", "timings")}})
            print(json.dumps(runs[-1]), file=sys.stderr, flush=True)
    return {"rows": n, "runs": runs}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, nargs="+", default=[1_000_000, 10_000_000, 30_000_000])
    p.add_argument("--baseline-runs", type=int, default=2)
    p.add_argument("--baseline-max-rows", type=int, default=10_000_000,
                   help="read_csv holds the whole table (~1 GB per 1M rows): skip it above this")
    p.add_argument("--days", type=int, default=24, help="gzip files for the glob case")
    p.add_argument("--rows-per-day", type=int, default=50_000)
    p.add_argument("--workdir", type=Path, default=None, help="where the logs go (kept if given; default: temp)")
    p.add_argument("--out", type=Path, default=HERE / "results" / "prepare_scale.json")
    p.add_argument("--parts", nargs="+", choices=("sizes", "glob", "scorer", "blocks", "stage"),
                   default=["sizes", "glob", "scorer"],
                   help="measure only these; the others are kept from an existing --out file")
    p.add_argument("--block-rows", type=int, nargs="+", default=[200_000, 65_536],
                   help="blocks: prepare the largest --rows log with the shipped settings, reading and encoding "
                        "in blocks of at most each of these many rows in turn (200,000: data.chunk_size, as before "
                        "blocks were capped at a stage row group)")
    p.add_argument("--block-repeats", type=int, default=2, help="blocks: rounds, each running every block size")
    p.add_argument("--stage-repeats", type=int, default=2,
                   help="stage: rounds, each preparing the largest --rows log with the shipped settings twice: "
                        "with the stage as it was (plain strings, the bucketed fields' numbers too) and as it is")
    args = p.parse_args(argv)
    results = bench_results.start(args.out, argv, "prepare_scale.py", args.parts,
                                  {"sizes": ["sizes"], "glob": ["glob"], "scorer": ["scorer", "scorer_ratio_1m_vs_1k"],
                                   "blocks": ["blocks"], "stage": ["stage"]})
    results.update({part: [] for part in ("sizes", "scorer") if part in args.parts})
    with tempfile.TemporaryDirectory() as tmp:
        work = args.workdir or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        for n in args.rows if "sizes" in args.parts else []:
            raw = work / f"criteo_like_{n}.txt"
            gen_s = None
            if not raw.exists():
                gen_s = round(criteo_like.write(raw, n), 1)
            entry: dict = {"rows": n, "file_mb": round(raw.stat().st_size / 2**20, 1), "generate_s": gen_s}
            if n <= args.baseline_max_rows:
                runs = []
                for _ in range(args.baseline_runs):
                    _warm(str(raw))
                    runs.append(_child(_BASELINE, str(raw)))
                best = min(r["wall_s"] for r in runs)
                entry["read_csv"] = {"runs_s": [round(r["wall_s"], 2) for r in runs], "best_s": round(best, 2),
                                     "rows_per_s": round(n / best),
                                     "peak_rss_mb": round(max(r["peak_rss_mb"] for r in runs), 1)}
            for split in ("shipped", "random"):
                row = _prepare_row(str(raw), work / f"processed_{n}_{split}", split, n)
                row.pop("rows_per_file")
                if "read_csv" in entry:
                    row["x_read_csv"] = round(row["wall_s"] / entry["read_csv"]["best_s"], 2)
                entry[f"prepare_{row['split']}"] = row
                print(json.dumps({"rows": n, row["split"]: row}), file=sys.stderr, flush=True)
            results["sizes"].append(entry)
            if args.workdir is None:
                raw.unlink()
        if "glob" in args.parts:
            days = criteo_like.write_days(work / "days", args.days, args.rows_per_day)
            row = _prepare_row(str(work / "days" / "day_*.gz"), work / "processed_days", "random",
                               args.days * args.rows_per_day)
            results["glob"] = {"pattern": "day_*.gz", "files": len(days), "rows": args.days * args.rows_per_day,
                               **row, "rows_per_file": {Path(k).name: v for k, v in row["rows_per_file"].items()}}
        if "blocks" in args.parts:
            results["blocks"] = _alternating(work, max(args.rows), args.block_repeats, "block_rows",
                                             {b: {"block_rows": b} for b in args.block_rows})
        if "stage" in args.parts:
            results["stage"] = _alternating(work, max(args.rows), args.stage_repeats, "stage",
                                            {layout: {"stage": layout} for layout in ("plain", "shipped")})
        for n in (1_000, 1_000_000) if "scorer" in args.parts else []:
            results["scorer"].append(_child(_SCORER, str(n), str(ROOT / "configs" / "criteo.yaml")))
    if "scorer" in args.parts:
        small, large = results["scorer"]
        results["scorer_ratio_1m_vs_1k"] = round(large["median_row_ms"] / small["median_row_ms"], 2)
    bench_results.write(args.out, results)
    return 0


if __name__ == "__main__":
    bench_results.run(main)
