"""Attention inspection: streaming statistics, the pair ranking, plots, the CLI and MLflow artifacts.

The ground truth: on a synthetic log with 4 planted crosses among 40 fields, a
small AutoInt's top 4 pairs by the inspection score are the planted ones.
"""

from __future__ import annotations

import ast
import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from autoint.cli import main
from autoint.config import ModelConfig, load_config
from autoint.data import read_split
from autoint.inspection import UNIFORM_TOLERANCE, LabelPermutationTest, inspect_model, pair_scores
from autoint.model import AutoInt
from autoint.schema import Schema

PACKAGE = Path(__file__).resolve().parents[1] / "autoint"

SMALL = [
    "data.format=synthetic",
    "data.synthetic={n_rows: 3000, n_categorical: 5, n_numeric: 2, n_crosses: 2, seed: 5}",
    "model.num_layers=2",
    "model.num_heads=2",
    "model.head_dim=4",
    "model.embedding_dim=4",
    "train.batch_size=256",
    "train.max_epochs=1",
    "train.seed=3",
]


def prepare(root: Path, *overrides: str) -> Path:
    from autoint.train import ensure_processed

    cfg = load_config(None, [*overrides, f"data.raw={root / 'raw' / 'synthetic.parquet'}"])
    return ensure_processed(cfg, root / "processed", None, progress=False)


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> Path:
    return prepare(tmp_path_factory.mktemp("inspect-small"), *SMALL)


@pytest.fixture(scope="module")
def small_model(small) -> AutoInt:
    """An untrained model with a large init, so its attention is far from uniform."""
    torch.manual_seed(0)
    schema = Schema.load(small / "schema.json")
    return AutoInt(schema, ModelConfig(embedding_dim=4, num_layers=2, num_heads=2, head_dim=4,
                                       embedding_init_std=1.0)).eval()


def one_shot(model: AutoInt, folder: Path, rows: int) -> tuple[torch.Tensor, torch.Tensor]:
    """All maps of the first ``rows`` test rows at once: (N, L, H, F, F) and labels (N,)."""
    split = read_split(folder / "test.parquet", model.schema)
    batch = {k: v[:rows] for k, v in split.items()}
    with torch.no_grad():
        _, maps = model(batch, return_attention=True)
    return torch.stack(maps, 1).double(), batch["label"]


# ----------------------------------------------------------------------------- streaming statistics
def test_streaming_equals_one_shot_overall_and_per_label(small, small_model):
    rows = 250
    result = inspect_model(small_model, small, "test", rows=rows, batch_size=17, explain_rows=(0, 3, 249))
    a, y = one_shot(small_model, small, rows)  # (N, L, H, F, F), (N,)
    assert result.rows == rows and result.positives == int(y.sum())
    torch.testing.assert_close(torch.from_numpy(result.mean), a.mean(0))
    torch.testing.assert_close(torch.from_numpy(result.std), a.std(0, unbiased=False))
    for label in (0, 1):
        torch.testing.assert_close(torch.from_numpy(result.mean_by_label[label]), a[y == label].mean(0))
    # Kept per-row maps are exactly those rows' maps.
    assert [e.row for e in result.explanations] == [0, 3, 249]
    for e in result.explanations:
        torch.testing.assert_close(torch.from_numpy(e.maps), a[e.row])
        assert e.label == float(y[e.row]) and 0 < e.probability < 1
    # The pair table follows from the same statistics.
    expected = pair_scores(a.mean(0).numpy(), a.std(0, unbiased=False).numpy(), a[y == 1].mean(0).numpy(),
                           a[y == 0].mean(0).numpy(), result.fields)
    pd.testing.assert_frame_equal(result.pairs[expected.columns], expected)


def test_mean_maps_are_labelled_and_rows_sum_to_one(small, small_model):
    result = inspect_model(small_model, small, explain_rows=(1,))
    names = list(Schema.load(small / "schema.json").names)
    assert result.rows == len(read_split(small / "test.parquet", small_model.schema)["label"])
    frames = {**result.matrices(), **result.explanation_matrices()}
    assert {"overall", "layer1", "layer2_head2", "clicked", "not_clicked", "row1_layer1"} <= set(frames)
    for stem, df in frames.items():
        assert list(df.index) == names and list(df.columns) == names, stem
        np.testing.assert_allclose(df.sum(axis=1), 1.0, atol=1e-6, err_msg=stem)
    # The overall map is the row-weighted mix of the per-label maps.
    n1 = result.positives
    mix = (n1 * result.mean_by_label[1] + (result.rows - n1) * result.mean_by_label[0]) / result.rows
    np.testing.assert_allclose(mix, result.mean, atol=1e-12)
    pairs = result.pairs
    assert len(pairs) == len(names) * (len(names) - 1) // 2
    assert list(pairs["rank"]) == list(range(1, len(pairs) + 1)) and pairs["score"].is_monotonic_decreasing


def test_save_writes_tables_and_summary(small, small_model, tmp_path):
    result = inspect_model(small_model, small, rows=100, explain_rows=(2,))
    written = result.save(tmp_path / "out", k=5)
    assert all(p.is_file() for p in written)
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["rows"] == 100 and len(summary["top_pairs"]) == 5 and summary["explained_rows"] == [2]
    long = pd.read_csv(tmp_path / "out" / "attention_long.csv")
    assert set(long["label"]) == {"all", "clicked", "not_clicked"}
    sums = long.groupby(["label", "layer", "head", "query"])["weight"].sum()
    np.testing.assert_allclose(sums, 1.0, atol=1e-6)
    # The standard deviations the README promises: over all rows, for label all (they were computed, not written).
    overall = long[long["label"] == "all"]
    np.testing.assert_allclose(overall["std"], result.std.ravel(), rtol=1e-6)
    assert (overall["std"] > 0).any() and long.loc[long["label"] != "all", "std"].isna().all()
    top = pd.read_csv(tmp_path / "out" / "explanations" / "row2_top.csv")
    assert set(top.columns) == {"row", "label", "probability", "field", "rank", "attends_to", "weight"}
    served = result.explanations[0].probability  # the model's own: its logit_calibration is the identity here
    assert summary["explained"] == [{"row": 2, "label": result.explanations[0].label, "probability": served}]
    assert top["probability"].nunique() == 1 and top["probability"].iloc[0] == pytest.approx(served)


def test_bad_requests_name_the_setting(small, small_model, tmp_path):
    with pytest.raises(ValueError, match="explain rows"):
        inspect_model(small_model, small, rows=10, explain_rows=(10,))
    with pytest.raises(ValueError, match="split"):
        inspect_model(small_model, small, split="dev")
    with pytest.raises(FileNotFoundError, match=r"schema\.json"):
        inspect_model(small_model, small.parent)
    # From Python (a helper's hunt): rows=2.5 inspected 2 rows; an int explain_rows was a bare TypeError;
    # matrix(label=2) a KeyError; top_pairs(k=-1) all pairs but one.
    with pytest.raises(ValueError, match=r"rows must be a positive integer or None \(all\), got 2\.5"):
        inspect_model(small_model, small, rows=2.5)
    result = inspect_model(small_model, small, rows=20, explain_rows=3, permutations=0)
    assert [e.row for e in result.explanations] == [3]
    with pytest.raises(ValueError, match=r"label must be 0 \(not clicked\), 1 \(clicked\) or None"):
        result.matrix(label=2)
    with pytest.raises(ValueError, match=r"layer must be an integer in 1\.\.\d+ \(None: their mean\), got '1'"):
        result.matrix(layer="1")
    with pytest.raises(ValueError, match=r"k must be an integer >= 0, got -1"):
        result.top_pairs(k=-1)
    # More of the same hunt's kind: "12" explained rows 1 and 2; top_keys(-1) all keys but one; permutations=1.5 a
    # bare TypeError; save(k=-1) failed after writing most of the folder; swapped field names "did not cover".
    with pytest.raises(ValueError, match=r"explain_rows must be a row position or a sequence of them, got '12'"):
        inspect_model(small_model, small, rows=20, explain_rows="12")
    with pytest.raises(ValueError, match=r"permutations must be an integer >= 0, got 1\.5"):
        inspect_model(small_model, small, rows=20, permutations=1.5)
    # A later hunt: batch_size None or "100", and alpha "0.05", were TypeErrors from a comparison; seed=-1 or 1.5
    # numpy's own error once the model was loaded, naming no seed
    for kwargs, said in (({"batch_size": None}, "batch_size must be a positive integer, got None"),
                         ({"batch_size": "100"}, "batch_size must be a positive integer, got '100'"),
                         ({"alpha": "0.05"}, r"alpha must be a number in \(0, 1\), got '0\.05'"),
                         ({"seed": -1}, "seed must be an integer >= 0, got -1"),
                         ({"seed": 1.5}, r"seed must be an integer >= 0, got 1\.5"),
                         ({"significance_rows": None}, "significance_rows must be a positive integer, got None")):
        with pytest.raises(ValueError, match=said):
            inspect_model(small_model, small, rows=20, **kwargs)
    with pytest.raises(ValueError, match=r"k must be an integer >= 1, got -1"):
        result.explanations[0].top_keys(-1)
    with pytest.raises(ValueError, match=r"k must be an integer >= 0, got -1"):
        result.save(tmp_path / "saved", k=-1)
    assert not (tmp_path / "saved").exists()
    (tmp_path / "a_file.csv").write_text("x")
    with pytest.raises(ValueError, match=r"a_file\.csv is a file: save writes a folder"):
        result.save(tmp_path / "a_file.csv")
    swapped = result.pairs[["field_b", "field_a"]].set_axis(["field_a", "field_b"], axis=1).assign(
        archdetect=np.arange(len(result.pairs), dtype=float))
    result.rank_by(swapped, "archdetect")
    assert result.pairs["archdetect"].tolist() == sorted(range(len(result.pairs)), reverse=True)
    both = pd.concat([swapped, swapped.rename(columns={"field_a": "field_b", "field_b": "field_a"})])  # a melted
    result.rank_by(both, "archdetect")                                               # symmetric matrix
    assert result.pairs["archdetect"].tolist() == sorted(range(len(result.pairs)), reverse=True)


def test_the_printed_ranking_says_what_it_leaves_out(small, small_model):
    """The ranking follows score and significance score_z: a significant pair ranked below the printed top was never
    shown; one row (no label contrast) ranked every pair 0 in the fields' order, under the contrast's header."""
    result = inspect_model(small_model, small, rows=300, permutations=49)
    significant = result.pairs[result.pairs["significant"].astype(bool)]
    notes = result.ranking_notes(k=0)
    assert (len(significant) > 0) == any(n.startswith("also significant, ranked below the top 0 by score") for n in
                                         notes)
    one = inspect_model(small_model, small, rows=1, permutations=0)
    assert not one.contrasted
    assert one.ranking_notes(k=3) == ["every pair scores 0 by score: the order is the fields' own, not a finding"]


def test_module_boundaries():
    def imports(name: str) -> set[str]:
        tree = ast.parse((PACKAGE / name).read_text())
        found = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                found |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.add(node.module.split(".")[0])
        return found

    assert not {"mlflow", "matplotlib"} & imports("inspection.py")
    assert not {"torch", "mlflow"} & imports("plots.py")


# ----------------------------------------------------------------------------- significance
def test_permutation_test_scores_the_observed_labels_like_pair_scores(small, small_model):
    rows = 300
    result = inspect_model(small_model, small, rows=rows, batch_size=64, permutations=49, seed=3)
    a, y = one_shot(small_model, small, rows)
    test = LabelPermutationTest(y.numpy(), 49, tuple(a.shape[1:]), seed=3)
    for start in range(0, rows, 64):  # the same rows in other batches
        test.update(list(a[start:start + 64].float().unbind(1)))
    scores = test.pair_scores()  # (P+1, pairs), row 0: the observed labels
    i, j = np.triu_indices(len(result.fields), k=1)
    observed = pd.Series(scores[0], index=[(result.fields[a_], result.fields[b_]) for a_, b_ in zip(i, j)])
    by_pair = result.pairs.set_index(["field_a", "field_b"])["score"]
    np.testing.assert_allclose(by_pair.loc[observed.index].to_numpy(), observed.to_numpy(), rtol=1e-5)
    # Each permuted row is the score of a permutation of the labels, computed directly.
    rng = np.random.default_rng(3)
    yp = y.numpy()[rng.permutation(rows)] > 0.5
    direct = pair_scores(a.mean(0).numpy(), a.std(0).numpy(), a[yp].mean(0).numpy(), a[~yp].mean(0).numpy(),
                         result.fields).set_index(["field_a", "field_b"])["score"]
    np.testing.assert_allclose(direct.loc[observed.index].to_numpy(), scores[1], rtol=1e-5)
    # p-values: in (0, 1], at least 1/(P+1), the family-wise ones no smaller than the raw ones.
    assert (result.pairs["p_value"] >= 1 / 50 - 1e-12).all() and (result.pairs["p_value"] <= 1).all()
    assert (result.pairs["p_adjusted"] >= result.pairs["p_value"] - 1e-12).all()
    assert result.significance["permutations"] == 49 and result.significance["rows"] == rows
    again = inspect_model(small_model, small, rows=rows, batch_size=100, permutations=49, seed=3)
    pd.testing.assert_frame_equal(again.pairs, result.pairs, check_exact=False, rtol=1e-4, atol=1e-6)


def _toy_maps(rng: np.random.Generator, n: int, f: int, signal: np.ndarray | None = None) -> torch.Tensor:
    """(n, 1, 1, F, F) row-stochastic random maps; ``signal`` (n,) adds weight on key 1 for query 0."""
    logits = rng.normal(size=(n, 1, 1, f, f))
    if signal is not None:
        logits[:, 0, 0, 0, 1] += signal
    return torch.softmax(torch.from_numpy(logits), -1).float()


def test_family_wise_error_holds_at_the_nominal_level_when_labels_carry_nothing():
    """200 logs whose labels are independent of the maps: any pair significant in about alpha of them."""
    rng = np.random.default_rng(0)
    n, f, alpha, logs = 200, 6, 0.05, 200
    hits = 0
    for k in range(logs):
        maps = _toy_maps(rng, n, f)
        y = rng.random(n) < 0.3
        test = LabelPermutationTest(y, 99, (1, 1, f, f), seed=k)
        test.update([maps[:, 0]])
        _, adjusted, _ = test.p_values()
        hits += bool((adjusted <= alpha).any())
    # Binomial(200, 0.05): mean 10, sd 3.1. Without the correction over 15 pairs it would be ~100.
    assert 2 <= hits <= 20, hits


def test_a_label_dependent_pair_is_significant_and_the_others_are_not():
    rng = np.random.default_rng(1)
    n, f = 600, 6
    y = rng.random(n) < 0.4
    maps = _toy_maps(rng, n, f, signal=1.5 * y)
    test = LabelPermutationTest(y, 199, (1, 1, f, f), seed=0)
    test.update([maps[:, 0]])
    _, adjusted, z = test.p_values()
    i, j = np.triu_indices(f, k=1)
    target = (i == 0) & (j == 1)
    assert adjusted[target][0] == pytest.approx(1 / 200) and z[target][0] > 5
    # Query 0's other weights shrink as a_01 grows (rows sum to 1), so only pairs without field 0 are
    # untouched by the labels: none of them may be called significant.
    assert (adjusted[i > 0] > 0.05).all()


def test_verdicts_say_when_nothing_is_significant_and_when_attention_is_uniform(small, tmp_path):
    """Zero query/key projections give exactly uniform attention: the verdict and the heatmap say so."""
    from autoint.plots import color_scale

    torch.manual_seed(0)
    schema = Schema.load(small / "schema.json")
    flat = AutoInt(schema, ModelConfig(embedding_dim=4, num_layers=1, num_heads=2, head_dim=4)).eval()
    with torch.no_grad():
        for name, param in flat.named_parameters():
            if "query" in name or "key" in name or "qkv" in name:
                param.zero_()
    result = inspect_model(flat, small, permutations=19)
    f = len(result.fields)
    np.testing.assert_allclose(result.mean, 1.0 / f, atol=1e-6)
    assert result.uniform and result.uniformity["row_deviation"] < UNIFORM_TOLERANCE
    # Weights that never vary do not vary: E[a²] - E[a]² left rounding whose square root (~1e-9), over the same
    # rounding of the other keys, made every pair's variability 1.0 (a helper's review).
    assert (result.pairs["variability"] == 0).all() and (result.pairs["p_value"] == 1).all()
    assert result.significance["significant_pairs"] == 0
    lines = result.verdicts()
    assert any("no pair is significant" in line for line in lines)
    assert any("indistinguishable from uniform" in line and "clicked and unclicked rows alike" in line
               for line in lines)
    assert not any("found significant above" in line for line in lines)  # none was
    # rows of one class (or none labelled) compared nothing by label: the verdict said "alike" of them too
    one_class = result.uniformity["row_deviation_by_label"]
    result.uniformity["row_deviation_by_label"] = dict(list(one_class.items())[:1])
    line = result.verdicts()[1]
    assert "indistinguishable from uniform" in line and "alike" not in line
    result.uniformity["row_deviation_by_label"] = one_class
    # Both verdicts at once read as a contradiction (a helper's hunt): the uniformity line then says how they fit.
    result.significance = {**result.significance, "significant_pairs": 3}
    assert "no weight's mean differs between clicks and non-clicks by more than 0" in result.verdicts()[1]
    result.significance = {**result.significance, "significant_pairs": 0}
    summary = result.summary()
    assert summary["uniformity"]["uniform"] and summary["verdicts"] == lines
    # The heatmap's colour range is at least ±1/F around 1/F: a flat map is drawn flat.
    values, vmin, vmax, label = color_scale(result.matrix().to_numpy(), 1.0 / f)
    assert vmin == pytest.approx(-1.0 / f) and vmax == pytest.approx(1.0 / f)
    assert np.abs(values).max() < 1e-6 and "1/F" in label


def test_a_model_with_structured_attention_is_not_called_uniform(small, small_model):
    result = inspect_model(small_model, small, rows=200, permutations=0)
    assert not result.uniform and result.uniformity["row_deviation"] > 10 * UNIFORM_TOLERANCE
    assert result.significance == {"skipped": "permutations = 0"}
    assert "p_value" not in result.pairs and any("not tested" in line for line in result.verdicts())


# ----------------------------------------------------------------------------- plots
def test_plots_write_png_files(small, small_model, tmp_path):
    from autoint.plots import save_heatmaps, top_pairs_bar

    result = inspect_model(small_model, small, rows=64, explain_rows=(0,))
    paths = save_heatmaps({**result.matrices(), **result.explanation_matrices()}, tmp_path)
    paths.append(top_pairs_bar(result.pairs, tmp_path / "top.png", k=5,
                               highlight={frozenset(result.pairs.iloc[0][["field_a", "field_b"]])}))
    assert len(paths) == len(result.matrices()) + 2 + 1
    # A name without a suffix: matplotlib writes NAME.png, and that is the path returned (it was NAME, no file)
    paths.append(top_pairs_bar(result.pairs, tmp_path / "bare", k=5))
    assert paths[-1] == tmp_path / "bare.png"
    for p in paths:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 1000
    with pytest.raises(ValueError, match="is a folder: name the image file"):
        top_pairs_bar(result.pairs, tmp_path, k=5)


# ----------------------------------------------------------------------------- the CLI and MLflow
def test_cli_inspect_round_trip_logs_artifacts_to_the_run(small, tmp_path, capsys, monkeypatch):
    import mlflow

    from autoint.train import train

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    result = train(load_config(None, SMALL), small, tmp_path / "run", tracking_uri=uri, progress=False)
    # A run folder names its store in run.json; one handed over could name anyone's server, which would get this
    # user's MLflow credentials and the inspection (a security review): only the store this command names is
    # written to. Here that is ./mlflow.db: nothing is logged, and a warning says how to log it.
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert main(["inspect", result.run_dir, "--data", str(small), "--out", str(tmp_path / "unlogged"),
                 "--rows", "50"]) == 0
    assert "artifacts under" not in capsys.readouterr().out
    assert not (tmp_path / "elsewhere" / "mlflow.db").exists()
    out = tmp_path / "inspection"
    assert main(["inspect", result.run_dir, "--data", str(small), "--out", str(out), "--explain", "0,4",
                 "--top", "5", "--rows", "200", "--tracking-uri", uri]) == 0
    printed = capsys.readouterr().out
    assert "inspected 200 rows" in printed and "field_a" in printed and result.run_id in printed
    for name in ("pairs.csv", "summary.json", "attention_long.csv", "matrices/overall.csv",
                 "explanations/row4.csv", "heatmaps/overall.png", "heatmaps/layer2_head1.png",
                 "heatmaps/row0_layer1.png", "heatmaps/top_pairs.png"):
        assert (out / name).is_file(), name
    client = mlflow.MlflowClient(uri)
    where = next(x for x in printed.splitlines() if "artifacts under" in x).split("artifacts under ")[1].split("/  ")[0]
    logged = {a.path.removeprefix(where + "/") for a in client.list_artifacts(result.run_id, where)}
    assert {"pairs.csv", "summary.json", "heatmaps"} <= logged

    # The same through the MLflow model URI, into a second folder.
    assert main(["inspect", result.model_uri, "--data", str(small), "--out", str(tmp_path / "again"),
                 "--tracking-uri", uri, "--rows", "200"]) == 0
    again = pd.read_csv(tmp_path / "again" / "pairs.csv")
    pd.testing.assert_frame_equal(again, pd.read_csv(out / "pairs.csv"))
    assert "significance:" in printed and "uniformity:" in printed and "p_adjusted" in printed
    assert {"p_value", "p_adjusted", "significant"} <= set(again.columns)
    # by its URI: the model is the URI, and the checkpoint fetched for it (a scratch copy, gone when the command
    # ended) is not recorded (summary.json named that dead path; a helper's hunt)
    meta = json.loads((tmp_path / "again" / "summary.json").read_text())
    assert meta["model"] == result.model_uri and meta["checkpoint"] is None

    # Ranked by the model probe instead: the table is in archdetect order, the summary says so, and the bar
    # figure shows the --top pairs of that ranking (it drew the attention score's top 10).
    import autoint.plots

    bars = []
    draw = autoint.plots.top_pairs_bar
    monkeypatch.setattr(autoint.plots, "top_pairs_bar", lambda *a, **kw: bars.append(kw) or draw(*a, **kw))
    capsys.readouterr()
    assert main(["inspect", result.run_dir, "--data", str(small), "--out", str(tmp_path / "arch"), "--rows", "50",
                 "--method", "archdetect", "--permutations", "0", "--top", "3"]) == 0
    assert "archdetect" in capsys.readouterr().out
    arch = pd.read_csv(tmp_path / "arch" / "pairs.csv")
    assert arch["archdetect"].is_monotonic_decreasing and list(arch["rank"]) == list(range(1, len(arch) + 1))
    summary = json.loads((tmp_path / "arch" / "summary.json").read_text())
    assert summary["ranked_by"] == "archdetect" and "first 50 rows of test" in summary["archdetect"]
    assert summary["archdetect_rows"] == 50
    assert [(b["k"], b["by"]) for b in bars] == [(3, "archdetect")]
    # a split of fewer rows than asked: the rows probed, not those asked (it said 256 of a 12-row split)
    few = _altered(small, tmp_path / "few", lambda t: t.slice(0, 12))
    assert main(["inspect", result.run_dir, "--data", str(few), "--out", str(tmp_path / "arch12"),
                 "--method", "archdetect", "--permutations", "0"]) == 0
    summary = json.loads((tmp_path / "arch12" / "summary.json").read_text())
    assert summary["archdetect_rows"] == 12 and "first 12 rows of test" in summary["archdetect"]

    # Errors: one line, exit 2.
    capsys.readouterr()
    assert main(["inspect", result.run_dir, "--data", str(small), "--out", str(out), "--explain", "a,b"]) == 2
    assert main(["inspect", result.run_dir, "--data", str(small), "--out", str(out), "--rows", "10",
                 "--explain", "20"]) == 2
    assert main(["inspect", str(tmp_path / "nowhere"), "--data", str(small), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and "--explain" in err[0] and "[20]" in err[1] and "nowhere" in err[2]


# ----------------------------------------------------------------------------- the ground truth
@pytest.fixture(scope="module")
def recovery_bench(benchmark_script):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the benchmark runs it: small matmuls, one thread
    try:
        yield benchmark_script("interaction_recovery")
    finally:
        torch.set_num_threads(threads)


@pytest.mark.slow
def test_held_out_seed_planted_pairs_are_found_and_significant(recovery_bench, tmp_path):
    """The demo's log (4 crosses of strength 2.5 among 40 fields) and its one-layer model with unscaled
    attention (the benchmark's ``pairs-2.5`` case) on evaluation seed 101, which chose nothing: the
    attention score and ArchDetect put the 4 planted pairs on top, and each planted pair is significant
    under the label-permutation test. About 50 s on one CPU core."""
    seed = recovery_bench.EVAL_SEEDS[0]
    assert seed not in recovery_bench.DESIGN_SEEDS
    res = recovery_bench.run_seed("pairs-2.5", seed, tmp_path, recovery_bench.TRAIN)
    assert res["methods"]["attention:score"]["ranks"] == [1, 2, 3, 4], res["methods"]
    assert res["methods"]["model:archdetect"]["ranks"] == [1, 2, 3, 4], res["methods"]
    assert res["significance"]["planted_significant"] == 4
    assert res["oracle_test_auc"] > res["model_test_auc"] > 0.8


@pytest.mark.slow
def test_shuffled_labels_give_no_significant_pair(recovery_bench, tmp_path):
    """The same log with its labels permuted: the model learns nothing and no pair is called significant."""
    res = recovery_bench.run_seed("shuffled-labels", recovery_bench.EVAL_SEEDS[0], tmp_path,
                                  recovery_bench.TRAIN)
    assert abs(res["model_test_auc"] - 0.5) < 0.05
    assert res["significance"]["significant_pairs"] == 0 and not res["significance"]["any"]


def _altered(small: Path, root: Path, change) -> Path:
    """A copy of the processed folder whose test split ``change`` rewrote (a pyarrow table in, one out)."""
    import shutil

    import pyarrow.parquet as pq

    folder = root / "altered"
    shutil.copytree(small, folder)
    table = pq.read_table(folder / "test.parquet")
    pq.write_table(change(table), folder / "test.parquet")
    return folder


def test_a_split_the_model_cannot_read_is_refused_naming_file_row_and_field(small, small_model, tmp_path):
    """A NaN numeric value made every map, score and uniformity NaN, each p-value 0 (below 1/(P+1)) and a verdict
    of 'noise', with status 0; an id outside its vocabulary and a missing column ended in tracebacks. Each is now a
    DataError naming the file (a helper's hunt)."""
    import pyarrow as pa

    from autoint.datasets.errors import DataError

    schema = Schema.load(small / "schema.json")
    numeric = next(f.name for f in schema.fields if f.kind == "numeric")
    categorical = next(f.name for f in schema.fields if f.kind == "categorical")

    def nan_in_row_70(t):
        values = t.column(numeric).to_numpy().copy()
        values[70] = np.nan
        return t.set_column(t.schema.get_field_index(numeric), numeric, pa.array(values, t.schema.field(numeric).type))

    with pytest.raises(DataError, match=rf"altered/test\.parquet: row 70 holds nan in numeric field '{numeric}'"):
        inspect_model(small_model, _altered(small, tmp_path / "nan", nan_in_row_70), rows=200, batch_size=64)

    def id_999_in_row_3(t):
        values = t.column(categorical).to_numpy().copy()
        values[3] = 999
        return t.set_column(t.schema.get_field_index(categorical), categorical,
                            pa.array(values, t.schema.field(categorical).type))

    with pytest.raises(DataError, match=rf"altered/test\.parquet: categorical id 999 of field '{categorical}' "
                                        r"\(row 3\) is outside its vocabulary"):
        inspect_model(small_model, _altered(small, tmp_path / "id", id_999_in_row_3), rows=200)

    with pytest.raises(DataError, match=rf"altered/test\.parquet: no column for fields \['{categorical}'\]"):
        inspect_model(small_model, _altered(small, tmp_path / "col", lambda t: t.drop_columns([categorical])))

    def label_2_in_row_80(t):  # counted as a click, and shown as 'label: 2.0' in an explanation (a helper's hunt)
        values = t.column("label").to_numpy().copy()
        values[80] = 2
        return t.set_column(t.schema.get_field_index("label"), "label", pa.array(values, t.schema.field("label").type))

    with pytest.raises(DataError, match=r"altered/test\.parquet: row 80 has label 2\.0; labels are 0 or 1"):
        inspect_model(small_model, _altered(small, tmp_path / "label", label_2_in_row_80), rows=200, batch_size=64)


def test_too_few_permutations_for_alpha_is_undecided_not_noise(small, small_model):
    """With 9 permutations the smallest p-value is 0.1 > alpha = 0.05: no pair could be significant, and the verdict
    said 'the ranking may be noise'."""
    result = inspect_model(small_model, small, rows=300, permutations=9)
    line = next(x for x in result.verdicts() if x.startswith("significance"))
    assert "not decided" in line and "1/10 = 0.1" in line and "at least 19 permutations" in line
    line = next(x for x in inspect_model(small_model, small, rows=300, permutations=19, alpha=0.5).verdicts()
                if x.startswith("significance"))
    assert "not decided" not in line


def test_cli_inspect_keeps_each_inspection_apart_and_out_of_data_and_run_folders(small, tmp_path, capsys):
    """Every `autoint inspect` logged under the run's inspection/, beside the files of earlier ones (explained rows
    of another call beside this call's summary); --out may not be the processed or run folder; a split without
    labels said '0 clicked'."""
    import mlflow

    from autoint.train import train

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    result = train(load_config(None, SMALL), small, tmp_path / "run", tracking_uri=uri, progress=False)
    for out in (small, Path(result.run_dir)):
        assert main(["inspect", result.run_dir, "--data", str(small), "--out", str(out), "--rows", "50"]) == 2
        assert "name a folder of the inspection's own" in capsys.readouterr().err
    assert main(["inspect", result.run_dir, "--data", str(small), "--out", str(tmp_path / "a"), "--rows", "50",
                 "--explain", "7", "--tracking-uri", uri]) == 0
    first = next(x for x in capsys.readouterr().out.splitlines() if "artifacts under" in x)
    unlabelled = _altered(small, tmp_path / "nolabel", lambda t: t.drop_columns(["label"]))
    assert main(["inspect", result.run_dir, "--data", str(unlabelled), "--out", str(tmp_path / "b"), "--rows", "1",
                 "--split", "test", "--tracking-uri", uri]) == 0
    printed = capsys.readouterr().out
    assert "inspected 1 row of test (no labels)" in printed
    assert json.loads((tmp_path / "b" / "summary.json").read_text())["positives"] is None
    second = next(x for x in printed.splitlines() if "artifacts under" in x)
    paths = [line.split("artifacts under ")[1].split("/  ")[0] for line in (first, second)]
    assert all(p.startswith("inspections/") and p.endswith("-test") for p in paths)
    client = mlflow.MlflowClient(uri)
    assert paths[0] != paths[1]  # two calls within one second shared a path (a helper's hunt): a random part now
    logged = {a.path for a in client.list_artifacts(result.run_id, paths[1] + "/explanations")}
    assert not logged  # the first call's row 7 is not beside the second's summary
    assert paths[0] + "/explanations/row7.csv" in {
        a.path for a in client.list_artifacts(result.run_id, paths[0] + "/explanations")}

    # --out again: the earlier inspection's files go, the user's own stay (every file under the three folders
    # was removed), and a summary.json that is no inspection's is refused, not overwritten
    a = tmp_path / "a"
    (a / "heatmaps" / "mine.txt").write_text("notes")
    (a / "notes.csv").write_text("mine")
    assert (a / "explanations" / "row7.csv").is_file()
    assert main(["inspect", result.run_dir, "--data", str(small), "--out", str(a), "--rows", "50",
                 "--explain", "3"]) == 0
    assert (a / "heatmaps" / "mine.txt").read_text() == "notes" and (a / "notes.csv").read_text() == "mine"
    assert sorted(p.name for p in (a / "explanations").iterdir()) == ["row3.csv", "row3_top.csv"]
    assert json.loads((a / ".inspection-files.json").read_text()) == sorted(
        str(p.relative_to(a)) for p in a.rglob("*") if p.is_file() and p.name not in ("mine.txt", "notes.csv",
                                                                                        ".inspection-files.json"))
    foreign = tmp_path / "foreign"
    (foreign / "heatmaps").mkdir(parents=True)
    (foreign / "summary.json").write_text('{"my": "notes"}')
    (foreign / "heatmaps" / "keep.png").write_bytes(b"png")
    capsys.readouterr()
    assert main(["inspect", result.run_dir, "--data", str(small), "--out", str(foreign), "--rows", "50"]) == 2
    assert "holds a summary.json that is no autoint inspection's" in capsys.readouterr().err
    assert (foreign / "summary.json").read_text() == '{"my": "notes"}' and (foreign / "heatmaps" / "keep.png").exists()
    # one killed midway (its list of planned files written, no summary.json yet) is removed exactly at the next
    # call, a PNG of the user's own kept; one written before the list (an older summary.json, of fewer keys) by
    # autoint's names
    listed = json.loads((a / ".inspection-files.json").read_text())
    (a / ".inspection-files.json").write_text(json.dumps([*listed, "explanations/row9.csv"]))
    (a / "summary.json").unlink()
    (a / "explanations" / "row9.csv").write_text("a killed call's row")
    (a / "heatmaps" / "mine.png").write_bytes(b"png")
    older = tmp_path / "older"
    (older / "explanations").mkdir(parents=True)
    (older / "summary.json").write_text(json.dumps({"rows": 5, "fields": ["a"], "top_pairs": []}))
    (older / "explanations" / "row1.csv").write_text("old")
    for folder in (a, older):
        assert main(["inspect", result.run_dir, "--data", str(small), "--out", str(folder), "--rows", "50"]) == 0
        assert not (folder / "explanations").exists()  # no rows explained now: the earlier ones are gone
    assert (a / "heatmaps" / "mine.txt").read_text() == "notes" and (a / "heatmaps" / "mine.png").exists()


# ----------------------------------------------------------------------------- a statistician's review
def test_equal_scores_tie_whatever_the_batch_size():
    """In float32 the streamed sums of equal weights differed by rounding from one label vector to another, so ties
    fell above or below the observed score at random: exactly uniform maps gave 'all pairs significant, p = 0.04' at
    one batch size and other p-values at others; and max-T standardised rounding, adjusting p below the raw p."""
    n, f = 309, 7
    y = np.zeros(n)
    y[:26:2] = 1  # 13 clicks, 4 %, all of one kind of row below
    flat = torch.full((n, 1, 2, f, f), 1.0 / f)
    rng = np.random.default_rng(0)
    kinds = torch.softmax(torch.from_numpy(rng.normal(size=(2, 1, 2, f, f))), -1).float()
    twins = kinds[np.arange(n) % 2]  # two kinds of row: the statistic takes few values, with many exact ties
    for maps in (flat, twins):
        found = []
        for batch in (1, 16, 100, 4096):
            test = LabelPermutationTest(y, 199, (1, 2, f, f), seed=3)
            for s in range(0, n, batch):
                test.update([maps[s:s + batch, 0]])
            raw, adjusted, _ = test.p_values()
            assert (adjusted >= raw).all()
            found.append((raw, adjusted))
        for raw, adjusted in found[1:]:
            np.testing.assert_array_equal(raw, found[0][0])
            np.testing.assert_array_equal(adjusted, found[0][1])
    assert (found[0][0] < 0.05).any()  # the twins' last: a real contrast, not all ties
    test = LabelPermutationTest(y, 199, (1, 2, f, f), seed=3)
    test.update([flat[:, 0]])
    raw, adjusted, z = test.p_values()
    assert (raw == 1).all() and (adjusted == 1).all() and (z == 0).all()


def test_uniformity_is_judged_in_each_label_class():
    """Over all rows the majority class decided: 4 % of clicked rows whose attention departed from uniform by a
    whole 1/F read 'indistinguishable from uniform', and so did their heatmap."""
    from autoint.inspection import AttentionAccumulator, _uniformity

    n, f = 300, 7
    labels = torch.zeros(n)
    labels[:12] = 1
    maps = torch.full((n, 1, f, f), 1.0 / f)
    maps[:12, 0, 0, 0], maps[:12, 0, 0, 1] = 2.0 / f, 0.0  # clicked rows: query 0 moves 1/F from key 1 to key 0
    acc = AttentionAccumulator(1, 1, f)
    acc.update([maps], labels)
    u = _uniformity(acc, acc.mean(), {0: acc.mean(0), 1: acc.mean(1)})
    assert u["row_deviation"] < UNIFORM_TOLERANCE  # what the verdict looked at
    assert not u["uniform"] and u["row_deviation_by_label"]["clicked"] == pytest.approx(1.0)
    assert u["label_gap"] == pytest.approx(1.0, rel=1e-6)


def test_a_split_with_too_few_label_arrangements_is_undecided(small, small_model, tmp_path):
    """10 rows with one click allow 10 label vectors: no p-value can be below 0.1, yet the verdict said the smallest
    was 0.005 and 'the ranking may be noise'."""
    import pyarrow as pa

    def ten_rows_one_click(t):
        t = t.slice(0, 10)
        return t.set_column(t.schema.get_field_index("label"), "label",
                            pa.array([1.0] + [0.0] * 9, t.schema.field("label").type))

    result = inspect_model(small_model, _altered(small, tmp_path, ten_rows_one_click))
    assert result.significance["smallest_p"] == pytest.approx(0.1) and result.significance["arrangements"] == 10
    assert (result.pairs["p_value"] >= 0.1 - 1e-12).all() and result.significance["exact"]
    line = next(x for x in result.verdicts() if x.startswith("significance"))
    assert "not decided: 10 rows with 1 clicked allow only 10 arrangements of the labels" in line

    # Drawn at random, the observed arrangement came back a random number of times: p fell below 1/C(N, n1) in 4
    # of 10 seeds, and 19 rows with one click had a pair 'significant' in a third of them (a reviewer's catch).
    # Every arrangement is now taken once: the p-values are the exact test's, whatever the seed.
    rng = np.random.default_rng(0)
    n, f = 19, 4
    maps = _toy_maps(rng, n, f)
    y = np.zeros(n)
    y[7] = 1
    found = []
    for seed in range(5):
        test = LabelPermutationTest(y, 199, (1, 1, f, f), seed=seed)
        test.update([maps[:, 0]])
        raw, adjusted, _ = test.p_values()
        found.append((raw, adjusted))
        assert test.exact and test.permutations == 18 and test.smallest_p() == pytest.approx(1 / 19)
        assert (raw >= 1 / 19 - 1e-12).all() and (adjusted > 0.05).all()
    for raw, adjusted in found[1:]:
        np.testing.assert_array_equal(raw, found[0][0])
        np.testing.assert_array_equal(adjusted, found[0][1])
    scores = test.pair_scores()  # (19, M): one row per arrangement
    np.testing.assert_allclose(found[0][0], (scores >= scores[0] - 1e-9).mean(0))


def test_the_verdict_says_which_rows_were_tested_and_warns_on_fitted_splits(small, small_model):
    """The score covered every row and its p-value the first significance_rows, side by side in pairs.csv without a
    word; p-values on the train split, whose labels the model was fitted to, came without a caution (shuffled
    labels gave a significant pair in 10 of 20 seeds there)."""
    result = inspect_model(small_model, small, rows=300, permutations=19, significance_rows=100)
    assert "over the first 100 of 300 rows" in result.verdicts()[0]
    assert "first 100 of the 300 rows inspected" in result.significance["note"]
    assert not any("caution" in line for line in result.verdicts())
    train = inspect_model(small_model, small, split="train", rows=300, permutations=19)
    assert "the model was fitted to the train split's labels" in train.significance["caveat"]
    assert any(line.startswith("significance: caution: the model was fitted") for line in train.verdicts())
    assert "the valid split chose the best epoch" in inspect_model(small_model, small, split="valid", rows=300,
                                                                   permutations=19).significance["caveat"]


def test_the_fitted_split_caution_is_for_the_folder_the_model_trained_on(small, small_model, monkeypatch):
    """The caution went by the split's name alone: a train split of a folder prepared from a log the model never
    saw got it too (a reviewer's catch). A checkpoint records what it trained on (train.data_identity)."""
    import autoint.inspection as insp
    from autoint.data import data_identity

    def loaded(trained_on):
        return lambda model, uri=None: (small_model, {"model": "m", "trained_on": trained_on}, None)

    monkeypatch.setattr(insp, "_load_model", loaded(data_identity(small)))
    assert "caveat" in inspect_model("m", small, split="train", rows=300, permutations=19).significance
    monkeypatch.setattr(insp, "_load_model", loaded({"input": "another log"}))
    result = inspect_model("m", small, split="train", rows=300, permutations=19)
    assert "caveat" not in result.significance and "trained_on" not in result.meta


def test_plotting_leaves_the_callers_matplotlib_as_it_was(tmp_path):
    """Importing autoint.plots switched the process to the Agg backend (a notebook's inline plots stopped showing),
    and a study's plots left Optuna's ggplot style on the caller's figures (a helper's hunt)."""
    import subprocess
    import sys

    import matplotlib.pyplot as plt
    import optuna

    from autoint.plots import heatmap, study_plots

    code = "import matplotlib; matplotlib.use('svg'); import autoint.plots; print(matplotlib.get_backend())"
    env = {k: v for k, v in os.environ.items() if k != "MPLBACKEND"}
    assert subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          check=True).stdout.strip() == "svg"
    before, figures = dict(plt.rcParams), plt.get_fignums()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize")
    study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=3)
    written, _ = study_plots(study, tmp_path / "plots", importances=False)
    heatmap(pd.DataFrame([[0.5, 0.5], [0.2, 0.8]], index=["a", "b"], columns=["a", "b"]), tmp_path / "h.png")
    assert [p.name for p in written] == ["optimization_history.png"] and (tmp_path / "h.png").is_file()
    assert dict(plt.rcParams) == before and plt.get_fignums() == figures


def test_one_field_has_no_pairs_to_test_and_says_so(tmp_path):
    """The permutation test's maximum over no pairs failed with a traceback: `inspect` on a log of one field, and
    `train` after a finished run, as it inspects the planted crosses (a helper's hunt)."""
    folder = prepare(tmp_path, "data.format=synthetic",
                     "data.synthetic={n_rows: 600, n_categorical: 1, n_numeric: 0, n_crosses: 0, seed: 5}")
    model = AutoInt(Schema.load(folder / "schema.json"), ModelConfig(embedding_dim=4, num_layers=1, num_heads=2,
                                                                     head_dim=4)).eval()
    result = inspect_model(model, folder, "test", permutations=99)
    assert result.significance == {"skipped": "one field: no field pairs"} and len(result.pairs) == 0
