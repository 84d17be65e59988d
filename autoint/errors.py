"""The one base class of errors a user can fix: bad input, not bugs.

Every error that describes input the user gave (a setting, a file, a row, a
model path, a tracking URI, a run folder) derives from :class:`InputError`, and
its message names the culprit. The command line prints such an error as one
line and exits with status 2; any other exception is a bug in autoint (or in a
library beneath it) and keeps its traceback (exit status 1).
"""

from __future__ import annotations

import errno


class InputError(Exception):
    """Input the user gave cannot be used; the message names it and says what was expected."""


class Terminated(Exception):
    """The process was asked to stop (SIGTERM, as a scheduler or ``kill`` sends) and stopped between steps.

    Not a bug and not bad input: the command line says so in one line and exits with status 143 (128 + 15),
    as a process ended by SIGTERM does, so a scheduler sees the job failed.
    """


def message_head(e: BaseException) -> str:
    """The first line of an exception's message (its type's name if it has none), for a one-line error."""
    lines = str(e).strip().splitlines()
    return lines[0] if lines else type(e).__name__


class DiskFullError(InputError, OSError):
    """The disk filled while a command wrote to it: the user frees space (or writes elsewhere) and runs it again."""


_DISK_FULL = ("No space left on device", "Disk quota exceeded")


def disk_full(e: BaseException) -> bool:
    """Whether ``e`` says a disk is full: an ``OSError`` with ENOSPC or EDQUOT (Python's, Arrow's), or an error
    carrying the system's words for it (DuckDB's IO errors carry no errno attribute)."""
    if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    return any(words in str(e) for words in _DISK_FULL)
