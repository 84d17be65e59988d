"""Time columns of raw logs: timestamps or numbers → seconds, and the fields derived from them.

A time column (``data.split.time_column``, ``data.columns.time``) holds one of

* numbers: epoch seconds (``1510047038``) or any ordered number (a day index); epoch
  milliseconds, microseconds or nanoseconds with a ``unit`` (``data.columns.time.unit``:
  ``ms``, ``us``, ``ns``);
* ISO 8601 date-times: ``2017-11-07 09:30:38``, ``2017-11-07T09:30:38``, with
  fractional seconds, a bare date, or a zone (``Z``, ``+01:00``, ``+0100``);
* in Parquet, Arrow timestamps, dates or numbers;
* with a ``format`` (``data.columns.time.format``, Python's ``strptime`` codes),
  text or numbers written that way, e.g. Avazu's ``14102100`` with ``%y%m%d%H``
  (2014-10-21 00:00), which read as epoch seconds would fall in June 1970.

Every value becomes seconds since 1970-01-01 (``float64``). Date-times without a
zone are taken as written (as if UTC); those with a zone are converted to UTC.
Arrow parses them (a cast per kind of value, after a regular expression sorts
the values into kinds); a present value of no kind, or one Arrow refuses
(``2017-13-07``), is a bad row of kind ``bad_time``.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

TIME = "_time"  # the parsed time column in raw Arrow tables and the stage: seconds, float64, NaN if missing
EXPECTED = "a timestamp (ISO 8601, e.g. 2017-11-07 09:30:38) or epoch seconds"
# Numbers read as epoch seconds before this (1973-03-03) are unlikely to be epoch seconds when hour and weekday are
# derived from them: dates written as numbers (Avazu's YYMMDDHH) or an index (see :func:`epoch_doubt`).
_EPOCH_DOUBT_BELOW = 1e8
# ... and after this (year 5138), they are unlikely to be seconds at all: epoch milliseconds (1.7e12 in 2023),
# microseconds or nanoseconds, whose hour and weekday read as seconds are noise.
_EPOCH_DOUBT_ABOVE = 1e11
_LATEST = 253402300799.0  # 9999-12-31 23:59:59 UTC in seconds: times past it (either way) name no date
_PLAUSIBLE = (_EPOCH_DOUBT_BELOW, 7.3e9)  # 1973-03-03 .. 2201-05-01, in seconds: where a unit's times should land
UNITS = {"s": 1.0, "ms": 1e3, "us": 1e6, "ns": 1e9}  # data.columns.time.unit: what one of the numbers counts
_UNIT_WORDS = {"s": "seconds", "ms": "milliseconds", "us": "microseconds", "ns": "nanoseconds"}
DERIVED = ("hour", "weekday")  # fields a time column can give: hour of day 0-23, day of week mon-sun
_WEEKDAYS = np.array(["mon", "tue", "wed", "thu", "fri", "sat", "sun"], dtype=object)
_HOURS = np.array([str(h) for h in range(24)], dtype=object)

_NUMBER = r"^[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?$"  # unambiguous: no backtracking (base._PLAIN_NUMBER)
_DATE_TIME = r"^\d{4}-\d{2}-\d{2}([T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?)?"
_PAST_MICROSECONDS = r"^(\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}\.\d{6})\d+"
_KINDS = (  # (pattern, Arrow type the matching values are cast to)
    (_NUMBER, pa.float64()),
    (_DATE_TIME + "$", pa.timestamp("us")),
    (_DATE_TIME + r"(Z|[+-]\d{2}(:?\d{2})?)$", pa.timestamp("us", tz="UTC")),
)


def expected(fmt: str | None = None, unit: str = "s") -> str:
    """What a bad time's report says was expected."""
    if fmt is not None:
        return f"a time written as {fmt!r} (data.columns.time.format)"
    return EXPECTED if unit == "s" else EXPECTED.replace("epoch seconds", f"epoch {_UNIT_WORDS[unit]}")


def check_unit(unit: Any, fmt: str | None) -> str | None:
    """Why ``data.columns.time.unit`` cannot be used (with ``fmt``, the format's), or None."""
    if not isinstance(unit, str) or unit not in UNITS:  # unit: [1] was a TypeError traceback
        return f"must be one of {list(UNITS)} (what one of the column's numbers counts since 1970), got {unit!r}"
    if fmt is not None and unit != "s":
        return (f"{unit!r} says the numbers count {_UNIT_WORDS[unit]} since 1970, but data.columns.time.format "
                f"{fmt!r} reads them as dates written as numbers; set one or the other")
    return None


def parse_times(values: Any, fmt: str | None = None, unit: str = "s") -> tuple[np.ndarray, np.ndarray]:
    """Any 1-d column of times → ``(seconds float64 with NaN for missing, mask of present unparseable values)``.

    ``fmt``: the values are text (or numbers) written in that ``strptime`` format; Arrow timestamps and dates are
    times already and ignore it. ``unit``: what a number counts since 1970 (:data:`UNITS`); it applies to numbers
    only, not to timestamps or date-times."""
    arr = values if isinstance(values, (pa.Array, pa.ChunkedArray)) else _arrow(values)
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if pa.types.is_dictionary(arr.type):  # e.g. a pandas category column written to Parquet
        arr = arr.dictionary_decode()
    if pa.types.is_string_view(arr.type):
        arr = arr.cast(pa.string())
    if pa.types.is_decimal(arr.type):  # epoch seconds as a decimal column
        arr = arr.cast(pa.float64())
    n = len(arr)
    typ = arr.type
    if fmt is not None and not (pa.types.is_timestamp(typ) or pa.types.is_date(typ)):
        return _formatted(arr, fmt)
    per_second = UNITS[unit]
    if pa.types.is_integer(typ) or pa.types.is_floating(typ):
        # not a safe cast: an integer past 2**53 (epoch nanoseconds) raised ArrowInvalid; its float is exact to
        # well under a microsecond, and its unit is doubted below as the same digits in a text file are
        return _floats(arr.cast(pa.float64(), safe=False)) / per_second, np.zeros(n, dtype=bool)
    if pa.types.is_timestamp(typ) or pa.types.is_date(typ):
        return _seconds(arr), np.zeros(n, dtype=bool)
    present = arr.is_valid().to_numpy(zero_copy_only=False)
    out = np.full(n, np.nan)
    if not (pa.types.is_string(typ) or pa.types.is_large_string(typ)):
        return out, present
    present &= ~pc.fill_null(pc.equal(arr, ""), False).to_numpy(zero_copy_only=False)  # "" is missing, as in CSV
    text = pc.utf8_trim_whitespace(arr)
    done = np.zeros(n, dtype=bool)
    for pattern, target in _KINDS:
        rows = np.flatnonzero(pc.fill_null(pc.match_substring_regex(text, pattern), False)
                              .to_numpy(zero_copy_only=False) & ~done)
        if rows.size == 0:
            continue
        these = text.take(pa.array(rows))
        if target != pa.float64():  # past microseconds (pandas, .NET and Java write 7 to 9 digits): truncated
            these = pc.replace_substring_regex(these, _PAST_MICROSECONDS, r"\1")
        parsed = _cast_each(these, target)
        ok = parsed.is_valid().to_numpy(zero_copy_only=False)
        out[rows[ok]] = (_floats(parsed) / per_second if target == pa.float64() else _seconds(parsed))[ok]
        done[rows[ok]] = True
    return out, present & ~done


def check_format(fmt: Any) -> str | None:
    """Why ``fmt`` is no ``strptime`` format that reads back the dates it writes, or None."""
    if not isinstance(fmt, str) or "%" not in fmt:
        return f"expected a strptime format such as '%y%m%d%H' (Avazu's hours), got {fmt!r}"
    if fmt != fmt.strip():
        return f"{fmt!r} starts or ends with spaces, which the values (trimmed) never hold"
    if not any(code in fmt for code in ("%Y", "%y", "%G")):
        return f"{fmt!r} names no year (%Y or %y): every time would fall in 1900, its weekday and order meaningless"
    try:
        for t in _PROBES:
            datetime.strptime(t.strftime(fmt), fmt)
    except (ValueError, re.error) as e:  # re.error: a code given twice
        return f"{fmt!r} does not read back a time it writes ({e})"
    return None


# Two times whose every field differs, to check and measure a format with.
_PROBES = (datetime(2001, 2, 3, 4, 5, 6, tzinfo=timezone.utc), datetime(2019, 12, 31, 23, 59, 58, tzinfo=timezone.utc))


def _digit_width(fmt: str) -> int | None:
    """The width of what ``fmt`` writes, when it writes digits only and always as many (``%y%m%d%H``: 8), else None.
    Such a format is read strictly: a number is zero-padded to it (an int column loses 2001's leading zero,
    01010100 → 1010100) and a value must be what the format writes for the time it reads as (Python's ``strptime``
    also takes one-digit months, days and hours: 1410210 would be 2014-10-21 00:00)."""
    out = [t.strftime(fmt) for t in _PROBES]
    return len(out[0]) if all(o.isdigit() for o in out) and len(out[0]) == len(out[1]) else None


def _formatted(arr: pa.Array, fmt: str) -> tuple[np.ndarray, np.ndarray]:
    """Values written in ``fmt`` → seconds, as :func:`parse_times` returns them.

    Each distinct value of a block of rows is parsed once by Python's ``datetime.strptime``, which refuses a date
    that does not exist (Arrow's ``strptime`` rolls 2014-02-29 over to March 1st): quick for the few thousand
    distinct values of an hourly column (Avazu's), slow for millions of distinct timestamps to the second, which
    ISO 8601 text reads without a format. A zone (``%z``) is converted to UTC; times without one are taken as
    written. Text holding a whole number written as a float (``14102100.0``, as pandas writes an int column with
    holes) is read as the number; see :func:`_digit_width` for the formats read strictly."""
    typ = arr.type
    width = _digit_width(fmt)
    if pa.types.is_string(typ) or pa.types.is_large_string(typ):
        present = pc.fill_null(pc.not_equal(arr, ""), False).to_numpy(zero_copy_only=False)  # "" is missing
        text = pc.replace_substring_regex(pc.utf8_trim_whitespace(arr), r"^([+-]?\d+)\.0*$", r"\1")
    else:  # numbers, booleans, ...: their text as categories print it (a whole float as an int: 14102100.0 → 14102100)
        from autoint.datasets.base import as_category  # here: base imports this module

        text = pa.array(as_category(arr.to_pandas()), pa.string())
        present = text.is_valid().to_numpy(zero_copy_only=False)
    if width is not None:  # digits alone, as a number or as its text (a served row's "1010100"), zero-padded
        digits = pc.fill_null(pc.match_substring_regex(text, r"^\d+$"), False)
        text = pc.if_else(digits, pc.utf8_lpad(text, width, "0"), text)
    encoded = pc.dictionary_encode(text)
    seconds = np.full(len(encoded.dictionary), np.nan)
    for i, value in enumerate(encoded.dictionary.to_pylist()):
        try:
            t = datetime.strptime(value, fmt)
        except ValueError:
            continue
        if width is not None and t.strftime(fmt) != value:
            continue
        seconds[i] = (t if t.tzinfo else t.replace(tzinfo=timezone.utc)).timestamp()
    indices = pc.fill_null(encoded.indices, 0).to_numpy(zero_copy_only=False)
    out = seconds[indices] if len(seconds) else np.full(len(text), np.nan)
    out[~present] = np.nan
    return out, present & np.isnan(out)


def epoch_doubt(seconds: np.ndarray, sample: Any, unit: str = "s", scoring: bool = False) -> str | None:
    """Why times parsed from numbers (counting ``unit``) may not be epoch times, or None: all before 1973-03-03, or
    all after the year 5138; ``sample``: one of the raw values (ISO 8601 text before 1973 is what it says it is).
    ``scoring``: the numbers are rows sent to a model prepared with ``unit``, whose sender is told what to change."""
    number = isinstance(sample, (int, float, np.number)) or (isinstance(sample, str)
                                                            and re.match(_NUMBER, sample.strip()) is not None)
    finite = seconds[np.isfinite(seconds)]
    if not number or not finite.size:
        return None
    raw = finite * UNITS[unit]  # the numbers as written
    if finite.min() >= _EPOCH_DOUBT_ABOVE:  # later than any log: a finer unit read as a coarser one
        when = f"after the year 5000 (the smallest {raw.min():.0f})" if raw.min() < 1e21 else \
            f"after the year 5000 (the smallest {raw.min():.3g})"  # not 300 digits of a float's value
    elif finite.max() < _EPOCH_DOUBT_BELOW:
        first = datetime.fromtimestamp(float(finite.min()), tz=timezone.utc).strftime("%Y-%m-%d %H:%M")
        when = f"before 1973 (the earliest {first})"
    else:
        return None
    fits = [u for u in UNITS
            if u != unit and _PLAUSIBLE[0] <= raw.min() / UNITS[u] and raw.max() / UNITS[u] < _PLAUSIBLE[1]]
    if fits and scoring:
        hint = (f"they look like {_UNIT_WORDS[fits[0]]}; the model was prepared with data.columns.time.unit: "
                f"{unit}, so send {_UNIT_WORDS[unit]}")
    elif fits:
        hint = f"if they count {_UNIT_WORDS[fits[0]]} since 1970, set data.columns.time.unit: {fits[0]}"
    elif 20_000 <= raw.min() and raw.max() < 80_000 and unit == "s":  # 1954-2119 as Excel's day numbers
        hint = ("if they are Excel serial dates (days since 1899-12-30: 45307.56 is 2024-01-16 13:26), no setting "
                "reads them: write the column as text (2024-01-16 13:26:00) or as epoch seconds")
    else:
        hint = ("if they are dates written as numbers (Avazu's 14102100 for 2014-10-21 00:00), set "
                "data.columns.time.format (e.g. '%y%m%d%H')")
    return (f"its numbers, read as epoch {_UNIT_WORDS[unit]}, fall {when}, so the hour and weekday derived from "
            f"them are unlikely to mean anything; {hint}")


def derived_values(part: str) -> tuple[str, ...]:
    """The values a derived field takes: ``hour`` "0".."23", ``weekday`` "mon".."sun"."""
    return tuple(_HOURS) if part == "hour" else tuple(_WEEKDAYS)


def derive(seconds: np.ndarray, part: str) -> np.ndarray:
    """A derived categorical field from times in seconds: ``hour`` ("0".."23") or ``weekday`` ("mon".."sun");
    missing for a time past any date (beyond 9999-12-31 either way: 1e30 ms gave an arbitrary hour and weekday)."""
    with np.errstate(invalid="ignore"):
        ok = np.abs(seconds) <= _LATEST
    out = np.full(len(seconds), None, dtype=object)
    if part == "hour":
        out[ok] = _HOURS[(np.floor(seconds[ok] / 3600) % 24).astype(np.int64)]
    else:  # 1970-01-01 was a Thursday: day 0 → index 3
        out[ok] = _WEEKDAYS[((np.floor(seconds[ok] / 86400) + 3) % 7).astype(np.int64)]
    return out


def as_series(values: Any) -> pd.Series:
    """Any 1-d column as a pandas Series (a Series as it is). pandas 2 raised OverflowError inferring the type of
    objects that hold an int past float range (pandas 3 keeps them as objects): those stay objects here too.
    (Here rather than beside the other value helpers of :mod:`autoint.datasets.base`, which imports this module.)"""
    if isinstance(values, pd.Series):
        return values
    try:
        return pd.Series(values)
    except OverflowError:
        return pd.Series(values, dtype=object)


def _arrow(values: Any) -> pa.Array:
    """A 1-d column as Arrow; read as text where Arrow takes it no other way."""
    s = as_series(values)
    try:
        return pa.array(s, from_pandas=True)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OverflowError):  # mixed Python types,
        # an int past int64, a unit Arrow has no timestamp of: as text
        return pa.array([None if v is None or v != v else str(v) for v in s.to_numpy(dtype=object)], pa.string())


def _cast_each(arr: pa.Array, target: pa.DataType) -> pa.Array:
    """``arr`` cast to ``target``, null where a value does not cast (found by halving: a few bad values cost little)."""
    try:
        return pc.cast(arr, target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        if len(arr) == 1:
            return pa.nulls(1, target)
    mid = len(arr) // 2
    return pa.concat_arrays([_cast_each(arr.slice(0, mid), target), _cast_each(arr.slice(mid), target)])


def _floats(arr: pa.Array) -> np.ndarray:
    return np.asarray(pc.fill_null(arr, np.nan).to_numpy(zero_copy_only=False), dtype=np.float64)


def _seconds(arr: pa.Array) -> np.ndarray:
    """Arrow timestamps or dates → seconds since the epoch (UTC for zoned ones), NaN for nulls."""
    tz = arr.type.tz if pa.types.is_timestamp(arr.type) else None
    micros = pc.cast(arr, pa.timestamp("us", tz=tz), safe=False).cast(pa.int64())
    return _floats(micros.cast(pa.float64())) / 1e6
