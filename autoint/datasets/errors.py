"""Errors and the bad-row log shared by every reader and by preprocessing."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InputError


class DataError(InputError, ValueError):
    """Raw data or its description is unusable; the message names file, line, column or setting."""


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

    def add_counted(self, kind: str, n: int, first_lines: list[int | str]) -> None:
        """Record ``n`` bad rows of ``kind`` known by their count and first line numbers only."""
        if n <= 0:
            return
        self.counts[kind] = self.counts.get(kind, 0) + int(n)
        ex = self.examples.setdefault(kind, [])
        ex.extend(first_lines[: max(0, self.keep - len(ex))])

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
