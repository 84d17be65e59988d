"""Vocabularies, numeric transforms, list encoding, splits and prepare end to end."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from autoint.config import config_from_dict
from autoint.datasets import DataError
from autoint.datasets.criteo import CriteoReader
from autoint.encoder import bucket_values
from autoint.preprocess import (
    Encoder,
    NumericTransform,
    Vocabulary,
    criteo_transform,
    encode_lists,
    load_processed,
    permutation_split,
    prepare,
    random_split,
    time_cutoffs,
    time_split,
)
from autoint.schema import FIRST_VALUE, MISSING, OOV, PAD, Schema

OUTPUTS = ("train.parquet", "valid.parquet", "test.parquet", "schema.json", "encoder.json", "prepare.json")


# --------------------------------------------------------------------------- vocabulary
def test_vocabulary_min_count_missing_and_oov() -> None:
    v = Vocabulary(min_count=2)
    v.partial_fit(["a", "b", "a", None, "c"]).partial_fit(np.array(["b", "a", "c", "d"], dtype=object))
    v.finalize()
    assert v.values_ == ["a", "b", "c"]  # a:3, then b:2 and c:2 by value; d:1 is rare
    assert v.vocab_size_ == FIRST_VALUE + 3 and v.n_distinct_ == 4
    ids = v.transform(np.array(["a", "b", "c", "d", None, np.nan, "never seen"], dtype=object))
    assert ids.dtype == np.int32
    assert ids.tolist() == [FIRST_VALUE, FIRST_VALUE + 1, FIRST_VALUE + 2, OOV, MISSING, MISSING, OOV]
    assert (PAD, OOV, MISSING, FIRST_VALUE) == (0, 1, 2, 3)
    # A second finalize (another min_count, say) emptied it silently: every value OOV (a helper's hunt)
    with pytest.raises(RuntimeError, match="finalized already"):
        v.finalize(min_count=3)
    assert v.values_ == ["a", "b", "c"]


def test_vocabulary_order_is_deterministic_and_round_trips() -> None:
    data = [str(x) for x in np.random.default_rng(0).integers(0, 50, 2_000)]
    one = Vocabulary().partial_fit(data).finalize()
    chunked = Vocabulary()
    for i in range(0, 2_000, 300):  # 7 chunks, compacted along the way
        chunked.partial_fit(data[i : i + 300])
    chunked.finalize()
    assert one.values_ == chunked.values_ and one.counts_ == chunked.counts_
    assert one.counts_ == sorted(one.counts_, reverse=True)
    back = Vocabulary.from_dict(json.loads(json.dumps(one.to_dict())))
    probe = np.array([*data[:100], "zzz", None], dtype=object)
    np.testing.assert_array_equal(back.transform(probe), one.transform(probe))


def test_vocabulary_unfitted_raises() -> None:
    with pytest.raises(RuntimeError, match="not fitted"):
        Vocabulary().transform(["a"])


# --------------------------------------------------------------------------- numeric
def test_criteo_transform_values() -> None:
    z = np.array([-3, -1, 0, 1, 2, 3, 10, 100, 1382, np.nan])
    # ln(3)^2 = 1.21, ln(10)^2 = 5.30, ln(100)^2 = 21.2, ln(1382)^2 = 52.3; missing → 0
    assert criteo_transform(z).tolist() == [-3, -1, 0, 1, 2, 1, 5, 21, 52, 0]
    assert criteo_transform(z).dtype == np.float32


def test_log1p_standardize_none() -> None:
    z = np.array([-np.e + 1, 0.0, np.e - 1, np.nan])
    np.testing.assert_allclose(NumericTransform("log1p").transform(z), [-1, 0, 1, 0], atol=1e-6)
    t = NumericTransform("standardize")
    t.partial_fit(np.array([1.0, 2.0, np.nan])).partial_fit(np.array([3.0, 4.0])).finalize()
    assert t.mean_ == pytest.approx(2.5) and t.std_ == pytest.approx(np.std([1, 2, 3, 4]))
    np.testing.assert_allclose(t.transform(np.array([2.5, np.nan, 4.0])), [0, 0, 1.5 / t.std_], rtol=1e-6)
    back = NumericTransform.from_dict(t.to_dict())
    assert (back.mean_, back.std_) == (t.mean_, t.std_)
    assert NumericTransform("none").transform(np.array([7.5, np.nan])).tolist() == [7.5, 0.0]
    with pytest.raises(ValueError, match="must be one of"):
        NumericTransform("sqrt")


def test_a_fitted_range_clips_finite_values_and_leaves_missing_ones_zero() -> None:
    from autoint.encoder import transform_fields

    t = NumericTransform("standardize")
    t.partial_fit(np.array([1.0, 2.0, 3.0, 4.0])).finalize()
    t.fit_range(*t.transform(np.array([1.0, 4.0])).astype(np.float64))
    z = np.array([-1e30, 0.5, 2.5, 1e12, 1e30, np.inf, -np.inf, np.nan])
    high = (4 - 2.5) / t.std_
    np.testing.assert_allclose(t.transform(z), [-high, -high, 0, high, high, 0, 0, 0], rtol=1e-6)
    back = NumericTransform.from_dict(json.loads(json.dumps(t.to_dict())))
    assert back.range_ == t.range_ and np.array_equal(back.transform(z), t.transform(z))
    legacy = {k: v for k, v in t.to_dict().items() if k != "range"}  # saved before ranges: no clip
    assert NumericTransform.from_dict(legacy).transform(np.array([1e12]))[0] > 1e11
    free = NumericTransform("none")  # fields of one call, one clipped and one not
    out = transform_fields([t, free], np.array([[1e30, 2.5], [1e30, 2.5]]))
    np.testing.assert_allclose(out, [[high, 0], [1e30, 2.5]], rtol=1e-6)


def test_bucket_values() -> None:
    z = np.array([np.nan, -np.inf, -1e300, -3.7, 0, 1.5, 2, 2.5, 3, 100, 1382, np.inf])
    # floor(z) up to 2; then floor(ln(z)^2): ln(2.5)^2 = 0.84, ln(3)^2 = 1.21, ln(100)^2 = 21.2, ln(1382)^2 = 52.3
    assert bucket_values(z).to_pylist() == [None, None, "-2147483648", "-4", "0", "1", "2", "0", "1", "21",
                                            "52", None]
    assert bucket_values(pd.Series(["7", None, 7.0], dtype=object).astype(float)).to_pylist() == ["3", None, "3"]


def test_buckets_are_exact_at_their_edges() -> None:
    """floor(ln(z)^2) exactly, for the floats on either side of every edge exp(sqrt(k)), where np.log's rounding
    (which differs between machines) would tip a plain floor into the next bucket."""
    from decimal import Decimal, localcontext

    from autoint.encoder import bucket_ids

    edges = [math.exp(math.sqrt(k)) for k in range(1, 3000, 7)]
    z = np.array([x for e in edges for x in (np.nextafter(e, 0), e, np.nextafter(e, np.inf))])
    with localcontext() as ctx:
        ctx.prec = 60
        exact = [int((Decimal(float(v)).ln() ** 2).to_integral_value(rounding="ROUND_FLOOR")) for v in z]
    ids, ok = bucket_ids(z)
    assert ok.all() and ids.tolist() == exact


def test_bucketed_numeric_fields_are_categorical_through_prepare_load_and_raw_rows(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    n = 600
    count = rng.zipf(1.6, n).astype(float)
    count[::9] = np.nan
    df = pd.DataFrame({"click": rng.integers(0, 2, n), "ad": rng.choice(["x", "y", "z"], n),
                       "count": count, "price": rng.gamma(2, 3, n).round(2)})
    raw = tmp_path / "ads.csv"
    df.to_csv(raw, index=False)
    cols = {"label": "click", "categorical": ["ad"], "numeric": {"count": "bucket", "price": "none"}}
    cfg = _cfg(format="table", columns=cols, min_count=3, split={"method": "random", "fractions": [1.0, 0.0, 0.0]})
    report = prepare(cfg, raw, tmp_path / "p", progress=False)
    assert report["numeric_transforms"] == {"price": "none", "count": "bucket"}
    schema, enc = load_processed(tmp_path / "p")
    assert schema["count"].kind == "categorical" and schema["price"].kind == "numeric"
    assert enc.bucketed == {"count"} and "count" not in enc.numeric_
    # Version 3: an autoint from before "bucket" refuses the file instead of reading count as plain strings.
    assert json.loads((tmp_path / "p" / "encoder.json").read_text())["version"] == 3
    assert Encoder.from_state(enc.to_state()).bucketed == {"count"}
    buckets = pd.Series(bucket_values(count).to_pylist())
    frequent = buckets.value_counts()
    assert enc.vocabularies_["count"].values_ == sorted(frequent[frequent >= 3].index,
                                                        key=lambda v: (-frequent[v], v))
    # The engine's SQL (prepare) and the encoder's numpy path (raw rows, as served) give the same ids.
    prepared = pq.read_table(tmp_path / "p" / "train.parquet").column("count").to_numpy()
    served = enc.encode_rows(df.drop(columns="click")).column("count").to_numpy()
    np.testing.assert_array_equal(prepared, served)
    assert (prepared[::9] == MISSING).all() and (prepared == OOV).any()
    # One row, its number as text or as a number: the same id as in the prepared file.
    one = df.iloc[[1]].drop(columns="click")
    assert enc.encode_rows(one.astype(str)).column("count")[0].as_py() == prepared[1]
    assert enc.encode_rows(one).column("count")[0].as_py() == prepared[1]


# --------------------------------------------------------------------------- lists
def test_encode_lists_pads_truncates_and_marks_missing() -> None:
    v = Vocabulary().partial_fit(["a", "a", "b"]).finalize()
    col = pd.Series([["a", "b"], [], None, ["b", "zz", "a", "a"]], dtype=object)
    out = encode_lists(col, v, max_len=3)
    a, b = FIRST_VALUE, FIRST_VALUE + 1
    assert out.tolist() == [[a, b, PAD], [MISSING, PAD, PAD], [MISSING, PAD, PAD], [b, OOV, a]]


# --------------------------------------------------------------------------- splits
def test_random_split_fractions_determinism_seed() -> None:
    ids = np.arange(200_000)
    codes = random_split(ids, (0.8, 0.1, 0.1), seed=1)
    np.testing.assert_allclose(np.bincount(codes) / len(ids), [0.8, 0.1, 0.1], atol=0.005)
    np.testing.assert_array_equal(codes, random_split(ids, (0.8, 0.1, 0.1), seed=1))
    # per row: the same whatever the chunk it arrives in
    np.testing.assert_array_equal(codes[5_000:6_000], random_split(ids[5_000:6_000], (0.8, 0.1, 0.1), seed=1))
    other = random_split(ids, (0.8, 0.1, 0.1), seed=2)
    assert (other != codes).mean() > 0.2
    assert set(np.unique(random_split(ids[:1000], (1.0, 0.0, 0.0), seed=3))) == {0}


def test_time_split_keeps_order_and_ties() -> None:
    times = np.repeat(np.arange(10.0), 10)  # 10 timestamps, 10 rows each
    cut = time_cutoffs(pd.Series(times).value_counts(), (0.8, 0.1, 0.1))
    assert cut == (7.0, 8.0)
    codes = time_split(times, cut)
    assert np.bincount(codes).tolist() == [80, 10, 10]
    assert (np.diff(codes.astype(int)) >= 0).all()


# --------------------------------------------------------------------------- prepare
def _cfg(**data):
    return config_from_dict({"data": data})


def test_prepare_criteo_is_byte_identical(criteo_head: Path, tmp_path: Path) -> None:
    cfg = _cfg(format="criteo", min_count=10, chunk_size=3_000)
    r1 = prepare(cfg, criteo_head, tmp_path / "a", progress=False)
    prepare(cfg, criteo_head, tmp_path / "b", progress=False)
    for name in OUTPUTS:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
    assert sum(r1["rows"].values()) == 10_000 and sum(r1["positives"].values()) == 2_182
    assert r1["rows"]["train"] == pytest.approx(8_000, abs=150)
    assert r1["bad_rows"]["total"] == 0 and "total_s" in r1["timings"]
    schema = Schema.load(tmp_path / "a" / "schema.json")
    assert len(schema) == 39 and schema.is_fitted and schema.numeric[0].name == "I1"
    train = pq.read_table(tmp_path / "a" / "train.parquet")
    assert train.num_rows == r1["rows"]["train"] and train.schema.field("C1").type == "int32"
    assert train.schema.field("I1").type == "float" and train.schema.field("label").type == "float"
    c3 = train.column("C3").to_numpy()
    assert c3.min() >= OOV and c3.max() < schema["C3"].vocab_size and (c3 == OOV).any()  # min_count 10
    # A seed change moves rows between splits.
    r3 = prepare(_cfg(format="criteo", min_count=10, split={"seed": 7}), criteo_head, tmp_path / "c",
                 progress=False)
    assert r3["rows"] != r1["rows"]


def test_encoder_round_trip_and_raw_rows(criteo_head: Path, tmp_path: Path) -> None:
    cfg = _cfg(format="criteo", min_count=3, split={"fractions": [0.5, 0.25, 0.25]})
    prepare(cfg, criteo_head, tmp_path, progress=False)
    schema, enc = load_processed(tmp_path)
    assert enc.schema == schema
    # Re-encoding raw rows with the saved encoder reproduces what prepare wrote.
    raw = next(CriteoReader(criteo_head).chunks(10_000))
    table = enc.transform(raw)
    valid = random_split(raw.index.to_numpy(), (0.5, 0.25, 0.25), seed=2024) == 1
    assert table.filter(valid).equals(pq.read_table(tmp_path / "valid.parquet"))
    # User rows: unseen values → OOV, no error; no label column.
    user = raw.drop(columns="label").head(2).copy()
    user["C1"] = ["never-seen", None]
    out = enc.encode_rows(user)
    assert "label" not in out.column_names and out.column("C1").to_pylist() == [OOV, MISSING]


def test_prepare_movielens_multi_valued(movielens_100k: Path, tmp_path: Path) -> None:
    report = prepare(_cfg(format="movielens", raw=str(movielens_100k)), None, tmp_path, progress=False)
    assert sum(report["rows"].values()) == 72_855
    assert report["bad_rows"]["dropped_by_design"] == {"rating_3": 27_145}
    schema = Schema.load(tmp_path / "schema.json")
    assert schema["genres"].kind == "multi" and schema["genres"].max_len == 6
    assert schema["genres"].vocab_size == FIRST_VALUE + 19
    genres = pq.read_table(tmp_path / "train.parquet").column("genres")
    assert str(genres.type) == "fixed_size_list<element: int32>[6]"
    assert report["numeric_transforms"] == {"timestamp": "standardize"}
    saved = json.loads((tmp_path / "prepare.json").read_text())
    assert saved["data"]["format"] == "movielens" and "timings" not in saved
    # The ratings file holds the rows; the side tables read are fingerprinted, the folder's README is not.
    assert {Path(k).name: v for k, v in report["rows_per_file"].items()} == {"u.data": 72_855}
    assert [Path(f["path"]).name for f in saved["input"]] == ["u.data", "u.user", "u.item", "u.genre"]


def test_prepare_time_split_and_list_cap(movielens_100k: Path, tmp_path: Path) -> None:
    cfg = _cfg(format="movielens", max_list_len=3, split={"method": "time", "time_column": "timestamp"})
    report = prepare(cfg, movielens_100k, tmp_path, progress=False)
    rows = report["rows"]
    assert rows["train"] / sum(rows.values()) == pytest.approx(0.8, abs=0.01)
    cut = report["time_cutoffs"]
    enc = Encoder.load(tmp_path)
    ts = enc.numeric_["timestamp"]
    assert pq.read_table(tmp_path / "train.parquet").column("timestamp").to_numpy().max() <= ts.transform(
        np.array([cut[0]]))[0] + 1e-6
    assert Schema.load(tmp_path / "schema.json")["genres"].max_len == 3


def test_permutation_split_is_the_numpy_protocol() -> None:
    codes = permutation_split(1000, (0.8, 0.1, 0.1), seed=2024)
    order = np.random.default_rng(2024).permutation(1000)
    assert (codes[order[:800]] == 0).all() and (codes[order[800:900]] == 1).all() and (codes[order[900:]] == 2).all()
    assert not np.array_equal(codes, permutation_split(1000, (0.8, 0.1, 0.1), seed=2025))


def test_prepare_permutation_split_exact_fractions(criteo_head: Path, tmp_path: Path) -> None:
    cfg = _cfg(format="criteo", split={"method": "permutation", "seed": 2024})
    report = prepare(cfg, criteo_head, tmp_path / "a", progress=False)
    assert report["rows"] == {"train": 8_000, "valid": 1_000, "test": 1_000}
    # Rows land where default_rng(2024).permutation puts them: the test split holds exactly those rows.
    i2 = [line.split(b"\t")[2] for line in criteo_head.read_bytes().splitlines()]
    raw = np.array([float(v) if v else np.nan for v in i2])
    test_rows = np.random.default_rng(2024).permutation(10_000)[9_000:]
    expected = np.nan_to_num(criteo_transform(raw[test_rows]), nan=0.0).astype(np.float32)
    got = pq.read_table(tmp_path / "a" / "test.parquet").column("I2").to_numpy()
    np.testing.assert_array_equal(np.sort(got), np.sort(expected))
    again = prepare(cfg, criteo_head, tmp_path / "b", progress=False)
    assert again["rows"] == report["rows"]
    assert (tmp_path / "a" / "test.parquet").read_bytes() == (tmp_path / "b" / "test.parquet").read_bytes()


def test_prepare_files_split_frappe(frappe_dir: Path, tmp_path: Path) -> None:
    files = {"train": "frappe.validation.libfm", "valid": "frappe.test.libfm", "test": "frappe.test.libfm"}
    report = prepare(_cfg(format="frappe", split={"method": "files", "files": files}), frappe_dir, tmp_path,
                     progress=False)
    assert report["rows"] == {"train": 57_722, "valid": 28_860, "test": 28_860}


def test_prepare_table_csv(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    n = 400
    df = pd.DataFrame({"ad": rng.choice(["x", "y", "z"], n), "price": rng.gamma(2, 3, n).round(2),
                       "topics": ["|".join(rng.choice(list("abcd"), rng.integers(0, 4), replace=False))
                                  for _ in range(n)],
                       "click": rng.choice(["yes", "no"], n)})
    raw = tmp_path / "ads.csv"
    df.to_csv(raw, index=False)
    cols = {"label": {"name": "click", "positive": ["yes"], "negative": ["no"]}, "categorical": ["ad"],
            "numeric": {"price": "log1p"}, "multi": ["topics"]}
    report = prepare(_cfg(format="table", columns=cols, chunk_size=64), raw, tmp_path / "out", progress=False)
    assert sum(report["rows"].values()) == n and sum(report["positives"].values()) == (df["click"] == "yes").sum()
    schema, enc = load_processed(tmp_path / "out")
    assert schema["ad"].vocab_size == FIRST_VALUE + 3 and schema["topics"].max_len == 3
    out = enc.encode_rows(pd.DataFrame({"ad": ["x"], "price": [1.0], "topics": ["a|q"]}))
    assert out.column("price").to_pylist() == [pytest.approx(np.log1p(1.0))]
    assert out.column("topics").to_pylist()[0][1] == OOV


def test_prepare_needs_raw() -> None:
    with pytest.raises(DataError, match=r"data\.raw"):
        prepare(_cfg(format="criteo"), None, "/tmp/never-written", progress=False)


@pytest.mark.parametrize("split", ["permutation", "time"])
def test_prepare_encodes_range_by_range_to_the_same_bytes(movielens_100k: Path, tmp_path: Path, monkeypatch,
                                                          split: str) -> None:
    """With a multi-valued field the engine encodes the log in ranges of rows; the files are those of one range
    (multi-valued genres, the permutation's codes looked up by position, the time split's SQL)."""
    import autoint.engine

    spec = {"method": split, **({"time_column": "timestamp"} if split == "time" else {})}
    cfg = _cfg(format="movielens", chunk_size=4_000, split=spec)
    prepare(cfg, movielens_100k, tmp_path / "one", progress=False)
    stages = []
    enter = autoint.engine.Stage.__enter__
    monkeypatch.setattr(autoint.engine.Stage, "__enter__", lambda self: stages.append(self) or enter(self))
    monkeypatch.setattr(autoint.engine, "ENCODE_RANGE_ROWS", 10_000)  # 8,000 rows a range: whole chunks
    prepare(cfg, movielens_100k, tmp_path / "many", progress=False)
    assert stages[0].ranges_encoded == -(-sum(json.loads((tmp_path / "many" / "prepare.json").read_text())["rows"]
                                              .values()) // 8_000)
    for name in OUTPUTS[:3]:
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "many" / name).read_bytes(), name
