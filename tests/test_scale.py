"""Preprocessing at scale: many files, compressed inputs, bounded splits, lookups built once."""

from __future__ import annotations

import errno
import gzip
import itertools
import json
import os
import re
import shutil
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from autoint import preprocess, splits
from autoint.config import config_from_dict
from autoint.datasets import DataError
from autoint.datasets.criteo import CriteoReader
from autoint.encoder import Encoder, Vocabulary
from autoint.errors import DiskFullError
from autoint.schema import FIRST_VALUE, OOV


def _cfg(**data):
    return config_from_dict({"data": data})


def _criteo_lines(n: int, seed: int) -> bytes:
    """``n`` headerless Criteo lines (label, 13 ints, 26 categories) from a fixed generator."""
    rng = np.random.default_rng(seed)
    lines = []
    for _ in range(n):
        ints = [str(int(x)) if x >= 0 else "" for x in rng.integers(-1, 50, 13)]
        cats = [f"{int(x):08x}" for x in rng.integers(0, 40, 26)]
        lines.append("\t".join([str(int(rng.random() < 0.3)), *ints, *cats]))
    return ("\n".join(lines) + "\n").encode()


@pytest.fixture
def days(tmp_path: Path) -> tuple[Path, bytes]:
    """Six headerless day files (gzip, zstd and plain mixed), and the same lines as one file."""
    folder = tmp_path / "days"
    folder.mkdir()
    whole = b""
    for d in range(6):
        text = _criteo_lines(150 + 10 * d, seed=d)
        whole += text
        if d % 3 == 0:
            (folder / f"day_{d}.gz").write_bytes(gzip.compress(text))
        elif d % 3 == 1:
            with pa.CompressedOutputStream(str(folder / f"day_{d}.zst"), "zstd") as f:  # Arrow's codec
                f.write(text)
        else:
            (folder / f"day_{d}").write_bytes(text)
    (tmp_path / "all.txt").write_bytes(whole)
    return folder, whole


def test_glob_of_compressed_files_equals_one_file(days: tuple[Path, bytes], tmp_path: Path) -> None:
    folder, _ = days
    cfg = _cfg(format="criteo", min_count=2)
    many = preprocess.prepare(cfg, str(folder / "day_*"), tmp_path / "many", progress=False)
    one = preprocess.prepare(cfg, tmp_path / "all.txt", tmp_path / "one", progress=False)
    # Ordinals keep counting across files, so a row lands in the same split either way.
    assert many["rows"] == one["rows"] and sum(many["rows"].values()) == sum(150 + 10 * d for d in range(6))
    assert list(many["rows_per_file"].values()) == [150 + 10 * d for d in range(6)]
    assert [Path(p).name for p in many["rows_per_file"]] == ["day_0.gz", "day_1.zst", "day_2", "day_3.gz",
                                                             "day_4.zst", "day_5"]  # natural order
    for split in ("train", "valid", "test"):
        assert pq.read_table(tmp_path / "many" / f"{split}.parquet").equals(
            pq.read_table(tmp_path / "one" / f"{split}.parquet"))


def test_folder_and_list_inputs(days: tuple[Path, bytes], tmp_path: Path) -> None:
    folder, _ = days
    cfg = _cfg(format="criteo")
    by_folder = preprocess.prepare(cfg, folder, tmp_path / "a", progress=False)
    listed = [str(folder / "day_0.gz"), str(folder / "day_1.zst")]
    by_list = preprocess.prepare(config_from_dict({"data": {"format": "criteo", "raw": listed}}), None,
                                 tmp_path / "b", progress=False)
    assert sum(by_folder["rows"].values()) == sum(150 + 10 * d for d in range(6))
    assert sum(by_list["rows"].values()) == 150 + 160
    assert by_list["data"]["raw"] == [str(Path(p).resolve()) for p in listed]


def test_a_file_named_with_glob_characters_is_itself(days: tuple[Path, bytes], tmp_path: Path) -> None:
    """'clicks[1].gz' that exists names that file, not the glob matching 'clicks1.gz' (it read that file
    instead, or found nothing); a name that exists nowhere is still a glob."""
    folder, _ = days
    odd = tmp_path / "odd"
    odd.mkdir()
    shutil.copy(folder / "day_0.gz", odd / "clicks[1].gz")
    shutil.copy(folder / "day_1.zst", odd / "clicks1.zst")
    cfg = _cfg(format="criteo")
    report = preprocess.prepare(cfg, str(odd / "clicks[1].gz"), tmp_path / "a", progress=False)
    assert sum(report["rows"].values()) == 150 and [Path(p).name for p in report["rows_per_file"]] == ["clicks[1].gz"]
    report = preprocess.prepare(cfg, str(odd / "clicks[1].zst"), tmp_path / "b", progress=False)
    assert [Path(p).name for p in report["rows_per_file"]] == ["clicks1.zst"]


def test_files_split_takes_globs_per_split(days: tuple[Path, bytes], tmp_path: Path) -> None:
    folder, _ = days
    files = {"train": ["day_0.gz", "day_1.zst", "day_2", "day_3.gz"], "valid": "day_4.zst", "test": "day_[5]"}
    report = preprocess.prepare(_cfg(format="criteo", split={"method": "files", "files": files}), folder,
                                tmp_path / "out", progress=False)
    assert report["rows"] == {"train": 150 + 160 + 170 + 180, "valid": 190, "test": 200}
    # One file as valid and test both: its rows are in each split, and counted once as the file's (it gave 2 x 190)
    files = {"train": ["day_0.gz"], "valid": "day_4.zst", "test": "day_4.zst"}
    report = preprocess.prepare(_cfg(format="criteo", split={"method": "files", "files": files}), folder,
                                tmp_path / "same", progress=False)
    assert report["rows"] == {"train": 150, "valid": 190, "test": 190}
    assert {Path(k).name: v for k, v in report["rows_per_file"].items()} == {"day_0.gz": 150, "day_4.zst": 190}


def test_files_split_names_of_files_not_found_name_the_split_and_where_they_were_read(days, tmp_path: Path) -> None:
    """With --raw a glob (not a folder) a relative name in data.split.files was "raw file not found: day_4.zst",
    naming neither the setting nor where relative names are read (a helper's hunt)."""
    folder, _ = days
    files = {"train": "day_0.gz", "valid": "day_4.zst", "test": "day_5"}
    cfg = _cfg(format="criteo", split={"method": "files", "files": files})
    with pytest.raises(DataError, match=r"data\.split\.files\.train: raw file not found: day_0\.gz \(relative names "
                                        r"are read in the raw folder only when data\.raw \(or --raw\) names a folder, "
                                        rf"and it names {re.escape(str(folder))}/day_\*"):
        preprocess.prepare(cfg, str(folder / "day_*"), tmp_path / "out", progress=False)
    files["test"] = "day_55"
    cfg = _cfg(format="criteo", split={"method": "files", "files": files})  # a config holds a copy of the dict given
    with pytest.raises(DataError, match=rf"data\.split\.files\.test: raw file not found: .*day_55 \(relative names "
                                        rf"are read in the raw folder {re.escape(str(folder))}\)"):
        preprocess.prepare(cfg, folder, tmp_path / "out", progress=False)


def test_bzip2_is_read_and_archives_are_refused_by_name(tmp_path: Path) -> None:
    """A .zip (as Kaggle ships logs) or .xz was parsed as text: a parse error about column counts and a
    traceback; .bz2 was read by the table reader only (a helper's hunt)."""
    import bz2
    import zipfile

    lines = _criteo_lines(30, seed=3)
    (tmp_path / "day.bz2").write_bytes(bz2.compress(lines))
    (tmp_path / "plain").write_bytes(lines)
    read = [pa.concat_tables([t for t, _ in CriteoReader(str(tmp_path / name)).arrow_chunks(64)])
            for name in ("day.bz2", "plain")]
    assert read[0].equals(read[1]) and read[0].num_rows == 30
    with zipfile.ZipFile(tmp_path / "day.zip", "w") as z:
        z.writestr("day.txt", lines)
    (tmp_path / "day.xz").write_bytes(b"\xfd7zXZ\x00")
    for name, kind in (("day.zip", "a zip archive"), ("day.xz", "xz-compressed")):
        with pytest.raises(DataError, match=rf"{name}: {kind}, which is not read; unpack or decompress it first"):
            preprocess.prepare(_cfg(format="criteo"), str(tmp_path / name), tmp_path / "out", progress=False)


def test_bad_rows_in_many_files_name_the_file(tmp_path: Path) -> None:
    good = _criteo_lines(20, seed=1)
    (tmp_path / "day_0").write_bytes(good)
    (tmp_path / "day_1").write_bytes(good + b"1\t2\n")  # line 21: a field count far too short
    reader = CriteoReader(str(tmp_path / "day_*"))
    rows = sum(t.num_rows for t, _ in reader.arrow_chunks(7))
    assert rows == 40 and reader.bad.examples == {"field_count": ["day_1:21"]}
    assert reader.rows_per_file == {str(tmp_path / "day_0"): 20, str(tmp_path / "day_1"): 20}


def test_inputs_that_match_nothing_are_named(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="no file matches"):
        preprocess.prepare(_cfg(format="criteo"), str(tmp_path / "day_*.gz"), tmp_path / "out", progress=False)
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="folder holds no"):
        preprocess.prepare(_cfg(format="criteo"), tmp_path / "empty", tmp_path / "out", progress=False)


def test_permutation_split_refuses_past_its_limit(days: tuple[Path, bytes], tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    folder, _ = days
    monkeypatch.setattr(splits, "MAX_PERMUTATION_ROWS", 500)
    with pytest.raises(DataError) as e:
        preprocess.prepare(_cfg(format="criteo", split={"method": "permutation"}), folder, tmp_path / "out",
                           progress=False)
    msg = str(e.value)
    assert "\n" not in msg and "1,050 rows" in msg and "'random'" in msg and "'time'" in msg and "'files'" in msg
    assert not (tmp_path / "out" / "train.parquet").exists() and not (tmp_path / "out" / ".prepare").exists()
    # random holds no per-row state: the same log goes through.
    report = preprocess.prepare(_cfg(format="criteo", split={"method": "random"}), folder, tmp_path / "ok",
                                progress=False)
    assert sum(report["rows"].values()) == 1_050


def test_vocabulary_is_stored_as_parquet_and_round_trips(days: tuple[Path, bytes], tmp_path: Path) -> None:
    folder, _ = days
    preprocess.prepare(_cfg(format="criteo", min_count=3), folder, tmp_path / "out", progress=False)
    vocab = pq.read_table(tmp_path / "out" / "vocabulary.parquet")
    assert vocab.column_names == ["field", "value", "count"]
    assert set(vocab.column("field").to_pylist()) == {f"C{i}" for i in range(1, 27)}
    assert "values" not in (tmp_path / "out" / "encoder.json").read_text()  # values live in the Parquet file
    enc = Encoder.load(tmp_path / "out")
    c1 = vocab.filter(pa.compute.equal(vocab.column("field"), "C1"))
    assert enc.vocabularies_["C1"].values_ == c1.column("value").to_pylist()
    assert min(c1.column("count").to_pylist()) >= 3
    again = Encoder.from_state(enc.to_state())  # what a checkpoint carries
    probe = pd.DataFrame({f.name: [None] for f in enc.fields})
    probe["C1"] = [c1.column("value")[0].as_py()]
    assert again.encode_rows(probe).equals(enc.encode_rows(probe))


def test_lookup_index_is_built_once_whatever_the_rows() -> None:
    values = pa.array([f"{i:07d}" for i in range(200_000)])
    vocab = Vocabulary.from_counts(values, np.arange(200_000, 0, -1))
    assert vocab.index_builds_ == 0
    for probe in (["0000000"], ["0000001", "nope", None], ["0199999"]):
        vocab.transform(probe)
    assert vocab.index_builds_ == 1
    assert vocab.transform(["0000000", "0199999", "nope"]).tolist() == [FIRST_VALUE, FIRST_VALUE + 199_999, OOV]


@pytest.mark.parametrize("values", [
    [1.0, np.nan, 3.0], [1.5, None, 2.0], [5, 7], ["a", None, "b"], pd.Series(["a", np.nan], dtype=object),
    pd.Series([1, "x"], dtype=object), [True, False], pd.Series([1, None], dtype="Int64"),
    pd.Series(["z", None], dtype="str"), [1e20, 2.0], [0.1, 1e-5], ["5", "-1.5e3", ".5", None],
    pd.Series(["5", "-1.5e3", None], dtype="str"), pd.Series(["a", "b"], dtype="category"),
    pd.Series([1.5, None], dtype="Float64"), pd.Series(["7", None], dtype=pd.ArrowDtype(pa.string())),
    ["a", "", None], pd.Series(["", "5"], dtype="str"), ["", 4.0], ["\uff11\uff12", "3"],
    pd.Series(pd.arrays.SparseArray(np.array([0.5, np.nan, 2.0]))), pd.Series([0.1, 1e18], dtype=np.float32),
])
def test_few_rows_encode_as_many_rows_do(values) -> None:
    """The per-value path for served requests gives what the vectorised path gives."""
    from autoint.datasets.base import as_category, as_numeric, column_values, small_column

    s = pd.Series(values) if not isinstance(values, pd.Series) else values
    dtype, python_values = column_values(pd.DataFrame({"x": s}), "x")
    few = small_column(python_values, dtype, "categorical")
    assert few is None or few.tolist() == as_category(s).tolist()
    num = small_column(python_values, dtype, "numeric")
    if isinstance(values, list) or dtype in ("str", "Int64", "Float64"):  # what requests carry takes the fast path
        assert few is not None or not all(isinstance(v, str) or v is None for v in python_values)
    if num is not None:
        np.testing.assert_array_equal(num, as_numeric(s, "x"))
    vocab = Vocabulary.from_counts(pa.array(["a", "5", "1", "1e+20"]), np.array([4, 3, 2, 1]))
    strings = as_category(s)
    np.testing.assert_array_equal(vocab.transform(list(strings)), vocab.transform(pa.array(strings, pa.string())))


def test_cli_prepare_takes_several_raw_inputs(days: tuple[Path, bytes], tmp_path: Path, capsys) -> None:
    from autoint.cli import main

    folder, _ = days
    config = Path(__file__).resolve().parents[1] / "configs" / "criteo.yaml"
    assert main(["prepare", str(config), "--raw", str(folder / "day_0.gz"), str(folder / "day_[12]*"),
                 "--out", str(tmp_path / "out"), "--quiet"]) == 0
    report = json.loads((tmp_path / "out" / "prepare.json").read_text())
    assert sum(report["rows"].values()) == 150 + 160 + 170 and len(report["rows_per_file"]) == 3


def test_table_csv_short_and_long_lines_are_named_by_the_parser(tmp_path: Path) -> None:
    """The CSV parser's own bad-row hook names both; a short line is no longer padded with missing values."""
    from autoint.config import DataConfig
    from autoint.datasets import make_reader

    raw = tmp_path / "log.csv"
    raw.write_bytes(b"y,site,price\n1,a,1.5\n0,b\n1,c,2,extra\n0,d,3\n")
    reader = make_reader(DataConfig(format="table", columns={"label": "y", "categorical": ["site"],
                                                             "numeric": ["price"]}), raw)
    df = pd.concat(list(reader.chunks(1)))
    assert df["site"].tolist() == ["a", "d"] and df.index.tolist() == [0, 3]  # ordinals count the skipped lines
    assert reader.bad.examples == {"field_count": [3, 4]} and reader.rows_seen == 4


def test_in_order_puts_runs_back_in_order() -> None:
    """The engine streams runs of consecutive rows out of order, a run sometimes cut across fetches;
    InOrder hands them out in order, in batches of exactly the asked size, holding only early runs."""
    from autoint.engine import InOrder

    rng = np.random.default_rng(0)
    for n, batch_rows in [(1_000, 128), (1_000, 1), (37, 128), (0, 16)]:
        cuts = np.sort(rng.choice(np.arange(1, max(n, 2)), min(60, max(n - 1, 0)), replace=False))
        runs = [np.arange(lo, hi) for lo, hi in zip(np.r_[0, cuts], np.r_[cuts, n], strict=True) if hi > lo]
        stream = np.concatenate([runs[i] for i in rng.permutation(len(runs))]) if runs else np.arange(0)
        # Fetches cut the stream anywhere (through runs too), some empty.
        edges = np.sort(np.r_[0, rng.integers(0, n + 1, 25), n])
        in_order, out = InOrder(batch_rows), []
        for lo, hi in itertools.pairwise(edges):
            pos = stream[lo:hi]
            out += in_order.add(pa.record_batch({"_pos": pos, "x": pos * 10}))
        out += in_order.finish(n)
        assert [t.num_rows for t in out] == [batch_rows] * (n // batch_rows) + ([n % batch_rows] if n % batch_rows
                                                                                 else [])
        whole = pa.concat_tables(out) if out else None
        if n:
            assert whole.column("_pos").to_pylist() == list(range(n))
            assert whole.column("x").to_pylist() == [10 * i for i in range(n)]
        assert in_order.held_rows == 0 and not in_order.early
        assert (in_order.most_held > 0) == (n > 0)  # the shuffled runs did arrive early
    held = InOrder(4)
    assert held.add(pa.record_batch({"_pos": np.array([5, 6, 7])})) == [] and held.held_rows == 3
    assert [t.column(0).to_pylist() for t in held.add(pa.record_batch({"_pos": np.arange(5)}))] == \
        [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert held.most_held == 3 and held.held_rows == 0
    with pytest.raises(RuntimeError, match="twice"):
        InOrder(8).add(pa.record_batch({"_pos": np.array([0, 1, 1])}))
    lost = InOrder(8)
    lost.add(pa.record_batch({"_pos": np.array([0, 1, 3])}))
    with pytest.raises(RuntimeError, match="out of sequence"):
        lost.finish(4)


def _expected_splits(raw: Path, folder: Path, cfg) -> dict[str, pa.Table]:
    """What prepare should write, computed without the engine: the raw lines encoded by the served-row
    path of the fitted encoder, cut by the permutation split."""
    from autoint.datasets.criteo import CAT_NAMES, INT_NAMES

    _, enc = preprocess.load_processed(folder)
    df = pd.read_csv(raw, sep="\t", header=None, names=["label", *INT_NAMES, *CAT_NAMES],
                     dtype={c: str for c in CAT_NAMES})
    encoded = enc.encode_rows(df)
    codes = splits.permutation_split(len(df), cfg.data.split.fractions, cfg.data.split.seed)
    return {name: encoded.filter(pa.array(codes == k)) for k, name in enumerate(("train", "valid", "test"))}


def test_encoding_is_one_query_and_independent_of_arrival_order(days: tuple[Path, bytes], tmp_path: Path,
                                                                monkeypatch) -> None:
    """Without multi-valued fields the whole log is one query (vocabularies hashed once). Rows written are
    those the served-row encoder gives, whatever order the engine returns them in: reversed fetches are
    put back in order, and past MAX_HELD_ROWS the rest is encoded in sorted ranges, to the same bytes."""
    import autoint.engine

    cfg = _cfg(format="criteo", min_count=2, chunk_size=128, split={"method": "permutation"})
    stages = []
    enter = autoint.engine.Stage.__enter__
    monkeypatch.setattr(autoint.engine.Stage, "__enter__", lambda self: stages.append(self) or enter(self))
    monkeypatch.setattr(autoint.engine, "ENCODE_RANGE_ROWS", 256)  # ranges would be many, were they used
    monkeypatch.setattr(autoint.engine, "STAGE_GROUP_ROWS", 50)
    monkeypatch.setattr(autoint.engine, "FETCH_ROWS", 30)
    monkeypatch.setattr(autoint.engine, "MAX_HELD_ROWS", 10**9)  # whatever the engine's order
    preprocess.prepare(cfg, tmp_path / "all.txt", tmp_path / "one", progress=False)
    assert stages[-1].ranges_encoded == 1 and stages[-1].sorted_from is None
    assert pq.ParquetFile(tmp_path / "one" / "train.parquet").metadata.row_group(0).num_rows == 128
    for name, table in _expected_splits(tmp_path / "all.txt", tmp_path / "one", cfg).items():
        written = pq.read_table(tmp_path / "one" / f"{name}.parquet")
        assert written.num_rows == table.num_rows > 0
        for col in table.column_names:
            assert written.column(col).to_pylist() == table.column(col).to_pylist(), (name, col)

    plain = autoint.engine.Stage._batches

    def reversed_fetches(self, sql):  # the engine's worst order: the last rows first
        batches = list(plain(self, sql))
        return iter(batches if "ORDER BY" in sql else batches[::-1])

    monkeypatch.setattr(autoint.engine.Stage, "_batches", reversed_fetches)
    preprocess.prepare(cfg, tmp_path / "all.txt", tmp_path / "reversed", progress=False)
    assert stages[-1].sorted_from is None
    monkeypatch.setattr(autoint.engine, "MAX_HELD_ROWS", 100)
    preprocess.prepare(cfg, tmp_path / "all.txt", tmp_path / "sorted", progress=False)
    assert stages[-1].sorted_from == 0 and stages[-1].ranges_encoded == 1 + -(-1050 // 256)
    for folder in ("reversed", "sorted"):
        for split in ("train", "valid", "test"):
            assert (tmp_path / "one" / f"{split}.parquet").read_bytes() == \
                (tmp_path / folder / f"{split}.parquet").read_bytes(), (folder, split)


def test_permutation_split_counts_fields_concurrently_to_the_same_bytes(days: tuple[Path, bytes], tmp_path: Path,
                                                                         monkeypatch) -> None:
    """The permutation's codes reach the stage by a positional join, which the engine runs on one thread, so
    the fields are counted on one connection per thread; one thread writes the same folder."""
    import autoint.engine

    cfg = _cfg(format="criteo", min_count=2, split={"method": "permutation"})
    on_cursor = []
    count = autoint.engine.Stage.value_counts

    def spy(self, field, min_count=1, bucket=False, con=None):
        on_cursor.append(con is not None)
        return count(self, field, min_count, bucket, con=con)

    monkeypatch.setattr(autoint.engine.Stage, "value_counts", spy)
    monkeypatch.setattr(autoint.engine.os, "cpu_count", lambda: 2)
    preprocess.prepare(cfg, tmp_path / "all.txt", tmp_path / "two", progress=False)
    assert on_cursor == [True] * 26
    on_cursor.clear()
    monkeypatch.setattr(autoint.engine.os, "cpu_count", lambda: 1)
    preprocess.prepare(cfg, tmp_path / "all.txt", tmp_path / "one", progress=False)
    assert on_cursor == [False] * 26
    for name in ("train.parquet", "valid.parquet", "test.parquet", "vocabulary.parquet", "encoder.json"):
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "two" / name).read_bytes(), name


def test_running_out_of_engine_memory_or_disk_names_the_cause(days: tuple[Path, bytes], tmp_path: Path,
                                                                          monkeypatch) -> None:
    """An engine out-of-memory error raised while the encoded rows stream out reaches Python as Arrow's
    OSError, not DuckDB's exception (seen at 10M rows under a 384MB cap); it is the same error for the user,
    naming data.memory_limit. A folder prepared before is left as it was, whatever fails (the engine, or writing
    the vocabularies after encoding): its report still describes its files (a half-written split under the old
    prepare.json would be read as complete). A full disk (Python's or Arrow's ENOSPC, or the engine's IO error)
    is one error naming the folder."""
    import autoint.engine
    from autoint.engine import EngineMemoryError

    plain = autoint.engine.Stage._batches

    def out_of_memory(self, sql):
        yield next(plain(self, sql))
        raise OSError("Out of Memory Error: failed to allocate data of size 256.0 KiB (365.9 MiB/366.2 MiB used)"
                      "\n\nPossible solutions:\n* Reducing the number of threads (SET threads=X)")

    cfg = _cfg(format="criteo", min_count=2, chunk_size=128, memory_limit="300MB")
    preprocess.prepare(cfg, tmp_path / "all.txt", tmp_path / "out", progress=False)
    before = {p.name: p.read_bytes() for p in (tmp_path / "out").iterdir()}
    monkeypatch.setattr(autoint.engine.Stage, "_batches", out_of_memory)
    with pytest.raises(EngineMemoryError, match=r"data.memory_limit = '300MB'.*\(Out of Memory Error: failed "
                                                r"to allocate data of size 256.0 KiB \(365.9 MiB/366.2 MiB used\)\)"):
        preprocess.prepare(cfg, tmp_path / "all.txt", tmp_path / "out", progress=False, overwrite=True)
    assert {p.name: p.read_bytes() for p in (tmp_path / "out").iterdir()} == before
    with pytest.raises(EngineMemoryError):
        preprocess.prepare(cfg, tmp_path / "all.txt", tmp_path / "new", progress=False)
    assert not (tmp_path / "new").exists()  # the folder this prepare made is not left behind, empty

    full = rf"{re.escape(str(tmp_path / 'out'))}: the disk filled while preparing \(.*No space left on device"

    def disk_full_encoding(self, sql):  # not the engine's memory: the disk, named as such
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(autoint.engine.Stage, "_batches", disk_full_encoding)
    with pytest.raises(DiskFullError, match=full):
        preprocess.prepare(cfg, tmp_path / "all.txt", tmp_path / "out", progress=False, overwrite=True)
    assert {p.name: p.read_bytes() for p in (tmp_path / "out").iterdir()} == before

    def engine_disk_full(self, *args):  # DuckDB's own IO error (spilling) carries the words, not an errno
        raise duckdb.IOException('IO Error: Could not write file "spill.tmp": No space left on device')

    monkeypatch.setattr(autoint.engine.Stage, "_batches", plain)
    monkeypatch.setattr(autoint.engine.Stage, "value_counts_of", engine_disk_full)
    with pytest.raises(DiskFullError, match=full):
        preprocess.prepare(cfg, tmp_path / "all.txt", tmp_path / "out", progress=False, overwrite=True)
    assert {p.name: p.read_bytes() for p in (tmp_path / "out").iterdir()} == before
    monkeypatch.undo()

    def spill_disk_full(self, sql):  # DuckDB says "out of memory" when its spill folder's disk is full
        yield next(plain(self, sql))
        raise duckdb.OutOfMemoryException(
            "Out of Memory Error: failed to offload data block of size 256.0 KiB (300.0 MiB/300.0 MiB used). This "
            "limit was set by the 'max_temp_directory_size' setting.")

    monkeypatch.setattr(autoint.engine.Stage, "_batches", spill_disk_full)
    with pytest.raises(DiskFullError, match=r"the disk filled while preparing \(Out of Memory Error: failed to "
                                            r"offload"):
        preprocess.prepare(cfg, tmp_path / "all.txt", tmp_path / "out", progress=False, overwrite=True)

    def disk_full(self, folder):  # after encoding: the vocabularies do not fit
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(autoint.engine.Stage, "_batches", plain)
    monkeypatch.setattr(preprocess.Encoder, "save", disk_full)
    with pytest.raises(DiskFullError, match=full):
        preprocess.prepare(cfg, tmp_path / "all.txt", tmp_path / "out", progress=False, overwrite=True)
    assert {p.name: p.read_bytes() for p in (tmp_path / "out").iterdir()} == before


def test_blocks_read_and_encoded_are_capped_by_stage_row_groups_not_the_output_row_groups(
        days: tuple[Path, bytes], tmp_path: Path, monkeypatch) -> None:
    """Reading and encoding go in blocks of at most one stage row group; the split files keep row groups of
    data.chunk_size rows, to the same bytes as blocks of data.chunk_size."""
    import autoint.engine

    cfg = _cfg(format="criteo", min_count=2, chunk_size=128)
    preprocess.prepare(cfg, tmp_path / "all.txt", tmp_path / "whole", progress=False)
    blocks, encoded = [], []
    plain = autoint.engine.StageWriter.write
    monkeypatch.setattr(autoint.engine.StageWriter, "write",
                        lambda self, table, *a: blocks.append(table.num_rows) or plain(self, table, *a))
    drain = preprocess.drain
    monkeypatch.setattr(preprocess, "drain", lambda tables, sinks: drain(
        (encoded.append(t.num_rows) or t for t in tables), sinks))
    monkeypatch.setattr(preprocess, "STAGE_GROUP_ROWS", 50)
    monkeypatch.setattr(autoint.engine, "STAGE_GROUP_ROWS", 50)
    preprocess.prepare(cfg, tmp_path / "all.txt", tmp_path / "blocks", progress=False)
    assert max(blocks) == 50 and sum(blocks) == 1050
    assert max(encoded) == 50 and sum(encoded) == 1050
    groups = pq.ParquetFile(tmp_path / "blocks" / "train.parquet").metadata
    full = groups.num_row_groups - 1  # the last one shorter
    assert [groups.row_group(i).num_rows for i in range(full)] == [128] * full
    for name in ("train.parquet", "valid.parquet", "test.parquet", "vocabulary.parquet"):
        assert (tmp_path / "whole" / name).read_bytes() == (tmp_path / "blocks" / name).read_bytes(), name


def _stage_encodings(monkeypatch) -> dict:
    """Filled, when prepare opens its stage, with each stage column's (Parquet leaf path's) encodings."""
    import autoint.engine

    seen = {}
    enter = autoint.engine.Stage.__enter__

    def look(self):
        meta = pq.ParquetFile(self.path).metadata
        seen.update({meta.schema.column(i).path: meta.row_group(0).column(i).encodings
                     for i in range(meta.num_columns)})
        return enter(self)

    monkeypatch.setattr(autoint.engine.Stage, "__enter__", look)
    return seen


def test_stage_holds_categorical_values_as_dictionaries_and_bucketed_fields_as_buckets_only(
        days: tuple[Path, bytes], tmp_path: Path, monkeypatch) -> None:
    """The stage's string columns are dictionary-encoded and a bucketed field's numbers are not staged (its
    buckets are); the example rows still carry the raw numbers, read as the rows went by."""
    seen = _stage_encodings(monkeypatch)
    cfg = _cfg(format="criteo", min_count=2, numeric_transform="bucket")
    preprocess.prepare(cfg, tmp_path / "all.txt", tmp_path / "out", progress=False)
    assert "I1" not in seen and "_bucket.I1" in seen
    assert "RLE_DICTIONARY" in seen["C1"] and "RLE_DICTIONARY" not in seen["_bucket.I1"]
    example = pq.read_table(tmp_path / "out" / "example.parquet")
    first = _criteo_lines(1, seed=0).decode().rstrip("\n").split("\t")
    assert example.column("I1")[0].as_py() == (float(first[1]) if first[1] else None)
    assert example.column("C26")[0].as_py() == first[26 + 13]


def test_stage_holds_multi_valued_values_as_dictionaries(tmp_path: Path, monkeypatch) -> None:
    seen = _stage_encodings(monkeypatch)
    raw = tmp_path / "c.csv"
    pd.DataFrame({"clicked": [1, 0] * 20, "tags": ["x|y", "z"] * 20}).to_csv(raw, index=False)
    cfg = _cfg(format="table", raw=str(raw), columns={"label": "clicked", "multi": ["tags"]})
    preprocess.prepare(cfg, None, tmp_path / "out", progress=False)
    assert "RLE_DICTIONARY" in seen["tags.list.element"]


def test_standardized_fields_are_the_same_bytes_on_every_run(tmp_path: Path) -> None:
    """The moments are summed in one order (threads would add their parts in a varying one)."""
    rng = np.random.default_rng(0)
    raw = tmp_path / "c.csv"
    pd.DataFrame({"clicked": rng.integers(0, 2, 4000), "price": rng.lognormal(3, 2, 4000),
                  "cnt": rng.standard_normal(4000) * 1e6 + 0.1}).to_csv(raw, index=False)
    cfg = _cfg(format="table", raw=str(raw), chunk_size=16, numeric_transform="standardize",
               columns={"label": "clicked", "numeric": ["price", "cnt"]})
    runs = []
    for i in range(3):
        preprocess.prepare(cfg, None, tmp_path / f"o{i}", progress=False)
        runs.append({p.name: p.read_bytes() for p in (tmp_path / f"o{i}").iterdir()})
    assert runs[0] == runs[1] == runs[2]


# ----------------------------------------------------------------------------- many files: a helper's hunt
def test_a_file_named_twice_or_in_two_splits_is_refused(days: tuple[Path, bytes], tmp_path: Path, caplog) -> None:
    """A folder and a file in it, or overlapping globs, read a file twice (its rows counted twice); a file in
    two splits of a files split put test rows into train; both were silent."""
    folder, _ = days
    cfg = _cfg(format="criteo")
    for raw in ([str(folder / "day_0.gz"), str(folder / "day_*")], [str(folder), str(folder / "day_2")]):
        with pytest.raises(DataError, match=r"raw input: .* is named twice \(by .*\), so it would be read twice"):
            preprocess.prepare(cfg, raw, tmp_path / "dup", progress=False)
    files = {"train": "day_*", "valid": "day_4.zst", "test": "day_5"}
    with pytest.raises(DataError, match=r"data\.split\.files: .*day_4\.zst is in both train and valid, so the rows "
                                        r"trained on would be scored as unseen ones"):
        preprocess.prepare(_cfg(format="criteo", split={"method": "files", "files": files}), folder,
                           tmp_path / "both", progress=False)
    os.link(folder / "day_0.gz", tmp_path / "hard_day_0.gz")  # a hard link to a train file is that file (it was
    files = {"train": ["day_0.gz", "day_1.zst"], "valid": str(tmp_path / "hard_day_0.gz"), "test": "day_5"}  # read
    with pytest.raises(DataError, match=r"hard_day_0\.gz is in both train and valid"):  # as unseen valid rows)
        preprocess.prepare(_cfg(format="criteo", split={"method": "files", "files": files}), folder,
                           tmp_path / "hard", progress=False)
    files = {"train": ["day_0.gz", "day_1.zst", "day_2", "day_3.gz"], "valid": "day_[45]*", "test": "day_5"}
    report = preprocess.prepare(_cfg(format="criteo", split={"method": "files", "files": files}), folder,
                                tmp_path / "shared", progress=False)  # one file as valid and test: said, allowed
    assert report["rows"]["test"] == 200 and "day_5 is both valid and test" in caplog.text
    caplog.clear()
    files = {"train": ["day_0.gz", "day_1.zst"], "valid": "day_4.zst", "test": "day_5"}
    preprocess.prepare(_cfg(format="criteo", split={"method": "files", "files": files}), folder, tmp_path / "some",
                       progress=False)
    assert "data.split.files: 2 file(s) of" in caplog.text and "day_2" in caplog.text and "day_3.gz" in caplog.text


def test_markers_subfolders_empty_days_and_columns_of_other_files(tmp_path: Path, caplog) -> None:
    """Spark's _SUCCESS is no day; a folder of folders says how to read them; a day with a header only is 0 in
    rows_per_file, with a warning (it was left out); a column only some files hold is reported as ignored."""
    import pandas as pd

    folder = tmp_path / "days"
    folder.mkdir()
    rng = np.random.default_rng(0)
    for d in range(3):
        frame = pd.DataFrame({"y": rng.integers(0, 2, 40), "c": [f"v{i % 7}" for i in range(40)]})
        if d == 2:
            frame = frame.assign(extra=1)
        frame.iloc[: 0 if d == 1 else 40].to_csv(folder / f"day_{d}.csv.gz", index=False)
    (folder / "_SUCCESS").write_bytes(b"")
    cfg = _cfg(format="table", columns={"label": "y", "categorical": ["c"]})
    report = preprocess.prepare(cfg, folder, tmp_path / "out", progress=False)
    assert {Path(k).name: v for k, v in report["rows_per_file"].items()} == {
        "day_0.csv.gz": 40, "day_1.csv.gz": 0, "day_2.csv.gz": 40}
    assert "1 raw file(s) gave no usable rows" in caplog.text and report["ignored_columns"] == ["extra"]
    (tmp_path / "hive" / "date=1").mkdir(parents=True)
    with pytest.raises(DataError, match=r"its subfolders are not read: name their files with a glob"):
        preprocess.prepare(cfg, tmp_path / "hive", tmp_path / "h", progress=False)


def test_a_gzip_cut_short_is_one_line_in_prepare_and_predict(tmp_path: Path) -> None:
    """A cut-short .gz ended in pyarrow's or gzip's traceback (OSError / EOFError); its header, read, was
    blamed for a cut further on."""
    import pandas as pd

    from autoint.predict import _read_rows

    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"y": rng.integers(0, 2, 100_000), "c": rng.integers(0, 10**6, 100_000).astype(str)})
    whole = tmp_path / "whole.csv.gz"
    frame.to_csv(whole, index=False)
    cut = tmp_path / "cut" / "day.csv.gz"
    cut.parent.mkdir()
    cut.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    cfg = _cfg(format="table", columns={"label": "y", "categorical": ["c"]})
    with pytest.raises(DataError, match=r"day\.csv\.gz: damaged or cut short: reading stopped (within its first block "
                                        r"of rows|somewhere after its data row \d+) \(Truncated compressed stream\)"):
        preprocess.prepare(cfg, cut, tmp_path / "out", progress=False)
    with pytest.raises(DataError, match=r"day\.csv\.gz: damaged or cut short: reading stopped near row \d+"):
        for _ in _read_rows(cut, 100_000):
            pass


def test_a_stale_folder_advises_the_raw_input_named_now(days: tuple[Path, bytes], tmp_path: Path) -> None:
    """train --raw NEW --data OLD advised `autoint prepare CONFIG --out OLD --overwrite`, which prepares from
    data.raw again, not from NEW."""
    from autoint.preprocess import StaleDataError
    from autoint.train import ensure_processed

    folder, _ = days
    cfg = _cfg(format="criteo")
    preprocess.prepare(cfg, str(folder / "day_0.gz"), tmp_path / "p", progress=False)
    new = [str(folder / "day_1.zst"), str(folder / "day 2")]
    (folder / "day 2").write_bytes((folder / "day_2").read_bytes())
    with pytest.raises(StaleDataError, match=rf"autoint prepare CONFIG --raw {re.escape(new[0])} '{re.escape(new[1])}'"
                                             rf" --out {re.escape(str(tmp_path / 'p'))} --overwrite"):
        ensure_processed(cfg, tmp_path / "p", new, progress=False)


def test_ctrl_c_inside_the_engine_is_an_interrupt_whatever_the_engine_makes_of_it(tmp_path: Path) -> None:
    """DuckDB turns a Ctrl-C that reaches it mid-query into its own error ("Query interrupted"), and drops one
    that arrives while it reads a registered Arrow table (the encoding's vocabularies), so prepare ended in a
    traceback or, worse, ran on to the end. Inside a Stage, either way comes out as KeyboardInterrupt (the CLI's
    'interrupted', status 130), and Ctrl-C's handler is put back after it."""
    import os
    import signal
    import threading
    import time

    from autoint.engine import Stage

    path = tmp_path / "stage.parquet"
    pq.write_table(pa.table({"a": np.arange(10, dtype=np.int64)}), path)
    before = signal.getsignal(signal.SIGINT)
    timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT))
    with pytest.raises(KeyboardInterrupt), Stage(path, ()) as stage:  # a query far longer than the test
        timer.start()
        stage.con.sql("SELECT sum(x.range * y.range) FROM range(100000000) x, range(100000) y").fetchall()
    timer.join()
    assert signal.getsignal(signal.SIGINT) is before

    with pytest.raises(KeyboardInterrupt), Stage(path, ()) as stage:
        try:  # the interrupt dropped, as the engine drops it inside its Arrow reads
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)
        except KeyboardInterrupt:
            pass
        assert stage.con.sql("SELECT count(*) FROM stage").fetchall() == [(10,)]  # then the block ends
    assert signal.getsignal(signal.SIGINT) is before

    # SIGTERM under stop_on_sigterm (prepare's): the query is interrupted and the block ends in Terminated
    # (before: the process vanished, leaving the staged log in the output's work folder)
    from autoint.errors import Terminated, stop_on_sigterm

    timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGTERM))
    with pytest.raises(Terminated), stop_on_sigterm(), Stage(path, ()) as stage:
        timer.start()
        stage.con.sql("SELECT sum(x.range * y.range) FROM range(100000000) x, range(100000) y").fetchall()
    timer.join()
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a script's `prepare &`: an ignored Ctrl-C stays ignored
    try:
        with Stage(path, ()) as stage:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.2)
            assert stage.con.sql("SELECT count(*) FROM stage").fetchall() == [(10,)]
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, before)


def test_links_empty_days_and_foreign_files_in_a_raw_folder(days: tuple[Path, bytes], tmp_path: Path,
                                                            caplog) -> None:
    """A broken symbolic link was skipped and its rows lost; a hard link read one file twice; an empty day stopped
    the run while an empty .gz gave 0 rows; a Parquet file among Criteo's days was parsed as text, a bad row per
    line; one file as valid and test was called a compressed twin of itself (a helper's hunt)."""
    import os

    folder, _ = days
    cfg = _cfg(format="criteo", split={"method": "random"})
    (folder / "day_9").symlink_to(tmp_path / "gone")
    for raw in (folder, str(folder / "day_*")):
        with pytest.raises(DataError, match=r"day_9 is a symbolic link to .*gone, which does not exist"):
            preprocess.prepare(cfg, raw, tmp_path / "o", progress=False)
    (folder / "day_9").unlink()
    os.link(folder / "day_2", folder / "day_9")
    with pytest.raises(DataError, match=r"day_9 \(the same file as .*day_2\) is named twice"):
        preprocess.prepare(cfg, folder, tmp_path / "o", progress=False)
    (folder / "day_9").unlink()
    (folder / "day_9").write_bytes(b"")
    report = preprocess.prepare(cfg, folder, tmp_path / "o", progress=False)
    assert report["rows_per_file"][str(folder / "day_9")] == 0 and "raw file is empty" in caplog.text
    with pytest.raises(DataError, match=r"raw file is empty"):
        preprocess.prepare(cfg, folder / "day_9", tmp_path / "o2", progress=False)
    pq.write_table(pa.table({"a": [1, 2]}), folder / "part-0000")
    with pytest.raises(DataError, match=r"part-0000: a Parquet file by its first bytes, not criteo's text lines"):
        preprocess.prepare(cfg, folder, tmp_path / "o3", progress=False)
    (folder / "part-0000").unlink()
    caplog.clear()
    files = {"train": ["day_0.gz", "day_1.zst", "day_2"], "valid": "day_5", "test": "day_5"}
    preprocess.prepare(_cfg(format="criteo", split={"method": "files", "files": files}), folder, tmp_path / "o4",
                       progress=False)
    assert "day_5 is both valid and test" in caplog.text and "compressed" not in caplog.text


def test_a_headerless_file_read_with_header_true_is_said(tmp_path: Path, caplog) -> None:
    """With header: true and names, a file of the set that has no header lost its first row without a word."""
    folder = tmp_path / "tbl"
    folder.mkdir()
    (folder / "a.csv").write_text("clicked,site,price\n1,x,2.5\n0,y,3\n")
    (folder / "b.csv").write_text("0,z,1.5\n1,x,4\n")  # no header
    cfg = _cfg(format="table", split={"method": "random"},
               columns={"label": "clicked", "categorical": ["site"], "numeric": ["price"],
                        "names": ["clicked", "site", "price"], "header": True})
    preprocess.prepare(cfg, folder, tmp_path / "o", progress=False)
    assert "b.csv: its first line holds numbers in every numeric column (price)" in caplog.text
    assert "a.csv" not in caplog.text


def test_predict_names_a_folder_a_glob_and_a_small_cut_short_file(days: tuple[Path, bytes], tmp_path: Path) -> None:
    """predict said 'input file not found' of a folder that is there and of a glob (prepare takes both), and a
    compressed file cut short within its first MiB ended in Arrow's OSError traceback."""
    from autoint.datasets.text import first_line
    from autoint.predict import _read_rows

    folder, _ = days
    with pytest.raises(DataError, match=r"is a folder: predict scores one file"):
        next(_read_rows(folder, 100))
    with pytest.raises(DataError, match=r"a glob is not expanded"):
        next(_read_rows(folder / "day_*", 100))
    cut = tmp_path / "cut.gz"
    cut.write_bytes(gzip.compress(_criteo_lines(50, seed=1))[:200])
    with pytest.raises(DataError, match=r"cut\.gz: damaged or cut short"):
        first_line(cut)


def test_bad_rows_of_files_alike_in_name_are_told_apart(tmp_path: Path) -> None:
    """Bad-row lines named a file by its name alone: two/a/day_0 and two/b/day_0 both read 'day_0:250'."""
    from autoint.datasets.text import file_labels

    for sub, bad_line in (("a", 5), ("b", 9)):
        (tmp_path / sub).mkdir()
        lines = _criteo_lines(20, seed=ord(sub)).decode().splitlines()
        lines[bad_line - 1] = "7" + lines[bad_line - 1][1:]  # a label that is not 0 or 1
        (tmp_path / sub / "day_0").write_text("\n".join(lines) + "\n")
    report = preprocess.prepare(_cfg(format="criteo", split={"method": "random"}, max_bad_fraction=0.5),
                                [str(tmp_path / "a"), str(tmp_path / "b")], tmp_path / "o", progress=False)
    assert report["bad_rows"]["first_lines"]["bad_label"] == ["a/day_0:5", "b/day_0:9"]
    assert file_labels([tmp_path / "x" / "d", tmp_path / "y" / "e"]) == {tmp_path / "x" / "d": "d",
                                                                         tmp_path / "y" / "e": "e"}
