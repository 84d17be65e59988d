"""The small files autoint writes and reads back: run.json, metrics.json, tune.json, prepare.json, schema.json,
encoder.json, summary.json, config.yaml.

Written whole or not at all: the text goes to a temporary file beside the target, which then replaces it
(``os.replace``, atomic on POSIX and Windows), so a process killed while writing leaves the old file or the new
one, never half of one. Read back, a file that is not valid JSON raises an :class:`~autoint.errors.InputError`
naming it, so a damaged run folder is one line, not a traceback.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import numbers
import os
import secrets
import stat
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from .errors import InputError

log = logging.getLogger(__name__)

# The processed folder's few raw rows (autoint prepare writes them; raw_example and serving read them).
EXAMPLE_FILE = "example.parquet"
EXAMPLE_ROWS = 5


def write_text(path: str | Path, text: str) -> None:
    """``path`` holds ``text`` (UTF-8), or, if this fails or is killed midway, what it held before.

    The file's permissions are what a plain write gives: an existing file's own, a new one's from the umask.
    """
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.partial")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # the umask applies, as to open(path, "w")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())  # on disk before it replaces the old file: a power cut leaves one or the other
        if path.exists():
            os.chmod(tmp, stat.S_IMODE(path.stat().st_mode))
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_json(path: str | Path, obj: Any, indent: int = 2, **dumps: Any) -> None:
    """``obj`` as indented JSON with a final newline, written as :func:`write_text` does. A float that is not
    finite (the AUC of a split of one class is NaN) is written as ``null``: Python's bare ``NaN`` is not JSON, and
    ``jq``, JavaScript and strict parsers refuse the whole file."""
    write_text(path, json.dumps(_finite_or_null(obj), indent=indent, allow_nan=False, **dumps) + "\n")


def _finite_or_null(obj: Any) -> Any:
    if isinstance(obj, numbers.Real) and not isinstance(obj, numbers.Integral):  # numpy's floats too
        return obj if math.isfinite(float(obj)) else None
    if isinstance(obj, dict):
        return {k: _finite_or_null(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite_or_null(v) for v in obj]
    return obj


def read_json(path: str | Path, error: type[InputError] = InputError, advice: str = "") -> dict[str, Any]:
    """The JSON object in ``path`` (every file autoint writes holds one); a file that cannot be read as JSON,
    or holds something else, raises ``error`` naming the file and what is wrong, with ``advice`` after it."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise error(f"{path}: not valid JSON ({e.msg} at line {e.lineno}, column {e.colno}){advice}") from None
    except UnicodeDecodeError as e:
        raise error(f"{path}: not valid JSON (not UTF-8 text: {e.reason} at byte {e.start}){advice}") from None
    if not isinstance(doc, dict):
        raise error(f"{path}: expected a JSON object, found {type(doc).__name__}{advice}")
    return doc


def write_run_state(path: str | Path, uri: str, run_id: str) -> None:
    """A run folder's ``run.json``: the MLflow store and run that :func:`read_run_state` reads back."""
    write_json(path, {"tracking_uri": uri, "run_id": run_id})


def read_run_state(path: str | Path, error: type[InputError] = InputError) -> tuple[str, str]:
    """(tracking URI, run id) from a run folder's ``run.json``; one that does not name both raises ``error``."""
    state = read_json(path, error)
    uri, run_id = state.get("tracking_uri"), state.get("run_id")
    if not isinstance(uri, str) or not isinstance(run_id, str):
        raise error(f"{path}: not a run.json (it names no tracking_uri and run_id)")
    return uri, run_id


@contextlib.contextmanager
def folder_lock(folder: str | Path, shared: bool = False, waiting: str | None = None) -> Iterator[None]:
    """A lock on ``folder`` itself while inside (POSIX ``flock`` on the folder: no file is made in it), exclusive or
    ``shared``; ``waiting`` is logged where another process holds it and this one waits. The kernel drops it when
    the process ends, SIGKILL included. Nothing is locked where the system has no ``flock``, the folder cannot be
    opened or its file system refuses the lock."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        yield
        return
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        yield
        return
    try:
        mode = fcntl.LOCK_SH if shared else fcntl.LOCK_EX
        try:
            fcntl.flock(fd, mode | fcntl.LOCK_NB)
        except BlockingIOError:
            if waiting:
                log.warning(waiting)
            fcntl.flock(fd, mode)
        except OSError as e:  # a file system that keeps no such locks (some NFS mounts: ENOLCK): as without flock
            log.debug("%s: not locked (%s)", folder, e)
        yield
    finally:
        os.close(fd)  # releases the lock


# ----------------------------------------------------------------------------- partial outputs
PARTIAL_GRACE_S = 60  # a partial file younger than this may be one another process has made and not locked yet
# This process's partial files until released: never swept by its own threads (on a file system whose locks are
# per process, as NFS's may be, its own lock would not stop it); not by process id, which a container repeats
_live_partials: set[str] = set()
_partials_lock = threading.Lock()


def release_partial(partial: Path, fd: int | None) -> None:
    """Done with a partial file of :func:`locked_partial` (renamed or removed): its lock and its registration go."""
    with _partials_lock:
        _live_partials.discard(os.path.abspath(partial))
    if fd is not None:
        os.close(fd)


def locked_partial(target: Path) -> tuple[Path, int | None]:
    """A new hidden file ``.NAME.PID.HEX.partial`` beside ``target``, and a descriptor holding an exclusive lock
    on it while this process lives (None where the system has no ``flock``): the caller writes it by its path,
    renames it onto ``target`` and closes the descriptor. First removes the partial files of ``target`` that
    processes now gone left behind (:func:`sweep_partials`)."""
    sweep_partials(target)
    partial = target.with_name(f".{target.name}.{os.getpid()}.{secrets.token_hex(6)}.partial")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # not a name a planted link could take
    with _partials_lock:
        _live_partials.add(os.path.abspath(partial))
    try:
        import fcntl

        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except (ImportError, OSError):  # no flock (Windows), or a file system without locks: written unlocked
        os.close(fd)
        return partial, None
    return partial, fd


def sweep_partials(target: Path) -> list[Path]:
    """Remove the partial files of ``target`` (:func:`locked_partial`) whose process is gone (killed: SIGKILL,
    the OOM killer), and return them. One is left alone where its lock is held, it is under a minute old, it is
    not this user's, or it is not a plain file."""
    import fnmatch
    import glob

    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        return []
    pattern = f".{glob.escape(target.name)}.*.partial"  # the name's own * ? [ matched literally
    removed = []
    try:
        entries = list(os.scandir(target.parent))
    except OSError:
        return removed
    for entry in entries:
        if not fnmatch.fnmatchcase(entry.name, pattern):
            continue
        with _partials_lock:
            if os.path.abspath(entry.path) in _live_partials:  # another thread of this process writes it
                continue
        if not _stale_own(entry, stat.S_ISREG, PARTIAL_GRACE_S):
            continue
        try:
            fd = os.open(entry.path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.unlink(entry.path)
            removed.append(Path(entry.path))
        except OSError:  # its process lives (it holds the lock), or it is gone already
            pass
        finally:
            os.close(fd)
    if removed:
        log.info("removed %d partial files of %s that killed processes left", len(removed), target)
    return removed


def _stale_own(entry: os.DirEntry, is_kind: Callable[[int], bool], grace_s: float) -> bool:
    """Whether ``entry`` (not followed if a link) is of the kind ``is_kind`` tests its mode for, is this user's,
    and was last changed at least ``grace_s`` seconds ago: a candidate for a sweep of a killed process's leavings."""
    import time

    try:
        st = entry.stat(follow_symlinks=False)
    except OSError:
        return False
    return (is_kind(st.st_mode) and not (hasattr(os, "getuid") and st.st_uid != os.getuid())
            and time.time() - st.st_mtime >= grace_s)


# ----------------------------------------------------------------------------- scratch folders
SCRATCH_PREFIX = "autoint-"
SCRATCH_KINDS = ("model", "serve")  # the only folders a sweep may remove: autoint-model-*, autoint-serve-*
SCRATCH_MARKER = ".autoint-scratch"  # made in each, first: a folder without it is not autoint's to remove
SCRATCH_GRACE_S = 60  # a folder younger than this may be one another process has made and not locked yet
_scratch: dict[Path, int | None] = {}  # this process's scratch folders, and the descriptor holding each one's lock
_scratch_lock = threading.RLock()  # threads make and remove them (models loaded from two threads)


def scratch_folder(kind: str) -> Path:
    """A new empty folder ``autoint-KIND-…`` in the system's temporary folder, for this process alone.

    It is removed by :func:`remove_scratch`, else when the process exits. A process killed (SIGKILL, the OOM
    killer) cannot remove its own, so each process holds a lock on its folders while it lives, and making a
    scratch folder first removes those of processes that are gone (their lock is free): a model fetched for
    ``autoint predict runs:/…`` or copied for ``autoint serve`` no longer piles up in /tmp.
    """
    if kind not in SCRATCH_KINDS:
        raise ValueError(f"scratch folder kind {kind!r}: one of {SCRATCH_KINDS}")
    sweep_scratch()
    import tempfile

    path = Path(tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{kind}-"))
    with _scratch_lock:
        _scratch[path] = _lock_now(path)
        (path / SCRATCH_MARKER).touch()
        global _atexit_registered
        if not _atexit_registered:
            import atexit

            atexit.register(_remove_all_scratch)
            _atexit_registered = True
    return path


_atexit_registered = False


def scratch_root(path: str | Path) -> Path | None:
    """The scratch folder of this process that holds ``path``, or None."""
    path = Path(path)
    with _scratch_lock:
        return next((root for root in _scratch if path == root or root in path.parents), None)


def remove_scratch(path: str | Path) -> None:
    """Remove this process's scratch folder holding ``path`` (nothing where ``path`` is in none)."""
    import shutil

    with _scratch_lock:
        root = scratch_root(path)
        if root is None:
            return
        fd = _scratch.pop(root)
    shutil.rmtree(root, ignore_errors=True)
    if fd is not None:
        os.close(fd)


def _remove_all_scratch() -> None:
    with _scratch_lock:
        roots = list(_scratch)
    for root in roots:
        remove_scratch(root)


def _lock_now(path: Path) -> int | None:
    """A descriptor holding an exclusive lock on folder ``path``, or None where none can be had at once (no
    ``flock`` on this system, or another process holds it)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows: no sweeping of killed processes' folders
        return None
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def sweep_scratch() -> list[Path]:
    """Remove the scratch folders of autoint processes that are gone (:func:`scratch_folder`), and return them.

    Only ``autoint-model-*`` and ``autoint-serve-*`` folders holding :data:`SCRATCH_MARKER` are candidates (a
    user's own ``/tmp/autoint-notes`` is never touched: an earlier version removed any ``autoint-*`` folder), and
    one is left alone where its lock is held, it is under a minute old, or it is not this user's."""
    import shutil
    import tempfile

    removed = []
    try:
        entries = list(os.scandir(tempfile.gettempdir()))
    except OSError:
        return removed
    for entry in entries:
        with _scratch_lock:
            mine = Path(entry.path) in _scratch
        if mine or not entry.name.startswith(tuple(f"{SCRATCH_PREFIX}{kind}-" for kind in SCRATCH_KINDS)):
            continue
        if not _stale_own(entry, stat.S_ISDIR, SCRATCH_GRACE_S):
            continue
        if not os.path.isfile(os.path.join(entry.path, SCRATCH_MARKER)) or os.path.islink(
                os.path.join(entry.path, SCRATCH_MARKER)):
            continue
        fd = _lock_now(Path(entry.path))
        if fd is None:  # its process lives (or no flock here: nothing can tell)
            continue
        try:
            shutil.rmtree(entry.path, ignore_errors=True)
            removed.append(Path(entry.path))
        finally:
            os.close(fd)
    if removed:
        log.debug("removed %d scratch folders of autoint processes that are gone", len(removed))
    return removed
