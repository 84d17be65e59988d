"""Synthetic click logs in raw Criteo format that look like Criteo where preprocessing feels it.

``label \\t I1..I13 \\t C1..C26``, no header, tab separated, as the Kaggle
``train.txt`` and the 1TB ``day_N`` files are. What makes the real log hard to
preprocess, and what this generator reproduces:

* **long-tail values**: each categorical column draws value ranks from a
  Zipf-like law (rank ``floor(K * u**a)`` for uniform ``u``; a larger ``a`` puts
  more mass on the head), so a few values are very common and most are rare,
  which is what ``min_count`` is for;
* **vocabularies that grow with the log**: five columns (like Criteo's C3,
  C4, C12, C16, C21) have a cardinality proportional to the row count, so at
  10M rows each holds millions of distinct values; the others are bounded
  (3 to 200k values), as in the real data;
* **missing values**: 25-35 % empty in a few integer and categorical columns
  (Criteo's I1, I10, I12, C19-C22 have holes of that size), 0-5 % elsewhere;
* integers from a log-normal (counts), one of them allowed to be -1 (I2);
  categories as 8 hex digits (a bijective scramble of the rank, per column).

Deterministic for a given ``(rows, seed)``. Used by ``prepare_scale.py`` and
the training-at-scale benchmark::

    python benchmarks/criteo_like.py --rows 1000000 --out /tmp/criteo_1m.txt
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

NAMES = ["label", *(f"I{i}" for i in range(1, 14)), *(f"C{i}" for i in range(1, 27))]
# Bounded cardinalities of C1..C26 (None: grows with the log, see GROWING), shaped like Criteo's.
CARDINALITIES: tuple[int | None, ...] = (
    1_400, 550, None, None, 300, 24, 12_000, 630, 3, 90_000, 5_600, None, 3_200, 27,
    14_000, None, 10, 5_600, 2_200, 4, None, 17, 15, 80_000, 100, 60_000,
)  # fmt: skip
GROWING = 0.35  # cardinality of a growing column, as a fraction of the row count
SKEW = 2.0  # rank = floor(K * u**SKEW)
MISSING_INT = {0: 0.30, 9: 0.28, 11: 0.33}  # I1, I10, I12 (0-based); others 0-5 %
MISSING_CAT = {18: 0.25, 19: 0.30, 20: 0.32, 21: 0.35}  # C19-C22
CHUNK = 250_000
_HEX = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)


def hex8(values: np.ndarray) -> pa.Array:
    """uint32 → 8 lowercase hex digits, without a Python object per value."""
    v = values.astype(np.uint32)
    digits = np.empty((len(v), 8), dtype=np.uint8)
    for k in range(8):
        digits[:, 7 - k] = _HEX[(v >> np.uint32(4 * k)) & np.uint32(15)]
    data = pa.py_buffer(digits.tobytes())
    offsets = pa.py_buffer(np.arange(0, 8 * len(v) + 1, 8, dtype=np.int32).tobytes())
    return pa.Array.from_buffers(pa.string(), len(v), [None, offsets, data])


def cardinalities(rows: int) -> list[int]:
    return [c if c is not None else max(10, int(GROWING * rows)) for c in CARDINALITIES]


def chunk_table(rng: np.random.Generator, n: int, cards: list[int]) -> pa.Table:
    cols: list[pa.Array] = [pa.array((rng.random(n) < 0.25).astype(np.int8))]
    for i in range(13):
        v = np.floor(rng.lognormal(1.5, 1.8, n)).astype(np.int64) - (1 if i == 1 else 0)
        cols.append(pa.array(v, mask=rng.random(n) < MISSING_INT.get(i, 0.02 * (i % 3))))
    for j, card in enumerate(cards):
        rank = np.minimum((card * rng.random(n) ** SKEW).astype(np.int64), card - 1)
        scrambled = (rank.astype(np.uint64) * np.uint64(2654435761) + np.uint64(j * 40503 + 17)) & np.uint64(
            0xFFFFFFFF)
        mask = rng.random(n) < MISSING_CAT.get(j, 0.05 * (j % 2))
        cols.append(pc.if_else(pa.array(mask), pa.scalar(None, pa.string()), hex8(scrambled)))
    return pa.Table.from_arrays(cols, names=NAMES)


def write(path: Path, rows: int, seed: int = 0, start: int = 0, total: int | None = None) -> float:
    """Write ``rows`` lines to ``path`` (gzip if it ends in .gz); returns the seconds taken.

    ``start`` / ``total`` cut one log into several files (a day each, say) that
    together equal the single file of ``total`` rows: cardinalities follow
    ``total`` and the random stream is seeded per chunk.
    """
    t0 = time.perf_counter()
    cards = cardinalities(total or rows)
    opts = pacsv.WriteOptions(include_header=False, delimiter="\t", quoting_style="none")
    schema = pa.schema([pa.field("label", pa.int8())] + [pa.field(n, pa.int64()) for n in NAMES[1:14]]
                       + [pa.field(n, pa.string()) for n in NAMES[14:]])
    sink = pa.CompressedOutputStream(str(path), "gzip") if path.suffix == ".gz" else pa.OSFile(str(path), "wb")
    with sink, pacsv.CSVWriter(sink, schema=schema, write_options=opts) as writer:
        done = 0
        while done < rows:
            n = min(CHUNK, rows - done)
            rng = np.random.default_rng([seed, (start + done) // CHUNK])
            writer.write_table(chunk_table(rng, n, cards))
            done += n
    return time.perf_counter() - t0


def write_days(folder: Path, days: int, rows_per_day: int, seed: int = 0) -> list[Path]:
    """``day_0.gz`` .. ``day_{days-1}.gz``: one log cut into gzip files, as the Criteo 1TB logs come."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for d in range(days):
        p = folder / f"day_{d}.gz"
        write(p, rows_per_day, seed=seed + d, total=days * rows_per_day)
        paths.append(p)
    return paths


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    s = write(a.out, a.rows, a.seed)
    print(f"{a.rows} rows to {a.out} in {s:.1f} s")


if __name__ == "__main__":
    main()

