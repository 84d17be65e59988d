"""Which split each row goes to: train / valid / test codes 0 / 1 / 2.

* ``random``: a row's split is drawn from a hash (SplitMix64) of its source
  ordinal and the seed: deterministic, independent of chunking and of the
  number of files or threads, and it holds no per-row state;
* ``permutation``: ``numpy.random.default_rng(seed).permutation(n)`` over the
  usable rows, cut at the fractions: exactly 80/10/10, the protocol behind most
  published figures. It holds 9 bytes per row while it is drawn (the int64
  permutation and the int8 codes), so it refuses logs of more than
  :data:`MAX_PERMUTATION_ROWS` rows with one line naming the alternatives;
* ``time``: by a time column, cut at its train / valid quantiles (rows that
  share a time stay together); the quantiles come from a count per distinct
  time, computed by the engine;
* ``files``: given train / valid / test raw inputs (each a file, folder, glob or list).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from autoint.datasets.errors import DataError

# 9 bytes a row: 100M rows hold 0.9 GB while the permutation is drawn.
MAX_PERMUTATION_ROWS = 100_000_000

_GOLDEN = 0x9E3779B97F4A7C15
_MASK = (1 << 64) - 1


def hash_uniform(ids: np.ndarray, seed: int) -> np.ndarray:
    """SplitMix64 of (id, seed) → uniform floats in [0, 1); the same for a row wherever it is read."""
    z = np.asarray(ids, dtype=np.int64).astype(np.uint64) + np.uint64((int(seed) * _GOLDEN + _GOLDEN) & _MASK)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))


def random_split(ids: np.ndarray, fractions: tuple[float, float, float], seed: int) -> np.ndarray:
    """0 / 1 / 2 (train / valid / test) per row id, drawn with ``fractions``."""
    u = hash_uniform(ids, seed)
    return np.where(u < fractions[0], 0, np.where(u < fractions[0] + fractions[1], 1, 2)).astype(np.int8)


def permutation_split(n: int, fractions: tuple[float, float, float], seed: int) -> np.ndarray:
    """0 / 1 / 2 per row position: ``default_rng(seed).permutation(n)`` cut at the fractions."""
    order = np.random.default_rng(seed).permutation(n)
    train_end = int(fractions[0] * n)
    valid_end = int((fractions[0] + fractions[1]) * n)
    codes = np.zeros(n, dtype=np.int8)
    codes[order[train_end:valid_end]] = 1
    codes[order[valid_end:]] = 2
    return codes


def time_cutoffs(counts: pd.Series, fractions: tuple[float, float, float]) -> tuple[float, float]:
    """From time value → row count, the last train and last valid time (rows with one time stay together)."""
    counts = counts.sort_index()
    cum = np.cumsum(counts.to_numpy(dtype=np.float64)) / max(float(counts.sum()), 1.0)
    t = counts.index.to_numpy(dtype=np.float64)
    i1 = min(int(np.searchsorted(cum, fractions[0] - 1e-12)), len(t) - 1)
    i2 = min(int(np.searchsorted(cum, fractions[0] + fractions[1] - 1e-12)), len(t) - 1)
    return float(t[i1]), float(t[i2])


def time_split(times: np.ndarray, cutoffs: tuple[float, float]) -> np.ndarray:
    return np.where(times <= cutoffs[0], 0, np.where(times <= cutoffs[1], 1, 2)).astype(np.int8)


def check_permutation_size(n: int, limit: int | None = None) -> None:
    """Refuse a permutation split that would hold more per-row state than :data:`MAX_PERMUTATION_ROWS` rows."""
    limit = MAX_PERMUTATION_ROWS if limit is None else limit
    if n > limit:
        raise DataError(f"data.split.method 'permutation' holds 9 bytes per row and refuses {n:,} rows "
                        f"(limit {limit:,}): use 'random' (hash of each row, no per-row state), 'time' or 'files'")
