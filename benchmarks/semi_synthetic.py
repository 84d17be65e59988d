"""Semi-synthetic click logs: real feature columns, labels drawn from a model with crosses planted between named
real fields.

The fully synthetic generator (:mod:`autoint.datasets.synthetic`) controls
everything, including the shapes of the data. This module keeps a real,
already *prepared* (encoded) folder — MovieLens 100K, the Criteo head, any
processed folder — with its real marginals, cardinalities, OOV and missing ids
and its dependences between fields, and replaces only the ``label`` column of
each split with labels drawn from::

    logit = bias
          + Σ_categorical main_i[id_i]            (std main_strength each)
          + Σ_numeric     main_strength · s_j · z_j   (s_j = ±1, z_j standardised on train)
          + Σ_crosses     T_k[id_a, id_b]         (planted, std strength_k each)
    label ~ Bernoulli(sigmoid(logit + N(0, noise²)))

Multi-valued fields (MovieLens ``genres``) get no effect: a list has no single
id to index an effect table with, and leaving them out keeps every effect a
function of one or two named fields.

The planted crosses follow the synthetic generator: cross ``k`` of ``K`` gets
strength ``strength · (1 - 0.4 k / (K - 1))``; each table starts as a rank-
``rank`` sum of outer products of random factor vectors, each centred under
its field's *empirical* id frequencies on the train split. Real fields are not
independent (older users rate older films), so those factors alone would leave
a small main effect; the table is therefore also made orthogonal to the two
fields' main effects under the *joint* train frequencies (the weighted
two-way additive fit ``α_a + β_b`` is subtracted, by backfitting), so the mean
planted effect over the train rows holding any one id of either field is zero
and a main-effects model of the two fields sees nothing. ``additive_share`` in
``planted.json`` says how much of the raw low-rank table that took away (near
0 for near-independent fields). Each effect is then scaled so that its std over
the train rows is its strength, and the bias is calibrated on the train rows so
the click rate is ``click_rate``.

Which pairs may be planted, when ``crosses`` is a number ``K`` (chosen with
the seed, a pair's table drawn from the seed and the pair alone): pairs of
categorical fields with at least two ids seen on train, *except*

* pairs whose joint value is a function of one field on train (one field of
  the pair determines the other, or a third field determines both). On
  MovieLens, ``user_id`` determines gender, age, occupation and zip code and
  ``movie_id`` the release year, so a cross of two user attributes is a main
  effect of ``user_id`` in disguise, visible to a main-effects model. Only
  user-side × item-side pairs are left there, which allows at most **two**
  disjoint crosses on MovieLens (its item side has two categorical fields;
  seven categorical fields would allow three at most anyway): a larger ``K``
  is an error naming the pairs that were eligible. Such a pair can still be
  named (it is flagged ``determined_by`` in ``planted.json``); measured, the
  attention does rank a named ``gender × occupation`` first (design seeds 1, 2);
* pairs with a field that has an *alias*: another field such that each of the
  two explains at least ``MIN_ALIAS_SHARE`` (80 %) of the other's entropy on
  train (I(a; c) / H(a) both ways). A cross of a field with an alias is, on
  these rows, nearly the same cross of its alias, and no detector (the model's
  or the no-model score test) can tell the two apart: on the Criteo head,
  design seed 3, ArchDetect ranked ``C8 × C16`` above the planted ``C8 × C21``
  (C16 explains 99.4 % of C21's entropy, C21 91.7 % of C16's). The Criteo head
  has 9 such fields in 3 groups (C3, C4, C12, C16, C21; C11, C13; C2, C18),
  MovieLens two (``user_id`` and ``zip_code``: 96.6 % and 100 %), so a drawn
  MovieLens cross is never ``user_id × movie_id``. (The rule was chosen on
  the Criteo head's design seeds. On MovieLens it re-drew every seed's
  crosses; before it, 4 of the 5 evaluation seeds that planted a pair with
  ``user_id`` or ``zip_code`` had it ranked 1st–2nd, and the fifth, seed 109's
  ``user_id × movie_id``, was the one miss: the rule made MovieLens' draws
  easier, README.) A named pair may use them; ``planted.json`` lists the
  aliases;
* pairs whose random table keeps less than ``1 - MAX_ADDITIVE_SHARE`` of its
  variance once the two main effects are taken out: fields that are nearly
  dependent on the train rows (on the Criteo head, hashed fields sharing one
  missing / OOV pattern, e.g. ``C19 × C21``: 80 % additive), where what is left
  lives on a few rare cells.

High-cardinality fields (``movie_id``: 1,606 ids; Criteo's hashed fields
keep at most ~180 ids after ``min_count: 10``) are eligible unless they have
an alias (``user_id``: 943 ids, and ``zip_code``: 795, are each other's): the
strongest planted cross came out first with them as with small fields
(``user_id × movie_id``, ``movie_id × occupation``, before the alias rule),
and excluding ``movie_id`` too would leave MovieLens a single eligible pair.
A list of named pairs is planted as given (validated: categorical
fields of the schema, disjoint, at least two ids on train, neither a function
of the other, something left beyond the main effects).

What the learnability check measured before the alias rule (``--check``: the small AutoInt of
``benchmarks/interaction_recovery.py``, 1 layer, 2 heads, D = 16, 10 epochs;
design seeds 1–5, strength 2.5; ranks by the ``score`` column):

* MovieLens 100K, 2 crosses (36 field pairs): test AUC 0.65–0.84 against an
  oracle of 0.89–0.92; the strong cross (2.5) ranked 1st in 5 of 5 seeds, the
  weak one (1.5) 2nd, 29th, 11th, 23rd, 10th. About 25 s a seed on one thread.
* Criteo head (8,000 train rows, 741 field pairs), 4 crosses, as the shipped
  config prepares it: test AUC 0.62–0.68 against an oracle of 0.92–0.97; the
  best planted pair ranked 57th, 431st, 385th (seeds 1–3; the top pairs
  nearly all involve ``I5``), and 40 epochs, strength 4 or four named
  low-cardinality pairs did no better (best: 32nd). The
  shipped ``numeric_transform: criteo`` leaves values up to ~200 (``I5``: mean
  57) that scale their embeddings; prepared with
  ``--set data.numeric_transform=standardize`` instead, test AUC 0.76–0.78 and
  the strongest cross ranked 1st, 4th, 1st (seeds 1–3), the others beyond the
  top 30: 8,000 rows are enough for one strong cross, not four.

Resampling (``resample = R``, ``--resample R``): each split's rows drawn
with replacement to R times its size, each drawn row labelled anew. The label
model is still drawn from the real train rows, and the drawn rows keep their
real marginals, cardinalities and dependences; what grows is the number of
labels per real row, as if the log were R times longer with the same rows.
The Criteo head has 8,000 train rows, far fewer than the logs it stands for.

Output: ``out/`` is a copy of the processed folder (schema, encoder,
vocabulary, example, everything), so a model, ``autoint train --data out``,
checkpoints and :func:`autoint.inspection.inspect_model` work on it unchanged;
each split's Parquet file has its ``label`` column replaced (same dtype, same
rows, same row groups; when resampled, the drawn rows in row groups of the
source's first group's size), ``prepare.json`` has its row and positive counts
updated (``rows_seen`` and ``rows_per_file`` stay those of the raw input), and
beside them are ``planted.json`` (read by
:func:`autoint.datasets.synthetic.load_planted`: the crosses by field name with
their strengths, every setting, the bias, the realised click rates and the
oracle) and ``true_logit_<split>.npy`` (float64, the noise-free logit of each
row in file order). The oracle of a split is the AUC of that noise-free logit
(the best ranking any model of the columns can reach) and the logloss of the
true click probability ``E[sigmoid(logit + noise)]``. Re-runs with the same
arguments are byte-identical.

    python benchmarks/semi_synthetic.py --dataset movielens --out outputs/semi --seed 1 [--check]

prepares the shared real data (``AUTOINT_DATA_DIR`` or ``--data-dir``) into
``OUT/processed`` with the project's config, plants labels into
``OUT/seed<N>`` and prints the planted pairs and oracle AUCs; ``--check`` also
trains a small AutoInt there (as ``benchmarks/interaction_recovery.py`` does)
and prints its test AUC and the ranks of the planted pairs by attention score.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from autoint.datasets.synthetic import PLANTED_FILE, _centred_scaled, _scores, _sigmoid
from autoint.schema import CATEGORICAL, MULTI, Schema

sys.path.insert(0, str(Path(__file__).resolve().parent))
from quality import CRITEO_PAPER_TRANSFORM  # a sibling script

ROOT = Path(__file__).resolve().parent.parent
SPLITS = ("train", "valid", "test")
DATASETS = {
    # name: (config, raw path under the shared data folder, default number of crosses)
    "movielens": ("configs/movielens.yaml", "movielens_100k", 2),
    "criteo": ("configs/criteo.yaml", "criteo_kaggle_head10k/train.txt", 4),
}
# Settings that hold a data set as the recovery cases were measured on it, before a case's own overrides.
PINNED = {"criteo": CRITEO_PAPER_TRANSFORM}
TRUE_LOGIT_FILE = "true_logit_{split}.npy"
_BACKFIT_TOL = 1e-12  # largest change of a fitted main effect, relative to the table's std, at convergence
_BACKFIT_MAX_ITER = 100_000
MAX_ADDITIVE_SHARE = 0.5  # a chosen pair's random table keeps at least half its variance as interaction
MIN_ALIAS_SHARE = 0.8  # two fields each of which explains >= 80 % of the other's entropy on train are aliases
_SEARCH_STEPS = 200_000  # pairs the search for K disjoint usable pairs looks at, at most


# --------------------------------------------------------------------------- the label model
@dataclass
class _Cross:
    fields: tuple[str, str]
    strength: float
    u: np.ndarray  # (vocab_a, rank) factors of field a
    v: np.ndarray  # (vocab_b, rank) factors of field b
    alpha: np.ndarray  # (vocab_a,) additive part removed, per id of a
    beta: np.ndarray  # (vocab_b,) additive part removed, per id of b
    scale: float
    additive_share: float
    determined_by: list[str]
    aliases: dict[str, list[str]]  # field of the pair → its aliases (only a named cross can have any)

    def effect(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        raw = np.einsum("nr,nr->n", self.u[a], self.v[b])
        return (raw - self.alpha[a] - self.beta[b]) * self.scale


@dataclass
class LabelModel:
    """Every effect of the logit, drawn once from the seed and the train split of a processed folder."""

    schema: Schema
    main: dict[str, np.ndarray]  # categorical field -> effect per id
    numeric: dict[str, tuple[float, float, float]]  # numeric field -> (train mean, train std, coefficient)
    crosses: list[_Cross]
    bias: float = 0.0

    def effects(self, table: pa.Table) -> dict[str, np.ndarray]:
        """Each effect on the rows of ``table`` (a split): ``main:<field>`` and ``cross:<a>×<b>``, bias left out."""
        ids = categorical_ids(self.schema, table)
        out = {f"main:{name}": eff[ids[name]] for name, eff in self.main.items()}
        for name, (mean, std, coef) in self.numeric.items():
            x = table.column(name).to_numpy(zero_copy_only=False).astype(np.float64)
            z = np.nan_to_num((x - mean) / std if std > 0 else np.zeros_like(x))
            out[f"main:{name}"] = coef * z
        for cr in self.crosses:
            out[f"cross:{cr.fields[0]}×{cr.fields[1]}"] = cr.effect(ids[cr.fields[0]], ids[cr.fields[1]])
        return out

    def logit(self, table: pa.Table) -> np.ndarray:
        """The noise-free logit of each row, bias included (summed in a fixed order)."""
        total = np.full(table.num_rows, self.bias)
        for eff in self.effects(table).values():
            total += eff
        return total


def categorical_ids(schema: Schema, table: pa.Table) -> dict[str, np.ndarray]:
    """Each categorical field's encoded ids in ``table``, as int64 (field name → (n,))."""
    return {f.name: table.column(f.name).to_numpy(zero_copy_only=False).astype(np.int64) for f in schema.categorical}


def _joint(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """One id per (x, y) pair of ids, row by row."""
    return x * (int(y.max(initial=0)) + 1) + y


def _determines(ids: dict[str, np.ndarray]) -> set[tuple[str, str]]:
    """Every (c, a) such that each id of field ``c`` comes with a single id of field ``a`` on these rows."""
    distinct = {name: len(np.unique(x)) for name, x in ids.items()}
    return {(c, a) for c, a in itertools.permutations(ids, 2) if len(np.unique(_joint(ids[c], ids[a]))) == distinct[c]}


def _additive_fit(t: np.ndarray, a: np.ndarray, b: np.ndarray, size_a: int, size_b: int
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Weighted least-squares fit ``t ≈ α[a] + β[b]`` over the rows, by backfitting (alternating means)."""
    count_a = np.maximum(np.bincount(a, minlength=size_a), 1)
    count_b = np.maximum(np.bincount(b, minlength=size_b), 1)
    alpha, beta = np.zeros(size_a), np.zeros(size_b)
    tol = _BACKFIT_TOL * max(float(np.std(t)), 1e-300)
    for _ in range(_BACKFIT_MAX_ITER):
        alpha = np.bincount(a, t - beta[b], size_a) / count_a
        new = np.bincount(b, t - alpha[a], size_b) / count_b
        done = float(np.max(np.abs(new - beta))) < tol
        beta = new
        if done:
            break
    # The same α for b's mean being zero, then a's: the last α step makes every per-id mean of a exact.
    alpha = np.bincount(a, t - beta[b], size_a) / count_a
    return alpha, beta


@dataclass
class _Table:
    """A pair's random low-rank table with its additive part (under the joint train frequencies) fitted."""

    u: np.ndarray  # (vocab_a, rank)
    v: np.ndarray  # (vocab_b, rank)
    alpha: np.ndarray
    beta: np.ndarray
    raw_var: float  # of the low-rank table over the train rows
    res_var: float  # of what is left once alpha and beta are taken out

    @property
    def additive_share(self) -> float:
        return 1.0 - self.res_var / self.raw_var if self.raw_var > 0 else 1.0


class _Tables:
    """Each pair's table, drawn on first use from the seed and the pair (not its place among the crosses)."""

    def __init__(self, schema: Schema, train_ids: dict[str, np.ndarray], freq: dict[str, np.ndarray], rank: int,
                 seed: int) -> None:
        self.index = {name: i for i, name in enumerate(schema.names)}
        self.train_ids, self.freq, self.rank, self.seed = train_ids, freq, rank, seed
        self._cache: dict[tuple[str, str], _Table] = {}

    def get(self, a: str, b: str) -> _Table:
        if (a, b) not in self._cache:
            first, second = sorted((a, b), key=self.index.get)
            rng = np.random.default_rng([self.seed, 2, self.index[first], self.index[second]])
            factors = {name: np.column_stack([_centred_scaled(rng.standard_normal(len(self.freq[name])),
                                                              self.freq[name], 1.0) for _ in range(self.rank)])
                       for name in (first, second)}
            u, v = factors[a], factors[b]
            ia, ib = self.train_ids[a], self.train_ids[b]
            raw = np.einsum("nr,nr->n", u[ia], v[ib])
            alpha, beta = _additive_fit(raw, ia, ib, len(u), len(v))
            resid = raw - alpha[ia] - beta[ib]
            self._cache[(a, b)] = _Table(u, v, alpha, beta, float(np.mean(raw * raw)), float(np.mean(resid * resid)))
        return self._cache[(a, b)]


def _entropy(ids: np.ndarray) -> float:
    p = np.unique(ids, return_counts=True)[1] / len(ids)
    return float(-(p * np.log(p)).sum())


def alias_pairs(ids: dict[str, np.ndarray]) -> list[tuple[str, str, float, float]]:
    """Every pair of fields (a, c) that are aliases on these rows, with I(a; c) / H(a) and I(a; c) / H(c):
    each of the two explains at least ``MIN_ALIAS_SHARE`` of the other's entropy."""
    h = {name: _entropy(x) for name, x in ids.items()}
    out = []
    for a, c in itertools.combinations(ids, 2):
        if h[a] <= 0 or h[c] <= 0:
            continue
        mutual = h[a] + h[c] - _entropy(_joint(ids[a], ids[c]))
        if mutual >= MIN_ALIAS_SHARE * h[a] and mutual >= MIN_ALIAS_SHARE * h[c]:
            out.append((a, c, mutual / h[a], mutual / h[c]))
    return out


def _aliases(ids: dict[str, np.ndarray]) -> dict[str, list[str]]:
    """Field → the other fields it is an alias of on these rows (:func:`alias_pairs`)."""
    out: dict[str, list[str]] = {name: [] for name in ids}
    for a, c, _, _ in alias_pairs(ids):
        out[a].append(c)
        out[c].append(a)
    return out


def _pair_matching(candidates: list[tuple[str, str]], k: int, usable: Callable[[str, str], bool]
                   ) -> tuple[list[tuple[str, str]] | None, int]:
    """The first ``k`` disjoint usable pairs of ``candidates`` in their order (depth-first search), or None;
    and the most disjoint usable pairs the search saw together."""
    chosen: list[tuple[str, str]] = []
    best, steps = 0, 0

    def search(start: int, used: frozenset[str]) -> bool:
        nonlocal best, steps
        best = max(best, len(chosen))
        if len(chosen) == k:
            return True
        for i in range(start, len(candidates)):
            a, b = candidates[i]
            steps += 1
            if a in used or b in used or steps > _SEARCH_STEPS or not usable(a, b):
                continue
            chosen.append((a, b))
            if search(i + 1, used | {a, b}):
                return True
            chosen.pop()
        return False

    return (chosen if search(0, frozenset()) else None), best


def _choose_crosses(crosses: Sequence[Sequence[str]] | int, schema: Schema, train_ids: dict[str, np.ndarray],
                    det: set[tuple[str, str]], aliases: dict[str, list[str]], tables: _Tables,
                    rng: np.random.Generator) -> list[tuple[str, str]]:
    kinds = {f.name: f.kind for f in schema.fields}
    cats = [f.name for f in schema.categorical]
    seen = {name: len(np.unique(train_ids[name])) for name in cats}
    if isinstance(crosses, (int, np.integer)) and not isinstance(crosses, bool):
        if crosses < 0:
            raise ValueError(f"crosses must be >= 0 or a list of field-name pairs, got {crosses}")
        fields = [n for n in cats if seen[n] >= 2 and not aliases[n]]
        eligible = [(a, b) for a, b in itertools.combinations(fields, 2)
                    if not any((c == a or (c, a) in det) and (c == b or (c, b) in det) for c in cats)]
        order = rng.permutation(len(eligible))
        chosen, best = _pair_matching([eligible[i] for i in order], int(crosses),
                                      lambda a, b: tables.get(a, b).additive_share <= MAX_ADDITIVE_SHARE)
        if chosen is None:
            raise ValueError(
                f"crosses={crosses}: found at most {best} disjoint crosses of categorical fields with >= 2 ids on "
                f"train and no alias whose joint value is not a function of one field and whose table keeps at least "
                f"{1 - MAX_ADDITIVE_SHARE:.0%} of its variance beyond the two main effects (pairs of that kind: "
                f"{', '.join(f'{a}×{b}' for a, b in eligible) or 'none'}); ask for fewer or name the pairs")
        return chosen
    if isinstance(crosses, str):
        raise ValueError(f"crosses must be a number or a list of field-name pairs, got the string {crosses!r}")
    out: list[tuple[str, str]] = []
    used: set[str] = set()
    for pair in crosses:
        if isinstance(pair, str) or len(pair) != 2:
            raise ValueError(f"each planted cross must be a pair of field names, got {pair!r}")
        for name in pair:
            if name not in kinds:
                raise ValueError(f"cross {tuple(pair)}: no field named {name!r} in the schema "
                                 f"(categorical fields: {', '.join(cats)})")
            if kinds[name] != CATEGORICAL:
                raise ValueError(f"cross {tuple(pair)}: field {name!r} is {kinds[name]}, only categorical fields "
                                 f"can be crossed (categorical fields: {', '.join(cats)})")
            if name in used:
                raise ValueError(f"cross {tuple(pair)}: field {name!r} is already in another planted cross; "
                                 "the crosses must use disjoint fields")
            if seen[name] < 2:
                raise ValueError(f"cross {tuple(pair)}: field {name!r} has {seen[name]} id on train, a cross needs "
                                 "at least 2")
        a, b = str(pair[0]), str(pair[1])
        if a == b:
            raise ValueError(f"cross {tuple(pair)}: field {a!r} crossed with itself")
        for x, y in ((a, b), (b, a)):
            if (x, y) in det:
                raise ValueError(f"cross {tuple(pair)}: field {y!r} is a function of {x!r} on train, so any table "
                                 f"over them is a main effect of {x!r}; choose another pair")
        if not tables.get(a, b).res_var > 1e-12 * tables.get(a, b).raw_var:
            raise ValueError(f"cross {tuple(pair)}: nothing is left of it once the main effects of {a!r} and {b!r} "
                             "are taken out on train (its train cells form no loop); choose another pair")
        used |= {a, b}
        out.append((a, b))
    return out


def build_label_model(schema: Schema, train: pa.Table, crosses: Sequence[Sequence[str]] | int = 4,
                      strength: float = 2.5, main_strength: float = 0.3, rank: int = 2, seed: int = 0) -> LabelModel:
    """Draw every effect (the bias is left at 0; :func:`plant_labels` calibrates it)."""
    cats = [f.name for f in schema.categorical]
    train_ids = categorical_ids(schema, train)
    n = train.num_rows
    freq = {name: np.bincount(train_ids[name], minlength=f.vocab_size) / n
            for name, f in zip(cats, schema.categorical)}

    rng = np.random.default_rng([seed, 0])
    main = {name: _centred_scaled(rng.standard_normal(len(freq[name])), freq[name], main_strength)
            for name in cats}
    numeric = {}
    for f in schema.numeric:
        x = train.column(f.name).to_numpy(zero_copy_only=False).astype(np.float64)
        mean, std = float(np.nanmean(x)), float(np.nanstd(x))
        numeric[f.name] = (mean, std, main_strength * float(rng.choice([-1.0, 1.0])))

    det = _determines(train_ids)
    aliases = _aliases(train_ids)
    tables = _Tables(schema, train_ids, freq, rank, seed)
    pairs = _choose_crosses(crosses, schema, train_ids, det, aliases, tables, np.random.default_rng([seed, 1]))
    k = len(pairs)
    planted = []
    for i, (a, b) in enumerate(pairs):
        s = strength * (1.0 - 0.4 * i / (k - 1)) if k > 1 else strength
        t = tables.get(a, b)
        others = [c for c in cats if c not in (a, b) and (c, a) in det and (c, b) in det]
        planted.append(_Cross((a, b), s, t.u, t.v, t.alpha, t.beta, s / math.sqrt(t.res_var), t.additive_share,
                              others, {f: aliases[f] for f in (a, b) if aliases[f]}))
    return LabelModel(schema, main, numeric, planted)


def _calibrate_bias(logit: np.ndarray, click_rate: float) -> float:
    """b with mean(sigmoid(b + logit)) = click_rate (bisection: the mean increases with b)."""
    lo, hi = -50.0, 50.0
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        if _sigmoid(mid + logit).mean() < click_rate:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


# --------------------------------------------------------------------------- writing
def _write_labels(src: Path, dst: Path, label: str, values: np.ndarray, rows: pa.Table | None = None) -> None:
    """``src`` with its ``label`` column replaced by ``values``: same schema, row groups and compression. With
    ``rows`` (rows drawn from ``src``), those rows instead, in row groups of ``src``'s first group's size."""
    pf = pq.ParquetFile(src)
    schema, meta = pf.schema_arrow, pf.metadata
    col = schema.get_field_index(label)
    compression = meta.row_group(0).column(col).compression.lower() if meta.num_row_groups else "zstd"
    if rows is None:
        parts = (pf.read_row_group(g) for g in range(meta.num_row_groups))
    else:
        size = max(meta.row_group(0).num_rows if meta.num_row_groups else rows.num_rows, 1)
        parts = (rows.slice(i, size).cast(schema) for i in range(0, rows.num_rows, size))
    tmp = dst.with_name(f".{dst.name}.tmp")
    start = 0
    try:
        with pq.ParquetWriter(tmp, schema, compression=compression) as writer:
            for table in parts:
                part = pa.array(values[start:start + table.num_rows]).cast(schema.field(label).type)
                start += table.num_rows
                writer.write_table(table.set_column(col, schema.field(label), part), row_group_size=table.num_rows)
        tmp.replace(dst)
    finally:
        tmp.unlink(missing_ok=True)


def _settings(crosses: Any, strength: float, main_strength: float, noise: float, click_rate: float, rank: int,
              seed: int, resample: int = 1) -> dict[str, Any]:
    given = crosses if isinstance(crosses, (int, np.integer)) else [list(p) for p in crosses]
    return {"crosses": given, "strength": strength, "main_strength": main_strength, "noise": noise,
            "click_rate": click_rate, "rank": rank, "seed": seed, "resample": resample}


def plant_labels(processed: Path, out: Path, crosses: list[tuple[str, str]] | int = 4, strength: float = 2.5,
                 main_strength: float = 0.3, noise: float = 0.3, click_rate: float = 0.25, rank: int = 2,
                 seed: int = 0, resample: int = 1) -> dict:
    """Copy the processed folder ``processed`` to ``out`` with labels drawn from planted crosses (module docstring).

    ``crosses``: a number of pairs to choose with the seed, or the pairs by field name. ``resample``: each
    split's rows drawn with replacement ``resample`` times its size (module docstring, "Resampling"); 1 keeps
    the rows as they are. Returns the contents of ``out/planted.json``.
    """
    processed, out = Path(processed), Path(out)
    for name, v in (("strength", strength), ("main_strength", main_strength), ("noise", noise)):
        if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
            raise ValueError(f"{name} must be a number >= 0, got {v!r}")
    if not (isinstance(click_rate, (int, float)) and 0 < click_rate < 1):
        raise ValueError(f"click_rate must be strictly between 0 and 1, got {click_rate!r}")
    if not (isinstance(rank, int) and rank >= 1):
        raise ValueError(f"rank must be an integer >= 1, got {rank!r}")
    if not (isinstance(resample, int) and not isinstance(resample, bool) and resample >= 1):
        raise ValueError(f"resample must be an integer >= 1, got {resample!r}")
    if not (processed / "schema.json").is_file():
        raise FileNotFoundError(f"{processed}: not a processed folder (no schema.json); prepare it first")
    if out.resolve() == processed.resolve():
        raise ValueError(f"out must differ from the processed folder {processed}: its labels would be overwritten")
    schema = Schema.load(processed / "schema.json")
    tables = {s: pq.read_table(processed / f"{s}.parquet") for s in SPLITS}
    model = build_label_model(schema, tables["train"], crosses, strength, main_strength, rank, seed)
    if resample > 1:  # the label model stays that of the real train rows; only the rows it labels are drawn
        for code, s in enumerate(SPLITS):
            n = tables[s].num_rows
            tables[s] = tables[s].take(np.random.default_rng([seed, 5, code]).integers(0, n, size=n * resample))

    clean = {s: model.logit(tables[s]) for s in SPLITS}  # bias 0 so far
    draws = {}
    for code, s in enumerate(SPLITS):
        rng = np.random.default_rng([seed, 3, code])
        draws[s] = (rng.standard_normal(len(clean[s])) * noise, rng.random(len(clean[s])))
    model.bias = _calibrate_bias(clean["train"] + draws["train"][0], click_rate)

    out.mkdir(parents=True, exist_ok=True)
    for path in sorted(processed.iterdir()):
        if path.is_file() and path.name not in {*(f"{s}.parquet" for s in SPLITS), "prepare.json", PLANTED_FILE}:
            shutil.copyfile(path, out / path.name)
    labels, oracle, rates = {}, {}, {}
    for s in SPLITS:
        true_logit = clean[s] + model.bias
        noisy, u = draws[s]
        labels[s] = (u < _sigmoid(true_logit + noisy)).astype(np.int8)
        _write_labels(processed / f"{s}.parquet", out / f"{s}.parquet", schema.label, labels[s],
                      tables[s] if resample > 1 else None)
        np.save(out / TRUE_LOGIT_FILE.format(split=s), true_logit)
        oracle[s] = _scores(labels[s], true_logit, noise)
        rates[s] = round(float(labels[s].mean()), 6) if len(labels[s]) else None
    if (processed / "prepare.json").is_file():
        report = json.loads((processed / "prepare.json").read_text(encoding="utf-8"))
        report["rows"] = {s: len(labels[s]) for s in SPLITS}
        report["positives"] = {s: int(labels[s].sum()) for s in SPLITS}
        report["positive_rate"] = {s: (float(labels[s].mean()) if len(labels[s]) else None) for s in SPLITS}
        report["labels"] = f"planted: {PLANTED_FILE} (benchmarks/semi_synthetic.py)"
        (out / "prepare.json").write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")

    planted = {
        "generator": "benchmarks/semi_synthetic.py",
        "version": 2,  # 2: fields with an alias are not drawn into crosses; rows may be resampled
        "processed": str(processed.resolve()),
        "label": schema.label,
        "logit": ("bias + categorical main effects + linear numeric main effects + planted crosses "
                  "+ N(0, noise^2); strengths are logit standard deviations over the train rows"),
        "crosses": [{"fields": list(cr.fields), "kind": "categorical", "order": 2, "rank": rank,
                     "strength": round(cr.strength, 6), "additive_share": round(cr.additive_share, 6),
                     "determined_by": cr.determined_by, "aliases": cr.aliases} for cr in model.crosses],
        "main_effects": {"categorical": [f.name for f in schema.categorical],
                         "numeric": [f.name for f in schema.numeric],
                         "none": [f.name for f in schema.fields if f.kind == MULTI]},
        "bias": round(model.bias, 6),
        "click_rate": rates,
        "settings": _settings(crosses, strength, main_strength, noise, click_rate, rank, seed, resample),
        "oracle": oracle,
        "true_logit_files": {s: TRUE_LOGIT_FILE.format(split=s) for s in SPLITS},
    }
    (out / PLANTED_FILE).write_text(json.dumps(planted, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return planted


# --------------------------------------------------------------------------- the command
def prepare_real(dataset: str, data_dir: Path, folder: Path, overrides: Sequence[str] = ()) -> Path:
    """Encode one shared real data set with the project's config (then :data:`PINNED`'s and the ``KEY=VALUE``
    overrides) into ``folder`` (kept if already prepared with the same settings)."""
    from autoint.config import load_config
    from autoint.train import ensure_processed

    config, raw, _ = DATASETS[dataset]
    cfg = load_config(ROOT / config, [f"data.raw={data_dir / raw}", *PINNED.get(dataset, ()), *overrides])
    return ensure_processed(cfg, folder, None, progress=False)


def check_learnable(folder: Path, seed: int, epochs: int | None = None) -> dict[str, Any]:
    """Train the small AutoInt of ``benchmarks/interaction_recovery.py`` on ``folder``; its test AUC and the
    ranks of the planted pairs by each attention score column."""
    import torch
    from sklearn.metrics import roc_auc_score

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from interaction_recovery import MODEL, TRAIN, fit_autoint

    from autoint.data import read_split
    from autoint.datasets.synthetic import load_planted
    from autoint.inspection import SCORE_COLUMNS, inspect_model

    started = time.perf_counter()
    epochs = TRAIN["epochs"] if epochs is None else epochs
    net = fit_autoint(folder, MODEL, epochs, TRAIN["lr"], TRAIN["batch_size"], seed)
    fit_s = time.perf_counter() - started
    test = read_split(folder / "test.parquet", Schema.load(folder / "schema.json"))
    with torch.no_grad():
        score = net(test).numpy()
    auc = float(roc_auc_score(test["label"].numpy(), score))
    result = inspect_model(net, folder, "test")
    planted = [frozenset(p) for p in load_planted(folder)]
    ranks = {}
    for column in SCORE_COLUMNS:
        top = result.top_pairs(len(result.pairs), by=column)
        where = {frozenset(p): i + 1 for i, p in enumerate(zip(top["field_a"], top["field_b"]))}
        ranks[column] = sorted(where[p] for p in planted)  # 1-based, best first
    order = result.top_pairs(len(result.pairs), by="score")
    return {"epochs": epochs, "test_auc": round(auc, 6), "ranks": ranks, "pairs": len(result.pairs),
            "top_by_score": [f"{a}×{b}" for a, b in zip(order["field_a"][:8], order["field_b"][:8])],
            "fit_s": round(fit_s, 1), "total_s": round(time.perf_counter() - started, 1)}


def _parse_crosses(text: str | None, dataset: str) -> list[tuple[str, str]] | int:
    if text is None:
        return DATASETS[dataset][2]
    if text.isdigit():
        return int(text)
    return [tuple(p.split(":")) for p in text.split(",")]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", choices=sorted(DATASETS), required=True)
    parser.add_argument("--out", type=Path, required=True, help="work folder: OUT/processed, OUT/seed<N>")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--strength", type=float, default=2.5)
    parser.add_argument("--crosses", default=None,
                        help="a number of pairs, or pairs as a:b,c:d (default: movielens 2, criteo 4)")
    parser.add_argument("--data-dir", type=Path, default=os.environ.get("AUTOINT_DATA_DIR"),
                        help="the shared real data folder (default: $AUTOINT_DATA_DIR)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="config override for preparing, e.g. data.numeric_transform=standardize")
    parser.add_argument("--resample", type=int, default=1, metavar="R",
                        help="draw each split's rows with replacement to R times its size (default 1: as they are)")
    parser.add_argument("--check", action="store_true", help="train a small AutoInt and rank the planted pairs")
    parser.add_argument("--epochs", type=int, default=None, help="--check: epochs (default: interaction_recovery's)")
    args = parser.parse_args(argv)
    if args.data_dir is None:
        parser.error("no data folder: pass --data-dir or set AUTOINT_DATA_DIR")
    import torch

    torch.set_num_threads(1)
    started = time.perf_counter()
    processed = prepare_real(args.dataset, Path(args.data_dir), args.out / "processed", args.overrides)
    folder = args.out / f"seed{args.seed}"
    planted = plant_labels(processed, folder, _parse_crosses(args.crosses, args.dataset), strength=args.strength,
                           seed=args.seed, resample=args.resample)
    print(f"{args.dataset}, seed {args.seed}: labels planted in {folder} ({time.perf_counter() - started:.1f} s)")
    for cr in planted["crosses"]:
        print(f"  {' × '.join(cr['fields']):<32} strength {cr['strength']:.2f}  additive share "
              f"{cr['additive_share']:.3f}" + (f"  determined by {cr['determined_by']}" if cr["determined_by"] else ""))
    print("  click rate " + "  ".join(f"{s} {r:.3f}" for s, r in planted["click_rate"].items()))
    print("  oracle AUC " + "  ".join(f"{s} {o['auc']:.4f}" for s, o in planted["oracle"].items()))
    if args.check:
        check = check_learnable(folder, args.seed, args.epochs)
        (folder / "check.json").write_text(json.dumps(check, indent=2) + "\n")
        print(f"  autoint test AUC {check['test_auc']:.4f} (oracle {planted['oracle']['test']['auc']:.4f}); "
              f"planted ranks by score {check['ranks']['score']} of {check['pairs']} pairs "
              f"({check['fit_s']:.0f} s train, {check['total_s']:.0f} s with inspection)")
        print(f"  ranks by column {check['ranks']}; top by score {check['top_by_score']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
