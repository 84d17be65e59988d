"""Raw text inputs: which files a raw path names, how they are opened, and vetted line blocks.

A raw input (``data.raw`` or ``--raw``) is a file, a folder (its files, in
natural order: ``day_2`` before ``day_10``), a glob (``logs/day_*.gz``) or a
list of any of these. ``*.gz`` and ``*.zst`` / ``*.zstd`` files are
decompressed on the fly by Arrow's stream decompressors, never whole in memory.

Lines are read in large byte blocks and vetted with numpy (field count, blank
lines, bytes that do not decode), so a malformed row is logged with its file
and line number before Arrow's CSV parser sees the block.
"""

from __future__ import annotations

import contextlib
import fnmatch
import glob
import io
import logging
import os
import re
import sys
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from autoint.datasets.errors import BadRowLog, DataError
from autoint.errors import few, message_head

log = logging.getLogger(__name__)

_GLOB_CHARS = re.compile(r"[*?\[]")
COMPRESSION = {".gz": "gzip", ".zst": "zstd", ".zstd": "zstd", ".bz2": "bz2"}
# Archives and compressions no reader decompresses: refused by name rather than parsed as text (a .zip's bytes
# read as CSV gave a parse error about column counts, and a traceback).
_NOT_READ = {".zip": "a zip archive", ".xz": "xz-compressed", ".lzma": "xz-compressed", ".7z": "a 7-Zip archive",
             ".rar": "a RAR archive", ".tar": "a tar archive", ".tgz": "a tar archive",
             ".xlsx": "an Excel workbook", ".xlsm": "an Excel workbook", ".xls": "an Excel workbook",
             ".ods": "a spreadsheet"}
_UNPACK = ("unpack or decompress it first (gzip, zstd and bzip2 files are read as they are, e.g. "
           "`unzip -p FILE.zip | gzip > FILE.gz`)")
_EXPORT = "export it from the spreadsheet as CSV (or Parquet)"
# The first bytes of files that are no text, whatever their names say, and what to do with each.
_MAGIC = ((b"PAR1", "a Parquet file", "name it .parquet (or, for format: table, set data.columns.format: parquet)"),
          (b"PK\x03\x04", "a zip archive (an .xlsx workbook is one)", f"{_UNPACK}; a workbook: {_EXPORT}"),
          (b"\xd0\xcf\x11\xe0", "an Excel 97-2003 workbook (an OLE2 file)", _EXPORT),
          # compressed, named without its suffix (or a link whose own name lacks it): the suffix picks the codec
          (b"\x1f\x8b", "gzip-compressed", "name it .gz (compressed files are read by their suffix)"),
          (b"\x28\xb5\x2f\xfd", "zstd-compressed", "name it .zst (compressed files are read by their suffix)"),
          # bzip2's "BZh" and a level digit are text too: its first block's magic (pi's digits) follows
          *((b"BZh%d%s" % (i, block), "bzip2-compressed", "name it .bz2 (compressed files are read by their suffix)")
            for i in range(1, 10) for block in (b"1AY&SY", b"\x17rE8P\x90")))  # a block, or the end of an empty one


# Separators a header may turn out to hold when read with another one, as YAML writes each.
_SEPARATORS = ((";", "';'"), ("\t", '"\\t"'), ("|", "'|'"), (",", "','"))
# What scoring advises when the rows to score come in another layout than the training log's.
ROWS_READ_AS = "write them as the training log was laid out (its separator), or as Parquet"


def read_as(column: str, present: Sequence[Any], advice: str) -> str:
    """'; the header reads as separated by ';': ' + ``advice`` (``{}`` stands for the separator) when a header
    read with another separator holds ``column`` (a ';'-separated file read as CSV has the one column
    ``'clicked;user;price'``); a note naming a column that differs from ``column`` only in spaces or letter case
    (``' movie_id'``); else ''."""
    for sep, written in _SEPARATORS:
        if any(column in name.split(sep) for name in map(str, present) if sep in name):
            return f"; the header reads as separated by {written}: {advice.format(written)}"
    near = [name for name in map(str, present) if name != column and name.strip().casefold() == column.casefold()]
    if near:  # "user_id, movie_id": a space after each comma is part of the next name
        return (f"; the rows name {near[0]!r}, which differs from {column!r} only in spaces or letter case: "
                "column names are matched exactly")
    return ""


def damaged(path: Path) -> str:
    """What a file that stops reading midway is: a compressed one damaged or cut short, another unreadable."""
    return "damaged or cut short" if path.suffix.lower() in COMPRESSION else "unreadable"


def file_labels(files: Sequence[Path]) -> dict[Path, str | None]:
    """How bad-row examples name each file: None for a single file; else its name, with as many parent folders
    as tell it apart (``a/day_0`` and ``b/day_0``, where the name alone named two files alike)."""
    if len(files) <= 1:
        return dict.fromkeys(files)
    deepest = max(len(f.parts) for f in files)
    for depth in range(1, deepest + 1):
        labels = {f: "/".join(f.parts[-depth:]) for f in files}
        if len(set(labels.values())) == len(labels):
            break
    return labels


def natural_key(path: Path) -> list[object]:
    """Sort key that orders ``day_2`` before ``day_10``."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", str(path))]


def file_identity(path: Path) -> tuple[int, int]:
    """The file itself (device, inode): a symbolic or hard link to a file is that file too."""
    st = path.stat()
    return st.st_dev, st.st_ino


def expand_inputs(raw: str | Path | Sequence[str | Path], pattern: str = "*") -> list[Path]:
    """The files a raw input names, in reading order; a name that matches nothing raises :class:`DataError`.

    A name that exists is that file or folder, glob characters and all (``clicks[1].csv``); else a name with
    ``*``, ``?`` or ``[`` is a glob. A folder contributes its files matching ``pattern`` (compressed too:
    ``*.libfm`` takes ``x.libfm.gz``), not those of its subfolders, and leaves out names that start with ``.`` or
    ``_`` (hidden files; Spark's ``_SUCCESS`` and other markers, as Arrow datasets do). A file named twice (a
    folder and a file in it, overlapping globs) raises :class:`DataError`: it would be read twice.
    """
    items = [raw] if isinstance(raw, (str, Path)) else list(raw)
    if not items:
        raise DataError("data.raw: an empty list of raw files")
    out: list[Path] = []
    named_by: dict[Path, str] = {}
    for item in items:
        before = len(out)
        path = Path(item).expanduser()
        if _GLOB_CHARS.search(str(item)) and not path.exists():  # else a file such as 'clicks[1].csv' is itself
            text = str(item)
            found = sorted((Path(p) for p in glob.glob(str(path))), key=natural_key)
            _refuse_broken_links(found)
            found = [p for p in found if p.is_file()]
            if not found:
                raise DataError(f"raw input {text!r}: no file matches this pattern" + _relative_to_cwd(Path(text)))
            out.extend(found)
        elif not path.exists():
            raise DataError(f"raw file not found: {path}" + _relative_to_cwd(path))
        elif path.is_dir():
            listed = [p for p in path.iterdir() if not p.name.startswith((".", "_"))  # x.libfm.gz is x.libfm
                      and fnmatch.fnmatchcase(p.stem if p.suffix.lower() in COMPRESSION else p.name, pattern)]
            _refuse_broken_links(listed)
            found = sorted((p for p in listed if p.is_file()), key=natural_key)
            if not found:
                sub = any(p.is_dir() for p in path.iterdir())
                raise DataError(f"{path}: folder holds no {pattern} files" + (
                    f" (its subfolders are not read: name their files with a glob, e.g. '{path}/*/*')" if sub else ""))
            out.extend(found)
        else:
            out.append(path)
        for p in out[before:]:
            key = file_identity(p)
            if key in named_by:
                first, by = named_by[key]
                same = "" if first == p else f" (the same file as {first})"
                raise DataError(f"raw input: {p}{same} is named twice (by {by!r} and {str(item)!r}), so it would be "
                                "read twice; name each file once")
            named_by[key] = (p, str(item))
    empty = [path for path in out if path.stat().st_size == 0]
    if len(empty) == len(out):
        raise DataError(f"raw file is empty: {empty[0]}" if len(out) == 1 else
                        f"raw input: every file is empty ({few(empty, 5)})")
    for path in empty:  # a day with no traffic, among others: 0 rows, as a compressed empty file gives
        warn_empty(path)
    return out


_warned_empty: set[Path] = set()


def warn_empty(path: Path) -> None:
    """Say, once in this process, that ``path`` gives no rows (its inputs are listed more than once a command)."""
    if path not in _warned_empty:
        _warned_empty.add(path)
        log.warning("raw file is empty: %s (0 rows from it)", path)


def holds_nothing(path: Path) -> bool:
    """Whether ``path`` reads as no bytes at all, decompressed (a gzip of nothing is 20 bytes of it)."""
    try:
        with open_binary(path) as f:
            return not f.read(1)
    except (OSError, EOFError):
        return False  # unreadable: the reading that follows says why


def _refuse_broken_links(paths: Sequence[Path]) -> None:
    """A symbolic link to a file that is gone was skipped as no file, and its rows lost without a word."""
    broken = [p for p in paths if p.is_symlink() and not p.exists()]
    if broken:
        raise DataError(f"raw input: {broken[0]} is a symbolic link to {os.readlink(broken[0])}, which does not "
                        "exist; mend or remove the link (its rows would be missing)")


def say_compressed_twins(paths: Sequence[Path]) -> None:
    """Warn of ``day_1`` read beside ``day_1.gz`` (what ``gzip -k`` leaves): most likely one log twice, whose
    rows would land in train and test alike."""
    by_name: dict[Path, list[Path]] = {}
    for path in dict.fromkeys(paths):  # one file named by two splits (valid and test) is no twin of itself
        plain = path.with_suffix("") if path.suffix.lower() in COMPRESSION else path
        by_name.setdefault(plain, []).append(path)
    for twins in by_name.values():
        if len(twins) > 1:
            log.warning("%s: read as %d files, one of them compressed (what gzip -k leaves): if they hold the same "
                        "rows, each row is read %d times and lands in train and test alike; remove all but one",
                        " and ".join(p.name for p in twins), len(twins), len(twins))


def _relative_to_cwd(path: Path) -> str:
    """Where a relative raw path was looked for (the current folder, not the config file's)."""
    return "" if path.is_absolute() else RELATIVE_TO_CWD.format(Path.cwd())


RELATIVE_TO_CWD = " (relative to the current folder, {}, not the config file's)"


def refuse_unread(paths: Sequence[Path]) -> list[Path]:
    """``paths``, unless one is an archive or a compression that no reader decompresses (see :data:`_NOT_READ`)."""
    for path in paths:
        kind = _NOT_READ.get(path.suffix.lower())
        if kind is not None:
            advice = _EXPORT if kind in ("an Excel workbook", "a spreadsheet") else _UNPACK
            raise DataError(f"{path}: {kind}, which is not read; {advice}")
    return list(paths)


def refuse_binary(path: Path, reading_as: str) -> bytes:
    """``path``'s first 4 bytes (decompressed; b"" when it cannot be read: the reading that follows says why), or a
    :class:`DataError` when they say it is no text file but a Parquet file, a zip archive or a workbook (named
    ``.csv``, it was parsed as text: a parse error full of its bytes)."""
    try:
        with open_binary(path) as f:
            head = f.read(10)
    except (OSError, EOFError):
        return b""
    codec = COMPRESSION.get(path.suffix.lower())
    for magic, kind, advice in _MAGIC:
        if head.startswith(magic):
            if codec is not None:  # renamed without its compression suffix it is still compressed: decompress it
                then = ("name it .parquet (Parquet compresses its own pages)" if magic == b"PAR1" else advice)
                raise DataError(f"{path}: {kind} compressed with {codec}, by its first bytes once decompressed, "
                                f"not {reading_as}; decompress it first, then {then}")
            raise DataError(f"{path}: {kind} by its first bytes, not {reading_as}; {advice}")
    return head[:4]


def describe_inputs(raw: str | Path | Sequence[str | Path] | None) -> str:
    if raw is None:
        return "<no raw input>"
    return str(raw) if isinstance(raw, (str, Path)) else ", ".join(str(x) for x in raw)


def open_binary(path: Path):
    """Open a raw text file as a byte stream, decompressing ``.gz`` / ``.zst`` as it is read."""
    codec = COMPRESSION.get(path.suffix.lower())
    if codec is None:
        return open(path, "rb")
    return pa.CompressedInputStream(pa.OSFile(str(path), "rb"), codec)


# What Arrow raises for a file that is not Parquet or is damaged: I/O (truncated, a checksum or decompression
# that fails, an unreadable page header) or what it decoded (invalid lengths, an unknown encoding or type).
_PARQUET_DAMAGE = (OSError, pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, pa.ArrowIndexError,
                   pa.ArrowKeyError, pa.ArrowCapacityError)


@contextlib.contextmanager
def reading_parquet(path: Path, advice: str = "") -> Iterator[None]:
    """Inside: Arrow reading ``path`` as Parquet (only that: our own errors keep their traceback). A file that is
    not Parquet or is damaged raises :class:`DataError` naming it, with ``advice`` after the reason."""
    try:
        yield
    except PermissionError as e:  # readable once permitted: no damage, nothing to prepare again
        raise DataError(f"{path}: cannot be read ({e.strerror})") from None
    except _PARQUET_DAMAGE as e:
        raise DataError(f"{path}: not a readable Parquet file ({message_head(e)}){advice}") from None


def open_parquet(path: Path, advice: str = "") -> pq.ParquetFile:
    """``path`` opened as Parquet, its pages' checksums verified where the writer wrote them (``prepare`` does);
    a file that is not Parquet (truncated, or another format) raises :class:`DataError` as
    :func:`reading_parquet` says."""
    with reading_parquet(path, advice):
        return pq.ParquetFile(path, page_checksum_verification=True)


def read_parquet_table(path: Path | Any, advice: str = "", name: str | None = None, **kwargs: Any) -> pa.Table:
    """``pq.read_table(path, **kwargs)`` with page checksums verified; a damaged file raises :class:`DataError`
    as :func:`reading_parquet` says (``name``: what to call a file-like ``path`` in the message)."""
    with reading_parquet(name or path, advice):
        return pq.read_table(path, page_checksum_verification=True, **kwargs)


def parquet_batches(path: Path, advice: str = "", **kwargs: Any) -> Iterator[pa.RecordBatch]:
    """``ParquetFile.iter_batches(**kwargs)`` of ``path``; damage found on the way raises :class:`DataError`
    naming the file, as :func:`reading_parquet` says."""
    batches = open_parquet(path, advice).iter_batches(**kwargs)
    while True:
        with reading_parquet(path, advice):
            batch = next(batches, None)
        if batch is None:
            return
        yield batch


def first_line(path: Path, encoding: str = "utf-8") -> str:
    """The first line of a raw text file (decompressed), without its line end (LF, CR LF or a CR alone, as
    Arrow's CSV reader takes them); raises ``UnicodeDecodeError``, and
    :class:`DataError` for a compressed file cut short before its first MiB (Arrow's OSError, a traceback)."""
    try:
        with open_binary(path) as f:
            head = bytes(f.read(1 << 20))
    except (OSError, EOFError) as e:
        raise DataError(f"{path}: {damaged(path)} ({message_head(e)}); mend or remove it") from None
    return re.split(rb"\r\n|\r|\n", head, maxsplit=1)[0].decode(encoding)  # an old Mac's \r alone ends one too


@dataclass(frozen=True)
class TextLayout:
    """How a reader's raw text files lay out their rows: what reading rows to score in that layout needs."""

    sep: str
    names: list[str] | None  # the columns in order; None: the header line names them
    header: bool  # the first line is a header (skipped when ``names`` are given)
    encoding: str = "utf-8"
    quoting: bool = True  # double quotes may enclose values (Criteo's lines have none)
    tokens: bool = False  # each field's text is a libFM token ``index:value``, whose index is the field's value


def _whole_lines_before_damage(path: Path) -> int | None:
    """How many whole lines of a file that fails to read midway read before the failure, in small pieces (a block
    read fails whole, so the line it began at said little: 'at or after line 1' of a file 13,888 lines of which
    read). None if it reads to the end this time."""
    lines = 0
    try:
        with open_binary(path) as f:
            while data := f.read(1 << 16):
                lines += bytes(data).count(b"\n")
    except (OSError, EOFError, pa.ArrowException):
        return lines
    return None


MAX_LINE_BYTES = 64 << 20  # a line longer than this is no row of a click log: refused, not held (see below)


def iter_line_blocks(path: Path, n_lines: int) -> Iterator[tuple[int, bytes]]:
    """Yield ``(first_line_number, buffer)``: at most ``n_lines`` whole raw lines per buffer.

    Reads large byte blocks (sized from the lines seen so far) rather than line
    objects, so a block costs one allocation, not one per line; lines are
    counted with ``bytes.count``, and only a block that overshoots ``n_lines``
    is searched for its cut. Each buffer is one copy of the bytes read: the
    previous block's partial last line joined to the new block's whole lines.
    """
    line_bytes = 256  # first guess; refined from the data
    with open_binary(path) as f:
        first, pending = 1, b""
        stuck: list[bytes] = []  # reads that held no line end, joined once one comes (+= was quadratic)
        stuck_bytes = 0
        while True:
            try:
                data = f.read(max(1 << 16, line_bytes * n_lines - len(pending) - stuck_bytes))
            except (OSError, EOFError, pa.ArrowException) as e:  # corrupt or truncated archive, unreadable file
                # Blocks are read whole, so the damage lies somewhere after the lines already handed out.
                what = damaged(path)
                whole = _whole_lines_before_damage(path)
                where = (f"after line {whole:,}, the last that reads whole" if whole is not None and whole >= first
                         else f"at or after line {first:,}")
                raise DataError(f"{path}: {what}: reading stopped {where} ({message_head(e)})") from None
            data = bytes(data) if not isinstance(data, bytes) else data
            cut = data.rfind(b"\n") + 1
            if data and cut == 0:
                stuck.append(data)
                stuck_bytes += len(data)
                if len(pending) - pending.rfind(b"\n") - 1 + stuck_bytes > MAX_LINE_BYTES:  # one line's bytes (the
                    # whole lines before it in `pending` are no part of it): a file of no lines took memory and time
                    line = first + pending.count(b"\n")
                    raise DataError(f"{path}: line {line:,} runs past {MAX_LINE_BYTES >> 20} MiB without a line "
                                    "end (LF): not a text log of a row per line (a binary file, or lines ended by "
                                    "a CR alone?)")
                continue
            if stuck:
                pending, stuck, stuck_bytes = b"".join([pending, *stuck]), [], 0
            if not data:  # end of file: the rest, even without a final newline, n_lines at a time
                while pending.count(b"\n") + (not pending.endswith(b"\n")) > n_lines:
                    end = _after_line(pending, n_lines)
                    yield first, pending[:end]
                    first, pending = first + n_lines, pending[end:]
                if pending:
                    yield first, pending
                return
            k = pending.count(b"\n") + data.count(b"\n", 0, cut)
            if k > n_lines:  # rare: lines much shorter than the guess. Every whole block of n_lines goes now (one
                # per read let the rest pile up in `pending`: quadratic for a small n_lines)
                buf = pending + data
                ends = np.flatnonzero(np.frombuffer(buf, dtype=np.uint8) == 10) + 1
                start = 0
                for j in range(n_lines, len(ends) + 1, n_lines):
                    end = int(ends[j - 1])
                    yield first, buf[start:end]
                    first, start = first + n_lines, end
                pending = buf[start:]
                line_bytes = max(1, start // (len(ends) // n_lines * n_lines))
                continue
            end = len(pending) + cut
            yield first, (pending + data[:cut] if pending else data[:cut])
            pending = data[cut:]
            line_bytes = max(1, end // k)
            first += k


def _after_line(buf: bytes, n: int) -> int:
    """The offset just past the ``n``-th newline of ``buf`` (which holds at least ``n``)."""
    return int(np.flatnonzero(np.frombuffer(buf, dtype=np.uint8) == 10)[n - 1]) + 1


@contextlib.contextmanager
def undecodable_bad_rows(handler: Any = None) -> Iterator[list[UnicodeDecodeError]]:
    """Collects what stops Arrow's bad-row hook before it runs: pyarrow decodes a bad row's text as UTF-8 to
    hand it over, and on a byte that is not UTF-8 it prints that error as "Exception ignored" (a traceback on
    the console) and fails the file as if the hook had refused the row. Other such errors are printed as
    ever.

    ``sys.unraisablehook`` is the interpreter's: one hook is installed while any call is inside (saved and put
    back by each call, two threads preparing at once left autoint's hook installed for good). An error goes to the
    list of the call whose ``handler`` (the bad-row hook given to Arrow, which the error names as its object)
    raised it; without one, of the call the raising thread is inside; else (a thread of Arrow's own, which parses
    blocks off the calling thread) of the call entered last, right unless two threads read at once.
    """
    global _unraisable_before
    caught: list[UnicodeDecodeError] = []
    stack = getattr(_unraisable_local, "stack", None)
    if stack is None:
        stack = _unraisable_local.stack = []
    stack.append(caught)
    with _unraisable_lock:
        if not _unraisable_active:
            _unraisable_before = sys.unraisablehook
            sys.unraisablehook = _unraisable_hook
        _unraisable_active.append(caught)
        if handler is not None:
            _unraisable_by_handler[id(handler)] = (handler, caught)
    try:
        yield caught
    finally:
        stack.pop()
        with _unraisable_lock:
            if handler is not None and _unraisable_by_handler.get(id(handler), (None,))[0] is handler:
                del _unraisable_by_handler[id(handler)]
            del _unraisable_active[next(i for i, c in enumerate(_unraisable_active) if c is caught)]  # (by
            # identity: == finds any other empty list first)
            if not _unraisable_active:
                sys.unraisablehook, _unraisable_before = _unraisable_before or sys.__unraisablehook__, None


_unraisable_lock = threading.Lock()
_unraisable_local = threading.local()
_unraisable_active: list[list[UnicodeDecodeError]] = []  # every call inside, in the order entered
_unraisable_before: Any = None
_unraisable_by_handler: dict[int, tuple[Any, list[UnicodeDecodeError]]] = {}  # id(handler) -> (handler, its list)


def _unraisable_hook(unraisable: Any) -> None:
    if isinstance(unraisable.exc_value, UnicodeDecodeError):
        stack = getattr(_unraisable_local, "stack", None)
        source = getattr(unraisable, "object", None)
        with _unraisable_lock:
            owner = _unraisable_by_handler.get(id(source))
            target = (owner[1] if owner is not None and owner[0] is source
                      else stack[-1] if stack else (_unraisable_active[-1] if _unraisable_active else None))
        if target is not None:
            target.append(unraisable.exc_value)
            return
    (_unraisable_before or sys.__unraisablehook__)(unraisable)


def fast_parse(block: bytes, names: list[str], types: dict[str, pa.DataType], sep: bytes) -> pa.Table | None:
    """Parse a block straight into typed columns, or None if any line is not perfectly well formed.

    The fast path of the readers: Arrow's multi-threaded CSV parser with the
    final types. Any anomaly (a line with the wrong field count, a blank line,
    bytes that do not decode, a value that does not convert) returns None, and
    the caller vets the block line by line to say which line and why.
    """
    if len(names) < 2 and (block.startswith((b"\n", b"\r\n")) or b"\n\n" in block or b"\n\r\n" in block):
        return None  # a blank line: one empty field is a well-formed row of a one-column file
    invalid = []

    def handler(row: Any) -> str:
        invalid.append(row)
        return "skip"

    try:
        with undecodable_bad_rows(handler):  # a bad row's byte that is not UTF-8 printed a traceback: vetted below
            table = pacsv.read_csv(
                io.BytesIO(block),
                read_options=pacsv.ReadOptions(column_names=names, block_size=1 << 22),
                # A blank line is a row of one field: the handler sees it rather than the parser skipping it.
                parse_options=pacsv.ParseOptions(delimiter=sep.decode(), quote_char=False, double_quote=False,
                                                 ignore_empty_lines=False,
                                                 invalid_row_handler=handler),
                convert_options=pacsv.ConvertOptions(column_types=types, null_values=[""], strings_can_be_null=True),
            )
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    if invalid:
        return None
    return table


def split_block(
    block: bytes,
    first_line: int,
    sep: bytes,
    n_fields: int,
    log: BadRowLog,
    encoding: str = "utf-8",
    file: str | None = None,
    strip_trailing_sep: bool = False,
) -> tuple[bytes, np.ndarray, int]:
    """Vet a block of lines; return the good ones (``\\n``-terminated), their line numbers, and the line count.

    Fast path: separators counted per line with numpy over the whole buffer. Lines with
    the wrong field count (``field_count``), blank lines (``blank_line``) and
    lines that do not decode (``decode_error``) are logged and left out; the
    slow per-line path only runs for a block that fails to decode as a whole.
    ``sep`` of more than one byte (MovieLens ``::``) is rewritten to a tab;
    ``strip_trailing_sep`` drops separators at line ends (libFM's trailing blanks).
    """
    buf = block
    if b"\r" in buf:
        buf = buf.replace(b"\r\n", b"\n")
    if not buf.endswith(b"\n"):
        buf += b"\n"
    if strip_trailing_sep:
        while sep + b"\n" in buf:
            buf = buf.replace(sep + b"\n", b"\n")
    expected = f"{n_fields} fields separated by {sep.decode()!r}"
    if len(sep) > 1:
        buf = buf.replace(sep, b"\t")
        sep = b"\t"
    arr = np.frombuffer(buf, dtype=np.uint8)
    nl = np.flatnonzero(arr == 10)
    n = len(nl)
    starts = np.empty(n, dtype=np.int64)
    starts[0] = 0
    starts[1:] = nl[:-1] + 1
    # Separators before each line end, differenced: per-line counts without a per-separator search.
    before = np.searchsorted(np.flatnonzero(arr == sep[0]), nl)
    seps = np.diff(before, prepend=0)
    line_no = np.arange(first_line, first_line + n, dtype=np.int64)
    blank = (nl - starts) == 0
    wrong = (seps != n_fields - 1) & ~blank
    good = ~(blank | wrong)
    log.add("blank_line", line_no[blank], file, expected=expected, got="")
    if wrong.any():
        i = int(np.flatnonzero(wrong)[0])
        log.add("field_count", line_no[wrong], file, expected=expected,
                got=f"{seps[i] + 1} fields: " + buf[starts[i] : nl[i]].decode(encoding, "replace"))
    try:
        if not buf.isascii():  # ASCII (all of Criteo) is valid in every encoding we read
            buf.decode(encoding)
    except UnicodeDecodeError:
        undecodable = np.zeros(n, dtype=bool)
        for i in np.flatnonzero(good):
            try:
                buf[starts[i] : nl[i]].decode(encoding)
            except UnicodeDecodeError:
                undecodable[i] = True
        if undecodable.any():
            i = int(np.flatnonzero(undecodable)[0])
            log.add("decode_error", line_no[undecodable], file, expected=f"text in {encoding}",
                    got=buf[starts[i] : nl[i]].decode(encoding, "replace"))
        good &= ~undecodable
    if not good.all():
        keep = np.flatnonzero(good)
        buf = b"".join(buf[starts[i] : nl[i] + 1] for i in keep)
    return buf, line_no[good], n


def parse_block(buf: bytes, names: list[str], sep: bytes, encoding: str = "utf-8") -> pa.Table:
    """Parse vetted lines into an all-string Arrow table; empty fields become nulls."""
    if encoding.lower().replace("_", "-") not in ("utf-8", "utf8", "ascii"):
        buf = buf.decode(encoding).encode("utf-8")
    return pacsv.read_csv(
        io.BytesIO(buf),
        read_options=pacsv.ReadOptions(column_names=names, block_size=1 << 20),
        parse_options=pacsv.ParseOptions(delimiter=sep.decode(), quote_char=False, double_quote=False),
        convert_options=pacsv.ConvertOptions(
            column_types={c: pa.string() for c in names},
            null_values=[""],
            strings_can_be_null=True,
            quoted_strings_can_be_null=True,
        ),
    )


def file_lines(ordinals: np.ndarray, skipped: np.ndarray, first: int = 2) -> np.ndarray:
    """1-based file line of each kept data row, given the (sorted) lines the parser skipped.

    ``first`` is the first data line: 2 below a header, 1 in a file without one.
    """
    line = ordinals + first
    if skipped.size == 0:
        return line
    while True:
        nxt = ordinals + first + np.searchsorted(skipped, line, side="right")
        if np.array_equal(nxt, line):
            return line
        line = nxt
