"""Which fields does the model cross? Attention maps → field-pair tables.

AutoInt's interacting layers (Song et al., CIKM 2019, arXiv:1810.11921,
Section 5.5 and Figure 7) attend, for every field ``i``, over every field ``j``:
``alpha^{l,h}_{ij}`` is how much field ``i`` draws on field ``j`` in layer ``l``,
head ``h`` (each row sums to 1). :func:`inspect_model` streams one split of a
processed folder through a model with ``return_attention=True`` and keeps only
running sums, so memory is bounded whatever the number of rows:

* ``mean``   ``ā^{l,h}_{ij}``  = E[alpha^{l,h}_{ij}]            over all rows, and per label (clicked / not);
* ``std``    ``s^{l,h}_{ij}``  = SD[alpha^{l,h}_{ij}]           over all rows (from sums of squares);
* per-row maps only for the rows asked for in ``explain_rows`` (the paper's Figure 7a).

Shape letters: N rows, B batch, L layers, H heads, F fields (schema order).

The interaction score
---------------------
The attention logit ``<W_Q e_i, W_K e_j>`` is a bilinear form in the two
fields' embeddings, the same form a factorisation machine uses for a cross.
When the model uses the pair (i, j) to tell clicks from non-clicks, the weight
``alpha_{ij}`` *moves with the values* of i and j, and so differs between
clicked and unclicked rows. A field that every other field attends to at a
constant rate (a "hub", e.g. a strong main effect) has a large mean weight
but the same weight in both classes. Mean attention, the quantity the paper
plots, mixes both; pairs are therefore ranked by the label contrast of their
attention, symmetric and averaged over layers and heads::

    score_ij = 1/(2LH) Σ_{l,h} ( |ā⁺_ij - ā⁻_ij| + |ā⁺_ji - ā⁻_ji| )        (i < j)

with ``ā⁺`` / ``ā⁻`` the mean maps over clicked / unclicked rows. Three more
columns are written beside it:

* ``variability``: ``v_ij = sd(alpha_ij) / ((1/(F-1)) Σ_{k≠j} sd(alpha_kj))`` (how much the weight
  varies over rows against the usual variability of attention to that key), symmetric, averaged;
  it needs no labels, and ``score`` falls back to it when the split has no label or one class only;
* ``attention``: ``(ā_ij + ā_ji) / 2`` averaged over layers and heads, the paper's quantity;
* ``attention_lift``: ``ā_ij`` over the column baseline ``(1/(F-1)) Σ_{k≠j} ā_kj``, symmetric, averaged.

Any column can rank: ``InspectionResult.top_pairs(k, by=...)``. How often each
ranking recovers planted crosses, on held-out seeds, is measured by
``benchmarks/interaction_recovery.py`` and reported in the README.

Is a pair's score more than noise?
----------------------------------
A ranking always has a top pair, even when the model learned nothing. Each
pair's ``score`` therefore gets a p-value from a **label-permutation null**:
the labels of the tested rows are permuted ``P`` times (seeded), and the
score is recomputed under each permutation from the same attention maps.
Because ``ā⁺ - ā⁻`` is linear in the labels, ``Σ_r w_r a_r`` with
``w_r = y_r / n₁ - (1 - y_r) / n₀``, all ``P + 1`` label vectors are scored in
one streamed pass: a (B, P+1) × (B, L·H·F·F) product per batch, no map kept.

* ``p_value``: ``#{p : s_p ≥ s_0} / (P + 1)`` over the observed labels (p = 0)
  and the permutations, per pair, uncorrected;
* ``p_adjusted``: the family-wise error over all F(F-1)/2 pairs, by the
  single-step max-T permutation method (Westfall & Young, 1993): each pair's
  scores are standardised by their mean and SD over the P + 1 label vectors,
  and ``p_adjusted_ij = #{p : max_kl t_p,kl ≥ t_0,ij} / (P + 1)``;
* ``significant``: ``p_adjusted ≤ alpha``.

Under the null that labels are exchangeable given the inspected features (no
pair matters to the label), the chance that *any* pair is called significant
is at most ``alpha``; the smallest p-value a test can report is ``1 / (P + 1)``
(0.005 with the default 199 permutations, below the default ``alpha`` = 0.05),
or ``1 / C(N, n₁)`` where the rows allow fewer label arrangements than that. The
null is of one distribution of attention for both classes: with few clicks, a
weight that only varies more among clicked rows, at the same mean, can be called
significant too. Sums are float64 and scores within :data:`TIE_TOLERANCE` tie.
On the train split (and, less, the valid split) the model was fitted to the
labels, which are then not exchangeable given its maps: the result says so
(``significance["caveat"]``).

Does the attention prefer any field at all?
-------------------------------------------
A layer whose weights all sit at ``1/F`` averages the fields and carries no
preference; its mean map, drawn with a colour scale stretched to its range,
would still look structured. :attr:`InspectionResult.uniformity` measures the
departure from uniform as ``max_{l,h,i,j} |alpha_ij - 1/F| · F`` (relative to
``1/F``), averaged over rows (``row_deviation``; per label,
``row_deviation_by_label``), and over the mean maps (``map_deviation``, overall
and per label). The maps are called **indistinguishable from uniform** when
``row_deviation`` is below :data:`UNIFORM_TOLERANCE` (every weight of a typical
row within 5 % of ``1/F``) over all rows and over each label's rows (over all
rows alone, the majority class decided); heatmaps draw ``alpha - 1/F`` on a
colour scale of at least ``±1/F``, so such maps look flat.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import torch
from torch import Tensor

from .batch import first_bad_label, first_non_finite, tensors_from_table
from .config import is_int
from .data import SPLITS, data_identity
from .datasets.errors import PREPARE_AGAIN, DataError
from .datasets.text import open_parquet, parquet_batches, read_parquet_table
from .encoder import Encoder
from .errors import MissingInput
from .files import write_json
from .model import AutoInt, IdOutOfRange
from .schema import Schema

SCORE_COLUMNS = ("score", "variability", "attention", "attention_lift")
RANKING_COLUMNS = ("score_z", "archdetect")  # the permutation test's statistic; a model probe's (autoint.detect)
LABEL_NAMES = {0: "not_clicked", 1: "clicked"}
PERMUTATIONS = 199  # label permutations for the p-values: the smallest is 1/200
ALPHA = 0.05  # family-wise level at which a pair is called significant
# Splits whose labels the model was fitted to or chosen by: the labels are not exchangeable given its maps there.
FITTED_SPLITS = {
    "train": "the model was fitted to the train split's labels, so its attention is not independent of them: the "
             "p-values are not valid there (pairs come out significant under shuffled labels); inspect the test split",
    "valid": "the valid split chose the best epoch (and fitted the calibration), so its p-values lean small; the "
             "test split is the one the model has not seen",
}
SIGNIFICANCE_ROWS = 200_000  # rows the permutation test uses at most (the labels of each permutation are kept)
UNIFORM_TOLERANCE = 0.05  # a typical row's weights all within 5 % of 1/F: indistinguishable from uniform
# Scores (differences of mean attention weights) closer than this are ties: float64 sums of float32 weights differ
# by rounding alone (~1e-16) where the weights are equal, and no attention weight means anything at 1e-9.
TIE_TOLERANCE = 1e-9
VARIANCE_ROUNDING = 1e-12  # a variance below this share of the squared mean is rounding: 0
_EPS = 1e-12

__all__ = [
    "ALPHA",
    "PERMUTATIONS",
    "RANKING_COLUMNS",
    "SCORE_COLUMNS",
    "UNIFORM_TOLERANCE",
    "AttentionAccumulator",
    "InspectionResult",
    "LabelPermutationTest",
    "RowExplanation",
    "inspect_model",
    "pair_scores",
]


# ----------------------------------------------------------------------------- streaming statistics
class AttentionAccumulator:
    """Running sums of attention maps, split by label; float64 so millions of rows add up exactly enough.

    ``update`` takes the per-layer maps of one batch; nothing per row is kept.
    """

    def __init__(self, layers: int, heads: int, fields: int) -> None:
        shape = (2, layers, heads, fields, fields)  # (label, L, H, F, F)
        self.count = np.zeros(2, dtype=np.int64)
        self.sum = np.zeros(shape)
        self.sumsq = np.zeros(shape)
        self.row_deviation_sum = np.zeros(2)  # per label: Σ_rows max_{l,h,i,j} |alpha - 1/F| · F
        self.entropy_sum = 0.0  # Σ_rows mean_{l,h,i} H(alpha_i·) / log F

    def update(self, maps: Sequence[Tensor], labels: Tensor) -> None:
        """``maps``: L tensors (B, H, F, F); ``labels``: (B,) of 0/1."""
        a = torch.stack(list(maps), dim=1).double()  # (B, L, H, F, F)
        f = a.shape[-1]
        deviation = (a - 1.0 / f).abs().flatten(1).amax(1) * f  # (B,)
        if f > 1:
            entropy = -(a * a.clamp_min(_EPS).log()).sum(-1) / np.log(f)  # (B, L, H, F)
            self.entropy_sum += float(entropy.flatten(1).mean(1).sum())
        else:
            self.entropy_sum += float(a.shape[0])
        y = labels.reshape(-1) > 0.5  # (B,)
        for lab, rows in ((1, y), (0, ~y)):
            part = a[rows]  # (b, L, H, F, F)
            if len(part):
                self.row_deviation_sum[lab] += float(deviation[rows].sum())
                self.count[lab] += len(part)
                self.sum[lab] += part.sum(0).numpy()
                self.sumsq[lab] += part.square().sum(0).numpy()

    @property
    def rows(self) -> int:
        return int(self.count.sum())

    def mean(self, label: int | None = None) -> np.ndarray:
        """E[alpha], (L, H, F, F): over all rows, or over the rows with ``label``; NaN if none."""
        if label is None:
            n, s = self.count.sum(), self.sum.sum(0)
        else:
            n, s = self.count[label], self.sum[label]
        return s / n if n else np.full(s.shape, np.nan)

    def std(self) -> np.ndarray:
        """SD[alpha] over all rows (population), (L, H, F, F)."""
        n = self.count.sum()
        if not n:
            return np.full(self.sum.shape[1:], np.nan)
        m = self.sum.sum(0) / n
        var = self.sumsq.sum(0) / n - m * m
        # E[a²] - E[a]² leaves rounding (~1e-18) where every row has the same weight: its square root, ~1e-9, made
        # a constant map's variability a ratio of two rounding errors (1.0 for every pair) instead of 0.
        return np.sqrt(np.where(var > VARIANCE_ROUNDING * m * m, var, 0.0))


class LabelPermutationTest:
    """The label-permutation null of ``score`` (see the module docstring), streamed over batches.

    ``labels``: the 0/1 labels of the ``N`` tested rows, in the order the
    batches will come. Column 0 of the label matrix holds them as observed,
    columns 1..P seeded permutations of them; :meth:`update` adds each batch's
    maps weighted by ``y / n₁ - (1 - y) / n₀`` for every column, so after the
    last batch ``diff[p]`` is ``ā⁺ - ā⁻`` under label vector ``p``.
    Memory: N·(P+1) bytes of labels plus (P+1)·L·H·F·F float64 sums.
    """

    def __init__(self, labels: np.ndarray, permutations: int, shape: tuple[int, ...], seed: int = 0) -> None:
        y = np.asarray(labels).reshape(-1) > 0.5
        self.rows = len(y)
        self.positives = int(y.sum())
        if not 0 < self.positives < self.rows:
            raise ValueError("the permutation test needs both label classes among the tested rows")
        if permutations < 1:
            raise ValueError(f"permutations must be >= 1, got {permutations}")
        # Rows that allow no more label arrangements than P + 1 (10 rows with one click allow 10) are tested on
        # every arrangement once, exactly: drawn at random, the observed one came back a random number of times and
        # p-values fell below 1/C(N, n₁), the smallest an exact test gives.
        self.exact = _comb_at_most(self.rows, self.positives, permutations + 1) is not None
        if self.exact:
            self._y = _arrangements(y)  # (N, A), column 0 the observed labels
            permutations = self._y.shape[1] - 1
        else:
            rng = np.random.default_rng(seed)
            self._y = np.empty((self.rows, permutations + 1), dtype=np.int8)  # (N, P+1)
            self._y[:, 0] = y
            for p in range(1, permutations + 1):
                self._y[:, p] = y[rng.permutation(self.rows)]
        self.permutations = permutations
        self._shape = shape  # (L, H, F, F)
        self._sum = np.zeros((permutations + 1, int(np.prod(shape))))  # (P+1, L·H·F·F)
        self._seen = 0

    @property
    def done(self) -> bool:
        return self._seen >= self.rows

    def update(self, maps: Sequence[Tensor]) -> None:
        """``maps``: L tensors (B, H, F, F) of the next rows; rows past the N tested are ignored."""
        take = min(self.rows - self._seen, maps[0].shape[0])
        if take <= 0:
            return
        # float64: in float32 the sums of equal weights differed by rounding (~1e-7) from one label vector to
        # another, so ties fell above or below the observed score at random (p = 0.04 for exactly uniform maps).
        a = torch.stack([m[:take] for m in maps], dim=1).reshape(take, -1).double()  # (b, L·H·F·F)
        y = torch.from_numpy(self._y[self._seen:self._seen + take]).double()  # (b, P+1)
        n1, n0 = self.positives, self.rows - self.positives
        w = y * (1.0 / n1 + 1.0 / n0) - 1.0 / n0  # (b, P+1): y/n1 - (1-y)/n0
        self._sum += (w.T @ a).numpy()  # (P+1, L·H·F·F)
        self._seen += take

    def pair_scores(self) -> np.ndarray:
        """(P+1, F(F-1)/2): ``score`` of every pair (i < j) under every label vector; row 0 observed."""
        d = np.abs(self._sum.reshape(-1, *self._shape))  # (P+1, L, H, F, F)
        s = _symmetric_average(d)  # (P+1, F, F)
        i, j = np.triu_indices(self._shape[-1], k=1)
        return s[:, i, j]

    def p_values(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(raw p, max-T adjusted p, standardised observed score) per pair (i < j), each of length F(F-1)/2."""
        s = self.pair_scores()  # (P+1, M)
        observed = s[0]
        raw = (s >= observed - TIE_TOLERANCE).sum(0) / s.shape[0]  # ties count as "at least as large"
        # A pair whose score is the same under every label vector (within rounding) has no spread to standardise
        # by: t = 0 throughout, rather than rounding divided by rounding.
        sd = s.std(0)
        spread = sd > TIE_TOLERANCE
        t = np.where(spread, (s - s.mean(0)) / np.where(spread, sd, 1.0), 0.0)  # (P+1, M)
        t = np.where(np.abs(s - observed) <= TIE_TOLERANCE, t[0], t)  # a tie of the score is a tie of t
        max_t = t.max(1)  # (P+1,)
        adjusted = (max_t[:, None] >= t[0][None, :] - 1e-9 * np.maximum(1.0, np.abs(t[0]))).sum(0) / s.shape[0]
        return raw, np.maximum(adjusted, raw), t[0]  # max-T never adjusts a p-value down

    @property
    def arrangements(self) -> int | None:
        """C(N, n₁), the label arrangements the rows allow, where the test enumerated them all (see ``exact``);
        else None."""
        return self.permutations + 1 if self.exact else None

    def smallest_p(self) -> float:
        """The smallest p-value this test can give: 1/(P+1) (1/C(N, n₁) when it enumerated every arrangement)."""
        return 1.0 / (self.permutations + 1)


def _arrangements(y: np.ndarray) -> np.ndarray:
    """Every arrangement of the labels ``y`` over its rows, (N, C(N, n₁)) int8, the observed one in column 0."""
    n, ones = len(y), int(y.sum())
    flip = ones > n - ones  # choose the rarer class's rows
    k = n - ones if flip else ones
    columns = [np.asarray(y, dtype=np.int8)]
    for rows in itertools.combinations(range(n), k):
        col = np.zeros(n, dtype=np.int8)
        col[list(rows)] = 1
        if flip:
            col = 1 - col
        if not np.array_equal(col, columns[0]):
            columns.append(col)
    return np.stack(columns, axis=1)


def _comb_at_most(n: int, k: int, cap: int) -> int | None:
    """C(n, k) where it is at most ``cap``, else None, without computing a binomial of thousands of digits."""
    k, c = min(k, n - k), 1
    for i in range(1, k + 1):
        c = c * (n - k + i) // i
        if c > cap:
            return None
    return c


def _column_baseline(m: np.ndarray) -> np.ndarray:
    """``m / mean_{k≠j} m_kj`` for (..., F, F) matrices: 1 = as much as an average field gets."""
    f = m.shape[-1]
    off = m * (1.0 - np.eye(f))
    base = off.sum(-2, keepdims=True) / max(f - 1, 1)  # (..., 1, F)
    return m / np.maximum(base, _EPS)


def _symmetric_average(m: np.ndarray) -> np.ndarray:
    """(..., L, H, F, F) → (..., F, F): ``(m_ij + m_ji) / 2`` averaged over layers and heads."""
    s = 0.5 * (m + np.swapaxes(m, -1, -2))
    return s.mean((-4, -3))


def pair_scores(mean: np.ndarray, std: np.ndarray, mean_pos: np.ndarray | None, mean_neg: np.ndarray | None,
                fields: Sequence[str]) -> pd.DataFrame:
    """The field-pair table, one row per unordered pair (i < j), best ``score`` first.

    ``mean``/``std``/``mean_pos``/``mean_neg``: (L, H, F, F) statistics of the
    attention weights (see the module docstring for the formulas). Without
    both label classes, ``score`` is the ``variability`` column.
    """
    f = len(fields)
    variability = _symmetric_average(_column_baseline(std))
    labelled = (mean_pos is not None and mean_neg is not None
                and not (np.isnan(mean_pos).any() or np.isnan(mean_neg).any()))
    columns = {
        "score": _symmetric_average(np.abs(mean_pos - mean_neg)) if labelled else variability,
        "variability": variability,
        "attention": _symmetric_average(mean),
        "attention_lift": _symmetric_average(_column_baseline(mean)),
    }
    i, j = np.triu_indices(f, k=1)
    table = pd.DataFrame({"field_a": np.asarray(fields)[i], "field_b": np.asarray(fields)[j],
                          **{k: v[i, j] for k, v in columns.items()}})
    table = table.sort_values("score", ascending=False, kind="stable").reset_index(drop=True)
    table.insert(0, "rank", np.arange(1, len(table) + 1))
    return table


# ----------------------------------------------------------------------------- results
@dataclass
class RowExplanation:
    """One row's attention maps (the paper's Figure 7a): ``maps`` is (L, H, F, F)."""

    row: int  # position in the split
    label: float | None
    probability: float
    maps: np.ndarray  # (L, H, F, F)
    fields: list[str]

    def matrix(self, layer: int | None = None, head: int | None = None) -> pd.DataFrame:
        """Query field (rows) × key field (columns); averaged over the layers/heads not given (1-based)."""
        return _frame(_select(self.maps, layer, head), self.fields)

    def top_keys(self, k: int = 3) -> pd.DataFrame:
        """For every field, the ``k`` fields it attends to most (averaged over layers and heads)."""
        if not (is_int(k) and k >= 1):  # -1 gave all but the last key of each field, silently
            raise ValueError(f"k must be an integer >= 1, got {k!r}")
        m = self.maps.mean((0, 1))  # (F, F)
        rows = []
        for i, name in enumerate(self.fields):
            order = np.argsort(-m[i], kind="stable")[:k]
            for r, j in enumerate(order, 1):
                rows.append({"row": self.row, "label": self.label, "probability": self.probability, "field": name,
                             "rank": r, "attends_to": self.fields[j], "weight": float(m[i, j])})
        return pd.DataFrame(rows)

    def long(self) -> pd.DataFrame:
        """Every weight: columns row, layer, head, query, key, weight (layers and heads 1-based)."""
        return _long(self.maps, self.fields).assign(row=self.row)


def _select(maps: np.ndarray, layer: int | None, head: int | None) -> np.ndarray:
    """(L, H, F, F) → (F, F), picking a 1-based layer / head or averaging over it."""
    L, H = maps.shape[:2]
    if layer is not None and not (is_int(layer) and 1 <= layer <= L):
        raise ValueError(f"layer must be an integer in 1..{L} (None: their mean), got {layer!r}")
    if head is not None and not (is_int(head) and 1 <= head <= H):
        raise ValueError(f"head must be an integer in 1..{H} (None: their mean), got {head!r}")
    m = maps if layer is None else maps[layer - 1 : layer]  # (L', H, F, F)
    m = m if head is None else m[:, head - 1 : head]  # (L', H', F, F)
    return m.mean((0, 1))


def _frame(m: np.ndarray, fields: Sequence[str]) -> pd.DataFrame:
    df = pd.DataFrame(m, index=list(fields), columns=list(fields))
    df.index.name, df.columns.name = "query", "key"
    return df


def _long(maps: np.ndarray, fields: Sequence[str]) -> pd.DataFrame:
    L, H, F, _ = maps.shape
    layer, head, q, k = np.meshgrid(np.arange(1, L + 1), np.arange(1, H + 1), np.arange(F), np.arange(F),
                                    indexing="ij")  # each (L, H, F, F)
    names = np.asarray(fields)
    return pd.DataFrame({"layer": layer.ravel(), "head": head.ravel(), "query": names[q.ravel()],
                         "key": names[k.ravel()], "weight": maps.ravel()})


@dataclass
class InspectionResult:
    """Mean attention per layer / head / label, the pair ranking and per-row explanations.

    Matrices are DataFrames indexed by query field (rows) with key fields as
    columns; each row of a mean map sums to 1. Layers and heads are 1-based.
    """

    fields: list[str]
    rows: int
    positives: int | None  # clicked rows; None where the split holds no label
    mean: np.ndarray  # (L, H, F, F) over all rows
    std: np.ndarray  # (L, H, F, F)
    mean_by_label: dict[int, np.ndarray]  # label → (L, H, F, F); NaN where no row has it
    pairs: pd.DataFrame
    explanations: list[RowExplanation] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)
    significance: dict[str, Any] | None = None  # the permutation test's settings and counts; None: not run
    uniformity: dict[str, Any] = field(default_factory=dict)  # departure from uniform attention

    @property
    def uniform(self) -> bool:
        """True when the maps are indistinguishable from uniform (see the module docstring)."""
        return bool(self.uniformity.get("uniform", False))

    def verdicts(self) -> list[str]:
        """One line each: is any pair significant, and does attention depart from uniform."""
        lines = []
        sig = self.significance
        if sig is None:
            lines.append("significance: not tested")
        elif sig.get("skipped"):
            lines.append(f"significance: not tested ({sig['skipped']})")
        else:
            over = (f"the first {sig['rows']:,} of {self.rows:,} rows" if sig["rows"] < self.rows
                    else f"{sig['rows']:,} rows")
            how = (f"exact label-permutation test, all {sig['permutations'] + 1} arrangements of the labels of {over}"
                   if sig.get("exact") else
                   f"label-permutation test, {sig['permutations']} permutations over {over}")
            how += f", max-T family-wise correction over {sig['pairs']} pairs"
            n = sig["significant_pairs"]
            arrangements = sig.get("arrangements")
            if n:
                lines.append(f"significance: {n} of {sig['pairs']} pairs significant at alpha = {sig['alpha']:g} "
                             f"({how})")
            elif sig["smallest_p"] > sig["alpha"] and arrangements:  # the rows allow too few label arrangements
                lines.append(f"significance: not decided: {sig['rows']:,} rows with {sig['positives']:,} clicked allow "
                             f"only {arrangements:,} arrangements of the labels, so the smallest p-value is "
                             f"{sig['smallest_p']:.3g}, above alpha = {sig['alpha']:g}, and no pair can be "
                             "significant; inspect more rows (--rows) or another split")
            elif sig["smallest_p"] > sig["alpha"]:  # no pair could have been: the test says nothing either way
                least = math.ceil(1 / sig["alpha"] - 1)
                lines.append(f"significance: not decided: with {sig['permutations']} permutations the smallest "
                             f"p-value is 1/{sig['permutations'] + 1} = {sig['smallest_p']:.3g}, above alpha = "
                             f"{sig['alpha']:g}, so no pair can be significant; run at least {least} permutations "
                             "(--permutations)")
            else:
                lines.append(f"significance: no pair is significant at alpha = {sig['alpha']:g} ({how}); "
                             "the ranking may be noise")
            if sig.get("caveat"):
                lines.append(f"significance: caution: {sig['caveat']}")
        u = self.uniformity
        if u:
            dev = _share_of_uniform(u["row_deviation"])
            if u["uniform"]:
                both = bool(sig and not sig.get("skipped") and sig.get("significant_pairs"))
                gap = u.get("label_gap")
                # "alike" only where both labels were there to compare (it was said of unlabelled rows too)
                alike = (", in clicked and unclicked rows alike" if len(u.get("row_deviation_by_label") or {}) == 2
                         else "")
                lines.append(f"uniformity: attention is indistinguishable from uniform (a row's largest "
                             f"departure from 1/F is {dev} on average, under {100 * u['tolerance']:g} % of 1/F"
                             f"{alike}): the layers average the fields and the maps show no preference"
                             + (f"; the pairs found significant above: no weight's mean differs between clicks and "
                                f"non-clicks by more than {_share_of_uniform(gap)}: consistent, but tiny, and a "
                                "field's own effect on clicks moves its attention too (README: Is a pair more than "
                                "noise?)" if both and gap is not None else ""))
            else:
                lines.append(f"uniformity: attention departs from uniform (a row's largest departure from 1/F is "
                             f"{dev} on average; in the mean maps {_share_of_uniform(u['map_deviation'])})")
        return lines

    @property
    def num_layers(self) -> int:
        return int(self.mean.shape[0])

    @property
    def num_heads(self) -> int:
        return int(self.mean.shape[1])

    def matrix(self, layer: int | None = None, head: int | None = None, label: int | None = None) -> pd.DataFrame:
        """Mean attention, query × key; ``layer``/``head`` 1-based (None averages), ``label`` 0/1/None (all)."""
        if label is not None and label not in self.mean_by_label:
            raise ValueError(f"label must be 0 (not clicked), 1 (clicked) or None (all rows), got {label!r}")
        maps = self.mean if label is None else self.mean_by_label[label]
        return _frame(_select(maps, layer, head), self.fields)

    def matrices(self) -> dict[str, pd.DataFrame]:
        """Every mean map worth a heatmap, by file stem: overall, per layer, per layer × head, per label."""
        out = {"overall": self.matrix()}
        for layer in range(1, self.num_layers + 1):
            out[f"layer{layer}"] = self.matrix(layer)
            for head in range(1, self.num_heads + 1):
                out[f"layer{layer}_head{head}"] = self.matrix(layer, head)
        for label, name in LABEL_NAMES.items():
            if not np.isnan(self.mean_by_label[label]).any():
                out[name] = self.matrix(label=label)
        return out

    def explanation_matrices(self) -> dict[str, pd.DataFrame]:
        """Per explained row: one map per layer (heads averaged), by file stem ``row{N}_layer{l}``."""
        return {f"row{e.row}_layer{layer}": e.matrix(layer)
                for e in self.explanations for layer in range(1, self.num_layers + 1)}

    @property
    def ranked_by(self) -> str:
        """The column ``rank`` follows: ``score`` unless :meth:`rank_by` chose another."""
        return str(self.meta.get("ranked_by", "score"))

    def top_pairs(self, k: int = 10, by: str | None = None) -> pd.DataFrame:
        """The ``k`` best pairs by ``by`` (default: the column ``rank`` follows)."""
        if not (is_int(k) and k >= 0):
            raise ValueError(f"k must be an integer >= 0, got {k!r}")
        by = by or self.ranked_by
        columns = [c for c in (*SCORE_COLUMNS, *RANKING_COLUMNS) if c in self.pairs.columns]
        if by not in columns:
            raise ValueError(f"by must be one of {columns}, got {by!r}")
        return self.pairs.sort_values(by, ascending=False, kind="stable").head(k).reset_index(drop=True)

    @property
    def contrasted(self) -> bool:
        """Whether ``score`` is the label contrast: the rows hold clicks and non-clicks (else it is ``variability``)."""
        return bool(self.positives and self.positives < self.rows)

    def ranking_notes(self, k: int = 10) -> list[str]:
        """What the top ``k`` by the ranking does not say, one line each: every pair scoring the same (the order is
        then the fields' own), and the pairs found significant but ranked below ``k`` (significance follows
        ``score_z``, the permutation test's standardised score, which need not order pairs as ``score`` does)."""
        notes = []
        ranked = self.pairs[self.ranked_by].to_numpy(dtype=float)
        if len(ranked) > 1 and np.allclose(ranked, ranked[0], rtol=0, atol=1e-12):
            notes.append(f"every pair scores {ranked[0]:.3g} by {self.ranked_by}: the order is the fields' own, not "
                         "a finding")
        if "significant" in self.pairs.columns:
            order = self.pairs.sort_values(self.ranked_by, ascending=False, kind="stable").reset_index(drop=True)
            below = order.iloc[k:][order.iloc[k:]["significant"].astype(bool)]
            if len(below):
                listed = ", ".join(f"{a} x {b} (rank {i + 1}, p_adjusted {p:.3g})" for i, a, b, p in
                                   zip(below.index[:5], below["field_a"], below["field_b"], below["p_adjusted"]))
                notes.append(f"also significant, ranked below the top {k} by {self.ranked_by} ({len(below)} "
                             f"pair{'s' * (len(below) != 1)}): {listed}"
                             f"{', ...' if len(below) > 5 else ''} (significance follows score_z, the permutation "
                             "test's standardised score: top_pairs(by='score_z') ranks by it)")
        return notes

    def rank_by(self, scores: pd.DataFrame, column: str) -> None:
        """Add another detector's pair scores (columns ``field_a, field_b, column``, e.g.
        :func:`autoint.detect.archdetect`'s table) and rank the pairs by them, best first."""
        if column not in RANKING_COLUMNS:
            raise ValueError(f"column must be one of {RANKING_COLUMNS}, got {column!r}")
        table = self.pairs.drop(columns=[c for c in ("rank", column) if c in self.pairs])
        scores = scores[["field_a", "field_b", column]]
        known = set(zip(table["field_a"], table["field_b"]))  # a pair is unordered: b, a is the same as a, b
        swap = np.array([(a, b) not in known and (b, a) in known for a, b in zip(scores["field_a"], scores["field_b"])],
                        dtype=bool)
        scores = scores.assign(field_a=np.where(swap, scores["field_b"], scores["field_a"]),
                               field_b=np.where(swap, scores["field_a"], scores["field_b"]))
        # both orders of a pair (a symmetric matrix melted): one row each, as the pairs table has
        scores = scores[scores["field_a"] != scores["field_b"]].drop_duplicates(["field_a", "field_b"])
        table = table.merge(scores, on=["field_a", "field_b"], how="left", validate="one_to_one")
        if table[column].isna().any():
            raise ValueError(f"the {column} table does not cover every pair of this model's fields")
        table = table.sort_values(column, ascending=False, kind="stable").reset_index(drop=True)
        table.insert(0, "rank", np.arange(1, len(table) + 1))
        self.pairs = table
        self.meta["ranked_by"] = column

    def long(self) -> pd.DataFrame:
        """Every mean weight: columns label (all / clicked / not_clicked), layer, head, query, key, weight, and
        std, the weight's standard deviation over the rows (for label all; empty for the label rows)."""
        parts = [_long(self.mean, self.fields).assign(label="all", std=_long(self.std, self.fields)["weight"])]
        for label, name in LABEL_NAMES.items():
            if not np.isnan(self.mean_by_label[label]).any():
                parts.append(_long(self.mean_by_label[label], self.fields).assign(label=name, std=np.nan))
        df = pd.concat(parts, ignore_index=True)
        return df[["label", "layer", "head", "query", "key", "weight", "std"]]

    def summary(self, k: int = 10) -> dict[str, Any]:
        return {
            **self.meta,
            "rows": self.rows,
            "positives": self.positives,
            "layers": self.num_layers,
            "heads": self.num_heads,
            "fields": self.fields,
            "ranked_by": self.ranked_by,
            "score": ("score_ij = mean over layers and heads of (|a+_ij - a-_ij| + |a+_ji - a-_ji|) / 2, "
                      "a+/a- the mean attention over clicked/unclicked rows; see autoint/inspection.py"
                      if self.contrasted else
                      "variability (no label contrast possible): see autoint/inspection.py"),
            "top_pairs": self.top_pairs(k).to_dict(orient="records"),
            "explained_rows": [e.row for e in self.explanations],
            # what the model served for each explained row: its probability (calibrated, as train.calibration
            # fitted it) beside the row's label
            "explained": [{"row": e.row, "label": e.label, "probability": e.probability} for e in self.explanations],
            "significance": self.significance,
            "uniformity": self.uniformity,
            "verdicts": self.verdicts(),
        }

    def save(self, out_dir: str | Path, k: int = 10) -> list[Path]:
        """Write the tables and ``summary.json`` into ``out_dir``; returns the files written.

        ``pairs.csv`` (every pair, all score columns), ``attention_long.csv``
        (every mean weight), ``matrices/*.csv`` (one wide matrix per
        heatmap), ``explanations/row{N}.csv`` and ``row{N}_top.csv``.
        """
        if not (is_int(k) and k >= 0):  # before any file: a bad k left a folder without summary.json
            raise ValueError(f"k must be an integer >= 0, got {k!r}")
        out = Path(out_dir)
        if out.exists() and not out.is_dir():  # NotADirectoryError from mkdir (the command line says the same)
            raise ValueError(f"{out} is a file: save writes a folder of tables; name a folder")
        (out / "matrices").mkdir(parents=True, exist_ok=True)
        written = [out / "pairs.csv", out / "attention_long.csv"]
        self.pairs.to_csv(written[0], index=False)
        self.long().to_csv(written[1], index=False)
        for stem, df in self.matrices().items():
            path = out / "matrices" / f"{stem}.csv"
            df.to_csv(path)
            written.append(path)
        if self.explanations:
            (out / "explanations").mkdir(exist_ok=True)
            for e in self.explanations:
                for path, df in ((out / "explanations" / f"row{e.row}.csv", e.long()),
                                 (out / "explanations" / f"row{e.row}_top.csv", e.top_keys())):
                    df.to_csv(path, index=False)
                    written.append(path)
        summary = out / "summary.json"
        write_json(summary, self.summary(k), default=_json_default)
        written.append(summary)
        return written


def _json_default(v: Any) -> Any:
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating,)):
        return float(v)
    if isinstance(v, np.bool_):
        return bool(v)
    raise TypeError(f"not JSON serialisable: {type(v).__name__}")


# ----------------------------------------------------------------------------- streaming a split
def _load_model(model: AutoInt | str | Path, tracking_uri: str | None = None
                ) -> tuple[AutoInt, dict[str, Any], dict[str, Any] | None]:
    """The model, what summary.json says of it, and its encoder state (None for an in-memory model)."""
    if isinstance(model, AutoInt):
        return model, {"model": "in-memory AutoInt"}, None
    from .checkpoint import CHECKPOINT_KEY, checkpoint_file, model_from_checkpoint, read_checkpoint

    with checkpoint_file(model, tracking_uri) as ckpt:
        contents = read_checkpoint(ckpt)
    loaded, _, _, encoder = model_from_checkpoint(contents, ckpt)
    from .files import scratch_root

    # what the model trained on (train.data_identity; None in a checkpoint from before it was recorded); a
    # checkpoint fetched for a model URI lies in a scratch folder removed when the command ends: not recorded
    # (summary.json named a path that no longer existed; the model URI is recorded as "model")
    return loaded, {"model": str(model), "checkpoint": None if scratch_root(ckpt) is not None else str(ckpt),
                    "trained_on": contents[CHECKPOINT_KEY].get("data")}, encoder


def split_file(net: AutoInt, data_dir: Path, split: str, encoder: dict[str, Any] | None = None
               ) -> tuple[Schema, Path]:
    """The processed folder's schema and ``{split}.parquet``, checked against the model's schema and, given the
    model's ``encoder`` state, its encoding (:meth:`Encoder.check_folder`)."""
    schema = Schema.load(data_dir / "schema.json")
    if schema.to_dict() != net.schema.to_dict():
        raise DataError(f"{data_dir / 'schema.json'}: differs from the schema the model was trained on; "
                        "use the processed folder the model was trained from")
    Encoder.check_folder(encoder, data_dir, "inspect")
    path = data_dir / f"{split}.parquet"
    if not path.is_file():
        raise MissingInput(f"{path}: no {split} split in this processed folder (run `autoint prepare`)")
    missing = [n for n in schema.names if n not in open_parquet(path).schema_arrow.names]
    if missing:
        raise DataError(f"{path}: no column for fields {missing[:5]} of {data_dir / 'schema.json'}{PREPARE_AGAIN}")
    return schema, path


def check_finite(batch: dict[str, Tensor], schema: Schema, path: Path, start: int) -> None:
    """A numeric value that is NaN or infinite (prepare writes none) turned every map, score and p-value into NaN
    without a word; it is refused, naming the file, the row (``start``: the batch's first row) and the field."""
    found = first_non_finite(batch, schema)
    if found is not None:
        raise DataError(f"{path}: row {start + found[0]} holds {found[2]} in numeric field {found[1]!r}, where "
                        f"prepare writes finite values only{PREPARE_AGAIN}")


def _table_batches(path: Path, columns: list[str], batch_size: int, rows: int | None) -> Iterator[pa.Table]:
    """Row-group-wise batches of at most ``batch_size`` rows, ``rows`` in all (None: every row)."""
    total = open_parquet(path).metadata.num_rows
    left = total if rows is None else min(rows, total)
    for rb in parquet_batches(path, batch_size=batch_size, columns=columns):
        if left <= 0:
            return
        table = pa.Table.from_batches([rb])
        if table.num_rows > left:
            table = table.slice(0, left)
        left -= table.num_rows
        yield table


def _share_of_uniform(v: float) -> str:
    """A departure from 1/F, relative to 1/F, as people read it: "0.08 % of 1/F", "12 x 1/F"."""
    return f"{100 * v:.2g} % of 1/F" if v < 1 else f"{v:.3g} x 1/F"


def _uniformity(acc: AttentionAccumulator, mean: np.ndarray, mean_by_label: dict[int, np.ndarray]
                ) -> dict[str, Any]:
    f = mean.shape[-1]
    labelled = {k: m for k, m in mean_by_label.items() if not np.isnan(m).any()}
    map_dev = max(float(np.abs(m - 1.0 / f).max()) * f for m in [mean, *labelled.values()])
    row_dev = float(acc.row_deviation_sum.sum()) / acc.rows
    # Each label's rows too: over all rows the majority class decides, and 4 % of clicked rows whose attention
    # departed from uniform by a whole 1/F read "indistinguishable from uniform".
    by_label = {LABEL_NAMES[k]: float(acc.row_deviation_sum[k]) / int(acc.count[k]) for k in (1, 0) if k in labelled}
    gap = float(np.abs(labelled[1] - labelled[0]).max()) * f if len(labelled) == 2 else None
    return {"uniform": bool(max([row_dev, *by_label.values()]) < UNIFORM_TOLERANCE), "row_deviation": round(row_dev, 6),
            "row_deviation_by_label": {k: round(v, 6) for k, v in by_label.items()},
            "map_deviation": round(map_dev, 6), "label_gap": None if gap is None else round(gap, 6),
            "entropy": round(acc.entropy_sum / acc.rows, 6),
            "tolerance": UNIFORM_TOLERANCE, "uniform_weight": 1.0 / f,
            "definition": "row_deviation: mean over rows of max over layers, heads, query and key of "
                          "|alpha - 1/F| * F (row_deviation_by_label: over each label's rows); map_deviation: the same "
                          "max over the mean maps (all rows and per label); label_gap: max |mean clicked - mean not "
                          "clicked| * F; entropy: mean row entropy / log F (1 = uniform); uniform when row_deviation, "
                          "over all rows and over each label's, < tolerance"}


def _label_values(path: Path, label: str, rows: int) -> np.ndarray:
    """The first ``rows`` labels of a split, in file order."""
    column = read_parquet_table(path, columns=[label]).column(label)
    return column.slice(0, rows).to_numpy(zero_copy_only=False)


@torch.no_grad()
def inspect_model(model: AutoInt | str | Path, data_dir: str | Path, split: str = "test", rows: int | None = None,
                  explain_rows: Sequence[int] = (), batch_size: int = 4096, permutations: int = PERMUTATIONS,
                  alpha: float = ALPHA, seed: int = 0, significance_rows: int = SIGNIFICANCE_ROWS,
                  tracking_uri: str | None = None) -> InspectionResult:
    """Stream ``split`` of the processed folder ``data_dir`` through ``model`` and tabulate its attention.

    ``model``: an :class:`~autoint.model.AutoInt`, a checkpoint, a run folder
    or an MLflow ``runs:/`` URI. ``rows`` caps the rows read (None: all);
    ``explain_rows`` are positions in the split whose full maps are kept.
    ``permutations`` label permutations (0: none) give each pair's p-value on
    the first ``significance_rows`` rows read; ``alpha`` is the family-wise
    level of ``significant``; ``seed`` fixes the permutations. ``tracking_uri``: the MLflow store of a
    ``runs:/`` or ``models:/`` URI given as ``model``.
    Memory: O(batch_size · L·H·F² + P·L·H·F² + P·significance_rows bytes), whatever the split's size.
    """
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    if rows is not None and not (is_int(rows) and rows >= 1):
        raise ValueError(f"rows must be a positive integer or None (all), got {rows!r}")
    if isinstance(explain_rows, (int, np.integer)):  # one row named as a number, not a sequence of them
        explain_rows = [explain_rows]
    # a string is not its characters' rows ("12" explained rows 1 and 2)
    rows_given = explain_rows
    explain_rows = [] if isinstance(rows_given, (str, bytes)) else list(rows_given)
    if isinstance(rows_given, (str, bytes)) or not all(is_int(r) for r in explain_rows):
        raise ValueError(f"explain_rows must be a row position or a sequence of them, got {rows_given!r}")
    if not is_int(permutations):
        raise ValueError(f"permutations must be an integer >= 0, got {permutations!r}")
    if not (is_int(batch_size) and batch_size >= 1):  # None or "100" was a TypeError from a comparison
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
    if permutations < 0:
        raise ValueError(f"permutations must be >= 0, got {permutations}")
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float, np.number)) or not 0 < alpha < 1:
        raise ValueError(f"alpha must be a number in (0, 1), got {alpha!r}")
    if not (is_int(significance_rows) and significance_rows >= 1):
        raise ValueError(f"significance_rows must be a positive integer, got {significance_rows!r}")
    if not (is_int(seed) and seed >= 0):  # numpy's own error came once the model was loaded, naming no seed
        raise ValueError(f"seed must be an integer >= 0, got {seed!r}")
    net, meta, encoder = _load_model(model, tracking_uri)
    trained_on = meta.pop("trained_on", None)  # not for summary.json: compared with the inspected folder below
    if not len(net.layers):
        raise DataError(f"{meta['model']}: the model has no interacting layers, hence no attention to inspect")
    data_dir = Path(data_dir)
    schema, path = split_file(net, data_dir, split, encoder)
    split_meta = open_parquet(path)
    label_in_file = schema.label in split_meta.schema_arrow.names
    columns = list(schema.names) + ([schema.label] if label_in_file else [])
    fields = list(schema.names)
    shape = (len(net.layers), net.config.num_heads, len(fields), len(fields))
    test: LabelPermutationTest | None = None
    skipped = None
    if not permutations:
        skipped = "permutations = 0"
    elif len(fields) < 2:  # one field: no pair to rank or test (the test's max over pairs failed, a traceback)
        skipped = "one field: no field pairs"
    elif not label_in_file:
        skipped = f"{path.name} has no {schema.label!r} column"
    else:
        total = split_meta.metadata.num_rows
        tested = min(total if rows is None else min(rows, total), significance_rows)
        y = _label_values(path, schema.label, tested) if tested else np.zeros(0)
        if 0 < int((y > 0.5).sum()) < len(y):
            test = LabelPermutationTest(y, permutations, shape, seed=seed)
        else:
            skipped = "the tested rows hold one label class only"

    was_training = net.training
    net.eval()
    acc = AttentionAccumulator(*shape[:3])
    wanted = sorted({int(r) for r in explain_rows})
    if any(r < 0 for r in wanted):
        raise ValueError(f"explain rows must be non-negative positions in the split, got {wanted}")
    explanations: list[RowExplanation] = []
    start = 0
    try:
        for table in _table_batches(path, columns, batch_size, rows):
            batch = tensors_from_table(table, schema)
            labels = batch.pop("label", torch.zeros(table.num_rows))  # (B,); no label: all counted as 0
            check_finite(batch, schema, path, start)
            bad = first_bad_label(labels)  # a label of 2 counted as a click, NaN as none, without a word
            if bad is not None:
                raise DataError(f"{path}: row {start + bad[0]} has label {bad[1]}; labels are 0 or 1, as prepare "
                                f"writes them{PREPARE_AGAIN}")
            try:
                logits, maps = net(batch, return_attention=True)  # (B,), L x (B, H, F, F)
            except IdOutOfRange as e:
                raise DataError(f"{path}: {e.at(start)}") from None
            acc.update(maps, labels)
            if test is not None and not test.done:
                test.update(maps)
            end = start + table.num_rows
            for r in (r for r in wanted if start <= r < end):
                b = r - start
                explanations.append(RowExplanation(
                    row=r, label=float(labels[b]) if label_in_file else None,
                    probability=float(torch.sigmoid(logits[b])),
                    maps=torch.stack([m[b] for m in maps]).double().numpy(),  # (L, H, F, F)
                    fields=fields))
            start = end
    finally:
        net.train(was_training)
    missing = [r for r in wanted if r >= start]
    if missing:
        raise DataError(f"explain rows {missing} are beyond the {start} rows read from {path}")
    if not acc.rows:
        raise DataError(f"{path}: no rows to inspect")

    mean_by_label = {0: acc.mean(0), 1: acc.mean(1)} if label_in_file else {
        0: np.full(acc.sum.shape[1:], np.nan), 1: np.full(acc.sum.shape[1:], np.nan)}
    mean, std = acc.mean(), acc.std()
    pairs = pair_scores(mean, std, mean_by_label[1], mean_by_label[0], fields)
    significance: dict[str, Any] = {"skipped": skipped} if skipped else {}
    if test is not None:
        raw, adjusted, z = test.p_values()  # in (i < j) order, as pair_scores builds its rows before sorting
        i, j = np.triu_indices(len(fields), k=1)
        names = np.asarray(fields)
        p_table = pd.DataFrame({"field_a": names[i], "field_b": names[j], "score_z": z, "p_value": raw,
                                "p_adjusted": adjusted, "significant": adjusted <= alpha})
        pairs = pairs.merge(p_table, on=["field_a", "field_b"], how="left", validate="one_to_one")
        significance = {
            "test": "label permutation of score" + (", exact: every arrangement of the labels once" if test.exact
                                                     else ""),
            "permutations": test.permutations, "exact": test.exact, "seed": seed,
            "rows": test.rows, "positives": test.positives, "alpha": alpha, "pairs": len(p_table),
            "correction": "single-step max-T (Westfall-Young), family-wise over all pairs",
            "significant_pairs": int((adjusted <= alpha).sum()),
            "smallest_p": test.smallest_p(),
            "arrangements": test.arrangements,
        }
        if test.rows < acc.rows:  # the score column is over every row inspected; its p-value over these
            significance["note"] = (f"the p-values test the scores of the first {test.rows:,} of the {acc.rows:,} "
                                    f"rows inspected (significance_rows); the score column is over all {acc.rows:,}")
        if split in FITTED_SPLITS and trained_on in (None, data_identity(data_dir)):  # the folder it trained on
            significance["caveat"] = FITTED_SPLITS[split]
    meta = {**meta, "data": str(data_dir.resolve()), "split": split}  # absolute: the file is logged to MLflow too
    return InspectionResult(fields=fields, rows=acc.rows, positives=int(acc.count[1]) if label_in_file else None,
                            mean=mean, std=std, mean_by_label=mean_by_label, pairs=pairs,
                            explanations=explanations, meta=meta, significance=significance or None,
                            uniformity=_uniformity(acc, mean, mean_by_label))
