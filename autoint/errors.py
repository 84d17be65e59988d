"""The one base class of errors a user can fix: bad input, not bugs.

Every error that describes input the user gave (a setting, a file, a row, a
model path, a tracking URI, a run folder) derives from :class:`InputError`, and
its message names the culprit. The command line prints such an error as one
line and exits with status 2; any other exception is a bug in autoint (or in a
library beneath it) and keeps its traceback (exit status 1).
"""

from __future__ import annotations


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
