"""The one base class of errors a user can fix: bad input, not bugs.

Every error that describes input the user gave (a setting, a file, a row, a
model path, a tracking URI, a run folder) derives from :class:`InputError`, and
its message names the culprit. The command line prints such an error as one
line and exits with status 2, as it does for a full disk (:func:`disk_full`) and a
path the user may not read or write; any other exception is a bug in autoint (or in
a library beneath it) and keeps its traceback (exit status 1).
"""

from __future__ import annotations

import contextlib
import errno
import re
import signal
import threading
from collections.abc import Iterator, Sequence
from typing import Any


class InputError(Exception):
    """Input the user gave cannot be used; the message names it and says what was expected."""


class MissingInput(InputError, FileNotFoundError):
    """A file or folder the user named (a processed folder, its split or schema) is not there: an
    :class:`InputError`, so ``except InputError`` catches it, and a ``FileNotFoundError`` as before."""


class Terminated(KeyboardInterrupt):
    """The process was asked to stop (SIGTERM, as a scheduler or ``kill`` sends) and stopped between steps.

    Not a bug and not bad input: the command line says so in one line and exits with status 143 (128 + 15),
    as a process ended by SIGTERM does, so a scheduler sees the job failed. A kind of :class:`KeyboardInterrupt`
    (a stop asked from outside), so no ``except Exception`` (ours, MLflow's, Optuna's) takes it for an error of
    its own and goes on: Lightning and Optuna end their loops on it as on Ctrl-C.
    """


def raise_terminated(signum: int, frame: Any) -> None:
    """A SIGTERM handler: the process stops as :class:`Terminated` at the next Python instruction; a second
    SIGTERM, while ``finally`` blocks clean up, is ignored (:func:`stop_on_sigterm` puts the default back)."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise Terminated("terminated (SIGTERM)")


@contextlib.contextmanager
def stop_on_sigterm() -> Iterator[None]:
    """Within the block, SIGTERM raises :class:`Terminated`, so ``finally`` blocks clean up (a command's work
    folder) and the command line says so (status 143), instead of the process vanishing with its temporary files.

    Only over the default action, in the main thread: a handler of the caller's (or Lightning's) stays theirs."""
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGTERM) is not \
            signal.SIG_DFL:
        yield
        return
    signal.signal(signal.SIGTERM, raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def few(items: Sequence[Any], n: int = 3) -> str:
    """The first ``n`` of ``items`` for a message, and how many more there are."""
    return ", ".join(map(str, items[:n])) + (f" and {len(items) - n} more" if len(items) > n else "")


def hide_password(url: str) -> str:
    """``url`` with the password of its user part shown as ``***`` (``postgresql://u:***@db/x``,
    ``http://u:***@mlflow:5000``), as printed, logged or written; any other text as it is.

    A URL written as URLs are (a password's ``#``, ``/`` or ``@`` escaped) is read as urllib reads it. A password
    SQLAlchemy takes unescaped (``pa#ss``) is not in urllib's user part: then the text up to the last ``@`` is the
    user part, unless it reads as ``host:port/path`` or an IPv6 host (an ``@`` in a path or query, no password)."""
    from urllib.parse import urlsplit, urlunsplit

    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    try:
        parts = urlsplit(url)
        if parts.password is not None:
            user, _, host = parts.netloc.rpartition("@")
            return urlunsplit(parts._replace(netloc=f"{user.split(':', 1)[0]}:***@{host}"))
    except ValueError:  # a port urllib cannot read: the text below decides
        pass
    at = rest.rfind("@")
    info = rest[:at] if at >= 0 else ""
    if (":" not in info or "@" in info or info.startswith("[")
            or re.match(r"[^:/?#]*:\d*(?:[/?#]|$)", info) or any(c in info.split(":", 1)[0] for c in "/?#")):
        return url
    return f"{scheme}://{info.split(':', 1)[0]}:***@{rest[at + 1:]}"


_URL = re.compile(r"\b[a-zA-Z][\w+.-]*://[^\s'\"]+")


def hide_passwords(text: str) -> str:
    """``text`` with the password of every URL in it shown as ``***`` (:func:`hide_password`, within a message)."""
    return _URL.sub(lambda m: hide_password(m.group(0)), text)


def message_head(e: BaseException) -> str:
    """The first line of an exception's message (its type's name if it has none), for a one-line error."""
    lines = str(e).strip().splitlines()
    return lines[0] if lines else type(e).__name__


class DiskFullError(InputError, OSError):
    """The disk filled while a command wrote to it: the user frees space (or writes elsewhere) and runs it again."""


# The words of engines that raise no errno: DuckDB (its own errors, or Arrow's OSError around them) and SQLite.
_DISK_FULL = ("No space left on device", "Disk quota exceeded", "failed to offload data block")
_SQLITE_FULL = "database or disk is full"


def disk_full(e: BaseException | None) -> BaseException | None:
    """The error in ``e``'s chain (``e``, then its ``__cause__`` or ``__context__``) that says a disk filled, or None.

    An ``OSError`` with ENOSPC or EDQUOT (Python's, Arrow's); a DuckDB error, or an ``OSError`` with no errno
    (Arrow's wrapping of one), carrying the system's words or DuckDB's "failed to offload" (its spill folder
    full); SQLite's "database or disk is full". The words alone count only on those, not on any error quoting a
    value. The chain is followed, suppressed context included, because libraries wrap the error: a checkpoint's
    ``torch.save`` raises a RuntimeError, which names no disk, while handling the OSError."""
    seen: set[int] = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        text, module = str(e), type(e).__module__.split(".")[0]
        if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
            return e
        if (module in ("duckdb", "_duckdb") or (isinstance(e, OSError) and e.errno is None)) and any(
                words in text for words in _DISK_FULL):
            return e
        if module == "sqlite3" and _SQLITE_FULL in text:
            return e
        e = e.__cause__ or e.__context__
    return None


# The words of torch's allocators: the CPU's (DefaultCPUAllocator) and CUDA's (OutOfMemoryError's message).
_NO_MEMORY = ("can't allocate memory", "CUDA out of memory", "out of memory")


def out_of_memory(e: BaseException | None) -> BaseException | None:
    """The error in ``e``'s chain that says memory ran out, or None: Python's ``MemoryError``, or one of torch's
    allocators (the CPU's RuntimeError, ``torch.OutOfMemoryError``) saying so. Not a bug and not bad input as such:
    a batch or a model too large for this machine, which the user makes smaller."""
    seen: set[int] = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, MemoryError) or type(e).__name__ == "OutOfMemoryError":
            return e
        if isinstance(e, RuntimeError) and type(e).__module__ == "builtins" and any(
                words in str(e) for words in _NO_MEMORY):
            return e
        e = e.__cause__ or e.__context__
    return None
