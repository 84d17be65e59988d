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

On the synthetic planted-crosses data (``benchmarks/interaction_recovery.py``,
10 seeds, 4 crosses among 40 fields) ``score`` put all planted pairs in the top
4 most often, ``variability`` next, the raw mean ``attention`` least; see the
README for the figures. Any column can rank: ``InspectionResult.top_pairs(k, by=...)``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import torch
from torch import Tensor

from .batch import tensors_from_table
from .data import SPLITS
from .datasets.errors import DataError
from .model import AutoInt
from .schema import Schema

SCORE_COLUMNS = ("score", "variability", "attention", "attention_lift")
LABEL_NAMES = {0: "not_clicked", 1: "clicked"}
_EPS = 1e-12

__all__ = [
    "SCORE_COLUMNS",
    "AttentionAccumulator",
    "InspectionResult",
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

    def update(self, maps: Sequence[Tensor], labels: Tensor) -> None:
        """``maps``: L tensors (B, H, F, F); ``labels``: (B,) of 0/1."""
        a = torch.stack(list(maps), dim=1).double()  # (B, L, H, F, F)
        y = labels.reshape(-1) > 0.5  # (B,)
        for lab, rows in ((1, y), (0, ~y)):
            part = a[rows]  # (b, L, H, F, F)
            if len(part):
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
        return np.sqrt(np.clip(self.sumsq.sum(0) / n - m * m, 0.0, None))


def _column_baseline(m: np.ndarray) -> np.ndarray:
    """``m / mean_{k≠j} m_kj`` for (..., F, F) matrices: 1 = as much as an average field gets."""
    f = m.shape[-1]
    off = m * (1.0 - np.eye(f))
    base = off.sum(-2, keepdims=True) / max(f - 1, 1)  # (..., 1, F)
    return m / np.maximum(base, _EPS)


def _symmetric_average(m: np.ndarray) -> np.ndarray:
    """(L, H, F, F) → (F, F): ``(m_ij + m_ji) / 2`` averaged over layers and heads."""
    s = 0.5 * (m + np.swapaxes(m, -1, -2))
    return s.reshape(-1, *s.shape[-2:]).mean(0)


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
        m = self.maps.mean((0, 1))  # (F, F)
        rows = []
        for i, name in enumerate(self.fields):
            order = np.argsort(-m[i], kind="stable")[:k]
            for r, j in enumerate(order, 1):
                rows.append({"row": self.row, "field": name, "rank": r, "attends_to": self.fields[j],
                             "weight": float(m[i, j])})
        return pd.DataFrame(rows)

    def long(self) -> pd.DataFrame:
        """Every weight: columns row, layer, head, query, key, weight (layers and heads 1-based)."""
        return _long(self.maps, self.fields).assign(row=self.row)


def _select(maps: np.ndarray, layer: int | None, head: int | None) -> np.ndarray:
    """(L, H, F, F) → (F, F), picking a 1-based layer / head or averaging over it."""
    L, H = maps.shape[:2]
    if layer is not None and not 1 <= layer <= L:
        raise ValueError(f"layer must be in 1..{L}, got {layer}")
    if head is not None and not 1 <= head <= H:
        raise ValueError(f"head must be in 1..{H}, got {head}")
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
    positives: int
    mean: np.ndarray  # (L, H, F, F) over all rows
    std: np.ndarray  # (L, H, F, F)
    mean_by_label: dict[int, np.ndarray]  # label → (L, H, F, F); NaN where no row has it
    pairs: pd.DataFrame
    explanations: list[RowExplanation] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def num_layers(self) -> int:
        return int(self.mean.shape[0])

    @property
    def num_heads(self) -> int:
        return int(self.mean.shape[1])

    def matrix(self, layer: int | None = None, head: int | None = None, label: int | None = None) -> pd.DataFrame:
        """Mean attention, query × key; ``layer``/``head`` 1-based (None averages), ``label`` 0/1/None (all)."""
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

    def top_pairs(self, k: int = 10, by: str = "score") -> pd.DataFrame:
        if by not in SCORE_COLUMNS:
            raise ValueError(f"by must be one of {SCORE_COLUMNS}, got {by!r}")
        return self.pairs.sort_values(by, ascending=False, kind="stable").head(k).reset_index(drop=True)

    def long(self) -> pd.DataFrame:
        """Every mean weight: columns label (all / clicked / not_clicked), layer, head, query, key, weight."""
        parts = [_long(self.mean, self.fields).assign(label="all")]
        for label, name in LABEL_NAMES.items():
            if not np.isnan(self.mean_by_label[label]).any():
                parts.append(_long(self.mean_by_label[label], self.fields).assign(label=name))
        df = pd.concat(parts, ignore_index=True)
        return df[["label", "layer", "head", "query", "key", "weight"]]

    def summary(self, k: int = 10) -> dict[str, Any]:
        return {
            **self.meta,
            "rows": self.rows,
            "positives": self.positives,
            "layers": self.num_layers,
            "heads": self.num_heads,
            "fields": self.fields,
            "score": ("score_ij = mean over layers and heads of (|a+_ij - a-_ij| + |a+_ji - a-_ji|) / 2, "
                      "a+/a- the mean attention over clicked/unclicked rows; see autoint/inspection.py"
                      if self.positives and self.positives < self.rows else
                      "variability (no label contrast possible): see autoint/inspection.py"),
            "top_pairs": self.top_pairs(k).to_dict(orient="records"),
            "explained_rows": [e.row for e in self.explanations],
        }

    def save(self, out_dir: str | Path, k: int = 10) -> list[Path]:
        """Write the tables and ``summary.json`` into ``out_dir``; returns the files written.

        ``pairs.csv`` (every pair, all score columns), ``attention_long.csv``
        (every mean weight), ``matrices/*.csv`` (one wide matrix per
        heatmap), ``explanations/row{N}.csv`` and ``row{N}_top.csv``.
        """
        out = Path(out_dir)
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
        summary.write_text(json.dumps(self.summary(k), indent=2, default=_json_default) + "\n")
        written.append(summary)
        return written


def _json_default(v: Any) -> Any:
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating,)):
        return float(v)
    raise TypeError(f"not JSON serialisable: {type(v).__name__}")


# ----------------------------------------------------------------------------- streaming a split
def _load_model(model: AutoInt | str | Path) -> tuple[AutoInt, dict[str, Any]]:
    if isinstance(model, AutoInt):
        return model, {"model": "in-memory AutoInt"}
    from .checkpoint import load_checkpoint, resolve_checkpoint

    ckpt = resolve_checkpoint(model)
    loaded, _, _, _ = load_checkpoint(ckpt)
    return loaded, {"model": str(model), "checkpoint": str(ckpt)}


def _table_batches(path: Path, columns: list[str], batch_size: int, rows: int | None) -> Iterator[pa.Table]:
    """Row-group-wise batches of at most ``batch_size`` rows, ``rows`` in all (None: every row)."""
    pf = pq.ParquetFile(path)
    left = pf.metadata.num_rows if rows is None else min(rows, pf.metadata.num_rows)
    for rb in pf.iter_batches(batch_size=batch_size, columns=columns):
        if left <= 0:
            return
        table = pa.Table.from_batches([rb])
        if table.num_rows > left:
            table = table.slice(0, left)
        left -= table.num_rows
        yield table


@torch.no_grad()
def inspect_model(model: AutoInt | str | Path, data_dir: str | Path, split: str = "test", rows: int | None = None,
                  explain_rows: Sequence[int] = (), batch_size: int = 4096) -> InspectionResult:
    """Stream ``split`` of the processed folder ``data_dir`` through ``model`` and tabulate its attention.

    ``model``: an :class:`~autoint.model.AutoInt`, a checkpoint, a run folder
    or an MLflow ``runs:/`` URI. ``rows`` caps the rows read (None: all);
    ``explain_rows`` are positions in the split whose full maps are kept.
    Memory: O(batch_size · L·H·F² + L·H·F²), whatever the split's size.
    """
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    if rows is not None and rows < 1:
        raise ValueError(f"rows must be a positive number or None, got {rows}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be positive, got {batch_size}")
    net, meta = _load_model(model)
    if not len(net.layers):
        raise DataError(f"{meta['model']}: the model has no interacting layers, hence no attention to inspect")
    data_dir = Path(data_dir)
    schema = Schema.load(data_dir / "schema.json")
    if schema.to_dict() != net.schema.to_dict():
        raise DataError(f"{data_dir / 'schema.json'}: differs from the schema the model was trained on; "
                         "inspect the processed folder the model was trained from")
    path = data_dir / f"{split}.parquet"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no {split} split in this processed folder (run `autoint prepare`)")
    label_in_file = schema.label in pq.ParquetFile(path).schema_arrow.names
    columns = list(schema.names) + ([schema.label] if label_in_file else [])

    was_training = net.training
    net.eval()
    fields = list(schema.names)
    acc = AttentionAccumulator(len(net.layers), net.config.num_heads, len(fields))
    wanted = sorted({int(r) for r in explain_rows})
    if any(r < 0 for r in wanted):
        raise ValueError(f"explain rows must be non-negative positions in the split, got {wanted}")
    explanations: list[RowExplanation] = []
    start = 0
    try:
        for table in _table_batches(path, columns, batch_size, rows):
            batch = tensors_from_table(table, schema)
            labels = batch.pop("label", torch.zeros(table.num_rows))  # (B,); no label: all counted as 0
            logits, maps = net(batch, return_attention=True)  # (B,), L x (B, H, F, F)
            acc.update(maps, labels)
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
    meta = {**meta, "data": str(data_dir), "split": split}
    return InspectionResult(fields=fields, rows=acc.rows, positives=int(acc.count[1]) if label_in_file else 0,
                            mean=mean, std=std, mean_by_label=mean_by_label, pairs=pairs,
                            explanations=explanations, meta=meta)
