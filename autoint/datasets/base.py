"""Shared machinery of the raw readers: errors, the bad-row log, the reader base class.

Every reader turns its raw format into the same **canonical raw frame**, a
:class:`pandas.DataFrame` with

* ``label``: ``int8`` 0/1 (absent when scoring rows that carry no label),
* one column per field, by field name, in schema order:

  - categorical: ``object`` column of python ``str``, ``None`` when missing;
  - numeric: ``float64``, ``NaN`` when missing;
  - multi-valued: ``object`` column of ``list[str]`` (``None`` or ``[]`` when missing);

* the index: the row's ordinal in the source (0-based, bad rows included), so a
  row keeps its identity whatever was dropped around it (the random split hashes it);
* ``_time`` (``float64`` seconds, NaN when missing) when the reader has a time
  column that is no field (:attr:`RawReader.time_column`, see :mod:`autoint.datasets.times`).

Nothing is dropped silently: a malformed row is counted in :class:`BadRowLog`
by kind, with its line number; rows dropped by the task's definition (MovieLens
rating 3) are counted apart, as "dropped by design".
"""

from __future__ import annotations

import math
import re
from abc import ABC, abstractmethod
from bisect import bisect_right
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from autoint.config import NUMERIC_TRANSFORMS, SCALAR_TRANSFORMS
from autoint.datasets.errors import BadRowLog, DataError, RowError
from autoint.datasets.text import (
    ROWS_READ_AS,
    TextLayout,
    describe_inputs,
    expand_inputs,
    file_lines,
    read_as,
    refuse_binary,
    refuse_unread,
)
from autoint.datasets.times import TIME, as_series
from autoint.schema import CATEGORICAL, MULTI, NUMERIC, FieldSpec

__all__ = ["NUMERIC_TRANSFORMS", "SCALAR_TRANSFORMS", "BadRowLog", "DataError", "RawReader"]

# The numeric transforms' names live with the config that validates them (autoint.config).


SMALL_BATCH = 64  # rows up to which user rows take the per-value path (see RawReader.canonical_columns)


# --------------------------------------------------------------------------- value helpers
def as_category(values: Any, column: str | None = None) -> np.ndarray:
    """Any 1-d column → ``object`` array of ``str`` / ``None`` (missing).

    A list (or tuple, set, mapping, array) among the values is no category: :class:`RowError` naming ``column``
    (printed, it was a category no served list matched).

    Integral floats print without ``.0`` (a pandas int column with NaN holes is
    float), so ``7`` and ``7.0`` name the same category, value by value: whatever
    else the column (or the batch) holds, ``7.0`` is ``"7"`` and ``2.5`` is ``"2.5"``.
    An empty string is missing, as an empty field of a CSV file is (see :func:`blank`).
    """
    s = as_series(values)
    missing = s.isna().to_numpy().copy()  # pandas 3 hands out read-only views
    if pd.api.types.is_bool_dtype(s.dtype):
        out = s.astype(object).map(str).to_numpy(dtype=object)
    elif pd.api.types.is_float_dtype(s.dtype):
        narrow = _narrow_float(s.dtype)
        v = s.to_numpy(dtype=narrow or np.float64, na_value=np.nan)
        ok = ~missing
        present = _widened(v[ok]) if narrow else v[ok]
        # Integral floats print as ints ("7", not "7.0"), within int64's range only.
        integral = np.isfinite(present) & (present == np.floor(present)) & (np.abs(present) < 2.0**63)
        text = np.empty(len(present), dtype=object)
        text[integral] = present[integral].astype(np.int64).astype(str).astype(object)
        text[~integral] = present[~integral].astype(str).astype(object)
        out = np.empty(len(s), dtype=object)
        out[ok] = text
    elif pd.api.types.is_integer_dtype(s.dtype):
        out = s.astype(str).to_numpy(dtype=object)
    elif pd.api.types.infer_dtype(s, skipna=True) in ("string", "empty"):
        out = s.to_numpy(dtype=object).copy()
        out[missing] = None  # pd.NA would not compare with ""
        missing |= blank(out)
    else:  # mixed values, e.g. a JSON request's "4", 4.0 and 4: each integral float prints as an int
        raw = s.to_numpy(dtype=object)
        for i, x in enumerate(raw):
            if isinstance(x, _NOT_A_VALUE):
                raise RowError(i, column or "?", "one value (a list belongs in a multi-valued field, "
                               "data.columns.multi)", x)
        out = np.empty(len(raw), dtype=object)
        for i, x in enumerate(raw):
            try:
                out[i] = _category_text(x)
            except DataError:  # bytes that are not UTF-8: named by row and column, as another bad value is
                raise RowError(i, column or "?", "text (bytes in UTF-8)", x) from None
        missing |= blank(out)
    out = out.astype(object, copy=not out.flags.writeable)  # pandas 3 hands out read-only views
    out[missing] = None
    return out


def _utf8(x: bytes | bytearray) -> str:
    try:
        return bytes(x).decode("utf-8")
    except UnicodeDecodeError:
        raise DataError(f"a value holds bytes that are not UTF-8 text: {bytes(x)[:20]!r}") from None


def _narrow_float(dtype: Any) -> Any:
    """float32 / float16 (numpy, pandas or Arrow-backed) → that numpy type; None for float64."""
    try:
        np_type = np.dtype(getattr(dtype, "numpy_dtype", dtype))  # pandas' Float32 and Arrow dtypes name theirs
    except TypeError:  # e.g. a sparse column: printed as float64
        return None
    return np_type if np_type.kind == "f" and np_type.itemsize < 8 else None


def _widened(values: np.ndarray) -> np.ndarray:
    """float32 / float16 values → the float64 values their shortest text reads as (0.1 → 0.1, not
    0.10000000149011612; 1e18 → 1e18, not 999999984306749440): what a request or a CSV export of them holds."""
    return values.astype(str).astype(np.float64)


def _category_text(x: Any) -> str:
    if isinstance(x, str):
        return x
    if isinstance(x, (bytes, bytearray)):  # as a Parquet file's binary column is read; str() gave "b'M'", unseen
        return _utf8(x)
    if isinstance(x, np.floating) and x.itemsize < 8:  # a float32 list piece: as as_category prints the column
        x = float(str(x))
    if isinstance(x, (float, np.floating)) and np.isfinite(x) and float(x).is_integer() and abs(x) < 2.0**63:
        return str(int(x))
    return str(x)


# What float() and pandas read alike: ASCII digits only (float() also reads full-width ones, which prepare and
# pandas refuse as not a number).
# \d+(?:\.\d*)? rather than \d+\.?\d*, which matched "123" two ways: a long run of digits that fails at its
# end ("1" * 20000 + "x" in a served row) took seconds of backtracking, quadratic in its length
_PLAIN_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?", re.ASCII)


def _is_missing(v: Any) -> bool:
    """A missing value, one by one: None, NA, NaT, NaN or the empty string (see :func:`blank`)."""
    return (v is None or v is pd.NA or v is pd.NaT or (isinstance(v, (float, np.floating)) and v != v)
            or (isinstance(v, str) and not v))


# NaN written out, as pandas writes a missing float ("nan") and as Arrow's cast of a column, float() and
# pandas' reader read it: a missing number in a numeric column, not a bad row.
_NAN_TEXT = frozenset({"nan", "+nan", "-nan"})
_ASCII_SPACE = " \t\n\r\f\v"  # what a number may be written between (pandas reads no other spaces around one)


def _settle_unparsed(num: np.ndarray, bad: np.ndarray, values: Any) -> None:
    """Settle, in place, the values ``pd.to_numeric`` left unparsed (``bad``): missing where the value is, not bad
    (the empty string, or NaN written out: ``nan``, ``NaN``; see :data:`_NAN_TEXT`), and ±inf in ``num`` for a
    plain number past float range (``1e400``: pandas 3 reads it as inf, as Arrow and Python do; pandas 2 did not
    parse it)."""
    for i in np.flatnonzero(bad):
        v = values[i]
        if isinstance(v, str) and (not v or v.lower() in _NAN_TEXT):
            bad[i] = False
        elif isinstance(v, str) and _PLAIN_NUMBER.fullmatch(t := v.strip(_ASCII_SPACE)):
            num[i], bad[i] = float(t), False


def blank(values: np.ndarray) -> np.ndarray:
    """Which values of an ``object`` array are the empty string.

    An empty string is a missing value everywhere: an empty field of a CSV file is read as missing, and so are
    an empty string in a Parquet log's column and in a row sent to a served model (a user who splits a raw log
    line on its delimiter sends ``""`` for every empty field), so serving encodes a row as prepare did.
    """
    if not len(values):
        return np.zeros(0, dtype=bool)
    try:
        return np.asarray(values == "", dtype=bool)
    except (TypeError, ValueError):  # pd.NA compares as NA, an array cell as an array
        return np.fromiter((isinstance(v, str) and not v for v in values), dtype=bool, count=len(values))


def column_array(df: pd.DataFrame, name: str) -> Any:
    """A frame's column as its backing array (numpy or pandas' extension array), without building a Series
    (~50 us in pandas 3); None when ``name`` is not one column (absent or duplicated)."""
    try:
        loc = df.columns.get_loc(name)
    except KeyError:  # absent
        return None
    if not isinstance(loc, int):  # a duplicated column name
        return None
    get = getattr(df, "_get_column_array", None)  # pandas' own accessor; the public one is slower
    return get(loc) if get is not None else df.iloc[:, loc].array


def column_values(df: pd.DataFrame, name: str) -> tuple[Any, list] | None:
    """A small frame's column as ``(dtype, python values)`` without building a Series.

    A served request is one row or a few: selecting a column (``df[name]``) and
    converting it costs ~50 µs in pandas 3, most of the time of scoring one row,
    so the column's array is taken directly. None when ``name`` is not one column.
    """
    arr = column_array(df, name)
    if arr is None:
        return None
    if isinstance(arr, np.ndarray):
        return arr.dtype, arr.tolist()
    if hasattr(arr, "__arrow_array__"):  # Arrow-backed and masked arrays: nulls come back as None
        return arr.dtype, pa.array(arr).to_pylist()
    return arr.dtype, list(arr)


EXACT_FLOAT = 2.0**53  # floats hold every whole number up to here; past it, only some
_INEXACT_ID = ("an id held exactly: a whole number past 2**53 held as a float may have lost its last digits (a "
               "column of integer ids with a missing value becomes float, in pandas and in a served JSON request); "
               "send ids as strings, or as integers without missing values")


def refuse_inexact_ids(values: Any, column: str) -> None:
    """Rows to score: a categorical value that is a float of magnitude 2**53 or more raises :class:`RowError`.

    Printed as a whole number it would name another id than the one sent, and which one would depend on the
    other rows of the request (a missing value among them turns a column of integers float); ``values`` is a
    column or :func:`column_values`' list."""
    if isinstance(values, list):
        bad = (i for i, v in enumerate(values) if isinstance(v, (float, np.floating)) and _past_exact(v))
    elif pd.api.types.is_float_dtype(values.dtype):
        z = values.to_numpy(dtype=np.float64, na_value=np.nan)
        bad = iter(np.flatnonzero(np.isfinite(z) & (np.abs(z) >= EXACT_FLOAT)).tolist())
    elif values.dtype == object and pd.api.types.infer_dtype(values, skipna=True) not in ("string", "empty"):
        bad = (i for i, v in enumerate(values.to_numpy(dtype=object))
               if isinstance(v, (float, np.floating)) and _past_exact(v))
    else:
        return
    i = next(bad, None)
    if i is not None:
        raise RowError(int(i), column, _INEXACT_ID, values[i] if isinstance(values, list) else values.iloc[i])


def _past_exact(v: float) -> bool:
    return math.isfinite(v) and abs(v) >= EXACT_FLOAT


def _dtype_family(dtype: Any) -> str:
    """"float", "integer", "bool", "object", "string" or "other" (categorical, datetime, ...)."""
    if isinstance(dtype, pd.StringDtype) or (
            isinstance(dtype, pd.ArrowDtype) and pa.types.is_string(dtype.pyarrow_dtype)):
        return "string"
    if isinstance(dtype, pd.CategoricalDtype) or not isinstance(dtype, (np.dtype, pd.api.extensions.ExtensionDtype)):
        return "other"
    return {"f": "float", "i": "integer", "u": "integer", "b": "bool",
            "O": "object" if isinstance(dtype, np.dtype) else "other"}.get(dtype.kind, "other")


def small_column(values: list, dtype: Any, kind: str) -> np.ndarray | None:
    """A few values converted one by one as :func:`as_category` / :func:`as_numeric` would; None: use those.

    ``values`` and ``dtype`` come from :func:`column_values`. Handles the column
    types a served request carries (Python strings, ints, floats, missing values);
    anything else returns None.
    """
    family = _dtype_family(dtype)
    if kind == NUMERIC:
        if family in ("bool", "other"):
            return None
        out = np.empty(len(values), dtype=np.float64)
        for i, v in enumerate(values):
            if _is_missing(v):
                out[i] = np.nan
            elif isinstance(v, (int, float)) and not isinstance(v, bool):
                out[i] = _float(v)
            elif isinstance(v, str) and _PLAIN_NUMBER.fullmatch(v):
                out[i] = float(v)
            else:  # anything else: the vectorised parser decides, and names a bad value
                return None
        return out
    out = np.empty(len(values), dtype=object)
    if family == "float":
        if _narrow_float(dtype) is not None or not all(isinstance(v, float) for v in values if not _is_missing(v)):
            return None  # float32: its Python floats print longer than as_category prints them
        for i, v in enumerate(values):
            out[i] = None if _is_missing(v) else _category_text(v)
        return out
    if family in ("integer", "object", "string"):
        integer = family == "integer"
        for i, v in enumerate(values):
            if _is_missing(v):
                out[i] = None
            elif isinstance(v, str) or (integer and isinstance(v, int) and not isinstance(v, bool)):
                out[i] = v if isinstance(v, str) else str(v)
            else:  # an int or float in an object column, a bool, ...: as_category's rules apply
                return None
        return out
    return None


def _float(v: int | float) -> float:
    """A Python number as a float; an integer beyond float range is NaN (missing), as the same digits in a file
    are (they parse to inf, which is missing)."""
    try:
        return float(v)
    except OverflowError:
        return math.nan


def as_numeric(values: Any, column: str) -> np.ndarray:
    """Column → ``float64`` with NaN for missing; a non-number raises :class:`RowError`."""
    s = as_series(values)
    if pd.api.types.is_datetime64_any_dtype(s) or pd.api.types.is_timedelta64_dtype(s):
        # pandas reads them as integers in the dtype's unit (ns, us): clipped to the train range, silently wrong
        raise DataError(f"column {column!r} holds dates or durations ({s.dtype}), not the numbers the training log "
                        "held; give those (epoch seconds, say: (df[c] - pd.Timestamp(0)) // pd.Timedelta('1s'))")
    try:
        num = pd.to_numeric(s, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    except OverflowError:  # a Python int beyond float range: missing, as in a file
        s = s.map(lambda v: _float(v) if isinstance(v, int) else v)
        num = pd.to_numeric(s, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    bad = np.isnan(num) & ~s.isna().to_numpy()
    if bad.any():
        num = num.copy()  # pandas 3 hands out read-only arrays
        _settle_unparsed(num, bad, s.to_numpy(dtype=object))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise RowError(i, column, "a number", s.iloc[i])
    return num


def as_lists(values: Any, sep: str, column: str | None = None) -> np.ndarray:
    """Column of lists, tuples, arrays or ``sep``-joined strings → ``object`` array of ``list[str]``.

    A lone value that is no string or list (``pd.read_csv`` reads a list column whose rows hold one value
    each as numbers; a Parquet column of decimals, dates or times) is a one-value list, printed as a list's
    piece of that type is.
    A mapping, or a list holding lists, is no list of values: :class:`RowError` naming ``column`` (a JSON
    object's keys were read as the list, a nested list printed as one unseen value).
    """
    out = np.empty(len(values), dtype=object)
    for i, x in enumerate(as_series(values).to_numpy(dtype=object)):
        if isinstance(x, (bytes, bytearray)):  # one joined value, not a list of its byte values
            x = _utf8(x)
        if _is_missing(x):
            out[i] = []
        elif isinstance(x, str):
            out[i] = [t for t in x.split(sep) if t] if x else []
        elif not hasattr(x, "__iter__"):  # a number, a decimal, a date or time, a bool: one value, printed
            out[i] = [_category_text(x)]
        elif isinstance(x, (dict, set, frozenset)) or any(isinstance(t, _NOT_A_VALUE) for t in x):
            raise RowError(i, column or "?", f"a list of values or a {sep!r}-joined string", x)
        else:  # missing pieces (None, NaN, "") left out, as a joined string's empty pieces are
            out[i] = [_category_text(t) for t in x if not _is_missing(t)]
    return out


_NOT_A_VALUE = (list, tuple, set, frozenset, dict, np.ndarray)


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
    if bad.any():
        num = num.copy()  # pandas 3 hands out read-only arrays
        _settle_unparsed(num, bad, values)
    return num, bad


def first_offender(masks: dict[str, np.ndarray], rows: np.ndarray) -> tuple[str | None, int]:
    """The first row flagged in ``rows`` and the first column whose mask flags it: ``(column, row index)``.

    ``masks`` maps column names to per-row bad masks, in column order; used to
    give a bad-row report a sample (see :class:`BadRowLog`).
    """
    hit = np.flatnonzero(rows)
    if hit.size == 0:
        return None, -1
    i = int(hit[0])
    return next((name for name, m in masks.items() if m[i]), None), i


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
    time_column: str | None = None  # a column read alongside the fields as ``_time`` (the table reader's)
    time_format: str | None = None  # how that column writes its times (``data.columns.time.format``), if not as usual
    time_unit: str = "s"  # what that column's numbers count since 1970 (``data.columns.time.unit``)
    default_numeric_transform: ClassVar[str] = "criteo"
    file_pattern: ClassVar[str] = "*"  # the files of a folder given as the raw input
    text_only: ClassVar[bool] = False  # reads text files only: one whose first bytes say otherwise is refused

    def __init__(self, path: str | Path | Sequence[str | Path] | None) -> None:
        # A file, a folder, a glob or a list of them (see autoint.datasets.text.expand_inputs).
        self.raw = path if path is None or isinstance(path, (str, Path)) else [str(p) for p in path]
        self.path = Path(path).expanduser() if isinstance(path, (str, Path)) else None  # ~ as the shell would
        self.bad = BadRowLog()
        self.rows_seen = 0
        self.rows_per_file: dict[str, int] = {}  # usable rows read from each file, in reading order
        self._files: list[Path] | None = None
        # Per file read, how a row ordinal maps back to its line (see :meth:`lines_of`): the file's first ordinal,
        # its first data line, the lines its parser skipped (sorted) and its name where there are several files.
        self._line_maps: list[tuple[int, int, np.ndarray, str | None]] = []

    def files(self) -> list[Path]:
        """The raw files behind the input, in reading order (a folder, glob or list expanded)."""
        if self.raw is None:
            raise DataError(f"no raw file given for format {self.format!r}: set data.raw or pass --raw")
        if self._files is None:
            self._files = refuse_unread(expand_inputs(self.raw, self.file_pattern))
            if self.text_only:  # a Parquet or zip file among a day's text files was parsed as text, a bad row per
                for path in self._files:  # line, under max_bad_fraction in a large folder
                    refuse_binary(path, f"{self.format}'s text lines")
        return self._files

    def row_files(self) -> list[Path]:
        """The files whose lines are rows (``prepare.json``'s ``rows_per_file`` counts these): all of
        :meth:`files`, unless a reader also reads side tables."""
        return self.files()

    def lines_of(self, ordinals: Sequence[int]) -> list[int | str]:
        """The line (``name:line`` with several files) of each row ordinal, as the bad-row log names lines: for
        readers that record their files' layout, the file line (a header and skipped lines counted, though not
        the extra lines of a value that runs over several); else the ordinal's 1-based row number."""
        if not self._line_maps:
            return [int(o) + 1 for o in ordinals]
        starts = [m[0] for m in self._line_maps]
        out: list[int | str] = []
        for o in ordinals:
            start, first, skipped, name = self._line_maps[max(0, bisect_right(starts, int(o)) - 1)]
            line = int(file_lines(np.array([int(o) - start]), skipped, first)[0])
            out.append(line if name is None else f"{name}:{line}")
        return out

    def _count_file_rows(self, path: Path, n: int) -> None:
        self.rows_per_file[str(path)] = self.rows_per_file.get(str(path), 0) + int(n)

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
        return describe_inputs(self.raw) if self.raw is not None else f"<{self.format} rows>"

    def text_layout(self, path: Path) -> TextLayout | None:
        """How ``path`` lays out its rows if it is a text file in this format's own layout, so rows cut
        from a raw log can be scored as they are; None: a table whose header names its columns."""
        return None

    # --- inference: user rows → canonical -------------------------------------
    def labels_from_frame(self, values: pd.Series) -> np.ndarray:
        """User-given labels → int8 0/1; anything else raises :class:`DataError`."""
        num = pd.to_numeric(values, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
        ok = np.isin(num, (0.0, 1.0))
        if not ok.all():
            i = int(np.flatnonzero(~ok)[0])
            raise RowError(i, self.label, "a label of 0 or 1", values.iloc[i])
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
        label, cols = self.canonical_columns(df)
        return canonical_frame(label, cols)

    def expected_columns(self) -> list[str]:
        """The columns rows to score carry, as an error lists them."""
        return [f.name for f in self.fields]

    def canonical_columns(self, df: pd.DataFrame, labels: bool = True, exact_ids: bool = True
                          ) -> tuple[np.ndarray | None, dict[str, np.ndarray]]:
        """:meth:`from_frame` without building the frame: ``(labels or None, {field: column})``. With ``labels``
        False a label column is not read at all (scoring: rows to score often carry it blank).

        Up to :data:`SMALL_BATCH` rows (a request to a served model) take a per-value
        path for the column types whose conversion is simple; every other column
        the vectorised one. Both give the same values (a test holds them to it). With ``exact_ids`` (a frame
        a user or a request built) a categorical float past 2**53 is refused (:func:`refuse_inexact_ids`); rows
        read from a file (``autoint predict``) keep the file's own types, as prepare read them, and are not.
        """
        if not isinstance(df, pd.DataFrame):
            raise DataError(f"expected a pandas DataFrame of raw rows, got {type(df).__name__}")
        if isinstance(df.columns, pd.MultiIndex):  # df[name] would be a frame, not a column
            raise DataError("the rows' columns are a MultiIndex; give one level of names (the fields')")
        twice = sorted({str(c) for c in df.columns[df.columns.duplicated()]} & {f.name for f in self.fields})
        if twice:
            raise DataError(f"the rows name column {twice[0]!r} twice; name each column once")
        absent = [f.name for f in self.fields if f.name not in df.columns]
        if absent:
            expected = self.expected_columns()
            none = not set(map(str, df.columns)) & set(expected)
            raise DataError(
                f"the rows lack column {absent[0]!r}"
                + (f" (and {len(absent) - 1} more: {absent[1:]})" if len(absent) > 1 else "")
                + f"; expected columns: {expected}"
                + (f"; they hold none of them ({_few_names(df.columns)}): a file without a header line is read "
                   "with its first row as the names" if none and len(df.columns) > 1 else "")
                + read_as(absent[0], list(df.columns), ROWS_READ_AS)
            )
        small = len(df) <= SMALL_BATCH
        cols: dict[str, np.ndarray] = {}
        for f in self.fields:
            few = column_values(df, f.name) if small and f.kind != MULTI else None
            if f.kind == CATEGORICAL and exact_ids:
                refuse_inexact_ids(few[1] if few is not None else df[f.name], f.name)
            out = small_column(few[1], few[0], f.kind) if few is not None else None
            if out is not None:
                cols[f.name] = out
                continue
            s = df[f.name].reset_index(drop=True)
            if f.kind == CATEGORICAL:
                cols[f.name] = as_category(s, f.name)
            elif f.kind == NUMERIC:
                cols[f.name] = as_numeric(s, f.name)
            else:
                cols[f.name] = as_lists(s, self.multi_separator(f.name), f.name)
        label_col = self.label_column_in_frame()
        label = self.labels_from_frame(df[label_col].reset_index(drop=True)) \
            if labels and label_col in df.columns else None
        return label, cols

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


_NULLABLE_INTS = {pa.int8(): pd.Int8Dtype(), pa.int16(): pd.Int16Dtype(), pa.int32(): pd.Int32Dtype(),
                  pa.int64(): pd.Int64Dtype(), pa.uint8(): pd.UInt8Dtype(), pa.uint16(): pd.UInt16Dtype(),
                  pa.uint32(): pd.UInt32Dtype(), pa.uint64(): pd.UInt64Dtype()}


def _few_names(columns: Iterable[Any], n: int = 5) -> str:
    names = [str(c) for c in columns]
    return ", ".join(repr(c) for c in names[:n]) + (f", ... ({len(names)} in all)" if len(names) > n else "")


def _binary_text(col: pa.Array, strict: bool, name: str) -> pa.Array:
    """Binary values (plain, large, view, fixed-size, dictionary-encoded, or a list's pieces) → UTF-8 strings; a
    value that is no UTF-8 is refused (``strict``) or decoded with U+FFFD, which the reader counts as a bad row."""
    t = col.type
    if pa.types.is_dictionary(t):
        return _binary_text(col.dictionary_decode(), strict, name)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return pa.ListArray.from_arrays(col.offsets, _binary_text(col.flatten(), strict, name), mask=col.is_null())
    if pa.types.is_fixed_size_binary(t):
        col = col.cast(pa.binary())
    try:
        return col.cast(pa.string())
    except pa.ArrowInvalid:
        if strict:
            raise DataError(f"column {name!r} holds bytes that are not UTF-8 text") from None
        return pa.array([None if v is None else v.decode("utf-8", "replace") for v in col.to_pylist()], pa.string())


def _is_binary(t: pa.DataType) -> bool:
    if pa.types.is_dictionary(t) or pa.types.is_list(t) or pa.types.is_large_list(t):
        return _is_binary(t.value_type)
    return (pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_binary_view(t)
            or pa.types.is_fixed_size_binary(t))


def raw_frame(batch: pa.RecordBatch, strict: bool = False) -> pd.DataFrame:
    """A batch of a Parquet file of raw rows → pandas, as prepare and ``predict`` both read it.

    Integer columns stay integers where they hold a null (pandas' default makes them float64, which rounds
    an id past 2**53 and made the same id two categories, one per chunk with or without a null); string
    views become strings (pandas cannot convert a list of them), and so do a list's integers (exact, where a
    null piece made the chunk's lists float64); binary columns are decoded as UTF-8 (see :func:`_binary_text`:
    ``strict`` for ``predict``, which refuses a file of undecodable bytes, as it does a CSV file)."""
    arrays = []
    for name, col in zip(batch.schema.names, batch.columns):
        t = col.type
        if pa.types.is_string_view(t):
            col = col.cast(pa.string())
        elif _is_binary(t):
            col = _binary_text(col, strict, name)
        elif (pa.types.is_list(t) or pa.types.is_large_list(t)) and (
                pa.types.is_string_view(t.value_type) or pa.types.is_integer(t.value_type)):
            col = col.cast(pa.list_(pa.string()))
        arrays.append(col)
    return pa.RecordBatch.from_arrays(arrays, names=batch.schema.names).to_pandas(types_mapper=_NULLABLE_INTS.get)


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
    """Canonical raw frame → raw Arrow table (label first when present, then the fields, then ``_time``)."""
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
    if TIME in frame.columns:
        arrays.append(pa.array(frame[TIME].to_numpy(dtype=np.float64)))
        names.append(TIME)
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


class NamesClash(DataError):
    """Two fields (or a field and ``label``) whose names differ only in ASCII case, which the engine reads as one."""


def _ascii_lower(name: str) -> str:
    return "".join(chr(ord(c) + 32) if "A" <= c <= "Z" else c for c in name)


def check_fields(fields: Iterable[FieldSpec]) -> tuple[FieldSpec, ...]:
    """Sanity-check reader fields: unique names (also ignoring ASCII case), none called ``label`` (in any case) or
    starting with ``_``, unfitted."""
    out = tuple(fields)
    names = [f.name for f in out]
    if len(set(names)) != len(names):
        raise DataError(f"duplicate field names: {sorted({n for n in names if names.count(n) > 1})}")
    if "label" in names:
        raise DataError("a field may not be called 'label' (the canonical label column)")
    # The engine (DuckDB) matches column names without regard to ASCII case, quoted or not: 'User' would read
    # 'user', and 'Label' the staged label column.
    seen: dict[str, str] = {"label": "label"}
    for n in names:
        other = seen.setdefault(_ascii_lower(n), n)
        if other != n:
            raise NamesClash(f"field {n!r}: its name differs from {other!r} only in case"
                            + (" (the canonical label column)" if other == "label" else "")
                            + ", and the preprocessing engine (DuckDB) matches column names without regard to "
                              "case; rename it (with a header, data.columns.names replaces the file's names)")
    reserved = [n for n in names if n.startswith("_")]
    if reserved:  # the engine's own columns (_row, _pos, _split, _bucket.NAME, ...) would be shadowed
        raise DataError(f"field {reserved[0]!r}: names starting with '_' are reserved for autoint's own columns; "
                        "rename it (with a header, data.columns.names replaces the file's names)")
    for f in out:
        if f.kind not in (CATEGORICAL, NUMERIC, MULTI):  # pragma: no cover - FieldSpec checks too
            raise DataError(f"field {f.name!r}: unknown kind {f.kind!r}")
    return out
