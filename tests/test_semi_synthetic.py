"""benchmarks/semi_synthetic.py: labels planted on the real MovieLens 100K columns."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from autoint.datasets.synthetic import load_planted
from autoint.schema import Schema

SPLITS = ("train", "valid", "test")
SETTINGS = {"crosses": 2, "strength": 2.5, "seed": 1}


@pytest.fixture(scope="module")
def semi(benchmark_script):
    return benchmark_script("semi_synthetic")


@pytest.fixture(scope="module")
def processed(semi, data_dir: Path, tmp_path_factory) -> Path:
    return semi.prepare_real("movielens", data_dir, tmp_path_factory.mktemp("semi-ml") / "processed")


@pytest.fixture(scope="module")
def planted(semi, processed: Path, tmp_path_factory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("semi-ml-planted") / "seed1"
    return out, semi.plant_labels(processed, out, **SETTINGS)


def test_labels_change_features_do_not(processed: Path, planted: tuple[Path, dict]) -> None:
    out, doc = planted
    schema = Schema.load(out / "schema.json")
    for name in sorted(p.name for p in processed.iterdir()):
        if name not in {f"{s}.parquet" for s in SPLITS} | {"prepare.json"}:
            assert (out / name).read_bytes() == (processed / name).read_bytes(), name
    for split in SPLITS:
        before, after = pq.ParquetFile(processed / f"{split}.parquet"), pq.ParquetFile(out / f"{split}.parquet")
        assert after.schema_arrow == before.schema_arrow  # the label keeps its dtype
        groups = before.metadata.num_row_groups
        assert [after.metadata.row_group(g).num_rows for g in range(after.metadata.num_row_groups)] == \
               [before.metadata.row_group(g).num_rows for g in range(groups)]
        old, new = before.read(), after.read()
        assert new.drop_columns([schema.label]).equals(old.drop_columns([schema.label]))
        y_old, y_new = old.column(schema.label).to_numpy(), new.column(schema.label).to_numpy()
        assert set(np.unique(y_new)) == {0.0, 1.0}
        assert (y_old != y_new).mean() > 0.3  # MovieLens is ~76 % positive, the planted labels ~25 %
        true_logit = np.load(out / doc["true_logit_files"][split])
        assert len(true_logit) == new.num_rows
    report = json.loads((out / "prepare.json").read_text())
    assert report["positives"]["train"] == int(pq.read_table(out / "train.parquet").column("label").to_numpy().sum())
    assert load_planted(out) == [tuple(c["fields"]) for c in doc["crosses"]]


def test_planted_crosses_have_no_marginal_effect(semi, processed: Path, planted: tuple[Path, dict]) -> None:
    out, doc = planted
    schema = Schema.load(processed / "schema.json")
    train = pq.read_table(processed / "train.parquet")
    model = semi.build_label_model(schema, train, **SETTINGS)
    model.bias = doc["bias"]
    np.testing.assert_allclose(model.logit(train), np.load(out / "true_logit_train.npy"), atol=1e-5)
    effects = model.effects(train)
    assert [list(cr.fields) for cr in model.crosses] == [c["fields"] for c in doc["crosses"]]
    for cr, entry in zip(model.crosses, doc["crosses"]):
        effect = effects[f"cross:{cr.fields[0]}×{cr.fields[1]}"]
        assert effect.std() == pytest.approx(entry["strength"], rel=1e-6)
        for field in cr.fields:
            ids = train.column(field).to_numpy()
            count = np.bincount(ids)
            mean_per_id = np.bincount(ids, effect)[count > 0] / count[count > 0]
            assert np.abs(mean_per_id).max() < 1e-8 * entry["strength"], field
        # ... and yet the cross is there: the clicked rows' cells lean its way.
        y = pq.read_table(out / "train.parquet").column("label").to_numpy()
        assert effect[y == 1].mean() - effect[y == 0].mean() > 0.2 * entry["strength"]
    assert doc["oracle"]["test"]["auc"] > 0.85


def test_click_rate_near_target(semi, processed: Path, planted: tuple[Path, dict], tmp_path: Path) -> None:
    _, doc = planted
    assert doc["click_rate"]["train"] == pytest.approx(0.25, abs=0.01)
    for split in ("valid", "test"):
        assert doc["click_rate"][split] == pytest.approx(0.25, abs=0.03)
    low = semi.plant_labels(processed, tmp_path / "low", crosses=[("age", "release_year")], click_rate=0.1, seed=2)
    assert low["click_rate"]["train"] == pytest.approx(0.1, abs=0.01)
    assert [c["fields"] for c in low["crosses"]] == [["age", "release_year"]]


def test_rerun_is_byte_identical(semi, processed: Path, planted: tuple[Path, dict], tmp_path: Path) -> None:
    out, doc = planted
    again = tmp_path / "again"
    assert semi.plant_labels(processed, again, **SETTINGS) == doc
    names = sorted(p.name for p in out.iterdir())
    assert names == sorted(p.name for p in again.iterdir())
    for name in names:
        assert (again / name).read_bytes() == (out / name).read_bytes(), name
    other = semi.plant_labels(processed, tmp_path / "other", **{**SETTINGS, "seed": 2})
    assert (tmp_path / "other" / "train.parquet").read_bytes() != (out / "train.parquet").read_bytes()
    assert other["bias"] != doc["bias"]


@pytest.mark.parametrize(("crosses", "message"), [
    ([("age", "no_such_field")], "no field named 'no_such_field'"),
    ([("age", "timestamp")], "field 'timestamp' is numeric"),
    ([("genres", "age")], "field 'genres' is multi"),
    ([("age", "release_year"), ("movie_id", "age")], "field 'age' is already in another"),
    ([("movie_id", "release_year")], "'release_year' is a function of 'movie_id'"),
    (3, "found at most 2 disjoint crosses"),
])
def test_bad_crosses_are_named(semi, processed: Path, tmp_path: Path, crosses, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        semi.plant_labels(processed, tmp_path / "bad", crosses=crosses)
    assert not (tmp_path / "bad").exists()  # nothing written before the check


def test_resampled_rows_are_real_rows_with_labels_drawn_anew(semi, processed: Path, planted: tuple[Path, dict],
                                                             tmp_path: Path) -> None:
    _, doc = planted
    out = tmp_path / "x3"
    resampled = semi.plant_labels(processed, out, **SETTINGS, resample=3)
    assert resampled["settings"]["resample"] == 3
    assert resampled["crosses"] == doc["crosses"]  # the label model is that of the real train rows
    schema = Schema.load(out / "schema.json")
    report = json.loads((out / "prepare.json").read_text())
    for split in SPLITS:
        before, after = pq.read_table(processed / f"{split}.parquet"), pq.read_table(out / f"{split}.parquet")
        assert after.schema == before.schema
        assert after.num_rows == 3 * before.num_rows == report["rows"][split]
        assert len(np.load(out / resampled["true_logit_files"][split])) == after.num_rows
        features = [f.name for f in schema.fields if f.kind != "multi"]
        real = Counter(zip(*(before.column(c).to_pylist() for c in features)))
        drawn = list(zip(*(after.column(c).to_pylist() for c in features)))
        counts = Counter(drawn)
        assert set(counts) <= set(real)  # every drawn row is a row of the split it was drawn from
        assert counts != Counter({row: 3 * n for row, n in real.items()})  # drawn at random, not tiled
        # Labels are drawn for every draw, not copied from the real row: a real row drawn several times
        # (and alone with its features in the split) gets both labels in some of its draws.
        labels = after.column(schema.label).to_numpy()
        seen: dict[tuple, set] = {}
        for row, y in zip(drawn, labels):
            if real[row] == 1:
                seen.setdefault(row, set()).add(float(y))
        assert sum(len(ys) == 2 for ys in seen.values()) > 0.05 * len(seen)
    again = semi.plant_labels(processed, tmp_path / "x3-again", **SETTINGS, resample=3)
    assert again == resampled
    for name in sorted(p.name for p in out.iterdir()):
        assert (tmp_path / "x3-again" / name).read_bytes() == (out / name).read_bytes(), name
    with pytest.raises(ValueError, match="resample must be an integer >= 1"):
        semi.plant_labels(processed, tmp_path / "bad", **SETTINGS, resample=0)


def test_fields_with_an_alias_are_not_drawn_but_may_be_named(semi, processed: Path, tmp_path: Path) -> None:
    schema = Schema.load(processed / "schema.json")
    train = pq.read_table(processed / "train.parquet")
    aliases = semi._aliases(semi.categorical_ids(schema, train))
    assert aliases["user_id"] == ["zip_code"] and aliases["zip_code"] == ["user_id"]  # 943 users, 795 zip codes
    assert aliases["gender"] == []  # user_id determines gender, but gender tells little of user_id
    for seed in range(1, 6):
        model = semi.build_label_model(schema, train, crosses=2, seed=seed)
        drawn = {f for cr in model.crosses for f in cr.fields}
        assert not drawn & {"user_id", "zip_code"}, seed
    named = semi.plant_labels(processed, tmp_path / "named", crosses=[("user_id", "release_year")], seed=1)
    assert named["crosses"][0]["aliases"] == {"user_id": ["zip_code"]}
