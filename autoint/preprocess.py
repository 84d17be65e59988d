"""Raw log → encoded Parquet: vocabularies, numeric transforms, splits, streaming.

:func:`prepare` reads a raw log in chunks (any size: memory is set by the
vocabularies, not the row count) and writes a processed folder::

    train.parquet valid.parquet test.parquet   # encoded rows, one row group per chunk and split
    schema.json                                # fitted Schema: vocab sizes, max_len
    encoder.json                               # Encoder: vocabularies, transforms, reader settings
    prepare.json                               # report: rows, positives, bad rows, resolved data config

Encoded columns: categorical ``int32`` ids, numeric ``float32`` values,
multi-valued ``fixed_size_list<int32>[max_len]``, ``label`` ``float32``.

Index conventions (:mod:`autoint.schema`): ``PAD`` = 0 (list padding only),
``OOV`` = 1 (rarer than ``data.min_count`` in train, or unseen), ``MISSING`` = 2,
fitted values from ``FIRST_VALUE`` = 3 on, most frequent first (ties by value),
so the same train data always gives the same ids. A missing or empty list
encodes as ``[MISSING, PAD, ...]`` so no row has an all-padding list.

Numeric transforms (fit on train only):

* ``criteo`` (Song et al., 2019, after the Criteo winners): z > 2 → floor(ln(z)²), else z;
* ``log1p``: sign(z)·ln(1 + |z|);
* ``standardize``: (z − mean) / std with train mean and std (std 0 → 1);
* ``none``: z.

A missing (or non-finite) numeric value becomes 0.0 *after* the transform
(the train mean, for ``standardize``).

Splits (``data.split``): ``random``: each row's split is drawn from a hash of
its source ordinal and the seed, so it is deterministic, streaming and
independent of chunking (the paper's 80/10/10 protocol); ``time``: by
``time_column``, cut-offs at its train / valid quantiles (ties stay together);
``files``: given train / valid / test raw files. Vocabularies, list lengths and
``standardize`` statistics are fit on the train split only.

Running :func:`prepare` twice on the same input and config writes
byte-identical files (timings are returned, not written).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from tqdm.auto import tqdm

from autoint.config import Config, DataConfig
from autoint.datasets.base import (
    NUMERIC_TRANSFORMS,
    BadRowLog,
    DataError,
    RawReader,
    category_array,
    list_array,
    make_reader,
    numeric_array,
)
from autoint.schema import CATEGORICAL, FIRST_VALUE, MISSING, MULTI, NUMERIC, OOV, FieldSpec, Schema

log = logging.getLogger(__name__)

SPLITS = ("train", "valid", "test")
ENCODER_VERSION = 1
_COMPACT_EVERY = 16  # chunk-level counts merged every this many chunks


# --------------------------------------------------------------------------- vocabulary
class Vocabulary:
    """String values → int32 ids, fit on train (sklearn style: learned state ends in ``_``).

    ``partial_fit`` counts values chunk by chunk; ``finalize`` keeps those seen at
    least ``min_count`` times, ordered by descending count then value.
    ``transform`` maps missing → ``MISSING``, rare / unseen → ``OOV`` and never raises.
    Values may be Arrow strings, a pandas column or any sequence of ``str`` / ``None``;
    counting and lookup run in Arrow (hash tables in C++, no Python object per value).
    """

    def __init__(self, min_count: int = 1) -> None:
        if not isinstance(min_count, int) or min_count < 1:
            raise ValueError(f"min_count must be an integer >= 1, got {min_count!r}")
        self.min_count = min_count
        self._parts: list[pa.Table] = []
        self.values_: list[str] | None = None
        self.counts_: list[int] | None = None
        self.n_distinct_: int = 0  # distinct values seen in train, rare ones included
        self._value_set: pa.Array | None = None

    def partial_fit(self, values: Any) -> Vocabulary:
        """Count a chunk of values (``None`` / NaN / null are missing and not counted)."""
        if self.values_ is not None:
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
        if min_count is not None:
            self.min_count = min_count
        counts = self._merged()
        self._parts = []
        self.n_distinct_ = counts.num_rows
        kept = counts.filter(pc.greater_equal(counts.column("count"), self.min_count))
        kept = kept.sort_by([("count", "descending"), ("value", "ascending")])
        self.values_ = kept.column("value").to_pylist()
        self.counts_ = kept.column("count").to_pylist()
        self._value_set = kept.column("value").combine_chunks()
        return self

    @property
    def vocab_size_(self) -> int:
        """Every id a transform can return: PAD, OOV, MISSING and the fitted values."""
        self._check_fitted()
        return FIRST_VALUE + len(self.values_)

    def _check_fitted(self) -> None:
        if self.values_ is None:
            raise RuntimeError("Vocabulary is not fitted: call finalize() after partial_fit()")

    @property
    def value_set_(self) -> pa.Array:
        self._check_fitted()
        if self._value_set is None:
            self._value_set = pa.array(self.values_, type=pa.string())
        return self._value_set

    def transform(self, values: Any) -> np.ndarray:
        """Values → int32 ids (missing → MISSING, unknown → OOV)."""
        arr = category_array(values)
        pos = pc.fill_null(pc.index_in(arr, value_set=self.value_set_), -1).to_numpy(zero_copy_only=False)
        out = np.where(pos >= 0, pos + FIRST_VALUE, OOV).astype(np.int32)
        if arr.null_count:
            out[arr.is_null().to_numpy(zero_copy_only=False)] = MISSING
        return out

    def to_dict(self) -> dict[str, Any]:
        self._check_fitted()
        return {"min_count": self.min_count, "n_distinct": self.n_distinct_,
                "values": list(self.values_), "counts": list(self.counts_)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Vocabulary:
        v = cls(int(d["min_count"]))
        v.values_ = [str(x) for x in d["values"]]
        v.counts_ = [int(x) for x in d.get("counts", [0] * len(v.values_))]
        v.n_distinct_ = int(d.get("n_distinct", len(v.values_)))
        return v


# --------------------------------------------------------------------------- numeric
class NumericTransform:
    """One numeric field's transform (see the module docstring); missing → 0.0 after it."""

    def __init__(self, kind: str = "none") -> None:
        if kind not in NUMERIC_TRANSFORMS:
            raise ValueError(f"numeric transform must be one of {NUMERIC_TRANSFORMS}, got {kind!r}")
        self.kind = kind
        self._n, self._mean, self._m2 = 0, 0.0, 0.0
        self.mean_: float | None = None
        self.std_: float | None = None

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

    def finalize(self) -> NumericTransform:
        if self.kind == "standardize":
            self.mean_ = self._mean if self._n else 0.0
            std = float(np.sqrt(self._m2 / self._n)) if self._n else 0.0
            self.std_ = std if std > 0 else 1.0
        return self

    def transform(self, values: np.ndarray) -> np.ndarray:
        z = np.asarray(values, dtype=np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            if self.kind == "criteo":
                out = np.where(z > 2, np.floor(np.log(np.where(z > 2, z, 3.0)) ** 2), z)
            elif self.kind == "log1p":
                out = np.sign(z) * np.log1p(np.abs(z))
            elif self.kind == "standardize":
                if self.mean_ is None:
                    raise RuntimeError("standardize transform is not fitted: call finalize()")
                out = (z - self.mean_) / self.std_
            else:
                out = z.copy()
        out[~np.isfinite(out)] = 0.0
        return out.astype(np.float32)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"transform": self.kind}
        if self.kind == "standardize":
            d.update(mean=self.mean_, std=self.std_)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> NumericTransform:
        t = cls(d["transform"])
        if t.kind == "standardize":
            t.mean_, t.std_ = float(d["mean"]), float(d["std"])
        return t


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

    Fit on train chunks of the canonical raw frame; :meth:`transform` encodes
    any canonical frame (unseen values → OOV, never an error); :meth:`encode_rows`
    does the same for user rows, through the reader's ``from_frame``.
    Saved as JSON (no pickle).
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
        for f in self.fields:
            if f.kind == NUMERIC:
                self.numeric_[f.name] = NumericTransform(transforms.get(f.name, "none"))
            else:
                self.vocabularies_[f.name] = Vocabulary(min_count)
                if f.kind == MULTI:
                    self.max_len_[f.name] = 1
        self.fitted_ = False

    @classmethod
    def for_reader(cls, reader: RawReader, data_cfg: DataConfig) -> Encoder:
        """An unfitted encoder for ``reader``'s fields with the config's settings resolved."""
        if data_cfg.numeric_transform is not None and data_cfg.numeric_transform not in NUMERIC_TRANSFORMS:
            raise DataError(f"data.numeric_transform: must be one of {NUMERIC_TRANSFORMS} or null, "
                            f"got {data_cfg.numeric_transform!r}")
        default = data_cfg.numeric_transform or reader.default_numeric_transform
        transforms = {f.name: reader.field_transform(f.name) or default for f in reader.fields if f.kind == NUMERIC}
        settings = {"format": data_cfg.format, "include_ids": bool(data_cfg.include_ids),
                    "columns": getattr(reader, "columns", None) or data_cfg.columns}
        return cls(reader.fields, settings, transforms, data_cfg.min_count, data_cfg.max_list_len)

    # --- fitting -------------------------------------------------------------------
    def partial_fit(self, frame: pd.DataFrame | pa.Table) -> Encoder:
        """Count one chunk of train rows (canonical raw frame or raw Arrow table)."""
        for f in self.fields:
            col = _column(frame, f.name)
            if f.kind == CATEGORICAL:
                self.vocabularies_[f.name].partial_fit(col)
            elif f.kind == NUMERIC:
                self.numeric_[f.name].partial_fit(numeric_array(col))
            elif len(col):
                arr = list_array(col)
                self.max_len_[f.name] = max(self.max_len_[f.name], int(_list_lengths(arr).max()))
                self.vocabularies_[f.name].partial_fit(pc.list_flatten(arr))
        return self

    def finalize(self) -> Encoder:
        for v in self.vocabularies_.values():
            v.finalize(self.min_count)
        for t in self.numeric_.values():
            t.finalize()
        if self.max_list_len is not None:
            self.max_len_ = {k: min(v, self.max_list_len) for k, v in self.max_len_.items()}
        self.fitted_ = True
        return self

    def fit(self, chunks: Iterable[pd.DataFrame]) -> Encoder:
        for chunk in chunks:
            self.partial_fit(chunk)
        return self.finalize()

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
            raise RuntimeError("Encoder is not fitted: call fit() or partial_fit() then finalize()")

    # --- encoding ---------------------------------------------------------------------
    def transform(self, frame: pd.DataFrame | pa.Table) -> pa.Table:
        """Canonical raw frame (or raw Arrow table) → encoded Arrow table.

        The ``label`` column is there only when the input has one.
        """
        self._check_fitted()
        present = frame.column_names if isinstance(frame, pa.Table) else list(frame.columns)
        absent = [f.name for f in self.fields if f.name not in present]
        if absent:
            raise DataError(f"rows to encode lack column {absent[0]!r} (expected: {[f.name for f in self.fields]})")
        arrays: list[pa.Array] = []
        names: list[str] = []
        if "label" in present:
            arrays.append(pa.array(numeric_array(_column(frame, "label")).astype(np.float32)))
            names.append("label")
        for f in self.fields:
            col = _column(frame, f.name)
            if f.kind == CATEGORICAL:
                arrays.append(pa.array(self.vocabularies_[f.name].transform(col)))
            elif f.kind == NUMERIC:
                arrays.append(pa.array(self.numeric_[f.name].transform(numeric_array(col))))
            else:
                ids = encode_lists(col, self.vocabularies_[f.name], self.max_len_[f.name])
                arrays.append(pa.FixedSizeListArray.from_arrays(pa.array(ids.reshape(-1)), self.max_len_[f.name]))
            names.append(f.name)
        return pa.Table.from_arrays(arrays, names=names)

    def reader(self) -> RawReader:
        """A file-less reader of the training format, for :meth:`RawReader.from_frame`."""
        s = self.reader_settings
        cfg = DataConfig(format=s["format"], include_ids=s.get("include_ids", False), columns=s.get("columns"))
        return make_reader(cfg, None)

    def encode_rows(self, df: pd.DataFrame) -> pa.Table:
        """User rows (columns named by field, label optional) → encoded Arrow table."""
        return self.transform(self.reader().from_frame(df))

    # --- persistence -------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        self._check_fitted()
        fields = []
        for f in self.fields:
            d: dict[str, Any] = {"name": f.name, "kind": f.kind}
            if f.kind == NUMERIC:
                d.update(self.numeric_[f.name].to_dict())
            else:
                if f.kind == MULTI:
                    d["max_len"] = self.max_len_[f.name]
                d["vocabulary"] = self.vocabularies_[f.name].to_dict()
            fields.append(d)
        return {"version": ENCODER_VERSION, "reader": self.reader_settings, "min_count": self.min_count,
                "max_list_len": self.max_list_len, "fields": fields}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Encoder:
        if d.get("version") != ENCODER_VERSION:
            raise DataError(f"encoder version {d.get('version')!r} is not supported (expected {ENCODER_VERSION})")
        fields = [FieldSpec(x["name"], x["kind"]) for x in d["fields"]]
        transforms = {x["name"]: x["transform"] for x in d["fields"] if x["kind"] == NUMERIC}
        enc = cls(fields, d["reader"], transforms, int(d["min_count"]), d.get("max_list_len"))
        for x in d["fields"]:
            if x["kind"] == NUMERIC:
                enc.numeric_[x["name"]] = NumericTransform.from_dict(x)
            else:
                enc.vocabularies_[x["name"]] = Vocabulary.from_dict(x["vocabulary"])
                if x["kind"] == MULTI:
                    enc.max_len_[x["name"]] = int(x["max_len"])
        enc.fitted_ = True
        return enc

    def save(self, path: str | Path) -> Path:
        """Write ``encoder.json`` into folder ``path`` (or to ``path`` itself if it ends in .json)."""
        path = Path(path)
        target = path if path.suffix == ".json" else path / "encoder.json"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(self.to_dict(), ensure_ascii=False, separators=(",", ":")) + "\n",
                          encoding="utf-8")
        return target

    @classmethod
    def load(cls, path: str | Path) -> Encoder:
        path = Path(path)
        target = path if path.suffix == ".json" else path / "encoder.json"
        if not target.is_file():
            raise DataError(f"encoder file not found: {target}")
        try:
            return cls.from_dict(json.loads(target.read_text(encoding="utf-8")))
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
            raise DataError(f"{target}: malformed encoder: {e}") from None


def _column(frame: pd.DataFrame | pa.Table, name: str) -> Any:
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


# --------------------------------------------------------------------------- splits
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


# --------------------------------------------------------------------------- prepare
class _Source:
    """The raw input of one prepare run: which readers, and each chunk's split codes."""

    def __init__(self, cfg: DataConfig, raw: Path) -> None:
        self.cfg = cfg
        self.raw = raw
        self.files: dict[str, Path] | None = None
        if cfg.split.method == "files":
            self.files = {}
            for name in SPLITS:
                p = Path(cfg.split.files[name]).expanduser()
                if not p.is_absolute() and raw.is_dir() and (raw / p).exists():
                    p = raw / p
                self.files[name] = p
        self.cutoffs: tuple[float, float] | None = None
        self.permutation_codes: np.ndarray | None = None
        self.readers: list[RawReader] = []
        probe = make_reader(cfg, raw if self.files is None else self.files["train"])
        self.fields = probe.fields
        self.probe = probe
        if cfg.split.method == "time":
            col = cfg.split.time_column
            kinds = {f.name: f.kind for f in self.fields}
            if kinds.get(col) != NUMERIC:
                raise DataError(f"data.split.time_column: {col!r} is not a numeric field "
                                f"(numeric fields: {[n for n, k in kinds.items() if k == NUMERIC]})")

    def passes(self) -> Iterator[tuple[pa.Table, np.ndarray]]:
        """One pass over the raw input: (raw Arrow chunk, split code per row); fresh readers each time."""
        self.readers = []
        size = self.cfg.chunk_size
        if self.files is not None:
            for code, name in enumerate(SPLITS):
                reader = make_reader(self.cfg, self.files[name])
                self.readers.append(reader)
                for table, _ in reader.arrow_chunks(size):
                    yield table, np.full(table.num_rows, code, dtype=np.int8)
            return
        reader = make_reader(self.cfg, self.raw)
        self.readers.append(reader)
        split = self.cfg.split
        position = 0  # ordinal among usable rows, the same in every pass
        for table, rows in reader.arrow_chunks(size):
            if split.method == "permutation":
                codes = self.permutation_codes[position : position + table.num_rows]
                if len(codes) != table.num_rows:
                    raise DataError(f"{self.raw}: more rows than the counting pass saw; is the file being written to?")
                position += table.num_rows
            elif split.method == "time":
                times = numeric_array(table.column(split.time_column))
                codes = time_split(times, self.cutoffs)
                missing = np.isnan(times)
                if missing.any():
                    codes[missing] = -1
                    reader.bad.add("missing_time", rows[missing] + 1)
            else:
                codes = random_split(rows, split.fractions, split.seed)
            yield table, codes

    def fit_permutation(self, bar: tqdm) -> None:
        """Count the usable rows, then draw the permutation that splits them."""
        reader = make_reader(self.cfg, self.raw)
        n = 0
        for table, _ in reader.arrow_chunks(self.cfg.chunk_size):
            n += table.num_rows
            bar.update(table.num_rows)
        if n == 0:
            raise DataError(f"{self.raw}: no usable rows to split")
        self.permutation_codes = permutation_split(n, self.cfg.split.fractions, self.cfg.split.seed)

    def fit_time(self, bar: tqdm) -> None:
        col = self.cfg.split.time_column
        parts: list[pd.Series] = []
        reader = make_reader(self.cfg, self.raw)
        for table, _ in reader.arrow_chunks(self.cfg.chunk_size):
            parts.append(pd.Series(numeric_array(table.column(col))).value_counts(dropna=True, sort=False))
            if len(parts) >= _COMPACT_EVERY:
                parts = [pd.concat(parts).groupby(level=0).sum()]
            bar.update(table.num_rows)
        if not parts:
            raise DataError(f"{self.raw}: no rows to split by {col!r}")
        counts = pd.concat(parts).groupby(level=0).sum()
        if counts.empty:
            raise DataError(f"{self.raw}: data.split.time_column {col!r} is missing in every row")
        self.cutoffs = time_cutoffs(counts, self.cfg.split.fractions)

    def bad_log(self) -> tuple[BadRowLog, int]:
        total = BadRowLog()
        seen = 0
        for r in self.readers:
            total.merge(r.bad)
            seen += r.rows_seen
        return total, seen

    def sources(self) -> str:
        return str(self.raw) if self.files is None else ", ".join(str(p) for p in self.files.values())


def _bar(progress: bool, desc: str) -> tqdm:
    return tqdm(desc=desc, unit=" rows", unit_scale=True, disable=not progress, dynamic_ncols=True, leave=False)


def prepare(cfg: Config, raw: str | Path | None, out: str | Path, progress: bool = True) -> dict[str, Any]:
    """Encode a raw log into a processed folder (see the module docstring); returns the report.

    Pass 1 assigns splits and fits the encoder on train rows; pass 2 re-reads,
    encodes and appends each chunk to the split's Parquet file. A ``time`` split
    adds a first pass over the time column.
    """
    data = cfg.data
    t_start = time.perf_counter()
    if raw is None:
        raw = data.raw
    if raw is None:
        raise DataError("no raw input: set data.raw in the config or pass --raw")
    raw = Path(raw).expanduser()
    if not raw.exists():
        raise DataError(f"raw input not found: {raw}")
    source = _Source(data, raw)
    encoder = Encoder.for_reader(source.probe, data)
    timings: dict[str, float] = {}

    if data.split.method == "time":
        with _bar(progress, "prepare: time quantiles") as bar:
            source.fit_time(bar)
        timings["time_quantiles_s"] = time.perf_counter() - t_start
    elif data.split.method == "permutation":
        with _bar(progress, "prepare: count rows") as bar:
            source.fit_permutation(bar)
        timings["count_s"] = time.perf_counter() - t_start

    # Pass 1: split, count, fit on train.
    t1 = time.perf_counter()
    rows = dict.fromkeys(SPLITS, 0)
    positives = dict.fromkeys(SPLITS, 0)
    with _bar(progress, "prepare 1/2: fit") as bar:
        for chunk, codes in source.passes():
            labels = chunk.column("label").to_numpy()
            for code, name in enumerate(SPLITS):
                m = codes == code
                rows[name] += int(m.sum())
                positives[name] += int(labels[m].sum())
            train = codes == 0
            if train.any():
                encoder.partial_fit(chunk if train.all() else chunk.filter(pa.array(train)))
            bar.update(chunk.num_rows)
    bad, rows_seen = source.bad_log()
    if rows_seen == 0:
        raise DataError(f"{source.sources()}: no rows")
    bad.check(rows_seen, data.max_bad_fraction, source.sources())
    if sum(rows.values()) == 0:
        raise DataError(f"{source.sources()}: no usable rows ({bad.summary()})")
    if rows["train"] == 0:
        raise DataError(f"{source.sources()}: the train split is empty (data.split = {data.split})")
    encoder.finalize()
    timings["fit_s"] = time.perf_counter() - t1

    # Pass 2: encode and write.
    t2 = time.perf_counter()
    out = Path(out).expanduser()
    out.mkdir(parents=True, exist_ok=True)
    arrow_schema = encoder.arrow_schema()
    writers = {name: pq.ParquetWriter(out / f"{name}.parquet", arrow_schema, compression="zstd")
               for name in SPLITS}
    written = dict.fromkeys(SPLITS, 0)
    try:
        with _bar(progress, "prepare 2/2: encode") as bar:
            for chunk, codes in source.passes():
                table = encoder.transform(chunk)
                for code, name in enumerate(SPLITS):
                    m = codes == code
                    if m.any():
                        part = table if m.all() else table.filter(pa.array(m))
                        writers[name].write_table(part, row_group_size=max(len(part), 1))
                        written[name] += part.num_rows
                bar.update(chunk.num_rows)
    finally:
        for w in writers.values():
            w.close()
    if written != rows:  # the raw input changed between the passes
        raise DataError(f"{source.sources()}: rows changed between the two passes ({rows} then {written}); "
                        "is the file being written to?")
    timings["encode_s"] = time.perf_counter() - t2

    schema = encoder.schema
    schema.save(out / "schema.json")
    encoder.save(out)
    report: dict[str, Any] = {
        "source": source.sources(),
        "format": data.format,
        "rows_seen": rows_seen,
        "rows": rows,
        "positives": positives,
        "positive_rate": {k: (positives[k] / rows[k] if rows[k] else None) for k in SPLITS},
        "bad_rows": bad.to_dict(),
        "ignored_columns": list(getattr(source.probe, "ignored_columns", []) or
                                getattr(source.readers[0], "ignored_columns", [])),
        "fields": [f.name for f in schema.fields],
        "vocab_sizes": {f.name: f.vocab_size for f in schema.fields if f.kind != NUMERIC},
        "max_len": {f.name: f.max_len for f in schema.fields if f.kind == MULTI},
        "numeric_transforms": {n: t.kind for n, t in encoder.numeric_.items()},
        "time_cutoffs": list(source.cutoffs) if source.cutoffs else None,
        "data": _resolved_data(cfg, raw),
    }
    (out / "prepare.json").write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    total_s = time.perf_counter() - t_start
    timings["total_s"] = total_s
    report["timings"] = {k: round(v, 3) for k, v in timings.items()}
    report["rows_per_s"] = round(rows_seen / total_s, 1) if total_s > 0 else None
    if bad.total or bad.dropped:
        log.warning("%s: %s", source.sources(), bad.summary())
    return report


def _resolved_data(cfg: Config, raw: Path) -> dict[str, Any]:
    d = cfg.to_dict()["data"]
    d["raw"] = str(raw)
    d.pop("processed", None)  # where the output went is not part of what was computed
    return d
