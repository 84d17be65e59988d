"""The heavy work of preprocessing, in DuckDB: staged raw rows → counts → encoded, ordered batches.

Why DuckDB (see ``benchmarks/engines.py`` and the README for the measurement
against Polars): it runs every step on all cores, caps its memory at
``data.memory_limit`` and spills to disk beyond it, and it scans Arrow data
without copying it into Python objects.

The raw rows are read once, by the readers (which own the bad-row accounting),
into a **stage**: an Arrow IPC file of the canonical raw columns plus

* ``_row``: the row's ordinal in the raw input (bad rows counted, files in order),
* ``_pos``: its position among the usable rows (what ``permutation`` permutes),
* ``_split``: its split when known while reading (``random``, ``files``).

:class:`Stage` then answers the questions preprocessing asks of the whole log
with SQL over that file: rows and positives per split, value counts per field
on the train rows, moments of numeric fields, counts per distinct time; and
streams the encoded rows back in ``_pos`` order, so output files are the same
byte for byte whatever the number of threads.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.ipc as ipc

from autoint.schema import CATEGORICAL, FIRST_VALUE, MISSING, MULTI, NUMERIC, OOV, PAD, FieldSpec

STAGE_FILE = "stage.arrow"


def quote(name: str) -> str:
    """A column name as a SQL identifier (field names come from users' files)."""
    return '"' + name.replace('"', '""') + '"'


def stage_schema(fields: tuple[FieldSpec, ...], with_label: bool = True) -> pa.Schema:
    cols = [pa.field("_row", pa.int64()), pa.field("_pos", pa.int64()), pa.field("_split", pa.int8())]
    if with_label:
        cols.append(pa.field("label", pa.int8()))
    for f in fields:
        typ = {CATEGORICAL: pa.string(), NUMERIC: pa.float64(), MULTI: pa.list_(pa.string())}[f.kind]
        cols.append(pa.field(f.name, typ))
    return pa.schema(cols)


class StageWriter:
    """Appends raw Arrow chunks to the stage file, numbering rows as they come."""

    def __init__(self, folder: Path, fields: tuple[FieldSpec, ...]) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.path = folder / STAGE_FILE
        self.schema = stage_schema(fields)
        self.rows = 0
        self._writer = ipc.new_file(str(self.path), self.schema)

    def write(self, table: pa.Table, rows: np.ndarray, split: np.ndarray) -> None:
        n = table.num_rows
        if n == 0:
            return
        cols = {"_row": pa.array(np.asarray(rows, dtype=np.int64)),
                "_pos": pa.array(np.arange(self.rows, self.rows + n, dtype=np.int64)),
                "_split": pa.array(np.asarray(split, dtype=np.int8))}
        arrays = [cols[f.name] if f.name in cols else table.column(f.name).cast(f.type) for f in self.schema]
        self._writer.write_table(pa.Table.from_arrays(arrays, schema=self.schema))
        self.rows += n

    def close(self) -> None:
        self._writer.close()


class Stage:
    """SQL over a stage file (see the module docstring); use as a context manager."""

    def __init__(self, path: Path, fields: tuple[FieldSpec, ...], memory_limit: str = "1GB",
                 threads: int | None = None) -> None:
        self.path = path
        self.fields = fields
        tmp = path.parent / "spill"
        self.con = duckdb.connect(config={
            "memory_limit": memory_limit,
            "threads": int(threads or os.cpu_count() or 1),
            "temp_directory": str(tmp),
            "preserve_insertion_order": True,
        })
        self.con.register("stage", ds.dataset(str(path), format="ipc"))
        self.split_sql = "_split"

    def __enter__(self) -> Stage:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.con.close()

    # --- the split -----------------------------------------------------------------------
    def split_by_position(self, codes: np.ndarray) -> None:
        """Rows take ``codes[_pos]`` (the permutation split), through a vectorised Arrow function."""

        def lookup(pos: pa.Array) -> pa.Array:
            return pa.array(codes[pos.to_numpy(zero_copy_only=False)], pa.int8())

        self.con.create_function("_split_at", lookup, ["BIGINT"], "TINYINT", type="arrow")
        self.split_sql = "_split_at(_pos)"

    def split_by_time(self, column: str, cutoffs: tuple[float, float]) -> None:
        c = quote(column)
        self.split_sql = (f"(CASE WHEN {c} IS NULL OR isnan({c}) THEN -1 WHEN {c} <= {cutoffs[0]!r} THEN 0 "
                          f"WHEN {c} <= {cutoffs[1]!r} THEN 1 ELSE 2 END)::TINYINT")

    # --- questions about the whole log -----------------------------------------------------
    def query(self, sql: str) -> pa.Table:
        return self.con.sql(sql).to_arrow_table()

    def split_counts(self) -> dict[int, tuple[int, int]]:
        """Split code → (rows, positives)."""
        t = self.query(f"SELECT {self.split_sql} AS s, count(*) AS n, sum(label)::BIGINT AS p FROM stage GROUP BY s")
        return {int(s): (int(n), int(p or 0)) for s, n, p in zip(*(t.column(i).to_pylist() for i in range(3)))}

    def rows_where_split(self, code: int, limit: int) -> tuple[int, list[int]]:
        """How many rows have split ``code``, and the first ``limit`` of their ordinals."""
        n = self.query(f"SELECT count(*) FROM stage WHERE {self.split_sql} = {code}").column(0)[0].as_py()
        first = self.query(f"SELECT _row FROM stage WHERE {self.split_sql} = {code} ORDER BY _row LIMIT {limit}")
        return int(n), first.column(0).to_pylist()

    def value_counts(self, field: FieldSpec) -> pa.Table:
        """``value``, ``n`` for every distinct non-null value of ``field`` in the train rows."""
        c = quote(field.name)
        if field.kind == MULTI:
            src = f"(SELECT unnest({c}) AS value FROM stage WHERE {self.split_sql} = 0)"
        else:
            src = f"(SELECT {c} AS value FROM stage WHERE {self.split_sql} = 0)"
        return self.query(f"SELECT value, count(*) AS n FROM {src} WHERE value IS NOT NULL GROUP BY value")

    def max_list_len(self, field: FieldSpec) -> int:
        t = self.query(f"SELECT max(len({quote(field.name)})) FROM stage WHERE {self.split_sql} = 0")
        return int(t.column(0)[0].as_py() or 0)

    def moments(self, field: FieldSpec) -> tuple[int, float, float]:
        """(n, mean, population variance) of the finite train values of a numeric field."""
        c = quote(field.name)
        t = self.query(f"SELECT count({c}), avg({c}), var_pop({c}) FROM stage "
                       f"WHERE {self.split_sql} = 0 AND isfinite({c})")
        n, mean, var = (t.column(i)[0].as_py() for i in range(3))
        return int(n or 0), float(mean or 0.0), float(var or 0.0)

    def time_counts(self, column: str) -> pa.Table:
        c = quote(column)
        return self.query(f"SELECT {c} AS t, count(*) AS n FROM stage WHERE {c} IS NOT NULL AND NOT isnan({c}) "
                          f"GROUP BY t")

    # --- encoding ---------------------------------------------------------------------------
    def encoded(self, encoder: Any, batch_rows: int) -> Iterator[pa.RecordBatch]:
        """Every row encoded (``_split`` first, then the encoder's columns), in ``_pos`` order."""
        con = self.con
        joins, ctes, select = [], [], ["s._split_code AS _split", "label::FLOAT AS label"]
        for i, f in enumerate(encoder.fields):
            c = quote(f.name)
            if f.kind == NUMERIC:
                select.append(f"{numeric_sql(encoder.numeric_[f.name], 's.' + c)} AS {c}")
                continue
            vocab = encoder.vocabularies_[f.name]
            ids = pa.array(np.arange(FIRST_VALUE, vocab.vocab_size_, dtype=np.int32))
            con.register(f"_v{i}", pa.table({"value": vocab._values, "id": ids}))
            if f.kind == CATEGORICAL:
                joins.append(f"LEFT JOIN _v{i} ON s.{c} = _v{i}.value")
                select.append(f"(CASE WHEN s.{c} IS NULL THEN {MISSING} ELSE coalesce(_v{i}.id, {OOV}) END)::INTEGER "
                              f"AS {c}")
            else:
                width = encoder.max_len_[f.name]
                ctes.append(
                    f"_m{i} AS (SELECT u._pos, list(coalesce(v.id, CASE WHEN u.value IS NULL THEN {MISSING} "
                    f"ELSE {OOV} END) ORDER BY u.k) AS ids FROM (SELECT _pos, unnest({c}) AS value, "
                    f"unnest(range(len({c}))) AS k FROM stage) u LEFT JOIN _v{i} v ON u.value = v.value "
                    f"GROUP BY u._pos)")
                joins.append(f"LEFT JOIN _m{i} ON s._pos = _m{i}._pos")
                select.append(f"list_resize(CASE WHEN _m{i}.ids IS NULL THEN [{MISSING}] "
                              f"ELSE _m{i}.ids[1:{width}] END, {width}, {PAD})::INTEGER[] AS {c}")
        with_ = ("WITH " + ", ".join(ctes) + " ") if ctes else ""
        source = f"(SELECT *, {self.split_sql} AS _split_code FROM stage)"
        sql = f"{with_}SELECT {', '.join(select)} FROM {source} s {' '.join(joins)} ORDER BY s._pos"
        yield from con.sql(sql).to_arrow_reader(batch_size=batch_rows)


def numeric_sql(transform: Any, col: str) -> str:
    """The SQL of a numeric transform (the same arithmetic as :meth:`NumericTransform.transform`)."""
    kind = transform.kind
    if kind == "criteo":
        expr = f"(CASE WHEN {col} > 2 THEN floor(ln({col}) ^ 2) ELSE {col} END)"
    elif kind == "log1p":
        expr = f"(sign({col}) * ln(1 + abs({col})))"
    elif kind == "standardize":
        expr = f"(({col} - {transform.mean_!r}) / {transform.std_!r})"
    else:
        expr = col
    return f"coalesce(CASE WHEN isfinite({expr}) THEN {expr} END, 0)::FLOAT"


def drain(batches: Iterator[pa.RecordBatch], sinks: dict[int, Callable[[pa.Table], None]]) -> None:
    """Route encoded batches to ``sinks`` by their ``_split`` code (rows of other codes are dropped)."""
    for batch in batches:
        split = batch.column(0).to_numpy(zero_copy_only=False)
        table = pa.Table.from_batches([batch]).drop_columns(["_split"])
        for code, sink in sinks.items():
            m = split == code
            if m.all():
                sink(table)
            elif m.any():
                sink(table.filter(pa.array(m)))
