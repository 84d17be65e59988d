"""DuckDB against Polars on the job preprocessing gives an engine, on the same Criteo-like file.

Two modes, each the same job in both engines, written the way each engine's
documentation recommends (lazy / streaming, no Python loop over rows):

* ``csv``: each engine parses the raw TSV itself, twice (fit, then encode);
* ``stage``: the job ``autoint prepare`` gives its engine. The raw file is read
  once into a Parquet stage (uncompressed, no dictionaries, a ``_pos`` column;
  written by pyarrow, shared, not timed), and each engine fits and encodes from it.

The job:

1. read the rows (label, 13 integers, 26 categories);
2. train rows: those whose ``C26`` is missing or starts with a hex digit below
   ``d`` (~81 %; a rule both engines compute the same way);
3. per categorical column, count values in the train rows, keep those seen at
   least 10 times, ids by descending count then value (from 3);
4. encode every row (left join per column; OOV 1, missing 2) with the paper's
   numeric transform, keep input order, write train / other as Parquet (zstd).

Each engine runs in a fresh subprocess; wall time and peak RSS are the child's.
Polars' streaming engine is used; DuckDB with a 1 GB memory limit (spilling
beyond it), as ``autoint`` runs it.

    .venv/bin/pip install -e '.[bench]'     # Polars, for this comparison only
    python benchmarks/engines.py --rows 10000000

Results go to ``benchmarks/results/engines.json``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import criteo_like  # noqa: E402

_COMMON = """
import json, resource, sys, time
names = ["label"] + [f"I{i}" for i in range(1, 14)] + [f"C{i}" for i in range(1, 27)]
ints, cats = names[1:14], names[14:]
raw, out = sys.argv[1], sys.argv[2]
t0 = time.perf_counter()
"""

_DUCKDB_JOB = """
train = "(C26 IS NULL OR substr(C26, 1, 1) < 'd')"
for c in cats:
    con.execute(f"CREATE TEMP TABLE v_{c} AS SELECT value, (row_number() OVER (ORDER BY n DESC, value) + 2)::INTEGER "
                f"AS id FROM (SELECT {c} AS value, count(*) AS n FROM {src} WHERE {train} AND {c} IS NOT NULL "
                f"GROUP BY {c}) WHERE n >= 10")
fit_s = time.perf_counter() - t0
sel = ["label::FLOAT AS label"]
sel += [f"coalesce(CASE WHEN {c} > 2 THEN floor(ln({c}) ^ 2) ELSE {c} END, 0)::FLOAT AS {c}" for c in ints]
sel += [f"CASE WHEN s.{c} IS NULL THEN 2 ELSE coalesce(v_{c}.id, 1) END AS {c}" for c in cats]
joins = " ".join(f"LEFT JOIN v_{c} ON s.{c} = v_{c}.value" for c in cats)
rows = numbered()  # rows with their input position, _pos
for name, cond in (("train", train), ("other", f"NOT {train}")):
    con.execute(f"COPY (SELECT {', '.join(sel)} FROM {rows} s {joins} WHERE {cond} ORDER BY s._pos) "
                f"TO '{out}/{name}.parquet' (FORMAT parquet, COMPRESSION zstd)")
con.close()
print(json.dumps({"engine": "duckdb " + duckdb.__version__, "fit_s": fit_s, "wall_s": time.perf_counter() - t0,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""

_DUCKDB_OPEN = """
import duckdb
con = duckdb.connect(config={"memory_limit": "1GB", "temp_directory": out + "/spill",
                             "preserve_insertion_order": True})
"""

_DUCKDB_STAGE = _COMMON + _DUCKDB_OPEN + """
src = f"read_parquet('{raw}')"
def numbered():
    return src
""" + _DUCKDB_JOB

_DUCKDB = _COMMON + _DUCKDB_OPEN + """
types = ", ".join(f"'{n}': '{'TINYINT' if n == 'label' else 'BIGINT' if n in ints else 'VARCHAR'}'" for n in names)
src = f"read_csv('{raw}', delim='\\t', header=false, quote='', escape='', auto_detect=false, columns={{{types}}})"
def numbered():  # a CSV scan has no row numbers: number the rows once, in input order
    con.execute(f"CREATE TEMP TABLE enc AS SELECT row_number() OVER () AS _pos, * FROM {src}")
    return "enc"
""" + _DUCKDB_JOB

_POLARS_JOB = """
train = pl.col("C26").is_null() | (pl.col("C26").str.slice(0, 1) < "d")
vocabs = pl.collect_all([
    scan().filter(train, pl.col(c).is_not_null()).group_by(c).len().filter(pl.col("len") >= 10)
    .sort(["len", c], descending=[True, False]).with_row_index("id", offset=3)
    .select(pl.col(c).alias("value"), pl.col("id").cast(pl.Int32)) for c in cats], engine="streaming")
fit_s = time.perf_counter() - t0
q = scan().with_columns(train.alias("_train"))
for c, v in zip(cats, vocabs):
    q = q.join(v.lazy().rename({"value": c, "id": "_id_" + c}), on=c, how="left", maintain_order="left")
q = q.select([pl.col("_train"), pl.col("label").cast(pl.Float32)]
             + [pl.when(pl.col(c) > 2).then((pl.col(c).log() ** 2).floor()).otherwise(pl.col(c)).fill_null(0)
                .cast(pl.Float32).alias(c) for c in ints]
             + [pl.when(pl.col(c).is_null()).then(2).otherwise(pl.col("_id_" + c).fill_null(1)).cast(pl.Int32)
                .alias(c) for c in cats])
q.filter(pl.col("_train")).drop("_train").sink_parquet(out + "/train.parquet", compression="zstd")
q.filter(~pl.col("_train")).drop("_train").sink_parquet(out + "/other.parquet", compression="zstd")
print(json.dumps({"engine": "polars " + pl.__version__, "fit_s": fit_s, "wall_s": time.perf_counter() - t0,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""

_POLARS_STAGE = _COMMON + """
import polars as pl
def scan():
    return pl.scan_parquet(raw)
""" + _POLARS_JOB

_POLARS = _COMMON + """
import polars as pl
schema = {n: pl.Int8 if n == "label" else pl.Int64 if n in ints else pl.String for n in names}
def scan():
    return pl.scan_csv(raw, separator="\\t", has_header=False, new_columns=names, quote_char=None,
                       schema_overrides=schema)
""" + _POLARS_JOB


def run(code: str, raw: Path, out: Path) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run([sys.executable, "-c", code, str(raw), str(out)], capture_output=True, text=True,
                          check=False)
    if proc.returncode != 0:
        return {"error": proc.stderr.strip().splitlines()[-1][:300]}
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    import pyarrow.parquet as pq

    res["rows_written"] = sum(pq.ParquetFile(out / f).metadata.num_rows for f in ("train.parquet", "other.parquet"))
    return res


def write_stage(raw: Path, stage: Path) -> None:
    """The raw TSV as autoint stages it: Parquet, uncompressed, no dictionaries, with each row's position."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    names = criteo_like.NAMES
    types = {n: pa.int8() if n == "label" else pa.float64() if n.startswith("I") else pa.string() for n in names}
    reader = pacsv.open_csv(raw, read_options=pacsv.ReadOptions(column_names=names),
                            parse_options=pacsv.ParseOptions(delimiter="\t", quote_char=False),
                            convert_options=pacsv.ConvertOptions(column_types=types))
    pos = 0
    with pq.ParquetWriter(stage, pa.schema([("_pos", pa.int64()), *reader.schema]), compression="none",
                          use_dictionary=False) as w:
        for batch in reader:
            n = batch.num_rows
            w.write_table(pa.Table.from_batches([batch]).add_column(0, "_pos", pa.array(np.arange(pos, pos + n))))
            pos += n


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=10_000_000)
    p.add_argument("--modes", nargs="+", choices=("csv", "stage"), default=["csv", "stage"],
                   help="measure only these; the others are kept from an existing --out file")
    p.add_argument("--workdir", type=Path, default=None, help="where the log goes (kept and reused if given)")
    p.add_argument("--out", type=Path, default=HERE / "results" / "engines.json")
    args = p.parse_args()
    old = json.loads(args.out.read_text()) if args.out.is_file() else {}
    with tempfile.TemporaryDirectory() as tmp:
        work = args.workdir or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        raw = work / f"criteo_like_{args.rows}.txt"
        if not raw.exists():
            criteo_like.write(raw, args.rows)
        command = "python benchmarks/engines.py " + " ".join(sys.argv[1:])
        # Each part names the command that measured it: a part kept from an earlier run keeps that run's command.
        results = {"rows": args.rows, "file_mb": round(raw.stat().st_size / 2**20, 1), "command": command,
                   "commands": {**old.get("commands", {}), **dict.fromkeys(args.modes, command)}}
        results["runs"] = ([run(_DUCKDB, raw, Path(tmp) / "duckdb"), run(_POLARS, raw, Path(tmp) / "polars")]
                           if "csv" in args.modes else old.get("runs", []))
        if "stage" in args.modes:
            stage = Path(tmp) / "stage.parquet"
            write_stage(raw, stage)
            results["stage_runs"] = [run(_DUCKDB_STAGE, stage, Path(tmp) / "duckdb_stage"),
                                     run(_POLARS_STAGE, stage, Path(tmp) / "polars_stage")]
        else:
            results["stage_runs"] = old.get("stage_runs", [])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
