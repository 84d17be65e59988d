"""Hyper-parameter search: an Optuna study whose trials are MLflow child runs of one parent run.

Each trial draws settings from ``tune.space`` (TPE, seeded from ``tune.seed`` or
``train.seed``), trains as ``autoint train`` does (the same Trainer, checkpoint
and early stopping, :mod:`autoint.train`) and returns its best validation AUC;
after every epoch the validation AUC goes to the pruner, which stops trials that
trail the median of earlier ones. Trials never touch the test split: when the
command's trials are done, the best trial's checkpoint is scored on it once, and
its model is logged (pyfunc, as ``train`` logs it) in the best trial's run.

The study folder (``--out``) holds::

    tune.json           the study's storage URL and name (what --resume reopens; the default storage is
                        recorded as the folder's own study.db, so the folder can be moved)
    study.db            the Optuna study (the default storage, sqlite:///OUT/study.db)
    config.yaml         the config tuned, its tune section included
    data/min_count-N/   a processed folder per value of the data settings the space varies (data.min_count,
                        data.numeric_transform: min_count-10_numeric_transform-bucket when it varies both)
    trials/NNNN/        trial NNNN's best checkpoint; only the best trial's is kept
    best.yaml           the best trial's config: `autoint train best.yaml` trains it again
    metrics.json        the best trial's number, validation AUC and (scored once) test metrics
    plots/              optimisation history and parameter importances (PNG)

The study lives in the storage, the MLflow parent run's id among its user
attributes, so any process that reaches the storage (``--storage URL``, e.g. a
PostgreSQL database several machines share) adds trials to the same study and
parent run with ``--resume``.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
import warnings
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import Callback

from . import tracking
from .config import Config, ConfigError, config_from_dict, differences, is_int, require_config
from .data import data_identity
from .datasets.text import describe_inputs
from .errors import InputError, hide_password, message_head
from .files import read_json, write_json
from .train import (
    NO_RESULT_DEPENDS_ON,
    REGISTERED_TAG,
    WHERE_DATA_IS,
    Finite,
    RunFolderError,
    TrainingDiverged,
    calibrate,
    check_trainer_settings,
    data_module,
    ended_status,
    ensure_processed,
    evaluate,
    fit_callbacks,
    log_served_model,
    make_trainer,
    new_system,
    process_state,
    run_trainer,
)

log = logging.getLogger(__name__)

HEARTBEAT_S = 60  # a running trial's heartbeat; one silent for GRACE_S (its process was killed) is failed
GRACE_S = 180
PARENT_KEY, URI_KEY, SETTINGS_KEY = "mlflow_parent_run_id", "mlflow_tracking_uri", "settings"
DATA_KEY = "data"  # the study's data identity (autoint.data.data_identity): --resume refuses other data
EXPERIMENT_KEY = "mlflow_experiment"
STUDY_FILE = "study.db"  # the default storage, in the study folder
TESTED_TAG = "autoint.tested_trial"  # on the parent run: the trial whose checkpoint the test split has scored
# What may change between the commands of one study; anything else would mix trials of different searches.
# (the settings no result depends on, as train --resume also allows: data.memory_limit, whose default changed,
# and train.keep_freed_memory, which studies saved before it was a setting lack)
MAY_CHANGE = ("tune.trials", "tune.timeout_s", "tune.enqueue", *WHERE_DATA_IS, *NO_RESULT_DEPENDS_ON)


@dataclass
class TuneResult:
    out: str
    study: str
    storage: str
    tracking_uri: str
    parent_run_id: str
    ran: int  # trials this command ran
    states: dict[str, int]  # trials of the whole study by state: complete, pruned, fail, running
    best_trial: int | None = None
    best_value: float | None = None  # the best trial's validation AUC
    best_params: dict[str, Any] = field(default_factory=dict)
    best_run_id: str | None = None  # the best trial's MLflow run (where its model is logged)
    test_metrics: dict[str, float] = field(default_factory=dict)
    model_uri: str | None = None
    registered: str | None = None
    untested: str | None = None  # why the best trial could not be tested here
    calibration: dict[str, float] = field(default_factory=dict)  # the best trial's Platt pair (train.calibration)
    failed_now: int = 0  # of the trials this command ran, those that failed (their settings, or diverged)


# ----------------------------------------------------------------------------- the search space
def _primitive(choices: list[Any]) -> bool:
    return all(c is None or isinstance(c, (bool, int, float, str)) for c in choices)


def suggest(trial: Any, space: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """One value per setting of ``space``; list choices (``model.dnn_hidden``) travel through Optuna as JSON."""
    values: dict[str, Any] = {}
    for key, spec in space.items():
        if "choices" in spec:
            choices = spec["choices"]
            if _primitive(choices):
                values[key] = trial.suggest_categorical(key, choices)
            else:
                values[key] = json.loads(trial.suggest_categorical(key, [json.dumps(c) for c in choices]))
        elif isinstance(spec["low"], int) and isinstance(spec["high"], int) and not isinstance(spec["low"], bool):
            values[key] = trial.suggest_int(key, spec["low"], spec["high"], step=spec.get("step") or 1,
                                            log=spec.get("log", False))
        else:
            values[key] = trial.suggest_float(key, spec["low"], spec["high"], step=spec.get("step"),
                                              log=spec.get("log", False))
    return values


def _settings(space: dict[str, dict[str, Any]], params: dict[str, Any]) -> dict[str, Any]:
    """A trial's Optuna params back to setting values (JSON-encoded choices decoded)."""
    return {k: json.loads(v) if "choices" in space[k] and not _primitive(space[k]["choices"]) else v
            for k, v in params.items() if k in space}


def _encoded(space: dict[str, dict[str, Any]], settings: dict[str, Any]) -> dict[str, Any]:
    return {k: json.dumps(v) if "choices" in space[k] and not _primitive(space[k]["choices"]) else v
            for k, v in settings.items()}


def study_settings(cfg: Config) -> dict[str, Any]:
    """What defines a study: the base settings and the tune section, less what may change between commands."""
    assert cfg.tune is not None
    tune = cfg.to_dict()["tune"]
    tune["space"] = cfg.tune.search_space()
    flat = {**cfg.flat(), **{f"tune.{k}": v for k, v in tune.items()}}
    return {k: v for k, v in flat.items() if _defines_study(k)}


def _defines_study(key: str) -> bool:
    """A setting a resumed study must keep: not one that may change between commands, nor a tracking one."""
    return key not in MAY_CHANGE and not key.startswith("tracking.")


# ----------------------------------------------------------------------------- one trial
class ReportToTrial(Callback):
    """Feeds each epoch's validation AUC to the Optuna trial; stops the fit when the pruner says so."""

    def __init__(self, trial: Any) -> None:
        self.trial, self.pruned_at = trial, None

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        auc = trainer.callback_metrics.get("val_auc")
        if trainer.sanity_checking or auc is None:
            return
        self.trial.report(float(auc), trainer.current_epoch)
        if self.trial.should_prune():
            self.pruned_at = trainer.current_epoch
            trainer.should_stop = True  # ends the fit after this epoch, its metrics logged; see fit_trial


def fit_trial(cfg: Config, data: Path, folder: Path, uri: str, run_id: str, trial: Any,
              progress: bool = False) -> tuple[float, Path]:
    """Train one trial on train, judge it on valid: ``(best validation AUC, its checkpoint)``; no test."""
    import optuna

    dm, system = new_system(cfg, data)
    (best,), stop, best_epoch = fit_callbacks(cfg, folder / "checkpoints", save_last=False)
    report = ReportToTrial(trial)
    trainer = make_trainer(cfg, folder, [best, stop, best_epoch, report, Finite(cfg.train.lr),
                                         tracking.MLflowCallback(uri, run_id)],
                           progress)
    run_trainer(trainer, "fit", system, dm)
    if report.pruned_at is not None:
        raise optuna.TrialPruned(f"validation AUC after epoch {report.pruned_at + 1} below the pruner's bar")
    value = float(best.best_model_score) if best.best_model_score is not None else float("nan")
    tracking.log_metrics(uri, run_id, {"best_val_auc": value, "best_epoch": best_epoch.best_epoch,
                                       "epochs": trainer.current_epoch})
    return value, Path(best.best_model_path)


class _Search:
    """What every trial of one command shares: the base config, the data, the MLflow parent run."""

    def __init__(self, cfg: Config, out: Path, uri: str, parent: str, base: Path | None, raw: Any,
                 progress: bool) -> None:
        """``base``: the processed folder every trial reads (prepared by :func:`tune` before the study is opened),
        or None where the space varies data settings."""
        assert cfg.tune is not None
        self.cfg, self.out, self.uri, self.parent, self.raw, self.progress = cfg, out, uri, parent, raw, progress
        self.space = cfg.tune.search_space()
        self.data_keys = _searched_data(self.space)
        self.tunes_data = bool(self.data_keys)
        self.base = base
        self.ran = 0  # trials this command started
        self.failed = 0  # and of them, those that failed

    def data_for(self, cfg: Config) -> Path:
        """The processed folder a trial's config reads: one per combination of the data settings the space varies
        (named by them, e.g. ``min_count-10``), prepared once from the raw log and reused."""
        if self.base is not None:
            return self.base
        values = {key: getattr(cfg.data, key.split(".", 1)[1]) for key in self.data_keys}
        name = "_".join(f"{key.split('.', 1)[1]}-{'default' if v is None else v}" for key, v in values.items())
        return ensure_processed(cfg, self.out / "data" / name, self.raw, progress=self.progress)

    def objective(self, trial: Any) -> float:
        import optuna

        self.ran += 1
        trial.study.sampler = trial_sampler(self.cfg, trial.number)  # TPE draws when the trial suggests, below
        settings = suggest(trial, self.space)
        run_id = tracking.start_run(self.uri, self.cfg.tracking.experiment, f"trial-{trial.number}",
                                    parent_run_id=self.parent,
                                    tags={"autoint.trial": str(trial.number), "autoint.trial_state": "running"})
        trial.set_user_attr("mlflow_run_id", run_id)
        folder = self.out / "trials" / f"{trial.number:04d}"
        state, status, started = "fail", "FAILED", time.perf_counter()
        lost = False  # the tracking server: not asked again (each call, MLflow's retries: minutes)
        try:
            cfg = self.cfg.with_settings(settings)  # a ConfigError fails this trial only (see optimize's catch)
            data = self.data_for(cfg)
            cfg = cfg.with_data(processed=data)  # the folder it trains on, in its params
            tracking.log_params(self.uri, run_id, cfg.flat())
            tracking.set_tags(self.uri, run_id, {"autoint.data": str(data.resolve())})
            value, checkpoint = fit_trial(cfg, data, folder, self.uri, run_id, trial, self.progress)
            trial.set_user_attr("checkpoint", str(checkpoint.resolve()))  # where it was trained
            trial.set_user_attr("checkpoint_in_folder", _in_folder(checkpoint, self.out))  # if the folder moves
            state, status = "complete", "FINISHED"
            return value
        except optuna.TrialPruned:
            state, status = "pruned", "KILLED"
            shutil.rmtree(folder, ignore_errors=True)
            raise
        except (ConfigError, TrainingDiverged) as e:  # this trial's settings: it fails, the study goes on
            tracking.set_tags(self.uri, run_id, {"autoint.error": str(e)})
            self.failed += 1
            raise
        except BaseException as e:
            status, lost = ended_status(e), isinstance(e, tracking.ServerLost)
            raise
        finally:
            if not lost:
                tracking.log_metrics(self.uri, run_id, {"duration_s": time.perf_counter() - started})
                tracking.set_tags(self.uri, run_id, {"autoint.trial_state": state})
                tracking.end_run(self.uri, run_id, status)


# ----------------------------------------------------------------------------- the study
def default_storage(out: Path, name: str = STUDY_FILE) -> str:
    return f"sqlite:///{(out / name).resolve()}"


def _in_folder(path: Path, out: Path) -> str:
    """``path`` relative to the study folder when inside it (so the folder can move), else absolute."""
    path, out = path.resolve(), out.resolve()
    return str(path.relative_to(out)) if path.is_relative_to(out) else str(path)


def _best_checkpoint(trial: Any, out: Path) -> Path:
    """The trial's checkpoint: in this study folder (moved or not), else where it was trained (another
    ``--out`` of a study several folders share), else that path, which does not exist here."""
    attrs = trial.user_attrs
    places = [out / attrs["checkpoint_in_folder"]] if "checkpoint_in_folder" in attrs else []
    places.append(Path(attrs.get("checkpoint", "")))
    return next((p for p in places if p.is_file()), places[-1])


# Optuna's note on a tiny history (TPE's draws, the importance plot), which a user cannot act on
_TPE_NOTE = "Target and region quantiles select the same set"


def _own_storage(out: Path, saved: dict[str, Any]) -> str | None:
    """The storage URL of the study a folder's ``tune.json`` names: its own ``study.db`` wherever the folder is
    now, else the URL it recorded (None: no ``tune.json``)."""
    if "storage_file" in saved:
        return default_storage(out, saved["storage_file"])
    return tracking.absolute_sqlite_url(saved["storage"]) if "storage" in saved else None


def _shown(storage: str) -> str:
    """The storage URL as logged and written: any password hidden."""
    return hide_password(storage)


def _no_traceback_for_a_stop(record: logging.LogRecord) -> bool:
    """Optuna logs a trial stopped by Ctrl-C or SIGTERM as failed, with a traceback: the line stays (the trial
    did fail), the traceback goes (nothing is broken; the command says it was stopped). So for a draw the config
    refuses (a ConfigError: that trial fails alone, its reason in the line and in the tag autoint.error), which
    printed some 25 lines of traceback per draw, for a trial whose training diverged, and for other bad input a
    trial finds (its data), which stops the command with one line."""
    if record.exc_info and isinstance(record.exc_info[1], (KeyboardInterrupt, InputError, TrainingDiverged)):
        record.exc_info, record.exc_text = None, None
    return True


def _open_study(cfg: Config, storage: str, name: str, resume: bool) -> Any:
    import optuna

    assert cfg.tune is not None
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    logging.getLogger("optuna.study._optimize").addFilter(_no_traceback_for_a_stop)
    try:
        with warnings.catch_warnings():  # the heartbeat is "experimental" since Optuna 2.9
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            rdb = optuna.storages.RDBStorage(storage, heartbeat_interval=HEARTBEAT_S, grace_period=GRACE_S)
    except Exception as e:  # a bad URL or an unreachable database: name it in one line
        raise RunFolderError(f"study storage {_shown(storage)}: {type(e).__name__}: {message_head(e)}") from None
    exists = name in optuna.get_all_study_names(rdb)
    if exists and not resume:
        raise RunFolderError(f"study {name!r} exists in {_shown(storage)}; pass --resume to add trials to it, "
                             "or name another with --study")
    if resume and not exists:
        raise RunFolderError(f"--resume: no study {name!r} in {_shown(storage)}")
    tune = cfg.tune
    pruner = (optuna.pruners.MedianPruner(n_startup_trials=tune.pruner.startup_trials,
                                          n_warmup_steps=tune.pruner.warmup_epochs)
              if tune.pruner.kind == "median" else optuna.pruners.NopPruner())
    study = optuna.create_study(storage=rdb, study_name=name, direction="maximize", pruner=pruner,
                                load_if_exists=resume)
    study.sampler = trial_sampler(cfg, len(study.trials))  # replaced for each trial by _Search.objective
    return study


def trial_sampler(cfg: Config, number: int) -> Any:
    """The sampler that draws trial ``number``'s settings: TPE seeded from ``tune.seed`` (else ``train.seed``) plus
    the trial's number. The number is the storage's own, so study workers started together (which all saw as many
    trials, and so drew the same settings under one seed for the count) draw apart, and a resumed search does not
    draw its first trials again; the same seed and history draw the same settings."""
    import optuna

    assert cfg.tune is not None
    seed = cfg.tune.seed if cfg.tune.seed is not None else cfg.train.seed
    return optuna.samplers.TPESampler(seed=(seed + number) % 2**32, constant_liar=True)


def _check_same_search(study: Any, cfg: Config, storage: str) -> None:
    assert cfg.tune is not None
    searched = set(cfg.tune.search_space())  # their base values: every trial draws its own (a study started with
    # `--set` of one, which tune now refuses, resumes without it)
    # the saved side filtered as study_settings filters the present one: a study saved before a setting joined
    # MAY_CHANGE (data.memory_limit) still holds it (the review's catch)
    saved = {k: v for k, v in study.user_attrs.get(SETTINGS_KEY, {}).items()
             if k not in searched and _defines_study(k)}
    now = {k: v for k, v in json.loads(json.dumps(study_settings(cfg))).items() if k not in searched}
    diff = differences(saved, now, "study")
    before = study.user_attrs.get(EXPERIMENT_KEY)
    if before is not None and before != cfg.tracking.experiment:  # the new trials' runs would go elsewhere
        diff.append(f"tracking.experiment: {before!r} in the study, {cfg.tracking.experiment!r} now (its runs "
                    "stay in one MLflow experiment)")
    if diff:
        raise RunFolderError(f"--resume: study {study.study_name!r} in {_shown(storage)} searched with other "
                             f"settings; differs in {'; '.join(diff)}")


def _study_data(cfg: Config, base: Path | None, raw: Any) -> dict[str, Any] | None:
    """What a study's trials are scored on: the processed folder's identity (:func:`autoint.data.data_identity`),
    or, where the space searches data settings (each trial prepares its own folder), the raw log's files."""
    if base is not None:
        identity = data_identity(base)
    else:
        from .preprocess import _Inputs, raw_log

        # a synthetic log generated where missing, as each trial's prepare would (its files named here)
        identity = {"input": _Inputs(cfg.data, raw_log(cfg.data, raw)).fingerprint()}
    return None if identity is None else json.loads(json.dumps(identity))


def _check_same_data(study: Any, now: dict[str, Any] | None, storage: str, data: Any) -> None:
    """Refuse to resume a study on other data than its trials were scored on: their validation AUCs, the pruner's
    medians and the best trial would compare figures of different splits (it was accepted, and a trial on a
    smaller log 'beat' the others). A moved processed folder of the same data is the same data; a study of an
    older version recorded none, and is not checked."""
    saved = study.user_attrs.get(DATA_KEY)
    if saved is None or now is None or saved == now:
        return
    what = [k for k in now if now.get(k) != saved.get(k)]
    raise RunFolderError(f"--resume: study {study.study_name!r} in {_shown(storage)} scored its trials on other data "
                         f"than {data} holds (its {', '.join(what)} differ); resume it on the data it started with "
                         "(--data, or --raw of the same log), or start a new study with another --out")


def _parent_run(study: Any, cfg: Config, uri: str, out: Path, given: bool = False,
                checked: bool = False) -> tuple[str, str]:
    """(tracking URI, run id) of the study's MLflow parent run: the study's own, or created now. ``given``:
    ``uri`` came from ``--tracking-uri`` and names the study's store (moved, or reached by another URL) on
    this command; otherwise the store the study was started with. ``checked``: ``uri`` was checked already."""
    attrs = study.user_attrs
    if PARENT_KEY in attrs and not given:
        uri, checked = attrs[URI_KEY], False
    if not checked:
        tracking.check_tracking_uri(uri)
    if PARENT_KEY in attrs:
        return uri, tracking.start_run(uri, cfg.tracking.experiment, run_id=attrs[PARENT_KEY])
    assert cfg.tune is not None
    space = cfg.tune.search_space()
    tags = {"autoint.study": study.study_name, "autoint.study_dir": str(out.resolve()), "autoint.kind": "tune"}
    parent = tracking.start_run(uri, cfg.tracking.experiment, cfg.tracking.run_name or f"tune-{study.study_name}",
                                tags=tags)
    params = {k: v for k, v in cfg.flat().items() if k not in space}
    params.update({f"tune.space.{k}": json.dumps(v) for k, v in space.items()})
    params.update({"tune.seed": cfg.tune.seed if cfg.tune.seed is not None else cfg.train.seed,
                   "tune.pruner": json.dumps(cfg.to_dict()["tune"]["pruner"]), "tune.direction": "maximize val_auc"})
    tracking.log_params(uri, parent, params)
    study.set_user_attr(URI_KEY, uri)
    study.set_user_attr(EXPERIMENT_KEY, cfg.tracking.experiment)
    study.set_user_attr(PARENT_KEY, parent)
    return uri, parent


def tune(cfg: Config, out: str | Path, *, data: str | Path | None = None, raw: Any = None,
         trials: int | None = None, timeout_s: float | None = None, study: str | None = None,
         storage: str | None = None, resume: bool = False, tracking_uri: str | None = None,
         register: str | None = None, progress: bool = False, default_study: str = "autoint",
         default_data: str | Path | None = None) -> TuneResult:
    """Run ``trials`` trials (``tune.trials`` if None) of a study, then test its best trial once.

    With ``resume``, the trials are added to the study and MLflow parent run that
    ``out/tune.json`` (or ``storage`` and ``study``) name; a new study without
    ``study`` is named ``default_study``; without ``data`` (and a search of data settings), the processed folder
    is ``default_data`` (None: ``data.processed``, else ``data/processed/run``). ``register`` names a
    registered model: the best trial's model becomes its newest version, alias
    ``champion``. Optuna's log level, the random states and torch's deterministic flags are the caller's again
    afterwards.
    """
    import optuna

    verbosity = optuna.logging.get_verbosity()
    try:
        with process_state():
            return _tune(cfg, out, data=data, raw=raw, trials=trials, timeout_s=timeout_s, study=study,
                         storage=storage, resume=resume, tracking_uri=tracking_uri, register=register,
                         progress=progress, default_study=default_study, default_data=default_data)
    finally:
        optuna.logging.set_verbosity(verbosity)


def _tune(cfg: Config, out: str | Path, *, data: str | Path | None, raw: Any, trials: int | None,
          timeout_s: float | None, study: str | None, storage: str | None, resume: bool, tracking_uri: str | None,
          register: str | None, progress: bool, default_study: str,
          default_data: str | Path | None = None) -> TuneResult:
    import optuna

    require_config(cfg)
    tracking.check_model_name(register)
    tracking.check_uri_argument(tracking_uri)
    if trials is not None and not (is_int(trials) and trials >= 0):
        raise ValueError(f"trials must be an integer >= 0 (None: the config's tune.trials), got {trials!r}")
    if timeout_s is not None and (isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float))
                                  or not timeout_s > 0):
        raise ValueError(f"timeout_s must be a number of seconds > 0 (None: the config's tune.timeout_s), "
                         f"got {timeout_s!r}")
    if cfg.tune is None:
        cfg = config_from_dict({**cfg.to_dict(), "tune": {}})
    assert cfg.tune is not None
    out = Path(out).expanduser()
    state_path = out / "tune.json"
    saved = read_json(state_path, RunFolderError) if resume and state_path.is_file() else {}
    for key in ("storage", "study", "storage_file", "parent_run"):
        if key in saved and not (isinstance(saved[key], str) and saved[key]):
            raise RunFolderError(f"{state_path}: {key} must be a non-empty string, got {saved[key]!r}; the file "
                                 "was edited or damaged (autoint tune writes it)")
    if study is not None and not (isinstance(study, str) and study.strip()):
        raise ConfigError(f"--study: a study needs a name, got {study!r}")
    own = _own_storage(out, saved)  # a folder holds one study: --storage may reach it (moved, a password), not another
    reached = {own} if "storage_file" in saved else {own, saved.get("storage")}  # a copy's study.db is its own
    if storage and own is not None and not reached & {tracking.absolute_sqlite_url(storage),
                                                      _shown(tracking.absolute_sqlite_url(storage))}:
        raise RunFolderError(f"--resume: {out} holds study {saved.get('study')!r} in {_shown(own)}, not one in "
                             f"--storage {_shown(storage)}; resume it without --storage (or with its own URL), or "
                             "join that other study from another --out")
    if study and saved.get("study") not in (None, study):
        raise RunFolderError(f"--resume: {out} holds study {saved['study']!r}, not --study {study!r}; resume it "
                             "without --study, or join that other study from another --out")
    if not storage and own is not None and "***" in own:
        raise RunFolderError(f"{state_path}: its storage URL hides a password; pass --storage URL again")
    storage = tracking.absolute_sqlite_url(storage or own or default_storage(out))
    if tracking.sqlite_path(storage) is None and storage.startswith("sqlite:"):
        raise ConfigError(f"--storage {storage}: an in-memory database, which the study would not outlive (it could "
                          "never be resumed or tested again); name a file, sqlite:///PATH, or a database server")
    name = study or saved.get("study") or default_study
    if not resume and state_path.is_file():
        raise RunFolderError(f"{out} already holds a study; pass --resume to add trials to it or choose another --out")
    if not state_path.is_file():
        if (out / "run.json").is_file():  # a train run's folder: the study replaced its config.yaml and metrics.json,
            # and the run's --resume then failed naming settings
            raise RunFolderError(f"{out} holds a run of `autoint train` (its run.json), not a study; choose another "
                                 "--out for the study")
        if (out / "config.yaml").is_file() and not (out / STUDY_FILE).is_file():  # a user's own config (a study's
            # first command stopped early leaves one beside its study.db)
            raise RunFolderError(f"{out} holds a config.yaml that is no study's (no tune.json); the study would "
                                 "replace it: choose another --out for the study")
    db = tracking.sqlite_path(storage)
    if resume and db is not None and not db.is_file():  # SQLite would make an empty database (and OUT) first
        raise RunFolderError(f"--resume: no study in {out} (no {db})" if storage == default_storage(out) else
                             f"--resume: study storage {_shown(storage)} does not exist")
    searched = _searched_data(cfg.tune.search_space())
    if searched and data:  # each trial's folder is prepared under OUT/data: a --data folder would go unread
        raise ConfigError(f"tune.space.{searched[0]}: each value is prepared from the raw log into a folder of its "
                          f"own under {out / 'data'}, so --data {data} would not be read; leave it out")
    if searched and not (raw or cfg.data.raw):
        raise ConfigError(f"tune.space.{searched[0]}: each value is prepared from the raw log into a folder of "
                          "its own; pass --raw PATH (or set data.raw)")
    if "data.numeric_transform" in searched:
        _check_transform_search(cfg)
    uri = tracking.resolve_tracking_uri(tracking_uri, cfg.tracking.tracking_uri)
    trainer = check_trainer_settings(cfg, out)  # refused settings stop the command, not each trial in turn
    if trainer.world_size > 1:  # Lightning would start a copy of this command per device, each a study worker
        raise ConfigError(f"train.devices: a study trains each trial in this process on one device, but these "
                          f"settings start {trainer.world_size} processes (train.devices={cfg.train.devices!r}, "
                          f"train.num_nodes={cfg.train.num_nodes!r}); set train.devices=1, and run more tune "
                          "commands with --resume for trials in parallel")
    for key in ("train.devices", "train.num_nodes", "train.strategy", "train.accelerator"):
        if key in cfg.tune.search_space():
            raise ConfigError(f"tune.space.{key}: where a trial runs is not a hyper-parameter; set {key} outside "
                              "the space")
    for value in cfg.tune.search_space().get("train.precision", {}).get("choices", []):  # Lightning's to check
        try:
            check_trainer_settings(cfg.with_settings({"train.precision": value}), out)
        except ConfigError as e:
            raise ConfigError(f"tune.space.train.precision: {value!r} is not a valid value here ({e})") from None
    checked = not resume or bool(tracking_uri)  # a resumed study's own store is checked when it is opened
    if checked:
        tracking.check_tracking_uri(uri)  # before any minute is spent

    def prepared() -> Path | None:
        folder = Path(data) if data else default_data
        return None if searched else ensure_processed(cfg, folder, raw, progress=progress)

    if resume:  # the study's settings first: a difference is named as one, not as a stale data folder
        the_study = _open_study(cfg, storage, name, resume)  # before the folder: a mistyped study makes none
        if saved.get("parent_run") not in (None, the_study.user_attrs.get(PARENT_KEY)):
            raise RunFolderError(f"--resume: {out} holds the study of MLflow parent run {saved['parent_run']}, but "
                                 f"study {name!r} in {_shown(storage)} is another (parent run "
                                 f"{the_study.user_attrs.get(PARENT_KEY)}); resume the folder's own, or join "
                                 "that study from another --out")
        out.mkdir(parents=True, exist_ok=True)
        _check_same_search(the_study, cfg, storage)
        base = prepared()
        _check_same_data(the_study, _study_data(cfg, base, raw), storage,
                         base if base is not None else describe_inputs(raw if raw is not None else cfg.data.raw))
    else:  # the data first: a raw log that cannot be read leaves no study behind (the same command, mended,
        base = prepared()  # would then have had to --resume)
        identity = _study_data(cfg, base, raw)  # the raw files' fingerprint too, before there is a study
        out.mkdir(parents=True, exist_ok=True)
        the_study = _open_study(cfg, storage, name, resume)
        the_study.set_user_attr(SETTINGS_KEY, json.loads(json.dumps(study_settings(cfg))))
        if identity is not None:
            the_study.set_user_attr(DATA_KEY, identity)
    if base is not None:  # the folder the trials read, as train records its own (the parent run said the config's)
        cfg = replace(cfg, data=replace(cfg.data, processed=str(base.resolve())))
    if not resume:
        cfg.save(out / "config.yaml")
    # On --resume too (tune.enqueue may change between commands): an entry a trial of the study already has, run
    # or waiting, is not queued again. Entries queued earlier and not yet run still run first.
    for fixed in cfg.tune.enqueue:
        the_study.enqueue_trial(_encoded(cfg.tune.search_space(), fixed), skip_if_exists=True)
    uri, parent = _parent_run(the_study, cfg, uri, out, given=bool(tracking_uri), checked=checked)
    in_folder = {"storage_file": STUDY_FILE} if storage == default_storage(out) else {}  # moves with the folder
    write_json(state_path, {"storage": _shown(storage), "study": name, "parent_run": parent, **in_folder})

    try:
        search = _Search(cfg, out, uri, parent, base, raw, progress)
        n = cfg.tune.trials if trials is None else trials
        if n:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                warnings.filterwarnings("ignore", message=_TPE_NOTE)
                try:
                    the_study.optimize(search.objective, n_trials=n, timeout=timeout_s or cfg.tune.timeout_s,
                                       catch=(ConfigError, TrainingDiverged))
                except InputError as e:  # found by a trial (its data), so the study exists: say what to do with it
                    if not resume and not any(t.state == optuna.trial.TrialState.COMPLETE for t in the_study.trials):
                        again = (f"remove {out}" if storage == default_storage(out) else
                                 f"remove {out} and the study (optuna delete-study --study-name {name} --storage "
                                 f"{_shown(storage)})")
                        e.args = (f"{e}; the study this command started has no completed trial: {again} before "
                                  "running the mended command, or give it another --out", *e.args[1:])
                    raise
        result = _finish(the_study, search, register)
        result.ran, result.failed_now = search.ran, search.failed
    except BaseException as e:
        if not isinstance(e, tracking.ServerLost):  # a lost server is not asked again (MLflow's retries: minutes)
            tracking.end_run(uri, parent, status="KILLED")  # resumable: --resume reopens it
        raise
    finally:  # the caller's own studies keep Optuna's tracebacks
        logging.getLogger("optuna.study._optimize").removeFilter(_no_traceback_for_a_stop)
    tracking.end_run(uri, parent)
    result.storage = _shown(storage)
    return result


# ----------------------------------------------------------------------------- the end of a command
def _searched_data(space: dict[str, Any]) -> list[str]:
    """The data settings a search space varies, sorted (each combination of values gets a processed folder)."""
    return sorted(k for k in space if k.startswith("data."))


def _check_transform_search(cfg: Config) -> None:
    """A searched ``data.numeric_transform`` must reach some numeric field: refused when the log has none or
    each names its own transform (``data.columns.numeric``, which wins); a warning when only some do."""
    from .datasets import make_reader
    from .schema import NUMERIC

    reader = make_reader(cfg.data, None)
    numeric = [f.name for f in reader.fields if f.kind == NUMERIC]
    own = [name for name in numeric if reader.field_transform(name)]
    if not numeric or len(own) == len(numeric):
        why = "the log has no numeric field" if not numeric else \
            f"every numeric field names its own transform in data.columns.numeric ({', '.join(own)}), which wins"
        raise ConfigError(f"tune.space.data.numeric_transform: searching it changes nothing: {why}")
    if own:
        log.warning("tune.space.data.numeric_transform reaches only some numeric fields: %s name their own "
                    "transform in data.columns.numeric, which wins", ", ".join(own))


def _finish(study: Any, search: _Search, register: str | None) -> TuneResult:
    """Record the study's state in the parent run; test the best trial once; log and register its model."""
    from optuna.trial import TrialState

    uri, parent, out = search.uri, search.parent, search.out
    import optuna

    with warnings.catch_warnings():  # Optuna fails a trial silent past the heartbeat's grace only inside
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)  # optimize: --trials 0 runs none
        optuna.storages.fail_stale_trials(study)
    _close_stale_runs(study, uri)
    trials = study.get_trials(deepcopy=False)
    states = Counter(t.state.name.lower() for t in trials)
    result = TuneResult(str(out), study.study_name, "", uri, parent, 0, dict(states))
    tracking.log_metrics(uri, parent, {f"trials_{s}": float(states.get(s, 0)) for s in ("complete", "pruned", "fail",
                                                                                            "waiting")})
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    with warnings.catch_warnings():  # the importance plot gives it too
        warnings.filterwarnings("ignore", message=_TPE_NOTE)
        _plots(study, len(complete), out / "plots", uri, parent)
    if not complete:
        return result
    best = study.best_trial
    settings = _settings(search.space, best.params)
    result.best_trial, result.best_value, result.best_params = best.number, best.value, settings
    result.best_run_id = best.user_attrs.get("mlflow_run_id")
    tracking.set_tags(uri, parent, {"autoint.best_trial": best.number, "autoint.best_run_id": result.best_run_id,
                                    **{f"best.{k}": json.dumps(v) for k, v in settings.items()}})
    tracking.log_metrics(uri, parent, {"best_val_auc": best.value, "best_trial": best.number})
    best_cfg = search.cfg.with_settings(settings)
    # The processed folder the best trial trained on: with data settings in the space, one of the study's own
    # (best.yaml named the base folder, prepared with other settings, which `autoint train best.yaml` refused).
    # Absolute, with the raw input this command was given: best.yaml named a folder relative to where tune ran
    # and no raw log, so `autoint train best.yaml` worked only from that folder.
    best_cfg = best_cfg.with_data(search.data_for(best_cfg).resolve(), search.raw or search.cfg.data.raw)
    best_cfg.save(out / "best.yaml")
    tracking.log_artifacts(uri, parent, [out / "best.yaml", out / "config.yaml"])

    checkpoint = _best_checkpoint(best, out)
    tested = tracking.run_info(uri, parent)
    if tested["tags"].get(TESTED_TAG) == str(best.number):  # an earlier command tested this trial: once is enough
        result.test_metrics = {k: v for k, v in tested["metrics"].items() if k.startswith("test_")}
        result.calibration = {k: v for k, v in tested["metrics"].items() if k.startswith("calibration_")}
        result.model_uri = tested["tags"].get("autoint.best_model_uri")
    elif checkpoint.is_file():
        result.test_metrics, result.calibration, result.model_uri = _test_best(best_cfg, checkpoint, search,
                                                                               result.best_run_id, best.number)
    else:
        result.untested = (f"the best trial's checkpoint {checkpoint} is not on this machine; run "
                           f"`autoint tune CONFIG --resume --trials 0` with the --out that holds it to test it")
        log.warning(result.untested)
    summary_path = out / "metrics.json"
    summary = {"best_trial": best.number, "best_val_auc": best.value, "best_settings": settings,
               "best_run_id": result.best_run_id, "model_uri": result.model_uri, **result.test_metrics,
               **result.calibration}
    write_json(summary_path, summary)
    tracking.log_artifacts(uri, parent, [summary_path])
    if register and result.model_uri:
        result.registered = tracking.register_model(uri, result.best_run_id, register)
        tracking.set_tags(uri, parent, {REGISTERED_TAG: result.registered})
    elif register:  # it was skipped without a word
        log.warning("--register %s: not registered: no logged model of the best trial is known here (its model is "
                    "logged where it is tested, by a command on the machine that holds its checkpoint: run that one "
                    "with --register %s)", register, register)
    _drop_other_checkpoints(out, trials, best.number)
    return result


def _test_best(cfg: Config, checkpoint: Path, search: _Search, best_run: str,
               best_trial: int) -> tuple[dict[str, float], dict[str, float], str]:
    """The one look at the test split: the best trial's checkpoint, calibrated (``train.calibration``) and scored
    in fp32; its model logged. Returns the test metrics, the calibration fitted and the model's URI."""
    uri, parent = search.uri, search.parent
    data = search.data_for(cfg)
    calibration = (calibrate(checkpoint, data_module(cfg, data)) if cfg.train.calibration != "none" else None) or {}
    metrics = evaluate(checkpoint, data, "test", progress=search.progress)
    for run_id in (parent, best_run):
        tracking.log_metrics(uri, run_id, {**metrics, **calibration})
    tracking.log_artifacts(uri, best_run, [checkpoint], "checkpoints")
    tracking.log_artifacts(uri, best_run, [data / "schema.json", data / "encoder.json", data / "vocabulary.parquet"])
    model_uri = log_served_model(uri, best_run, checkpoint, data)
    tracking.set_tags(uri, parent, {"autoint.best_model_uri": model_uri, TESTED_TAG: best_trial})
    return metrics, calibration, model_uri


def _close_stale_runs(study: Any, uri: str) -> None:
    """Trials whose process died (failed by Optuna's heartbeat) leave their MLflow run RUNNING: end it KILLED."""
    from optuna.trial import TrialState

    for t in study.get_trials(deepcopy=False, states=(TrialState.FAIL,)):
        run_id = t.user_attrs.get("mlflow_run_id")
        if run_id and tracking.run_info(uri, run_id)["status"] == "RUNNING":
            tracking.set_tags(uri, run_id, {"autoint.trial_state": "fail"})
            tracking.end_run(uri, run_id, "KILLED")


def _drop_other_checkpoints(out: Path, trials: list[Any], best: int) -> None:
    """Only the best trial's checkpoint is worth its disk: the others are never tested. Those of failed trials
    (interrupted, diverged, killed) go too; a running trial's (another worker's) stays."""
    from optuna.trial import TrialState

    for t in trials:
        if t.number != best and t.state in (TrialState.COMPLETE, TrialState.FAIL, TrialState.PRUNED):
            shutil.rmtree(out / "trials" / f"{t.number:04d}", ignore_errors=True)


def _plots(study: Any, complete: int, folder: Path, uri: str, parent: str) -> None:
    """Optimisation history and (from two completed trials on) parameter importances, as PNG artifacts."""
    from .plots import study_plots

    if not complete:
        return
    tracking.set_tags(uri, parent, {"autoint.param_importances": "needs 2 completed trials" if complete < 2
                                    else "plots/param_importances.png"})  # the tag said 'needs' ever after
    _, skipped = study_plots(study, folder, importances=complete >= 2)
    for name, why in skipped.items():
        log.warning("%s not drawn: %s", name, why)
    tracking.log_artifacts(uri, parent, [folder], "plots")

