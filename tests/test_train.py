"""Training end to end: Lightning, MLflow (a real server and a real model server), resume, DDP.

One small synthetic log (a few thousand rows, a handful of fields) is prepared
once per session; every run here trains on it for a couple of epochs.
"""

from __future__ import annotations

import inspect
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F
from torchmetrics.functional.classification import binary_auroc

from autoint.calibration import BUFFER, Unfitted, fit_platt, raw_logits
from autoint.checkpoint import load_checkpoint, read_checkpoint
from autoint.cli import main
from autoint.config import load_config
from autoint.encoder import Encoder
from autoint.train import data_module, evaluate, train

AUTOINT = [sys.executable, "-m", "autoint.cli"]

SMALL = [
    "data.format=synthetic",
    "data.synthetic={n_rows: 6000, n_categorical: 6, n_numeric: 2, n_crosses: 2, seed: 7}",
    "model.num_layers=2",
    "model.head_dim=8",
    "model.embedding_dim=8",
    "train.batch_size=256",
    "train.max_epochs=3",
    "train.patience=5",
    "train.seed=11",
]


def small_config(*extra: str):
    return load_config(None, [*SMALL, *extra])


@pytest.fixture(scope="session")
def processed(tmp_path_factory) -> Path:
    from autoint.train import ensure_processed

    root = tmp_path_factory.mktemp("synthetic")
    cfg = small_config(f"data.raw={root / 'raw' / 'synthetic.parquet'}")
    return ensure_processed(cfg, root / "processed", None, progress=False)


@pytest.fixture(scope="session")
def raw_rows(processed) -> pd.DataFrame:
    from autoint.predict import raw_example

    return raw_example(processed, rows=50)


def sqlite_uri(folder: Path) -> str:
    return f"sqlite:///{folder / 'mlflow.db'}"


@pytest.fixture(scope="session")
def trained(processed, tmp_path_factory):
    from autoint.train import train

    root = tmp_path_factory.mktemp("run")
    # fp32 on any CPU (auto is bf16 where it is native): the exactness tests below compare fp32 scores
    result = train(small_config("train.precision=32-true"), processed, root / "run", tracking_uri=sqlite_uri(root),
                   progress=False)
    return result


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url: str, seconds: float, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            output = proc.stdout.read() if proc.stdout else ""
            raise RuntimeError(f"server exited early with {proc.returncode}: {output}")
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(0.5)
    raise TimeoutError(f"{url} did not answer within {seconds} s")


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


# ----------------------------------------------------------------------------- a whole run
def test_a_run_leaves_checkpoint_metrics_and_a_complete_mlflow_run(trained):
    from autoint import tracking

    out = Path(trained.run_dir)
    for name in ("run.json", "config.yaml", "metrics.json", "checkpoints/best.ckpt", "checkpoints/last.ckpt"):
        assert (out / name).is_file(), name
    assert 0.5 < trained.test_metrics["test_auc"] <= 1.0
    assert 0.0 < trained.test_metrics["test_logloss"] < 1.0

    info = tracking.run_info(trained.tracking_uri, trained.run_id)
    assert info["status"] == "FINISHED"
    assert info["params"]["model.num_layers"] == "2" and info["params"]["train.lr"] == "0.001"
    assert info["metrics"]["test_auc"] == pytest.approx(trained.test_metrics["test_auc"])
    history = tracking.metric_history(trained.tracking_uri, trained.run_id, "val_auc")
    assert [step for step, _ in history] == list(range(trained.epochs))
    assert len(tracking.metric_history(trained.tracking_uri, trained.run_id, "train_loss")) == trained.epochs

    import mlflow

    mlflow.set_tracking_uri(trained.tracking_uri)
    names = {a.path for a in mlflow.MlflowClient().list_artifacts(trained.run_id)}
    assert {"config.yaml", "schema.json", "encoder.json", "metrics.json", "checkpoints"} <= names
    # Named after the run folder: MLflow's random name came from the random module the training seed had seeded,
    # so every run of a seed had the same one (a helper's eight runs were all 'chill-owl-867').
    assert mlflow.MlflowClient().get_run(trained.run_id).info.run_name == "run"


def test_the_best_checkpoint_alone_rebuilds_the_model(trained, processed):
    from autoint.checkpoint import load_checkpoint
    from autoint.train import evaluate

    _, cfg, schema, encoder = load_checkpoint(trained.best_checkpoint)
    assert cfg.model.num_layers == 2 and schema.names
    assert Encoder.from_state(encoder).schema == schema and "vocabulary.parquet" in encoder  # vocabularies as a file
    metrics = evaluate(trained.best_checkpoint, processed, "test", progress=False)
    assert metrics["test_auc"] == pytest.approx(trained.test_metrics["test_auc"], abs=1e-6)


def test_same_seed_and_data_give_the_same_metrics(processed, trained, tmp_path):
    from autoint.train import train

    again = train(small_config("train.precision=32-true"), processed, tmp_path / "again",
                  tracking_uri=sqlite_uri(tmp_path), progress=False)
    assert again.test_metrics == trained.test_metrics
    other = train(small_config("train.precision=32-true", "train.seed=12"), processed, tmp_path / "other",
                  tracking_uri=sqlite_uri(tmp_path),
                  progress=False)
    assert other.test_metrics != trained.test_metrics


def test_existing_run_folder_is_not_overwritten(processed, trained):
    from autoint.train import RunFolderError, train

    with pytest.raises(RunFolderError, match="--resume"):
        train(small_config(), processed, trained.run_dir, tracking_uri="sqlite:///unused.db", progress=False)


# ----------------------------------------------------------------------------- scoring raw rows
def test_pyfunc_model_scores_raw_rows_including_unseen_values(trained, raw_rows):
    import mlflow

    from autoint.predict import Scorer

    mlflow.set_tracking_uri(trained.tracking_uri)
    model = mlflow.pyfunc.load_model(trained.model_uri)
    rows = raw_rows.drop(columns=["label"], errors="ignore").head(20).reset_index(drop=True)
    probs = np.asarray(model.predict(rows)).ravel()
    assert probs.shape == (20,) and np.all((probs > 0) & (probs < 1))
    direct = Scorer.from_checkpoint(trained.best_checkpoint).score_frame(rows)
    np.testing.assert_allclose(probs, direct, rtol=1e-6)

    unseen = rows.copy()
    cat = "c00"  # a categorical field of the synthetic log
    unseen[cat] = "never-seen-value"
    unseen_probs = np.asarray(model.predict(unseen)).ravel()
    assert np.isfinite(unseen_probs).all() and not np.allclose(unseen_probs, probs)


def test_predict_cli_scores_a_raw_csv(trained, raw_rows, tmp_path, capsys):
    rows = raw_rows.drop(columns=["label"], errors="ignore")
    rows.to_csv(tmp_path / "rows.csv", index=False)
    assert main(["predict", trained.run_dir, "--input", str(tmp_path / "rows.csv"),
                 "--output", str(tmp_path / "scores.csv")]) == 0
    scores = pd.read_csv(tmp_path / "scores.csv")
    assert list(scores.columns) == ["probability"] and len(scores) == len(rows)
    assert scores["probability"].between(0, 1).all()

    rows.drop(columns=[rows.columns[0]]).to_csv(tmp_path / "short.csv", index=False)
    assert main(["predict", trained.run_dir, "--input", str(tmp_path / "short.csv"),
                 "--output", str(tmp_path / "x.csv")]) == 2
    assert repr(rows.columns[0]) in capsys.readouterr().err


_LIGHT_SCORING = """
import sys
import pandas as pd
from autoint.cli import main
from autoint.predict import Scorer
assert main(["predict", sys.argv[1], "--input", sys.argv[2], "--output", sys.argv[3]]) == 0
Scorer.from_checkpoint(sys.argv[4]).score_frame(pd.read_csv(sys.argv[2]).head(1))
training_stack = sorted({m.split(".")[0] for m in sys.modules} & {"lightning", "torchmetrics", "mlflow", "duckdb"})
if sys.argv[5] == "pyfunc":  # the served model: mlflow loads it, and it brings no training stack
    import mlflow
    mlflow.set_tracking_uri(sys.argv[6])
    mlflow.pyfunc.load_model(sys.argv[7]).predict(pd.read_csv(sys.argv[2]).head(3))
    training_stack = sorted({m.split(".")[0] for m in sys.modules} & {"lightning", "torchmetrics", "duckdb"})
print(training_stack)
"""


@pytest.mark.parametrize("how", ["cli", "pyfunc"])
def test_scoring_imports_neither_lightning_nor_mlflow(trained, raw_rows, tmp_path, how):
    rows = raw_rows.drop(columns=["label"], errors="ignore").head(50)
    rows.to_csv(tmp_path / "rows.csv", index=False)
    proc = subprocess.run([sys.executable, "-c", _LIGHT_SCORING, trained.run_dir, str(tmp_path / "rows.csv"),
                           str(tmp_path / "scores.csv"), trained.best_checkpoint, how, trained.tracking_uri,
                           trained.model_uri], capture_output=True, text=True, check=False, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "[]"


def test_evaluate_cli_and_mlflow_model_uri(trained, processed, capsys):
    os.environ["MLFLOW_TRACKING_URI"] = trained.tracking_uri
    try:
        assert main(["evaluate", trained.model_uri, "--data", str(processed), "--quiet"]) == 0
    finally:
        del os.environ["MLFLOW_TRACKING_URI"]
    out = capsys.readouterr().out
    assert f"{trained.test_metrics['test_auc']:.4f}" in out


def test_evaluate_and_inspect_refuse_a_folder_encoded_with_other_vocabularies(trained, processed, tmp_path, capsys):
    """The same schema with a vocabulary in another order (a folder prepared from other days, say) gives ids that
    stand for other values: evaluate scored it silently (AUC 0.53 against 0.67 in a helper's run)."""
    import shutil

    from autoint.datasets.errors import DataError
    from autoint.inspection import inspect_model

    other = tmp_path / "other"
    shutil.copytree(processed, other)
    enc = Encoder.load(other)
    name = next(n for n, v in enc.vocabularies_.items() if len(v._values) > 1)
    enc.vocabularies_[name]._values = enc.vocabularies_[name]._values[::-1]
    enc.save(other)
    with pytest.raises(DataError, match=rf"encoded otherwise .*ids that stand for other values in '{name}'"):
        evaluate(trained.best_checkpoint, other, "test", progress=False)
    with pytest.raises(DataError, match=r"inspect the processed folder the model was trained from"):
        inspect_model(trained.best_checkpoint, other, rows=10, permutations=0)
    assert main(["evaluate", str(trained.best_checkpoint), "--data", str(other), "--quiet"]) == 2
    assert "autoint evaluate: error:" in capsys.readouterr().err
    shutil.copy(processed / "vocabulary.parquet", other)  # the same ids again, in a file of its own
    shutil.copy(processed / "encoder.json", other)
    assert evaluate(trained.best_checkpoint, other, "test", progress=False)["test_auc"] == pytest.approx(
        trained.test_metrics["test_auc"], abs=1e-6)


# ----------------------------------------------------------------------------- real MLflow servers
def test_tracking_server_on_loopback_and_unreachable_server(processed, tmp_path, capsys):
    from autoint import tracking
    from autoint.train import train

    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
         "--backend-store-uri", sqlite_uri(tmp_path), "--artifacts-destination", str(tmp_path / "artifacts"),
         "--workers", "1"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )
    uri = f"http://127.0.0.1:{port}"
    try:
        wait_http(f"{uri}/health", 90, server)
        result = train(small_config("train.max_epochs=1"), processed, tmp_path / "run", tracking_uri=uri,
                       progress=False)
        info = tracking.run_info(uri, result.run_id)
        assert info["status"] == "FINISHED" and "test_auc" in info["metrics"]
    finally:
        stop(server)

    # Now nothing listens there: one clear line, before any training.
    capsys.readouterr()
    started = time.monotonic()
    code = main(["train", str(tmp_path / "run" / "config.yaml"), "--data", str(processed),
                 "--out", str(tmp_path / "run2"), "--tracking-uri", uri, "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and "unreachable" in err and uri in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "run2" / "checkpoints").exists()
    assert time.monotonic() - started < 30


def test_mlflow_models_serve_answers_raw_rows(trained, raw_rows, tmp_path):
    port = free_port()
    # The scoring server runs `uvicorn` from PATH: that of this interpreter's environment.
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    env = {**os.environ, "MLFLOW_TRACKING_URI": trained.tracking_uri, "PATH": path}
    server = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "models", "serve", "-m", trained.model_uri, "--env-manager", "local",
         "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, start_new_session=True,
    )
    try:
        wait_http(f"http://127.0.0.1:{port}/ping", 120, server)
        rows = raw_rows.drop(columns=["label"], errors="ignore").head(3)
        body = json.dumps({"dataframe_split": json.loads(rows.to_json(orient="split", index=False))}).encode()
        request = urllib.request.Request(f"http://127.0.0.1:{port}/invocations", data=body,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as response:
            answer = json.loads(response.read())
    finally:
        stop(server)
    predictions = np.asarray(answer["predictions"], dtype=float).ravel()
    assert predictions.shape == (3,) and np.all((predictions > 0) & (predictions < 1))


# ----------------------------------------------------------------------------- faults and scale
def _cli_train(config: Path, data: Path, out: Path, uri: str, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([*AUTOINT, "train", str(config), "--data", str(data), "--out", str(out),
                             "--tracking-uri", uri, "--quiet", *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)


def _write_config(path: Path, *extra: str) -> Path:
    small_config(*extra).save(path)
    return path


def test_a_killed_run_resumes_into_the_same_mlflow_run_with_the_same_metrics(processed, tmp_path):
    from autoint import tracking

    uri = sqlite_uri(tmp_path)
    config = _write_config(tmp_path / "config.yaml", "train.max_epochs=4")
    reference = _cli_train(config, processed, tmp_path / "reference", uri)
    output = reference.communicate(timeout=300)[0]
    assert reference.returncode == 0, output
    # On synthetic data the run ends by comparing the pairs found with the planted ones.
    assert "test AUC" in output and "planted crosses (2)" in output
    assert (tmp_path / "reference" / "inspection" / "pairs.csv").is_file()

    victim = _cli_train(config, processed, tmp_path / "victim", uri)
    last = tmp_path / "victim" / "checkpoints" / "last.ckpt"
    deadline = time.monotonic() + 240
    while not last.is_file() and time.monotonic() < deadline and victim.poll() is None:
        time.sleep(0.05)
    assert last.is_file(), "no epoch finished before the deadline"
    os.killpg(victim.pid, signal.SIGKILL)  # mid-training: after epoch 1's checkpoint, before the end
    victim.wait()
    assert not (tmp_path / "victim" / "metrics.json").exists()

    resumed = _cli_train(config, processed, tmp_path / "victim", uri, "--resume")
    assert resumed.wait(timeout=300) == 0, resumed.stdout.read()

    ref = json.loads((tmp_path / "reference" / "metrics.json").read_text())
    got = json.loads((tmp_path / "victim" / "metrics.json").read_text())
    # Same data order (seed + epoch), same dropout stream, restored optimiser: equal to 1e-6.
    assert got["test_auc"] == pytest.approx(ref["test_auc"], abs=1e-6)
    assert got["test_logloss"] == pytest.approx(ref["test_logloss"], abs=1e-6)
    run_id = json.loads((tmp_path / "victim" / "run.json").read_text())["run_id"]
    info = tracking.run_info(uri, run_id)
    assert info["status"] == "FINISHED" and info["metrics"]["test_auc"] == pytest.approx(got["test_auc"])
    assert len({r["run_id"] for r in _runs(uri)}) == 2  # reference + victim: resume made no new run


def _runs(uri: str) -> list[dict]:
    import mlflow

    mlflow.set_tracking_uri(uri)
    return [{"run_id": r.info.run_id} for r in mlflow.search_runs(search_all_experiments=True, output_format="list")]


def fingerprints(batch: dict) -> list[str]:
    """One string per row of a batch: its ids, values and label."""
    parts = [batch["categorical"].double(), batch["numeric"].double(), batch["label"].double()[:, None]]
    return [",".join(f"{v:.6g}" for v in row) for row in torch.cat(parts, 1).tolist()]


_DDP_SCRIPT = """
import json, sys
from pathlib import Path
import lightning as L
import torch
from autoint.config import load_config
from autoint.train import train

{fingerprints}

class Record(L.Callback):
    def __init__(self, out):
        self.out, self.seen = Path(out), {}
    def on_train_batch_start(self, trainer, module, batch, idx):
        self.seen.setdefault(f"train{trainer.current_epoch}", []).extend(fingerprints(batch))
        self.seen.setdefault(f"steps{trainer.current_epoch}", []).append(len(batch["label"]))
    def on_validation_batch_start(self, trainer, module, batch, idx, dataloader_idx=0):
        self.seen.setdefault(f"valid{trainer.current_epoch}", []).extend(fingerprints(batch))
    def on_fit_end(self, trainer, module):
        self.seen["sparse"] = module.model.embedding.table.sparse
        self.seen["params"] = {n: p.detach().double().sum().item() for n, p in module.named_parameters()}
        (self.out / f"rank{trainer.global_rank}.json").write_text(json.dumps(self.seen))

cfg = load_config(sys.argv[1], ["train.max_epochs=2", "train.devices=2", "train.strategy=ddp", "train.accelerator=cpu",
                                *sys.argv[5:]])
train(cfg, sys.argv[2], Path(sys.argv[3]) / "run", tracking_uri=sys.argv[4], progress=False,
      callbacks=[Record(sys.argv[3])])
""".replace("{fingerprints}", inspect.getsource(fingerprints))


def test_ddp_on_two_cpu_processes_sees_every_row_once(processed, tmp_path):
    """Each rank streams its own share: every training row once per epoch across the two ranks,
    in the same number of steps on each, every validation row scored once; metrics near one process's."""
    import pyarrow.parquet as pq

    from autoint.batch import tensors_from_table
    from autoint.schema import Schema

    uri = sqlite_uri(tmp_path)
    config = _write_config(tmp_path / "config.yaml", "train.max_epochs=2")
    single = _cli_train(config, processed, tmp_path / "single", uri)
    assert single.wait(timeout=300) == 0, single.stdout.read()
    (tmp_path / "script.py").write_text(_DDP_SCRIPT)
    ddp = subprocess.run([sys.executable, str(tmp_path / "script.py"), str(config), str(processed), str(tmp_path),
                          uri], capture_output=True, text=True, timeout=400, check=False)
    assert ddp.returncode == 0, ddp.stderr[-4000:]
    schema = Schema.load(processed / "schema.json")
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    for split in ("train", "valid"):
        expected = sorted(fingerprints(tensors_from_table(pq.read_table(processed / f"{split}.parquet"), schema)))
        for epoch in (0, 1):
            got = ranks[0][f"{split}{epoch}"] + ranks[1][f"{split}{epoch}"]
            assert sorted(got) == expected, f"{split}, epoch {epoch}"
    assert all(len(ranks[0][f"steps{e}"]) == len(ranks[1][f"steps{e}"]) for e in (0, 1))
    assert ranks[0]["params"] == pytest.approx(ranks[1]["params"], rel=1e-6)  # gradients all-reduced
    one = json.loads((tmp_path / "single" / "metrics.json").read_text())
    two = json.loads((tmp_path / "run" / "metrics.json").read_text())
    # Two ranks see other batches than one process does (each a share of the epoch's stream),
    # so the metrics agree as two orders of the same data do, not to rounding.
    assert two["test_auc"] == pytest.approx(one["test_auc"], abs=0.02)



def test_sparse_adam_under_ddp_all_reduces_the_sparse_gradients(processed, tmp_path):
    """Two CPU ranks with sparse embedding gradients (gloo all-reduces them): the tables are sparse
    on both, and both end with the same weights although each saw other rows."""
    (tmp_path / "script.py").write_text(_DDP_SCRIPT)
    config = _write_config(tmp_path / "config.yaml", "train.max_epochs=1")
    ddp = subprocess.run([sys.executable, str(tmp_path / "script.py"), str(config), str(processed), str(tmp_path),
                          sqlite_uri(tmp_path), "train.optimizer=sparse_adam", "train.max_epochs=1"],
                         capture_output=True, text=True, timeout=400, check=False)
    assert ddp.returncode == 0, ddp.stderr[-4000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert ranks[0]["sparse"] and ranks[1]["sparse"]
    assert sorted(ranks[0]["train0"]) != sorted(ranks[1]["train0"])  # each rank its own share
    assert ranks[0]["params"] == pytest.approx(ranks[1]["params"], rel=1e-6)
    record = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert record["test_auc"] > 0.55
    # what ran, where a config says auto (a helper's hunt: config.yaml, params and metrics.json all said auto)
    assert record["optimizer"] == "sparse_adam" and record["precision"] in ("32-true", "bf16-mixed")


def test_trainer_options_may_not_override_the_config(processed, tmp_path):
    from autoint.train import train

    with pytest.raises(ValueError, match="max_epochs"):
        train(small_config(), processed, tmp_path / "run", tracking_uri=sqlite_uri(tmp_path), progress=False,
              trainer_options={"max_epochs": 100, "limit_train_batches": 2})
    assert not (tmp_path / "run").exists()  # refused before anything was written
    # An option Trainer does not take, or of the wrong type: a bare TypeError after the MLflow run had been made
    # (left FAILED, with a lock file in the run folder); now a ConfigError before anything exists.
    from autoint.config import ConfigError

    for options, said in (({"no_such_option": 1}, "no_such_option"), ({"limit_train_batches": "x"}, "'x'")):
        with pytest.raises(ConfigError, match=f"trainer_options=.*{said}"):
            train(small_config(), processed, tmp_path / "run", tracking_uri=sqlite_uri(tmp_path), progress=False,
                  trainer_options=options)
        assert not (tmp_path / "run").exists() and not (tmp_path / "mlflow.db").exists()


# --------------------------------------------------------------------------- calibrated probabilities

def test_platt_scaling_recovers_a_known_pair_and_refuses_what_it_cannot_fit() -> None:
    g = torch.Generator().manual_seed(0)
    z = torch.randn(200_000, generator=g) * 2
    y = torch.bernoulli(torch.sigmoid(0.5 * z - 0.3), generator=g)
    a, b, rows = fit_platt(z, y)
    assert a == pytest.approx(0.5, abs=0.02) and b == pytest.approx(-0.3, abs=0.02) and rows == 200_000
    with pytest.raises(Unfitted, match="200,000 clicks and 0 non-clicks"):  # one class: nothing to fit
        fit_platt(z, torch.ones_like(z))
    with pytest.raises(Unfitted, match=r"slope is -0\.5.*reverse its ranking"):
        fit_platt(z, 1 - y)


def test_the_served_probability_is_calibrated_on_validation_and_ranks_as_before(processed: Path, tmp_path: Path):
    result = train(small_config("train.precision=32-true", "train.lr=0.05"), processed, tmp_path / "run",
                   tracking_uri=sqlite_uri(tmp_path), progress=False)
    ckpt = read_checkpoint(result.best_checkpoint)
    a, b = ckpt["state_dict"][BUFFER].tolist()
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert (metrics["calibration_a"], metrics["calibration_b"]) == pytest.approx((a, b)) and (a, b) != (1.0, 0.0)
    model, cfg, *_ = load_checkpoint(result.best_checkpoint)
    dm = data_module(cfg, processed)
    dm.setup("fit")
    for split, metric in (("valid", None), ("test", "test")):
        z, y = raw_logits(model, dm.whole_split(split))
        raw_loss = F.binary_cross_entropy_with_logits(z, y).item()
        cal_loss = F.binary_cross_entropy_with_logits(a * z + b, y).item()
        if metric is None:  # fitted here: the identity was a candidate, so never worse
            assert cal_loss <= raw_loss + 1e-6
        else:  # what train and evaluate report: the calibrated logloss, the plain ranking
            assert result.test_metrics["test_logloss"] == pytest.approx(cal_loss, abs=1e-5)
            assert result.test_metrics["test_auc"] == pytest.approx(binary_auroc(torch.sigmoid(z), y.long()).item(),
                                                                    abs=1e-6)
            again = evaluate(result.best_checkpoint, processed, "test", progress=False)
            assert again["test_logloss"] == pytest.approx(cal_loss, abs=1e-5)
    with torch.no_grad():  # the model itself serves a * z + b
        batch = next(iter(dm.whole_split("test")))
        assert torch.allclose(model(batch), a * raw_logits(model, [batch])[0] + b, atol=1e-5)


def test_a_checkpoint_from_before_calibration_serves_its_own_probability(trained, tmp_path: Path) -> None:
    ckpt = read_checkpoint(trained.best_checkpoint)
    del ckpt["state_dict"][BUFFER]
    old = tmp_path / "old.ckpt"
    torch.save(ckpt, old)
    model, *_ = load_checkpoint(old)
    assert model.logit_calibration.tolist() == [1.0, 0.0]


def test_calibration_none_keeps_the_model_s_own_probability(processed: Path, tmp_path: Path) -> None:
    result = train(small_config("train.calibration=none", "train.max_epochs=1"), processed, tmp_path / "run",
                   tracking_uri=sqlite_uri(tmp_path), progress=False)
    assert read_checkpoint(result.best_checkpoint)["state_dict"][BUFFER].tolist() == [1.0, 0.0]
    assert "calibration_a" not in json.loads((tmp_path / "run" / "metrics.json").read_text())


def test_training_sees_the_plain_logit_even_when_resumed_from_a_calibrated_checkpoint(trained) -> None:
    """A run whose last.ckpt is lost resumes from best.ckpt, which holds a Platt pair: training must not go
    through it (it is fitted again once training ends)."""
    from autoint.system import CTRSystem

    ckpt = read_checkpoint(trained.best_checkpoint)
    meta = ckpt["autoint"]
    system = CTRSystem(meta["config"], meta["schema"], meta.get("encoder"))
    system.load_state_dict(ckpt["state_dict"])
    assert system.model.logit_calibration.tolist() != [1.0, 0.0]
    system.on_train_start()
    assert system.model.logit_calibration.tolist() == [1.0, 0.0]


def test_a_run_resumed_to_train_further_logs_the_model_of_its_new_best_epoch(processed, raw_rows, tmp_path):
    """Once logged, a run's model is not logged again on --resume, unless the run trained further and its best
    epoch (and so its weights and Platt pair) changed: then the MLflow model is the new best checkpoint's."""
    import mlflow

    from autoint import tracking
    from autoint.predict import Scorer

    first = train(small_config("train.max_epochs=1", "train.lr=0.05"), processed, tmp_path / "run",
                  tracking_uri=sqlite_uri(tmp_path), progress=False)
    further = train(small_config("train.max_epochs=3", "train.lr=0.05"), processed, tmp_path / "run", resume=True,
                    tracking_uri=sqlite_uri(tmp_path), progress=False)
    assert further.run_id == first.run_id and further.best_epoch > 1
    # the seconds reported are this command's, for the epochs it ran: said so (after a resume with nothing left
    # to run, train printed "0.0 s" as if the run had taken none)
    assert (first.epochs_before, further.epochs_before) == (0, 1) and further.epochs == 3
    tags = tracking.run_info(further.tracking_uri, further.run_id)["tags"]
    assert tags["autoint.model_epoch"] == str(further.best_epoch)
    # The run folder's and the logged config.yaml say the max_epochs the run trained to; the test figures of
    # each pass sit at the step of the epochs trained, not both at step 0 (a helper's hunt).
    assert load_config(tmp_path / "run" / "config.yaml").train.max_epochs == 3
    history = tracking.metric_history(further.tracking_uri, further.run_id, "test_auc")
    assert [step for step, _ in history] == [1, further.epochs]
    mlflow.set_tracking_uri(further.tracking_uri)
    rows = raw_rows.drop(columns=["label"], errors="ignore").head(20).reset_index(drop=True)
    served = np.asarray(mlflow.pyfunc.load_model(further.model_uri).predict(rows)).ravel()
    np.testing.assert_allclose(served, Scorer.from_checkpoint(further.best_checkpoint).score_frame(rows), rtol=1e-6)


def test_train_reports_the_test_figures_evaluate_gives_whatever_it_trained_in(processed, tmp_path):
    """Trained under bf16 autocast, the run's test pass still scores in fp32, as evaluate, predict and serve do
    (before, train reported its bf16 figures: 0.6416 against evaluate's 0.6402 on a helper's log)."""
    result = train(small_config("train.precision=bf16-mixed", "train.max_epochs=2"), processed, tmp_path / "run",
                   tracking_uri=sqlite_uri(tmp_path), progress=False)
    again = evaluate(result.best_checkpoint, processed, "test", progress=False)
    assert result.test_metrics["test_auc"] == pytest.approx(again["test_auc"], abs=1e-6)
    assert result.test_metrics["test_logloss"] == pytest.approx(again["test_logloss"], abs=1e-6)


def test_trains_epochs_line_says_what_this_command_ran_after_a_resume() -> None:
    """After a resume, the seconds are this command's: they were printed as the run's ('0.0 s' when a run killed
    after its last checkpoint was resumed with no epoch left to run; a helper's hunt)."""
    from autoint.cli import _epochs_line
    from autoint.train import TrainResult

    cfg = small_config("train.max_epochs=3")
    result = TrainResult("r", "d", "u", "id", "b", None, {}, epochs=3, fit_seconds=12.3, best_epoch=2)
    assert _epochs_line(result, cfg).endswith("(train.max_epochs = 3 reached; 12 s)")
    result.epochs_before = 1
    assert _epochs_line(result, cfg).endswith("(train.max_epochs = 3 reached; resumed after epoch 1: 12 s for epochs "
                                              "2-3)")
    result.epochs_before, result.fit_seconds = 3, 0.01
    assert _epochs_line(result, cfg).endswith("(train.max_epochs = 3 reached; resumed: no epoch was left to run)")
    # patience 0 stops as 1 does, after one epoch without a better AUC: it said "in the last 0 epochs" (a hunt)
    result.early_stopped, result.epochs_before = True, 0
    assert "no better validation AUC in the last 1 epoch;" in _epochs_line(result, small_config("train.patience=0"))


def test_train_leaves_the_callers_mlflow_as_it_was_inside_their_own_run_too(processed, tmp_path, monkeypatch):
    """MLflow 3's set_tracking_uri also sets MLFLOW_TRACKING_URI, which ranks above a config's tracking_uri: the next
    train() of the process went to the store of the one before, and a caller's own URI was undone. And inside a
    caller's `with mlflow.start_run():` the whole training ran, then logging the model failed ('already active')."""
    import mlflow

    from autoint import tracking

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    with tracking._fluent_uri(sqlite_uri(tmp_path / "a")):
        assert os.environ["MLFLOW_TRACKING_URI"] == sqlite_uri(tmp_path / "a")
    assert "MLFLOW_TRACKING_URI" not in os.environ

    mine = f"sqlite:///{tmp_path / 'mine.db'}"
    mlflow.set_tracking_uri(mine)
    mlflow.set_experiment("notebook")  # start_run(run_id=ours) refused a run of another experiment than this one
    import random

    for k in ("PL_GLOBAL_SEED", "PL_SEED_WORKERS", "CUBLAS_WORKSPACE_CONFIG"):
        monkeypatch.delenv(k, raising=False)
    random.seed(123)
    np.random.seed(123)  # noqa: NPY002 (the caller's global state is the point)
    torch.manual_seed(123)
    expected = (random.random(), np.random.random(), torch.rand(1).item())  # noqa: NPY002
    try:
        with mlflow.start_run() as outer:  # (its random run name draws from random: seeded after it)
            random.seed(123)
            np.random.seed(123)  # noqa: NPY002
            torch.manual_seed(123)
            result = train(small_config("train.max_epochs=1"), processed, tmp_path / "run",
                           tracking_uri=sqlite_uri(tmp_path), progress=False)
            # and the rest of the process as it was: random states, deterministic flags, Lightning's variables
            assert (random.random(), np.random.random(), torch.rand(1).item()) == expected  # noqa: NPY002
            assert not torch.are_deterministic_algorithms_enabled()
            assert not any(k in os.environ for k in ("PL_GLOBAL_SEED", "PL_SEED_WORKERS", "CUBLAS_WORKSPACE_CONFIG"))
            assert mlflow.active_run().info.run_id == outer.info.run_id
            assert mlflow.get_tracking_uri() == mine and os.environ["MLFLOW_TRACKING_URI"] == mine
        assert result.model_uri == f"runs:/{result.run_id}/model"
        assert tracking.run_info(result.tracking_uri, result.run_id)["status"] == "FINISHED"
    finally:
        from mlflow.tracking import fluent

        fluent._active_experiment_id = None
        mlflow.set_tracking_uri(None)


class _RunsACommand:
    """A pickle that would run a command when loaded unsafely."""

    def __reduce__(self):
        import os

        return (os.system, ("echo loaded-unsafely",))


def test_a_checkpoint_carrying_code_is_named_as_such_and_never_run(tmp_path, capfd):
    """The safe load refused it, but it was called 'not a whole torch.save file' (torch's text for a blocked module
    differs from the one for another type; a helper's hunt)."""
    import argparse

    from autoint.checkpoint import CheckpointError

    torch.save({"autoint": {}, "state_dict": {}, "x": _RunsACommand()}, tmp_path / "code.ckpt")
    torch.save({"autoint": {}, "x": argparse.Namespace()}, tmp_path / "type.ckpt")
    for name, what in (("code", r"posix\.system whose module posix is blocked"), ("type", r"argparse\.Namespace")):
        with pytest.raises(CheckpointError, match=rf"{name}\.ckpt: not a readable autoint checkpoint \(it holds a "
                                                  rf"type a safe load refuses: (?i:unsupported global).*{what}"):
            read_checkpoint(tmp_path / f"{name}.ckpt")
    assert "loaded-unsafely" not in capfd.readouterr().out
