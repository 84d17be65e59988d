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
        encoding: utf-8                         # of CSV / TSV text
        header: true                            # true | false | auto (see below)
        names: [clicked, site, device, price, age, tags, session_id, ts]  # the columns, in file order
        time: {column: ts, derive: [hour, weekday]}  # or: time: ts; format: "%y%m%d%H" for Avazu's hours

Fields come in the order the kinds are listed, each kind in its listed order;
fields derived from the time column (``ts_hour``, ``ts_weekday``) come last.

Files without a header: ``header: false`` with ``names`` (line 1 is data). With
``header: true`` (the default) the first line is a header; ``names``, if given,
replaces it (same number of columns). ``header: auto`` needs ``names`` and
decides per file: a file whose first line equals ``names`` has a header, any
other file starts with data, so a ``files`` split can mix a train file with a
header and valid / test files without one. Parquet files name their own
columns; ``header`` and ``names`` apply to CSV / TSV only.

The time column (``data.columns.time``, or ``data.split.time_column`` when it
is not a numeric field) is read alongside the fields and never fed to the
model: timestamps or numbers (see :mod:`autoint.datasets.times`) parsed into
seconds, the canonical frame's ``_time`` column; ``derive`` adds categorical
fields from it (``hour``: "0".."23", ``weekday``: "mon".."sun"); ``format``
(Python's ``strptime`` codes) reads times written another way, such as Avazu's
YYMMDDHH hours (``format: "%y%m%d%H"``).
A column named in the YAML but absent from the file is an error naming the file
and column; a file column the YAML does not mention is left out and reported
(:attr:`TableReader.ignored_columns`).

Bad rows: a CSV line with more or fewer fields than the header (``field_count``,
reported by the CSV parser's own bad-row hook with its line number), a label
outside the positive / negative sets (``bad_label``), a
non-number in a numeric column (``non_numeric``) and undecodable bytes
(``decode_error``) and a time that does not parse (``bad_time``). For CSV, line
numbers count the header, if any, as line 1 (a quoted value spanning lines
shifts them).
"""

from __future__ import annotations

import codecs
import csv
import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from autoint.datasets.base import (
    NUMERIC_TRANSFORMS,
    DataError,
    NamesClash,
    RawReader,
    as_category,
    as_lists,
    canonical_frame,
    check_fields,
    first_offender,
    parse_numbers,
    raw_frame,
)
from autoint.datasets.errors import RowError
from autoint.datasets.text import (
    COMPRESSION,
    ROWS_READ_AS,
    TextLayout,
    damaged,
    file_labels,
    file_lines,
    first_line,
    holds_nothing,
    open_binary,
    open_parquet,
    parquet_batches,
    read_as,
    refuse_binary,
    undecodable_bad_rows,
    warn_empty,
)
from autoint.datasets.times import (
    DERIVED,
    TIME,
    check_format,
    check_unit,
    derive,
    derived_values,
    epoch_doubt,
    expected,
    parse_times,
)
from autoint.errors import message_head
from autoint.schema import CATEGORICAL, MULTI, NUMERIC, FieldSpec

log = logging.getLogger(__name__)

_KEYS = ("label", "categorical", "numeric", "multi", "drop", "sep", "format", "encoding", "header", "names", "time")
LABEL_KEYS = ("name", "positive", "negative")
TIME_KEYS = ("column", "derive", "format", "unit")
_HEADERS = (True, False, "auto")
# What a number written with a decimal comma (a European CSV's '50,01') is told.
_DECIMAL_COMMA = ("a number with a decimal point (decimal commas are not read, nor thousands separators: convert the "
                  "column, e.g. 50,01 to 50.01, or 1,234 to 1234)")  # "1,234" is either: the advice names both
_KIND_KEYS = {"categorical": CATEGORICAL, "numeric": NUMERIC, "multi": MULTI}
_TABLE_FORMATS = ("csv", "tsv", "parquet")
_TRUE = ("1", "true")
_FALSE = ("0", "false")


def _norm(values: Any) -> set[str]:
    """Label values as the comparable strings the reader sees (``1``, ``1.0``, ``True`` → ``1``/``true``)."""
    out = set()
    for v in values:
        if isinstance(v, bool):  # YAML reads an unquoted yes / on as true, no / off as false: all of them meant
            out.update(("true", "yes", "on") if v else ("false", "no", "off"))
        else:
            out.add(_label_texts(pd.Series([str(v)])).iloc[0])
    return out


def _label_texts(s: pd.Series) -> pd.Series:
    """Label texts as compared: stripped, lower case, and a whole number written as one (``1.0``, ``1e0`` →
    ``1``), so a CSV's ``1.0`` / ``0.0`` labels match ``[1]`` / ``[0]`` as a Parquet file's floats do."""
    s = s.str.strip().str.lower()
    num = pd.to_numeric(s, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    whole = np.isfinite(num) & (num == np.floor(num))
    if whole.any():
        s = s.copy()
        s[whole] = as_category(num[whole])  # the categories' rule: a whole float printed as an int
    return s


def _replaced(s: pd.Series) -> np.ndarray:
    """Which values of an ``object`` column hold U+FFFD, the decoder's mark for bytes it could not decode (a
    Parquet column of dates, decimals or bools with nulls is also ``object``: not text, so nothing replaced)."""
    if pd.api.types.infer_dtype(s, skipna=True) == "string":
        return s.str.contains("\ufffd", regex=False).to_numpy(dtype=bool, na_value=False)  # no fillna: pandas 2 warned
    return np.fromiter((isinstance(v, str) and "\ufffd" in v for v in s), dtype=bool, count=len(s))


def _column_name(spec: dict[str, Any], setting: str, keys: tuple[str, ...], what: str) -> str:
    """The column a sub-mapping (``label``, ``time``) names under its first key, its other keys checked."""
    extra = sorted(set(spec) - set(keys))
    if extra:
        raise DataError(f"{setting}.{extra[0]}: unknown key (known: {', '.join(keys)})")
    name = spec.get(keys[0])
    if not isinstance(name, str) or not name:
        raise DataError(f"{setting}.{keys[0]}: the {what} column's name is required")
    return name


def _lone_line(path: Path, encoding: str) -> str | None:
    """The text of a file that is one line without a newline (up to 1 MiB), or None."""
    try:
        with open_binary(path) as f:
            data = f.read(1 << 20)
        if not data or b"\n" in data or b"\r" in data or len(data) == 1 << 20:
            return None
        return data.decode(encoding)
    except (OSError, EOFError, UnicodeDecodeError):
        return None


def _yaml_word_hint(value: Any) -> str:
    """Why a column name is no string where YAML read a bare word as something else (``label: yes`` is True)."""
    if isinstance(value, bool) or value is None or isinstance(value, (int, float)):
        return (f" (YAML reads the bare word or number as {value!r}: quote a column name such as 'yes', 'no', "
                "'on', 'off', 'null' or '1')")
    return ""


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
                odd = [n for n in spec if not isinstance(n, str) or not n]  # a list in the list: unhashable, a
                if odd:  # TypeError traceback
                    raise DataError(f"data.columns.{key}: column names must be strings, got {odd[0]!r}"
                                    + _yaml_word_hint(odd[0]))
                twice = [n for i, n in enumerate(spec) if n in spec[:i]]
                if twice:
                    raise DataError(f"data.columns.{key}: {twice[0]!r} is listed twice")
                spec = dict.fromkeys(spec)
            if not isinstance(spec, dict):
                raise DataError(f"data.columns.{key}: expected a list of column names or a mapping, got {spec!r}")
            for name, opt in spec.items():
                if not isinstance(name, str) or not name:
                    raise DataError(f"data.columns.{key}: column names must be strings, got {name!r}"
                                    + _yaml_word_hint(name))
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
        self.time_column, self.derive, self.time_format, self.time_unit = self._time(columns.get("time"))
        if self.time_format is not None and self.time_column in {f.name for f in self.fields if f.kind == NUMERIC}:
            raise DataError(f"data.columns.time.format: {self.time_column!r} is also a numeric field, whose numbers "
                            "the model and a time split read as they are, not as times; drop it from "
                            "data.columns.numeric (the fields derived from it carry the time)")
        self.fields += [FieldSpec(f"{self.time_column}_{part}", CATEGORICAL) for part in self.derive]
        try:
            self.fields = list(check_fields(self.fields))
        except DataError as e:
            raise (NamesClash if isinstance(e, NamesClash) else DataError)(f"data.columns: {e}") from None
        if self.label_name in {f.name for f in self.fields}:
            raise DataError(f"data.columns: column {self.label_name!r} is both the label and a field")
        drop = columns.get("drop") or []
        if isinstance(drop, str):
            drop = [drop]
        if not isinstance(drop, (list, tuple)):
            raise DataError(f"data.columns.drop: expected a list of column names, got {drop!r}")
        self.drop = [str(c) for c in drop]
        for name in self.drop:  # a column both read and dropped was read, without a word
            if name == self.label_name or name in {f.name for f in self.fields}:
                raise DataError(f"data.columns.drop: {name!r} is also "
                                + ("the label" if name == self.label_name else "a field")
                                + "; remove it from one of the two")
        self.sep = columns.get("sep")
        if self.sep == "\\t":  # a tab as typed on a command line (--set data.columns.sep=\t) or in YAML's '\t'
            self.sep = "\t"
        if self.sep is not None and (not isinstance(self.sep, str) or len(self.sep) != 1):
            raise DataError(f"data.columns.sep: must be one character (a tab: \"\\t\" in YAML, \\t on the command "
                            f"line), got {self.sep!r}")
        self.format = columns.get("format")
        if self.format is not None and self.format not in _TABLE_FORMATS:
            raise DataError(f"data.columns.format: must be one of {_TABLE_FORMATS}, got {self.format!r}")
        self.encoding = columns.get("encoding") or "utf-8"
        try:
            readable = getattr(codecs.lookup(self.encoding), "_is_text_encoding", True)
        except (LookupError, TypeError):
            raise DataError(f"data.columns.encoding: unknown text encoding {self.encoding!r} "
                            "(e.g. utf-8, latin-1, cp1252)") from None
        try:  # as Arrow's reader decodes: its buffers, block by block (punycode's decoder cannot take them)
            if readable:
                codecs.getincrementaldecoder(self.encoding)().decode(pa.py_buffer(b"a,b\n"))
        except UnicodeError:
            pass
        except (TypeError, AttributeError, ValueError):
            readable = False
        if not readable:  # rot13, base64, zlib: codecs of bytes to bytes, each a traceback once the file was read
            raise DataError(f"data.columns.encoding: {self.encoding!r} is no text encoding the reader can read "
                            "(e.g. utf-8, latin-1, cp1252)")
        self.header = columns.get("header", True)
        if self.header not in _HEADERS:
            raise DataError(f"data.columns.header: must be true, false or auto, got {self.header!r}")
        names = columns.get("names")
        if names is not None and (not isinstance(names, (list, tuple)) or not names
                                  or not all(isinstance(n, str) and n for n in names)):
            raise DataError(f"data.columns.names: expected a list of column names, got {names!r}")
        if names is not None and len(set(names)) != len(names):
            twice = sorted({n for n in names if names.count(n) > 1})
            raise DataError(f"data.columns.names: a column is named twice: {twice}")
        self.names = list(names) if names is not None else None
        if self.names is None and self.header is not True:
            raise DataError(f"data.columns.header: {str(self.header).lower()} needs data.columns.names, "
                            "the file's columns in order")

    @staticmethod
    def _time(spec: Any) -> tuple[str | None, list[str], str | None, str]:
        """``data.columns.time``: a column name, or ``{column, derive: [hour, weekday], format, unit}``."""
        if spec is None:
            return None, [], None, "s"
        if isinstance(spec, str) and spec:
            return spec, [], None, "s"
        if not isinstance(spec, dict):
            raise DataError(f"data.columns.time: expected a column name or {{column: ..., derive: [...]}}, "
                            f"got {spec!r}")
        column = _column_name(spec, "data.columns.time", TIME_KEYS, "time")
        parts = spec.get("derive") or []
        parts = [parts] if isinstance(parts, str) else parts
        if not isinstance(parts, (list, tuple)) or any(p not in DERIVED for p in parts):
            raise DataError(f"data.columns.time.derive: expected a list of {list(DERIVED)}, got {parts!r}")
        fmt = spec.get("format")
        if fmt is not None:
            problem = check_format(fmt)
            if problem:
                raise DataError(f"data.columns.time.format: {problem}")
        unit = spec.get("unit", "s")
        problem = check_unit(unit, fmt)
        if problem:
            raise DataError(f"data.columns.time.unit: {problem}")
        return column, list(dict.fromkeys(parts)), fmt, unit

    @staticmethod
    def _label(spec: Any) -> tuple[str, set[str], set[str]]:
        if isinstance(spec, str) and spec:
            return spec, set(_TRUE), set(_FALSE)
        if isinstance(spec, dict):
            name = _column_name(spec, "data.columns.label", LABEL_KEYS, "label")
            pos, neg = spec.get("positive", [1]), spec.get("negative", [0])
            pos = pos if isinstance(pos, (list, tuple)) else [pos]
            neg = neg if isinstance(neg, (list, tuple)) else [neg]
            p, n = _norm(pos), _norm(neg)
            for key, values, default in (("positive", p, 1), ("negative", n, 0)):
                if not values:  # refused here, not as every row's bad label once the whole log was read
                    raise DataError(f"data.columns.label.{key}: lists no value; it needs at least one (default "
                                    f"[{default}]), or every row would be a bad label")
            if "" in p | n:
                raise DataError("data.columns.label: an empty label is missing (a bad row), so it cannot be listed "
                                "as positive or negative")
            if p & n:
                raise DataError(f"data.columns.label: {sorted(p & n)} listed as both positive and negative")
            return name, p, n
        expected = "a column name (0/1 values) or {name: ..., positive: [...], negative: [...]}"
        if spec is None:
            raise DataError(f"data.columns.label: required; {expected}")
        raise DataError(f"data.columns.label: expected {expected}, got {spec!r}{_yaml_word_hint(spec)}")


def _check_derived(values: pd.Series, name: str, part: str) -> None:
    """A derived field sent as such holds what the model derived (hour "0".."23", weekday "mon".."sun"): another
    form (a weekday 0, "Monday") was scored as an unseen value, without a word."""
    allowed = set(derived_values(part))
    text = as_category(values.reset_index(drop=True), name)
    bad = np.array([v is not None and v not in allowed for v in text], dtype=bool)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        what = "an hour of day, 0 to 23" if part == "hour" else "a weekday as the model derives it, mon to sun"
        raise RowError(i, name, f"{what} (or send the time column instead)", values.iloc[i])


class TableReader(RawReader):
    """Reader for a YAML-described CSV / TSV / Parquet table (see the module docstring).

    ``time_column`` is ``data.split.time_column``: unless it is a numeric field,
    it is read as the time column (and must agree with ``data.columns.time``).
    """

    format = "table"
    default_numeric_transform = "standardize"

    def __init__(self, path: str | Path | None, columns: dict[str, Any] | None,
                 time_column: str | None = None) -> None:
        super().__init__(path)
        self.spec = TableSpec(columns)
        self.columns = dict(columns)  # as given, so an encoder can rebuild this reader
        numeric = {f.name for f in self.spec.fields if f.kind == NUMERIC}
        split_time = time_column if time_column and time_column not in numeric else None
        if split_time and self.spec.time_column and split_time != self.spec.time_column:
            raise DataError(f"data.split.time_column: {split_time!r} is neither a numeric field nor "
                            f"data.columns.time ({self.spec.time_column!r})")
        self.time_column = self.spec.time_column or split_time
        if self.time_column is not None and self.time_column == self.spec.label_name:
            raise DataError(f"data.split.time_column: {self.time_column!r} is the label column, whose 0s and 1s "
                            "are no times; name the column that holds the rows' times")
        self.time_format = self.spec.time_format
        self.time_unit = self.spec.time_unit
        derived = {f"{self.spec.time_column}_{part}" for part in self.spec.derive}
        # The file's columns this reader reads: label, fields (not the derived ones), time column.
        self.read_columns = list(dict.fromkeys(
            [self.spec.label_name] + [f.name for f in self.spec.fields if f.name not in derived]
            + ([self.time_column] if self.time_column else [])))
        self.ignored_columns: list[str] = []
        self._fname: str | None = None  # the file named in bad-row examples when there are several
        self._doubted = False  # warned that the time column's numbers may not be epoch seconds

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
        suffixes = [s.lower() for s in path.suffixes if s.lower() not in (*COMPRESSION, ".zip", ".xz")]
        ext = suffixes[-1].lstrip(".") if suffixes else ""
        if ext in ("parquet", "pq"):
            return "parquet"
        if ext in ("tsv", "tab"):
            return "tsv"
        return "csv"

    def separator(self, path: Path) -> str:
        return "\t" if self.file_format(path) == "tsv" and not self.spec.sep else (self.spec.sep or ",")

    def text_layout(self, path: Path) -> TextLayout | None:
        if self.file_format(path) == "parquet":
            return None
        sep = self.separator(path)
        try:
            names, header = self._layout(path, sep)
        except DataError:  # rows to score need not be laid out as a training file: their header may name them
            names, header = self.spec.names, True
        if names is not None:
            # A model whose files' columns were named by data.columns.names (headerless files, or headers renamed
            # between files) scores a file whose first line names the columns (a CSV written by pandas, say) by those
            # names: a first line holding every column read (the label aside) is a header, its fields separated as
            # the training files' were or as the file's suffix says (.csv ',', .tsv tab). Read by position, a header
            # in another order swapped the columns' values.
            try:
                line = first_line(path, self.spec.encoding)
            except UnicodeError:  # reading the rows says so, naming the row
                return TextLayout(sep=sep, names=names, header=header, encoding=self.spec.encoding)
            for header_sep in dict.fromkeys([sep, "\t" if path.suffix.lower() in (".tsv", ".tab") else ","]):
                first = _split_line(line, header_sep)
                if all(c in first for c in self.read_columns if c != self.spec.label_name):
                    return TextLayout(sep=header_sep, names=None, header=True, encoding=self.spec.encoding)
            # Rows to score may come without the label column.
            if self.spec.label_name in names and len(_split_line(line, sep)) == len(names) - 1:
                names = [n for n in names if n != self.spec.label_name]
        return TextLayout(sep=sep, names=names, header=header, encoding=self.spec.encoding)

    # --- checking the file against the spec --------------------------------------
    def _layout(self, path: Path, sep: str) -> tuple[list[str] | None, bool]:
        """A CSV / TSV file's column names (None: its header line's) and whether its first line is a header."""
        names, header = self.spec.names, self.spec.header
        if names is None or header is False:
            return names, header is not False
        try:
            first = _split_line(first_line(path, self.spec.encoding), sep)
        except UnicodeError as e:
            raise _not_encoded(path, e, self.spec.encoding, "in its first line") from None
        if header == "auto":
            if first != names and sorted(first) == sorted(names):  # read as data, each column under another's name
                raise DataError(f"{path}: its first line names the columns of data.columns.names in another order "
                                f"({first}); with header: auto a header must list them as names does; for files "
                                "with headers in different orders, drop names and use header: true")
            return names, first == names
        if len(first) != len(names):
            raise DataError(f"{path}: the header has {len(first)} columns, data.columns.names lists {len(names)} "
                            "(with header: true, names replace the header's; header: false if the file has none)")
        if first != names and sorted(first) == sorted(names):  # each column would be read under another's name
            raise DataError(f"{path}: its header names the columns of data.columns.names in another order ({first}); "
                            "names replace a header position by position, so each column would be read as "
                            "another: for files with headers in different orders, drop names")
        numeric = [i for i, name in enumerate(names) if name in {f.name for f in self.spec.fields if f.kind == NUMERIC}]
        if numeric and all(_is_number(first[i]) for i in numeric):  # a headerless file of a set: its first row lost
            log.warning("%s: its first line holds numbers in every numeric column (%s), as a row would, but header: "
                        "true skips it as a header; if the file has no header, set header: auto (a first line equal "
                        "to data.columns.names is the header, any other a row)", path,
                        ", ".join(names[i] for i in numeric[:3]))
        return names, True

    def _check_columns(self, path: Path, present: list[str]) -> None:
        absent = [c for c in self.read_columns if c not in present]
        if absent:
            kinds = {f.name: f.kind for f in self.spec.fields}
            setting = ("data.columns.label" if absent[0] == self.spec.label_name
                       else "data.columns.time" if absent[0] == self.spec.time_column
                       else "data.split.time_column" if absent[0] == self.time_column
                       else f"data.columns.{kinds[absent[0]]}" if absent[0] in kinds else "data.columns")
            headerless = (not set(self.read_columns) & set(present) and len(present) > 1
                          and self.file_format(path) != "parquet")
            bom = bool(present) and present[0].startswith("\u00ef\u00bb\u00bf")  # EF BB BF in latin-1 or cp1252
            raise DataError(f"{path}: column {absent[0]!r} named in {setting} is not in the file "
                            f"(columns: {present}){read_as(absent[0], present, 'set data.columns.sep: {}')}"
                            + ("; none of the columns named is there: if the file has no header line, set "
                               "data.columns.header: false and name its columns in data.columns.names"
                               if headerless else "")
                            + (f"; the first name starts with a UTF-8 byte-order mark read as "
                               f"{self.spec.encoding}: the file is UTF-8 (data.columns.encoding: utf-8)"
                               if bom else ""))
        twice = [c for c in self.read_columns if present.count(c) > 1]
        if twice:  # the reader would take one of them, silently
            if self.file_format(path) == "parquet":
                raise DataError(f"{path}: column {twice[0]!r} appears {present.count(twice[0])} times in the file's "
                                "schema; write the file with one column of that name")
            raise DataError(f"{path}: column {twice[0]!r} appears {present.count(twice[0])} times in the header; "
                            "rename the copies (or name every column in data.columns.names with header: true)")
        absent_drop = [c for c in self.spec.drop if c not in present]
        if absent_drop:
            raise DataError(f"{path}: column {absent_drop[0]!r} named in data.columns.drop is not in the file "
                            f"(columns: {present})")
        used = set(self.read_columns) | set(self.spec.drop)
        self.ignored_columns += [c for c in present if c not in used and c not in self.ignored_columns]  # any file's

    def _check_types(self, path: Path, schema: pa.Schema) -> None:
        """A Parquet column of lists (or structs, maps) read as one value per row printed each as its text: a
        category "['a' 'b']" that no served list matched, "[]" for an empty list (a helper's hunt)."""
        for f in self.spec.fields:
            if f.name not in schema.names:  # derived from the time column
                continue
            t = schema.field(f.name).type
            t = t.value_type if pa.types.is_dictionary(t) else t
            if f.kind != MULTI and _nested(t):
                raise DataError(f"{path}: column {f.name!r} holds {t} values, but data.columns.{f.kind} takes one "
                                "value per row; a column of lists belongs in data.columns.multi")
            if f.kind == MULTI and ((_nested(t) and not _is_list(t)) or (_is_list(t) and _nested(t.value_type))):
                raise DataError(f"{path}: column {f.name!r} holds {t} values; data.columns.multi takes a list of "
                                "values per row (or text with a separator), not lists of lists or structs")

    # --- conversion of one chunk ----------------------------------------------------
    def _labels(self, values: pd.Series) -> tuple[np.ndarray, np.ndarray]:
        """Raw label values → (is_positive, is_valid)."""
        codes, distinct = pd.factorize(pd.Series(as_category(values), dtype=object))  # missing: code -1
        texts = _label_texts(pd.Series(distinct, dtype=object))  # each distinct text normalised once
        pos = np.append(texts.isin(self.spec.positive).to_numpy(), False)[codes]  # [-1]: the appended False
        neg = np.append(texts.isin(self.spec.negative).to_numpy(), False)[codes]
        return pos, pos | neg

    def labels_from_frame(self, values: pd.Series) -> np.ndarray:
        pos, ok = self._labels(values)
        if not ok.all():
            i = int(np.flatnonzero(~ok)[0])
            raise RowError(i, self.spec.label_name, f"a positive {sorted(self.spec.positive)} or negative "
                           f"{sorted(self.spec.negative)} label", values.iloc[i])
        return pos.astype(np.int8)

    def _expected_label(self, got: Any = "") -> str:
        """What a bad label was expected to be; ``got``: the first bad one, whose kind picks the advice."""
        listed = f"one of {sorted(self.spec.positive)} (a click) or {sorted(self.spec.negative)} (none)"
        if got is None or (isinstance(got, str) and not got.strip()):  # a Parquet null reaches it as None
            return f"{listed}; a row without a label is a bad row: leave such rows out, or allow them with " \
                   "data.max_bad_fraction"
        return f"{listed}; other values go under data.columns.label.positive / .negative"

    def label_column_in_frame(self) -> str:
        return self.spec.label_name

    def from_frame(self, df: pd.DataFrame) -> pd.DataFrame:
        if isinstance(df, pd.DataFrame) and self.spec.label_name not in df.columns and "label" in df.columns:
            df = df.rename(columns={"label": self.spec.label_name})
        return super().from_frame(df)

    def expected_columns(self) -> list[str]:
        """The fields, the time column in place of the fields derived from it (rows may carry either)."""
        derived = [f"{self.spec.time_column}_{part}" for part in self.spec.derive]
        if not derived:
            return super().expected_columns()
        either = f"{self.spec.time_column} (or {', '.join(derived)})"
        return [f.name for f in self.fields if f.name not in derived] + [either]

    def canonical_columns(self, df: pd.DataFrame, labels: bool = True, exact_ids: bool = True
                          ) -> tuple[np.ndarray | None, dict[str, np.ndarray]]:
        """As :meth:`RawReader.canonical_columns`; fields derived from the time column are derived
        from it when the rows carry the time column rather than the fields."""
        derived = [f"{self.spec.time_column}_{part}" for part in self.spec.derive]
        if isinstance(df, pd.DataFrame) and derived and self.spec.time_column in df.columns:
            # Derived from the time column wherever a row holds a time (it wins over derived fields sent beside
            # it); a row without one keeps the derived fields it carries, as rows that carry only those do.
            seconds, bad = parse_times(df[self.spec.time_column].reset_index(drop=True), self.spec.time_format,
                                       self.spec.time_unit)
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                raise RowError(i, self.spec.time_column, expected(self.spec.time_format, self.spec.time_unit),
                               df[self.spec.time_column].iloc[i])
            # Rows sent in another unit than the training log's (seconds to a model of milliseconds) would score
            # with the hour and weekday of January 1970: said once per model, as prepare says it.
            self._doubt_epoch(seconds, df[self.spec.time_column], np.isfinite(seconds), "rows to score")
            made = {}
            for part, name in zip(self.spec.derive, derived):
                values = derive(seconds, part)
                if name in df.columns:
                    values = np.where(np.isnan(seconds), df[name].to_numpy(dtype=object), values)
                made[name] = values
            df = df.assign(**made)
        elif (isinstance(df, pd.DataFrame) and any(d not in df.columns for d in derived)
              and all(f.name in df.columns for f in self.fields if f.name not in derived)):  # else: all named below
            raise DataError(f"the rows lack column {self.spec.time_column!r} (data.columns.time), from which "
                            f"{derived} are derived{read_as(self.spec.time_column, list(df.columns), ROWS_READ_AS)}")
        if isinstance(df, pd.DataFrame):
            for part, name in zip(self.spec.derive, derived):
                if name in df.columns:
                    _check_derived(df[name], name, part)
        return super().canonical_columns(df, labels, exact_ids)

    def _convert(self, df: pd.DataFrame, line_no: np.ndarray) -> pd.DataFrame | None:
        """A chunk with the file's own column types → canonical frame; logs and drops bad rows."""
        label = df[self.spec.label_name]
        pos, ok = self._labels(label)
        if not ok.all():
            got = label.iloc[int(np.flatnonzero(~ok)[0])]
            got = None if got is None or got is pd.NA or (isinstance(got, float) and np.isnan(got)) else got  # a
            # Parquet null (NaN, or pandas' NA in a nullable integer column), as a CSV's blank
            self.bad.add("bad_label", line_no[~ok], self._fname, column=self.spec.label_name,
                         expected=f"a label, {self._expected_label(got)}", got=got)
        cols: dict[str, np.ndarray] = {}
        undecodable = np.zeros(len(df), dtype=bool)
        masks: dict[str, np.ndarray] = {}
        derived = {f"{self.spec.time_column}_{part}": part for part in self.spec.derive}
        for f in self.spec.fields:
            if f.name in derived:
                continue
            s = df[f.name]
            if s.dtype == object and f.kind != NUMERIC:
                undecodable |= _replaced(s)
            if f.kind == CATEGORICAL:
                cols[f.name] = as_category(s)
            elif f.kind == NUMERIC:
                if pd.api.types.is_numeric_dtype(s.dtype) and not pd.api.types.is_bool_dtype(s.dtype):
                    cols[f.name] = s.to_numpy(dtype=np.float64, na_value=np.nan)
                else:
                    cols[f.name], masks[f.name] = parse_numbers(s.to_numpy(dtype=object))
            else:
                cols[f.name] = self._lists(s, f.name)
        self.bad.add("decode_error", line_no[undecodable & ok], self._fname,
                     expected=f"text in {self.spec.encoding} (data.columns.encoding)")
        ok &= ~undecodable
        non_numeric = np.logical_or.reduce(list(masks.values())) if masks else np.zeros(len(df), dtype=bool)
        column, i = first_offender(masks, non_numeric & ok)
        if column is not None:
            got = df[column].iloc[i]
            self.bad.add("non_numeric", line_no[non_numeric & ok], self._fname, column=column,
                         expected=_DECIMAL_COMMA if isinstance(got, str) and re.fullmatch(r"\s*[+-]?\d*,\d+\s*", got)
                         else "a number", got=got)
        ok &= ~non_numeric
        if self.time_column is not None:
            fmt, unit = self.spec.time_format, self.spec.time_unit
            cols[TIME], bad_time = parse_times(df[self.time_column], fmt, unit)
            bad_time &= ok
            if bad_time.any():
                got = df[self.time_column].iloc[int(np.flatnonzero(bad_time)[0])]
                self.bad.add("bad_time", line_no[bad_time], self._fname, column=self.time_column,
                             expected=expected(fmt, unit), got=got)
            ok &= ~bad_time
            if derived:
                self._doubt_epoch(cols[TIME], df[self.time_column], ok, str(self._fname or self.path))
            for name, part in derived.items():
                cols[name] = derive(cols[TIME], part)
        if not ok.any():
            return None
        if not ok.all():
            cols = {k: v[ok] for k, v in cols.items()}
        return canonical_frame(pos[ok].astype(np.int8), cols, index=df.index.to_numpy()[ok])

    def _doubt_epoch(self, seconds: np.ndarray, values: pd.Series, rows: np.ndarray, where: str) -> None:
        """Warn once per reader when the time column's numbers (``values``, parsed to ``seconds``; ``rows``: the
        usable ones) seem not to be epoch times in the configured unit (:func:`epoch_doubt`): the hour and
        weekday derived from them are noise, not an error. ``where``: the file, or "rows to score"."""
        if self.spec.time_format is not None or self._doubted or not rows.any():
            return
        scoring = where == "rows to score"
        doubt = epoch_doubt(seconds[rows], values.iloc[int(np.flatnonzero(rows)[0])], self.spec.time_unit, scoring)
        if doubt:
            self._doubted = True
            log.warning("%s: data.columns.time %r: %s", where, self.spec.time_column, doubt)

    def _lists(self, s: pd.Series, name: str) -> np.ndarray:
        if s.dtype == object and pd.api.types.infer_dtype(s, skipna=True) in ("string", "empty"):
            sep = self.multi_separator(name)
            out = s.str.split(sep, regex=False).to_numpy(dtype=object, copy=True)
            gaps = s.isna() | (s == "") | s.str.startswith(sep) | s.str.endswith(sep) | s.str.contains(sep * 2,
                                                                                                     regex=False)
            for i in np.flatnonzero(gaps.to_numpy(dtype=bool, na_value=True)):  # no value, or empty pieces
                tokens = out[i]  # ("a||b", "a|"): left out, as in serving
                out[i] = [t for t in tokens if t] if isinstance(tokens, list) else []
            return out
        return as_lists(s, self.multi_separator(name), name)

    # --- streaming ------------------------------------------------------------------
    def chunks(self, chunk_size: int) -> Iterator[pd.DataFrame]:
        files = self.files()
        offset = 0  # row ordinals keep counting across files
        labels = file_labels(files)
        for path in files:
            self._fname = labels[path]
            before = self.rows_seen
            if self.file_format(path) == "parquet":
                parts = self._parquet_chunks(path, chunk_size, offset)
            else:
                parts = self._csv_chunks(path, chunk_size, self.separator(path), offset)
            for chunk in parts:
                self._count_file_rows(path, len(chunk))
                yield chunk
            offset += self.rows_seen - before

    def _parquet_chunks(self, path: Path, chunk_size: int, offset: int = 0) -> Iterator[pd.DataFrame]:
        if path.suffix.lower() in COMPRESSION:  # read as Parquet, it had no Parquet magic bytes: a riddle
            raise DataError(f"{path}: a {COMPRESSION[path.suffix.lower()]}-compressed Parquet file, which is not "
                            "read; decompress it (Parquet compresses its own pages)")
        schema = open_parquet(path).schema_arrow
        self._check_columns(path, list(schema.names))
        self._check_types(path, schema)
        self._line_maps.append((offset, 1, np.zeros(0, dtype=np.int64), self._fname))  # row numbers, 1-based
        start = 0
        for batch in parquet_batches(path, batch_size=chunk_size, columns=self.read_columns):
            n = batch.num_rows
            self.rows_seen += n
            df = raw_frame(batch)  # as predict reads a Parquet file of raw rows
            df.index = pd.RangeIndex(offset + start, offset + start + n)
            for f in self.spec.fields:
                if f.name not in df.columns:  # derived from the time column
                    continue
                # Arrow strings arrive as pandas' str dtype; make them plain objects.
                if pd.api.types.is_string_dtype(df[f.name].dtype) and df[f.name].dtype != object:
                    df[f.name] = pd.Series(df[f.name].to_numpy(dtype=object, na_value=None), index=df.index,
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
        if not refuse_binary(path, f"a text table separated by {sep!r}") and holds_nothing(path):
            warn_empty(path)  # an empty file among others gives no rows, as the other readers' do (Arrow: "Empty
            return            # CSV file", which failed the whole prepare)
        pending: list[int] = []  # lines the parser skipped since the last batch
        names, header = self._layout(path, sep)
        sample: list[str] = []  # the first skipped line's text and field count

        swallowed = [0]  # lines earlier bad rows ran over: the parser numbers records, not lines

        def bad_row(row: pacsv.InvalidRow) -> str:
            # A quote left open runs the row over the lines after it, up to where the parser stops: each of
            # those lines is lost with it, so each counts, by its line in the file.
            spanned = row.text.count("\n")
            line = int(row.number) + swallowed[0]
            pending.extend(range(line, line + spanned + 1))  # known: one thread reads
            swallowed[0] += spanned
            if not sample:
                text = row.text if len(row.text) <= 200 else row.text[:200] + "…"
                sample.append(f"{row.actual_columns} fields: {text}" if not spanned else
                              f"{row.actual_columns} fields over {spanned + 1} lines (a quote left open?): {text}")
            return "skip"

        def open_reader(columns: list[str] | None) -> pacsv.CSVStreamingReader:
            return open_text_table(path, sep, self.spec.encoding, names, 1 if names and header else 0, bad_row,
                                   binary=columns, include=columns)

        if names is None:
            try:
                with undecodable_bad_rows(bad_row) as undecodable_bad:
                    names_read = open_reader(None).schema.names
            except UnicodeError as e:
                raise _not_encoded(path, e, self.spec.encoding, "before its first rows were read") from None
            except (pa.ArrowInvalid, LookupError) as e:
                if undecodable_bad:
                    raise _unskippable(path, e, self.spec.encoding) from None
                line = _lone_line(path, self.spec.encoding)
                if line is None:
                    raise DataError(f"{path}: cannot read the header line: {e}") from None
                # A header and nothing else, without a newline: Arrow sees no line in it; as a header-only file
                # with its newline is, it holds no rows (it failed the whole prepare).
                self._check_columns(path, _split_line(line, sep))
                return
            except (OSError, EOFError) as e:  # a compressed file cut short within its first block
                raise DataError(f"{path}: {damaged(path)}: reading stopped within its first block of rows "
                                f"({message_head(e)})") from None
            self._check_columns(path, [str(c) for c in names_read])
        else:
            self._check_columns(path, names)
        needed = self.read_columns
        pending.clear()  # the header's reading may have parsed (and reported) the first block's rows
        sample.clear()
        swallowed[0] = 0
        skipped: list[int] = []  # every line of this file skipped so far, in order
        expected = f"{len(names) if names else 'as many fields as the header has'} fields separated by {sep!r}"

        def take_skipped() -> None:
            self.bad.add("field_count", pending, self._fname, expected=expected, got=sample[0] if sample else None)
            self.rows_seen += len(pending)
            skipped.extend(pending)
            pending.clear()

        start = 0
        first_data_line = 2 if header else 1
        spanning, spanning_from = 0, 0  # rows whose values run over several lines: how many, the first's line
        undecodable_bad: list[UnicodeDecodeError] = []
        try:
            with undecodable_bad_rows(bad_row) as undecodable_bad:
                batches = _rebatch(open_reader(needed), chunk_size)
            for batch in _with_hook(batches, undecodable_bad, bad_row):
                take_skipped()
                n = batch.num_rows
                self.rows_seen += n
                cols, undecodable, undecoded = _decode(batch, needed)
                df = pd.DataFrame({k: pd.Series(v, dtype=object) for k, v in cols.items()})
                lines = file_lines(np.arange(start, start + n), np.asarray(skipped, dtype=np.int64), first_data_line)
                # The ordinal counts the lines the parser skipped, as the file's next offset does: a row keeps its
                # identity (and its random split) whatever bad line comes before it.
                df.index = pd.Index(offset + lines - first_data_line)
                multi_line = _multi_line_rows(batch, needed)
                if multi_line.any():
                    spanning_from = spanning_from or int(lines[np.flatnonzero(multi_line)[0]])
                    spanning += int(multi_line.sum())
                self.bad.add("decode_error", lines[undecodable], self._fname,
                             expected=f"text in {self.spec.encoding} (data.columns.encoding; latin-1 or cp1252 "
                                      "read any byte)", got=undecoded)
                chunk = self._convert(df[~undecodable] if undecodable.any() else df, lines[~undecodable])
                start += n
                if chunk is not None:
                    yield chunk
        except pa.ArrowInvalid as e:
            if undecodable_bad:
                raise _unskippable(path, e, self.spec.encoding) from None
            raise DataError(f"{path}: cannot parse: {e}") from None
        except (OSError, EOFError) as e:  # a compressed file cut short or damaged, an unreadable disk
            raise DataError(f"{path}: {damaged(path)}: reading stopped somewhere after its data row {start} "
                            f"({message_head(e)})") from None
        except UnicodeError as e:  # transcoding from data.columns.encoding: the file's rest cannot be read
            raise _not_encoded(path, e, self.spec.encoding, f"somewhere after its data row {start} (the "
                               "reader decodes ahead of the rows it hands out)") from None
        take_skipped()  # bad lines after the last good row
        # the ordinals count the skipped lines: a row's line is the first data line + its ordinal in the file
        self._line_maps.append((offset, first_data_line, np.zeros(0, dtype=np.int64), self._fname))
        if spanning:  # valid CSV, but in a click log most often a quote left open, the lines after it one value
            log.warning("%s: %d rows hold a value that runs over several lines (quoted), the first near line %d; "
                        "a quote left open there would have merged the lines after it into one value",
                        path, spanning, spanning_from)


def _with_hook(batches: Iterator[pa.RecordBatch], caught: list[UnicodeDecodeError],
               handler: Any = None) -> Iterator[pa.RecordBatch]:
    """``batches``, each parsed under :func:`undecodable_bad_rows` for Arrow's bad-row ``handler`` (what it
    catches goes to ``caught``)."""
    while True:
        with undecodable_bad_rows(handler) as now:
            try:
                batch = next(batches)
            except StopIteration:
                return
            finally:
                caught.extend(now)
        yield batch


def _unskippable(path: Path, e: Exception, encoding: str) -> DataError:
    """A row with the wrong number of fields and bytes that are not UTF-8 (see :func:`undecodable_bad_rows`)."""
    return DataError(
        f"{path}: {message_head(e)}: a row with the wrong number of fields that also holds bytes that are not "
        "UTF-8, which the CSV parser cannot skip as a bad row; if the file is not UTF-8, set "
        f"data.columns.encoding (now {encoding!r}; Excel writes cp1252, latin-1 reads any byte); if its fields are "
        "split at another character, set data.columns.sep; else mend or delete that row")


def _is_list(t: pa.DataType) -> bool:
    return (pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)
            or pa.types.is_list_view(t) or pa.types.is_large_list_view(t))


def _nested(t: pa.DataType) -> bool:
    """A list, struct, map or union type (values that are not one value each)."""
    return _is_list(t) or pa.types.is_struct(t) or pa.types.is_map(t) or pa.types.is_union(t)


def _not_encoded(path: Path, e: UnicodeError, encoding: str, where: str) -> DataError:
    """A byte the transcoder from ``data.columns.encoding`` cannot read stops the file: named, in one line."""
    if refuse_binary(path, "text")[:2] in (b"\xff\xfe", b"\xfe\xff") and "16" not in encoding:  # Excel's
        return DataError(f"{path}: a UTF-16 text file (its byte-order mark), read as {encoding}; set "  # "Unicode
                         "data.columns.encoding: utf-16, or save it as UTF-8")  # text", Windows tools
    if not isinstance(e, UnicodeDecodeError):  # utf-16 (or -32) of a file without its byte-order mark
        return DataError(f"{path}: cannot be read as {encoding} {where} ({e}); set data.columns.encoding to the "
                         "file's encoding (UTF-16 without a byte-order mark: utf-16-le or utf-16-be)")
    return DataError(f"{path}: a byte that is not {encoding} {where} ({e.reason}, byte {e.object[e.start:e.end]!r}); "
                     "set data.columns.encoding to the file's encoding (latin-1 reads any byte)")


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return text.strip() != ""


def _split_line(line: str, sep: str) -> list[str]:
    """A header line's fields as the CSV parser reads them (a quoted name may hold the separator; a UTF-8
    byte-order mark dropped), for comparing with ``data.columns.names``."""
    line = line.removeprefix("\ufeff").rstrip("\r\n")
    return [f.strip() for f in next(csv.reader([line], delimiter=sep))] if line else []


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


def _multi_line_rows(batch: pa.RecordBatch, names: list[str]) -> np.ndarray:
    """Rows with a line break inside some value (only a quoted value can hold one)."""
    out = np.zeros(batch.num_rows, dtype=bool)
    for name in names:
        out |= pc.fill_null(pc.match_substring(batch.column(name), "\n"), False).to_numpy(zero_copy_only=False)
    return out


def open_text_table(path: Path, sep: str, encoding: str, names: list[str] | None, skip_rows: int,
                    on_bad: Any, binary: list[str] | None, include: list[str] | None, quoting: bool = True,
                    block_size: int = 1 << 20) -> pacsv.CSVStreamingReader:
    """Arrow's streaming CSV reader as ``prepare`` and ``predict`` read a text table: one thread (so ``on_bad``,
    the bad-row hook, knows each row's line), the ``binary`` columns as bytes (decoded by :func:`_decode`), an
    empty field null. ``include``: the only columns read (None: all)."""
    codec = COMPRESSION.get(path.suffix.lower())  # by its name, as every reader decompresses: Arrow's own guess
    source = str(path) if codec is None else pa.CompressedInputStream(pa.OSFile(str(path), "rb"), codec)  # knew
    return pacsv.open_csv(  # neither .zstd nor .GZ, and parsed the compressed bytes as text
        source,
        read_options=pacsv.ReadOptions(use_threads=False, block_size=block_size, encoding=encoding,
                                       column_names=names, skip_rows=skip_rows),
        # newlines_in_values: a quoted value over several lines that crossed the end of a block stopped the file
        # ("CSV parser got out of sync with chunker")
        parse_options=pacsv.ParseOptions(delimiter=sep, quote_char='"' if quoting else False, double_quote=quoting,
                                         newlines_in_values=quoting, invalid_row_handler=on_bad),
        convert_options=pacsv.ConvertOptions(
            include_columns=include, column_types=dict.fromkeys(binary or [], pa.binary()),
            null_values=[""], strings_can_be_null=True, quoted_strings_can_be_null=True),
    )


def _decode(batch: pa.RecordBatch, names: list[str]) -> tuple[dict[str, np.ndarray], np.ndarray, bytes | None]:
    """Byte columns → ``object`` arrays of ``str`` / ``None``, the mask of rows holding undecodable bytes, and
    an undecodable value of the first such row (None if none)."""
    bad = np.zeros(batch.num_rows, dtype=bool)
    out: dict[str, np.ndarray] = {}
    first: tuple[int, bytes] | None = None
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
                    if first is None or i < first[0]:
                        first = (i, v)
            out[name] = arr
    return out, bad, None if first is None else first[1]
