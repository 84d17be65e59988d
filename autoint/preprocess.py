"""Raw log → encoded Parquet: the steps in the order data flows through them.

:func:`prepare` writes a processed folder::

    train.parquet valid.parquet test.parquet   # encoded rows, row groups of data.chunk_size rows
    schema.json                                # fitted Schema: vocab sizes, max_len
    encoder.json + vocabulary.parquet          # Encoder: transforms, reader settings; the vocabularies as data
    example.parquet                            # the first raw rows as a user would send them (for MLflow)
    prepare.json                               # report: rows, positives, rows per file, bad rows, data config,
                                               # and the raw input's fingerprint (paths, sizes, mtimes);
                                               # written last, after the other files replace the old ones

1. **read** (:mod:`autoint.datasets`): the format's reader turns each raw file
   into Arrow chunks and logs malformed rows by kind and line;
2. **stage** (:mod:`autoint.engine`): the chunks are appended to one Parquet file,
   each row numbered, with its split when the split is known while reading;
3. **split** (:mod:`autoint.splits`): ``permutation`` and ``time`` are decided
   once the whole log is staged;
4. **fit**: value counts, list lengths and numeric moments of the train rows,
   computed by the engine (DuckDB), become the :class:`~autoint.encoder.Encoder`;
5. **encode and write**: the engine joins every row to the vocabularies and
   applies the numeric transforms; rows come back in input order and go to the
   split's Parquet file.

The raw input is read once; memory is bounded by blocks of at most
:data:`~autoint.engine.STAGE_GROUP_ROWS` rows (or ``data.chunk_size``, if smaller) for reading, by
``data.chunk_size`` rows per split for writing, by ``data.memory_limit`` for the engine, which spills to disk
beyond it, and by :data:`autoint.engine.MAX_HELD_ROWS` for the encoded rows the
engine returns ahead of their turn, whatever the number of rows. Encoded columns: categorical ``int32``
ids, numeric ``float32`` values, multi-valued ``fixed_size_list<int32>[max_len]``,
``label`` ``float32``. Vocabularies, list lengths and ``standardize``
statistics are fit on the train split only. Running :func:`prepare` twice on
the same input and config writes byte-identical files (timings are returned,
not written); into a folder prepared from other settings or input it refuses
to write unless told to overwrite (:func:`prepared_differences` says what differs).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from tqdm.auto import tqdm

from autoint.config import Config, DataConfig, differences, require_config
from autoint.datasets import make_reader
from autoint.datasets.base import RawReader
from autoint.datasets.errors import PREPARE_AGAIN, BadRowLog, DataError, StaleDataError
from autoint.datasets.text import RELATIVE_TO_CWD, describe_inputs, file_identity, say_compressed_twins
from autoint.datasets.times import TIME, expected
from autoint.encoder import (
    BUCKET,
    BUCKET_LOW,
    ENCODER_VERSION,
    STAGED_TRANSFORMS,
    Encoder,
    NumericTransform,
    Vocabulary,
    criteo_transform,
    encode_lists,
    load_processed,
)
from autoint.engine import STAGE_GROUP_ROWS, Stage, StageWriter, drain, raw_types
from autoint.errors import DiskFullError, disk_full, few, message_head, stop_on_sigterm
from autoint.files import EXAMPLE_FILE, EXAMPLE_ROWS, folder_lock, read_json, write_json
from autoint.schema import CATEGORICAL, MULTI, NUMERIC
from autoint.splits import (
    MAX_PERMUTATION_ROWS,
    check_permutation_size,
    hash_uniform,
    permutation_split,
    random_split,
    time_cutoffs,
    time_split,
)

__all__ = [
    "ENCODER_VERSION", "MAX_PERMUTATION_ROWS", "SPLITS", "Encoder", "NumericTransform", "StaleDataError",
    "Vocabulary", "criteo_transform", "encode_lists", "hash_uniform", "load_processed", "permutation_split",
    "prepare", "prepared_differences", "random_split", "time_cutoffs", "time_split",
]  # fmt: skip

log = logging.getLogger(__name__)

SPLITS = ("train", "valid", "test")
STAGE_FOLDER = ".prepare"  # inside the output folder; removed when prepare ends
# Data settings that do not change what prepare writes (where it goes, how much memory, when to give up);
# the raw input is compared by its fingerprint instead of as written.
_NOT_OUTPUT = ("raw", "processed", "memory_limit", "max_bad_fraction", "split.files")


# --------------------------------------------------------------------------- read
class _Inputs:
    """The raw input of one prepare run: its readers and, for ``files``, which split each reads."""

    def __init__(self, cfg: DataConfig, raw: Any) -> None:
        self.cfg = cfg
        self.raw = raw
        self.files: dict[str, Any] | None = None
        if cfg.split.method == "files":
            base = Path(raw).expanduser() if isinstance(raw, (str, Path)) else None
            self.files = {name: _under(cfg.split.files[name], base) for name in SPLITS}
        self.probe = make_reader(cfg, raw if self.files is None else self.files["train"])
        if self.files is not None:
            self._check_files(cfg, raw, base)
        self.fields = self.probe.fields
        self.readers: list[RawReader] = []
        self.with_time = self.probe.time_column is not None  # the stage keeps a ``_time`` column
        self.time_column: str | None = None  # the stage column the time split reads
        if cfg.split.method == "time":
            col = cfg.split.time_column
            kinds = {f.name: f.kind for f in self.fields}
            if kinds.get(col) == NUMERIC:
                self.time_column = col
            elif self.probe.time_column == col:
                self.time_column = TIME
            else:
                raise DataError(f"data.split.time_column: {col!r} is not a numeric field "
                                f"(numeric fields: {[n for n, k in kinds.items() if k == NUMERIC]}); "
                                "only format 'table' reads a time column that is not a field")

    def _check_files(self, cfg: DataConfig, raw: Any, base: Path | None) -> None:
        """The ``files`` split: a name that matches no file is refused naming its split and where relative names
        are read; a file in train and another split (rows trained on, then scored as unseen) is refused; one file
        as both valid and test is said (a log shared as two files); files of a raw folder that no split names are
        said (a day left out by a glob)."""
        split_of: dict[tuple[int, int], str] = {}  # by the file itself: a hard link to a train file is it too
        for name in SPLITS:
            try:
                paths = make_reader(cfg, self.files[name]).files()
            except DataError as e:
                where = (f"relative names are read in the raw folder {base}" if base is not None and base.is_dir()
                         else "relative names are read in the raw folder only when data.raw (or --raw) names "
                         "a folder, " + (f"and it names {describe_inputs(raw)}" if raw is not None else
                                         "and neither names one"))
                said = str(e).replace(RELATIVE_TO_CWD.format(Path.cwd()), "")  # `where` says where, for a split
                raise DataError(f"data.split.files.{name}: {said} ({where})") from None
            for path in paths:
                other = split_of.setdefault(file_identity(path), name)
                if other == "train" and name != "train":
                    raise DataError(f"data.split.files: {path} is in both train and {name}, so the rows trained on "
                                    f"would be scored as unseen ones; name each file in one split")
                if other != name:
                    log.warning("data.split.files: %s is both %s and %s: the test figures are those of the rows "
                                "that chose the best epoch", path, other, name)
        if base is not None and base.is_dir():
            unused = [p for p in make_reader(cfg, str(base)).files() if file_identity(p) not in split_of]
            if unused:
                log.warning("data.split.files: %d file(s) of %s are in no split and are not read: %s", len(unused),
                            base, few(unused))

    def chunks(self) -> Iterator[tuple[pa.Table, np.ndarray, np.ndarray]]:
        """(raw Arrow chunk, source ordinals, split codes: -1 where decided after reading)."""
        # Blocks of at most one stage row group: each is one row group of the stage, and parsing and staging
        # smaller blocks is faster and holds less (10M Criteo-like rows, benchmarks/prepare_scale.py --parts
        # blocks: reading 14.8 / 14.5 s with 200,000-row blocks, 11.8 / 11.9 s with 65,536). The split files
        # keep row groups of data.chunk_size rows.
        size, split = min(self.cfg.chunk_size, STAGE_GROUP_ROWS), self.cfg.split
        sources = ([(code, self.files[name]) for code, name in enumerate(SPLITS)] if self.files is not None
                   else [(None, self.raw)])
        for code, raw in sources:
            reader = make_reader(self.cfg, raw)
            self.readers.append(reader)
            for table, rows in reader.arrow_chunks(size):
                if code is not None:
                    codes = np.full(table.num_rows, code, dtype=np.int8)
                elif split.method == "random":
                    codes = random_split(rows, split.fractions, split.seed)
                else:
                    codes = np.full(table.num_rows, -1, dtype=np.int8)
                yield table, rows, codes

    def bad_log(self) -> tuple[BadRowLog, int]:
        total = BadRowLog()
        seen = 0
        for r in self.readers:
            total.merge(r.bad)
            seen += r.rows_seen
        return total, seen

    def rows_per_file(self) -> dict[str, int]:
        """Usable rows per raw file as read, in reading order; a file with none (a day with a header only) counts
        0. A file two splits read (the ``files`` split's valid and test alike) counts its rows once, not twice. The
        rows a time split then drops for want of a time (``missing_time`` bad rows) are still counted here."""
        out: dict[str, int] = {}
        for r in self.readers:
            for path in r.row_files():
                out.setdefault(str(path), 0)
            for k, v in r.rows_per_file.items():
                out[k] = out.get(k, 0) or v
        return out

    def sources(self) -> str:
        if self.files is None:
            return describe_inputs(self.raw)
        return ", ".join(describe_inputs(v) for v in self.files.values())

    def fingerprint(self) -> list[dict[str, Any]]:
        """Every raw file, in reading order: absolute path, size and modification time (ns)."""
        out = []
        for raw in ([self.files[name] for name in SPLITS] if self.files is not None else [self.raw]):
            for path in make_reader(self.cfg, raw).files():
                st = path.stat()
                out.append({"path": str(path.expanduser().resolve()), "size": st.st_size, "mtime_ns": st.st_mtime_ns})
        return out


def _under(spec: Any, base: Path | None) -> Any:
    """A ``files`` entry (path, glob or list), relative entries resolved against a raw folder if there."""
    if isinstance(spec, (list, tuple)):
        return [_under(s, base) for s in spec]
    p = Path(str(spec)).expanduser()
    if not p.is_absolute() and base is not None and base.is_dir():
        return str(base / p)
    return str(p)


# --------------------------------------------------------------------------- fit
def _fit(encoder: Encoder, stage: Stage) -> None:
    """Vocabularies, list lengths and numeric statistics from the train rows of the stage."""
    counted = [f for f in encoder.fields if f.kind != NUMERIC]
    counts = dict(zip((f.name for f in counted), stage.value_counts_of(counted, encoder.min_count, encoder.bucketed),
                      strict=True))
    for f in encoder.fields:
        if f.kind == NUMERIC:
            t = encoder.numeric_[f.name]
            if t.kind == "standardize":
                t.fit_moments(*stage.moments(f))
            else:
                t.finalize()
            low, high = stage.transformed_range(f, t)
            t.fit_range(low, high)
            if t.range_ is not None and (t.range_[0] != low or t.range_[1] != high):
                log.warning("%s: the %r transform of its train values reaches %s, past float32's range (the "
                            "model's input): clipped to %s; values this large scale an embedding past what trains "
                            "well: log1p or standardize suits them", f.name, t.kind,
                            low if t.range_[0] != low else high, t.range_)
            continue
        kept, distinct = counts.pop(f.name)
        if f.name in encoder.bucketed and pc.any(pc.equal(kept.column("value"), str(BUCKET_LOW))).as_py():
            log.warning("%s: train values at or below %d share one bucket (buckets are int32; a value <= 2 is "
                        "its own bucket, floor(z)); for a field of large negative values, log1p or standardize "
                        "suits (data.columns.numeric)", f.name, BUCKET_LOW)
        encoder.vocabularies_[f.name] = Vocabulary.from_counts(kept.column("value"), kept.column("n").to_numpy(),
                                                               encoder.min_count, n_distinct=distinct)
        if f.kind == MULTI:
            longest, usual = stage.list_lengths(f)
            longest = max(1, longest)
            cap = encoder.max_list_len
            encoder.max_len_[f.name] = longest if cap is None else min(longest, cap)
            if cap is None and longest > max(_LONG_LIST, 4 * usual):  # one outlier pads every row
                log.warning("%s: the longest train list holds %d values, 99 %% of them at most %d: every row is "
                            "padded to %d; cap it with data.max_list_len (e.g. %d)", f.name, longest, usual, longest,
                            max(usual, 1))
    encoder.fitted_ = True


def _say_empty_fields(encoder: Encoder, train_rows: int) -> None:
    """Warn of fields without a value in the train rows (a column left empty by an export): each is one constant
    for the model, and a field that is there only in other splits or in scoring is never learned."""
    empty = [n for n, v in encoder.vocabularies_.items() if v.n_distinct_ == 0]  # bucketed numeric fields too
    empty += [n for n, t in encoder.numeric_.items() if t.range_ is None]
    if empty:
        log.warning("%d field(s) hold no value in the %d train rows, so the model sees each as one constant: %s; "
                    "check the column(s) (a table's can be left out with data.columns.drop)", len(empty), train_rows,
                    few(empty, 5))
    # Values there, but each rarer than data.min_count: every row of the field is OOV, a constant too.
    cut = [(n, v) for n, v in encoder.vocabularies_.items() if v.n_distinct_ > 0 and len(v._values) == 0]
    if cut:
        log.warning("%d field(s) keep no value: each of their values is seen fewer than data.min_count = %d times "
                    "in the train rows, so the model sees each field as one constant (OOV): %s; lower "
                    "data.min_count, or leave the field out", len(cut), cut[0][1].min_count,
                    few([f"{n} ({v.n_distinct_:,} distinct values)" for n, v in cut], 5))


_LONG_LIST = 16  # a longest list below this pads little, whatever the others hold
_PADS_MEMORY = 256  # past this longest list, an engine out of memory also names data.max_list_len
_SEPARATORS = (",", ";", "|", " ", "\t", ":")


def _doubt_separator(name: str, vocab: Vocabulary, longest: int, sep: str | None) -> None:
    """Warn when a multi-valued field's lists all hold one value that looks like several: the separator set is not
    the one its text uses ("b,c,a" split at "|"), or the text is a JSON list ('["a","b"]')."""
    if longest != 1 or vocab._values is None or not len(vocab._values):
        return
    top = [v for v in vocab._values.slice(0, 50).to_pylist() if isinstance(v, str)]
    if sum(v.startswith("[") and v.endswith("]") for v in top) > len(top) / 2:
        log.warning("%s: every train list holds one value, and its values look like JSON lists (%r): a "
                    "multi-valued field's text is values joined by its separator (data.columns.multi)", name, top[0])
        return
    for other in _SEPARATORS:
        if other != sep and sum(other in v for v in top) > len(top) / 2:
            log.warning("%s: every train list holds one value, and most of its values hold %r (%r): if that "
                        "separates the values, set it in data.columns.multi (now %r)", name, other, top[0], sep)
            return


def _doubt_float_text(name: str, vocab: Vocabulary) -> None:
    """Warn of a categorical field whose kept values are all whole numbers written with ``.0`` (``7.0``), as
    pandas writes an integer column with holes: the same column sent as numbers (a pandas frame of that file, a
    JSON request) prints them as ``7``, another category, so every served value would be out of vocabulary."""
    values = vocab._values
    if values is None or len(values) == 0 or not pc.all(pc.match_substring_regex(values, _FLOAT_TEXT)).as_py():
        return
    log.warning("%s: every kept value is a whole number written with '.0' (%r), as pandas writes an integer "
                "column with missing values; a row sent with these as numbers (a pandas frame read from this file, "
                "a JSON request) names %r, another category, out of vocabulary: send them as text as the file "
                "holds them, or write the column as integers (pandas: astype('Int64') before to_csv) and prepare "
                "again", name, values[0].as_py(), values[0].as_py()[:-2])


_FLOAT_TEXT = r"^-?\d+\.0$"


# --------------------------------------------------------------------------- write
class _SplitWriter:
    """One split's Parquet file, written in row groups of exactly ``row_group`` rows (the last one shorter).

    Writes run on ``pool`` (one thread, so in order) while the engine produces the next batch.
    """

    def __init__(self, path: Path, schema: pa.Schema, row_group: int, pool: ThreadPoolExecutor) -> None:
        self.schema = schema
        self.row_group = row_group
        self.rows = 0
        self._pool = pool
        self._pending: list[pa.Table] = []
        self._pending_rows = 0
        self._writes: list[Future] = []
        self._writer = pq.ParquetWriter(path, schema, compression="zstd", write_page_checksum=True)

    def __call__(self, table: pa.Table) -> None:
        self._pending.append(table)
        self._pending_rows += table.num_rows
        self.rows += table.num_rows
        if self._pending_rows >= self.row_group:
            whole = pa.concat_tables(self._pending)
            cut = (whole.num_rows // self.row_group) * self.row_group
            self._submit(whole.slice(0, cut))
            rest = whole.slice(cut)
            self._pending, self._pending_rows = ([rest], rest.num_rows) if rest.num_rows else ([], 0)

    def _submit(self, table: pa.Table) -> None:
        # One write in flight per split: the engine waits rather than queue batches (a queue would grow
        # with the log, since the engine produces faster than zstd compresses).
        while self._writes:
            self._writes.pop(0).result()  # re-raises a failed write
        self._writes.append(self._pool.submit(self._write, table))

    def _write(self, table: pa.Table) -> None:
        self._writer.write_table(_to_schema(table, self.schema), row_group_size=self.row_group)

    def close(self) -> None:
        try:
            if self._pending_rows:
                self._submit(pa.concat_tables(self._pending))
            for f in self._writes:
                f.result()  # re-raises a failed write
        finally:
            self._writes = []
            self._pool.submit(self._writer.close).result()


def _to_schema(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """The engine's columns → the encoder's Arrow types (lists of ids → fixed-size lists), chunk by chunk: the
    Parquet writer takes chunked columns (the same bytes), and joining the chunks first held a second copy of a
    row group."""
    arrays = []
    for field in schema:
        col = table.column(field.name)
        if pa.types.is_fixed_size_list(field.type):
            col = pa.chunked_array([pa.FixedSizeListArray.from_arrays(c.flatten().cast(pa.int32()),
                                                                      field.type.list_size) for c in col.chunks],
                                   type=field.type)
        elif col.type != field.type:
            col = col.cast(field.type)
        arrays.append(col)
    return pa.Table.from_arrays(arrays, schema=schema)


# --------------------------------------------------------------------------- prepare
def _bar(progress: bool, desc: str) -> tqdm:
    return tqdm(desc=desc, unit=" rows", unit_scale=True, disable=not progress, dynamic_ncols=True, leave=False)


def prepare(cfg: Config, raw: Any = None, out: str | Path = "data/processed/run",
            progress: bool = True, overwrite: bool = False) -> dict[str, Any]:
    """Encode a raw log into a processed folder (see the module docstring); returns the report.

    ``raw`` (default ``data.raw``) is a file, a folder, a glob or a list of them.
    A folder already prepared from other settings or input (see
    :func:`prepared_differences`) raises :class:`StaleDataError` unless
    ``overwrite``; from the same ones it is prepared again, to the same bytes. One that another command prepared
    from the same ones while this call waited for the folder is taken as it is: the report is then its
    ``prepare.json`` (without this call's ``timings``, ``stage_bytes`` and ``rows_per_s``).
    """
    require_config(cfg)
    with stop_on_sigterm():  # a scheduler's SIGTERM removes the work folder (the staged log) as an error does
        return _prepare(cfg, raw, out, progress, overwrite)


def _prepare(cfg: Config, raw: Any, out: str | Path, progress: bool, overwrite: bool) -> dict[str, Any]:
    data = cfg.data
    t_start = time.perf_counter()
    raw = _raw_input(data, raw_log(data, raw))
    inputs = _Inputs(data, raw)
    encoder = Encoder.for_reader(inputs.probe, data)
    out = Path(out).expanduser()
    fingerprint = inputs.fingerprint()
    finish_move_in(out)
    prepared = (out / "prepare.json").is_file()
    if prepared and not overwrite:
        _same_preparation(out, cfg, raw, fingerprint)
    elif not overwrite:
        _refuse_foreign_files(out)
    work = out / STAGE_FOLDER
    timings: dict[str, float] = {}
    created, done, moving = not out.exists(), False, False  # a folder this call made is not left behind, empty
    out.mkdir(parents=True, exist_ok=True)
    # One command at a time prepares a folder, and none while a run trains on it (train holds it shared): two at
    # once deleted each other's work folder, and a folder prepared again under a training run gave it other rows.
    held = contextlib.ExitStack()
    held.enter_context(folder_lock(out, waiting=f"{out}: another command is preparing this folder or training on "
                                                "it; waiting for it to end"))
    if not prepared and not overwrite and (out / "prepare.json").is_file():
        # Another command prepared it while this one waited (two runs started at once on a fresh folder): from the
        # same settings and input it is the folder this call would make, so it is taken as it is.
        with held:
            return _same_preparation(out, cfg, raw, fingerprint)
    _unlink_if_link(work)  # a link planted there sent the stage, and its removal, to the folder it pointed at
    try:
        # 1-2. Read every raw row once, into the stage.
        transforms = {name: t for name, t in encoder.numeric_.items() if t.kind in STAGED_TRANSFORMS}
        writer = StageWriter(work, inputs.fields, with_time=inputs.with_time, buckets=tuple(sorted(encoder.bucketed)),
                             keep=tuple(c for c in [inputs.time_column] if c in encoder.bucketed or c in transforms),
                             transforms=transforms)
        head = []  # the first usable raw rows: the example
        try:
            with _bar(progress, "prepare: read") as bar:
                for table, rows, codes in inputs.chunks():
                    if sum(t.num_rows for t in head) < EXAMPLE_ROWS:  # copied: a slice would pin the block
                        head.append(pa.Table.from_pylist(table.slice(0, EXAMPLE_ROWS).to_pylist(), table.schema))
                    writer.write(table, rows, codes)
                    bar.update(table.num_rows)
        finally:
            writer.close()
        stage_bytes = writer.path.stat().st_size  # the disk the stage took (returned, as the timings are)
        timings["read_s"] = time.perf_counter() - t_start
        pa.default_memory_pool().release_unused()  # what parsing freed goes back before the engine needs memory
        bad, rows_seen = inputs.bad_log()
        if rows_seen == 0:
            raise DataError(f"{inputs.sources()}: no rows")
        bad.check(rows_seen, data.max_bad_fraction, inputs.sources())
        if writer.rows == 0:
            raise DataError(f"{inputs.sources()}: no usable rows among {rows_seen} ({bad.summary()})")

        with Stage(writer.path, inputs.fields, data.memory_limit) as stage:
            # 3. Splits decided on the whole log.
            t = time.perf_counter()
            cutoffs = _decide_split(data, stage, writer.rows, bad, inputs.time_column,
                                     inputs.readers[0] if inputs.readers else inputs.probe)
            bad.check(rows_seen, data.max_bad_fraction, inputs.sources())  # with the rows missing a time
            counts = stage.split_counts()
            rows = {name: counts.get(code, (0, 0))[0] for code, name in enumerate(SPLITS)}
            positives = {name: counts.get(code, (0, 0))[1] for code, name in enumerate(SPLITS)}
            if rows["train"] == 0:
                raise DataError(f"{inputs.sources()}: the train split is empty (data.split = {data.split})")
            timings["split_s"] = time.perf_counter() - t

            # 4. Fit on the train rows.
            t = time.perf_counter()
            _fit(encoder, stage)
            timings["fit_s"] = time.perf_counter() - t
            _say_empty_fields(encoder, rows["train"])
            long = max(((w, n) for n, w in encoder.max_len_.items()), default=(0, ""))
            if encoder.max_list_len is None and long[0] > _PADS_MEMORY:  # padded lists of this length fill memory
                stage.memory_advice = (f"; or cap data.max_list_len: {long[1]!r} pads every row to its longest "
                                       f"train list, {long[0]:,} values")
            for name, width in encoder.max_len_.items():
                _doubt_separator(name, encoder.vocabularies_[name], width, inputs.probe.multi_separator(name))
            for f in encoder.fields:
                if f.kind == CATEGORICAL and f.name not in encoder.bucketed:
                    _doubt_float_text(f.name, encoder.vocabularies_[f.name])
            pa.default_memory_pool().release_unused()

            # 5. Encode every row and write it to its split: in the work folder, so that a run that fails
            # here (e.g. out of data.memory_limit) leaves a folder prepared before as it was.
            t = time.perf_counter()
            staged = work / "out"
            _unlink_if_link(staged)
            shutil.rmtree(staged, ignore_errors=True)  # left by a killed run
            staged.mkdir()
            arrow_schema = encoder.arrow_schema()
            with ThreadPoolExecutor(max_workers=1) as pool:
                writers = {code: _SplitWriter(staged / f"{name}.parquet", arrow_schema, data.chunk_size, pool)
                           for code, name in enumerate(SPLITS)}
                try:
                    # Encoded in tables of at most a stage row group; the writers gather data.chunk_size rows.
                    drain(stage.encoded(encoder, min(data.chunk_size, STAGE_GROUP_ROWS)), writers)
                finally:
                    for w in writers.values():
                        w.close()
            written = {name: writers[code].rows for code, name in enumerate(SPLITS)}
            if written != rows:  # pragma: no cover - the stage is ours; a mismatch is a bug
                raise RuntimeError(f"encoded rows {written} differ from the split counts {rows}")
            timings["encode_write_s"] = time.perf_counter() - t
            _write_example(head, inputs.probe, staged / EXAMPLE_FILE)
        schema = encoder.schema
        schema.save(staged / "schema.json")
        encoder.save(staged)
        report: dict[str, Any] = {
            "source": inputs.sources(),
            "format": data.format,
            "rows_seen": rows_seen,
            "rows": rows,
            "positives": positives,
            "positive_rate": {k: (positives[k] / rows[k] if rows[k] else None) for k in SPLITS},
            "rows_per_file": inputs.rows_per_file(),
            "bad_rows": bad.to_dict(),
            "ignored_columns": list(dict.fromkeys(c for r in inputs.readers
                                                  for c in getattr(r, "ignored_columns", []))),
            "fields": [f.name for f in schema.fields],
            "vocab_sizes": {f.name: f.vocab_size for f in schema.fields if f.kind != NUMERIC},
            "distinct_in_train": {n: v.n_distinct_ for n, v in encoder.vocabularies_.items()},
            "max_len": {f.name: f.max_len for f in schema.fields if f.kind == MULTI},
            "numeric_transforms": {**{n: t.kind for n, t in encoder.numeric_.items()},
                                   **dict.fromkeys(sorted(encoder.bucketed), BUCKET)},
            "transforms_as_served": True,  # criteo and log1p by the scorer's arithmetic (see _differences)
            "time_cutoffs": list(cutoffs) if cutoffs else None,
            "data": _resolved_data(cfg, raw),
            "input": fingerprint,
        }
        write_json(staged / "prepare.json", report, ensure_ascii=False)  # last: the staged folder is whole
        moving = True
        _move_in(staged, out)
        done = True
    except Exception as e:
        full = disk_full(e)  # Arrow's, Python's or the engine's error, named for the folder it filled
        if full is not None:
            raise DiskFullError(
                f"{out}: the disk filled while preparing ({message_head(full)}); prepare needs room in {work} for "
                "the staged log, the engine's spill files and the encoded splits: free space there or prepare into "
                "a folder on another disk (--out); the folder is as it was"
            ) from e
        raise
    finally:
        if moving and not done:  # stopped while moving the files in (SIGTERM, Ctrl-C): they are whole, finish it
            with contextlib.suppress(OSError):
                _move_in(staged, out)
        if not (work / "out" / "prepare.json").is_file():  # else the next prepare or train finishes moving it in
            shutil.rmtree(work, ignore_errors=True)
        if created and not done:
            with contextlib.suppress(OSError):  # only if empty
                out.rmdir()
        held.close()

    total_s = time.perf_counter() - t_start
    timings["total_s"] = total_s
    report["timings"] = {k: round(v, 3) for k, v in timings.items()}
    report["stage_bytes"] = stage_bytes
    report["rows_per_s"] = round(rows_seen / total_s, 1) if total_s > 0 else None
    if bad.total or bad.dropped:
        log.warning("%s: %s", inputs.sources(), bad.summary())
    say_compressed_twins([Path(f["path"]) for f in fingerprint])
    empty = [name for name, n in report["rows_per_file"].items() if n == 0]
    if empty:
        log.warning("%d raw file(s) gave no usable rows: %s", len(empty), few(empty))
    for split in SPLITS:
        if not rows[split]:
            log.warning("%s: the %s split holds no rows; train refuses it (change data.split)", out, split)
        elif positives[split] in (0, rows[split]):
            log.warning("%s: the %s split holds %s only (%d rows): its AUC is undefined (reported as NaN), so %s",
                        out, split, "clicks" if positives[split] else "non-clicks", rows[split],
                        "choosing the best epoch by it means nothing" if split == "valid" else
                        "its figures say nothing of ranking")
    return report


def _same_preparation(out: Path, cfg: Config, raw: Any, fingerprint: list[dict[str, Any]]) -> dict[str, Any]:
    """``out``'s report, where it was prepared from these settings and this input; else :class:`StaleDataError`."""
    report = read_json(out / "prepare.json", DataError, "; pass --overwrite to prepare it again")
    differences = _differences(report, _resolved_data(cfg, raw), fingerprint)
    if differences:
        raise StaleDataError(f"{out} was prepared from other settings or input ({'; '.join(differences)}); "
                             "pass --overwrite to prepare it again, or choose another folder")
    return report


def _move_in(staged: Path, out: Path) -> None:
    """Move a whole staged folder's files into ``out``: ``schema.json`` after the splits, ``prepare.json`` last (a
    folder without it counts as unprepared; without ``schema.json``, as no data at all). Run again after it was
    stopped part way, it moves the rest (:func:`finish_move_in`)."""
    for name in ("prepare.json", "schema.json"):
        if (staged / name).exists():  # else already moved in: it is the new one
            (out / name).unlink(missing_ok=True)
    for path in sorted(staged.iterdir(), key=lambda p: (p.name == "schema.json", p.name == "prepare.json")):
        os.replace(path, out / path.name)


def finish_move_in(out: str | Path) -> bool:
    """Finish moving a prepare's files into ``out`` where it was killed part way (its staged folder holds
    ``prepare.json``, written once all the rest was staged); returns whether there was one. The folder is then as
    that prepare would have left it. Runs under the folder's lock, as prepare does."""
    out = Path(out).expanduser()
    staged = out / STAGE_FOLDER / "out"
    if (out / STAGE_FOLDER).is_symlink() or staged.is_symlink():  # not a stage this folder's prepare made
        return False
    if not (staged / "prepare.json").is_file():
        return False
    with folder_lock(out, waiting=f"{out}: another command is preparing this folder or training on it; waiting "
                                  "for it to end"):
        if not (staged / "prepare.json").is_file():  # the command waited for did it
            return False
        log.warning("%s: a prepare was stopped while moving its files in; finishing it", out)
        _move_in(staged, out)
        shutil.rmtree(out / STAGE_FOLDER, ignore_errors=True)
    return True


def _unlink_if_link(path: Path) -> None:
    """Remove ``path`` where it is a symbolic link (the link, never what it points at): prepare's own folders
    inside the output are made by prepare, and one planted as a link would be followed (a security review)."""
    if path.is_symlink():
        path.unlink()


def _refuse_foreign_files(out: Path) -> None:
    """A folder that is not a processed folder (no ``prepare.json``) is prepared into only if it is empty but for
    prepare's work folder (a killed prepare's): a user's own ``train.parquet`` would be overwritten, and a raw data
    folder given as ``--data`` filled with another data set's splits. (A prepare killed while moving its files in
    is finished first, :func:`finish_move_in`.)"""
    if out.exists() and not out.is_dir():
        raise DataError(f"{out} is a file, not a folder to prepare into; choose another folder (--out, or train's "
                        "--data)")
    foreign = sorted(p.name for p in out.iterdir() if p.name != STAGE_FOLDER) if out.is_dir() else []
    if foreign:
        raise DataError(f"{out} is not a processed folder (it has no prepare.json) and holds other files "
                        f"({few(foreign)}), which preparing there could overwrite or mix with: prepare into a new "
                        "or empty folder (--out, or train's --data), or pass prepare --overwrite to write into it "
                        "anyway")


def _decide_split(data: DataConfig, stage: Stage, n: int, bad: BadRowLog,
                  time_column: str | None, reader: RawReader) -> tuple[float, float] | None:
    """Tell the stage how ``permutation`` and ``time`` split its rows; returns the time cut-offs, if any.

    ``time_column`` is the stage's column for the time split: the numeric field, or ``_time`` (read in the
    ``reader``'s time format, if any); the reader also names the lines of rows without a time.
    """
    split = data.split
    if split.method == "permutation":
        check_permutation_size(n)
        stage.split_by_position(permutation_split(n, split.fractions, split.seed))
    elif split.method == "time":
        counts = stage.time_counts(time_column)
        if counts.num_rows == 0:
            raise DataError(f"data.split.time_column {split.time_column!r} is missing in every row")
        series = pd.Series(counts.column("n").to_numpy(), index=counts.column("t").to_numpy())
        cutoffs = time_cutoffs(series, split.fractions)
        stage.split_by_time(time_column, cutoffs)
        missing, first = stage.rows_where_split(-1, bad.keep)
        bad.add_counted("missing_time", missing, reader.lines_of(first), column=split.time_column,
                        expected=expected(reader.time_format, reader.time_unit) if time_column == TIME
                        else "a finite number")
        return cutoffs
    return None


def raw_log(data: DataConfig, raw: Any) -> Any:
    """``raw``, else ``data.raw``; for the synthetic format, its one log, generated first where it is missing or was
    generated from other settings (what ``prepare`` reads, and what a study fingerprints)."""
    raw = raw if raw is not None else data.raw
    if data.format == "synthetic" and not isinstance(raw, (list, tuple)):
        from autoint.datasets.synthetic import ensure_generated

        raw = str(ensure_generated(data.synthetic, raw, split=data.split))
    return raw


def _raw_input(data: DataConfig, raw: Any) -> Any:
    """``--raw``, else ``data.raw``; neither is needed where the files split names every file itself."""
    raw = data.raw if raw is None else raw
    if raw is None and data.split.method != "files":
        raise DataError("no raw input: set data.raw in the config or pass --raw")
    return [str(x) for x in raw] if isinstance(raw, (list, tuple)) else raw


def _resolved_data(cfg: Config, raw: Any) -> dict[str, Any]:
    """The data settings as prepare.json records them: raw paths absolute, no output folder."""
    d = cfg.to_dict()["data"]
    d["raw"] = (None if raw is None else [str(Path(x).expanduser().resolve()) for x in raw] if isinstance(raw, list)
                else str(Path(raw).expanduser().resolve()))
    d.pop("processed", None)  # where the output went is not part of what was computed
    return d


def _write_example(head: list[pa.Table], reader: RawReader, path: Path) -> None:
    """The first usable raw rows (``head``: the reader's first tables) as a user would send them
    (:func:`autoint.predict.raw_example` reads them): the fields' raw values as the reader gave them, cast to
    their raw types, multi-valued ones joined with their separator, no label."""
    types = raw_types(reader.fields)
    columns = {}
    for f in reader.fields:
        col = pa.chunked_array([t.column(f.name).cast(types[f.name]) for t in head], type=types[f.name])[:EXAMPLE_ROWS]
        columns[f.name] = pc.binary_join(col, reader.multi_separator(f.name)) if f.kind == MULTI else col
    table = pa.table(columns)
    pq.write_table(table, path, compression="zstd", write_page_checksum=True)


# --------------------------------------------------------------------------- stale folders
def prepared_differences(folder: str | Path, cfg: Config, raw: Any = None, settings_only: bool = False) -> list[str]:
    """What differs between a prepared folder and what ``cfg`` and ``raw`` would prepare now, in words.

    Settings (``data.min_count: 5 in the folder, 10 now``) and the raw input
    (other files, or a file changed since: its size or modification time); an
    empty list when nothing does. ``raw`` defaults to ``data.raw``. A folder
    prepared before autoint recorded its input says so; a folder with no
    ``prepare.json`` raises :class:`DataError`. With no raw input named (neither
    ``raw`` nor ``data.raw``), or ``settings_only``, only the settings are compared; so too, with a warning, where
    every file or folder ``data.raw`` names was read to prepare the folder and is gone (removed once prepared; the
    synthetic format's log, which its settings make, without one).
    """
    report_path = Path(folder).expanduser() / "prepare.json"
    if not report_path.is_file():
        raise DataError(f"{folder}: not a prepared folder (no prepare.json)")
    report = read_json(report_path, DataError, PREPARE_AGAIN)
    gone = _removed(cfg.data.raw, report.get("input")) if raw is None and not settings_only else None
    if gone is not None and cfg.data.format != "synthetic":  # whose settings make its log: nothing is lost
        log.warning("data.raw: %s is not there (removed once prepared?): %s is compared with the settings only, "
                    "not with the raw input it was prepared from", gone, folder)
    named = raw is not None or cfg.data.raw is not None or cfg.data.split.method == "files"  # the files split's own
    if settings_only or not named or gone is not None:  # the settings alone
        return _differences(report, _resolved_data(cfg, None), report.get("input"))
    raw = _raw_input(cfg.data, raw)
    return _differences(report, _resolved_data(cfg, raw), _Inputs(cfg.data, raw).fingerprint())


def _removed(raw: Any, recorded: Any) -> str | None:
    """The first path of ``data.raw`` where every one of its paths is gone and was read when the folder was prepared
    (a file of ``recorded``, prepare.json's input, or a folder holding some); else None: a path never read (a typo,
    a day not there yet), a glob, or a raw input partly there is compared, and refused where it cannot be read."""
    paths = [raw] if isinstance(raw, (str, Path)) else list(raw or [])
    read = [str(r.get("path")) for r in recorded or [] if isinstance(r, dict)]
    for x in paths:
        text = str(x)
        if any(c in text for c in "*?[") or os.path.lexists(Path(text).expanduser()):
            return None
        where = str(Path(text).expanduser().resolve())
        if not any(r == where or r.startswith(where.rstrip(os.sep) + os.sep) for r in read):
            return None
    return str(paths[0]) if paths else None


def _differences(report: dict[str, Any], data: dict[str, Any],
                 fingerprint: list[dict[str, Any]] | None) -> list[str]:
    then, now = ({f"data.{k}": v for k, v in _flat(d).items() if not k.startswith(_NOT_OUTPUT)}
                 for d in (report.get("data") or {}, json.loads(json.dumps(data))))
    out = differences(then, now, "folder", show=_show)
    staged = sorted(n for n, kind in (report.get("numeric_transforms") or {}).items() if kind in STAGED_TRANSFORMS)
    if staged and not report.get("transforms_as_served"):  # before 2026-11-27: in SQL, rounded apart from scoring
        out.append(f"numeric transforms: {few(staged)} by an earlier autoint, whose criteo and log1p rounded some "
                   "values apart from scoring's")
    recorded = report.get("input")
    if recorded is None:
        return [*out, "raw input: not recorded (the folder was prepared by an earlier autoint)"]
    paths_then, paths_now = [f["path"] for f in recorded], [f["path"] for f in fingerprint]
    if paths_then != paths_now:
        gone = [p for p in paths_then if p not in paths_now]
        new = [p for p in paths_now if p not in paths_then]
        parts = ([f"no longer {few(gone)}"] if gone else []) + ([f"new {few(new)}"] if new else [])
        out.append(f"raw input: other files ({'; '.join(parts) or 'in another order'})")
    else:
        out += [f"raw input: {b['path']} changed since it was prepared (size or mtime)"
                for a, b in zip(recorded, fingerprint, strict=True)
                if (a["size"], a["mtime_ns"]) != (b["size"], b["mtime_ns"])]
    return out


def _flat(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict) and k in ("split",):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _show(v: Any) -> str:
    return "(not set)" if v is None else json.dumps(v, ensure_ascii=False)

