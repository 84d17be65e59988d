"""Scoring raw rows with a trained model: ``autoint predict`` and the MLflow pyfunc model.

Raw rows are a table whose columns carry the original field names (a CSV, a TSV,
a Parquet file or a pandas DataFrame); multi-valued fields may be lists or
separator-joined strings. They are encoded with the vocabularies saved in the
checkpoint (unseen values → OOV, missing values → the missing token), so the
model sees exactly what it saw in training.
"""

from __future__ import annotations

import contextlib
import csv
import logging
import math
import os
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import torch

from .batch import tensors_from_columns
from .checkpoint import (
    CHECKPOINT_KEY,
    PRECISION_KEY,
    CheckpointError,
    checkpoint_file,
    model_from_checkpoint,
    read_checkpoint,
)
from .config import is_int
from .datasets.base import EXACT_FLOAT, raw_frame
from .datasets.errors import PREPARE_AGAIN, DataError, RowError
from .datasets.frappe import libfm_frames
from .datasets.table import _decode, _lone_line, _rebatch, _with_hook, open_text_table
from .datasets.text import (
    damaged,
    first_line,
    open_parquet,
    parquet_batches,
    read_parquet_table,
    refuse_binary,
    refuse_unread,
    undecodable_bad_rows,
)
from .encoder import Encoder
from .errors import InputError, message_head, stop_on_sigterm
from .files import locked_partial, read_json, release_partial
from .schema import CATEGORICAL, MISSING, MULTI, OOV, PAD

log = logging.getLogger(__name__)

SCORING_PRECISIONS = {"32": False, "32-true": False, "bf16": True, "bf16-mixed": True}  # name → bf16 autocast


def scores_in_bf16(precision: str) -> bool:
    """Whether a scoring precision name asks for bf16 autocast; an unknown name is an :class:`InputError`."""
    if precision not in SCORING_PRECISIONS:
        raise InputError(f"precision {precision!r}: expected one of {list(SCORING_PRECISIONS)} (default '32')")
    return SCORING_PRECISIONS[precision]


class Scorer:
    """A trained model plus its encoder: raw rows in, click probabilities out.

    Scores in fp32 unless ``precision="bf16"`` is asked for, whatever the model
    was trained in (:attr:`trained_precision`, kept for reports): one model gives
    the same probabilities on every host, not bf16 on one and fp32 on another.
    """

    def __init__(self, model: torch.nn.Module, cfg: Any, schema: Any, encoder_state: dict[str, Any] | None,
                 batch_size: int | None = None, precision: str = "32", trained_precision: str | None = None) -> None:
        self.bf16 = scores_in_bf16(precision)
        if batch_size is not None and not (is_int(batch_size) and batch_size >= 1):
            raise InputError(f"batch_size must be a positive integer (None: rows per pass chosen for the device), "
                             f"got {batch_size!r}")
        if encoder_state is None:
            raise CheckpointError("this checkpoint carries no encoder state, so it cannot score raw rows")
        self.model, self.cfg, self.schema = model.eval(), cfg, schema
        self.encoder = Encoder.from_state(encoder_state)
        self.encoder.build_lookups()  # now, not on the first request
        # Rows per forward pass: on a CPU, pieces whose activations fit in cache (twice as fast as
        # 8192-row batches for the paper's models here; AutoInt.rows_per_pass).
        on_cpu = next(model.parameters()).device.type == "cpu"
        self.batch_size = batch_size or (model.rows_per_pass() if on_cpu and hasattr(model, "rows_per_pass") else 8192)
        self.precision = precision
        self.trained_precision = trained_precision  # None: a checkpoint from before it was recorded

    @classmethod
    def from_checkpoint(cls, path: str | Path, batch_size: int | None = None, precision: str = "32",
                        tracking_uri: str | None = None) -> Scorer:
        """A scorer of the model in ``path``: a checkpoint, a run folder (its best checkpoint) or an MLflow
        model URI (``runs:/ID/model``, ``models:/NAME@champion``; ``tracking_uri`` names the store)."""
        with checkpoint_file(path, tracking_uri) as path:
            ckpt = read_checkpoint(path)
        model, cfg, schema, encoder = model_from_checkpoint(ckpt, path)
        return cls(model, cfg, schema, encoder, batch_size, precision, ckpt[CHECKPOINT_KEY].get(PRECISION_KEY))

    def __repr__(self) -> str:
        layers = getattr(self.model, "layers", ())
        attention = getattr(layers[0], "attention", None) if len(layers) else None
        width = (f", {len(layers)} interacting layer{'s' * (len(layers) > 1)} of {attention.num_heads} heads x "
                 f"{attention.head_dim}" if attention is not None else "")
        weight = next(self.model.parameters(), None)
        device = f" on {weight.device}" if weight is not None else ""
        trained = f", trained in {self.trained_precision}" if self.trained_precision else ""
        return (f"Scorer({type(self.model).__name__} over {len(self.schema)} fields{width}; scores in "
                f"{'bf16' if self.bf16 else 'fp32'}{trained}; {self.batch_size} rows a pass{device})")

    @property
    def columns(self) -> list[str]:
        return list(self.schema.names)

    def encode(self, df: pd.DataFrame, exact_ids: bool = True) -> dict[str, torch.Tensor]:
        """Raw rows as the model's batch tensors. ``exact_ids`` False: rows read from a file, whose types are the
        file's, as prepare read them (see :meth:`autoint.datasets.base.RawReader.canonical_columns`)."""
        # Scoring needs no label: a label column (often blank in rows still to be scored) is not read.
        return tensors_from_columns(self.encoder.encode_columns(
            self.encoder.canonical_rows(df, labels=False, exact_ids=exact_ids)), self.schema)

    @torch.inference_mode()
    def score_tensors(self, batch: dict[str, torch.Tensor]) -> np.ndarray:
        n = len(next(iter(batch.values())))
        out = np.empty(n, dtype=np.float32)
        device = next(self.model.parameters()).device  # rows go where the model is (a GPU too)
        for start in range(0, n, self.batch_size):
            part = {k: v[start : start + self.batch_size].to(device, non_blocking=True) for k, v in batch.items()
                    if k != "label"}
            with torch.autocast(device.type, torch.bfloat16, enabled=self.bf16):
                logits = self.model(part)
            out[start : start + self.batch_size] = torch.sigmoid(logits.float()).cpu().numpy()
        return out

    def score_frame(self, df: pd.DataFrame) -> np.ndarray:
        """Click probabilities for the rows of ``df``, in order (none for a frame of no rows, whose columns are
        checked as any frame's)."""
        return self.score_tensors(self.encode(df))

    def score_file(self, source: str | Path, target: str | Path, chunk_rows: int = 100_000,
                   keep: Sequence[str] = ()) -> int:
        """Score a CSV/TSV/Parquet file of raw rows into ``target`` (CSV or Parquet); returns the row count.

        ``keep``: columns of the input copied, as their text, before the ``probability`` column (a row id, as a
        submission file needs).

        The scores go to a hidden file beside ``target``, renamed onto it once
        every row is scored: a failure leaves no partial file behind, and an
        existing ``target`` untouched.
        """
        source, target = Path(source).expanduser(), Path(target).expanduser()
        if isinstance(keep, str):  # one column named as a string, not its characters
            keep = [keep]
        if not (is_int(chunk_rows) and chunk_rows >= 1):
            raise InputError(f"chunk_rows must be a positive integer, got {chunk_rows!r}")
        # realpath, not exists() first: out/../rows.csv names the input while out/ does not exist yet (it was
        # created, and the scores renamed onto the input)
        if os.path.realpath(target) == os.path.realpath(source) or (
                target.exists() and source.exists() and os.path.samefile(target, source)):
            raise DataError(f"output {target} is the input file: the scores would replace the rows; name another")
        if target.is_dir():
            raise DataError(f"output {target} is a folder; name a .csv or .parquet file")
        if target.suffix.lower() not in (".csv", ".parquet", ".pq"):
            raise DataError(f"output {target}: name a .csv or .parquet file (the suffix decides the format)")
        made = [p for p in (target.parent, *target.parent.parents) if not p.exists()]  # deepest first
        target.parent.mkdir(parents=True, exist_ok=True)
        # its own name per call (two threads scoring into one output shared it, and a bare FileNotFoundError or
        # mixed rows followed), and not one a planted link could take in advance; locked while this process
        # lives, so that a later call removes it if this process is killed
        partial, lock = locked_partial(target)
        done = False
        with stop_on_sigterm():  # a SIGTERM removes the partial file, as a failure does
            try:
                as_parquet = target.suffix.lower() in (".parquet", ".pq")
                keep = list(dict.fromkeys(keep))
                if "probability" in keep:
                    raise DataError("--keep: 'probability' is the output's score column; keep other columns")
                rows = self._write_scores(source, partial, as_parquet, chunk_rows, keep)
                if rows == 0:  # a header and no rows (a day with no traffic): scored as none, as a served empty frame
                    log.warning("%s: no rows to score; %s holds none", source, target)
                    _write_no_scores(partial, as_parquet, keep)
                partial.replace(target)
                done = True
            finally:
                partial.unlink(missing_ok=True)
                release_partial(partial, lock)
                for folder in made if not done else ():  # the folders this call made for its output
                    with contextlib.suppress(OSError):
                        folder.rmdir()
        return rows

    def _write_scores(self, source: Path, out: Path, as_parquet: bool, chunk_rows: int,
                      keep: list[str]) -> int:
        """Every chunk of ``source`` scored into ``out`` (the ``keep`` columns, then ``probability``); returns
        the row count."""
        writer: pq.ParquetWriter | None = None
        rows = 0
        unseen = UnseenValues(self.schema)
        try:
            with open(out, "wb") if not as_parquet else contextlib.nullcontext() as csv_out:
                for start, chunk in _read_rows(source, chunk_rows, self.encoder.reader()):
                    try:  # a chunk of no rows too (a header alone): its columns are checked as any chunk's
                        tensors = self.encode(chunk, exact_ids=False)
                        unseen.add(tensors)
                        probs = self.score_tensors(tensors)
                    except RowError as e:
                        raise DataError(e.where(str(source), start)) from None
                    except DataError as e:
                        raise DataError(f"{source}: {e}") from None
                    absent = [c for c in keep if c not in chunk.columns]
                    if absent:
                        raise DataError(f"--keep: {source} has no column {absent[0]!r} (columns: "
                                        f"{[str(c) for c in chunk.columns]})")
                    if len(chunk) == 0:
                        continue
                    frame = pd.DataFrame({**{c: _as_text(chunk[c]) for c in keep}, "probability": probs})
                    if as_parquet:
                        table = pa.Table.from_pandas(frame, schema=_scores_schema(keep), preserve_index=False)
                        writer = writer or pq.ParquetWriter(out, table.schema)
                        writer.write_table(table)
                    else:
                        frame.to_csv(csv_out, header=rows == 0, index=False, float_format="%.9g")  # float32 whole
                    rows += len(chunk)
        finally:
            if writer is not None:
                writer.close()
        unseen.warn(source)
        return rows


class UnseenValues:
    """Counts, per categorical field, the scored values that training never saw (OOV); warns when most are.

    Rows not laid out as the training log (a processed split's ids, another log's columns under the same names)
    score without an error, each value taken as unseen: the probabilities are then the model's guess for unknown
    everything, and nothing else would say so.
    """

    SHARE = 0.9  # of a field's present values unseen, for the field to count as mostly unseen
    FIELDS = 3  # categorical fields at least, and values of each at least: no alarm for a few cold-start rows
    VALUES = 100

    def __init__(self, schema: Any) -> None:
        self.names = [f.name for f in schema.of_kind(CATEGORICAL)]
        self.unseen = np.zeros(len(self.names), dtype=np.int64)
        self.present = np.zeros(len(self.names), dtype=np.int64)

    def add(self, batch: dict[str, torch.Tensor]) -> None:
        ids = batch.get("categorical")
        if ids is None or not len(ids):
            return
        self.unseen += (ids == OOV).sum(dim=0).numpy()
        self.present += ((ids != MISSING) & (ids != PAD)).sum(dim=0).numpy()

    def warn(self, source: Any) -> None:
        share = np.divide(self.unseen, self.present, out=np.zeros(len(self.names)), where=self.present > 0)
        mostly = [(n, s) for n, s, k in zip(self.names, share, self.present) if s > self.SHARE and k >= self.VALUES]
        if len(self.names) >= self.FIELDS and len(mostly) * 2 > len(self.names):
            listed = ", ".join(f"{n} {s:.0%}" for n, s in sorted(mostly, key=lambda p: -p[1])[:5])
            log.warning("%s: %d of %d categorical fields hold mostly values training never saw (%s%s), so the scores "
                        "are the model's guess for unknown values: are these raw rows as the training log has them? "
                        "(a processed split's ids are not raw values)", source, len(mostly), len(self.names), listed,
                        ", ..." if len(mostly) > 5 else "")


def _scores_schema(keep: list[str]) -> pa.Schema:
    return pa.schema([*(pa.field(c, pa.string()) for c in keep), pa.field("probability", pa.float32())])


def _as_text(col: pd.Series) -> np.ndarray:
    """A kept column as text (None where missing), whatever type the input's reader gave it, value by value: a
    whole float as an integer (an id column with holes, float in pandas: ``7``, not ``7.0``) where it is one
    exactly (below 2**53; past that a float is no exact id, and is written as the float it is), float32 as its
    shortest text (``0.1``, not ``0.10000000149011612``), a list as its items joined by ``|`` (not numpy's
    repr), text as it is (``""`` included)."""
    narrow = isinstance(col.dtype, np.dtype) and col.dtype.kind == "f" and col.dtype.itemsize < 8
    return np.array([_value_text(v, narrow) for v in col], dtype=object)


def _value_text(v: Any, narrow: bool = False) -> str | None:
    if isinstance(v, (list, tuple, np.ndarray)):
        return "|".join(t for t in (_value_text(x) for x in v) if t is not None)
    if v is None or v is pd.NA or (isinstance(v, (float, np.floating)) and v != v):
        return None
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    if isinstance(v, (float, np.floating)):
        x = float(str(np.float32(v))) if narrow or isinstance(v, np.float32) else float(v)
        if x.is_integer() and abs(x) < EXACT_FLOAT and not (x == 0 and math.copysign(1.0, x) < 0):
            return str(int(x))
        return str(x)
    return str(v)


def _write_no_scores(out: Path, as_parquet: bool, keep: list[str]) -> None:
    """An output with the ``keep`` and ``probability`` columns and no rows."""
    if as_parquet:
        pq.write_table(_scores_schema(keep).empty_table(), out)
    else:
        pd.DataFrame(columns=[*keep, "probability"]).to_csv(out, index=False)


def _check_header(path: Path, sep: str, encoding: str, names: set[str] | None = None) -> None:
    """A :class:`DataError` naming a column the header line names twice, of ``names`` (None: any but blank ones;
    a spreadsheet's export leaves blank names, and columns the model never reads may repeat)."""
    try:
        header = next(csv.reader([first_line(path, encoding).lstrip("\ufeff")], delimiter=sep), [])
    except (UnicodeError, LookupError, EOFError, OSError, ValueError, csv.Error):
        return  # reading the rows says what is wrong with the file
    seen: set[str] = set()
    for name in header:
        if name in seen and name.strip() and (names is None or name in names):
            raise DataError(f"{path}: the header names column {name!r} twice; name each column once")
        seen.add(name)


def _read_rows(path: Path, chunk_rows: int, reader: Any = None) -> Iterator[tuple[int, pd.DataFrame]]:
    """Raw rows in chunks, every column as text (so "01234" stays a zip code, not 1234).

    ``reader`` (a :class:`~autoint.datasets.base.RawReader` of the training format,
    e.g. ``Encoder.reader()``) reads a text file laid out as the training log was
    (Criteo's headerless lines, a table's ``header: false`` and ``names``,
    its separator and encoding) as such. Any other file is a table whose header
    names the fields: CSV, or TSV for ``.tsv`` / ``.txt``, or Parquet.
    """
    if path.is_dir():  # "not found" misled: the folder is there
        raise DataError(f"input {path} is a folder: predict scores one file (prepare takes folders and globs); "
                        "score each file, or join them into one")
    if not path.is_file():
        globbed = "*" in str(path) or "?" in str(path) or "[" in str(path)
        raise DataError(f"input file not found: {path}" + (
            " (predict scores one file; a glob is not expanded: score each file it names)" if globbed else ""))
    if path.stat().st_size == 0:
        raise DataError(f"input file is empty: {path}")
    refuse_unread([path])  # a zip, xz or 7z file, a workbook: refused by name, as prepare refuses them
    suffix = "".join(path.suffixes[-2:]).lower() if path.suffix == ".gz" else path.suffix.lower()
    start = 0
    if suffix in (".parquet", ".pq"):
        for batch in parquet_batches(path, batch_size=chunk_rows):
            df = _parquet_frame(path, batch)
            yield start, df
            start += len(df)
        if start == 0:  # no rows: a frame of none, whose columns are checked as any frame's
            yield 0, _parquet_frame(path, pa.RecordBatch.from_pylist([], schema=open_parquet(path).schema_arrow))
        return
    head = refuse_binary(path, "a text table of rows")  # a Parquet file named .csv, a workbook: not parsed as text
    layout = reader.text_layout(path) if reader is not None else None
    if layout is None:
        options = {"sep": "\t" if suffix.startswith((".tsv", ".txt")) else ","}
    else:
        options = {"sep": layout.sep, "encoding": layout.encoding,
                   "quoting": csv.QUOTE_MINIMAL if layout.quoting else csv.QUOTE_NONE}
        if layout.names is not None:
            options.update(header=None, names=layout.names, skiprows=1 if layout.header else 0)
    if "names" not in options:  # the header names the columns: a name twice would be read as 'name.1', unseen
        _check_header(path, options["sep"], options.get("encoding", "utf-8"),
                      None if reader is None else {f.name for f in reader.fields} | {reader.label_column_in_frame()})
    sep, encoding = options["sep"], options.get("encoding", "utf-8")
    if head[:2] in (b"\xff\xfe", b"\xfe\xff") and "16" not in encoding:  # read as UTF-8: rows of NUL bytes, the
        # wrong number of fields ("line 17: 9 fields where 8 are expected") said nothing of the cause
        raise DataError(f"{path}: a UTF-16 text file (its byte-order mark), read as {encoding}; save it as UTF-8")
    quoting = options.get("quoting", csv.QUOTE_MINIMAL) != csv.QUOTE_NONE
    start = 0
    # Arrow's parser, as prepare reads a table: a row of too few fields is refused here too (pandas padded it,
    # scoring its last fields as missing or, a field gone from the middle, every later value under the wrong
    # field), and one of too many. Values arrive as bytes and are decoded here, every column as text.
    try:
        for df in (libfm_frames(path, chunk_rows, options["names"]) if layout is not None and layout.tokens else
                   _text_frames(path, chunk_rows, sep, encoding, quoting, options.get("names"),
                                options.get("skiprows", 0))):
            yield start, df
            start += len(df)
    except UnicodeError as e:  # utf-16 without its byte-order mark is no UnicodeDecodeError
        raise DataError(f"{path}: undecodable bytes near row {start + 1} ({getattr(e, 'reason', e)}); the model "
                        f"reads its text as {encoding}") from None
    except pd.errors.ParserError as e:
        raise DataError(f"{path}: malformed table: {e}") from None
    except (EOFError, OSError, zlib.error) as e:  # a compressed file cut short or damaged
        raise DataError(f"{path}: {damaged(path)}: reading stopped near row {start + 1} ({message_head(e)})") from None


def _text_frames(path: Path, rows: int, sep: str, encoding: str, quoting: bool, names: list[str] | None,
                 skip: int) -> Iterator[pd.DataFrame]:
    """:func:`_text_batches` as frames of ``str`` / None (missing), bytes that are not text refused."""
    start = 0
    for batch in _text_batches(path, rows, sep, encoding, quoting, names, skip):
        unique = _pandas_names(batch.schema.names)
        batch = batch.rename_columns(unique)
        try:
            columns = {name: _shared_strings(batch.column(name)) for name in unique}
        except pa.ArrowInvalid:  # bytes that are not UTF-8 somewhere: which row, and which value
            _, undecodable, bad = _decode(batch, unique)
            row = int(np.flatnonzero(undecodable)[0]) if undecodable.any() else 0
            raise DataError(f"{path}: undecodable bytes in row {start + row + 1} ({bad!r} is not "
                            f"{encoding})") from None
        yield pd.DataFrame({k: pd.Series(v, dtype=object) for k, v in columns.items()})
        start += batch.num_rows


def _pandas_names(names: list[str]) -> list[str]:
    """Header names as ``pandas.read_csv`` gave them, which ``--keep`` names: a blank one ``Unnamed: i``, a
    repeated one (a column the model never reads; :func:`_check_header` refused the others) numbered ``note.1``."""
    out: list[str] = []
    for i, name in enumerate(names):
        name = name if name.strip() else f"Unnamed: {i}"
        candidate, k = name, 0
        while candidate in out:
            k += 1
            candidate = f"{name}.{k}"
        out.append(candidate)
    return out


def _shared_strings(column: pa.Array) -> np.ndarray:
    """A byte column as an ``object`` array of ``str`` / None, one ``str`` object per distinct value (as pandas'
    parser shares them: a log's values repeat, and an object per value held ~0.3 GB more per 100,000 rows of
    Criteo)."""
    coded = pc.dictionary_encode(column.cast(pa.string()))
    values = np.append(coded.dictionary.to_numpy(zero_copy_only=False).astype(object), None)
    return values[pc.fill_null(coded.indices, len(values) - 1).to_numpy()]


_BLOCK_BYTES = 1 << 24  # what Arrow's parser reads at a time: a header or a line longer than this is refused


def _text_batches(path: Path, rows: int, sep: str, encoding: str, quoting: bool, names: list[str] | None,
                  skip: int) -> Iterator[pa.RecordBatch]:
    """Batches of ``rows`` rows of a text table, every column as bytes; a row with another number of fields than
    the header (or ``names``) is a :class:`DataError` naming its line."""
    bad: list[Any] = []
    readers: list[Any] = []

    def refuse(row: Any) -> str:
        # Skipped and said after the batch: returning "error" here failed the read from inside Arrow, and the
        # process then aborted now and then as it exited ("terminate called without an active exception").
        if row.text.strip():  # a line of spaces (an editor's, an export's) is no row, as a blank line is none
            bad.append(row)
        return "skip"

    def opened(columns: list[str] | None) -> Any:
        readers.append(open_text_table(path, sep, encoding, names, skip, refuse, binary=columns, include=None,
                                       quoting=quoting, block_size=_BLOCK_BYTES))
        return readers[-1]

    def refused() -> DataError:
        row = bad[0]
        return DataError(f"{path}, line {row.number}: {row.actual_columns} fields where {row.expected_columns} are "
                         "expected (the header's, or the training log's layout); prepare counts such a line as a bad "
                         "row (field_count), and it cannot be scored: mend or remove it")

    caught: list[UnicodeDecodeError] = []
    batches = hooked = None
    try:
        with undecodable_bad_rows(refuse) as caught:
            try:
                columns = names or opened(None).schema.names
            except pa.ArrowInvalid as e:
                lone = _lone_line(path, encoding) if names is None and "Empty CSV file" in str(e) else None
                if lone is None:
                    raise
                # a header without its newline, which Arrow does not see: a file of no rows, of these columns
                lone = lone.removeprefix("\ufeff")  # as Arrow drops a byte-order mark
                if not lone.strip():
                    raise DataError(f"input file is empty (no header and no rows): {path}") from None
                header = next(csv.reader([lone], delimiter=sep, quoting=csv.QUOTE_MINIMAL if quoting else
                                         csv.QUOTE_NONE))
                yield _no_rows(header)
                return
            if bad:  # in the first block, read for the header
                raise refused()
            if not any(c.strip() for c in columns):  # blank lines, spaces: no header to read
                raise DataError(f"input file is empty (no header and no rows): {path}")
            batches = _rebatch(opened(columns), rows)
        hooked = _with_hook(batches, caught, refuse)
        any_rows = False
        for batch in hooked:
            if bad:
                raise refused()
            any_rows = True
            yield batch
        if bad:
            raise refused()
        if not any_rows:  # a header alone: no rows, whose columns are checked as any batch's
            yield _no_rows(columns)
    except pa.ArrowInvalid as e:
        if bad:
            raise refused() from None
        if caught:
            raise DataError(f"{path}: a row with the wrong number of fields that also holds bytes that are not "
                            f"{encoding} ({message_head(e)}); mend or remove it") from None
        if "Empty CSV file" in str(e):  # blank lines only, or a compressed file holding nothing
            raise DataError(f"input file is empty (no header and no rows): {path}") from None
        if "straddl" in str(e):
            raise DataError(f"{path}: a line longer than {_BLOCK_BYTES >> 20} MiB, which is not read; is the file "
                            "laid out as a table of rows (or are its lines ended by another character)?") from None
        raise DataError(f"{path}: malformed table: {message_head(e)}") from None
    finally:
        # Readers left mid-file to the cycle collector, which may run as the interpreter exits, aborted the
        # process now and then ("terminate called without an active exception", status 134): closed here.
        for generator in (hooked, batches):
            if generator is not None:
                generator.close()
        for reader in readers:
            reader.close()
        readers.clear()
        bad.clear()


def _parquet_frame(path: Path, batch: pa.RecordBatch) -> pd.DataFrame:
    """A Parquet file's batch of raw rows as prepare reads it."""
    try:
        return raw_frame(batch, strict=True)
    except DataError as e:
        raise DataError(f"{path}: {e}") from None


def _no_rows(columns: list[str]) -> pa.RecordBatch:
    """A batch of no rows with these (byte) columns, as a table of its header alone reads."""
    return pa.RecordBatch.from_arrays([pa.array([], pa.binary()) for _ in columns], names=columns)


def raw_example(folder: str | Path, rows: int = 5) -> pd.DataFrame:
    """The first usable raw rows of the log a processed folder was prepared from, as a user would send them
    (bad rows, and rows a reader drops by design such as MovieLens' ratings of 3, are not among them).

    Multi-valued fields are joined with their separator, so the frame is plain
    text and numbers, as in a CSV. Used for the logged model's signature and
    input example. ``prepare`` stores these rows in the folder (``example.parquet``),
    so they need no raw log; a folder prepared before that, or ``rows`` beyond
    those stored, re-reads the raw log named in ``prepare.json``.
    """
    from .config import config_from_dict
    from .datasets import make_reader
    from .datasets.base import arrow_strings, canonical_frame, numeric_array
    from .datasets.text import describe_inputs
    from .datasets.times import TIME
    from .files import EXAMPLE_FILE, EXAMPLE_ROWS

    folder = Path(folder)
    example = folder / EXAMPLE_FILE
    if example.is_file():
        table = read_parquet_table(example, PREPARE_AGAIN)
        if table.num_rows >= rows or table.num_rows < EXAMPLE_ROWS:  # fewer: the log had no more
            table = table.slice(0, rows)
            cols = {name: numeric_array(col) if pa.types.is_floating(col.type) else arrow_strings(col)
                    for name, col in zip(table.column_names, table.columns, strict=True)}
            return canonical_frame(None, cols)
    report_path = folder / "prepare.json"
    if not report_path.is_file():
        raise DataError(f"{folder}: no prepare.json; run `autoint prepare` first")
    resolved = read_json(report_path, DataError)["data"]
    raw = resolved["raw"]
    raw = [str(Path(x).expanduser().resolve()) for x in raw] if isinstance(raw, list) else Path(raw).resolve()
    try:
        data_cfg = config_from_dict({"data": resolved}).data
        reader = make_reader(data_cfg, raw)
        frame = next(iter(reader.chunks(rows))).head(rows).reset_index(drop=True)
    except (DataError, OSError, StopIteration) as e:
        raise DataError(f"{folder}: holds no {EXAMPLE_FILE} with {rows} rows, and the raw log it was prepared "
                        f"from ({describe_inputs(raw)}) cannot be read again ({e or 'no rows'}); "
                        "prepare the folder again from its raw log") from None
    frame = frame.drop(columns=[TIME], errors="ignore")
    for f in reader.fields:
        if f.kind == MULTI:
            sep = reader.multi_separator(f.name)
            frame[f.name] = [sep.join(v) for v in frame[f.name]]
    return frame.drop(columns=[reader.label], errors="ignore")
