"""Any click log as a CSV, TSV or Parquet table, described in YAML alone.

``data.columns`` names the label and the fields; a new log needs no code::

    data:
      format: table
      raw: clicks.csv
      columns:
        label: {name: clicked, positive: ["yes", 1], negative: ["no", 0]}  # or: label: clicked (0/1)
        categorical: [site, device]
        numeric: {price: log1p, age: none}      # or a list: the default transform
        multi: {tags: "|"}                      # or a list: "|"-joined
        drop: [session_id]                      # read but deliberately unused
        sep: ","                                # CSV separator (TSV: tab by extension)
        format: csv                             # csv | tsv | parquet; default from the extension

Fields come in the order the kinds are listed, each kind in its listed order.
A column named in the YAML but absent from the file is an error naming the file
and column; a file column the YAML does not mention is left out and reported
(:attr:`TableReader.ignored_columns`).

Bad rows: a CSV line with more or fewer fields than the header (``field_count``,
reported by the CSV parser's own bad-row hook with its line number), a label
outside the positive / negative sets (``bad_label``), a
non-number in a numeric column (``non_numeric``) and undecodable bytes
(``decode_error``). For CSV, line numbers count the header as line 1 (a quoted
value spanning lines shifts them).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from autoint.datasets.base import (
    NUMERIC_TRANSFORMS,
    DataError,
    RawReader,
    as_category,
    as_lists,
    canonical_frame,
    check_fields,
    parse_numbers,
)
from autoint.schema import CATEGORICAL, MULTI, NUMERIC, FieldSpec

_KEYS = ("label", "categorical", "numeric", "multi", "drop", "sep", "format", "encoding")
_KIND_KEYS = {"categorical": CATEGORICAL, "numeric": NUMERIC, "multi": MULTI}
_TABLE_FORMATS = ("csv", "tsv", "parquet")
_TRUE = ("1", "true")
_FALSE = ("0", "false")


def _norm(values: Any) -> set[str]:
    """Label values as the comparable strings the reader sees (``1``, ``1.0``, ``True`` → ``1``/``true``)."""
    out = set()
    for v in values:
        if isinstance(v, bool):
            out.add(str(v).lower())
        elif isinstance(v, float) and v.is_integer():
            out.add(str(int(v)))
        else:
            out.add(str(v).strip().lower())
    return out


class TableSpec:
    """A validated ``data.columns`` mapping; errors name the setting (``data.columns.numeric.price``)."""

    def __init__(self, columns: dict[str, Any] | None) -> None:
        if not isinstance(columns, dict):
            raise DataError("data.columns: format 'table' needs a mapping naming the label and the fields")
        unknown = sorted(set(columns) - set(_KEYS))
        if unknown:
            raise DataError(f"data.columns.{unknown[0]}: unknown key (known: {', '.join(_KEYS)})")
        self.label_name, self.positive, self.negative = self._label(columns.get("label"))
        self.fields: list[FieldSpec] = []
        self.transforms: dict[str, str] = {}
        self.separators: dict[str, str] = {}
        for key in columns:
            if key not in _KIND_KEYS:
                continue
            kind, spec = _KIND_KEYS[key], columns[key]
            if spec is None:
                continue
            if isinstance(spec, str):
                spec = [spec]
            if isinstance(spec, (list, tuple)):
                spec = dict.fromkeys(spec)
            if not isinstance(spec, dict):
                raise DataError(f"data.columns.{key}: expected a list of column names or a mapping, got {spec!r}")
            for name, opt in spec.items():
                if not isinstance(name, str) or not name:
                    raise DataError(f"data.columns.{key}: column names must be strings, got {name!r}")
                self.fields.append(FieldSpec(name, kind))
                if kind == NUMERIC and opt is not None:
                    if opt not in NUMERIC_TRANSFORMS:
                        raise DataError(f"data.columns.numeric.{name}: transform must be one of "
                                        f"{NUMERIC_TRANSFORMS}, got {opt!r}")
                    self.transforms[name] = opt
                if kind == MULTI:
                    if opt is not None and (not isinstance(opt, str) or not opt):
                        raise DataError(f"data.columns.multi.{name}: separator must be a non-empty string, got {opt!r}")
                    self.separators[name] = opt or "|"
                if kind == CATEGORICAL and opt is not None:
                    raise DataError(f"data.columns.categorical.{name}: takes no option, got {opt!r}")
        if not self.fields:
            raise DataError("data.columns: no fields; list columns under categorical, numeric or multi")
        try:
            self.fields = list(check_fields(self.fields))
        except DataError as e:
            raise DataError(f"data.columns: {e}") from None
        if self.label_name in {f.name for f in self.fields}:
            raise DataError(f"data.columns: column {self.label_name!r} is both the label and a field")
        drop = columns.get("drop") or []
        if isinstance(drop, str):
            drop = [drop]
        if not isinstance(drop, (list, tuple)):
            raise DataError(f"data.columns.drop: expected a list of column names, got {drop!r}")
        self.drop = [str(c) for c in drop]
        self.sep = columns.get("sep")
        if self.sep is not None and (not isinstance(self.sep, str) or not self.sep):
            raise DataError(f"data.columns.sep: must be a non-empty string, got {self.sep!r}")
        self.format = columns.get("format")
        if self.format is not None and self.format not in _TABLE_FORMATS:
            raise DataError(f"data.columns.format: must be one of {_TABLE_FORMATS}, got {self.format!r}")
        self.encoding = columns.get("encoding") or "utf-8"

    @staticmethod
    def _label(spec: Any) -> tuple[str, set[str], set[str]]:
        if isinstance(spec, str) and spec:
            return spec, set(_TRUE), set(_FALSE)
        if isinstance(spec, dict):
            extra = sorted(set(spec) - {"name", "positive", "negative"})
            if extra:
                raise DataError(f"data.columns.label.{extra[0]}: unknown key (known: name, positive, negative)")
            name = spec.get("name")
            if not isinstance(name, str) or not name:
                raise DataError("data.columns.label.name: the label column's name is required")
            pos, neg = spec.get("positive", [1]), spec.get("negative", [0])
            pos = pos if isinstance(pos, (list, tuple)) else [pos]
            neg = neg if isinstance(neg, (list, tuple)) else [neg]
            p, n = _norm(pos), _norm(neg)
            if p & n:
                raise DataError(f"data.columns.label: {sorted(p & n)} listed as both positive and negative")
            return name, p, n
        raise DataError("data.columns.label: required; a column name (0/1 values) or "
                        "{name: ..., positive: [...], negative: [...]}")


class TableReader(RawReader):
    """Reader for a YAML-described CSV / TSV / Parquet table (see the module docstring)."""

    format = "table"
    default_numeric_transform = "standardize"

    def __init__(self, path: str | Path | None, columns: dict[str, Any] | None) -> None:
        super().__init__(path)
        self.spec = TableSpec(columns)
        self.columns = dict(columns)  # as given, so an encoder can rebuild this reader
        self.ignored_columns: list[str] = []
        self._fname: str | None = None  # the file named in bad-row examples when there are several

    @property
    def fields(self) -> tuple[FieldSpec, ...]:
        return tuple(self.spec.fields)

    def field_transform(self, name: str) -> str | None:
        return self.spec.transforms.get(name)

    def multi_separator(self, name: str) -> str:
        return self.spec.separators.get(name, "|")

    def file_format(self, path: Path) -> str:
        if self.spec.format:
            return self.spec.format
        suffixes = [s.lower() for s in path.suffixes if s.lower() not in (".gz", ".bz2", ".zip", ".xz", ".zst")]
        ext = suffixes[-1].lstrip(".") if suffixes else ""
        if ext in ("parquet", "pq"):
            return "parquet"
        if ext in ("tsv", "tab"):
            return "tsv"
        return "csv"

    # --- checking the file against the spec --------------------------------------
    def _check_columns(self, path: Path, present: list[str]) -> None:
        wanted = [self.spec.label_name] + [f.name for f in self.spec.fields]
        absent = [c for c in wanted if c not in present]
        if absent:
            setting = "data.columns.label" if absent[0] == self.spec.label_name else "data.columns"
            raise DataError(f"{path}: column {absent[0]!r} named in {setting} is not in the file "
                            f"(columns: {present})")
        absent_drop = [c for c in self.spec.drop if c not in present]
        if absent_drop:
            raise DataError(f"{path}: column {absent_drop[0]!r} named in data.columns.drop is not in the file "
                            f"(columns: {present})")
        self.ignored_columns = [c for c in present if c not in set(wanted) | set(self.spec.drop)]

    # --- conversion of one chunk ----------------------------------------------------
    def _labels(self, values: pd.Series) -> tuple[np.ndarray, np.ndarray]:
        """Raw label values → (is_positive, is_valid)."""
        s = pd.Series(as_category(values), dtype=object).str.strip().str.lower()
        pos = s.isin(self.spec.positive).to_numpy()
        neg = s.isin(self.spec.negative).to_numpy()
        return pos, pos | neg

    def labels_from_frame(self, values: pd.Series) -> np.ndarray:
        pos, ok = self._labels(values)
        if not ok.all():
            i = int(np.flatnonzero(~ok)[0])
            raise DataError(f"column {self.spec.label_name!r}, row {i}: label {values.iloc[i]!r} is neither "
                            f"positive {sorted(self.spec.positive)} nor negative {sorted(self.spec.negative)}")
        return pos.astype(np.int8)

    def label_column_in_frame(self) -> str:
        return self.spec.label_name

    def from_frame(self, df: pd.DataFrame) -> pd.DataFrame:
        if isinstance(df, pd.DataFrame) and self.spec.label_name not in df.columns and "label" in df.columns:
            df = df.rename(columns={"label": self.spec.label_name})
        return super().from_frame(df)

    def _convert(self, df: pd.DataFrame, line_no: np.ndarray) -> pd.DataFrame | None:
        """A chunk with the file's own column types → canonical frame; logs and drops bad rows."""
        pos, ok = self._labels(df[self.spec.label_name])
        self.bad.add("bad_label", line_no[~ok], self._fname)
        cols: dict[str, np.ndarray] = {}
        undecodable = np.zeros(len(df), dtype=bool)
        non_numeric = np.zeros(len(df), dtype=bool)
        for f in self.spec.fields:
            s = df[f.name]
            if s.dtype == object and f.kind != NUMERIC:
                undecodable |= s.str.contains("\ufffd", regex=False).fillna(False).to_numpy(dtype=bool)
            if f.kind == CATEGORICAL:
                cols[f.name] = as_category(s)
            elif f.kind == NUMERIC:
                if pd.api.types.is_numeric_dtype(s.dtype) and not pd.api.types.is_bool_dtype(s.dtype):
                    cols[f.name] = s.to_numpy(dtype=np.float64, na_value=np.nan)
                else:
                    cols[f.name], bad = parse_numbers(s.to_numpy(dtype=object))
                    non_numeric |= bad
            else:
                cols[f.name] = self._lists(s, f.name)
        self.bad.add("decode_error", line_no[undecodable & ok], self._fname)
        ok &= ~undecodable
        self.bad.add("non_numeric", line_no[non_numeric & ok], self._fname)
        ok &= ~non_numeric
        if not ok.any():
            return None
        if not ok.all():
            cols = {k: v[ok] for k, v in cols.items()}
        return canonical_frame(pos[ok].astype(np.int8), cols, index=df.index.to_numpy()[ok])

    def _lists(self, s: pd.Series, name: str) -> np.ndarray:
        if s.dtype == object and pd.api.types.infer_dtype(s, skipna=True) in ("string", "empty"):
            split = s.str.split(self.multi_separator(name), regex=False)
            out = split.to_numpy(dtype=object, copy=True)
            for i in np.flatnonzero(split.isna().to_numpy()):
                out[i] = []
            return out
        return as_lists(s, self.multi_separator(name))

    # --- streaming ------------------------------------------------------------------
    def chunks(self, chunk_size: int) -> Iterator[pd.DataFrame]:
        files = self.files()
        offset = 0  # row ordinals keep counting across files
        for path in files:
            self._fname = path.name if len(files) > 1 else None
            fmt = self.file_format(path)
            before = self.rows_seen
            if fmt == "parquet":
                parts = self._parquet_chunks(path, chunk_size, offset)
            else:
                sep = "\t" if fmt == "tsv" and not self.spec.sep else (self.spec.sep or ",")
                parts = self._csv_chunks(path, chunk_size, sep, offset)
            for chunk in parts:
                self._count_file_rows(path, len(chunk))
                yield chunk
            offset += self.rows_seen - before

    def _parquet_chunks(self, path: Path, chunk_size: int, offset: int = 0) -> Iterator[pd.DataFrame]:
        try:
            pf = pq.ParquetFile(path)
        except (pa.ArrowInvalid, OSError) as e:
            raise DataError(f"{path}: not a readable Parquet file: {e}") from None
        self._check_columns(path, list(pf.schema_arrow.names))
        needed = [self.spec.label_name] + [f.name for f in self.spec.fields]
        start = 0
        for batch in pf.iter_batches(batch_size=chunk_size, columns=needed):
            n = batch.num_rows
            self.rows_seen += n
            df = batch.to_pandas(types_mapper=None)
            df.index = pd.RangeIndex(offset + start, offset + start + n)
            for f in self.spec.fields:
                # Arrow strings and lists arrive as pandas' str dtype / arrays; make them plain objects.
                col = batch.column(f.name)
                if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
                    df[f.name] = pd.Series(col.to_numpy(zero_copy_only=False), index=df.index, dtype=object)
                elif f.kind == MULTI and (pa.types.is_list(col.type) or pa.types.is_large_list(col.type)):
                    df[f.name] = pd.Series(
                        [None if x is None else [str(t) for t in x] for x in col.to_pylist()], index=df.index,
                        dtype=object)
            chunk = self._convert(df, np.arange(start + 1, start + n + 1))  # row numbers, 1-based
            start += n
            if chunk is not None:
                yield chunk

    def _csv_chunks(self, path: Path, chunk_size: int, sep: str, offset: int = 0) -> Iterator[pd.DataFrame]:
        """CSV / TSV through Arrow's streaming reader; its bad-row hook names each skipped line.

        The reader runs on one thread because only then does Arrow know a bad
        row's line number. Values are read as bytes and decoded here, so a row
        with undecodable bytes is logged as ``decode_error`` rather than
        failing the whole file.
        """
        pending: list[int] = []  # lines the parser skipped since the last batch

        def bad_row(row: pacsv.InvalidRow) -> str:
            pending.append(int(row.number))  # known: the reader runs on one thread
            return "skip"

        def open_reader(columns: list[str] | None) -> pacsv.CSVStreamingReader:
            return pacsv.open_csv(
                path,
                read_options=pacsv.ReadOptions(use_threads=False, block_size=1 << 20, encoding=self.spec.encoding),
                parse_options=pacsv.ParseOptions(delimiter=sep, invalid_row_handler=bad_row),
                convert_options=pacsv.ConvertOptions(
                    include_columns=columns, column_types=dict.fromkeys(columns or [], pa.binary()),
                    null_values=[""], strings_can_be_null=True, quoted_strings_can_be_null=False),
            )

        try:
            header = open_reader(None).schema.names
        except (pa.ArrowInvalid, LookupError, OSError) as e:
            raise DataError(f"{path}: cannot read the header line: {e}") from None
        self._check_columns(path, [str(c) for c in header])
        needed = [self.spec.label_name] + [f.name for f in self.spec.fields]
        pending.clear()
        skipped: list[int] = []  # every line of this file skipped so far, in order

        def take_skipped() -> None:
            self.bad.add("field_count", pending, self._fname)
            self.rows_seen += len(pending)
            skipped.extend(pending)
            pending.clear()

        start = 0
        try:
            for batch in _rebatch(open_reader(needed), chunk_size):
                take_skipped()
                n = batch.num_rows
                self.rows_seen += n
                cols, undecodable = _decode(batch, needed)
                df = pd.DataFrame({k: pd.Series(v, dtype=object) for k, v in cols.items()})
                df.index = pd.RangeIndex(offset + start, offset + start + n)
                lines = _csv_lines(np.arange(start, start + n), np.asarray(skipped, dtype=np.int64))
                self.bad.add("decode_error", lines[undecodable], self._fname)
                chunk = self._convert(df[~undecodable] if undecodable.any() else df, lines[~undecodable])
                start += n
                if chunk is not None:
                    yield chunk
        except pa.ArrowInvalid as e:
            raise DataError(f"{path}: cannot parse: {e}") from None
        take_skipped()  # bad lines after the last good row

def _rebatch(reader: pacsv.CSVStreamingReader, size: int) -> Iterator[pa.RecordBatch]:
    """Arrow's blocks regrouped into batches of ``size`` rows (the last one shorter)."""
    pending: list[pa.RecordBatch] = []
    rows = 0
    for batch in reader:
        pending.append(batch)
        rows += batch.num_rows
        while rows >= size:
            whole = pa.Table.from_batches(pending).combine_chunks()
            yield whole.slice(0, size).to_batches()[0]
            rest = whole.slice(size)
            pending, rows = (rest.to_batches() if rest.num_rows else []), rest.num_rows
    if rows:
        yield pa.Table.from_batches(pending).combine_chunks().to_batches()[0]


def _decode(batch: pa.RecordBatch, names: list[str]) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Byte columns → ``object`` arrays of ``str`` / ``None``, and the mask of rows holding undecodable bytes."""
    bad = np.zeros(batch.num_rows, dtype=bool)
    out: dict[str, np.ndarray] = {}
    for name in names:
        col = batch.column(name)
        try:
            out[name] = col.cast(pa.string()).to_numpy(zero_copy_only=False).astype(object, copy=False)
        except pa.ArrowInvalid:  # some value is not UTF-8: find which, one by one
            values = col.to_pylist()
            arr = np.empty(len(values), dtype=object)
            for i, v in enumerate(values):
                try:
                    arr[i] = None if v is None else v.decode("utf-8")
                except UnicodeDecodeError:
                    arr[i], bad[i] = None, True
            out[name] = arr
    return out, bad


def _csv_lines(ordinals: np.ndarray, skipped: np.ndarray) -> np.ndarray:
    """1-based file line of each kept data row, given the (sorted) lines the parser skipped."""
    line = ordinals + 2  # line 1 is the header
    if skipped.size == 0:
        return line
    while True:
        nxt = ordinals + 2 + np.searchsorted(skipped, line, side="right")
        if np.array_equal(nxt, line):
            return line
        line = nxt
