"""Shared machinery of the raw readers: errors, the bad-row log, the reader base class.

Every reader turns its raw format into the same **canonical raw frame**, a
:class:`pandas.DataFrame` with

* ``label``: ``int8`` 0/1 (absent when scoring rows that carry no label),
* one column per field, by field name, in schema order:

  - categorical: ``object`` column of python ``str``, ``None`` when missing;
  - numeric: ``float64``, ``NaN`` when missing;
  - multi-valued: ``object`` column of ``list[str]`` (``None`` or ``[]`` when missing);

* the index: the row's ordinal in the source (0-based, bad rows included), so a
  row keeps its identity whatever was dropped around it (the random split hashes it).

Nothing is dropped silently: a malformed row is counted in :class:`BadRowLog`
by kind, with its line number; rows dropped by the task's definition (MovieLens
rating 3) are counted apart, as "dropped by design".
"""

from __future__ import annotations

import gzip
import io
import zlib
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from autoint.schema import CATEGORICAL, MULTI, NUMERIC, FieldSpec

NUMERIC_TRANSFORMS = ("criteo", "log1p", "standardize", "none")


class DataError(ValueError):
    """Raw data or its description is unusable; the message names file, line, column or setting."""


# --------------------------------------------------------------------------- bad rows
class BadRowLog:
    """Counts malformed rows by kind and keeps the first few line numbers of each.

    Kinds used by the readers: ``field_count``, ``blank_line``, ``non_numeric``,
    ``bad_label``, ``decode_error``, ``bad_token``. Rows dropped because the task
    says so (e.g. MovieLens rating 3) go to :attr:`dropped`, not to the bad total.
    """

    def __init__(self, keep: int = 5) -> None:
        self.keep = keep
        self.counts: dict[str, int] = {}
        self.examples: dict[str, list[int | str]] = {}
        self.dropped: dict[str, int] = {}

    def add(self, kind: str, lines: Iterable[int] | np.ndarray | int, file: str | None = None) -> None:
        """Record bad rows of ``kind`` at the given 1-based line numbers.

        ``file`` (a name) is given by readers of several files; the kept
        examples then read ``"name:line"``.
        """
        arr = np.atleast_1d(np.asarray(lines, dtype=np.int64))
        if arr.size == 0:
            return
        self.counts[kind] = self.counts.get(kind, 0) + int(arr.size)
        ex = self.examples.setdefault(kind, [])
        if len(ex) < self.keep:
            first = np.sort(arr)[: self.keep - len(ex)]
            ex.extend(int(x) if file is None else f"{file}:{int(x)}" for x in first)

    def add_dropped(self, reason: str, n: int) -> None:
        """Record ``n`` rows left out on purpose (not an error)."""
        if n:
            self.dropped[reason] = self.dropped.get(reason, 0) + int(n)

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def summary(self) -> str:
        if not self.counts and not self.dropped:
            return "no bad rows"
        parts = []
        for kind in sorted(self.counts):
            lines = ", ".join(str(x) for x in self.examples.get(kind, []))
            more = ", ..." if self.counts[kind] > len(self.examples.get(kind, [])) else ""
            parts.append(f"{kind}: {self.counts[kind]} (lines {lines}{more})")
        text = f"{self.total} bad rows" + (" — " + "; ".join(parts) if parts else "")
        if self.dropped:
            text += "; dropped by design: " + ", ".join(f"{k}: {v}" for k, v in sorted(self.dropped.items()))
        return text

    def to_dict(self) -> dict[str, Any]:
        return {
            "total": self.total,
            "counts": dict(sorted(self.counts.items())),
            "first_lines": {k: list(v) for k, v in sorted(self.examples.items())},
            "dropped_by_design": dict(sorted(self.dropped.items())),
        }

    def merge(self, other: BadRowLog) -> None:
        for kind, n in other.counts.items():
            self.counts[kind] = self.counts.get(kind, 0) + n
            ex = self.examples.setdefault(kind, [])
            ex.extend(other.examples.get(kind, [])[: max(0, self.keep - len(ex))])
        for reason, n in other.dropped.items():
            self.add_dropped(reason, n)

    def check(self, rows_seen: int, max_bad_fraction: float, source: str | Path) -> None:
        """Raise :class:`DataError` when bad rows exceed ``max_bad_fraction`` of ``rows_seen``."""
        if self.total == 0:
            return
        frac = self.total / max(rows_seen, 1)
        if frac > max_bad_fraction:
            raise DataError(
                f"{source}: {self.total} of {rows_seen} rows are malformed ({frac:.4%}), more than "
                f"data.max_bad_fraction = {max_bad_fraction:g}: {self.summary()}"
            )


# --------------------------------------------------------------------------- value helpers
def as_category(values: Any) -> np.ndarray:
    """Any 1-d column → ``object`` array of ``str`` / ``None`` (missing).

    Integral floats print without ``.0`` (a pandas int column with NaN holes is
    float), so ``7`` and ``7.0`` name the same category.
    """
    s = pd.Series(values) if not isinstance(values, pd.Series) else values
    missing = s.isna().to_numpy()
    if pd.api.types.is_bool_dtype(s.dtype):
        out = s.astype(object).map(str).to_numpy(dtype=object)
    elif pd.api.types.is_float_dtype(s.dtype):
        v = s.to_numpy(dtype=np.float64, na_value=np.nan)
        ok = ~missing
        integral = bool(np.all(np.isfinite(v[ok]) & (v[ok] == np.floor(v[ok]))))
        out = np.empty(len(s), dtype=object)
        if integral:
            out[ok] = v[ok].astype(np.int64).astype(str).astype(object)
        else:
            out[ok] = v[ok].astype(str).astype(object)
    elif pd.api.types.is_integer_dtype(s.dtype):
        out = s.astype(str).to_numpy(dtype=object)
    elif pd.api.types.infer_dtype(s, skipna=True) in ("string", "empty"):
        out = s.to_numpy(dtype=object).copy()
    else:
        out = np.array([x if isinstance(x, str) else str(x) for x in s.to_numpy(dtype=object)], dtype=object)
    out = out.astype(object, copy=not out.flags.writeable)  # pandas 3 hands out read-only views
    out[missing] = None
    return out


def as_numeric(values: Any, column: str, source: str) -> np.ndarray:
    """Column → ``float64`` with NaN for missing; non-numbers raise :class:`DataError`."""
    s = pd.Series(values) if not isinstance(values, pd.Series) else values
    num = pd.to_numeric(s, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    bad = np.isnan(num) & ~s.isna().to_numpy()
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise DataError(f"{source}: column {column!r}, row {i}: {s.iloc[i]!r} is not a number")
    return num


def as_lists(values: Any, sep: str) -> np.ndarray:
    """Column of lists, tuples, arrays or ``sep``-joined strings → ``object`` array of ``list[str]``."""
    out = np.empty(len(values), dtype=object)
    for i, x in enumerate(pd.Series(values).to_numpy(dtype=object)):
        if x is None or (isinstance(x, float) and np.isnan(x)):
            out[i] = []
        elif isinstance(x, str):
            out[i] = [t for t in x.split(sep) if t] if x else []
        else:
            out[i] = [t if isinstance(t, str) else str(t) for t in x]
    return out


def canonical_frame(label: np.ndarray | None, columns: dict[str, np.ndarray], index: Any = None) -> pd.DataFrame:
    """Assemble the canonical raw frame without letting pandas re-infer dtypes.

    Goes through ``pd.DataFrame(dict)`` of pre-typed Series so object columns
    stay object (pandas 3 would otherwise turn strings into its ``str`` dtype).
    """
    n = len(next(iter(columns.values()))) if columns else (0 if label is None else len(label))
    idx = pd.RangeIndex(n) if index is None else pd.Index(np.asarray(index, dtype=np.int64))
    data: dict[str, pd.Series] = {}
    if label is not None:
        data["label"] = pd.Series(np.asarray(label, dtype=np.int8), index=idx, copy=False)
    for name, col in columns.items():
        dtype = np.float64 if col.dtype.kind == "f" else object
        data[name] = pd.Series(col, index=idx, dtype=dtype, copy=False)
    return pd.DataFrame(data, index=idx, copy=False)


# --------------------------------------------------------------------------- line blocks
def open_binary(path: Path):
    """Open a raw text file as bytes, transparently gunzipping ``*.gz``."""
    return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")


def iter_line_blocks(path: Path, n_lines: int) -> Iterator[tuple[int, bytes]]:
    """Yield ``(first_line_number, buffer)``: at most ``n_lines`` whole raw lines per buffer.

    Reads large byte blocks (sized from the lines seen so far) rather than line
    objects, so a block costs one allocation, not one per line.
    """
    line_bytes = 256  # first guess; refined from the data
    with open_binary(path) as f:
        first, pending = 1, b""
        while True:
            try:
                data = f.read(max(1 << 16, line_bytes * n_lines - len(pending)))
            except (OSError, EOFError, zlib.error) as e:  # corrupt or truncated .gz, unreadable file
                raise DataError(f"{path}: cannot read past line {first - 1}: {e}") from None
            buf = pending + data if pending else data
            if not buf:
                return
            if not data:  # end of file: the rest, even without a final newline
                yield first, buf
                return
            nl = np.flatnonzero(np.frombuffer(buf, dtype=np.uint8) == 10)
            if len(nl) == 0:
                pending = buf
                continue
            k = min(len(nl), n_lines)
            cut = int(nl[k - 1]) + 1
            line_bytes = max(1, cut // k)
            yield first, buf[:cut]
            first += k
            pending = buf[cut:]


def split_block(
    block: bytes,
    first_line: int,
    sep: bytes,
    n_fields: int,
    log: BadRowLog,
    encoding: str = "utf-8",
    file: str | None = None,
    strip_trailing_sep: bool = False,
) -> tuple[bytes, np.ndarray, int]:
    """Vet a block of lines; return the good ones (``\\n``-terminated), their line numbers, and the line count.

    Fast path: separators counted per line with numpy over the whole buffer. Lines with
    the wrong field count (``field_count``), blank lines (``blank_line``) and
    lines that do not decode (``decode_error``) are logged and left out; the
    slow per-line path only runs for a block that fails to decode as a whole.
    ``sep`` of more than one byte (MovieLens ``::``) is rewritten to a tab;
    ``strip_trailing_sep`` drops separators at line ends (libFM's trailing blanks).
    """
    buf = block
    if b"\r" in buf:
        buf = buf.replace(b"\r\n", b"\n")
    if not buf.endswith(b"\n"):
        buf += b"\n"
    if strip_trailing_sep:
        while sep + b"\n" in buf:
            buf = buf.replace(sep + b"\n", b"\n")
    if len(sep) > 1:
        buf = buf.replace(sep, b"\t")
        sep = b"\t"
    arr = np.frombuffer(buf, dtype=np.uint8)
    nl = np.flatnonzero(arr == 10)
    n = len(nl)
    starts = np.empty(n, dtype=np.int64)
    starts[0] = 0
    starts[1:] = nl[:-1] + 1
    # Separators before each line end, differenced: per-line counts without a per-separator search.
    before = np.searchsorted(np.flatnonzero(arr == sep[0]), nl)
    seps = np.diff(before, prepend=0)
    line_no = np.arange(first_line, first_line + n, dtype=np.int64)
    blank = (nl - starts) == 0
    wrong = (seps != n_fields - 1) & ~blank
    good = ~(blank | wrong)
    log.add("blank_line", line_no[blank], file)
    log.add("field_count", line_no[wrong], file)
    try:
        if not buf.isascii():  # ASCII (all of Criteo) is valid in every encoding we read
            buf.decode(encoding)
    except UnicodeDecodeError:
        undecodable = np.zeros(n, dtype=bool)
        for i in np.flatnonzero(good):
            try:
                buf[starts[i] : nl[i]].decode(encoding)
            except UnicodeDecodeError:
                undecodable[i] = True
        log.add("decode_error", line_no[undecodable], file)
        good &= ~undecodable
    if not good.all():
        keep = np.flatnonzero(good)
        buf = b"".join(buf[starts[i] : nl[i] + 1] for i in keep)
    return buf, line_no[good], n


def parse_block(buf: bytes, names: list[str], sep: bytes, encoding: str = "utf-8") -> pa.Table:
    """Parse vetted lines into an all-string Arrow table; empty fields become nulls."""
    if encoding.lower().replace("_", "-") not in ("utf-8", "utf8", "ascii"):
        buf = buf.decode(encoding).encode("utf-8")
    return pacsv.read_csv(
        io.BytesIO(buf),
        read_options=pacsv.ReadOptions(column_names=names, block_size=1 << 20),
        parse_options=pacsv.ParseOptions(delimiter=sep.decode(), quote_char=False, double_quote=False),
        convert_options=pacsv.ConvertOptions(
            column_types={c: pa.string() for c in names},
            null_values=[""],
            strings_can_be_null=True,
            quoted_strings_can_be_null=True,
        ),
    )


def arrow_strings(col: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """Arrow string column → ``object`` array of ``str`` / ``None``."""
    return col.to_numpy(zero_copy_only=False).astype(object, copy=False)


def parse_numbers_arrow(col: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """Arrow strings → float64 (NaN when missing) and a mask of present non-numbers.

    Fast path: Arrow's cast of the whole column; only a column holding a
    non-number goes through the slower per-value parse that finds it.
    """
    try:
        num = pc.cast(col, pa.float64())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return parse_numbers(arrow_strings(col))
    out = pc.fill_null(num, np.nan).to_numpy(zero_copy_only=False)
    return np.asarray(out, dtype=np.float64), np.zeros(len(out), dtype=bool)


def parse_numbers(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Strings → float64 (NaN when missing); returns ``(numbers, bad_mask)``, bad = present but not a number."""
    num = pd.to_numeric(pd.Series(values, dtype=object), errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    bad = np.isnan(num) & pd.notna(values)
    return num, bad


# --------------------------------------------------------------------------- reader base
class RawReader(ABC):
    """One raw format → chunks of the canonical raw frame (see the module docstring).

    ``rows_seen`` counts every data row read so far (bad and dropped ones
    included) and ``bad`` logs the malformed ones; both grow as :meth:`chunks`
    is consumed. A reader built with ``path=None`` cannot read files but can
    still turn user rows into canonical ones with :meth:`from_frame`.
    """

    format: ClassVar[str] = ""
    label: ClassVar[str] = "label"
    default_numeric_transform: ClassVar[str] = "criteo"

    def __init__(self, path: str | Path | None) -> None:
        self.path = None if path is None else Path(path)
        self.bad = BadRowLog()
        self.rows_seen = 0

    @property
    @abstractmethod
    def fields(self) -> tuple[FieldSpec, ...]:
        """The fields this reader produces, unfitted (``vocab_size`` None)."""

    def chunks(self, chunk_size: int) -> Iterator[pd.DataFrame]:
        """Stream the raw source as canonical raw frames of at most ``chunk_size`` rows.

        A subclass implements this or :meth:`arrow_chunks` (each defaults to the other).
        """
        for table, rows in self.arrow_chunks(chunk_size):
            yield arrow_to_frame(table, rows, self.fields)

    def arrow_chunks(self, chunk_size: int) -> Iterator[tuple[pa.Table, np.ndarray]]:
        """The same rows as :meth:`chunks`, as ``(raw Arrow table, source row ordinals)``.

        The table holds ``label`` (int8) and the fields as Arrow strings (categorical),
        float64 with NaN for missing (numeric) and lists of strings (multi-valued);
        no Python object per value, which is what lets preprocessing keep up with
        large logs.
        """
        if type(self).chunks is RawReader.chunks:  # pragma: no cover - a subclass must implement one
            raise NotImplementedError(f"{type(self).__name__} implements neither chunks nor arrow_chunks")
        for frame in self.chunks(chunk_size):
            yield frame_to_arrow(frame, self.fields), frame.index.to_numpy(dtype=np.int64)

    # --- hooks the encoder reads ---------------------------------------------
    def field_transform(self, name: str) -> str | None:
        """A numeric transform the raw description fixes for one field (None: use the default)."""
        return None

    def multi_separator(self, name: str) -> str:
        """How a multi-valued field is joined when given as one string."""
        return "|"

    @property
    def source(self) -> str:
        return str(self.path) if self.path is not None else f"<{self.format} rows>"

    # --- inference: user rows → canonical -------------------------------------
    def labels_from_frame(self, values: pd.Series) -> np.ndarray:
        """User-given labels → int8 0/1; anything else raises :class:`DataError`."""
        num = pd.to_numeric(values, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
        ok = np.isin(num, (0.0, 1.0))
        if not ok.all():
            i = int(np.flatnonzero(~ok)[0])
            raise DataError(f"{self.source}: column {self.label!r}, row {i}: label {values.iloc[i]!r} is not 0 or 1")
        return num.astype(np.int8)

    def label_column_in_frame(self) -> str:
        """The column holding the label in user rows given to :meth:`from_frame`."""
        return self.label

    def from_frame(self, df: pd.DataFrame) -> pd.DataFrame:
        """User rows (columns named by field names, label optional) → the canonical raw frame.

        Categorical values may be of any type (printed as strings); multi-valued
        ones lists or separator-joined strings. A missing field column raises a
        :class:`DataError` naming it; extra columns are ignored.
        """
        if not isinstance(df, pd.DataFrame):
            raise DataError(f"expected a pandas DataFrame of raw rows, got {type(df).__name__}")
        absent = [f.name for f in self.fields if f.name not in df.columns]
        if absent:
            raise DataError(
                f"{self.source}: raw rows lack column {absent[0]!r}"
                + (f" (and {len(absent) - 1} more: {absent[1:]})" if len(absent) > 1 else "")
                + f"; expected columns: {[f.name for f in self.fields]}"
            )
        cols: dict[str, np.ndarray] = {}
        for f in self.fields:
            s = df[f.name].reset_index(drop=True)
            if f.kind == CATEGORICAL:
                cols[f.name] = as_category(s)
            elif f.kind == NUMERIC:
                cols[f.name] = as_numeric(s, f.name, self.source)
            else:
                cols[f.name] = as_lists(s, self.multi_separator(f.name))
        label_col = self.label_column_in_frame()
        label = self.labels_from_frame(df[label_col].reset_index(drop=True)) if label_col in df.columns else None
        return canonical_frame(label, cols)

    # --- helpers for subclasses ------------------------------------------------
    def _require_file(self, path: Path | None = None) -> Path:
        path = path if path is not None else self.path
        if path is None:
            raise DataError(f"no raw file given for format {self.format!r}: set data.raw or pass --raw")
        if not path.exists():
            raise DataError(f"raw file not found: {path}")
        if path.is_dir():
            raise DataError(f"{path} is a folder; format {self.format!r} expects a file")
        if path.stat().st_size == 0:
            raise DataError(f"raw file is empty: {path}")
        return path


def arrow_to_frame(table: pa.Table, rows: np.ndarray | None, fields: Iterable[FieldSpec]) -> pd.DataFrame:
    """Raw Arrow table (see :meth:`RawReader.arrow_chunks`) → canonical raw frame."""
    cols: dict[str, np.ndarray] = {}
    for f in fields:
        col = table.column(f.name)
        if f.kind == CATEGORICAL:
            cols[f.name] = arrow_strings(col)
        elif f.kind == NUMERIC:
            cols[f.name] = numeric_array(col)
        else:
            out = np.empty(len(col), dtype=object)
            out[:] = [x if x is not None else [] for x in col.to_pylist()]
            cols[f.name] = out
    label = table.column("label").to_numpy().astype(np.int8) if "label" in table.column_names else None
    return canonical_frame(label, cols, index=rows)


def frame_to_arrow(frame: pd.DataFrame, fields: Iterable[FieldSpec]) -> pa.Table:
    """Canonical raw frame → raw Arrow table (label first when present, then the fields)."""
    arrays: list[pa.Array] = []
    names: list[str] = []
    if "label" in frame.columns:
        arrays.append(pa.array(frame["label"].to_numpy(dtype=np.int8)))
        names.append("label")
    for f in fields:
        col = frame[f.name]
        if f.kind == CATEGORICAL:
            arrays.append(category_array(col))
        elif f.kind == NUMERIC:
            arrays.append(pa.array(numeric_array(col), from_pandas=False))
        else:
            arrays.append(list_array(col))
        names.append(f.name)
    return pa.Table.from_arrays(arrays, names=names)


def category_array(values: Any) -> pa.Array:
    """Categorical values (Arrow, pandas, numpy, list) → Arrow strings, nulls for missing."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if isinstance(values, pa.Array):
        return values if values.type == pa.string() else pc.cast(values, pa.string())
    arr = values.to_numpy(dtype=object) if isinstance(values, pd.Series) else np.asarray(values, dtype=object)
    try:
        return pa.array(arr, type=pa.string(), from_pandas=True)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return pa.array(as_category(pd.Series(arr, dtype=object)), type=pa.string(), from_pandas=True)


def numeric_array(values: Any) -> np.ndarray:
    """Numeric values (Arrow, pandas, numpy) → float64 with NaN for missing."""
    if isinstance(values, (pa.Array, pa.ChunkedArray)):
        if not pa.types.is_floating(values.type):
            values = pc.cast(values, pa.float64())
        return np.asarray(pc.fill_null(values, np.nan).to_numpy(zero_copy_only=False), dtype=np.float64)
    if isinstance(values, pd.Series):
        return values.to_numpy(dtype=np.float64, na_value=np.nan)
    return np.asarray(values, dtype=np.float64)


def list_array(values: Any) -> pa.Array:
    """Multi-valued values (Arrow lists, or a column of lists / None) → Arrow ``list<string>``."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if isinstance(values, pa.Array):
        want = pa.list_(pa.string())
        return values if values.type == want else pc.cast(values, want)
    arr = values.to_numpy(dtype=object) if isinstance(values, pd.Series) else np.asarray(values, dtype=object)
    try:  # lists of str and None: converted in C
        return pa.array(arr, type=pa.list_(pa.string()), from_pandas=True)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        items = [None if x is None or (isinstance(x, float) and np.isnan(x)) else [str(t) for t in x] for x in arr]
        return pa.array(items, type=pa.list_(pa.string()))


def check_fields(fields: Iterable[FieldSpec]) -> tuple[FieldSpec, ...]:
    """Sanity-check reader fields: unique names, none called ``label``, unfitted."""
    out = tuple(fields)
    names = [f.name for f in out]
    if len(set(names)) != len(names):
        raise DataError(f"duplicate field names: {sorted({n for n in names if names.count(n) > 1})}")
    if "label" in names:
        raise DataError("a field may not be called 'label' (the canonical label column)")
    for f in out:
        if f.kind not in (CATEGORICAL, NUMERIC, MULTI):  # pragma: no cover - FieldSpec checks too
            raise DataError(f"field {f.name!r}: unknown kind {f.kind!r}")
    return out


# --------------------------------------------------------------------------- dispatch
def _synthetic_columns(data_cfg: Any) -> dict[str, Any]:
    try:
        from autoint.datasets.synthetic import synthetic_columns
    except ImportError as e:
        raise DataError(
            f"data.format 'synthetic' needs autoint.datasets.synthetic, which cannot be imported: {e}"
        ) from None
    return synthetic_columns(dict(data_cfg.synthetic or {}))


def make_reader(data_cfg: Any, raw: str | Path | None) -> RawReader:
    """The reader for ``data_cfg.format`` over ``raw`` (a file or folder; None: rows via ``from_frame`` only).

    ``synthetic`` data is a CSV / Parquet file written by
    :mod:`autoint.datasets.synthetic`, read by the table reader with the
    columns that module describes.
    """
    fmt = data_cfg.format
    if fmt == "criteo":
        from autoint.datasets.criteo import CriteoReader

        return CriteoReader(raw)
    if fmt == "movielens":
        from autoint.datasets.movielens import MovieLensReader

        return MovieLensReader(raw, include_ids=bool(data_cfg.include_ids))
    if fmt == "frappe":
        from autoint.datasets.frappe import FrappeReader

        return FrappeReader(raw)
    if fmt in ("table", "synthetic"):
        from autoint.datasets.table import TableReader

        columns = data_cfg.columns if fmt == "table" else (data_cfg.columns or _synthetic_columns(data_cfg))
        reader = TableReader(raw, columns)
        reader.format = fmt
        return reader
    raise DataError(f"data.format: unknown format {fmt!r} (known: criteo, movielens, frappe, table, synthetic)")


def reader_fields(data_cfg: Any) -> tuple[FieldSpec, ...]:
    """The fields ``data_cfg`` will produce, known from the config alone (no data read)."""
    return make_reader(data_cfg, None).fields
