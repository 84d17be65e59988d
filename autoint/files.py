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
from collections.abc import Iterator
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
    the process ends, SIGKILL included. Nothing is locked where the system has no ``flock`` or the folder cannot be
    opened."""
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
        yield
    finally:
        os.close(fd)  # releases the lock
