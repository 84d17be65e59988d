"""ArchDetect (autoint.detect): zero for an additive model, equal to the paper's formula computed
pair by pair, bounded batches, the planted crosses of a trained model on top, and clear errors."""

from __future__ import annotations

from itertools import combinations
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from autoint.config import ModelConfig, load_config
from autoint.data import read_split
from autoint.datasets.errors import DataError
from autoint.datasets.synthetic import load_planted
from autoint.detect import archdetect, draw_baselines, variant_masks
from autoint.inspection import inspect_model
from autoint.model import AutoInt
from autoint.schema import CATEGORICAL, MULTI, NUMERIC, FieldSpec, Schema

# Every kind of field, interleaved, so a swap must find each field in its own batch tensor.
SCHEMA = Schema((FieldSpec("c0", CATEGORICAL, 6), FieldSpec("m0", MULTI, 7, max_len=3),
                 FieldSpec("n0", NUMERIC), FieldSpec("c1", CATEGORICAL, 5)))


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the test machine is shared; small matmuls gain nothing from more
    yield
    torch.set_num_threads(threads)


def write_encoded(folder: Path, rows: int, seed: int = 0, split: str = "test") -> Path:
    """A processed folder by hand: schema.json and one encoded split of random values."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    SCHEMA.save(folder / "schema.json")
    ids = rng.integers(0, 7, size=(rows, 3)).astype(np.int32)  # 0 is padding
    table = pa.table({
        "label": rng.integers(0, 2, rows).astype(np.float32),
        "c0": rng.integers(1, 6, rows).astype(np.int32),
        "m0": pa.FixedSizeListArray.from_arrays(pa.array(ids.ravel()), 3),
        "n0": rng.normal(size=rows).astype(np.float32),
        "c1": rng.integers(1, 5, rows).astype(np.int32),
    })
    pq.write_table(table, folder / f"{split}.parquet")
    return folder


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return write_encoded(tmp_path_factory.mktemp("detect-tiny"), rows=12)


def model(**settings) -> AutoInt:
    torch.manual_seed(0)
    config = {"embedding_dim": 4, "num_layers": 1, "num_heads": 2, "head_dim": 4, "embedding_init_std": 1.0,
              **settings}
    return AutoInt(SCHEMA, ModelConfig(**config)).eval()


def naive_archdetect(net: AutoInt, folder: Path, rows: int, seed: int) -> dict[frozenset[str], float]:
    """The paper's formula pair by pair, one single-row forward per term, both contexts."""
    batch = {k: v[:rows] for k, v in read_split(folder / "test.parquet", net.schema).items() if k != "label"}
    where = {}  # field → (batch key, column)
    for key, kind in (("categorical", CATEGORICAL), ("numeric", NUMERIC), ("multi", MULTI)):
        where |= {f.name: (key, p) for p, f in enumerate(net.schema.of_kind(kind))}

    def f(a: str, b: str, a_from: int, b_from: int, rest_from: int) -> float:
        row = {k: v[rest_from:rest_from + 1].clone() for k, v in batch.items()}
        for name, source in ((a, a_from), (b, b_from)):
            key, p = where[name]
            row[key][0, p] = batch[key][source, p]
        with torch.no_grad():
            return float(net(row))

    baseline = draw_baselines(rows, seed)
    scores = {}
    for a, b in combinations(net.schema.names, 2):
        total = 0.0
        for x, xb in zip(range(rows), baseline, strict=True):
            for c in (x, xb):
                delta = f(a, b, x, x, c) - f(a, b, xb, x, c) - f(a, b, x, xb, c) + f(a, b, xb, xb, c)
                total += delta ** 2
        scores[frozenset((a, b))] = total / (2 * rows)
    return scores


# ----------------------------------------------------------------------------- the definition
def test_an_additive_model_scores_zero_for_every_pair(tiny):
    # No interacting layer and no DNN: the logit is w·[e_1 ⊕ … ⊕ e_F] + b + Σ first-order terms,
    # one term per field, so every mixed difference vanishes (up to float32 rounding).
    additive = archdetect(model(num_layers=0, first_order=True), tiny, rows=12)
    assert len(additive) == 6 and additive["archdetect"].abs().max() < 1e-10
    crossing = archdetect(model(), tiny, rows=12)  # one interacting layer does cross fields
    assert crossing["archdetect"].max() > 1e-5


def test_equals_the_pairwise_formula(tiny):
    net = model(dnn_hidden=(8,), first_order=True).double()  # every route to the logit; float64 to compare
    table = archdetect(net, tiny, rows=10, seed=4)
    expected = naive_archdetect(net, tiny, rows=10, seed=4)
    got = {frozenset(p): s for p, s in zip(zip(table["field_a"], table["field_b"]), table["archdetect"])}
    assert got.keys() == expected.keys()
    keys = sorted(expected, key=sorted)
    torch.testing.assert_close(torch.tensor([got[k] for k in keys]), torch.tensor([expected[k] for k in keys]),
                               rtol=1e-9, atol=1e-12)
    assert max(expected.values()) > 1e-5  # the comparison is not between zeros


def test_table_layout_merges_with_the_attention_table(tiny):
    net = model()
    table = archdetect(net, tiny, rows=12)
    assert list(table.columns) == ["rank", "field_a", "field_b", "archdetect"]
    assert list(table["rank"]) == list(range(1, 7)) and table["archdetect"].is_monotonic_decreasing
    order = {n: i for i, n in enumerate(SCHEMA.names)}
    assert all(order[a] < order[b] for a, b in zip(table["field_a"], table["field_b"]))
    attention = inspect_model(net, tiny, rows=12).pairs
    merged = attention.merge(table, on=["field_a", "field_b"], suffixes=("", "_archdetect"))
    assert len(merged) == 6 and merged["archdetect"].notna().all()


def test_baselines_are_other_rows_and_seeded():
    b = draw_baselines(50, seed=3)
    assert (b != np.arange(50)).all() and b.min() >= 0 and b.max() < 50
    assert (b == draw_baselines(50, seed=3)).all() and (b != draw_baselines(50, seed=4)).any()
    assert list(draw_baselines(2, seed=0)) == [1, 0]
    masks, i, j = variant_masks(4)  # nothing, 4 singles, 6 pairs
    assert masks.shape == (11, 4) and list(masks.sum(1)) == [0] + [1] * 4 + [2] * 6
    assert (masks[5 + np.arange(6), i] & masks[5 + np.arange(6), j]).all()


def test_batches_are_bounded_in_eval_mode_and_do_not_change_scores(tiny):
    net = model(attention_dropout=0.5).double()  # dropout left on would make scores random
    seen = []
    hook = net.register_forward_pre_hook(lambda m, args: seen.append((len(args[0]["categorical"]), m.training)))
    try:
        net.train()
        results = {bs: archdetect(net, tiny, rows=12, batch_size=bs) for bs in (7, 30, 8192)}
    finally:
        hook.remove()
    assert net.training  # the caller's mode is restored
    assert not any(training for _, training in seen)
    # 24 contexts of 11 variants: 7 splits each context over two batches, 30 holds two contexts,
    # 8192 all of them.
    assert [n for n, _ in seen] == [7, 4] * 24 + [22] * 12 + [264]
    for bs in (7, 30):
        torch.testing.assert_close(torch.tensor(results[bs]["archdetect"].to_numpy()),
                                   torch.tensor(results[8192]["archdetect"].to_numpy()), rtol=1e-12, atol=1e-15)


# ----------------------------------------------------------------------------- the ground truth
RECOVERY = [
    "data.format=synthetic",
    "data.synthetic={n_rows: 20000, n_categorical: 16, n_numeric: 4, n_crosses: 3, cross_strength: 2.5, "
    "cardinality: [5, 10], seed: 3}",
    "model.embedding_dim=8", "model.num_layers=1", "model.num_heads=2", "model.head_dim=8",
    "model.embedding_init_std=1.0",
    "train.lr=0.01", "train.batch_size=512", "train.max_epochs=8", "train.patience=8", "train.seed=1",
]


@pytest.mark.slow
def test_trained_model_ranks_the_planted_crosses_first(tmp_path):
    """20 fields, 3 planted crosses, 8 epochs of the project's training: the top 3 pairs are the planted ones.

    Seeds 1, 3 and 5 of the generator recovered all three (seed 2 missed the weakest at
    rank 106); seed 3 has the widest margin (third planted 1.55, first unplanted 0.28).
    About 15 s on one CPU thread, most of it training.
    """
    from autoint.train import ensure_processed, train

    cfg = load_config(None, [*RECOVERY, f"data.raw={tmp_path / 'raw' / 'synthetic.parquet'}"])
    folder = ensure_processed(cfg, tmp_path / "processed", None, progress=False)
    run = train(cfg, folder, tmp_path / "run", tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}", progress=False)
    planted = {frozenset(p) for p in load_planted(tmp_path / "raw")}
    table = archdetect(run.run_dir, folder, rows=256)  # the run folder, read back like the CLI does
    top = {frozenset(p) for p in zip(table["field_a"][:3], table["field_b"][:3])}
    assert top == planted, table.head(6).to_string()


# ----------------------------------------------------------------------------- bad input
def test_bad_requests_raise_errors_naming_the_setting_or_file(tiny, tmp_path):
    net = model()
    with pytest.raises(ValueError, match="rows"):
        archdetect(net, tiny, rows=0)
    with pytest.raises(ValueError, match="batch_size"):
        archdetect(net, tiny, batch_size=0)
    for bad in (None, "100"):  # a TypeError from a comparison (a helper's hunt)
        with pytest.raises(ValueError, match="batch_size must be a positive integer"):
            archdetect(net, tiny, batch_size=bad)
    for seed in (-1, 1.5, None):  # numpy's own errors, once the model was loaded; None unseeded (a review)
        with pytest.raises(ValueError, match="seed must be an integer >= 0"):
            archdetect(net, tiny, rows=4, seed=seed)
    with pytest.raises(ValueError, match="split"):
        archdetect(net, tiny, split="dev")
    with pytest.raises(FileNotFoundError, match=r"valid\.parquet"):
        archdetect(net, tiny, split="valid")
    with pytest.raises(FileNotFoundError, match=r"schema\.json"):
        archdetect(net, tmp_path)
    other = AutoInt(Schema(SCHEMA.fields[:3]), ModelConfig(num_layers=1))
    with pytest.raises(DataError, match=r"schema\.json"):
        archdetect(other, tiny)
    one = write_encoded(tmp_path / "one", rows=1)
    with pytest.raises(DataError, match=r"test\.parquet: 1 row read"):
        archdetect(net, one)
    empty = write_encoded(tmp_path / "empty", rows=0)
    with pytest.raises(DataError, match=r"test\.parquet: 0 rows"):
        archdetect(net, empty)
    pq.write_table(pq.read_table(tiny / "test.parquet").drop(["n0"]), tmp_path / "one" / "test.parquet")
    with pytest.raises(DataError, match=r"test\.parquet: no column for fields \['n0'\]"):
        archdetect(net, tmp_path / "one")
