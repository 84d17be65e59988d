"""Errors and the bad-row log shared by every reader and by preprocessing."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InputError

# What an error about a damaged processed folder ends with.
PREPARE_AGAIN = "; prepare the data again (autoint prepare --overwrite)"


class DataError(InputError, ValueError):
    """Raw data or its description is unusable; the message names file, line, column or setting."""


class RowError(DataError):
    """One value of rows given to score cannot be used: which row (0-based in the frame), column, what was expected.

    The message counts rows from 1; a caller that knows where the frame came
    from (a file, a chunk of it) says so with :meth:`where`.
    """

    def __init__(self, row: int, column: str, expected: str, got: Any) -> None:
        self.row, self.column, self.expected, self.got = row, column, expected, got
        super().__init__(f"row {row + 1}: {self.detail}")

    @property
    def detail(self) -> str:
        got = self.got.item() if hasattr(self.got, "item") and getattr(self.got, "ndim", None) == 0 else self.got
        return f"column {self.column!r}: expected {self.expected}, got {got!r}"  # a numpy scalar as its value

    def where(self, source: str, first_row: int = 0) -> str:
        """The message for a frame that starts at 0-based row ``first_row`` of ``source``."""
        return f"{source}, row {first_row + self.row + 1}: {self.detail}"


class StaleDataError(DataError):
    """A processed folder was prepared from other settings or input than those given now."""


class BadRowLog:
    """Counts malformed rows by kind, keeps the first few line numbers of each and one sample.

    Kinds used by the readers: ``field_count``, ``blank_line``, ``non_numeric``,
    ``bad_label``, ``decode_error``, ``bad_token``, ``bad_time``; preprocessing
    adds ``missing_time``. Rows dropped because the task says so (e.g. MovieLens
    rating 3) go to :attr:`dropped`, not to the bad total.

    Per kind, the first row logged also leaves a :attr:`samples` entry: its line,
    the column, what was expected there and the text found (``got``), so a
    report says what went wrong, not only where.
    """

    def __init__(self, keep: int = 5) -> None:
        self.keep = keep
        self.counts: dict[str, int] = {}
        self.examples: dict[str, list[int | str]] = {}
        self.samples: dict[str, dict[str, Any]] = {}
        self.dropped: dict[str, int] = {}

    def add(self, kind: str, lines: Iterable[int] | np.ndarray | int, file: str | None = None, *,
            column: str | None = None, expected: str | None = None, got: Any = None) -> None:
        """Record bad rows of ``kind`` at the given 1-based line numbers.

        ``file`` (a name) is given by readers of several files; the kept
        examples then read ``"name:line"``. ``column`` and ``expected`` describe
        the problem; ``got`` is the offending text, one value or one per line
        (aligned with ``lines``). They are kept for the first row of a kind.
        """
        arr = np.atleast_1d(np.asarray(lines, dtype=np.int64))
        if arr.size == 0:
            return
        self.counts[kind] = self.counts.get(kind, 0) + int(arr.size)
        ex = self.examples.setdefault(kind, [])
        if len(ex) < self.keep:
            first = np.sort(arr)[: self.keep - len(ex)]
            ex.extend(int(x) if file is None else f"{file}:{int(x)}" for x in first)
        if kind not in self.samples:
            i = int(np.argmin(arr))
            text = got[i] if isinstance(got, (list, tuple, np.ndarray)) else got
            self.samples[kind] = _sample(int(arr[i]) if file is None else f"{file}:{int(arr[i])}",
                                         column, expected, text)

    def add_counted(self, kind: str, n: int, first_lines: list[int | str], *, column: str | None = None,
                    expected: str | None = None) -> None:
        """Record ``n`` bad rows of ``kind`` known by their count and first line numbers only."""
        if n <= 0:
            return
        self.counts[kind] = self.counts.get(kind, 0) + int(n)
        ex = self.examples.setdefault(kind, [])
        ex.extend(first_lines[: max(0, self.keep - len(ex))])
        if kind not in self.samples:
            self.samples[kind] = _sample(first_lines[0] if first_lines else None, column, expected, None)

    def add_dropped(self, reason: str, n: int) -> None:
        """Record ``n`` rows left out on purpose (not an error)."""
        if n:
            self.dropped[reason] = self.dropped.get(reason, 0) + int(n)

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def describe(self, kind: str) -> str:
        """The sample of ``kind`` in words: ``line 5, column 'price': expected a number, got 'n/a'``."""
        s = self.samples.get(kind)
        if s is None:
            return ""
        where = f"line {s['line']}" if s["line"] is not None else "row"
        if s["column"] is not None:
            where += f", column {s['column']!r}"
        what = f"expected {s['expected']}" if s["expected"] else ""
        if s["got"] is not None:
            what += (", got " if what else "got ") + repr(s["got"])
        elif s["expected"]:
            what += ", got nothing"
        return f"{where}: {what}" if what else where

    def summary(self) -> str:
        if not self.counts and not self.dropped:
            return "no bad rows"
        parts = []
        for kind in sorted(self.counts):
            lines = ", ".join(str(x) for x in self.examples.get(kind, []))
            more = ", ..." if self.counts[kind] > len(self.examples.get(kind, [])) else ""
            sample = self.describe(kind)
            parts.append(f"{kind}: {self.counts[kind]} (lines {lines}{more})" + (f", e.g. {sample}" if sample else ""))
        text = f"{self.total} bad rows" + (" — " + "; ".join(parts) if parts else "")
        if self.dropped:
            text += "; dropped by design: " + ", ".join(f"{k}: {v}" for k, v in sorted(self.dropped.items()))
        return text

    def to_dict(self) -> dict[str, Any]:
        return {
            "total": self.total,
            "counts": dict(sorted(self.counts.items())),
            "first_lines": {k: list(v) for k, v in sorted(self.examples.items())},
            "samples": {k: dict(v) for k, v in sorted(self.samples.items())},
            "dropped_by_design": dict(sorted(self.dropped.items())),
        }

    def merge(self, other: BadRowLog) -> None:
        for kind, n in other.counts.items():
            self.counts[kind] = self.counts.get(kind, 0) + n
            ex = self.examples.setdefault(kind, [])
            ex.extend(other.examples.get(kind, [])[: max(0, self.keep - len(ex))])
            if kind not in self.samples and kind in other.samples:
                self.samples[kind] = dict(other.samples[kind])
        for reason, n in other.dropped.items():
            self.add_dropped(reason, n)

    def check(self, rows_seen: int, max_bad_fraction: float, source: str | Path) -> None:
        """Raise :class:`DataError` when bad rows exceed ``max_bad_fraction`` of ``rows_seen``.

        The message carries the report (kinds, counts, first lines, a sample of each kind).
        """
        if self.total == 0:
            return
        frac = self.total / max(rows_seen, 1)
        if frac > max_bad_fraction:
            every = "every row is malformed" if self.total >= rows_seen else (
                f"{self.total} of {rows_seen} rows are malformed ({frac:.4%})")
            raise DataError(f"{source}: {every}, more than data.max_bad_fraction = {max_bad_fraction:g} "
                            f"(--max-bad-fraction) allows: {self.summary()}")


_SAMPLE_CHARS = 120  # offending text kept in a sample, at most


def _sample(line: int | str | None, column: str | None, expected: str | None, got: Any) -> dict[str, Any]:
    if got is not None and not isinstance(got, str):
        got = got.decode("utf-8", "replace") if isinstance(got, bytes) else str(got)
    if got is not None and len(got) > _SAMPLE_CHARS:
        got = got[:_SAMPLE_CHARS] + "..."
    return {"line": line, "column": column, "expected": expected, "got": got}
