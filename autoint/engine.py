"""The heavy work of preprocessing, in DuckDB: staged raw rows → counts → encoded tables, in input order.

Why DuckDB (see ``benchmarks/engines.py`` and the README for the measurement
against Polars): it runs every step on all cores, caps its memory at
``data.memory_limit`` and spills to disk beyond it, and it scans Arrow data
without copying it into Python objects.

The raw rows are read once, by the readers (which own the bad-row accounting),
into a **stage**: a Parquet file of the canonical raw columns plus

* ``_row``: the row's ordinal in the raw input (bad rows counted, files in order),
* ``_pos``: its position among the usable rows (what ``permutation`` permutes),
* ``_split``: its split when known while reading (``random``, ``files``),
* ``_time``: the parsed time column, when the reader reads one that is no field;
* ``_bucket.NAME``: a bucketed numeric field's buckets, in place of its numbers (kept only for a time split);
* ``_transformed.NAME``: a numeric field's ``criteo`` or ``log1p`` transform before its clip, likewise, computed
  by the code that transforms a served row (:meth:`NumericTransform.arithmetic`), so both round alike.

Categorical and multi-valued values are dictionary-encoded (see the README for what that saved on Criteo-like
logs).

:class:`Stage` then answers the questions preprocessing asks of the whole log
with SQL over that file: rows and positives per split, value counts per field
on the train rows, moments of numeric fields, counts per distinct time; and
streams the encoded rows back in ``_pos`` order, so output files are the same
byte for byte whatever the number of threads.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import signal
import threading
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from autoint.datasets.times import TIME
from autoint.encoder import FLOAT32_RANGE, STAGED_TRANSFORMS, bucket_ids
from autoint.errors import InputError, Terminated, disk_full, message_head, raise_terminated
from autoint.schema import CATEGORICAL, FIRST_VALUE, MISSING, MULTI, NUMERIC, OOV, PAD, FieldSpec

STAGE_FILE = "stage.parquet"
# Rows encoded per query when a multi-valued field's lists are regrouped by row inside the query.
ENCODE_RANGE_ROWS = 1_000_000
# Rows per row group of the stage. The engine reads a row group per thread, and rows a thread finishes
# ahead of the others are held until their turn (see InOrder): typically a row group or two in all.
STAGE_GROUP_ROWS = 65_536
# Past this many rows held out of order (None: 2 × threads + 4 row groups of the stage), as when a join
# spills to disk and returns its rows partition by partition, the rest is encoded in sorted ranges.
MAX_HELD_ROWS: int | None = None
# The largest dictionary of a stage column chunk: past it, the chunk's other values are written as plain
# strings. Below Arrow's 1 MiB default, the columns with millions of rare values fall back early, which held
# the engine's memory lower when encoding (its dictionaries pay off for the columns with few values).
STAGE_DICTIONARY_BYTES = 128 * 1024
# Rows fetched from the engine at a time: small, so runs held out of order pin little memory.
FETCH_ROWS = 32_768
_RANGE = "\x00range\x00"


def quote(name: str) -> str:
    """A column name as a SQL identifier (field names come from users' files)."""
    return '"' + name.replace('"', '""') + '"'


def bucket_column(name: str) -> str:
    """The stage column holding a bucketed numeric field's buckets (its numbers are staged only for a time split)."""
    return f"_bucket.{name}"


def transformed_column(name: str) -> str:
    """The stage column holding a numeric field's transformed values (``criteo``, ``log1p``), before the clip."""
    return f"_transformed.{name}"


def raw_types(fields: tuple[FieldSpec, ...]) -> dict[str, pa.DataType]:
    """Each field's raw values as staged (and as the example rows hold them)."""
    return {f.name: {CATEGORICAL: pa.string(), NUMERIC: pa.float64(), MULTI: pa.list_(pa.string())}[f.kind]
            for f in fields}


def stage_schema(fields: tuple[FieldSpec, ...], with_label: bool = True, with_time: bool = False,
                 buckets: tuple[str, ...] = (), keep: tuple[str, ...] = (),
                 transformed: tuple[str, ...] = ()) -> pa.Schema:
    """The stage's columns; a bucketed or ``transformed`` field's numbers are not staged (its buckets or its
    transformed values are) unless it is in ``keep``."""
    instead = set(buckets) | set(transformed)
    cols = [pa.field("_row", pa.int64()), pa.field("_pos", pa.int64()), pa.field("_split", pa.int8())]
    if with_label:
        cols.append(pa.field("label", pa.int8()))
    types = raw_types(fields)
    cols.extend(pa.field(f.name, types[f.name]) for f in fields if f.name not in instead or f.name in keep)
    if with_time:
        cols.append(pa.field(TIME, pa.float64()))
    cols.extend(pa.field(bucket_column(name), pa.int32()) for name in buckets)
    cols.extend(pa.field(transformed_column(name), pa.float64()) for name in transformed)
    return pa.schema(cols)


class StageWriter:
    """Appends raw Arrow chunks to the stage file, numbering rows as they come.

    The stage is uncompressed Parquet, dictionaries only for the string values, categorical and multi-valued
    (cheap to write, and DuckDB scans it on every core); a background thread writes each chunk
    while the reader parses the next. ``buckets``: the numeric fields staged as their buckets
    (``data.numeric_transform: bucket``), ``transforms``: those staged as their transformed values (name →
    :class:`NumericTransform`), ``keep``: those of them staged with their numbers too.
    """

    def __init__(self, folder: Path, fields: tuple[FieldSpec, ...], with_time: bool = False,
                 buckets: tuple[str, ...] = (), keep: tuple[str, ...] = (),
                 transforms: dict[str, Any] | None = None) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.path = folder / STAGE_FILE
        self.buckets = tuple(buckets)
        self.transforms = dict(transforms or {})
        self.schema = stage_schema(fields, with_time=with_time, buckets=self.buckets, keep=keep,
                                   transformed=tuple(self.transforms))
        self.rows = 0
        strings = [f.name if f.kind == CATEGORICAL else f"{f.name}.list.element"  # Parquet's leaf of a list
                   for f in fields if f.kind != NUMERIC]
        self._writer = pq.ParquetWriter(self.path, self.schema, compression="none", use_dictionary=strings,
                                        dictionary_pagesize_limit=STAGE_DICTIONARY_BYTES,
                                        write_statistics=["_pos", "_row", "_split"])
        self._pool = ThreadPoolExecutor(max_workers=1)
        self._pending: Future | None = None

    def write(self, table: pa.Table, rows: np.ndarray, split: np.ndarray) -> None:
        n = table.num_rows
        if n == 0:
            return
        cols = {"_row": pa.array(np.asarray(rows, dtype=np.int64)),
                "_pos": pa.array(np.arange(self.rows, self.rows + n, dtype=np.int64)),
                "_split": pa.array(np.asarray(split, dtype=np.int8))}
        for name in self.buckets:  # computed here, by the code that encodes a served row, so both agree
            ids, ok = bucket_ids(table.column(name))
            cols[bucket_column(name)] = pa.array(ids, mask=~ok)
        for name, transform in self.transforms.items():  # likewise
            cols[transformed_column(name)] = pa.array(transform.arithmetic(table.column(name)))
        arrays = [cols[f.name] if f.name in cols else table.column(f.name).cast(f.type) for f in self.schema]
        self._wait()
        self._pending = self._pool.submit(self._writer.write_table, pa.Table.from_arrays(arrays, schema=self.schema),
                                          row_group_size=STAGE_GROUP_ROWS)
        self.rows += n

    def _wait(self) -> None:
        if self._pending is not None:
            self._pending.result()  # re-raises a failed write here
            self._pending = None

    def close(self) -> None:
        try:
            self._wait()
        finally:
            self._pool.shutdown()
            self._writer.close()


class EngineMemoryError(InputError, RuntimeError):
    """The engine needed more than ``data.memory_limit``; the message says which setting to raise."""


def _out_of_memory(exc: BaseException | None) -> bool:
    """The engine ran out of ``data.memory_limit``: raised by a query as DuckDB's own exception, or, when
    it happens while a streamed result is read through Arrow, as the ``OSError`` Arrow turns it into."""
    if disk_full(exc):  # "failed to offload": the disk of the spill folder is full, not the memory
        return False
    if isinstance(exc, duckdb.OutOfMemoryException):
        return True
    return isinstance(exc, OSError) and str(exc).startswith("Out of Memory Error")


def _doubled(limit: str) -> str:
    """Twice a memory limit ('64MB' -> '128MB'), what an out-of-memory error suggests trying next; at least the
    default, 512MB (1KB suggested 2KB, which cannot work either)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(([KMGT])(i?)B)\s*", limit, re.IGNORECASE)
    if not m:
        return "4GB"
    twice = float(m.group(1)) * 2
    in_bytes = twice * (1024 if m.group(4) else 1000) ** ("KMGT".index(m.group(3).upper()) + 1)
    return f"{twice:g}{m.group(2)}" if in_bytes >= 512e6 else "512MB"


class Stage:
    """SQL over a stage file (see the module docstring); use as a context manager.

    An engine out-of-memory error inside the ``with`` block comes out as
    :class:`EngineMemoryError`, naming ``data.memory_limit``. Ctrl-C inside it comes out as
    :class:`KeyboardInterrupt`, whatever the engine was doing: DuckDB turns an interrupt that reaches
    it mid-query into its own error ("Query interrupted"), and drops one that arrives while it reads
    a registered Arrow table, so the block's SIGINT handler also interrupts every open connection
    and the block ends in :class:`KeyboardInterrupt` once it has been hit.
    """

    def __init__(self, path: Path, fields: tuple[FieldSpec, ...], memory_limit: str = "512MB",
                 threads: int | None = None) -> None:
        self.path = path
        self.fields = fields
        self.memory_limit = memory_limit
        tmp = path.parent / "spill"
        self.threads = int(threads or os.cpu_count() or 1)
        self.con = duckdb.connect(config={
            "memory_limit": memory_limit,
            "threads": self.threads,
            "temp_directory": str(tmp),
            "preserve_insertion_order": True,
        })
        self.con.execute(f"CREATE VIEW stage AS SELECT * FROM read_parquet('{_sql_string(path)}')")
        self.split_sql = "_split"
        self._codes: np.ndarray | None = None
        self.ranges_encoded = 0  # queries :meth:`encoded` has run
        self.sorted_from: int | None = None  # the position from which :meth:`encoded` fell back to sorted ranges
        self._connections = [self.con]  # what a Ctrl-C interrupts (the counting threads' cursors join it)
        self.interrupted: BaseException | None = None  # the signal's exception, once one hit
        self.memory_advice = ""  # what else an out-of-memory error should name (a setting the caller knows of)
        self._handlers: dict[int, Any] = {}  # the handlers this block replaced

    def __enter__(self) -> Stage:
        # Only over Python's own Ctrl-C handler (and SIGTERM's, where stop_on_sigterm set it): an ignored SIGINT (a
        # script's `prepare &`) stays ignored, and a caller's own handler, or one set outside Python, stays theirs.
        if threading.current_thread() is threading.main_thread():
            for signum, ours in ((signal.SIGINT, signal.default_int_handler), (signal.SIGTERM, raise_terminated)):
                if signal.getsignal(signum) is ours:
                    self._handlers[signum] = signal.signal(signum, self._on_signal)
        return self

    def _on_signal(self, signum: int, frame: Any) -> None:
        if signum == signal.SIGTERM:  # a second one while the block cleans up is ignored (__exit__ restores)
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        self.interrupted = self._stop(signum)
        for con in list(self._connections):
            with contextlib.suppress(Exception):  # closed already
                con.interrupt()
        raise self.interrupted

    @staticmethod
    def _stop(signum: int) -> BaseException:
        return KeyboardInterrupt() if signum == signal.SIGINT else Terminated("terminated (SIGTERM)")

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        for signum, handler in self._handlers.items():
            signal.signal(signum, handler)
        self._handlers.clear()
        self.close()
        if self.interrupted is not None and not isinstance(exc, type(self.interrupted)):
            raise self.interrupted from None  # the engine's own error for it, or none where it dropped it
        if _out_of_memory(exc):
            raise EngineMemoryError(
                f"the preprocessing engine needed more memory than data.memory_limit = {self.memory_limit!r} "
                f"allows ({message_head(exc)}); raise data.memory_limit (e.g. --set data.memory_limit="
                f"{_doubled(self.memory_limit)}){self.memory_advice}"
            ) from None

    def close(self) -> None:
        self.con.close()

    # --- the split -----------------------------------------------------------------------
    def split_by_position(self, codes: np.ndarray) -> None:
        """Rows take ``codes[_pos]`` (the permutation split): the codes, in stage order, joined by position."""
        self._codes = np.asarray(codes, dtype=np.int8)
        self._view_by_position(self.con, "CREATE OR REPLACE VIEW")

    def _view_by_position(self, con: duckdb.DuckDBPyConnection, create: str) -> None:
        """On ``con``: the codes (registered without a copy) and the ``stage`` view that joins them by position."""
        con.register("_codes", pa.table({"_split": pa.array(self._codes)}))
        con.execute(f"{create} stage AS SELECT s.* EXCLUDE (_split), c._split "
                    f"FROM read_parquet('{_sql_string(self.path)}') s POSITIONAL JOIN _codes c")

    def split_by_time(self, column: str, cutoffs: tuple[float, float]) -> None:
        c = quote(column)
        self.split_sql = (f"(CASE WHEN {c} IS NULL OR NOT isfinite({c}) THEN -1 WHEN {c} <= {cutoffs[0]!r} THEN 0 "
                          f"WHEN {c} <= {cutoffs[1]!r} THEN 1 ELSE 2 END)::TINYINT")

    # --- questions about the whole log -----------------------------------------------------
    def query(self, sql: str, con: duckdb.DuckDBPyConnection | None = None) -> pa.Table:
        return (self.con if con is None else con).sql(sql).to_arrow_table()

    def split_counts(self) -> dict[int, tuple[int, int]]:
        """Split code → (rows, positives)."""
        # GROUP BY position: an alias (s) may also be a field's name, which the engine would group by instead.
        t = self.query(f"SELECT {self.split_sql} AS s, count(*) AS n, sum(label)::BIGINT AS p FROM stage GROUP BY 1")
        return {int(s): (int(n), int(p or 0)) for s, n, p in zip(*(t.column(i).to_pylist() for i in range(3)))}

    def rows_where_split(self, code: int, limit: int) -> tuple[int, list[int]]:
        """How many rows have split ``code``, and the first ``limit`` of their ordinals."""
        n = self.query(f"SELECT count(*) FROM stage WHERE {self.split_sql} = {code}").column(0)[0].as_py()
        first = self.query(f"SELECT _row FROM stage WHERE {self.split_sql} = {code} ORDER BY _row LIMIT {limit}")
        return int(n), first.column(0).to_pylist()

    def value_counts(self, field: FieldSpec, min_count: int = 1, bucket: bool = False,
                     con: duckdb.DuckDBPyConnection | None = None) -> tuple[pa.Table, int]:
        """Values of ``field`` seen at least ``min_count`` times in the train rows, in id order (``value``, ``n``),
        and how many distinct values the train rows hold; ``bucket``: of a numeric column's buckets.

        Only the kept values leave the engine: a column with millions of rare values costs no Python memory.
        ``con``: the connection to count on (default the stage's own).
        """
        con = self.con if con is None else con
        c = quote(bucket_column(field.name) if bucket else field.name)  # buckets counted as integers
        if field.kind == MULTI:
            src = f"(SELECT unnest({c}) AS value FROM stage WHERE {self.split_sql} = 0)"
        else:
            src = f"(SELECT {c} AS value FROM stage WHERE {self.split_sql} = 0)"
        con.execute(f"CREATE OR REPLACE TEMP TABLE _counts AS SELECT value, count(*) AS n FROM {src} "
                    f"WHERE value IS NOT NULL GROUP BY value")
        distinct = self.query("SELECT count(*) FROM _counts", con).column(0)[0].as_py()
        value = "value::VARCHAR AS value" if bucket else "value"
        kept = self.query(f"SELECT {value}, n FROM _counts WHERE n >= {int(min_count)} ORDER BY n DESC, value", con)
        con.execute("DROP TABLE _counts")
        return kept, int(distinct)

    def value_counts_of(self, fields: list[FieldSpec], min_count: int,
                        bucketed: set[str] | frozenset[str]) -> list[tuple[pa.Table, int]]:
        """:meth:`value_counts` of each field, in order. With the permutation split the engine reads the
        split's codes by a positional join, which it runs on one thread; the fields are then counted
        concurrently, on one connection per thread (each with the codes and the view of the stage)."""
        workers = min(self.threads, len(fields)) if self._codes is not None else 1
        if workers < 2:
            return [self.value_counts(f, min_count, f.name in bucketed) for f in fields]
        cursors = [self.con.cursor() for _ in range(workers)]
        self._connections += cursors
        try:
            for cur in cursors:
                self._view_by_position(cur, "CREATE TEMP VIEW")

            def count(w: int) -> list[tuple[int, tuple[pa.Table, int]]]:
                return [(i, self.value_counts(f, min_count, f.name in bucketed, con=cursors[w]))
                        for i, f in enumerate(fields) if i % workers == w]

            with ThreadPoolExecutor(max_workers=workers) as pool:
                done = dict(pair for part in pool.map(count, range(workers)) for pair in part)
        finally:
            for cur in cursors:
                cur.close()
                self._connections.remove(cur)
        return [done[i] for i in range(len(fields))]

    def list_lengths(self, field: FieldSpec) -> tuple[int, int]:
        """The longest list of a multi-valued field in the train rows, and the 99th percentile of their lengths."""
        c = quote(field.name)
        t = self.query(f"SELECT max(len({c})), quantile_disc(len({c}), 0.99) FROM stage WHERE {self.split_sql} = 0")
        return int(t.column(0)[0].as_py() or 0), int(t.column(1)[0].as_py() or 0)

    def moments(self, field: FieldSpec) -> tuple[int, float, float]:
        """(n, mean, population standard deviation) of the finite train values of a numeric field.

        The values are divided by the power of two at or below their largest magnitude first, and the results
        multiplied back: exact, and no square overflows (values past ~1e154 made the variance inf).
        On one thread: threads add their partial sums in an order that varies from run to run, and with it
        the last bits of the mean, so the same log gave other standardized values on every run."""
        c = quote(field.name)
        where = f"WHERE {self.split_sql} = 0 AND isfinite({c})"
        t = self.query(f"SELECT count({c}), max(abs({c})) FROM stage {where}")  # the same on any thread count
        n, largest = (t.column(i)[0].as_py() for i in range(2))
        if not n or not largest:
            return int(n or 0), 0.0, 0.0
        scale = math.ldexp(1.0, math.frexp(largest)[1] - 1)  # values scaled below 2 (2 ** 1024 overflows)
        self.con.execute("SET threads = 1")
        try:
            t = self.query(f"SELECT avg({c} / {scale!r}), stddev_pop({c} / {scale!r}) FROM stage {where}")
        finally:
            self.con.execute(f"SET threads = {self.threads}")
        mean, std = (t.column(i)[0].as_py() for i in range(2))
        return int(n), float(mean) * scale, float(std or 0.0) * scale

    def transformed_range(self, field: FieldSpec, transform: Any) -> tuple[float | None, float | None]:
        """The smallest and largest finite value of a numeric field's train values through ``transform``
        (fitted first): what :meth:`NumericTransform.fit_range` takes."""
        e = _transformed(transform, field.name)
        t = self.query(f"SELECT min({e}), max({e}) FROM stage WHERE {self.split_sql} = 0 AND isfinite({e})")
        low, high = (t.column(i)[0].as_py() for i in range(2))
        return low, high

    def time_counts(self, column: str) -> pa.Table:
        c = quote(column)
        return self.query(f"SELECT {c} AS t, count(*) AS n FROM stage WHERE isfinite({c}) "
                          f"GROUP BY 1")  # by position: a field may be named t; ±inf is no time, as NaN

    # --- encoding ---------------------------------------------------------------------------
    def encoded(self, encoder: Any, batch_rows: int, range_rows: int | None = None) -> Iterator[pa.Table]:
        """Every row encoded (``_split`` first, then the encoder's columns), in ``_pos`` order, in tables
        of exactly ``batch_rows`` rows (the last one shorter).

        The engine joins rows to the vocabularies on every core and streams them back in runs of
        consecutive positions, the runs out of order; :class:`InOrder` puts them back in order, holding
        only the runs that arrived early (typically a row group or two of the stage), so the log is
        never sorted. Should more than :data:`MAX_HELD_ROWS` be held (a join that spills to disk returns
        its rows partition by partition), the held rows are dropped and the rest of the log is encoded in
        ranges that the engine sorts, within ``data.memory_limit``, as :attr:`sorted_from` records.
        A log without multi-valued fields is encoded in one query, each vocabulary's hash table built
        once; with one, in a query per ``range_rows`` (default :data:`ENCODE_RANGE_ROWS`) positions, since
        its lists are regrouped by row inside the query. The stage's ``_pos`` statistics let each range
        read only its row groups.
        """
        con = self.con
        # The join order as written: the stage probes every vocabulary's hash table, so rows stream out in
        # (nearly) the order they were read. Flipped, a large log's rows would arrive in hash order.
        con.execute("SET disabled_optimizers = 'join_order,build_side_probe_side'")
        try:
            yield from self._encoded(encoder, batch_rows, range_rows)
        finally:
            with contextlib.suppress(duckdb.ConnectionException):  # closed already, if the caller gave up
                con.execute("RESET disabled_optimizers")

    def _encoded(self, encoder: Any, batch_rows: int, range_rows: int | None) -> Iterator[pa.Table]:
        con = self.con
        by_position = self._codes is not None  # the permutation's codes are looked up by position below
        source = f"read_parquet('{_sql_string(self.path)}')"
        select = ["s._pos AS _pos"] + ([] if by_position else [f"({self.split_sql}) AS _split"])
        select.append("label::FLOAT AS label")
        joins, ctes = [], []
        for i, f in enumerate(encoder.fields):
            c = quote(f.name)
            if f.kind == NUMERIC:
                select.append(f"{numeric_sql(encoder.numeric_[f.name], f.name, 's.')} AS {c}")
                continue
            vocab = encoder.vocabularies_[f.name]
            ids = pa.array(np.arange(FIRST_VALUE, vocab.vocab_size_, dtype=np.int32))
            bucketed = f.name in encoder.bucketed  # joined as integers: no string per row
            values = pc.cast(vocab._values, pa.int32()) if bucketed else vocab._values
            con.register(f"_v{i}", pa.table({"_v_value": values, "_v_id": ids}))
            if f.kind == CATEGORICAL:
                value = f"s.{quote(bucket_column(f.name))}" if bucketed else f"s.{c}"
                joins.append(f"LEFT JOIN _v{i} ON {value} = _v{i}._v_value")
                select.append(f"(CASE WHEN {value} IS NULL THEN {MISSING} "
                              f"ELSE coalesce(_v{i}._v_id, {OOV}) END)::INTEGER AS {c}")
            else:
                width = encoder.max_len_[f.name]
                ctes.append(
                    f"_m{i} AS (SELECT u._m_pos, list(coalesce(v._v_id, CASE WHEN u._m_value IS NULL "
                    f"THEN {MISSING} ELSE {OOV} END) ORDER BY u._m_k) AS _m_ids FROM (SELECT _pos AS _m_pos, "
                    f"unnest({c}) AS _m_value, unnest(range(len({c}))) AS _m_k FROM {source} "
                    f"WHERE {_RANGE}) u "
                    f"LEFT JOIN _v{i} v ON u._m_value = v._v_value GROUP BY u._m_pos)")
                joins.append(f"LEFT JOIN _m{i} ON s._pos = _m{i}._m_pos")
                select.append(f"list_resize(CASE WHEN _m{i}._m_ids IS NULL THEN [{MISSING}] "
                              f"ELSE _m{i}._m_ids[1:{width}] END, {width}, {PAD})::INTEGER[] AS {c}")
        with_ = ("WITH " + ", ".join(ctes) + " ") if ctes else ""
        # The range goes in at a placeholder no field name can hold (str.format would trip on braces in names).
        parts = f"{with_}SELECT {', '.join(select)} FROM {source} s {' '.join(joins)} WHERE {_RANGE}".split(_RANGE)
        n = pq.ParquetFile(self.path).metadata.num_rows
        step = max(1, (range_rows or ENCODE_RANGE_ROWS) // batch_rows) * batch_rows
        cap = MAX_HELD_ROWS if MAX_HELD_ROWS is not None else (2 * self.threads + 4) * STAGE_GROUP_ROWS
        in_order = InOrder(batch_rows)
        lo, ordered = 0, False
        while lo < n:
            hi = min(n, lo + step) if ctes or ordered else n
            sql = f"_pos BETWEEN {lo} AND {hi - 1}".join(parts) + (" ORDER BY s._pos" if ordered else "")
            self.ranges_encoded += 1
            overflow = False
            for batch in self._batches(sql):
                for table in in_order.add(batch):
                    yield self._with_split(table, by_position)
                if not ordered and in_order.held_rows > cap:
                    overflow = True
                    break
            if overflow:  # sorted ranges from the first position not yet in order
                in_order.drop_early()
                lo, ordered = in_order.next, True
                self.sorted_from = lo
            else:
                lo = hi
        for table in in_order.finish(n):
            yield self._with_split(table, by_position)

    def _batches(self, sql: str) -> Iterator[pa.RecordBatch]:
        return iter(self.con.sql(sql).to_arrow_reader(batch_size=FETCH_ROWS))

    def _with_split(self, table: pa.Table, by_position: bool) -> pa.Table:
        """``_pos`` → ``_split``: the permutation's code at each position, or the split the query computed."""
        if by_position:
            return table.set_column(0, "_split", pa.array(self._codes[table.column(0).to_numpy()]))
        return table.drop_columns(["_pos"])


class InOrder:
    """Puts rows that arrive as runs of consecutive positions (column 0), in any order, back in order.

    :meth:`add` takes a batch and returns the tables now ready: exactly ``batch_rows`` rows each, the
    positions 0, 1, 2, ... with no gap. Runs that arrive ahead of the next position are held until it
    comes (zero-copy slices of their batches). :meth:`finish` returns the rest and checks that every
    position up to ``n`` came exactly once.
    """

    def __init__(self, batch_rows: int) -> None:
        self.batch_rows = batch_rows
        self.next = 0  # the next position to hand out
        self.early: dict[int, pa.RecordBatch] = {}  # runs that arrived ahead, by first position
        self.held_rows = 0
        self.most_held = 0  # the most rows ever held early (what reordering cost in memory)
        self._ready: deque[pa.RecordBatch] = deque()  # runs in order, not yet handed out
        self._ready_rows = 0

    def add(self, batch: pa.RecordBatch) -> list[pa.Table]:
        pos = batch.column(0).to_numpy()
        cuts = np.flatnonzero(np.diff(pos) != 1) + 1
        for lo, hi in zip(np.r_[0, cuts], np.r_[cuts, len(pos)], strict=True):
            if hi > lo:
                self._run(int(pos[lo]), batch.slice(lo, hi - lo))
        self.most_held = max(self.most_held, self.held_rows)
        out = []
        while self._ready_rows >= self.batch_rows:
            out.append(self._take(self.batch_rows))
        return out

    def drop_early(self) -> None:
        """Forget the runs held early (they will come again, in order)."""
        self.early.clear()
        self.held_rows = 0

    def finish(self, n: int) -> list[pa.Table]:
        if self.early or self.next != n:  # the engine lost or repeated rows: a bug
            raise RuntimeError(f"the engine returned positions up to {self.next} of {n}, "
                               f"{self.held_rows} rows out of sequence")
        out = []
        while self._ready_rows:
            out.append(self._take(min(self.batch_rows, self._ready_rows)))
        return out

    def _run(self, first: int, run: pa.RecordBatch) -> None:
        if first < self.next or first in self.early:  # a bug in the engine or here
            raise RuntimeError(f"the engine returned position {first} twice")
        if first != self.next:
            self.early[first] = run
            self.held_rows += run.num_rows
            return
        while run is not None:
            self._ready.append(run)
            self._ready_rows += run.num_rows
            self.next += run.num_rows
            run = self.early.pop(self.next, None)
            if run is not None:
                self.held_rows -= run.num_rows

    def _take(self, rows: int) -> pa.Table:
        head, got = [], 0
        while got < rows:
            run = self._ready.popleft()
            if got + run.num_rows > rows:
                self._ready.appendleft(run.slice(rows - got))
                run = run.slice(0, rows - got)
            head.append(run)
            got += run.num_rows
        self._ready_rows -= rows
        return pa.Table.from_batches(head).combine_chunks()


def _sql_string(path: Path) -> str:
    return str(path).replace("'", "''")


def numeric_sql(transform: Any, name: str, table: str = "") -> str:
    """The SQL of field ``name``'s numeric transform (what :meth:`NumericTransform.transform` gives), its
    stage columns read from ``table`` (an alias and a dot, or nothing)."""
    expr = _transformed(transform, name, table)
    # Clipped when the raw value is finite (missing, NaN and infinities stay 0; a finite value whose transform
    # overflows is clipped too): into the train range, or float32's without one. A staged transform is finite
    # exactly where its raw value is.
    low, high = transform.range_ or FLOAT32_RANGE
    value = f"least(greatest({expr}, {float(low)!r}), {float(high)!r})"
    finite = expr if transform.kind in STAGED_TRANSFORMS else table + quote(name)
    return f"coalesce(CASE WHEN isfinite({finite}) THEN {value} END, 0)::FLOAT"


def _transformed(transform: Any, name: str, table: str = "") -> str:
    """The transform's arithmetic in SQL, before the clip and the fill of missing values: the staged column of a
    ``criteo`` or ``log1p`` transform (numpy's, see :meth:`NumericTransform.arithmetic`), else on the raw one."""
    if transform.kind in STAGED_TRANSFORMS:
        return table + quote(transformed_column(name))
    col = table + quote(name)
    if transform.kind == "standardize":
        return f"(({col} - {transform.mean_!r}) / {transform.std_!r})"
    return col


def drain(tables: Iterator[pa.Table], sinks: dict[int, Callable[[pa.Table], None]]) -> None:
    """Route encoded tables to ``sinks`` by their ``_split`` code (rows of other codes are dropped)."""
    for table in tables:
        split = table.column(0).to_numpy()
        table = table.drop_columns(["_split"])
        for code, sink in sinks.items():
            m = split == code
            if m.all():
                sink(table)
            elif m.any():
                sink(table.filter(pa.array(m)))
