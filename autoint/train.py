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

import contextlib
import logging
import math
import os
import re
import shlex
import signal
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning as L
import torch
import yaml
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.pytorch.accelerators import CPUAccelerator
from lightning.pytorch.callbacks import Callback, EarlyStopping, ModelCheckpoint
from lightning.pytorch.utilities.exceptions import SIGTERMException

from . import tracking
from .calibration import Unfitted, calibrate_checkpoint
from .checkpoint import (
    CHECKPOINT_KEY,
    CheckpointError,
    checkpoint_file,
    float32_default,
    read_checkpoint,
    serving_checkpoint,
    write_checkpoint,
)
from .config import (
    Config,
    ConfigError,
    config_from_dict,
    differences,
    parse_yaml,
    require_config,
    resolve_precision,
    saved_config,
)
from .data import CTRDataModule, SplitLoader, data_identity, data_module  # data_module: re-exported for tune
from .datasets.errors import DataError, StaleDataError
from .datasets.text import expand_inputs
from .encoder import Encoder
from .errors import InputError, MissingInput, Terminated, message_head, raise_terminated
from .files import folder_lock, read_json, read_run_state, write_json, write_run_state
from .model import TRAINING_COPIES, AutoInt, check_fits_memory
from .predict import raw_example, scores_in_bf16
from .system import CTRSystem, resolve_optimizer

log = logging.getLogger(__name__)


MODEL_TAG = "autoint.model_uri"  # set on a run once its model is logged
MODEL_EPOCH_TAG = "autoint.model_epoch"  # the best epoch whose checkpoint that model holds
REGISTERED_TAG = "autoint.registered"  # models:/NAME/VERSION, the version registered (tune's parent run's too)


class RunFolderError(InputError, RuntimeError):
    """The run folder cannot be used as asked (exists already, has nothing to resume, or is complete)."""


@dataclass
class TrainResult:
    run_dir: str
    data_dir: str
    tracking_uri: str
    run_id: str
    best_checkpoint: str
    model_uri: str | None
    test_metrics: dict[str, float]
    epochs: int  # epochs trained in all, counting those before a resume
    fit_seconds: float  # of this command's fit (after a resume: the epochs it ran)
    best_epoch: int = 0  # 1-based epoch of the best checkpoint (the one tested)
    early_stopped: bool = False  # early stopping ended the run before train.max_epochs
    registered: str | None = None  # models:/NAME/VERSION when --register named a registered model
    calibration: dict[str, float] | None = None  # calibration_a, _b, _rows: the Platt scaling fitted (rank zero)
    epochs_before: int = 0  # epochs trained before this command: those of the run it resumed


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
    if options is not None and not isinstance(options, dict):  # (a string failed inside dict(): "sequence element")
        raise TypeError(f"trainer_options: expected a dict of lightning.Trainer arguments, e.g. "
                        f"{{'limit_train_batches': 10}}, got {type(options).__name__} {options!r}")
    clash = sorted(set(options or {}) & _CONFIG_DECIDES)
    if clash:
        raise ConfigError(f"trainer_options may not set {clash}: the config decides them (train.*)")
    options = dict(options or {})
    # Early stopping and best.ckpt read the validation AUC of every epoch, and last.ckpt is written at its end:
    # without them the run failed once trained (Lightning's "metric val_auc not available", or no last.ckpt).
    for key, fine in (("limit_val_batches", lambda v: v != 0), ("check_val_every_n_epoch", lambda v: v == 1),
                      ("val_check_interval", lambda v: v in (1, 1.0)), ("max_steps", lambda v: v == -1)):
        if key in options and not fine(options[key]):
            raise ConfigError(f"trainer_options may not set {key}={options[key]!r}: each epoch ends with a "
                              "validation pass, which early stopping and the checkpoints read (an epoch limit is "
                              "train.max_epochs)")
    # Both failed once trained, naming a last.ckpt the user never heard of (a helper's hunt)
    if options.get("fast_dev_run"):
        raise ConfigError(f"trainer_options may not set fast_dev_run={options['fast_dev_run']!r}: it writes no "
                          "checkpoint, which the test, the calibration and the logged model read; for a quick run "
                          "set train.max_epochs: 1 and trainer_options limit_train_batches (a few batches)")
    if options.get("limit_train_batches", 1) == 0:
        raise ConfigError("trainer_options may not set limit_train_batches=0: it trains nothing")
    return options


def _check_batch_limits(dm: CTRDataModule, extra: dict[str, Any], world: int) -> None:
    """A fraction of an epoch's batches (``limit_train_batches``, ``limit_val_batches``) that leaves none on some
    of the ``world`` processes is a :class:`ConfigError` now; Lightning refused it once the MLflow run had started,
    leaving it FAILED. Counted as each process's loader counts its share (under DDP, fewer batches a process)."""
    for key, split, train in (("limit_train_batches", "train", True), ("limit_val_batches", "valid", False)):
        fraction = extra.get(key)
        if isinstance(fraction, float) and 0 < fraction < 1:
            dm.setup("fit")
            size = dm.batch_size if train else dm.eval_batch_size
            batches = min(len(SplitLoader(dm.splits[split], size, rank=rank, world_size=world, pad=train))
                          for rank in range(world))
            if int(batches * fraction) < 1:
                per = " per process" if world > 1 else ""
                raise ConfigError(f"trainer_options {key}={fraction!r}: that share of the {split} split's {batches} "
                                  f"batches{per} is none; give a larger fraction (at least {1 / batches:.3g}) or a "
                                  "number of batches")


def _encoder_state(folder: Path) -> dict[str, Any]:
    """The processed folder's encoder as a checkpoint carries it (its vocabulary file's bytes included)."""
    if not (folder / "encoder.json").is_file():  # the served model needs it: the run failed once trained
        raise MissingInput(f"{folder}: no encoder.json, which the run's served model encodes raw rows with; prepare "
                           "the folder again (autoint prepare --overwrite)")
    return Encoder.folder_state(folder)


class AtomicCheckpointIO(TorchCheckpointIO):
    """Checkpoints written to a temporary file beside the target, then renamed over it.

    A process killed while saving leaves the previous checkpoint whole (and at
    most a ``*.tmp`` file), never a truncated ``last.ckpt``.
    """

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None) -> None:
        if storage_options is not None:
            raise TypeError(f"{type(self).__name__} takes no storage_options")
        write_checkpoint(checkpoint, path)

    def load_checkpoint(self, path: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
        checkpoint = super().load_checkpoint(path, *args, **kwargs)
        rehome_checkpoint_states(checkpoint, Path(path).parent)
        return checkpoint


def rehome_checkpoint_states(checkpoint: dict[str, Any], folder: Path) -> None:
    """The checkpoint callbacks' states of a checkpoint read from ``folder``, their paths moved into it.

    They name the folder the run was in when they were saved: after the run folder was moved (or a checkpoint
    copied from another run), Lightning kept only the best checkpoint's path, which then named the old folder, and
    forgot its score, so the next epoch, however worse, replaced best.ckpt (or the other run's)."""
    here = os.path.realpath(folder)
    for key, state in (checkpoint.get("callbacks") or {}).items():
        if not (str(key).startswith("ModelCheckpoint") and isinstance(state, dict) and state.get("dirpath")):
            continue
        there = str(state["dirpath"])
        if there == here:
            continue

        def moved(path: Any, there: str = there) -> Any:
            return os.path.join(here, os.path.relpath(path, there)) if isinstance(path, str) and path and \
                os.path.dirname(path) == there else path

        state["dirpath"] = here
        for name in ("best_model_path", "kth_best_model_path", "last_model_path"):
            if name in state:
                state[name] = moved(state[name])
        if isinstance(state.get("best_k_models"), dict):
            state["best_k_models"] = {moved(k): v for k, v in state["best_k_models"].items()}


def ended_status(e: BaseException) -> str:
    """The MLflow status of a run that raised ``e``: ``KILLED`` when stopped (Ctrl-C, SIGTERM), else ``FAILED``."""
    return "KILLED" if isinstance(e, KeyboardInterrupt) else "FAILED"  # Terminated is one


def run_trainer(trainer: L.Trainer, method: str, *args: Any, **kwargs: Any) -> Any:
    """``trainer.<method>(*args, **kwargs)`` (fit, test), with Lightning's ways of ending on a signal made plain.

    Ctrl-C: Lightning stops gracefully, then calls ``sys.exit(1)`` (a status that reads as a bug here); it is
    raised again as :class:`KeyboardInterrupt`, with Ctrl-C's handler back (Lightning leaves SIGINT ignored).
    SIGTERM: Lightning stops at the next step with a ``SystemExit`` of status 0 (a success to a scheduler);
    it is raised as :class:`~autoint.errors.Terminated`. Either way the run is ended ``KILLED`` and, once it
    has a checkpoint, ``--resume`` continues it.
    """
    main_thread = threading.current_thread() is threading.main_thread()
    sigint = signal.getsignal(signal.SIGINT) if main_thread else None
    # stop_on_sigterm's handler (the command line's) would raise mid-step through Lightning's own, which calls
    # the handler it finds after its own: while Lightning fits, one that stands aside once Lightning has noted
    # the SIGTERM (it stops at the next step by itself) and raises outside Lightning's loop (its setup, its
    # teardown). A test pass is left to it: Lightning only notes a SIGTERM there, and the run tested, logged and
    # exited 0.
    sigterm = signal.getsignal(signal.SIGTERM) if main_thread else None
    lifted = sigterm is raise_terminated and method == "fit"
    if lifted:
        def outside_the_loop(signum: int, frame: Any) -> None:
            if not trainer.received_sigterm:
                raise_terminated(signum, frame)

        signal.signal(signal.SIGTERM, outside_the_loop)
    try:
        result = getattr(trainer, method)(*args, **kwargs)
        if getattr(trainer, "received_sigterm", False):
            raise Terminated("terminated (SIGTERM)")  # noted where Lightning stops for none (its last step, a test)
        return result
    except SIGTERMException:
        raise Terminated("terminated (SIGTERM)") from None
    except SystemExit as e:
        if not (e.code == 1 and isinstance(e.__context__, KeyboardInterrupt)):  # not Lightning's Ctrl-C exit
            raise
        if main_thread and sigint is not None:
            signal.signal(signal.SIGINT, sigint)
        if isinstance(e.__context__, Terminated):  # a SIGTERM in a test pass, which Lightning ends as Ctrl-C
            raise Terminated(str(e.__context__)) from None
        raise KeyboardInterrupt from None
    finally:
        if lifted:
            signal.signal(signal.SIGTERM, sigterm)


def _meta(path: Path) -> dict[str, Any] | None:
    """The autoint section of a checkpoint, with ``epochs_done`` (the epochs it had finished, as Lightning counts
    them on restoring it), or None where it cannot be read."""
    try:
        ckpt = read_checkpoint(path)
        section = ckpt[CHECKPOINT_KEY]
    except (CheckpointError, FileNotFoundError):
        return None
    try:
        # an epoch's end is saved before Lightning counts it completed; processed counts it, as restoring does
        done = int(ckpt["loops"]["fit_loop"]["epoch_progress"]["current"]["processed"])
    except (KeyError, TypeError, ValueError):
        done = None
    return {**section, "epochs_done": done}


def resume_checkpoint(ckpt_dir: Path, meta: dict[str, Any] | None = None) -> Path:
    """``last.ckpt``, or where it is unreadable (a crash mid-save), the newest readable checkpoint, with a warning.
    ``meta``, if given, receives the chosen checkpoint's autoint section (its config, the data it trained on)."""
    last = ckpt_dir / "last.ckpt"
    others = sorted((p for p in ckpt_dir.glob("*.ckpt") if p != last), key=lambda p: p.stat().st_mtime, reverse=True)
    for candidate in (last, *others):
        found = _meta(candidate)
        if found is not None:
            if candidate != last:
                log.warning("%s is missing or unreadable; resuming from %s, the newest readable checkpoint",
                            last, candidate)
            if meta is not None:
                meta.update(found)
            return candidate
    raise RunFolderError(f"{ckpt_dir}: no readable checkpoint to resume from; start a new run with another "
                         "--out (or remove this folder)")


# Settings a resumed run may have changed: the epochs, and the cap on prepare's engine, which neither the
# processed files nor training depend on (its default went from 1GB to 512MB, and runs saved with the old default
# were refused though nobody had set it: a helper's hunt); and where the data is (--data, --raw: a moved folder
# is the same data), whose identity is checked instead; and how the process holds freed memory, which no figure
# depends on.
# The settings no result depends on, which a tune study's later commands may change too (autoint.tune.MAY_CHANGE):
NO_RESULT_DEPENDS_ON = ("data.memory_limit", "train.keep_freed_memory")
RESUME_MAY_CHANGE = ("train.max_epochs", *NO_RESULT_DEPENDS_ON)
WHERE_DATA_IS = ("data.processed", "data.raw")


def config_differences(saved: dict[str, Any], cfg: Config,
                       allowed: tuple[str, ...] = RESUME_MAY_CHANGE + WHERE_DATA_IS) -> list[str]:
    """Settings where ``cfg`` differs from a run's saved config, as ``setting: run value -> now``."""
    before = {k: v for k, v in config_from_dict(saved).flat().items() if k not in allowed}
    now = {k: v for k, v in cfg.flat().items() if k not in allowed}
    return differences(before, now, "run")


def _stopped_before_first_checkpoint(out: Path) -> bool:
    """``out`` holds a run that was killed (SIGKILL, power lost) before it saved a checkpoint: nothing to resume."""
    return ((out / "run.json").is_file() and not (out / "metrics.json").exists()
            and not any((out / "checkpoints").glob("*.ckpt")))


def _release_stopped_run(out: Path) -> None:
    """Free ``out`` for a new run: the earlier one, killed before its first checkpoint, is ended ``KILLED`` in
    MLflow (where its run.json and store can still be read) and its run.json removed."""
    state_path = out / "run.json"
    from mlflow.exceptions import MlflowException

    try:
        old_uri, old_id = read_run_state(state_path, RunFolderError)
        tracking.check_tracking_uri(old_uri)
        tracking.end_run(old_uri, old_id, status="KILLED")
        ended = f"; its MLflow run {old_id} is ended KILLED"
    except (InputError, OSError, MlflowException) as e:  # a damaged run.json or an
        ended = f"; its MLflow run could not be ended ({message_head(e)})"  # unreachable store: not a blocker
    log.warning("%s: the run there stopped before its first checkpoint; starting a new one%s", out, ended)
    state_path.unlink()


def _check_resumable(out: Path, cfg: Config, data: Path) -> Path:
    """The checkpoint to resume ``out`` from; refuses a changed config, other data, or a run that is complete."""
    ckpt_dir = out / "checkpoints"
    if not (out / "run.json").is_file():
        raise RunFolderError(f"{out}: nothing to resume (no run.json: no run was started here)")
    if _stopped_before_first_checkpoint(out):
        raise RunFolderError(f"{out}: nothing to resume (the run stopped before its first checkpoint); "
                             "run the same command without --resume to start it again")
    saved_path = out / "config.yaml"
    if saved_path.is_file():
        try:
            diff = config_differences(parse_yaml(saved_path.read_text(encoding="utf-8")) or {}, cfg)
        except (yaml.YAMLError, UnicodeDecodeError, ConfigError) as e:
            raise RunFolderError(f"{saved_path}: the run's saved config cannot be read ({message_head(e)})") from None
        if diff:
            raise RunFolderError(f"{out}: --resume needs the run's own config (only {' and '.join(RESUME_MAY_CHANGE)} "
                                 f"and where the data is may change); differs in {'; '.join(diff)}")
    done = out / "metrics.json"
    if done.is_file():
        advice = "; the run had finished: start a new one with another --out, or remove metrics.json to resume it"
        summary = read_json(done, RunFolderError, advice)
        if summary.get("early_stopped") or summary.get("epochs", 0) >= cfg.train.max_epochs:
            why = ("early stopping ended it" if summary.get("early_stopped")
                   else f"it trained all {summary.get('epochs')} epochs of train.max_epochs")
            auc = summary.get("test_auc")
            auc = float("nan") if auc is None else auc  # written as null where a one-class test split has none
            further = ("start a new run with another --out (a larger train.patience trains longer)"
                       if summary.get("early_stopped") else
                       "raise --max-epochs to train it further, or start a new run with another --out")
            raise RunFolderError(f"{out}: the run is complete ({why}; test AUC {auc:.4f}); {further}")
    meta: dict[str, Any] = {}
    path = resume_checkpoint(ckpt_dir, meta)
    done = meta.get("epochs_done")
    if done is not None and cfg.train.max_epochs < done:  # Lightning's traceback, and the run relabelled FAILED
        raise RunFolderError(f"{out}: the run has trained {done} epochs ({path.name}), more than train.max_epochs = "
                             f"{cfg.train.max_epochs}; pass --max-epochs {done} or more to resume it, or start a new "
                             "run with another --out")
    # The checkpoint's own record, which no file beside it can change: config.yaml removed or edited, or a
    # checkpoint copied in from another run, was resumed with settings the checkpoint's weights do not have.
    try:
        diff = config_differences(meta["config"], cfg)
    except (KeyError, ConfigError):
        diff = []  # a checkpoint of an older version: checked against config.yaml above
    if diff:
        raise RunFolderError(f"{path}: this checkpoint was written with other settings than these "
                             f"({'; '.join(diff)}); --resume needs the settings it was trained with (only "
                             f"{' and '.join(RESUME_MAY_CHANGE)} and where the data is may change)")
    trained_on, now = meta.get("data"), data_identity(data)
    if trained_on is not None and now is not None and trained_on != now:
        what = [k for k in now if now.get(k) != trained_on.get(k)]
        raise RunFolderError(f"{out}: the run trained on other data than {data} holds (its {', '.join(what)} "
                             "differ); --resume continues on the data it started with: name that folder with --data, "
                             "or start a new run with another --out")
    return path


class _BestEpoch(Callback):
    """Remembers the (1-based) epoch whose validation AUC was best, across a resume too."""

    def __init__(self) -> None:
        self.best_epoch, self.best_auc = 0, float("-inf")

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        auc = trainer.callback_metrics.get("val_auc")
        if auc is not None and not trainer.sanity_checking and float(auc) > self.best_auc:
            self.best_epoch, self.best_auc = trainer.current_epoch + 1, float(auc)

    def state_dict(self) -> dict[str, Any]:
        return {"best_epoch": self.best_epoch, "best_auc": self.best_auc}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.best_epoch, self.best_auc = state_dict["best_epoch"], state_dict["best_auc"]


class TrainingDiverged(InputError, RuntimeError):
    """The training loss became NaN or infinite: a learning rate too large for the data, usually."""


class Finite(Callback):
    """Stops a run whose epoch's training loss is not finite (NaN weights, then a 'best' checkpoint of
    chance-level AUC and a NaN logloss, and the command passed), with what to change."""

    def __init__(self, lr: float) -> None:
        self.lr = lr

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        loss = trainer.callback_metrics.get("train_loss_epoch")
        if loss is not None and not math.isfinite(float(loss)):
            raise TrainingDiverged(f"training diverged: the train loss of epoch {trainer.current_epoch + 1} is "
                                   f"{float(loss)}; lower train.lr (now {self.lr:g}), or check the numeric "
                                   "fields' transforms for extreme values")


class EpochLines(Callback):
    """One line per epoch on stderr: what a log file, CI or ``nohup`` shows of a run, where no progress bar is
    drawn (a long run said nothing until it ended). Rank zero only."""

    def __init__(self) -> None:
        self._started = 0.0

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._started = time.perf_counter()

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not trainer.is_global_zero:
            return
        m = trainer.callback_metrics
        parts = [f"{label} {float(m[key]):.4f}" for key, label in
                 (("train_loss_epoch", "train loss"), ("val_auc", "val AUC"), ("val_logloss", "val logloss"))
                 if key in m]
        cap = trainer.max_epochs
        print(f"epoch {trainer.current_epoch + 1}" + (f"/{cap}" if cap is not None and cap > 0 else "") + "  "
              + "  ".join(parts)
              + f"  ({time.perf_counter() - self._started:.1f} s)", file=sys.stderr, flush=True)


class _StartEpoch(Callback):
    """The epochs trained before this fit began (those of the run it resumed); None until training starts, which a
    resumed run with no epoch left never does."""

    def __init__(self) -> None:
        self.epoch: int | None = None

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.epoch = trainer.current_epoch
        # Resumed from the last epoch of a run early stopping had ended (killed before it finished logging): its
        # restored state says so, and the run trains no further, as it would not have.
        if any(stop.stopped_epoch > 0 for stop in trainer.early_stopping_callbacks):
            trainer.should_stop = True


def _check_valid_has_both_classes(data: Path) -> None:
    """Early stopping and best.ckpt follow the validation AUC, which a split of one class leaves undefined (it read
    0.0 every epoch, and the first epoch was kept). From prepare.json's counts, where there is one."""
    try:
        report = read_json(data / "prepare.json", DataError)
        rows, clicks = int(report["rows"]["valid"]), int(report["positives"]["valid"])
    except (FileNotFoundError, DataError, KeyError, TypeError, ValueError):
        return
    if rows and clicks in (0, rows):
        raise DataError(f"{data}: the valid split's {rows:,} rows are all {'non-clicks' if clicks == 0 else 'clicks'}, "
                        "so the validation AUC that early stopping and best.ckpt follow is undefined; prepare the data "
                        "with a split whose valid rows hold both (data.split)")


def new_system(cfg: Config, data: Path) -> tuple[CTRDataModule, CTRSystem]:
    """The data module and a freshly initialised system, its weights drawn from ``train.seed``."""
    L.seed_everything(cfg.train.seed, workers=True, verbose=False)  # before the weights are drawn
    dm = data_module(cfg, data)
    _check_valid_has_both_classes(Path(data))
    with torch.device("meta"):  # which optimizer: its copies of the weights differ (counted, not allocated)
        optimizer = resolve_optimizer(cfg.train, AutoInt(dm.schema, cfg.model))
    check_fits_memory(dm.schema, cfg.model, copies=TRAINING_COPIES[optimizer],
                      purpose=f"the weights, gradients and {optimizer}'s moments and temporaries while training")
    system = CTRSystem(cfg.to_dict(), dm.schema.to_dict(), _encoder_state(Path(data)))
    system.data_identity = data_identity(Path(data))  # in every checkpoint: --resume refuses other data
    return dm, system


def fit_callbacks(cfg: Config, ckpt_dir: Path, save_last: bool = True) -> tuple[list[ModelCheckpoint], EarlyStopping,
                                                                                 _BestEpoch]:
    """What every fit watches: the best checkpoint by validation AUC (the list's first), with ``save_last`` a
    ``last.ckpt`` of every epoch (its second), early stopping, the best epoch.

    ``last.ckpt`` is a checkpoint of its own: Lightning's ``save_last`` (2.6) writes it only when the best
    checkpoint is saved too, so it held the best epoch, and a resume trained the epochs after it again (and a run
    interrupted once ended otherwise than one that was not). Placed after the best one, it saves the states of
    an epoch whose best checkpoint was just written."""
    checkpoints = [ModelCheckpoint(dirpath=ckpt_dir, filename="best", monitor="val_auc", mode="max", save_top_k=1,
                                   enable_version_counter=False)]
    if save_last:
        checkpoints.append(ModelCheckpoint(dirpath=ckpt_dir, filename="last", monitor=None, save_top_k=1,
                                           enable_version_counter=False))
    stop = EarlyStopping(monitor="val_auc", mode="max", patience=cfg.train.patience)
    return checkpoints, stop, _BestEpoch()



def make_trainer(cfg: Config, out: Path, callbacks: list[Callback], progress: bool,
                 extra: dict[str, Any] | None = None, say: bool = True) -> L.Trainer:
    """The Lightning ``Trainer`` the config describes, with atomic checkpoints and no logger of its own
    (``say``: what :func:`~autoint.config.resolve_precision` warns of, once per run, not by its checks too).

    Settings Lightning refuses (an accelerator this machine lacks, an unknown strategy or precision, no
    devices) raise :class:`ConfigError` naming them.
    """
    t = cfg.train
    precision = resolve_precision(t.precision, t.accelerator, say)

    def settings() -> str:
        return (f"train.accelerator={t.accelerator!r}, train.devices={t.devices!r}, train.num_nodes={t.num_nodes!r}, "
                f"train.strategy={t.strategy!r}, train.precision={precision!r}"
                + (f", trainer_options={extra!r}" if extra else ""))

    try:
        with gpu_unused_unsaid() if t.accelerator == "cpu" else contextlib.nullcontext():
            trainer = L.Trainer(
                max_epochs=t.max_epochs,
                accelerator=t.accelerator,
                devices=t.devices,
                num_nodes=t.num_nodes,
                strategy=t.strategy,
                precision=precision,
                deterministic=t.deterministic,
                logger=False,
                callbacks=callbacks,
                plugins=[AtomicCheckpointIO()],
                enable_progress_bar=progress,
                enable_model_summary=False,
                num_sanity_val_steps=0,
                use_distributed_sampler=False,  # the data module shards batches itself
                default_root_dir=out,
                **(extra or {}),
            )
        _note_sigterm_without_collectives(trainer)
        return trainer
    except (MisconfigurationException, ValueError, ImportError) as e:  # ImportError: e.g. tpu without torch_xla
        raise ConfigError(f"Lightning refuses these settings ({settings()}): {message_head(e)}") from None
    except TypeError as e:  # an option Trainer does not take, or of the wrong type: ours are its own keywords
        if extra:
            raise ConfigError(f"lightning.Trainer refuses trainer_options={extra!r}: {message_head(e)}") from None
        if not re.search(r"devices|accelerator|strategy|num_nodes|precision", str(e)):  # else a bug of ours
            raise
        raise ConfigError(f"Lightning refuses these settings ({settings()}): {message_head(e)}") from None


@contextlib.contextmanager
def gpu_unused_unsaid() -> Iterator[None]:
    """Lightning's "GPU available but not used" left unsaid: for a Trainer on the CPU by choice (``evaluate``'s, or
    ``train.accelerator: cpu``), on a machine with a GPU (seen on a lent H200), where its advice to pass
    ``Trainer(accelerator='gpu')`` is no setting of ours."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="GPU available but not used")
        yield


def _note_sigterm_without_collectives(trainer: L.Trainer) -> None:
    """Lightning 2.6's SIGTERM handler broadcasts to the other ranks from inside the signal handler, which may run
    while this rank is in another collective (a step's gradient all-reduce): the ranks' collectives then no
    longer match and both hang (a helper's hunt: 1 try in 9). Its fit loop already broadcasts the flag to every rank
    in step, at each batch; so the handler only notes the signal, and passes it to the ranks it launched."""
    connector = getattr(trainer, "_signal_connector", None)
    if connector is None or not callable(getattr(connector, "_sigterm_notifier_fn", None)):
        return

    def note(signum: int, frame: Any) -> None:
        if not connector.received_sigterm:
            launcher = trainer.strategy.launcher
            if launcher is not None:
                launcher.kill(signum)
        connector.received_sigterm = True

    connector._sigterm_notifier_fn = note  # read when fit registers its handlers


# Variables of a launcher or cluster that starts one process per node (torchrun, SLURM, LSF, MPI, Lightning's own).
CLUSTER_VARIABLES = ("NODE_RANK", "MASTER_ADDR", "GROUP_RANK", "TORCHELASTIC_RUN_ID", "SLURM_NTASKS", "LSB_JOBID",
                     "OMPI_COMM_WORLD_SIZE", "WORLD_SIZE")


def check_trainer_settings(cfg: Config, out: Path, extra: dict[str, Any] | None = None) -> L.Trainer:
    """Raise :class:`ConfigError` now, before any run or folder exists, if Lightning refuses the config's
    accelerator, devices, nodes, strategy or precision, or the ``extra`` Trainer options (the check
    :func:`make_trainer` makes); else the Trainer they give (for its world size)."""
    if isinstance(cfg.train.strategy, str) and "spawn" in cfg.train.strategy:
        # the spawned ranks get a pickled Trainer (autoint's SIGTERM hook is no pickle), and their best epoch
        # never comes back to the parent (best_epoch_val_auc was 0.0)
        raise ConfigError(f"train.strategy = {cfg.train.strategy!r}: spawned processes are not supported; use 'ddp' "
                          "(or launch with torchrun)")
    nodes = cfg.train.num_nodes
    if isinstance(nodes, int) and nodes > 1 and not any(os.environ.get(v) for v in CLUSTER_VARIABLES):
        # Lightning then waits for the other nodes at the rendezvous, forever, deaf to SIGTERM and Ctrl-C
        raise ConfigError(f"train.num_nodes = {nodes}, but nothing starts the other machines: run the command on "
                          "every node under torchrun (--nnodes), srun (SLURM), or with MASTER_ADDR, MASTER_PORT and "
                          "NODE_RANK set (README: Training and tracking)")
    return make_trainer(cfg, out, [], progress=False, extra=extra, say=False)



class FolderLock:
    """An exclusive lock on ``OUT/.lock`` that rank zero holds while it trains into ``OUT``.

    The kernel drops it when the process ends, SIGKILL included, so a folder whose lock can be taken holds no
    live run, and a second command on a folder in use is refused in one line instead of ending the first
    one's run. Where ``fcntl`` is missing (Windows) nothing is locked.
    """

    def __init__(self, out: Path) -> None:
        self.out = out
        self._file: Any = None

    def take(self) -> None:
        if self._file is not None:
            return
        try:
            import fcntl
        except ImportError:  # pragma: no cover - Windows
            return
        f = open(self.out / ".lock", "a")
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.close()
            raise RunFolderError(f"{self.out}: another command is training into this folder now; wait for it to "
                                 "end, or choose another --out") from None
        self._file = f

    def release(self) -> None:
        if self._file is not None:
            self._file.close()  # closing the file drops the lock
            self._file = None


def train(cfg: Config, data: str | Path, out: str | Path, *, resume: bool = False,
          tracking_uri: str | None = None, progress: bool = True,
          callbacks: list[Callback] | None = None, trainer_options: dict[str, Any] | None = None,
          register: str | None = None) -> TrainResult:
    """Train, early-stop on validation AUC, test the best checkpoint, track it all in MLflow.

    ``trainer_options`` go to ``lightning.Trainer`` as well (e.g. ``limit_train_batches`` for a
    short measured run); they may not replace the settings the config decides. If anything
    fails once the MLflow run exists, the run is ended ``FAILED`` and the error raised.
    ``register`` names a registered model: the logged model becomes its newest version, with
    the alias ``champion`` (:func:`autoint.tracking.register_model`). While it runs, rank zero
    holds ``out``'s :class:`FolderLock`.
    """
    require_config(cfg)
    tracking.check_model_name(register)
    tracking.check_uri_argument(tracking_uri)
    if data is None:
        raise TypeError("data: expected the processed folder to train on (ensure_processed gives one), got None")
    if callbacks is not None and (not isinstance(callbacks, (list, tuple))
                                  or not all(isinstance(c, Callback) for c in callbacks)):
        # (else Lightning failed mid-fit on "'str' object has no attribute 'on_exception'", the run already open)
        raise TypeError(f"callbacks: expected a list of lightning.pytorch.callbacks.Callback instances, got "
                        f"{callbacks!r}")
    out = Path(out).expanduser()  # "~/runs/x" quoted: one folder, not checkpoints there and the rest in ./~
    if out.exists() and not out.is_dir():
        raise RunFolderError(f"{out} is a file, not a run folder; choose another --out")
    if (out / "schema.json").is_file():  # the run's files mixed with the splits, for a later prepare to clobber
        raise RunFolderError(f"{out} is a processed data folder (it holds schema.json), not a run folder; choose "
                             "another --out")
    lock = FolderLock(out)
    try:
        # The data folder, shared: `prepare` waits for the run to end (prepared again under it, the run went on
        # with other rows and was logged FINISHED with their test figures).
        with folder_lock(Path(data).expanduser(), shared=True, waiting=f"{data}: another command is preparing "
                         "this folder; waiting for it to end"), process_state():
            return _train(cfg, data, out, lock, resume=resume, tracking_uri=tracking_uri, progress=progress,
                          callbacks=callbacks, trainer_options=trainer_options, register=register)
    finally:
        lock.release()


_SEED_VARIABLES = ("PL_GLOBAL_SEED", "PL_SEED_WORKERS", "CUBLAS_WORKSPACE_CONFIG")


@contextlib.contextmanager
def process_state() -> Iterator[None]:
    """Inside: training may seed and set what a run needs (``train.seed`` through ``seed_everything``,
    ``train.deterministic`` through Lightning), with float32 as the default dtype. After: the caller's random
    states, deterministic-algorithm flags, grad mode, default dtype, ``sys.path`` and the variables Lightning set
    are as they were, so a notebook's own randomness and torch settings do not change because a model was trained
    in it. Not malloc's thresholds, which ``train.keep_freed_memory`` raises for the rest of the process
    (:func:`autoint.system.keep_freed_memory`: ``mallopt`` cannot read them back)."""
    import random

    import numpy as np

    states = (random.getstate(), np.random.get_state(), torch.get_rng_state())  # noqa: NPY002 (the global one)
    grad, path = torch.is_grad_enabled(), list(sys.path)
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else None
    flags = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),
             torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark)
    env = {k: os.environ.get(k) for k in _SEED_VARIABLES}
    try:
        with float32_default():  # a notebook's float64 default built part of the model in float64
            yield
    finally:
        torch.set_grad_enabled(grad)  # Lightning leaves gradients on
        sys.path[:] = path  # MLflow's check of a logged model's input example puts its (deleted) code folder first
        random.setstate(states[0])
        np.random.set_state(states[1])  # noqa: NPY002
        torch.set_rng_state(states[2])
        if cuda is not None:
            torch.cuda.set_rng_state_all(cuda)
        torch.use_deterministic_algorithms(flags[0], warn_only=flags[1])
        torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = flags[2], flags[3]
        for k, v in env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _train(cfg: Config, data: str | Path, out: str | Path, lock: FolderLock, *, resume: bool,
           tracking_uri: str | None, progress: bool, callbacks: list[Callback] | None,
           trainer_options: dict[str, Any] | None, register: str | None) -> TrainResult:
    extra = _extra_trainer_options(trainer_options)
    data, out = Path(data).expanduser(), Path(out)
    cfg = cfg.with_data(processed=data)  # the folder it trains on, in its params and saved config
    rank_zero = _global_rank() == 0
    uri = tracking.resolve_tracking_uri(tracking_uri, cfg.tracking.tracking_uri)
    state_path, ckpt_dir = out / "run.json", out / "checkpoints"

    resume_from = None
    backend = None  # the process group's, as resolve_optimizer takes it (None: one process)
    if rank_zero:
        checked = check_trainer_settings(cfg, out, extra)
        if checked.world_size > 1:
            backend = "gloo" if isinstance(checked.accelerator, CPUAccelerator) else "nccl"
        _check_data_settings(cfg, data)
        if not resume or tracking_uri:  # a resumed run's own store is checked when run.json is read
            tracking.check_tracking_uri(uri)  # before any minute is spent training
        if out.is_dir():
            lock.take()  # before reading the folder's state: no other command is changing it
        if resume:
            resume_from = _check_resumable(out, cfg, data)
        elif _stopped_before_first_checkpoint(out):
            _release_stopped_run(out)
        elif (out / "metrics.json").exists():
            raise RunFolderError(f"{out} holds a finished run; choose another --out (or pass --resume with a "
                                 "higher --max-epochs to train it further, if early stopping did not end it)")
        elif (ckpt_dir / "last.ckpt").exists() or state_path.exists():
            raise RunFolderError(f"{out} already holds a run; pass --resume to continue it "
                                 "or choose another --out")
        elif (out / "config.yaml").is_file():  # not a run's (no run.json): the user's own, which a run would replace
            raise RunFolderError(f"{out / 'config.yaml'} is not a run's (no run.json beside it), and a new run writes "
                                 "its resolved config there; keep your config elsewhere, or choose another --out")
    elif resume:
        resume_from = resume_checkpoint(ckpt_dir)
    dm, system = new_system(cfg, data)
    if extra.get("sync_batchnorm") or extra.get("limit_train_batches", 1.0) not in (1.0, None):
        dm.batch_norm = False  # statistics over every process's rows, or an epoch cut short: a one-row tail is fine
    if rank_zero:
        _check_batch_limits(dm, extra, checked.world_size)
    if rank_zero and dm.batch_norm:  # before the run starts (refused when the loader is built, it left it FAILED)
        dm.setup("fit")
        dm.check_batch_norm(checked.world_size)
    if (rank_zero and extra.get("gradient_clip_val")
            and resolve_optimizer(cfg.train, system.model, backend) == "sparse_adam"):
        # norm clipping has no sparse kernel: NotImplementedError from torch at the first step, the run FAILED
        raise ConfigError("trainer_options gradient_clip_val: the embedding tables train with sparse gradients "
                          f"(train.optimizer = {cfg.train.optimizer!r} gives sparse_adam here), which cannot be "
                          "clipped; set train.optimizer: adam to clip, or leave clipping out")

    run_id, moved_store = "", False
    config_path = out / "config.yaml"
    own_config = not config_path.exists()  # a config.yaml already there is the user's: never removed
    if rank_zero:
        out.mkdir(parents=True, exist_ok=True)
        lock.take()
        if resume:
            saved_uri, saved_id = read_run_state(state_path, RunFolderError)
            if not tracking_uri:  # the run's own store (a --tracking-uri, naming where it moved, is checked above)
                uri = saved_uri
                tracking.check_tracking_uri(uri)
            run_id = tracking.start_run(uri, cfg.tracking.experiment, run_id=saved_id)  # then it may be ended
            moved_store = uri != saved_uri
        else:
            tags = {"autoint.data": str(data.resolve()), "autoint.run_dir": str(out.resolve())}
            # Named after the run folder: MLflow's random names come from Python's random module, which the
            # training seed had seeded, so every run got the same one.
            run_id = tracking.start_run(uri, cfg.tracking.experiment, cfg.tracking.run_name or out.resolve().name,
                                        tags=tags)
            write_run_state(state_path, uri, run_id)
    try:
        if rank_zero:  # in the try: a config that cannot be written ends the run FAILED, not left RUNNING
            cfg.save(config_path)  # on --resume with the train.max_epochs --max-epochs gave now (the MLflow param,
            # logged once, keeps the first; the tag autoint.max_epochs and the logged config.yaml say this one)
        if moved_store:  # run.json names the store it is in now
            write_run_state(state_path, uri, run_id)
        if rank_zero and not resume:
            tracking.log_params(uri, run_id, cfg.flat())
        return _fit_test_log(cfg, system, dm, data, out, uri, run_id, resume_from, progress, callbacks, extra,
                             register)
    except BaseException as e:
        if rank_zero and run_id:
            lost = isinstance(e, tracking.ServerLost)  # not asked again: MLflow's retries took minutes more, silent
            if not lost:
                try:
                    tracking.end_run(uri, run_id, status=ended_status(e))
                except Exception as err:  # the store went away now: say it, go on
                    if not tracking.server_lost(uri, err):
                        raise
                    lost = True
            if lost:
                log.warning("MLflow run %s could not be ended %s: %s does not answer; it shows RUNNING until the "
                            "run is resumed", run_id, ended_status(e), uri)
            if not resume and not any(ckpt_dir.glob("*.ckpt")):
                # Nothing to resume: the folder is left free for the same command again, not holding a run.
                state_path.unlink(missing_ok=True)
                if own_config:
                    config_path.unlink(missing_ok=True)
        raise


def log_served_model(uri: str, run_id: str, checkpoint: Path, data: Path) -> str:
    """Log the served model of ``checkpoint`` (its weights, not the optimizer's moments: :func:`serving_checkpoint`)
    into ``run_id``, its input example from the processed folder ``data``; returns its ``runs:/`` URI."""
    with tempfile.TemporaryDirectory() as tmp:
        served = serving_checkpoint(checkpoint, Path(tmp) / checkpoint.name)
        return tracking.log_pyfunc_model(uri, run_id, served, raw_example(data))


def _fit_test_log(cfg: Config, system: CTRSystem, dm: CTRDataModule, data: Path, out: Path, uri: str, run_id: str,
                  resume_from: Path | None, progress: bool, callbacks: list[Callback] | None,
                  extra: dict[str, Any], register: str | None = None) -> TrainResult:
    rank_zero = bool(run_id)
    ckpt_dir = out / "checkpoints"
    checkpoints, stop, best_epoch = fit_callbacks(cfg, ckpt_dir)
    best = checkpoints[0]
    start = _StartEpoch()
    all_callbacks: list[Callback] = [*checkpoints, stop, best_epoch, start, Finite(cfg.train.lr), *(callbacks or [])]
    if rank_zero:
        all_callbacks.append(tracking.MLflowCallback(uri, run_id))
    trainer = make_trainer(cfg, out, all_callbacks, progress, extra)
    started = time.perf_counter()
    run_trainer(trainer, "fit", system, dm, ckpt_path=str(resume_from) if resume_from else None)
    fit_seconds = time.perf_counter() - started
    # Read before testing: loading the best checkpoint for the test restores the callbacks' older states.
    epochs, best_epoch_number = trainer.current_epoch, best_epoch.best_epoch
    epochs_before = epochs if start.epoch is None else start.epoch  # trained before this command (a resume)
    # Early stopping that fires on the last epoch ended the run too: called "max_epochs reached", a resume with a
    # larger --max-epochs then trained nothing (a helper's hunt)
    early_stopped = stop.stopped_epoch > 0
    best_path = Path(best.best_model_path) if best.best_model_path else ckpt_dir / "last.ckpt"
    calibration = None
    if cfg.train.calibration != "none":  # fitted once, on rank zero; every rank then tests the calibrated model
        if trainer.is_global_zero:
            calibration = calibrate(best_path, dm, trainer.strategy.root_device)
        trainer.strategy.barrier("autoint-calibration")
    system.test_in_fp32 = True  # the figures evaluate, predict and serve give, whatever the training precision
    results = run_trainer(trainer, "test", system, dm, ckpt_path=str(best_path), verbose=False)
    test_metrics = {k: float(v) for k, v in results[0].items()} if results else {}

    model_uri = registered = None
    if rank_zero:
        # At the step of the epochs trained: a run resumed for more epochs tests again, and its history then
        # reads test figures by epochs (both were at step 0, the later one not told apart).
        # best_epoch_val_auc too: the runs table's val_auc is the last epoch's, not the tested one's
        tracking.log_metrics(uri, run_id, {**test_metrics, **(calibration or {}),
                                           "best_epoch_val_auc": float(best.best_model_score or 0.0)}, step=epochs)
        # What ran where the config says auto (train.precision: auto is bf16-mixed on a CPU with native bf16, fp32
        # elsewhere; train.optimizer: auto is sparse_adam past AUTO_SPARSE_ROWS): config.yaml and the params say auto.
        summary = {"epochs": epochs, "best_epoch": best_epoch_number, "early_stopped": early_stopped,
                   "max_epochs": cfg.train.max_epochs, "patience": cfg.train.patience,
                   "precision": str(trainer.precision), "optimizer": getattr(system, "optimizer_name", None)}
        tracking.set_tags(uri, run_id, {f"autoint.{k}": str(v).lower() if isinstance(v, bool) else v
                                        for k, v in summary.items()})
        record = {**test_metrics, "best_epoch_val_auc": float(best.best_model_score or 0.0), **summary,
                  "fit_seconds": fit_seconds, "epochs_before_this_fit": epochs_before, **(calibration or {})}
        with tempfile.TemporaryDirectory() as tmp:
            logged = Path(tmp) / "metrics.json"
            write_json(logged, record)
            artifacts = [out / "config.yaml", logged, data / "schema.json", data / "encoder.json",
                         data / "vocabulary.parquet", data / "prepare.json"]
            tracking.log_artifacts(uri, run_id, artifacts)
        tracking.log_artifacts(uri, run_id, [best_path], "checkpoints")
        # Once each: a run resumed after a kill that came after these steps does not log or register twice.
        done = tracking.run_info(uri, run_id)["tags"]
        # A resumed run that trained further may have a new best epoch (and pair): its model is logged again.
        same = done.get(MODEL_EPOCH_TAG) == str(best_epoch_number)
        model_uri = (done.get(MODEL_TAG) if same else None) or log_served_model(uri, run_id, best_path, data)
        tracking.set_tags(uri, run_id, {MODEL_TAG: model_uri, MODEL_EPOCH_TAG: best_epoch_number})
        if register:
            # The name in the tag's value, not its key (MLflow's tag keys take fewer characters than model names:
            # "ctr(v2)" failed the run after training); a run tagged before per name (autoint.registered.NAME) too.
            earlier = [done.get(REGISTERED_TAG, ""), done.get(f"{REGISTERED_TAG}.{register}", "")] if same else []
            registered = next((r for r in earlier if re.fullmatch(rf"models:/{re.escape(register)}/\d+", r)),
                              None) or tracking.register_model(uri, run_id, register)
            tracking.set_tags(uri, run_id, {REGISTERED_TAG: registered})
        tracking.end_run(uri, run_id)
        # metrics.json is what makes --resume call the run complete: written last, once the model is logged
        # and the run ended, so a run that failed or was killed before (even by SIGKILL) is finished by --resume.
        write_json(out / "metrics.json", record)
    _close_process_group()
    return TrainResult(str(out), str(data), uri, run_id, str(best_path), model_uri, test_metrics,
                       epochs, fit_seconds, best_epoch_number, early_stopped, registered, calibration, epochs_before)


def calibrate(checkpoint: Path, dm: CTRDataModule, device: Any = "cpu") -> dict[str, float] | None:
    """``train.calibration: platt``: fit the checkpoint's Platt scaling on the whole validation split of ``dm`` (see
    :mod:`autoint.calibration`) and write it into the checkpoint; the fitted pair and the rows it saw, or None
    (the identity kept, with a warning saying why) where no pair could be fitted."""
    dm.setup("validate")
    try:
        return calibrate_checkpoint(checkpoint, dm.whole_split("valid"), device)
    except Unfitted as e:
        log.warning("%s: no calibration fitted (%s); the model serves its own probabilities", checkpoint, e)
        return None


def _close_process_group() -> None:
    """In a distributed run, every rank waits here for rank 0's logging, then the process group closes.

    A rank whose process exits with the gloo group still open can abort at exit ("terminate called
    without an active exception"), and the launcher then kills every rank, rank 0 in the middle of
    its logging; seen once in the 2-process CPU test. Closing the group first is PyTorch's advice.
    """
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()


# ----------------------------------------------------------------------------- around a run
def _raw_words(raw: Any) -> str:
    """`` --raw ...`` as a command would repeat the raw input named now (quoted where a shell would expand it)."""
    if raw is None:
        return ""
    items = [raw] if isinstance(raw, (str, Path)) else list(raw)
    return " --raw " + " ".join(shlex.quote(str(x)) for x in items)


def _check_data_settings(cfg: Config, data: Path) -> None:
    """The processed folder was prepared with ``cfg``'s data settings (what :func:`ensure_processed` checks for the
    command line): from Python, a folder of another data set or settings trained, and the run recorded settings
    that did not make its data."""
    if not (data / "prepare.json").is_file():
        return  # not a processed folder: the data module says what is missing
    from .preprocess import prepared_differences

    differences = prepared_differences(data, cfg, settings_only=True)
    if differences:
        raise StaleDataError(f"{data} was prepared with other data settings than this config's: "
                             f"{'; '.join(differences)}; train on a folder prepared from this config "
                             "(ensure_processed(cfg, ...) gives one)")


def ensure_processed(cfg: Config, data: str | Path | None, raw: str | Path | None, progress: bool = True,
                     wait_s: float = 24 * 3600.0, command: str = "autoint prepare CONFIG",
                     stale_advice: str | None = None, settings_only: bool = False) -> Path:
    """The processed folder to train on: ``data`` if it is prepared, else prepared now from the raw log.

    For ``format: synthetic``, a folder to prepare is prepared from the log of
    ``data.synthetic`` in ``data.raw``, generated first where it is missing or
    was generated from other settings; a prepared folder leaves it as it is. When every rank of a
    data-parallel job starts from the command line (``torchrun``, ``srun``),
    only global rank zero prepares; the others wait (up to ``wait_s``) for its
    ``prepare.json``, which :func:`~autoint.preprocess.prepare` writes last. ``command``: the
    ``autoint prepare`` call with this run's config and settings, which a stale folder's advice repeats;
    ``stale_advice``: other advice for it (a resumed run's: preparing the folder again is not what it needs);
    ``settings_only``: a prepared folder is compared with the settings alone, not with the raw input now (a resumed
    run's, whose checkpoint checks its data is the data it trained on: a raw log changed since blocked it).
    """
    require_config(cfg)
    folder = Path(data or cfg.data.processed or "data/processed/run").expanduser()
    if raw is not None:
        expand_inputs(raw)  # a name that matches nothing is an error, even beside a prepared folder
    if _global_rank() != 0:
        _wait_for_prepared(folder, wait_s)
        return folder
    synthetic = None
    if cfg.data.format == "synthetic":  # the generated file, not its folder (which holds planted.json too)
        from .datasets.synthetic import DATA_FILE, generator_target

        raw_dir = Path(raw or cfg.data.raw or "data/synthetic")
        synthetic = generator_target(raw_dir)
        if synthetic.name != DATA_FILE and not synthetic.is_file():
            raise ConfigError(f"data.raw = {str(raw_dir)!r}: the synthetic generator writes FOLDER/{DATA_FILE}; "
                              f"name that file or its folder")
        if raw is not None or cfg.data.raw is not None:  # with neither, only the settings are compared
            raw = synthetic
    from .preprocess import finish_move_in, prepared_differences

    finish_move_in(folder)  # a prepare killed while moving its files in
    if (folder / "prepare.json").is_file():

        # Without the synthetic log, the settings that make it alone: a folder prepared from them needs none (the
        # log removed, `train` failed on it, "raw file not found")
        differences = prepared_differences(folder, cfg, raw, settings_only=settings_only or (
            synthetic is not None and not synthetic.is_file()))
        if differences:
            if raw is None and cfg.data.raw is None:  # the advice repeats the raw input the folder was prepared from
                raw = (read_json(folder / "prepare.json").get("data") or {}).get("raw")
            raise StaleDataError(f"{folder} was prepared from other data or settings than now: "
                                 f"{'; '.join(differences)}. " + (stale_advice or "Train on another --data folder, "
                                 f"or prepare this one again with `{command}{_raw_words(raw)} --out {folder} "
                                 "--overwrite`"))
        return folder
    raw = synthetic if synthetic is not None else raw or cfg.data.raw  # prepare generates a synthetic log anew
    if raw is None and cfg.data.split.method != "files":  # whose files name the raw input themselves
        raise RunFolderError(f"{folder} is not a processed folder and no raw data was given: "
                             "pass --raw PATH (or set data.raw), or --data DIR of a prepared folder")
    split = cfg.data.split
    empty = [name for name, share in zip(("valid", "test"), split.fractions[1:]) if share == 0]
    if split.method in ("random", "permutation") and empty:  # refused after the whole log was prepared
        why = "the best epoch is chosen on it" if empty[0] == "valid" else "the run ends by testing on it"
        raise ConfigError(f"data.split.fractions = {list(split.fractions)} leaves the {empty[0]} split empty, which "
                          f"training refuses ({why}); give it a share (`autoint prepare` alone takes an empty one)")
    from .preprocess import prepare

    prepare(cfg, raw, folder, progress=progress)
    return folder


def _wait_for_prepared(folder: Path, wait_s: float, poll_s: float = 1.0) -> None:
    """Block a non-zero rank until rank zero's ``prepare`` has finished ``folder``."""
    deadline = time.monotonic() + wait_s
    while not (folder / "prepare.json").is_file():
        if time.monotonic() > deadline:
            raise RunFolderError(f"{folder}: rank {_global_rank()} waited {wait_s:.0f} s for rank zero to "
                                 "prepare it (no prepare.json); did rank zero fail?")
        time.sleep(poll_s)


def evaluate(checkpoint: str | Path, data: str | Path, split: str = "test", progress: bool = True,
             precision: str = "32", tracking_uri: str | None = None) -> dict[str, float]:
    """AUC and logloss of a checkpoint (or a run folder, or an MLflow model URI) on one split of a processed folder.

    Computed in fp32 whatever the training precision or this machine, so one
    model gives the same figures everywhere; ``precision="bf16"`` asks for bf16
    autocast instead. ``tracking_uri``: the MLflow store of a ``runs:/`` or ``models:/`` URI (default
    ``MLFLOW_TRACKING_URI``, else ./mlflow.db).
    """
    bf16 = scores_in_bf16(precision)
    with checkpoint_file(checkpoint, tracking_uri) as path:
        ckpt = read_checkpoint(path)
    meta = ckpt[CHECKPOINT_KEY]
    saved = saved_config(meta["config"])
    dm = data_module(config_from_dict(saved), data, test_split=split)
    if dm.schema.to_dict() != meta["schema"]:
        raise DataError(f"{data}: its schema differs from the one the model was trained on; "
                        "encode the data with the model's own vocabularies (autoint predict) instead")
    Encoder.check_folder(meta.get("encoder"), data, "evaluate")
    with torch.random.fork_rng(devices=[]), float32_default():  # weights drawn only to be replaced: the caller's
        system = CTRSystem(saved, meta["schema"], meta.get("encoder"))  # random stream stays; fp32 whatever its dtype
    system.load_state_dict(ckpt["state_dict"])
    precision = "bf16-mixed" if bf16 else "32-true"
    with gpu_unused_unsaid():  # the CPU is our choice, not the user's
        trainer = L.Trainer(accelerator="cpu", devices=1, precision=precision, logger=False, enable_checkpointing=False,
                            enable_progress_bar=progress, enable_model_summary=False)
    with float32_default():  # the metrics too: under a float64 default they came out other in the 8th digit
        results = run_trainer(trainer, "test", system, dm, verbose=False)
    return {k.replace("test_", f"{split}_"): float(v) for k, v in results[0].items()}
