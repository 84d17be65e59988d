"""Fitted encodings: vocabularies, numeric transforms and the encoder that holds them.

The encoder is fit by :func:`autoint.preprocess.prepare` (counts come from
the engine, see :mod:`autoint.engine`) and encodes raw rows for scoring. Its
vocabularies are data: one Parquet table ``vocabulary.parquet`` (``field``,
``value``, ``count``, rows in id order per field) beside a small
``encoder.json`` holding everything else, so any engine can read them and a
checkpoint carries them as a file's bytes, not as pickled lists.

Lookups use an index built once per vocabulary (a pandas hash index over the
values), so encoding one raw row costs the same against 1k or 10M values.

Index conventions (:mod:`autoint.schema`): ``PAD`` = 0 (list padding only),
``OOV`` = 1 (rarer than ``data.min_count`` in train, or unseen), ``MISSING`` = 2,
fitted values from ``FIRST_VALUE`` = 3 on, most frequent first (ties by value).

Numeric transforms (fit on train only):

* ``criteo`` (Song et al., 2019, after the Criteo winners): z > 2 → floor(ln(z)²), else z;
* ``log1p``: sign(z)·ln(1 + |z|);
* ``standardize``: (z − mean) / std with train mean and std (std 0 → 1);
* ``none``: z.

A missing (or non-finite) numeric value becomes 0.0 *after* the transform
(the train mean, for ``standardize``).

``bucket`` makes a numeric field categorical (FuxiCTR's ``convert_to_bucket``,
how its Criteo benchmarks feed the integer features): z > 2 → floor(ln(z)²),
else floor(z), as a value with a vocabulary of its own (``data.min_count``
applies; missing → ``MISSING``). The model then embeds each bucket instead of
scaling one embedding by the number (:func:`bucket_ids`). Above 2 the bucket is
read off fixed edges exp(√k), so a value on an edge gets the same bucket on
every machine, whatever its ``log`` rounds to.
"""

from __future__ import annotations

import decimal
import io
import json
import logging
import math
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from autoint.config import DataConfig
from autoint.datasets import make_reader
from autoint.datasets.base import (
    SCALAR_TRANSFORMS,
    SMALL_BATCH,
    NamesClash,
    RawReader,
    category_array,
    list_array,
    numeric_array,
)
from autoint.datasets.errors import PREPARE_AGAIN as AGAIN
from autoint.datasets.errors import DataError
from autoint.datasets.text import read_parquet_table
from autoint.files import read_json, write_json
from autoint.schema import CATEGORICAL, FIRST_VALUE, MISSING, MULTI, NUMERIC, OOV, FieldSpec, Schema

log = logging.getLogger(__name__)

ENCODER_VERSION = 2
# Written instead of 2 when a field is bucketed: an autoint from before "bucket" refuses the file rather than
# reading the field as a plain categorical one (and its numbers as unseen strings).
BUCKET_ENCODER_VERSION = 3
_VOCABULARY_FILE_VERSIONS = (ENCODER_VERSION, BUCKET_ENCODER_VERSION)  # the vocabulary in its own Parquet file
VOCABULARY_FILE = "vocabulary.parquet"
VOCABULARY_SCHEMA = pa.schema([("field", pa.string()), ("value", pa.string()), ("count", pa.int64())])


_COMPACT_EVERY = 16  # chunk-level counts merged every this many chunks


# --------------------------------------------------------------------------- vocabulary
class Vocabulary:
    """String values → int32 ids, fit on train (sklearn style: learned state ends in ``_``).

    Fit either from counts the engine made (:meth:`from_counts`) or in process,
    chunk by chunk (``partial_fit`` then ``finalize``); both keep the values seen
    at least ``min_count`` times, ordered by descending count then value.
    ``transform`` maps missing → ``MISSING``, rare / unseen → ``OOV`` and never
    raises; it looks values up in a hash index built once (:attr:`index_`).
    """

    def __init__(self, min_count: int = 1) -> None:
        if not isinstance(min_count, int) or min_count < 1:
            raise ValueError(f"min_count must be an integer >= 1, got {min_count!r}")
        self.min_count = min_count
        self._parts: list[pa.Table] = []
        self._values: pa.Array | None = None  # kept values, in id order
        self._counts: np.ndarray | None = None
        self.n_distinct_: int = 0  # distinct values seen in train, rare ones included
        self._index: pd.Index | None = None
        self.index_builds_ = 0  # how often the lookup index was built (once per vocabulary)

    # --- fitting ---------------------------------------------------------------------
    @classmethod
    def from_counts(cls, values: pa.Array, counts: np.ndarray, min_count: int = 1,
                    n_distinct: int | None = None) -> Vocabulary:
        """A fitted vocabulary from (value, count) pairs, kept and ordered by the rule above."""
        v = cls(min_count)
        table = pa.table({"value": category_array(values), "count": pa.array(np.asarray(counts, dtype=np.int64))})
        v._fix(table, n_distinct)
        return v

    def partial_fit(self, values: Any) -> Vocabulary:
        """Count a chunk of values (``None`` / NaN / null are missing and not counted)."""
        if self._values is not None:
            raise RuntimeError("Vocabulary is finalized; partial_fit needs a fresh one")
        vc = pc.value_counts(category_array(values))
        v, c = vc.field("values"), vc.field("counts")
        valid = pc.is_valid(v)
        part = pa.table({"value": v.filter(valid), "count": c.filter(valid).cast(pa.int64())})
        if part.num_rows:
            self._parts.append(part)
        if len(self._parts) >= _COMPACT_EVERY:
            self._parts = [self._merged()]
        return self

    def _merged(self) -> pa.Table:
        if not self._parts:
            return pa.table({"value": pa.array([], pa.string()), "count": pa.array([], pa.int64())})
        if len(self._parts) == 1:
            return self._parts[0]
        agg = pa.concat_tables(self._parts).group_by("value").aggregate([("count", "sum")])
        return pa.table({"value": agg.column("value"), "count": agg.column("count_sum")})

    def finalize(self, min_count: int | None = None) -> Vocabulary:
        """Fix the vocabulary: values with count >= ``min_count`` in a deterministic order."""
        if self._values is not None:  # its counts are gone (a second call emptied it, every value then OOV)
            raise RuntimeError("Vocabulary is finalized already; to try another min_count, fit a fresh one "
                               "(or Vocabulary.from_counts of its values_ and counts_)")
        if min_count is not None:
            self.min_count = min_count
        counts = self._merged()
        self._parts = []
        self._fix(counts, None)
        return self

    def _fix(self, counts: pa.Table, n_distinct: int | None) -> None:
        valid = counts.filter(pc.is_valid(counts.column("value")))
        self.n_distinct_ = int(valid.num_rows if n_distinct is None else n_distinct)
        kept = valid.filter(pc.greater_equal(valid.column("count"), self.min_count))
        kept = kept.sort_by([("count", "descending"), ("value", "ascending")])
        self._values = kept.column("value").combine_chunks()
        self._counts = kept.column("count").to_numpy()
        self._index = None

    # --- views -------------------------------------------------------------------------
    @property
    def values_(self) -> list[str]:
        self._check_fitted()
        return self._values.to_pylist()

    @property
    def counts_(self) -> list[int]:
        self._check_fitted()
        return self._counts.tolist()

    @property
    def vocab_size_(self) -> int:
        """Every id a transform can return: PAD, OOV, MISSING and the fitted values."""
        self._check_fitted()
        return FIRST_VALUE + len(self._values)

    def _check_fitted(self) -> None:
        if self._values is None:
            raise RuntimeError("Vocabulary is not fitted: call finalize() after partial_fit()")

    def __repr__(self) -> str:
        if self._values is None:
            return f"Vocabulary(min_count={self.min_count}, not fitted)"
        return f"Vocabulary({len(self._values):,} values of {self.n_distinct_:,} seen, min_count={self.min_count})"

    @property
    def index_(self) -> pd.Index:
        """Value → position, a hash index built on first use and kept."""
        self._check_fitted()
        if self._index is None:
            self._index = pd.Index(self._values.to_numpy(zero_copy_only=False), dtype=object)
            self._index.get_indexer([])  # builds the hash table now, not on the first request
            self.index_builds_ += 1
        return self._index

    def transform(self, values: Any) -> np.ndarray:
        """Values → int32 ids (missing → MISSING, unknown → OOV)."""
        if isinstance(values, (list, np.ndarray)) and len(values) <= SMALL_BATCH:
            out = self._transform_few(values)
            if out is not None:
                return out
        arr = category_array(values)
        pos = self.index_.get_indexer(arr.to_numpy(zero_copy_only=False))
        out = np.where(pos >= 0, pos + FIRST_VALUE, OOV).astype(np.int32)
        if arr.null_count:
            out[arr.is_null().to_numpy(zero_copy_only=False)] = MISSING
        return out

    def _transform_few(self, values: list | np.ndarray) -> np.ndarray | None:
        """A handful of strings looked up one by one in the index (a served request); None if not all strings."""
        index = self.index_
        out = np.empty(len(values), dtype=np.int32)
        for i, v in enumerate(values):
            if v is None or (isinstance(v, float) and v != v):
                out[i] = MISSING
            elif not isinstance(v, str):
                return None
            else:
                try:
                    out[i] = index.get_loc(v) + FIRST_VALUE
                except KeyError:
                    out[i] = OOV
        return out

    # --- persistence --------------------------------------------------------------------
    def table(self, field: str) -> pa.Table:
        """The kept values as rows of ``vocabulary.parquet`` (id = FIRST_VALUE + row position)."""
        self._check_fitted()
        n = len(self._values)
        return pa.table({"field": pa.array([field] * n, pa.string()), "value": self._values,
                         "count": pa.array(self._counts, pa.int64())}, schema=VOCABULARY_SCHEMA)

    @classmethod
    def from_table(cls, values: pa.Array, counts: pa.Array, min_count: int, n_distinct: int) -> Vocabulary:
        """Rows of ``vocabulary.parquet`` (already in id order) → a fitted vocabulary."""
        v = cls(min_count)
        v._values = values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values
        v._counts = np.asarray(counts.to_numpy(zero_copy_only=False), dtype=np.int64)
        v.n_distinct_ = int(n_distinct)
        return v

    def to_dict(self) -> dict[str, Any]:
        self._check_fitted()
        return {"min_count": self.min_count, "n_distinct": self.n_distinct_,
                "values": self.values_, "counts": self.counts_}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Vocabulary:
        values = pa.array([str(x) for x in d["values"]], pa.string())
        counts = pa.array([int(x) for x in d.get("counts", [0] * len(values))], pa.int64())
        return cls.from_table(values, counts, int(d["min_count"]), int(d.get("n_distinct", len(values))))


# --------------------------------------------------------------------------- numeric
FLOAT32_RANGE = (-float(np.finfo(np.float32).max), float(np.finfo(np.float32).max))


def _to_float32_range(x: float) -> float:
    """``x`` clipped into float32's finite range: past it, the model's input would be inf (and the engine's cast
    to FLOAT refuses it)."""
    return min(max(float(x), FLOAT32_RANGE[0]), FLOAT32_RANGE[1])


# The transforms whose arithmetic ``prepare`` computes with :meth:`NumericTransform.arithmetic` while staging
# (element-wise functions of one value); the others (``standardize``, ``none``) are one subtraction and one
# division, which the engine rounds as numpy does.
STAGED_TRANSFORMS = ("criteo", "log1p")


class NumericTransform:
    """One numeric field's transform (see the module docstring); missing → 0.0 after it."""

    def __init__(self, kind: str = "none") -> None:
        if kind not in SCALAR_TRANSFORMS:
            raise ValueError(f"numeric transform must be one of {SCALAR_TRANSFORMS}, got {kind!r}")
        self.kind = kind
        self._n, self._mean, self._m2 = 0, 0.0, 0.0
        self.mean_: float | None = None
        self.std_: float | None = None
        # The smallest and largest transformed train value: a value scored later is clipped into it, so an
        # outlier never seen in training (a timestamp in milliseconds, 1e30) cannot scale its embedding past
        # anything trained, to a probability of exactly 1 or NaN. None (a transform saved before): no clip.
        self.range_: tuple[Any, Any] | None = None

    def partial_fit(self, values: np.ndarray) -> NumericTransform:
        """Accumulate mean / variance (Chan et al.'s pairwise update) for ``standardize``."""
        if self.kind != "standardize":
            return self
        v = np.asarray(values, dtype=np.float64)
        v = v[np.isfinite(v)]
        if v.size == 0:
            return self
        n, mean, m2 = v.size, float(v.mean()), float(((v - v.mean()) ** 2).sum())
        tot = self._n + n
        delta = mean - self._mean
        self._mean += delta * n / tot
        self._m2 += m2 + delta * delta * self._n * n / tot
        self._n = tot
        return self

    def fit_moments(self, n: int, mean: float, std: float) -> NumericTransform:
        """Fit from the count, mean and population standard deviation of the finite train values (as the
        engine gives them; a variance could overflow where the values' spread does not)."""
        if self.kind == "standardize":
            self._n = int(n)
            self.mean_ = float(mean) if n else 0.0
            self.std_ = float(std) if n and 0 < std < math.inf else 1.0
        return self

    def finalize(self) -> NumericTransform:
        if self.kind == "standardize" and self.mean_ is None:
            self.mean_ = self._mean if self._n else 0.0
            std = float(np.sqrt(self._m2 / self._n)) if self._n else 0.0
            self.std_ = std if std > 0 else 1.0
        return self

    def fit_range(self, low: float | None, high: float | None) -> NumericTransform:
        """The transformed train values' smallest and largest (None, None: no finite train value, no clip
        but to float32's range), within float32's range (the model's input)."""
        self.range_ = None if low is None or high is None else (_to_float32_range(low), _to_float32_range(high))
        return self

    def arithmetic(self, values: Any) -> np.ndarray:
        """The transform before the clip and the fill of missing values (float64; NaN or ±inf where the value
        is missing or infinite). ``prepare`` stages this for the ``criteo`` and ``log1p`` transforms
        (:data:`STAGED_TRANSFORMS`), so training and scoring round alike: the engine's ``ln`` and ``^`` gave
        other floats near a bucket edge (``floor(ln(z)^2)``: 238 where this gives 237) and for tiny values
        (``ln(1 + z)`` of 1e-17 is 0)."""
        z = numeric_array(values)
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            if self.kind == "criteo":
                return np.where(z > 2, np.floor(np.log(np.where(z > 2, z, 3.0)) ** 2), z)
            if self.kind == "log1p":
                return np.sign(z) * np.log1p(np.abs(z))
            if self.kind == "standardize":
                if self.mean_ is None:
                    raise RuntimeError("standardize transform is not fitted: call finalize()")
                return (z - self.mean_) / self.std_
            return z.copy()

    def transform(self, values: np.ndarray) -> np.ndarray:
        z = np.asarray(values, dtype=np.float64)
        # A finite value whose transform overflows (1e308 standardized by a std below 1) is clipped like any other
        # large value; only a missing or infinite input is missing (engine.numeric_sql: the same rule)
        out = self.arithmetic(z)
        finite = np.isfinite(z)
        np.clip(out, *(self.range_ or FLOAT32_RANGE), out=out)
        out[~finite] = 0.0
        return out.astype(np.float32)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"transform": self.kind}
        if self.kind == "standardize":
            d.update(mean=self.mean_, std=self.std_)
        if self.range_ is not None:
            d["range"] = list(self.range_)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> NumericTransform:
        t = cls(d["transform"])
        if t.kind == "standardize":
            t.mean_, t.std_ = float(d["mean"]), float(d["std"])
        if d.get("range") is not None:
            t.fit_range(*d["range"])
        return t


def transform_fields(transforms: list[NumericTransform], values: np.ndarray) -> np.ndarray:
    """Several fields at once: row j of the (k, n) ``values`` through ``transforms[j]``.

    One vectorised call per transform kind instead of one per field (a served
    row has a dozen numeric fields of one value each); ``standardize`` broadcasts
    the fields' means and stds.
    """
    out = np.empty(values.shape, dtype=np.float32)
    for kind in dict.fromkeys(t.kind for t in transforms):
        rows = [j for j, t in enumerate(transforms) if t.kind == kind]
        group = NumericTransform(kind)
        if kind == "standardize":
            if any(transforms[j].mean_ is None for j in rows):
                raise RuntimeError("standardize transform is not fitted: call finalize()")
            group.mean_ = np.array([[transforms[j].mean_] for j in rows])  # (k', 1)
            group.std_ = np.array([[transforms[j].std_] for j in rows])
        bounds = np.array([transforms[j].range_ or FLOAT32_RANGE for j in rows])  # (k', 2)
        group.range_ = (bounds[:, :1], bounds[:, 1:])
        out[rows] = group.transform(values[rows])
    return out


BUCKET = "bucket"
BUCKET_LOW = -(2**31)  # values below share its bucket (buckets are int32)
_EXACT_EDGES = 4096  # buckets whose lower edge is exact (values up to e^64 ≈ 6e27)
_bucket_edges: np.ndarray | None = None


def _edges() -> np.ndarray:
    """For k = 0, 1, ... up to the largest float, then inf: the lowest value of bucket k above 2.

    Up to :data:`_EXACT_EDGES` the smallest float z with ln(z)² ≥ k, from exp(√k) to 40 digits (``decimal``,
    exact on any machine); above, libm's exp(√k). Built once per process (~0.1 s)."""
    global _bucket_edges
    if _bucket_edges is None:
        context = decimal.Context(prec=40)
        edges = []
        for k in range(_EXACT_EDGES):
            exact = context.exp(context.sqrt(decimal.Decimal(k)))
            edge = float(exact)
            edges.append(edge if decimal.Decimal(edge) >= exact else math.nextafter(edge, math.inf))
        last = int(math.log(sys.float_info.max) ** 2)  # 503,791: the bucket of the largest float
        edges.extend(math.exp(math.sqrt(k)) for k in range(_EXACT_EDGES, last + 1))
        _bucket_edges = np.array([*edges, math.inf, math.inf])
    return _bucket_edges


def bucket_ids(values: Any) -> tuple[np.ndarray, np.ndarray]:
    """Numeric values → (int32 buckets, mask of finite values): z > 2 → floor(ln(z)²), else floor(z)
    (see the module docstring). What ``prepare`` stages and what a served row is encoded with."""
    z = numeric_array(values)
    shape, z = z.shape, z.reshape(-1)
    ok = np.isfinite(z)
    small = np.clip(z, BUCKET_LOW, 2.0)
    small[~ok] = 0.0
    out = np.floor(small, out=small).astype(np.int32)
    big = np.flatnonzero(ok & (z > 2))  # ln and the edges only where they apply (2.4x faster on Criteo's columns)
    if len(big):
        z = z[big]
        edges = _edges()
        k = np.log(z)
        k = np.floor(np.square(k, out=k), out=k).astype(np.int64)  # off by at most one at an edge
        np.clip(k, 0, len(edges) - 3, out=k)
        for _ in range(2):
            k -= z < edges[k]
            k += z >= edges[k + 1]
        out[big] = k
    return out.reshape(shape), ok.reshape(shape)


def bucket_values(values: Any) -> pa.Array:
    """:func:`bucket_ids` as categorical values: Arrow strings, null where missing or not finite."""
    ids, ok = bucket_ids(values)
    return pc.cast(pa.array(ids, mask=~ok), pa.string())


def criteo_transform(z: np.ndarray) -> np.ndarray:
    """The paper's transform on its own: z > 2 → floor(ln(z)²), else z."""
    return NumericTransform("criteo").transform(z)


# --------------------------------------------------------------------------- multi-valued
def _list_lengths(arr: pa.Array) -> np.ndarray:
    return pc.fill_null(pc.list_value_length(arr), 0).to_numpy(zero_copy_only=False).astype(np.int64)


def encode_lists(col: Any, vocab: Vocabulary, max_len: int) -> np.ndarray:
    """Column of lists → (n, max_len) int32 ids, PAD-filled, truncated; empty → [MISSING, PAD, ...]."""
    arr = list_array(col)
    n = len(arr)
    out = np.zeros((n, max_len), dtype=np.int32)
    lengths = _list_lengths(arr)
    out[lengths == 0, 0] = MISSING
    flat = pc.list_flatten(arr)  # null lists emit nothing, as their length 0 says
    if len(flat):
        ids = vocab.transform(flat)
        rows = np.repeat(np.arange(n), lengths)
        pos = np.arange(len(flat)) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        keep = pos < max_len
        out[rows[keep], pos[keep]] = ids[keep]
    return out


# --------------------------------------------------------------------------- encoder
class Encoder:
    """Schema + vocabularies + numeric transforms + the reader settings to re-read raw rows.

    Fit by :func:`autoint.preprocess.prepare` from the engine's counts; :meth:`transform` encodes
    any canonical frame (unseen values → OOV, never an error); :meth:`encode_rows`
    does the same for user rows, through the reader's ``from_frame``.
    Saved as ``encoder.json`` plus ``vocabulary.parquet`` (no pickle).
    """

    def __init__(self, fields: Iterable[FieldSpec], reader: dict[str, Any], transforms: dict[str, str],
                 min_count: int = 1, max_list_len: int | None = None) -> None:
        self.fields = tuple(fields)
        self.reader_settings = dict(reader)
        self.min_count = min_count
        self.max_list_len = max_list_len
        self.vocabularies_: dict[str, Vocabulary] = {}
        self.numeric_: dict[str, NumericTransform] = {}
        self.max_len_: dict[str, int] = {}
        # Numeric fields under the ``bucket`` transform: categorical from here on, their raw values numbers.
        self.bucketed = frozenset(f.name for f in self.fields if f.kind == NUMERIC and transforms.get(f.name) == BUCKET)
        self.fields = tuple(FieldSpec(f.name, CATEGORICAL) if f.name in self.bucketed else f for f in self.fields)
        for f in self.fields:
            if f.kind == NUMERIC:
                self.numeric_[f.name] = NumericTransform(transforms.get(f.name, "none"))
            else:
                self.vocabularies_[f.name] = Vocabulary(min_count)
                if f.kind == MULTI:
                    self.max_len_[f.name] = 1
        self.fitted_ = False
        self._reader: RawReader | None = None

    def __repr__(self) -> str:
        kinds = ", ".join(f"{n} {kind}" for kind in (CATEGORICAL, NUMERIC, MULTI)
                          if (n := sum(f.kind == kind for f in self.fields))) or "no fields"
        head = f"Encoder({self.reader_settings.get('format', 'unknown format')!r}: {kinds}"
        if not self.fitted_:
            return f"{head}; not fitted)"
        values = sum(v.vocab_size_ - FIRST_VALUE for v in self.vocabularies_.values())
        return f"{head}; {values:,} vocabulary values (min_count {self.min_count}))"

    @classmethod
    def for_reader(cls, reader: RawReader, data_cfg: DataConfig) -> Encoder:
        """An unfitted encoder for ``reader``'s fields with the config's settings resolved."""
        default = data_cfg.numeric_transform or reader.default_numeric_transform
        transforms = {f.name: reader.field_transform(f.name) or default for f in reader.fields if f.kind == NUMERIC}
        settings = {"format": data_cfg.format, "include_ids": bool(data_cfg.include_ids),
                    "columns": getattr(reader, "columns", None) or data_cfg.columns}
        return cls(reader.fields, settings, transforms, data_cfg.min_count, data_cfg.max_list_len)

    # --- views -----------------------------------------------------------------------
    @property
    def schema(self) -> Schema:
        """The fitted schema: vocab sizes and list lengths filled in."""
        self._check_fitted()
        out = []
        for f in self.fields:
            if f.kind == NUMERIC:
                out.append(FieldSpec(f.name, NUMERIC))
            else:
                out.append(FieldSpec(f.name, f.kind, self.vocabularies_[f.name].vocab_size_,
                                     self.max_len_.get(f.name, 1)))
        return Schema(tuple(out), label="label")

    def arrow_schema(self) -> pa.Schema:
        cols = [pa.field("label", pa.float32())]
        for f in self.fields:
            if f.kind == CATEGORICAL:
                cols.append(pa.field(f.name, pa.int32()))
            elif f.kind == NUMERIC:
                cols.append(pa.field(f.name, pa.float32()))
            else:
                cols.append(pa.field(f.name, pa.list_(pa.int32(), self.max_len_[f.name])))
        return pa.schema(cols)

    def _check_fitted(self) -> None:
        if not self.fitted_:
            raise RuntimeError("Encoder is not fitted: autoint.preprocess.prepare fits it on a log's train rows")

    # --- encoding ---------------------------------------------------------------------
    def transform(self, frame: pd.DataFrame | pa.Table | dict[str, Any]) -> pa.Table:
        """Canonical raw frame (or raw Arrow table) → encoded Arrow table.

        The ``label`` column is there only when the input has one.
        """
        columns = self.encode_columns(frame)
        arrays = [pa.FixedSizeListArray.from_arrays(pa.array(col.reshape(-1)), col.shape[1]) if col.ndim == 2
                  else pa.array(col) for col in columns.values()]  # 2-d: a multi-valued field's (n, max_len) ids
        return pa.Table.from_arrays(arrays, names=list(columns))

    def encode_columns(self, frame: pd.DataFrame | pa.Table | dict[str, Any]) -> dict[str, np.ndarray]:
        """:meth:`transform` as numpy columns: ``label`` float32 (if present), categorical
        int32 ids, numeric float32 values, multi-valued (n, max_len) int32 ids."""
        self._check_fitted()
        present = _names(frame)
        absent = [f.name for f in self.fields if f.name not in present]
        if absent:
            raise DataError(f"rows to encode lack column {absent[0]!r} (expected: {[f.name for f in self.fields]})")
        out: dict[str, np.ndarray] = {}
        if "label" in present:
            out["label"] = numeric_array(_column(frame, "label")).astype(np.float32)
        numeric = [f.name for f in self.fields if f.kind == NUMERIC]
        raw = np.array([numeric_array(_column(frame, name)) for name in numeric])  # (Fn, n)
        values = transform_fields([self.numeric_[name] for name in numeric], raw) if numeric else []
        numeric_rows = dict(zip(numeric, values, strict=True))  # (n,) float32 views of one array
        buckets = self._bucket_columns(frame)
        for f in self.fields:
            if f.kind == NUMERIC:
                out[f.name] = numeric_rows[f.name]
            elif f.kind == CATEGORICAL:
                col = buckets[f.name] if f.name in self.bucketed else _column(frame, f.name)
                out[f.name] = self.vocabularies_[f.name].transform(col)
            else:
                out[f.name] = encode_lists(_column(frame, f.name), self.vocabularies_[f.name], self.max_len_[f.name])
        return out

    def _bucket_columns(self, frame: pd.DataFrame | pa.Table | dict[str, Any]) -> dict[str, Any]:
        """The bucketed fields' values, all fields in one vectorised call (a served row has a dozen): Arrow
        strings, or lists of str / None for a few rows (the vocabulary's per-value path)."""
        names = [f.name for f in self.fields if f.name in self.bucketed]
        if not names:
            return {}
        raw = np.array([numeric_array(_column(frame, name)) for name in names])  # (Fb, n)
        n = raw.shape[1]
        flat = bucket_values(raw.reshape(-1))
        return {name: flat.slice(j * n, n).to_pylist() if n <= SMALL_BATCH else flat.slice(j * n, n)
                for j, name in enumerate(names)}

    def build_lookups(self) -> Encoder:
        """Build every vocabulary's lookup index now (a server does this at load, not on its first request)."""
        for vocab in self.vocabularies_.values():
            vocab.index_  # noqa: B018 (the property builds and keeps the index)
        if self.bucketed:
            _edges()  # the buckets' edges too
        return self

    def reader(self) -> RawReader:
        """A file-less reader of the training format, for :meth:`RawReader.from_frame` (built once)."""
        if self._reader is None:
            s = self.reader_settings
            cfg = DataConfig(format=s["format"], include_ids=s.get("include_ids", False), columns=s.get("columns"))
            try:
                self._reader = make_reader(cfg, None)
            except NamesClash as e:  # prepared before such names were refused: scoring it cannot be mended
                raise DataError(f"this model's {e}. It was prepared by an earlier autoint, whose engine read such "
                                "columns as one (a field was given the other's values): prepare the log again with "
                                "the column renamed, and train again") from None
        return self._reader

    def encode_rows(self, df: pd.DataFrame) -> pa.Table:
        """User rows (columns named by field, label optional) → encoded Arrow table."""
        return self.transform(self.canonical_rows(df))

    def canonical_rows(self, df: pd.DataFrame, labels: bool = True, exact_ids: bool = True) -> dict[str, np.ndarray]:
        """User rows → canonical columns (``label`` first when present and ``labels``), through the training
        format's reader (``exact_ids``: see :meth:`RawReader.canonical_columns`)."""
        label, cols = self.reader().canonical_columns(df, labels, exact_ids)
        return cols if label is None else {"label": label, **cols}

    # --- persistence -------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """Everything but the vocabularies' values (those go to :meth:`vocabulary_table`)."""
        self._check_fitted()
        fields = []
        for f in self.fields:
            d: dict[str, Any] = {"name": f.name, "kind": f.kind}
            if f.name in self.bucketed:
                d["transform"] = BUCKET  # categorical, read from a numeric column
            if f.kind == NUMERIC:
                d.update(self.numeric_[f.name].to_dict())
            else:
                if f.kind == MULTI:
                    d["max_len"] = self.max_len_[f.name]
                v = self.vocabularies_[f.name]
                d["vocabulary"] = {"min_count": v.min_count, "n_distinct": v.n_distinct_, "size": len(v._values)}
            fields.append(d)
        version = BUCKET_ENCODER_VERSION if self.bucketed else ENCODER_VERSION
        return {"version": version, "reader": self.reader_settings, "min_count": self.min_count,
                "max_list_len": self.max_list_len, "vocabulary_file": VOCABULARY_FILE, "fields": fields}

    def encoding_differences(self, other: Encoder) -> list[str]:
        """How rows encoded by ``other`` would mean something else to a model of this encoder, in words: the raw
        rows read with other settings, fields whose ids stand for other values (another vocabulary, or one in
        another order), other numeric statistics or list lengths; empty when every id and number means the same.
        Counts that do not change an id (``n_distinct``, a value's count) are not compared."""
        theirs = {f.name: f for f in other.fields}
        kinds: dict[str, list[str]] = {}
        for f in self.fields:
            if f.name not in theirs or theirs[f.name].kind != f.kind or (f.name in self.bucketed) != (
                    f.name in other.bucketed):
                why = "not encoded the same way"
            elif f.kind == NUMERIC:
                same = self.numeric_[f.name].to_dict() == other.numeric_[f.name].to_dict()
                why = None if same else "another numeric transform or other statistics"
            elif not self.vocabularies_[f.name]._values.equals(other.vocabularies_[f.name]._values):
                why = "ids that stand for other values"
            elif f.kind == MULTI and self.max_len_[f.name] != other.max_len_[f.name]:
                why = "lists cut at another length"
            else:
                why = None
            if why:
                kinds.setdefault(why, []).append(f.name)
        out = ["the raw rows read with other data.columns settings"] if self.reader_settings != other.reader_settings \
            else []
        for why, names in kinds.items():
            more = f" and {len(names) - 3} more" if len(names) > 3 else ""
            out.append(f"{why} in {', '.join(map(repr, names[:3]))}{more}")
        return out

    def vocabulary_table(self) -> pa.Table:
        """Every field's kept values in one long table: ``field``, ``value``, ``count`` (id order per field)."""
        self._check_fitted()
        parts = [self.vocabularies_[f.name].table(f.name) for f in self.fields if f.kind != NUMERIC]
        return pa.concat_tables(parts) if parts else VOCABULARY_SCHEMA.empty_table()

    @classmethod
    def from_dict(cls, d: dict[str, Any], vocabulary: pa.Table | None = None) -> Encoder:
        """Rebuild from :meth:`to_dict` and the vocabulary table (version 1 files carry values inline)."""
        version = d.get("version")
        if version not in (1, *_VOCABULARY_FILE_VERSIONS):
            raise DataError(f"encoder version {version!r} is not supported (expected 1 to {BUCKET_ENCODER_VERSION})")
        fields = [FieldSpec(x["name"], NUMERIC if x.get("transform") == BUCKET else x["kind"]) for x in d["fields"]]
        transforms = {x["name"]: x["transform"] for x in d["fields"] if "transform" in x}
        enc = cls(fields, d["reader"], transforms, int(d["min_count"]), d.get("max_list_len"))
        slices = _field_slices(vocabulary) if version in _VOCABULARY_FILE_VERSIONS else {}
        for x in d["fields"]:
            name = x["name"]
            if x["kind"] == NUMERIC:
                enc.numeric_[name] = NumericTransform.from_dict(x)
                continue
            if version == 1:
                enc.vocabularies_[name] = Vocabulary.from_dict(x["vocabulary"])
            else:
                meta = x["vocabulary"]
                part = slices.get(name, VOCABULARY_SCHEMA.empty_table())
                if part.num_rows != int(meta["size"]):
                    raise DataError(f"vocabulary of field {name!r}: {part.num_rows} values stored, "
                                    f"{meta['size']} expected")
                enc.vocabularies_[name] = Vocabulary.from_table(part.column("value"), part.column("count"),
                                                                int(meta["min_count"]), int(meta["n_distinct"]))
            if x["kind"] == MULTI:
                enc.max_len_[name] = int(x["max_len"])
        empty = [name for name, v in enc.vocabularies_.items() if pc.any(pc.equal(v._values, "")).as_py()]
        if empty:  # prepared before the empty string counted as missing (from a Parquet log that held it)
            log.warning("the vocabulary of %s holds the empty string as a category: this model was prepared by an "
                        "earlier autoint, and rows are now encoded with an empty string as missing; prepare the "
                        "data again and retrain to encode both the same way", ", ".join(map(repr, empty)))
        enc.fitted_ = True
        return enc

    def to_state(self) -> dict[str, Any]:
        """What a checkpoint carries: the JSON part and the bytes of ``vocabulary.parquet``."""
        sink = io.BytesIO()
        pq.write_table(self.vocabulary_table(), sink, compression="zstd")
        return {"encoder": self.to_dict(), VOCABULARY_FILE: sink.getvalue()}

    @staticmethod
    def folder_state(folder: str | Path) -> dict[str, Any]:
        """:meth:`to_state` of a processed folder's encoder, read from its files without decoding the vocabulary."""
        folder = Path(folder)
        meta = read_json(folder / "encoder.json", DataError, AGAIN)
        if meta.get("version") not in _VOCABULARY_FILE_VERSIONS:
            return Encoder.load(folder).to_state()
        path = folder / meta.get("vocabulary_file", VOCABULARY_FILE)
        if not path.is_file():  # a bare "[Errno 2] No such file or directory" said neither what nor what to do
            raise DataError(f"{path}: vocabulary file not found (encoder.json names it){AGAIN}")
        return {"encoder": meta, VOCABULARY_FILE: path.read_bytes()}

    @staticmethod
    def check_folder(state: dict[str, Any] | None, folder: str | Path, task: str) -> None:
        """Raise :class:`DataError` when the processed ``folder`` was encoded otherwise than by the encoder of
        ``state`` (a model's, :meth:`to_state`): the same schema with other vocabularies gives ids that stand for
        other values, and figures that mean nothing. ``task`` says what was asked (``"evaluate"``). A model
        without an encoder state, or a folder without one, is not checked."""
        folder = Path(folder)
        if state is None or not (folder / "encoder.json").is_file():
            return
        theirs = Encoder.folder_state(folder)
        if theirs == state:  # the same files: nothing to decode
            return
        differences = Encoder.from_state(state).encoding_differences(Encoder.from_state(theirs))
        if differences:
            raise DataError(f"{folder}: encoded otherwise than the rows the model was trained on "
                            f"({'; '.join(differences)}), so the model would read other values than it learned; "
                            f"{task} the processed folder the model was trained from, or score raw rows with "
                            "autoint predict")

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Encoder:
        if "encoder" not in state:  # a version 1 checkpoint: the encoder dict itself, values inline
            return cls.from_dict(state)
        vocab = (read_parquet_table(io.BytesIO(state[VOCABULARY_FILE]), name="the checkpoint's vocabulary")
                 if VOCABULARY_FILE in state else None)
        return cls.from_dict(state["encoder"], vocab)

    def save(self, folder: str | Path) -> Path:
        """Write ``encoder.json`` and ``vocabulary.parquet`` into ``folder``; returns the JSON's path."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        pq.write_table(self.vocabulary_table(), folder / VOCABULARY_FILE, compression="zstd", write_page_checksum=True)
        target = folder / "encoder.json"
        write_json(target, self.to_dict(), indent=1, ensure_ascii=False)
        return target

    @classmethod
    def load(cls, folder: str | Path) -> Encoder:
        folder = Path(folder)
        target = folder / "encoder.json" if folder.suffix != ".json" else folder
        folder = target.parent
        if not target.is_file():
            raise DataError(f"encoder file not found: {target}")
        try:
            d = read_json(target, DataError, AGAIN)
            vocab = None
            if d.get("version") in _VOCABULARY_FILE_VERSIONS:
                path = folder / d.get("vocabulary_file", VOCABULARY_FILE)
                if not path.is_file():
                    raise DataError(f"{path}: vocabulary file not found (encoder.json names it){AGAIN}")
                vocab = read_parquet_table(path, AGAIN)
            return cls.from_dict(d, vocab)
        except (json.JSONDecodeError, KeyError, TypeError, ValueError, pa.ArrowInvalid) as e:
            if isinstance(e, DataError):
                raise
            raise DataError(f"{target}: malformed encoder: {e}") from None


def _field_slices(vocabulary: pa.Table | None) -> dict[str, pa.Table]:
    """The long vocabulary table cut into one slice per field (rows of a field are contiguous)."""
    if vocabulary is None or vocabulary.num_rows == 0:
        return {}
    field = vocabulary.column("field").combine_chunks()
    out: dict[str, pa.Table] = {}
    ends = np.flatnonzero(np.asarray(pc.not_equal(field[1:], field[:-1]).to_numpy(zero_copy_only=False))) + 1
    starts = np.concatenate([[0], ends])
    stops = np.concatenate([ends, [len(field)]])
    for a, b in zip(starts, stops):
        out[field[int(a)].as_py()] = vocabulary.slice(int(a), int(b - a))
    return out


def _names(frame: pd.DataFrame | pa.Table | dict[str, Any]) -> list[str]:
    return frame.column_names if isinstance(frame, pa.Table) else list(frame) if isinstance(frame, dict) else list(
        frame.columns)


def _column(frame: pd.DataFrame | pa.Table | dict[str, Any], name: str) -> Any:
    return frame.column(name) if isinstance(frame, pa.Table) else frame[name]


def load_processed(path: str | Path) -> tuple[Schema, Encoder]:
    """The schema and encoder of a processed folder."""
    path = Path(path)
    if not path.is_dir():
        raise DataError(f"processed folder not found: {path}")
    try:
        schema = Schema.load(path / "schema.json")
    except (FileNotFoundError, ValueError) as e:
        raise DataError(str(e)) from None
    return schema, Encoder.load(path)


