"""Synthetic CTR logs with planted feature interactions.

The project's demo data set (no download needed) and the ground truth for
testing attention-based interaction inspection: the click probability depends
on a few *named* crosses of fields, so a model that learns interactions should
find them, and an inspection tool should rank them on top.

Each row's logit is::

    logit = bias
          + Σ_categorical main_i[value_i]          (weak main effects)
          + Σ_numeric     g_j(z_j)                 (smooth main effects)
          + Σ_crosses     T_k[value_a, value_b(, value_c)]   (planted, strong)
          + Σ_num×cat     s_m[value_c] · z_j       (optional planted crosses)
          + N(0, noise²)

and ``label ~ Bernoulli(sigmoid(logit))``. What makes the crosses real
interactions rather than main effects in disguise: each table ``T_k`` is a
low-rank sum of outer products of factor vectors that are centred under the
fields' value frequencies, so every marginal of ``T_k`` is exactly zero — a
model with main effects only cannot see any of it (nor, for a triple, a model
with pairwise crosses only: each of its two-field marginals is zero too). With
``cross_mean`` > 0 the factor vectors get that mean (in units of their standard
deviation) before the product, and the table is then centred: a cross comes
with lower-order parts, as real crosses usually do ("heredity": a triple
brings crosses of each of its pairs and main effects of its fields, a pair
main effects). Low rank (``cross_rank``)
is what embedding models (FM, AutoInt) represent naturally, so the crosses are
learnable from ~100k rows with cardinalities of 5–50. Every effect is scaled so
that its standard deviation over rows is exactly the configured strength
(cross ``k`` of ``K`` gets ``cross_strength · (1 - 0.4 k / (K - 1))``, so the
planted crosses have a known order). The bias is calibrated on a fixed
calibration sample so the click rate is close to ``click_rate``.

Rows are generated in fixed blocks of :data:`BLOCK_ROWS`, each from its own
seeded stream, so the data depend on the settings and the seed only (not on
``chunk_rows``), a re-run is byte-identical, and memory stays bounded for any
number of rows.

Output, in ``out_dir``: ``synthetic.parquet`` (``label`` int8, categorical
columns ``c00, c01, …`` holding strings like ``"c03_v17"``, numeric columns
``n00, …`` float32), ``planted.json`` (the planted crosses by field name,
their strengths, every generator setting, the realised click rate and the
oracle's metrics over all rows) and ``true_logit.npy`` (float64, one value per
row in file order: ``bias`` plus every effect, without the noise term).

The oracle is the best any model can do from the columns: the true click
probability given a row's values is ``E[sigmoid(true_logit + N(0, noise²))]``,
an increasing function of ``true_logit``, so ranking by ``true_logit`` is the
highest AUC attainable in expectation, and that probability (computed by
Gauss-Hermite quadrature) the lowest expected logloss. ``true_logit.npy`` is
a side file, never a model input (it is not a column of the data file and the
readers never see it); :func:`oracle_metrics` scores it on the train / valid
/ test rows of a ``random`` or ``permutation`` split, the rows ``prepare``
puts in each split.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import math
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from autoint.config import ConfigError, is_int, underscored_int
from autoint.files import folder_lock, write_json

log = logging.getLogger(__name__)

__all__ = [
    "BLOCK_ROWS",
    "DATA_FILE",
    "PLANTED_FILE",
    "TRUE_LOGIT_FILE",
    "SyntheticConfig",
    "ensure_generated",
    "generate",
    "generator_target",
    "load_planted",
    "oracle_metrics",
    "synthetic_columns",
]

DATA_FILE = "synthetic.parquet"
PLANTED_FILE = "planted.json"
TRUE_LOGIT_FILE = "true_logit.npy"
BLOCK_ROWS = 65_536  # rows per random stream; fixed so the data never depend on chunk_rows
_CALIBRATION_ROWS = 200_000
_ORACLE_MAX_ROWS = 20_000_000  # the oracle over all rows holds ~25 bytes a row while it is scored
_PREFIX = "data.synthetic"


def _fail(name: str, msg: str) -> None:
    raise ConfigError(f"{_PREFIX}.{name}: {msg}")


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool) and math.isfinite(v)


@dataclass
class SyntheticConfig:
    """Settings of the generator (``data.synthetic`` in a run config).

    Strengths are standard deviations on the logit scale, over rows.
    """

    n_rows: int = 100_000
    n_categorical: int = 30
    n_numeric: int = 10
    cardinality: tuple[int, int] = (5, 50)  # per-field number of values, drawn uniformly in [lo, hi]
    skew: float = 0.5  # value frequencies ∝ (rank + 1)^-skew; 0 = uniform
    n_crosses: int = 4  # planted crosses between categorical fields (disjoint fields)
    cross_order: int = 2  # 2: pairs, 3: triples
    cross_rank: int = 2  # rank of each cross's effect table
    cross_mean: float = 0.0  # mean of each cross's factor vectors, in their std; > 0 adds lower-order parts
    cross_strength: float = 1.0  # std of the strongest cross
    n_numeric_crosses: int = 0  # optional planted numeric × categorical crosses
    main_strength: float = 0.3  # std of each field's main effect
    noise: float = 0.3  # std of Gaussian logit noise
    click_rate: float = 0.25  # target share of label 1
    seed: int = 2024

    def __post_init__(self) -> None:
        if isinstance(self.cardinality, list):
            self.cardinality = tuple(self.cardinality)
        for name, low in (("n_rows", 1), ("n_categorical", 0), ("n_numeric", 0), ("n_crosses", 0),
                          ("cross_rank", 1), ("n_numeric_crosses", 0), ("seed", 0)):
            v = getattr(self, name)
            if not is_int(v) or v < low:
                _fail(name, f"must be an integer >= {low}, got {v!r}")
        if self.n_categorical + self.n_numeric < 1:
            _fail("n_categorical", "there must be at least one field (n_categorical + n_numeric >= 1)")
        c = self.cardinality
        if not (isinstance(c, tuple) and len(c) == 2 and all(is_int(x) for x in c) and 2 <= c[0] <= c[1]):
            _fail("cardinality", f"must be two integers [lo, hi] with 2 <= lo <= hi, got {c!r}")
        self.cardinality = (int(c[0]), int(c[1]))
        for name in ("skew", "cross_strength", "cross_mean", "main_strength", "noise"):
            v = getattr(self, name)
            if not _is_num(v) or v < 0:
                _fail(name, f"must be a number >= 0, got {v!r}")
        if not is_int(self.cross_order) or self.cross_order not in (2, 3):  # 2.0 failed deep in the generator
            _fail("cross_order", f"must be 2 (pairs) or 3 (triples), got {self.cross_order!r}")
        if self.n_crosses * self.cross_order > self.n_categorical:
            _fail("n_crosses", f"{self.n_crosses} crosses of {self.cross_order} disjoint fields need "
                               f"n_categorical >= {self.n_crosses * self.cross_order}, got {self.n_categorical}")
        if self.n_numeric_crosses > self.n_numeric:
            _fail("n_numeric_crosses", f"must be <= n_numeric ({self.n_numeric}), got {self.n_numeric_crosses}")
        if self.n_numeric_crosses and not self.n_categorical:
            _fail("n_numeric_crosses", "numeric × categorical crosses need n_categorical >= 1")
        if not _is_num(self.click_rate) or not 0 < self.click_rate < 1:
            _fail("click_rate", f"must be strictly between 0 and 1, got {self.click_rate!r}")

    @staticmethod
    def with_ints(d: dict[str, Any]) -> dict[str, Any]:
        """``d`` with its underscored integers as integers (``n_rows: 2_000_000``, ``cardinality: [5, 1_000]``)."""
        return {k: [underscored_int(x) for x in v] if isinstance(v, list) else underscored_int(v) for k, v in d.items()}

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> SyntheticConfig:
        """Build from a mapping (``data.synthetic`` of a YAML config); unknown keys are errors."""
        if d is None:
            return cls()
        if isinstance(d, SyntheticConfig):
            return d
        if not isinstance(d, dict):
            raise ConfigError(f"{_PREFIX}: expected a mapping of settings, got {type(d).__name__}")
        known = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(d) - set(known))
        if unknown:
            raise ConfigError(f"unknown setting {_PREFIX}.{unknown[0]} (known: {', '.join(known)})")
        kwargs = cls.with_ints(d)
        for name in ("skew", "cross_strength", "cross_mean", "main_strength", "noise", "click_rate"):
            if is_int(kwargs.get(name)):
                kwargs[name] = float(kwargs[name])
        return cls(**kwargs)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["cardinality"] = list(self.cardinality)
        return d

    # Column names, fixed by the counts: zero-padded to at least two digits.
    @property
    def categorical_names(self) -> list[str]:
        w = max(2, len(str(self.n_categorical - 1)))
        return [f"c{i:0{w}d}" for i in range(self.n_categorical)]

    @property
    def numeric_names(self) -> list[str]:
        w = max(2, len(str(self.n_numeric - 1)))
        return [f"n{j:0{w}d}" for j in range(self.n_numeric)]


def synthetic_columns(settings: dict[str, Any] | SyntheticConfig | None = None) -> dict[str, Any]:
    """The ``columns`` spec with which the generic table reader reads ``synthetic.parquet``.

    The numeric fields name no transform of their own, so ``data.numeric_transform`` applies to them, and
    without it the table reader's default, ``standardize``."""
    cfg = SyntheticConfig.from_dict(settings)
    return {
        "label": "label",
        "categorical": cfg.categorical_names,
        "numeric": cfg.numeric_names,
        "multi": {},
        "drop": [],
    }


# --------------------------------------------------------------------------- the world
@dataclass
class _Cross:
    fields: tuple[int, ...]  # categorical field indices
    table: np.ndarray  # effect per joint value, shape (card_a, card_b[, card_c])
    strength: float


@dataclass
class _NumCross:
    cat: int
    num: int
    slope: np.ndarray  # per categorical value
    strength: float


@dataclass
class _World:
    """Everything drawn once from the seed: fields, effects and the planted crosses."""

    cfg: SyntheticConfig
    cards: list[int]
    cdfs: list[np.ndarray]
    probs: list[np.ndarray]
    main: list[np.ndarray]
    num_mean: np.ndarray
    num_std: np.ndarray
    num_shape: np.ndarray  # (n_numeric, 3): u1, u2, beta of g_j
    num_center: np.ndarray
    num_scale: np.ndarray
    crosses: list[_Cross]
    num_crosses: list[_NumCross]
    bias: float = 0.0
    labels: list[pa.Array] = field(default_factory=list)


def _centred_scaled(v: np.ndarray, p: np.ndarray, std: float) -> np.ndarray:
    """Centre ``v`` under weights ``p`` and scale it to weighted std ``std``."""
    v = v - p @ v
    sd = math.sqrt(float(p @ (v * v)))
    return v * (std / sd) if sd > 0 else v


def _numeric_raw(z: np.ndarray, shape: np.ndarray) -> np.ndarray:
    """Smooth effect shapes: a saturating trend plus a curvature term. z: (n, J)."""
    u1, u2, beta = shape[:, 0], shape[:, 1], shape[:, 2]
    return u1 * np.tanh(beta * z) + u2 * (z * z - 1.0) / math.sqrt(2.0)


def _check_cross_tables(cfg: SyntheticConfig, shapes: list[list[int]]) -> None:
    """A planted cross is a dense table over its fields' values, built with about three more of its size (the
    joint probabilities, a rank-one term, a temporary), in float64: refused, naming the settings, where the
    largest would not fit this machine's memory (the generator was killed, or said to lower data.chunk_size)."""
    from autoint.model import physical_memory  # torch's module; the generator runs where training will

    memory = physical_memory()
    cells = max((math.prod(shape) for shape in shapes), default=0)
    if memory is not None and 4 * 8 * cells > memory:
        _fail("cardinality", f"a planted cross over {cfg.cross_order} fields of up to {cfg.cardinality[1]:,} "
                             f"values is a table of {cells:,} cells, about {4 * 8 * cells / 1e9:.1f} GB to build, "
                             f"more than this machine's {memory / 1e9:.1f} GB; lower the cardinality's upper bound "
                             "(or data.synthetic.cross_order)")


def _build_world(cfg: SyntheticConfig) -> _World:
    rng = np.random.default_rng([cfg.seed, 0])
    lo, hi = cfg.cardinality
    cards = [int(c) for c in rng.integers(lo, hi + 1, size=cfg.n_categorical)]
    probs, cdfs, main = [], [], []
    for card in cards:
        p = (np.arange(card) + 1.0) ** -cfg.skew
        p /= p.sum()
        probs.append(p)
        cdfs.append(np.cumsum(p))
        main.append(_centred_scaled(rng.standard_normal(card), p, cfg.main_strength))

    num_mean = np.round(rng.normal(0.0, 10.0, size=cfg.n_numeric), 2)
    num_std = np.round(np.exp(rng.normal(0.0, 1.0, size=cfg.n_numeric)), 3) + 0.001
    num_shape = np.column_stack([
        rng.standard_normal(cfg.n_numeric), rng.standard_normal(cfg.n_numeric),
        rng.uniform(0.5, 2.0, cfg.n_numeric),
    ]) if cfg.n_numeric else np.zeros((0, 3))
    # Centre and scale g_j exactly under N(0, 1) with Gauss-Hermite quadrature.
    nodes, weights = np.polynomial.hermite_e.hermegauss(80)
    weights = weights / weights.sum()
    raw = _numeric_raw(nodes[:, None], num_shape)  # (80, J)
    num_center = weights @ raw
    num_sd = np.sqrt(weights @ (raw - num_center) ** 2)
    num_scale = np.where(num_sd > 0, cfg.main_strength / np.maximum(num_sd, 1e-12), 0.0)

    order = rng.permutation(cfg.n_categorical)
    k = cfg.n_crosses
    _check_cross_tables(cfg, [[cards[int(f)] for f in order[i * cfg.cross_order:(i + 1) * cfg.cross_order]]
                              for i in range(k)])
    crosses = []
    for i in range(k):
        fields = tuple(sorted(int(f) for f in order[i * cfg.cross_order:(i + 1) * cfg.cross_order]))
        strength = cfg.cross_strength * (1.0 - 0.4 * i / (k - 1)) if k > 1 else cfg.cross_strength
        table = np.zeros([cards[f] for f in fields])
        for _ in range(cfg.cross_rank):
            factors = [_centred_scaled(rng.standard_normal(cards[f]), probs[f], 1.0) + cfg.cross_mean
                       for f in fields]
            table += functools.reduce(np.multiply.outer, factors)  # rank-one term
        joint = probs[fields[0]]
        for f in fields[1:]:
            joint = np.multiply.outer(joint, probs[f])
        if cfg.cross_mean:  # the product of uncentred factors has a mean: removed, so the bias holds it
            table -= float((joint * table).sum())
        sd = math.sqrt(float((joint * table * table).sum()))
        crosses.append(_Cross(fields, table * (strength / sd) if sd > 0 else table, strength))

    num_crosses = []
    if cfg.n_numeric_crosses:
        unused = [int(f) for f in order[k * cfg.cross_order:]]
        pool = unused if len(unused) >= cfg.n_numeric_crosses else [int(f) for f in order]
        cats = rng.choice(pool, size=cfg.n_numeric_crosses, replace=len(pool) < cfg.n_numeric_crosses)
        nums = rng.choice(cfg.n_numeric, size=cfg.n_numeric_crosses, replace=False)
        for c, j in zip(cats, nums):
            c = int(c)
            slope = _centred_scaled(rng.standard_normal(cards[c]), probs[c], cfg.cross_strength)
            num_crosses.append(_NumCross(c, int(j), slope, cfg.cross_strength))

    world = _World(cfg, cards, cdfs, probs, main, num_mean, num_std, num_shape, num_center, num_scale,
                   crosses, num_crosses)
    names = cfg.categorical_names
    for i, card in enumerate(cards):
        w = max(2, len(str(card - 1)))
        world.labels.append(pa.array([f"{names[i]}_v{v:0{w}d}" for v in range(card)], type=pa.string()))
    world.bias = _calibrate_bias(world)
    return world


def _sample(world: _World, rng: np.random.Generator, n: int
            ) -> tuple[list[np.ndarray], np.ndarray, np.ndarray, np.ndarray]:
    """Draw ``n`` rows: categorical value indices, latent numeric z, logit without the bias, and that
    logit without its noise term."""
    cfg = world.cfg
    idx = [np.minimum(np.searchsorted(cdf, rng.random(n), side="right"), len(cdf) - 1).astype(np.int32)
           for cdf in world.cdfs]
    z = rng.standard_normal((n, cfg.n_numeric))
    # The noisy logit is summed in the same order as it always was (noise first), so the labels drawn
    # from it stay bit for bit what they were; the clean one adds the same terms beside it.
    logit = rng.standard_normal(n) * cfg.noise
    clean = np.zeros(n)
    effects = [eff[idx[i]] for i, eff in enumerate(world.main)]
    if cfg.n_numeric:
        effects.append(((_numeric_raw(z, world.num_shape) - world.num_center) * world.num_scale).sum(axis=1))
    effects += [cr.table[tuple(idx[f] for f in cr.fields)] for cr in world.crosses]
    effects += [nc.slope[idx[nc.cat]] * z[:, nc.num] for nc in world.num_crosses]
    for effect in effects:
        logit += effect
        clean += effect
    return idx, z, logit, clean


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))  # overflow-free


def _calibrate_bias(world: _World) -> float:
    """Bias b with mean(sigmoid(b + logit)) = click_rate on a fixed calibration sample."""
    _, _, logit, _ = _sample(world, np.random.default_rng([world.cfg.seed, 1]), _CALIBRATION_ROWS)
    lo, hi = -50.0, 50.0
    for _ in range(100):  # bisection: the mean is increasing in b
        mid = 0.5 * (lo + hi)
        if _sigmoid(mid + logit).mean() < world.cfg.click_rate:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


# --------------------------------------------------------------------------- writing
def _arrow_schema(cfg: SyntheticConfig) -> pa.Schema:
    return pa.schema(
        [pa.field("label", pa.int8(), nullable=False)]
        + [pa.field(n, pa.string(), nullable=False) for n in cfg.categorical_names]
        + [pa.field(n, pa.float32(), nullable=False) for n in cfg.numeric_names]
    )


def _block(world: _World, b: int, n: int) -> tuple[pa.Table, int, np.ndarray]:
    """Block ``b``: its rows, its clicks and its true logits (bias included, noise left out)."""
    cfg = world.cfg
    rng = np.random.default_rng([cfg.seed, 2, b])
    idx, z, logit, clean = _sample(world, rng, n)
    label = (rng.random(n) < _sigmoid(world.bias + logit)).astype(np.int8)
    columns: list[pa.Array] = [pa.array(label, type=pa.int8())]
    for i, ix in enumerate(idx):
        columns.append(pa.DictionaryArray.from_arrays(pa.array(ix), world.labels[i]).dictionary_decode())
    values = np.round(world.num_mean + world.num_std * z, 4).astype(np.float32)
    columns.extend(pa.array(values[:, j]) for j in range(cfg.n_numeric))
    return pa.Table.from_arrays(columns, schema=_arrow_schema(cfg)), int(label.sum()), world.bias + clean


def generate(cfg: SyntheticConfig | dict[str, Any] | None, out_dir: str | Path, chunk_rows: int = 262_144,
             split: Any = None) -> Path:
    """Write ``out_dir/synthetic.parquet``, ``out_dir/true_logit.npy`` and ``out_dir/planted.json``;
    return the Parquet path.

    ``chunk_rows`` bounds memory (rows held before a write; rounded up to whole
    blocks of :data:`BLOCK_ROWS`) and sets the Parquet row-group size; it does
    not change the data. ``split`` (a ``data.split``, as :func:`oracle_metrics`
    takes it): the oracle's metrics on each split's rows go into
    ``planted.json`` beside those over all rows, so every model trained on it
    can say how much of the learnable signal it captured.
    """
    cfg = SyntheticConfig.from_dict(cfg) if not isinstance(cfg, SyntheticConfig) else cfg
    if not is_int(chunk_rows) or chunk_rows < 1:
        raise ValueError(f"chunk_rows must be a positive integer, got {chunk_rows!r}")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    world = _build_world(cfg)

    # Written whole into a folder of this call's own, then moved into place, the log last: a run killed midway
    # leaves no log (so it is generated again), never a log without the planted.json that vouches for it, and two
    # runs generating one log at once do not write into each other's files.
    path = out_dir / DATA_FILE
    stage = Path(tempfile.mkdtemp(prefix=".generating-", dir=out_dir))
    try:
        data, logit_path = stage / DATA_FILE, stage / TRUE_LOGIT_FILE
        blocks_per_write = max(1, -(-chunk_rows // BLOCK_ROWS))
        n_blocks = -(-cfg.n_rows // BLOCK_ROWS)
        clicks = 0
        true_logit = np.lib.format.open_memmap(logit_path, mode="w+", dtype=np.float64, shape=(cfg.n_rows,))
        with pq.ParquetWriter(data, _arrow_schema(cfg), compression="zstd") as writer:
            for first in range(0, n_blocks, blocks_per_write):
                parts = []
                for b in range(first, min(first + blocks_per_write, n_blocks)):
                    start = b * BLOCK_ROWS
                    table, c, logits = _block(world, b, min(BLOCK_ROWS, cfg.n_rows - start))
                    parts.append(table)
                    true_logit[start:start + len(logits)] = logits
                    clicks += c
                chunk = pa.concat_tables(parts)
                writer.write_table(chunk, row_group_size=chunk.num_rows)
        true_logit.flush()
        del true_logit

        planted = _planted(world, clicks / cfg.n_rows)
        overall = None
        if cfg.n_rows <= _ORACLE_MAX_ROWS:
            labels = pq.read_table(data, columns=["label"]).column("label").to_numpy()
            overall = _scores(labels, np.load(logit_path), cfg.noise)
        planted["oracle"] = {
            "true_logit_file": TRUE_LOGIT_FILE,
            "all": overall,
            "note": ("auc: of the noise-free logit; logloss: of E[sigmoid(true_logit + noise)]; "
                     f"not computed beyond {_ORACLE_MAX_ROWS:,} rows (memory)"),
        }
        write_json(stage / PLANTED_FILE, planted)  # (oracle_metrics reads the noise from it)
        if split is not None and overall is not None:
            get = split.get if isinstance(split, dict) else lambda k: getattr(split, k)
            if get("method") in ("random", "permutation"):
                planted["oracle"]["split"] = {k: get(k) for k in ("method", "fractions", "seed")}
                planted["oracle"]["split"]["fractions"] = list(planted["oracle"]["split"]["fractions"])
                planted["oracle"].update(oracle_metrics(stage, split))
                write_json(stage / PLANTED_FILE, planted)
        path.unlink(missing_ok=True)  # from here a kill leaves no log: generated again, not an old one trusted
        for name in (TRUE_LOGIT_FILE, PLANTED_FILE, DATA_FILE):
            os.replace(stage / name, out_dir / name)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return path


def _planted(world: _World, realised_rate: float) -> dict[str, Any]:
    cfg = world.cfg
    cat, num = cfg.categorical_names, cfg.numeric_names
    crosses: list[dict[str, Any]] = [
        {"fields": [cat[f] for f in cr.fields], "kind": "categorical", "order": len(cr.fields),
         "rank": cfg.cross_rank, "strength": round(cr.strength, 6)}
        for cr in world.crosses
    ]
    crosses += [
        {"fields": [cat[nc.cat], num[nc.num]], "kind": "numeric x categorical", "order": 2,
         "rank": 1, "strength": round(nc.strength, 6)}
        for nc in world.num_crosses
    ]
    return {
        "generator": "autoint.datasets.synthetic",
        "version": 1,
        "data_file": DATA_FILE,
        "label": "label",
        "n_rows": cfg.n_rows,
        "click_rate": round(realised_rate, 6),
        "bias": round(world.bias, 6),
        "logit": ("bias + sum of categorical main effects + sum of smooth numeric effects "
                  "+ planted crosses + N(0, noise^2); strengths are logit standard deviations"),
        "crosses": crosses,
        "fields": {
            "categorical": {cat[i]: {"cardinality": c} for i, c in enumerate(world.cards)},
            "numeric": {num[j]: {"mean": float(world.num_mean[j]), "std": round(float(world.num_std[j]), 6)}
                        for j in range(cfg.n_numeric)},
        },
        "settings": cfg.to_dict(),
    }


# --------------------------------------------------------------------------- the oracle
def _bayes_probability(true_logit: np.ndarray, noise: float) -> np.ndarray:
    """P(click | the row's values) = E[sigmoid(true_logit + N(0, noise²))], by Gauss-Hermite quadrature."""
    if noise == 0:
        return _sigmoid(true_logit)
    nodes, weights = np.polynomial.hermite_e.hermegauss(40)
    weights = weights / weights.sum()
    p = np.zeros(len(true_logit))
    for x, w in zip(nodes, weights):
        p += w * _sigmoid(true_logit + noise * x)
    return p


def _scores(labels: np.ndarray, true_logit: np.ndarray, noise: float) -> dict[str, Any]:
    from sklearn.metrics import log_loss, roc_auc_score

    both = 0 < labels.sum() < len(labels)
    p = np.clip(_bayes_probability(true_logit, noise), 1e-15, 1 - 1e-15)
    return {"rows": len(labels),
            "auc": round(float(roc_auc_score(labels, true_logit)), 6) if both else None,
            "logloss": round(float(log_loss(labels, p, labels=[0, 1])), 6) if len(labels) else None}


def oracle_metrics(folder: str | Path, split: Any = None) -> dict[str, dict[str, Any]]:
    """The oracle's AUC and logloss (see the module docstring) on the rows of a generated folder.

    With no ``split``: ``{"all": {...}}``. With a ``data.split`` (a
    :class:`~autoint.config.SplitConfig` or a mapping with ``method``,
    ``fractions``, ``seed``) of method ``random`` or ``permutation``: one entry
    per split, over the rows ``prepare`` puts there (the generator writes no
    bad rows, so row ordinals are file positions). Each entry: ``rows``,
    ``auc`` (of the noise-free logit) and ``logloss`` (of the true click
    probability).
    """
    from autoint.splits import permutation_split, random_split

    folder = Path(folder)
    if folder.suffix == ".parquet":
        folder = folder.parent
    logit_path = folder / TRUE_LOGIT_FILE
    if not logit_path.is_file():
        raise FileNotFoundError(f"{logit_path}: no true logits here (a folder generated before they were "
                                "written); generate the data again")
    settings = json.loads((folder / PLANTED_FILE).read_text())["settings"]
    true_logit = np.load(logit_path, mmap_mode="r")
    labels = pq.read_table(folder / DATA_FILE, columns=["label"]).column("label").to_numpy()
    if len(labels) != len(true_logit):
        raise ValueError(f"{folder}: {len(labels)} rows in {DATA_FILE} but {len(true_logit)} true logits")
    noise = float(settings["noise"])
    if split is None:
        return {"all": _scores(labels, np.asarray(true_logit), noise)}
    get = split.get if isinstance(split, dict) else lambda k: getattr(split, k)
    method, fractions, seed = get("method"), tuple(get("fractions")), int(get("seed"))
    if method == "random":
        codes = random_split(np.arange(len(labels)), fractions, seed)
    elif method == "permutation":
        codes = permutation_split(len(labels), fractions, seed)
    else:
        raise ValueError(f"oracle per split: data.split.method {method!r} is not supported "
                         "(only 'random' and 'permutation' split the generated rows by their position)")
    return {name: _scores(labels[codes == code], np.asarray(true_logit[codes == code]), noise)
            for code, name in enumerate(("train", "valid", "test"))}


def generator_target(raw: str | Path | None) -> Path:
    """The file a synthetic log is read from for ``data.raw`` / ``--raw``: ``FOLDER/synthetic.parquet`` for a folder
    (or a name without a suffix; default ``data/synthetic``), the file named otherwise."""
    path = Path(raw or "data/synthetic").expanduser()
    return path / DATA_FILE if path.is_dir() or not path.suffix else path


def ensure_generated(settings: dict[str, Any] | None, raw: str | Path | None, split: Any = None) -> Path:
    """The synthetic log of ``settings`` (``data.synthetic``) at :func:`generator_target` of ``raw``: generated
    where it is missing, and again where its ``planted.json`` records other settings (they were ignored once
    the file was there, while the run's records showed the new ones). A file of another name, or one without
    ``planted.json`` beside it, is not the generator's: read as it is."""
    path = generator_target(raw)
    if path.name != DATA_FILE:
        return path
    wanted = SyntheticConfig.from_dict(settings or {})
    path.parent.mkdir(parents=True, exist_ok=True)
    # One command at a time looks and generates: two runs started at once in a fresh checkout each generated the
    # log, and the later file (another mtime) made the folder the first had prepared from it look stale to both.
    with folder_lock(path.parent, waiting=f"{path.parent}: another command is generating the synthetic log; waiting "
                                          "for it to end"):
        return _ensure_generated(path, wanted, split)


def _ensure_generated(path: Path, wanted: SyntheticConfig, split: Any) -> Path:
    if path.is_file():
        planted = path.with_name(PLANTED_FILE)
        if not planted.is_file():
            log.warning("%s has no %s beside it, so it is not taken for the generator's: read as it is, whatever "
                        "data.synthetic says (remove it to generate the log of data.synthetic)", path, PLANTED_FILE)
            return path
        try:
            had = json.loads(planted.read_text(encoding="utf-8")).get("settings")
        except (OSError, ValueError, AttributeError):
            had = None
        now = json.loads(json.dumps(wanted.to_dict()))
        if had == now:
            return path
        changed = sorted(k for k in now if not isinstance(had, dict) or had.get(k) != now[k])
        log.warning("%s was generated with other data.synthetic settings (%s): generating it again", path,
                    ", ".join(f"{k}={now[k]!r}" for k in changed[:5]) or "unreadable planted.json")
    generate(wanted, path.parent, split=split)
    return path


def load_planted(path: str | Path) -> list[tuple[str, ...]]:
    """The planted crosses, as field-name tuples, from ``planted.json`` (or the folder holding it)."""
    path = Path(path)
    if path.is_dir():
        path = path / PLANTED_FILE
    elif path.suffix == ".parquet":
        path = path.with_name(PLANTED_FILE)
    if not path.is_file():
        raise FileNotFoundError(f"planted-interactions file not found: {path}")
    try:
        doc = json.loads(path.read_text())
        return [tuple(str(f) for f in c["fields"]) for c in doc["crosses"]]
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        raise ValueError(f"{path}: not a valid planted.json ({type(e).__name__}: {e})") from None
