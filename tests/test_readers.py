"""Raw readers on the real shared files and on small logs the project has no code for."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from autoint.config import DataConfig
from autoint.datasets import DataError, make_reader, reader_fields
from autoint.datasets.criteo import CriteoReader
from autoint.datasets.frappe import FRAPPE_NAMES, FrappeReader
from autoint.datasets.movielens import MovieLensReader
from autoint.datasets.table import TableReader
from autoint.schema import CATEGORICAL, MULTI, NUMERIC

FIXTURES = Path(__file__).parent / "fixtures"


def read_all(reader, chunk_size: int = 4096) -> pd.DataFrame:
    return pd.concat(list(reader.chunks(chunk_size)))


def assert_canonical(df: pd.DataFrame, reader) -> None:
    assert list(df.columns) == ["label", *(f.name for f in reader.fields)]
    assert df["label"].dtype == np.int8 and set(df["label"].unique()) <= {0, 1}
    for f in reader.fields:
        col = df[f.name]
        if f.kind == NUMERIC:
            assert col.dtype == np.float64, f.name
        else:
            assert col.dtype == object, f.name
            sample = col.head(200).tolist()
            if f.kind == CATEGORICAL:
                assert all(x is None or isinstance(x, str) for x in sample), f.name
            else:
                assert all(isinstance(x, list) and all(isinstance(t, str) for t in x) for x in sample), f.name


# --------------------------------------------------------------------------- criteo
def test_criteo_head(criteo_head: Path) -> None:
    reader = CriteoReader(criteo_head)
    df = read_all(reader, 3000)
    assert len(df) == 10_000 and int(df["label"].sum()) == 2_182
    assert len(reader.fields) == 39
    assert [f.name for f in reader.fields[:2]] == ["I1", "I2"] and reader.fields[13].name == "C1"
    assert_canonical(df, reader)
    assert reader.rows_seen == 10_000 and reader.bad.total == 0
    # First line of the file: "0 1 1 5 0 1382 4 15 2 181 1 2 <empty> 2 68fd1e64 ..."
    first = df.iloc[0]
    assert first["I5"] == 1382.0 and np.isnan(first["I12"]) and first["C1"] == "68fd1e64" and first["C22"] is None
    assert df.index[0] == 0 and df.index[-1] == 9_999
    # Chunking does not change the rows.
    pd.testing.assert_frame_equal(df, read_all(CriteoReader(criteo_head), 10_000))


def test_criteo_gzip(criteo_head: Path, tmp_path: Path) -> None:
    head = b"".join(criteo_head.read_bytes().splitlines(keepends=True)[:300])
    gz = tmp_path / "day_0.gz"
    gz.write_bytes(gzip.compress(head))
    plain = tmp_path / "day_0"
    plain.write_bytes(head)
    pd.testing.assert_frame_equal(read_all(CriteoReader(gz)), read_all(CriteoReader(plain)))


# --------------------------------------------------------------------------- movielens
def test_movielens_100k(movielens_100k: Path) -> None:
    reader = MovieLensReader(movielens_100k)
    df = read_all(reader, 30_000)
    assert len(df) == 72_855
    assert df["label"].mean() == pytest.approx(0.76, abs=0.01)
    assert reader.bad.total == 0 and reader.bad.dropped == {"rating_3": 27_145} and reader.rows_seen == 100_000
    assert_canonical(df, reader)
    kinds = {f.name: f.kind for f in reader.fields}
    assert kinds["genres"] == MULTI and kinds["timestamp"] == NUMERIC and "user_id" not in kinds
    # u.data line 1: user 196 rates Kolya (1996), a comedy, 3 → dropped; line 3: user 22, movie 377, 1.
    row = df.loc[2]
    assert row["label"] == 0 and row["gender"] == "M" and row["occupation"] == "writer"
    assert row["genres"] == ["Children's", "Comedy"] and row["release_year"] == "1994"
    assert 0 not in df.index
    assert df["genres"].map(len).max() == 6


def test_a_movielens_folder_under_home_is_found_and_a_missing_one_is_named_missing(movielens_100k: Path,
                                                                                   tmp_path: Path, monkeypatch) -> None:
    """'~/ml-100k' was not expanded, and a folder that does not exist was called the wrong folder."""
    (tmp_path / "ml-100k").symlink_to(movielens_100k)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert MovieLensReader("~/ml-100k").variant() == "100k"
    with pytest.raises(DataError, match=r"nowhere: not found \(format 'movielens' reads the data set's folder\)"):
        MovieLensReader(tmp_path / "nowhere").variant()


def test_movielens_ids_option(movielens_100k: Path) -> None:
    names = [f.name for f in MovieLensReader(movielens_100k, include_ids=True).fields]
    assert names[:2] == ["user_id", "movie_id"]


def test_movielens_1m_layout() -> None:
    reader = MovieLensReader(FIXTURES / "movielens_1m_tiny", include_ids=True)
    df = read_all(reader, 3)
    assert reader.rows_seen == 8 and reader.bad.dropped == {"rating_3": 1} and len(df) == 7
    folder = FIXTURES / "movielens_1m_tiny"
    assert reader.files() == [folder / "ratings.dat", folder / "users.dat", folder / "movies.dat"]
    assert reader.rows_per_file == {str(folder / "ratings.dat"): 7}  # the rows kept, side tables not counted
    assert df["label"].tolist() == [1, 1, 0, 0, 1, 1, 0]
    by_movie = df.drop_duplicates("movie_id").set_index("movie_id")
    assert by_movie.loc["1", "genres"] == ["Animation", "Children's", "Comedy"]
    assert by_movie.loc["3", "release_year"] == "1999"  # "Café Society (1999)", latin-1
    assert by_movie.loc["4", "release_year"] is None  # no year in the title
    assert by_movie.loc["9", "genres"] == [] and by_movie.loc["9", "release_year"] is None  # unknown movie
    assert df.iloc[0]["gender"] == "F" and df.iloc[0]["age"] == "1"


# --------------------------------------------------------------------------- frappe
def test_frappe_folder(frappe_dir: Path) -> None:
    reader = FrappeReader(frappe_dir)
    df = read_all(reader, 20_000)
    assert len(df) == 57_722 + 28_860 and reader.bad.total == 0
    assert [f.name for f in reader.fields] == list(FRAPPE_NAMES)
    assert_canonical(df, reader)
    assert df.index.is_unique
    # Files are read in sorted order: frappe.test.libfm first; its line 1 is "-1 204:1 4798:1 ...".
    assert df.iloc[0]["label"] == 0 and df.iloc[0]["user"] == "204" and df.iloc[0]["item"] == "4798"
    assert df["label"].mean() == pytest.approx(1 / 3, abs=0.01)


def test_frappe_single_file(frappe_dir: Path) -> None:
    assert len(read_all(FrappeReader(frappe_dir / "frappe.test.libfm"))) == 28_860


def test_a_libfm_label_of_plus_one_is_a_click(tmp_path: Path) -> None:
    """libFM writers print +1 as often as 1: it was a bad_label row."""
    tokens = " ".join(f"{10 * i}:1" for i in range(10))
    (tmp_path / "f.libfm").write_text(f"+1 {tokens}\n1 {tokens}\n-1 {tokens}\n0 {tokens}\n")
    reader = FrappeReader(tmp_path / "f.libfm")
    assert read_all(reader)["label"].tolist() == [1, 1, 0, 0] and reader.bad.total == 0


# --------------------------------------------------------------------------- table
def _clicks_csv(path: Path) -> None:
    path.write_text(
        "session,site,device,price,age,tags,clicked,note\n"
        "s1,news,ios,3.5,31,sport|tech,yes,a\n"
        "s2,shop,android,,25,,no,b\n"
        's3,news,"web, desktop",10,40,tech,1,c\n'
        "s4,,ios,0.5,,music|sport|tech,0,d\n"
    )


CLICKS = {
    "label": {"name": "clicked", "positive": ["yes", 1], "negative": ["no", 0]},
    "categorical": ["site", "device"],
    "numeric": {"price": "log1p", "age": "none"},
    "multi": {"tags": "|"},
    "drop": ["session"],
}


def test_table_csv(tmp_path: Path) -> None:
    raw = tmp_path / "clicks.csv"
    _clicks_csv(raw)
    reader = make_reader(DataConfig(format="table", columns=CLICKS), raw)
    df = read_all(reader, 3)
    assert_canonical(df, reader)
    assert [f.name for f in reader.fields] == ["site", "device", "price", "age", "tags"]
    assert df["label"].tolist() == [1, 0, 1, 0]
    assert df["device"].tolist() == ["ios", "android", "web, desktop", "ios"]
    assert df["site"].tolist()[3] is None and np.isnan(df["price"].iloc[1])
    assert df["tags"].tolist() == [["sport", "tech"], [], ["tech"], ["music", "sport", "tech"]]
    assert reader.ignored_columns == ["note"] and reader.field_transform("price") == "log1p"
    assert reader.bad.total == 0


def test_table_tsv_and_simple_label(tmp_path: Path) -> None:
    raw = tmp_path / "log.tsv"
    raw.write_text("y\tcity\tn\n1\tParis\t2\n0\tRome\t\n")
    reader = make_reader(DataConfig(format="table", columns={"label": "y", "categorical": ["city"],
                                                             "numeric": ["n"]}), raw)
    df = read_all(reader)
    assert df["city"].tolist() == ["Paris", "Rome"] and df["label"].tolist() == [1, 0]
    assert df["n"].iloc[0] == 2.0 and reader.field_transform("n") is None


def test_table_parquet(tmp_path: Path) -> None:
    raw = tmp_path / "log.parquet"
    pq.write_table(pa.table({"clicked": [True, False, True], "user": [7, 8, None], "price": [1.0, None, 3.0],
                             "tags": [["a", "b"], None, []]}), raw)
    cols = {"label": "clicked", "categorical": ["user"], "numeric": ["price"], "multi": ["tags"]}
    reader = make_reader(DataConfig(format="table", columns=cols), raw)
    df = read_all(reader, 2)
    assert df["label"].tolist() == [1, 0, 1]
    assert df["user"].tolist() == ["7", "8", None]
    assert df["tags"].tolist() == [["a", "b"], [], []]
    assert_canonical(df, reader)


# --------------------------------------------------------------------------- from_frame / fields
def test_from_frame_criteo() -> None:
    reader = make_reader(DataConfig(format="criteo"), None)
    row = {f"I{i}": i for i in range(1, 14)} | {f"C{i}": f"{i:08x}" for i in range(1, 27)}
    row["I3"] = None
    row["C2"] = None
    df = reader.from_frame(pd.DataFrame([row, row]))
    assert "label" not in df.columns and df["I1"].dtype == np.float64 and np.isnan(df["I3"].iloc[0])
    assert df["C1"].iloc[0] == "00000001" and df["C2"].iloc[0] is None
    with pytest.raises(DataError, match="'C26'"):
        reader.from_frame(pd.DataFrame([row]).drop(columns=["C26"]))


def test_from_frame_multi_and_label() -> None:
    reader = make_reader(DataConfig(format="movielens"), None)
    rows = pd.DataFrame({"gender": ["F", "M"], "age": [25, 35], "occupation": ["writer", None],
                         "zip_code": ["55455", "02139"], "genres": ["Comedy|Drama", ["Action"]],
                         "release_year": [1995, None], "timestamp": [8.8e8, 8.9e8], "label": [1, 0]})
    df = reader.from_frame(rows)
    assert df["genres"].tolist() == [["Comedy", "Drama"], ["Action"]]
    assert df["age"].tolist() == ["25", "35"] and df["release_year"].tolist() == ["1995", None]
    assert df["label"].tolist() == [1, 0]


def test_from_frame_table_label_mapping(tmp_path: Path) -> None:
    reader = make_reader(DataConfig(format="table", columns=CLICKS), None)
    rows = pd.DataFrame({"site": ["news"], "device": ["ios"], "price": [1.0], "age": [3], "tags": ["a|b"],
                         "clicked": ["yes"]})
    assert reader.from_frame(rows)["label"].tolist() == [1]
    with pytest.raises(DataError, match=r"column .clicked.: expected a positive \[.*\] or negative \[.*\] label"):
        reader.from_frame(rows.assign(clicked=["maybe"]))


def test_reader_fields_without_data() -> None:
    criteo = reader_fields(DataConfig(format="criteo"))
    assert len(criteo) == 39 and criteo[0].name == "I1" and criteo[0].kind == NUMERIC
    assert criteo[13].name == "C1" and criteo[-1].name == "C26" and criteo[-1].kind == CATEGORICAL
    assert all(f.vocab_size is None for f in criteo)
    ml = reader_fields(DataConfig(format="movielens", include_ids=True))
    assert [f.name for f in ml][:3] == ["user_id", "movie_id", "gender"]
    assert len(reader_fields(DataConfig(format="movielens"))) == 7
    assert [f.name for f in reader_fields(DataConfig(format="frappe"))] == list(FRAPPE_NAMES)
    table = reader_fields(DataConfig(format="table", columns=CLICKS))
    assert [(f.name, f.kind) for f in table] == [("site", CATEGORICAL), ("device", CATEGORICAL),
                                                 ("price", NUMERIC), ("age", NUMERIC), ("tags", MULTI)]
    assert isinstance(make_reader(DataConfig(format="table", columns=CLICKS), None), TableReader)


def test_synthetic_format_reads_through_the_table_reader(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sys
    import types

    fake = types.ModuleType("autoint.datasets.synthetic")
    fake.synthetic_columns = lambda settings: {"label": "label", "categorical": [f"c{i}" for i in
                                                                                range(settings["fields"])]}
    fake.SyntheticConfig = types.SimpleNamespace(from_dict=lambda settings: settings,  # DataConfig checks them
                                                 with_ints=lambda settings: settings)
    monkeypatch.setitem(sys.modules, "autoint.datasets.synthetic", fake)
    raw = tmp_path / "synthetic.csv"
    raw.write_text("label,c0,c1\n1,a,b\n0,a,c\n")
    cfg = DataConfig(format="synthetic", synthetic={"fields": 2})
    assert [f.name for f in reader_fields(cfg)] == ["c0", "c1"]
    df = read_all(make_reader(cfg, raw))
    assert df["c1"].tolist() == ["b", "c"] and df["label"].tolist() == [1, 0]


def test_line_endings_and_no_final_newline(tmp_path: Path) -> None:
    good = "1 1:1 2:1 3:1 4:1 5:1 6:1 7:1 8:1 9:1 10:1"
    raw = tmp_path / "crlf.libfm"
    raw.write_bytes(("\r\n".join([good] * 5)).encode())  # CRLF, last line unterminated
    reader = FrappeReader(raw)
    assert len(read_all(reader, 2)) == 5 and reader.rows_seen == 5 and reader.bad.total == 0
