"""One training run: processed folder in, best checkpoint, test metrics and an MLflow run out.

The run folder (``--out``) holds everything a run leaves on disk::

    run.json              MLflow tracking URI and run id (what --resume reopens)
    config.yaml           the resolved config
    checkpoints/best.ckpt the best epoch by validation AUC (used for the test)
    checkpoints/last.ckpt the latest epoch (what --resume continues from)
    metrics.json          test AUC and logloss of the best checkpoint

Under data parallelism Lightning starts the same command once per process;
only global rank zero touches MLflow and writes the run folder's files.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import Callback, EarlyStopping, ModelCheckpoint

from . import tracking
from .checkpoint import CHECKPOINT_KEY, read_checkpoint
from .config import Config, config_from_dict, resolve_precision
from .data import CTRDataModule
from .datasets.errors import DataError
from .encoder import Encoder
from .errors import InputError
from .predict import raw_example
from .system import CTRSystem


class RunFolderError(InputError, RuntimeError):
    """The run folder cannot be used as asked (exists already, or has nothing to resume)."""


@dataclass
class TrainResult:
    run_dir: str
    data_dir: str
    tracking_uri: str
    run_id: str
    best_checkpoint: str
    model_uri: str | None
    test_metrics: dict[str, float]
    epochs: int
    fit_seconds: float


def _global_rank() -> int:
    """Rank of this process before the Trainer exists, from the launchers' environment."""
    for var in ("RANK", "SLURM_PROCID", "JSM_NAMESPACE_RANK"):
        if var in os.environ:
            return int(os.environ[var])
    local = int(os.environ.get("LOCAL_RANK", 0))
    node = int(os.environ.get("NODE_RANK", 0))
    return local if node == 0 else -1  # non-zero node: never rank zero


_CONFIG_DECIDES = {"max_epochs", "accelerator", "devices", "num_nodes", "strategy", "precision", "deterministic",
                   "callbacks", "logger", "default_root_dir", "use_distributed_sampler"}


def _extra_trainer_options(options: dict[str, Any] | None) -> dict[str, Any]:
    clash = sorted(set(options or {}) & _CONFIG_DECIDES)
    if clash:
        raise ValueError(f"trainer_options may not set {clash}: the config decides them (train.*)")
    return dict(options or {})


def data_module(cfg: Config, data: str | Path, test_split: str = "test") -> CTRDataModule:
    """The processed folder's splits as the run's settings stream them."""
    t = cfg.train
    return CTRDataModule(data, t.batch_size, seed=t.seed, test_split=test_split, shuffle_buffer=t.shuffle_buffer,
                         in_memory_bytes=t.in_memory_mb * 2**20)


def _encoder_state(folder: Path) -> dict[str, Any] | None:
    """The processed folder's encoder as a checkpoint carries it (its vocabulary file's bytes included)."""
    return Encoder.folder_state(folder) if (folder / "encoder.json").is_file() else None


def train(cfg: Config, data: str | Path, out: str | Path, *, resume: bool = False,
          tracking_uri: str | None = None, progress: bool = True,
          callbacks: list[Callback] | None = None, trainer_options: dict[str, Any] | None = None) -> TrainResult:
    """Train, early-stop on validation AUC, test the best checkpoint, track it all in MLflow.

    ``trainer_options`` go to ``lightning.Trainer`` as well (e.g. ``limit_train_batches`` for a
    short measured run); they may not replace the settings the config decides.
    """
    extra = _extra_trainer_options(trainer_options)
    data, out = Path(data), Path(out)
    rank_zero = _global_rank() == 0
    uri = tracking.resolve_tracking_uri(tracking_uri, cfg.tracking.tracking_uri)
    state_path, ckpt_dir = out / "run.json", out / "checkpoints"

    if rank_zero:
        tracking.check_tracking_uri(uri)  # before any minute is spent training
        if resume:
            if not (ckpt_dir / "last.ckpt").is_file() or not state_path.is_file():
                raise RunFolderError(f"{out}: nothing to resume (no checkpoints/last.ckpt or run.json)")
        elif (ckpt_dir / "last.ckpt").exists() or state_path.exists():
            raise RunFolderError(f"{out} already holds a run; pass --resume to continue it "
                                 "or choose another --out")
    L.seed_everything(cfg.train.seed, workers=True, verbose=False)  # before the weights are drawn
    dm = data_module(cfg, data)
    system = CTRSystem(cfg.to_dict(), dm.schema.to_dict(), _encoder_state(data))

    run_id = ""
    if rank_zero:
        out.mkdir(parents=True, exist_ok=True)
        if resume:
            state = json.loads(state_path.read_text())
            uri, run_id = state["tracking_uri"], state["run_id"]
            tracking.check_tracking_uri(uri)
            tracking.start_run(uri, cfg.tracking.experiment, run_id=run_id)
        else:
            tags = {"autoint.data": str(data.resolve()), "autoint.run_dir": str(out.resolve())}
            run_id = tracking.start_run(uri, cfg.tracking.experiment, cfg.tracking.run_name, tags=tags)
            state_path.write_text(json.dumps({"tracking_uri": uri, "run_id": run_id}, indent=2) + "\n")
            cfg.save(out / "config.yaml")
            tracking.log_params(uri, run_id, cfg.flat())

    best = ModelCheckpoint(dirpath=ckpt_dir, filename="best", monitor="val_auc", mode="max", save_top_k=1,
                           save_last=True, enable_version_counter=False)
    stop = EarlyStopping(monitor="val_auc", mode="max", patience=cfg.train.patience)
    all_callbacks: list[Callback] = [best, stop, *(callbacks or [])]
    if rank_zero:
        all_callbacks.append(tracking.MLflowCallback(uri, run_id))
    trainer = L.Trainer(
        max_epochs=cfg.train.max_epochs,
        accelerator=cfg.train.accelerator,
        devices=cfg.train.devices,
        num_nodes=cfg.train.num_nodes,
        strategy=cfg.train.strategy,
        precision=resolve_precision(cfg.train.precision, cfg.train.accelerator),
        deterministic=cfg.train.deterministic,
        logger=False,
        callbacks=all_callbacks,
        enable_progress_bar=progress,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        use_distributed_sampler=False,  # the data module shards batches itself
        default_root_dir=out,
        **extra,
    )
    started = time.perf_counter()
    try:
        trainer.fit(system, dm, ckpt_path=str(ckpt_dir / "last.ckpt") if resume else None)
    except BaseException:
        if rank_zero and run_id:
            tracking.end_run(uri, run_id, status="FAILED")
        raise
    fit_seconds = time.perf_counter() - started
    best_path = Path(best.best_model_path) if best.best_model_path else ckpt_dir / "last.ckpt"
    results = trainer.test(system, dm, ckpt_path=str(best_path), verbose=False)
    test_metrics = {k: float(v) for k, v in results[0].items()} if results else {}

    model_uri = None
    if rank_zero:
        tracking.log_metrics(uri, run_id, test_metrics)
        (out / "metrics.json").write_text(json.dumps(
            {**test_metrics, "best_epoch_val_auc": float(best.best_model_score or 0.0),
             "epochs": trainer.current_epoch, "fit_seconds": fit_seconds}, indent=2) + "\n")
        artifacts = [out / "config.yaml", out / "metrics.json", data / "schema.json", data / "encoder.json",
                     data / "vocabulary.parquet",
                     data / "prepare.json"]
        tracking.log_artifacts(uri, run_id, artifacts)
        tracking.log_artifacts(uri, run_id, [best_path], "checkpoints")
        model_uri = tracking.log_pyfunc_model(uri, run_id, best_path, raw_example(data))
        tracking.end_run(uri, run_id)
    return TrainResult(str(out), str(data), uri, run_id, str(best_path), model_uri, test_metrics,
                       trainer.current_epoch, fit_seconds)




# ----------------------------------------------------------------------------- around a run
def ensure_processed(cfg: Config, data: str | Path | None, raw: str | Path | None, progress: bool = True) -> Path:
    """The processed folder to train on: ``data`` if it is prepared, else prepared now from the raw log.

    For ``format: synthetic`` with no raw file yet, the log is generated first
    (from ``data.synthetic``) into ``data.raw``.
    """
    folder = Path(data or cfg.data.processed or "data/processed/run")
    if (folder / "schema.json").is_file():
        return folder
    raw = raw or cfg.data.raw
    if cfg.data.format == "synthetic":
        from .datasets.synthetic import SyntheticConfig, generate

        raw_dir = Path(raw or "data/synthetic")
        raw_file = raw_dir if raw_dir.suffix else raw_dir / "synthetic.parquet"
        if not raw_file.is_file():
            generate(SyntheticConfig.from_dict(cfg.data.synthetic or {}), raw_file.parent)
        raw = raw_file
    if raw is None:
        raise RunFolderError(f"{folder} is not a processed folder and no raw data was given: "
                             "pass --raw PATH (or set data.raw), or --data DIR of a prepared folder")
    from .preprocess import prepare

    prepare(cfg, raw, folder, progress=progress)
    return folder


def evaluate(checkpoint: str | Path, data: str | Path, split: str = "test", progress: bool = True) -> dict[str, float]:
    """AUC and logloss of a checkpoint on one split of a processed folder."""
    ckpt = read_checkpoint(checkpoint)
    meta = ckpt[CHECKPOINT_KEY]
    dm = data_module(config_from_dict(meta["config"]), data, test_split=split)
    if dm.schema.to_dict() != meta["schema"]:
        raise DataError(f"{data}: its schema differs from the one the model was trained on; "
                         "encode the data with the model's own vocabularies (autoint predict) instead")
    system = CTRSystem(meta["config"], meta["schema"], meta.get("encoder"))
    system.load_state_dict(ckpt["state_dict"])
    precision = resolve_precision(meta["config"]["train"].get("precision", "32-true"), "cpu")
    trainer = L.Trainer(accelerator="cpu", devices=1, precision=precision, logger=False,
                        enable_progress_bar=progress, enable_model_summary=False)
    results = trainer.test(system, dm, verbose=False)
    return {k.replace("test_", f"{split}_"): float(v) for k, v in results[0].items()}
