"""Encoded columns → the batch mapping the model takes.

A batch is ``{"categorical": (B, Fc) int32, "numeric": (B, Fn) float32,
"multi": (B, Fm, L) int32, "label": (B,) float32}`` (keys absent when the kind
has no field), the form :class:`autoint.model.AutoInt` takes. It is built from
encoded Parquet row groups (training, evaluation, inspection) and from the
encoder's numpy columns (scoring raw rows) by the same function. This module
imports torch, numpy and pyarrow only, so scoring stays light.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa
import torch
from torch import Tensor

from .schema import CATEGORICAL, MULTI, NUMERIC, Schema


def _list_matrix(col: Any, max_len: int) -> np.ndarray:
    """One multi-valued column → (N, max_len) int32, PAD-filled.

    ``col`` is an (N, L) array of ids (what :meth:`autoint.encoder.Encoder.encode_columns`
    gives) or an Arrow list column, fixed-size (the encoded splits) or variable.
    """
    if isinstance(col, np.ndarray):
        out = np.zeros((len(col), max_len), dtype=np.int32)
        out[:, : col.shape[1]] = col
        return out
    col = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    out = np.zeros((len(col), max_len), dtype=np.int32)
    values = col.flatten().to_numpy(zero_copy_only=False)
    if pa.types.is_fixed_size_list(col.type):
        width = col.type.list_size
        out[:, :width] = values.reshape(-1, width)
    else:  # variable-length lists: scatter by offsets
        offsets = col.offsets.to_numpy()
        lengths = np.minimum(np.diff(offsets), max_len)
        rows = np.repeat(np.arange(len(lengths)), lengths)
        pos = np.arange(lengths.sum()) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        starts = np.repeat(offsets[:-1], lengths)
        out[rows, pos] = values[starts + pos]
    return out


def tensors_from_columns(columns: Mapping[str, Any], schema: Schema) -> dict[str, Tensor]:
    """Encoded columns → the batch mapping the model takes (plus ``label`` if present).

    Scalar columns are numpy arrays or Arrow columns; multi-valued ones as
    :func:`_list_matrix` takes them. Columns are copied once, into the batch tensors.
    """
    missing = [n for n in schema.names if n not in columns]
    if missing:
        raise ValueError(f"encoded data lacks columns for fields {missing[:5]}")
    out: dict[str, Tensor] = {}
    n = len(columns[schema.names[0]])
    for key, kind, dtype in (("categorical", CATEGORICAL, np.int32), ("numeric", NUMERIC, np.float32)):
        names = [f.name for f in schema.of_kind(kind)]
        if names:
            matrix = np.empty((n, len(names)), dtype=dtype)
            for j, name in enumerate(names):
                matrix[:, j] = columns[name]
            out[key] = torch.from_numpy(matrix)
    multi = schema.of_kind(MULTI)
    if multi:
        max_len = max(f.max_len for f in multi)
        out["multi"] = torch.from_numpy(np.stack([_list_matrix(columns[f.name], max_len) for f in multi], axis=1))
    if schema.label in columns:
        out["label"] = torch.from_numpy(np.asarray(columns[schema.label], dtype=np.float32).copy())
    return out


def tensors_from_table(table: pa.Table, schema: Schema) -> dict[str, Tensor]:
    """An encoded Arrow table → the batch mapping the model takes (plus ``label`` if present)."""
    return tensors_from_columns(dict(zip(table.column_names, table.columns, strict=True)), schema)


def first_non_finite(batch: Mapping[str, Tensor], schema: Schema) -> tuple[int, str, float] | None:
    """``(row, field, value)`` of the first numeric value that is NaN or infinite (prepare writes none), or None."""
    numeric = batch.get("numeric")
    if numeric is None or bool(torch.isfinite(numeric).all()):
        return None
    row, col = (~torch.isfinite(numeric)).nonzero()[0].tolist()
    return row, [f.name for f in schema.fields if f.kind == NUMERIC][col], float(numeric[row, col])


def first_bad_label(labels: Tensor) -> tuple[int, float] | None:
    """``(row, label)`` of the first label that is neither 0 nor 1 (NaN included; prepare writes none), or None."""
    bad = (labels != 0) & (labels != 1)
    if not bool(bad.any()):
        return None
    row = int(bad.nonzero()[0])
    return row, float(labels[row])


def first_bad_id(batch: Mapping[str, Tensor], schema: Schema) -> tuple[str, int, str, int, int] | None:
    """``(kind, id, field, row, vocabulary size)`` of the first categorical or multi-valued id outside its field's
    vocabulary (prepare writes none; the model would look up another field's rows), or None."""
    for key, kind in (("categorical", CATEGORICAL), ("multi", MULTI)):
        ids = batch.get(key)
        fields = schema.of_kind(kind)
        if ids is None or not ids.numel() or not fields:
            continue
        sizes = torch.tensor([f.vocab_size for f in fields], dtype=torch.long)
        bad = (ids < 0) | (ids >= (sizes if ids.dim() == 2 else sizes.unsqueeze(-1)))
        if bool(bad.any()):
            where = bad.nonzero()[0].tolist()
            return key, int(ids[tuple(where)]), fields[where[1]].name, where[0], int(sizes[where[1]])
    return None
