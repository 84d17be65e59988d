"""Which fields does the model cross? ArchDetect: mixed differences of the model's own logit.

Attention maps (:mod:`autoint.inspection`) show where the model looks; this
module asks the model itself. ArchDetect (Tsang, Rambhatla and Liu, "How does
this interaction affect me? Interpretable attribution for feature
interactions", NeurIPS 2020, arXiv:2006.10965, Section 4.1) measures a pair's
interaction by the discrete mixed difference of the logit ``f``. For a row
``x*``, a baseline row ``x'`` and fields ``i < j``::

    Δ_ij(x*, x'; c) = f(x*_i, x*_j, c) - f(x'_i, x*_j, c) - f(x*_i, x'_j, c) + f(x'_i, x'_j, c)

where ``c`` holds every other field, taken from ``x*`` (context 1) or from
``x'`` (context 2). A field is swapped whole: a categorical id, a numeric
value or a multi-valued list. If ``f`` is a sum of one term per field,
``Δ_ij`` is exactly 0 for every pair and context. The pair score is the
paper's ``ω_ij`` with ``h = 1`` (discrete features), averaged over rows::

    archdetect_ij = 1/(2N) Σ_rows Σ_{c ∈ {x*, x'}} Δ_ij(x*, x'; c)²

with each row's baseline another row of the same sample, drawn at random.
Unlike the attention score it needs no labels, and it sees every route to the
logit (attention, the residual, the DNN of AutoInt+, the wide term).

Shape letters: N rows, F fields (schema order), P = F(F-1)/2 pairs,
V = 1 + F + P variants of one context (itself, each field swapped, each pair
swapped), so 2·N·V forward rows in all, run ``batch_size`` rows at a time.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import torch
from torch import Tensor

from .batch import tensors_from_table
from .config import is_int
from .data import SPLITS
from .datasets.errors import DataError
from .inspection import _load_model, _table_batches, check_finite, split_file
from .model import AutoInt
from .schema import CATEGORICAL, MULTI, NUMERIC

__all__ = ["archdetect", "draw_baselines", "variant_masks"]

# The batch key that holds each kind's fields (see autoint.batch).
_BATCH_KEYS = {CATEGORICAL: "categorical", NUMERIC: "numeric", MULTI: "multi"}


def draw_baselines(rows: int, seed: int) -> np.ndarray:
    """Each row's baseline: (N,) positions, uniform over the other rows, from ``numpy.random.default_rng(seed)``."""
    draw = np.random.default_rng(seed).integers(0, rows - 1, size=rows)
    return draw + (draw >= np.arange(rows))  # skip the row itself


def variant_masks(fields: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Which fields each variant of a context takes from the other row: (V, F) bool, and the pairs.

    Row 0 swaps nothing, rows 1..F swap one field, rows F+1.. swap the pair
    ``(i[p], j[p])`` (``np.triu_indices`` order, i < j).
    """
    i, j = np.triu_indices(fields, k=1)  # (P,), (P,)
    pairs = np.zeros((len(i), fields), dtype=bool)  # (P, F)
    pairs[np.arange(len(i)), i] = True
    pairs[np.arange(len(i)), j] = True
    masks = np.concatenate([np.zeros((1, fields), dtype=bool), np.eye(fields, dtype=bool), pairs])  # (V, F)
    return masks, i, j


def _read_rows(net: AutoInt, data_dir: Path, split: str, rows: int, batch_size: int,
               encoder: dict[str, Any] | None = None) -> dict[str, Tensor]:
    """The first ``rows`` rows of the split as the batch mapping the model takes (no label); ``encoder``: the
    model's encoder state, against which the folder's encoding is checked."""
    schema, path = split_file(net, data_dir, split, encoder)
    tables = list(_table_batches(path, list(schema.names), batch_size, rows))
    n = sum(t.num_rows for t in tables)
    if n < 2:
        raise DataError(f"{path}: {n} row{'s' * (n != 1)} read; ArchDetect needs at least 2 (each row's baseline "
                        "is another row)")
    batch = tensors_from_table(pa.concat_tables(tables), schema)
    check_finite(batch, schema, path, 0)
    return batch


def _gather(inputs: dict[str, Tensor], index: Tensor, columns: dict[str, Tensor]) -> dict[str, Tensor]:
    """Mix rows field by field: output row m, field f comes from input row ``index[m, f]``.

    ``index``: (M, F) row positions; ``columns[key]``: the schema positions of
    that batch key's fields, in the order the batch holds them.
    """
    out = {}
    for key, cols in columns.items():
        rows = index[:, cols]  # (M, Fk)
        out[key] = inputs[key][rows, torch.arange(len(cols), device=index.device)]  # (M, Fk) or (M, Fk, L)
    return out


@torch.no_grad()
def archdetect(model: AutoInt | str | Path, data_dir: str | Path, split: str = "test", rows: int = 256,
               seed: int = 0, batch_size: int = 8192, tracking_uri: str | None = None) -> pd.DataFrame:
    """Rank field pairs by ArchDetect's mixed-difference score on the first ``rows`` rows of ``split``.

    ``model``: an :class:`~autoint.model.AutoInt`, a checkpoint, a run folder
    or an MLflow ``runs:/`` URI. Each row's baseline is another of the rows
    read (:func:`draw_baselines`). Returns one row per
    unordered pair, best first, with the columns of
    :func:`autoint.inspection.pair_scores` (``rank, field_a, field_b``) and
    ``archdetect`` (see the module docstring), so the two tables merge on
    ``field_a, field_b``; its ``attrs["rows"]`` is the number of rows probed.
    Memory: O(N·F + batch_size·F) beside the model's
    activations for ``batch_size`` rows. Measured: 256 rows of a 40-field
    model (D = 16, one layer, 2 heads of 16; 2·256·821 = 420k forward rows)
    on one CPU thread of a shared, busy machine took 24-26 s with
    ``batch_size=1024`` and 59 s with 8192 (8192 rows of (H, F, F) attention
    maps outgrow the cache), so on CPU pass ``batch_size=1024``.
    """
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    if not is_int(rows) or rows < 1:
        raise ValueError(f"rows must be a positive integer, got {rows!r}")
    if not is_int(batch_size) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
    if not is_int(seed) or seed < 0:  # None drew unseeded baselines; -1 or 1.5 numpy's error, once loaded
        raise ValueError(f"seed must be an integer >= 0, got {seed!r}")
    net, _, encoder = _load_model(model, tracking_uri)
    data_dir = Path(data_dir)
    schema = net.schema
    device = next(net.parameters()).device
    inputs = {k: v.to(device)
              for k, v in _read_rows(net, data_dir, split, int(rows), batch_size, encoder).items()}
    n = len(next(iter(inputs.values())))
    fields = len(schema)
    columns = {}
    for kind, key in _BATCH_KEYS.items():
        positions = [p for p, f in enumerate(schema.fields) if f.kind == kind]
        if positions:
            columns[key] = torch.tensor(positions, device=device)

    baseline = draw_baselines(n, seed)  # (N,)
    # Context 2 of (x*, x') is context 1 of (x', x*): every row is once a context, once the other.
    context = torch.from_numpy(np.concatenate([np.arange(n), baseline])).to(device)  # (2N,)
    other = torch.from_numpy(np.concatenate([baseline, np.arange(n)])).to(device)  # (2N,)
    masks, pi, pj = variant_masks(fields)
    mask = torch.from_numpy(masks).to(device)  # (V, F)
    v = len(masks)
    single_i, single_j = torch.from_numpy(1 + pi).to(device), torch.from_numpy(1 + pj).to(device)  # (P,)
    per_group = max(1, batch_size // v)  # contexts whose variants fill one batch (at least one)

    total = torch.zeros(len(pi), dtype=torch.float64, device=device)  # (P,)
    was_training = net.training
    net.eval()
    try:
        for start in range(0, 2 * n, per_group):
            c, o = context[start:start + per_group], other[start:start + per_group]  # (g,)
            index = torch.where(mask, o[:, None, None], c[:, None, None]).reshape(-1, fields)  # (g*V, F)
            logits = torch.cat([net(_gather(inputs, index[k:k + batch_size], columns))
                                for k in range(0, len(index), batch_size)])  # (g*V,)
            f = logits.double().reshape(len(c), v)  # (g, V)
            delta = f[:, 1 + fields:] - f[:, single_i] - f[:, single_j] + f[:, :1]  # (g, P)
            total += delta.square().sum(0)
    finally:
        net.train(was_training)

    names = np.asarray(schema.names)
    table = pd.DataFrame({"field_a": names[pi], "field_b": names[pj],
                          "archdetect": (total / (2 * n)).cpu().numpy()})
    table = table.sort_values("archdetect", ascending=False, kind="stable").reset_index(drop=True)
    table.insert(0, "rank", np.arange(1, len(table) + 1))
    table.attrs["rows"] = n  # the rows probed: fewer than asked where the split holds fewer
    return table
