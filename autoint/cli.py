"""The ``autoint`` command line: thin commands over the library's functions.

    autoint download NAME --to DIR
    autoint prepare CONFIG --raw PATH [PATH ...] --out DIR [--overwrite]
    autoint train CONFIG [--raw PATH [PATH ...] | --data DIR] [--out DIR] [--resume] [--register NAME]
    autoint tune CONFIG --trials N [--timeout S] [--study NAME] [--storage URL] [--resume] [--register NAME]
    autoint evaluate MODEL --data DIR [--split test] [--precision 32]
    autoint predict MODEL --input FILE --output FILE [--precision 32]
    autoint serve MODEL [--host 127.0.0.1] [--port 5000]
    autoint summary CONFIG [--data DIR]
    autoint inspect MODEL --data DIR --out DIR [--split test] [--rows N] [--explain 0,5,9] [--top 10]

Every command takes ``--set KEY=VALUE`` overrides of the config where it reads
one. Errors in input (a bad setting, a missing file, a malformed row: any
:class:`~autoint.errors.InputError`) end the command with one clear line naming
the culprit and exit status 2, as do a full disk and a path this user may not
read or write; any other exception is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import logging
import math
import os
import secrets
import shlex
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .config import Config, ConfigError, TuneConfig, load_config, parse_override, read_yaml
from .errors import (
    InputError,
    Terminated,
    disk_full,
    hide_password,
    hide_passwords,
    message_head,
    out_of_memory,
    stop_on_sigterm,
)
from .files import write_json
from .schema import FIRST_VALUE, NUMERIC, FieldSpec, Schema

log = logging.getLogger(__name__)

ARCHDETECT_ROWS = 256  # rows inspect --method archdetect probes (each with F^2 + F + 2 variants, 2 x (1+F+F(F-1)/2))


class UsageError(InputError):
    """A command was called in a way it cannot serve; the message says how to fix it."""


# ----------------------------------------------------------------------------- helpers
def _config(args: argparse.Namespace) -> Config:
    try:
        return load_config(args.config, _overrides(args), tune=args.command == "tune")
    except ConfigError as e:  # a flag that stands for a setting is named as typed, not as the --set it became
        message = str(e)
        for flag, setting in _SETTING_FLAGS.items():
            value = getattr(args, flag, None)
            if value is not None:
                message = message.replace(f"--set {setting}={value}:", f"--{flag.replace('_', '-')} {value}:", 1)
        raise ConfigError(message) from None


def _prepare_command(args: argparse.Namespace) -> str:
    """``autoint prepare`` with this command's config and data settings (``--set data.*``, and the flags that
    stand for one): what a stale folder's advice repeats, so that it prepares what this command would train on."""
    data = [o for o in _overrides(args) if o.startswith("data.")]
    return " ".join(["autoint prepare", shlex.quote(str(args.config)), *(f"--set {shlex.quote(o)}" for o in data)])


def _overrides(args: argparse.Namespace) -> list[str]:
    """``--set`` values, then the flags that stand for a setting (a flag wins over ``--set``)."""
    extra = list(args.set or ())
    for flag, setting in _SETTING_FLAGS.items():
        value = getattr(args, flag, None)
        if value is not None:
            extra.append(f"{setting}={value}")
    return extra


_SETTING_FLAGS = {"max_bad_fraction": "data.max_bad_fraction", "devices": "train.devices",
                  "num_nodes": "train.num_nodes", "strategy": "train.strategy", "accelerator": "train.accelerator",
                  "precision": "train.precision", "max_epochs": "train.max_epochs"}


def _model_name(text: str) -> str:
    """A registered model's name, checked before a run (see :func:`autoint.tracking.check_model_name`)."""
    from .tracking import TrackingError, check_model_name

    try:
        check_model_name(text)
    except TrackingError:
        raise argparse.ArgumentTypeError(f"{text!r}: a registered model's name is not empty and holds no '/', ':' "
                                         "or \"'\"") from None
    return text


def _raw_arg(raw: list[str] | None) -> str | list[str] | None:
    """``--raw``: one path as it is, several (a glob the shell expanded, or a list) as a list."""
    if not raw:
        return None
    return raw[0] if len(raw) == 1 else list(raw)


def _path(text: str) -> Path:
    """A path argument: ``~`` expanded where the shell did not (a quoted one, a script's), an empty one refused
    (--out '' trained into the current folder)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty path")
    return Path(text).expanduser()


def _progress(args: argparse.Namespace) -> bool:
    """Progress bars only for a person watching a terminal: a log file gets none."""
    return not getattr(args, "quiet", False) and sys.stdout.isatty() and sys.stderr.isatty()


def _venv_command(name: str) -> str:
    """How to run one of this environment's console scripts as printed: its full path when not on PATH."""
    import shutil

    local = Path(sys.executable).parent / name
    if local.is_file() and shutil.which(name) != str(local):
        return str(local)
    return name


def schema_for(cfg: Config, data: str | Path | None = None) -> Schema:
    """The fitted schema of a processed folder, or the unfitted one a config's format implies.

    A folder prepared with other data settings than ``cfg``'s is refused, as ``train`` refuses it: its
    vocabularies are not those this config would train on (a study's best.yaml read the base folder's)."""
    folder = data or cfg.data.processed
    folder = None if folder is None else Path(folder).expanduser()  # a config's "~/data/x"
    if folder is not None and (Path(folder) / "schema.json").is_file():
        if (Path(folder) / "prepare.json").is_file():
            from .preprocess import StaleDataError, prepared_differences

            differences = prepared_differences(folder, cfg)
            if differences:
                raise StaleDataError(f"{folder} was prepared from other data or settings than this config "
                                     f"({'; '.join(differences)}), so its vocabularies are not the ones this config "
                                     "trains on; give the config it was prepared with (a run's config.yaml, or "
                                     "the same --set settings), another --data folder, or prepare it")
        return Schema.load(Path(folder) / "schema.json")
    if data is not None:
        raise UsageError(f"{data}: no schema.json here; run `autoint prepare` first")
    from .datasets import make_reader
    from .encoder import Encoder

    # The fields as prepare encodes them: a numeric field bucketed (numeric_transform: bucket) is the categorical
    # field of its buckets (the reader's own fields printed the shipped Criteo model with 13 numeric fields).
    return Schema(Encoder.for_reader(make_reader(cfg.data, None), cfg.data).fields)


def _with_placeholder_vocab(schema: Schema) -> Schema:
    return Schema(tuple(
        f if f.kind == NUMERIC or f.vocab_size is not None else FieldSpec(f.name, f.kind, FIRST_VALUE, f.max_len)
        for f in schema.fields
    ), schema.label)


def format_summary(cfg: Config, schema: Schema, title: str) -> str:
    import torch

    from .model import TRAINING_COPIES, AutoInt, count_parameters, physical_memory

    fitted = schema.is_fitted
    with torch.device("meta"):  # shapes only: a model wider than memory is described, not allocated
        model = AutoInt(schema if fitted else _with_placeholder_vocab(schema), cfg.model)
    kinds = {k: len(schema.of_kind(k)) for k in ("numeric", "categorical", "multi")}
    variant = "AutoInt+" if cfg.model.dnn_hidden else "AutoInt"
    lines = [
        f"{variant}: {title}",
        f"fields: {len(schema)} ({kinds['numeric']} numeric, {kinds['categorical']} categorical, "
        f"{kinds['multi']} multi-valued)",
        f"D={cfg.model.embedding_dim}  layers={cfg.model.num_layers}  heads={cfg.model.num_heads}  "
        f"d'={cfg.model.head_dim}  residual={cfg.model.residual}  scaled={cfg.model.scale_attention}  "
        f"layer_norm={cfg.model.layer_norm}  dnn={list(cfg.model.dnn_hidden) or 'none'}  "
        f"first_order={cfg.model.first_order}",
        "",
        f"{'parameter':<44}{'shape':>18}{'count':>14}",
    ]
    embedding_ids = {id(p) for p in model.embedding_parameters()}
    for name, p in model.named_parameters():
        tag = "  [embedding]" if id(p) in embedding_ids else ""
        shape = "x".join(map(str, p.shape))
        if id(p) in embedding_ids and p.dim() == 2 and name.endswith("table.weight") and not fitted:
            shape, count = f"Vx{p.shape[1]}", "V rows"
        else:
            count = f"{p.numel():,}"
        lines.append(f"{name:<44}{shape:>18}{count:>14}{tag}")
    counts = count_parameters(model)
    lines.append("")
    if fitted:
        lines.append(f"embedding tables:        {counts['embedding']:>12,}")
    else:
        tables = sum(p.numel() for n, p in model.named_parameters() if n.endswith("table.weight"))
        fixed = counts["embedding"] - tables
        per_row = sum(p.shape[1] for n, p in model.named_parameters() if n.endswith("table.weight"))
        lines.append(f"embedding tables:        {fixed:>12,} + {per_row} per vocabulary row "
                     "(vocabularies not fitted: pass --data DIR for exact counts)")
    lines.append(f"everything else:         {counts['non_embedding']:>12,}")
    memory = physical_memory()
    # Without vocabularies, what is known (the weights outside the tables) is a lower bound: said when it alone
    # is too much (nothing was said before --data was given)
    known = counts["total"] if fitted else counts["non_embedding"]
    from .system import AUTO_SPARSE_ROWS, resolve_optimizer

    optimizer = resolve_optimizer(cfg.train, model) if fitted else "adam"  # unknown tables: the dense count
    copies = TRAINING_COPIES[optimizer]
    if memory is not None and 4 * copies * known > memory:
        least = "" if fitted else "at least "
        lines.append(f"memory:                  {least}{4 * known / 1e9:.1f} GB of fp32 weights, about "
                     f"{4 * copies * known / 1e9:.1f} GB while training (gradients, {optimizer}'s moments and "
                     f"temporaries), more than this machine's {memory / 1e9:.1f} GB: train refuses it"
                     + ("" if fitted else " (the weights outside the embedding tables alone)"))
    if fitted:

        rows = sum(t.num_embeddings for t in model.embedding_tables())
        why = (f" ({rows:,} table rows; sparse from {AUTO_SPARSE_ROWS:,})" if cfg.train.optimizer == "auto" else "")
        lines.append(f"optimizer:               {cfg.train.optimizer} -> {optimizer}{why} "
                     "in one process or on CPU ranks")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- commands
def cmd_summary(args: argparse.Namespace) -> int:
    cfg = _config(args)
    if args.data is None and not cfg.data.processed:  # the folder train and prepare use: data/processed/NAME
        cfg = cfg.with_settings({"data.processed": str(_processed_folder(cfg, args))})
    schema = schema_for(cfg, args.data)
    print(format_summary(cfg, schema, str(args.config)))
    return 0


def cmd_download(args: argparse.Namespace) -> int:
    from .datasets.download import DATASETS, DownloadError, download

    if args.list or args.name is None:
        seen = set()
        for source in DATASETS.values():
            if source.name not in seen:
                seen.add(source.name)
                print(source.describe())
                print()
        return 0
    if args.to is None:
        raise UsageError("--to DIR is required to download")
    try:
        path = download(args.name, args.to, progress=not args.quiet, bar=_progress(args), url=args.url,
                        sha256=args.sha256, force=args.force, verify=not args.no_verify)
    except DownloadError as e:
        raise UsageError(str(e)) from None
    print(f"{args.name}: ready in {path}")
    return 0


# Where a config without data.processed prepared before 2026-11-27, whatever its name.
SHARED_PROCESSED = Path("data/processed/run")


def _processed_folder(cfg: Config, args: argparse.Namespace) -> Path:
    """The processed folder of a command given no --data / --out: ``data.processed``, else ``data/processed/``
    and the config's name, as the run folder is ``runs/`` and its name (one shared ``data/processed/run`` made a
    second config's run refuse the first's folder as prepared from other data). Where that shared folder was
    prepared from this config's settings and input, and the named one is not prepared yet, the shared one is used
    (with a note): a run started there resumes on its data, and nothing is prepared twice."""
    if cfg.data.processed:
        return Path(cfg.data.processed).expanduser()
    named = Path("data/processed") / Path(args.config).stem
    if not (named / "prepare.json").is_file() and (SHARED_PROCESSED / "prepare.json").is_file():
        from .datasets.errors import DataError
        from .preprocess import prepared_differences

        try:
            same = not prepared_differences(SHARED_PROCESSED, cfg, _raw_arg(getattr(args, "raw", None)))
        except DataError:  # unreadable: not ours to use
            same = False
        if same:
            print(f"note: using {SHARED_PROCESSED}, prepared from these settings where a config without "
                  f"data.processed prepared before; a new folder for this config would be {named}", file=sys.stderr)
            return SHARED_PROCESSED
    return named


def cmd_prepare(args: argparse.Namespace) -> int:
    from .preprocess import prepare

    cfg = _config(args)
    raw = _raw_arg(args.raw) or cfg.data.raw
    out = args.out or _processed_folder(cfg, args)
    report = prepare(cfg, raw, out, progress=_progress(args), overwrite=args.overwrite)
    print(format_prepare_report(report, out))
    return 0


def format_prepare_report(report: dict, out: str | Path) -> str:
    rows = report["rows"]
    lines = [f"prepared {sum(rows.values()):,} rows from {report['source']} into {out}"]
    for split, n in rows.items():
        rate = report["positive_rate"][split]
        lines.append(f"  {split:<6}{n:>12,} rows" + (f"  ({rate:.1%} positive)" if rate is not None else ""))
    bad = report["bad_rows"]
    if bad["total"]:  # the warning printed before this names lines and a sample of each kind, as prepare.json does
        kinds = ", ".join(f"{k} {n:,} (first lines {bad['first_lines'].get(k, [])})" for k, n in bad["counts"].items())
        lines.append(f"  skipped {bad['total']:,} bad rows of {report['rows_seen']:,}: {kinds}; "
                     "a sample of each kind in prepare.json")
    for reason, n in bad["dropped_by_design"].items():
        lines.append(f"  dropped {n:,} rows by design: {reason}")
    ignored = report.get("ignored_columns") or []
    if ignored:  # a field left out of the settings by mistake shows here, not only in prepare.json
        from .errors import few

        lines.append(f"  ignored {len(ignored)} column(s) no setting names: {few(ignored, 12)} "
                     "(data.columns.drop: on purpose)")
    if report.get("rows_per_s"):
        lines.append(f"  {report['rows_per_s']:,.0f} rows/s")
    return "\n".join(lines)


def _split_rows(data: Path) -> str:
    """``train 8,000, valid 1,000, test 1,000 rows`` from a processed folder's prepare.json."""
    from .files import read_json

    rows = read_json(Path(data) / "prepare.json").get("rows", {})
    return ", ".join(f"{name} {int(n):,}" for name, n in rows.items()) + " rows"


def _show_calibration(c: dict[str, float] | None) -> None:
    """The Platt pair a run fitted (train.calibration), if any."""
    if c:
        sign = "-" if c["calibration_b"] < 0 else "+"
        print(f"calibration   p = sigmoid({c['calibration_a']:.4g} * logit {sign} {abs(c['calibration_b']):.4g}), "
              f"fitted on {int(c['calibration_rows']):,} validation rows (train.calibration)")


def _epochs_line(result: Any, cfg: Config) -> str:
    """train's line on its epochs: how many, the best, why they ended and what this command took."""
    waited = max(cfg.train.patience, 1)  # patience 0 stops as 1 does: after one epoch without a better AUC
    ended = ("early stopping: no better validation AUC in the last "
             f"{waited} epoch{'s' * (waited != 1)}" if result.early_stopped
             else f"train.max_epochs = {cfg.train.max_epochs} reached")
    seconds = f"{result.fit_seconds:.0f}" if result.fit_seconds >= 10 else f"{result.fit_seconds:.1f}"
    if result.epochs_before == 0:
        took = f"{seconds} s"
    elif result.epochs > result.epochs_before:  # resumed: this command's seconds are its epochs' only
        took = f"resumed after epoch {result.epochs_before}: {seconds} s for epochs {result.epochs_before + 1}-" \
               f"{result.epochs}"
    else:
        took = "resumed: no epoch was left to run"
    return f"epochs        {result.epochs} run, best {result.best_epoch} ({ended}; {took})"


def _runs_own_max_epochs(cfg: Config, args: argparse.Namespace, out: Path) -> Config:
    """--resume without --max-epochs (or a --set of it) continues to the run's own limit, not the config file's: a
    run started with --max-epochs 8 and killed trained on to the file's 20, and a finished one was extended."""
    if args.max_epochs is not None or any(o.split("=", 1)[0].strip() == "train.max_epochs" for o in args.set or []):
        return cfg
    saved = _run_section(out, "train").get("max_epochs")
    return cfg.with_settings({"train.max_epochs": saved}) if saved not in (None, cfg.train.max_epochs) else cfg


def _run_section(out: Path, section: str) -> dict[str, Any]:
    """A section of the config a run in ``out`` saved (its config.yaml), or none (no run there, or not one of ours:
    train() says so)."""
    try:
        settings = read_yaml(out / "config.yaml")[section]
    except (OSError, ConfigError, KeyError, TypeError):
        return {}
    return settings if isinstance(settings, dict) else {}


def _resume_advice(out: Path, folder: Path) -> str:
    """What a stale ``folder``'s error tells --resume: not to prepare that folder again (another run's, perhaps), but
    to name the data the run started with, which its config.yaml records; or, that folder named, to resume with the
    run's own settings (one changed since, in the config file or a --set)."""
    trained_on = _run_section(out, "data").get("processed")
    if trained_on and Path(trained_on).expanduser().absolute() == folder.expanduser().absolute():
        return (f"--resume needs the run's own settings, with which this folder was prepared ({out / 'config.yaml'} "
                "holds them): drop what changed since")
    where = f" ({trained_on}, as its config.yaml records)" if trained_on else ""
    return (f"--resume continues on the data the run in {out} started with{where}: name that folder with --data, "
            "or start a new run with another --out")


def cmd_train(args: argparse.Namespace) -> int:
    from .tracking import TrackingError
    from .train import EpochLines, ensure_processed, train

    cfg = _config(args)
    out = args.out or Path("runs") / Path(args.config).stem
    if args.resume:
        cfg = _runs_own_max_epochs(cfg, args, Path(out).expanduser())
    try:
        folder = args.data or _processed_folder(cfg, args)
        data = ensure_processed(cfg, folder, _raw_arg(args.raw), progress=_progress(args),
                                command=_prepare_command(args), settings_only=args.resume,
                                stale_advice=_resume_advice(Path(out).expanduser(), folder) if args.resume else None)
        lines = [] if _progress(args) or args.quiet else [EpochLines()]  # no bar to watch: a line per epoch
        # --raw in its params and config.yaml; resumed without it, the raw log the run started with stays there
        raw = _raw_arg(args.raw) or (_run_section(Path(out).expanduser(), "data").get("raw") if args.resume else None)
        result = train(cfg.with_data(raw=raw), data, out, resume=args.resume, tracking_uri=args.tracking_uri,
                       progress=_progress(args), register=args.register, callbacks=lines)
    except TrackingError as e:
        raise UsageError(str(e)) from None
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM (Terminated)
        if any((Path(out).expanduser() / "checkpoints").glob("*.ckpt")):  # the line after this one says why it ended
            print(f"autoint train: the run in {out} continues from its last checkpoint with the same command and "
                  "--resume", file=sys.stderr)
        raise
    if not result.run_id:  # a non-zero rank of a data-parallel run: rank zero reports
        return 0
    m = result.test_metrics
    print()
    print(f"test AUC      {m.get('test_auc', float('nan')):.4f}")
    print(f"test logloss  {m.get('test_logloss', float('nan')):.4f}")
    _show_calibration(result.calibration)
    print(_epochs_line(result, cfg))
    print(f"MLflow run    {result.run_id}  ({hide_password(result.tracking_uri)})")
    print(f"model         {result.model_uri}")
    if result.registered:
        _show_registered(result.registered)
    print(f"data          {data}  ({_split_rows(data)}; evaluate and inspect take it as --data)")
    print(f"run folder    {result.run_dir}  (best checkpoint: {result.best_checkpoint})")
    uri = result.tracking_uri  # a server shows itself; `mlflow ui` refuses its URI
    served = uri.startswith(("http://", "https://"))
    browse = hide_password(uri) if served else f"{_venv_command('mlflow')} ui --backend-store-uri {uri}"
    print(f"browse        {browse}")
    if cfg.data.format == "synthetic":
        _show_planted(cfg, _raw_arg(args.raw), result)
    return 0


def _show_registered(registered: str) -> None:
    from .tracking import CHAMPION

    name = registered.removeprefix("models:/").rsplit("/", 1)[0]
    print(f"registered    {registered}  (alias {CHAMPION}: models:/{name}@{CHAMPION})")


def _running(n: int) -> str:
    """Trials still marked running: on another machine, or killed with their process (Optuna's heartbeat fails
    those three minutes after their last beat)."""
    from .tune import GRACE_S

    if not n:
        return ""
    return (f", {n} running: elsewhere, or left by a killed command and failed by the heartbeat "
            f"{GRACE_S // 60} minutes after their last beat")


def _set_keys(text: str) -> list[str]:
    """The settings one ``--set KEY=VALUE`` gives: KEY, or each key under it where VALUE is a mapping
    (``train={lr: 0.5}`` sets train.lr). ``text`` was read by the config already, so it parses."""
    key, value = parse_override(text)

    def keys(prefix: str, v: Any) -> list[str]:
        if not (isinstance(v, dict) and v):
            return [prefix]
        return [k for sub, x in v.items() for k in keys(f"{prefix}.{sub}", x)]

    return [key] if key == "tune" or key.startswith("tune.") else keys(key, value)


def cmd_tune(args: argparse.Namespace) -> int:
    from .tune import tune

    if args.trials is not None and args.trials < 0:
        raise UsageError(f"--trials {args.trials}: must be >= 0 (0 only tests and logs the best trial so far)")
    if args.timeout is not None and not (math.isfinite(args.timeout) and args.timeout > 0):
        raise UsageError(f"--timeout {args.timeout}: must be a finite number of seconds > 0")
    cfg = _config(args)
    searched = (cfg.tune or TuneConfig()).search_space()  # without a tune section, the default space
    given = [(f"--set {text.split('=', 1)[0].strip()}", key) for text in args.set or ()
             for key in _set_keys(text)]
    given += [(f"--{flag.replace('_', '-')}", key) for flag, key in _SETTING_FLAGS.items()
              if getattr(args, flag, None) is not None]
    for flag, key in given:  # the space would replace the value in every trial, without a word
        if key in searched:
            raise UsageError(f"{flag}: tune.space.{key} searches this setting, so each trial draws its own value; "
                             f"drop {flag}, or take {key} out of tune.space in the config")
    out = args.out or Path("runs") / f"tune-{Path(args.config).stem}"
    result = tune(cfg, out, data=args.data, raw=_raw_arg(args.raw), trials=args.trials, timeout_s=args.timeout,
                  study=args.study, storage=args.storage, resume=args.resume, tracking_uri=args.tracking_uri,
                  register=args.register, progress=_progress(args), default_study=Path(args.config).stem,
                  default_data=_processed_folder(cfg, args))
    s = result.states
    if args.register and result.best_trial is None:  # it was skipped without a word, status 0
        raise UsageError(f"--register {args.register}: no trial of study {result.study} has completed, so there is "
                         f"no model to register ({s.get('fail', 0)} failed, {s.get('pruned', 0)} pruned: see the "
                         f"trials' autoint.error tags in MLflow run {result.parent_run_id})")
    queued = f", {s['waiting']} queued (tune.enqueue)" if s.get("waiting") else ""  # run by the next command
    print(f"study         {result.study}: {_plural(result.ran, 'trial')} run now, {sum(s.values())} in all "
          f"({s.get('complete', 0)} complete, {s.get('pruned', 0)} pruned, {s.get('fail', 0)} failed"
          f"{_running(s.get('running', 0))}{queued})  [{result.storage}]")
    if result.best_trial is None:
        print("best trial    none completed yet")
    else:
        chosen = "  ".join(f"{k}={v}" for k, v in result.best_params.items())
        print(f"best trial    #{result.best_trial}: validation AUC {result.best_value:.4f}  ({chosen})")
    m = result.test_metrics
    if m:
        print(f"test AUC      {m.get('test_auc', float('nan')):.4f}  (the best trial, scored once on the test split)")
        print(f"test logloss  {m.get('test_logloss', float('nan')):.4f}")
        _show_calibration(result.calibration)
    elif result.untested:
        print(f"test          not scored: {result.untested}")
    print(f"MLflow run    {result.parent_run_id}  ({hide_password(result.tracking_uri)}); each trial a child run")
    if result.model_uri:
        print(f"model         {result.model_uri}")
    if result.registered:
        _show_registered(result.registered)
    if result.best_trial is not None:
        print(f"best config   {Path(result.out) / 'best.yaml'}")
    print(f"more trials   {_tune_again(args, result.out)}")
    if result.ran and result.failed_now == result.ran:  # every trial failed: not a success to a script
        print(f"autoint tune: error: all {_plural(result.ran, 'trial')} run now failed (their errors are the "
              "autoint.error tags of their MLflow runs)", file=sys.stderr)
        return 2
    return 0


def _tune_again(args: argparse.Namespace, out: Path) -> str:
    """The command that resumes this study: its config, settings (a study resumed with others is refused), raw
    input, data folder, study name and storage, as given now."""
    words = ["autoint tune", shlex.quote(str(args.config)), *(f"--set {shlex.quote(o)}" for o in _overrides(args))]
    if args.raw:
        words += ["--raw", *map(shlex.quote, args.raw)]
    from .tune import _shown

    storage = None if args.storage is None else _shown(args.storage)  # printed: a password in it is hidden
    for flag, value in (("--data", args.data), ("--study", args.study), ("--storage", storage),
                        ("--tracking-uri", args.tracking_uri)):
        if value is not None:
            words += [flag, shlex.quote(str(value))]
    return hide_passwords(" ".join([*words, "--out", shlex.quote(str(out)), "--resume --trials N"]))  # printed


def _show_planted(cfg: Config, raw: str | list[str] | None, result) -> None:
    """For synthetic data: the interactions the model found, next to the ones the generator planted."""
    import json

    from .datasets.synthetic import load_planted

    # The processed folder remembers the raw file it came from; planted.json lies beside it.
    report = Path(result.data_dir) / "prepare.json"
    named = [json.loads(report.read_text())["data"]["raw"]] if report.is_file() else []
    named += [p for p in (raw, cfg.data.raw) if p]
    candidates = [Path(x) for p in named for x in (p if isinstance(p, list) else [p])]  # a list: its paths
    folders = [c if c.is_dir() else c.parent for c in candidates]
    found_in = next((f for f in folders if (f / "planted.json").is_file()), None)
    if found_in is None:
        print("\n(no planted.json beside the raw data: skipping the planted-crosses comparison)")
        return
    if cfg.model.num_layers == 0:  # a DNN-only model: trained and logged; nothing to inspect (it failed the run)
        print("\n(the model has no interacting layers, hence no attention maps: skipping the planted-crosses "
              "comparison)")
        return
    planted = load_planted(found_in)
    print()
    found = inspect_run(Path(result.best_checkpoint), Path(result.data_dir), Path(result.run_dir) / "inspection",
                        (result.tracking_uri, result.run_id), top=max(len(planted), 5), artifact_path="inspection")
    top = found.top_pairs(len(planted))
    top_set = {frozenset(p) for p in zip(top["field_a"], top["field_b"])}
    print()
    if not planted:  # a header with nothing under it (n_crosses: 0)
        print("planted crosses: none (the generator planted no cross)")
        return
    print(f"planted crosses ({len(planted)}), and whether the top {len(planted)} pairs found them:")
    for fields in planted:
        pair = frozenset(fields[:2]) if len(fields) == 2 else None
        mark = "found" if pair is not None and pair in top_set else ("triple" if pair is None else "missed")
        print(f"  {' x '.join(fields):<20} {mark}")


def cmd_evaluate(args: argparse.Namespace) -> int:
    from .checkpoint import resolve_checkpoint
    from .train import evaluate

    ckpt = resolve_checkpoint(args.model, args.tracking_uri)
    metrics = evaluate(ckpt, args.data, args.split, progress=_progress(args), precision=args.precision)
    for k, v in metrics.items():
        print(f"{k:<16}{v:.4f}")
    return 0


def cmd_predict(args: argparse.Namespace) -> int:
    from .checkpoint import resolve_checkpoint
    from .predict import Scorer

    if args.chunk_rows < 1:  # before the model is loaded (or downloaded)
        raise UsageError(f"--chunk-rows {args.chunk_rows}: must be a positive number of rows")
    scorer = Scorer.from_checkpoint(resolve_checkpoint(args.model, args.tracking_uri), precision=args.precision)
    rows = scorer.score_file(args.input, args.output, chunk_rows=args.chunk_rows, keep=args.keep or ())
    print(f"scored {rows:,} rows into {args.output}")
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    from .serving import serve

    return serve(args.model, host=args.host, port=args.port, tracking_uri=args.tracking_uri)


def _parse_rows(text: str | None) -> list[int]:
    """``"0,5,9"`` → ``[0, 5, 9]``; the error names --explain."""
    if not text:
        return []
    try:
        rows = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise UsageError(f"--explain {text!r}: expected comma-separated row positions, e.g. 0,5,9") from None
    if any(r < 0 for r in rows):
        raise UsageError(f"--explain {text!r}: row positions must be >= 0")
    return rows


def _model_run(model: str, ckpt: Path, tracking_uri: str | None) -> tuple[str, str] | None:
    """(tracking URI, run id) of the MLflow run a model came from, if it came from one."""
    from . import tracking
    from .files import read_run_state

    if model.startswith(("runs:/", "models:/")):
        uri = tracking.resolve_tracking_uri(tracking_uri)
        run_id = tracking.run_id_from_model_uri(model, uri)
        return (uri, run_id) if run_id else None
    for folder in (Path(model), ckpt.parent, ckpt.parent.parent):  # run folder, or its checkpoints/
        state = folder / "run.json"
        if state.is_file():
            uri, run_id = read_run_state(state, UsageError)
            mine = tracking.resolve_tracking_uri(tracking_uri)
            if uri != mine:  # a run folder names its store: one handed over could name anyone's server, which would
                # get this user's MLflow credentials (sent with every request) and the inspection. Only the store
                # this command names (--tracking-uri, else MLFLOW_TRACKING_URI, else ./mlflow.db) is written to.
                log.warning("%s: the inspection is not logged to MLflow: its run %s is in %s, and this command's "
                            "store is %s; pass --tracking-uri %s to log it there", state, run_id, hide_password(uri),
                            hide_password(mine), shlex.quote(hide_password(uri)))
                return None
            return uri, run_id
    return None


def format_pairs(pairs) -> str:
    """A pair table as printed: four significant figures, so small but ordered scores stay apart."""
    return pairs.to_string(index=False, float_format=lambda v: f"{v:.4g}")


def _plural(n: int, noun: str) -> str:
    return f"{n:,} {noun}{'s' * (n != 1)}"


def cmd_inspect(args: argparse.Namespace) -> int:
    from .checkpoint import resolve_checkpoint
    from .tracking import TrackingError

    if args.rows is not None and args.rows < 1:
        raise UsageError(f"--rows {args.rows}: must be a positive number of rows")
    if args.top < 1:
        raise UsageError(f"--top {args.top}: must be >= 1")
    if args.batch_size < 1:
        raise UsageError(f"--batch-size {args.batch_size}: must be a positive number of rows")
    if args.permutations is not None and args.permutations < 0:
        raise UsageError(f"--permutations {args.permutations}: must be >= 0 (0: no significance test)")
    if args.alpha is not None and not 0 < args.alpha < 1:
        raise UsageError(f"--alpha {args.alpha}: must be between 0 and 1")
    explain = _parse_rows(args.explain)
    try:
        ckpt = resolve_checkpoint(args.model, args.tracking_uri)
        run = _model_run(str(args.model), ckpt, args.tracking_uri)
    except TrackingError as e:
        raise UsageError(str(e)) from None
    inspect_run(ckpt, args.data, Path(args.out), run, split=args.split, rows=args.rows, explain=explain,
                top=args.top, batch_size=args.batch_size, model_ref=str(args.model),
                permutations=args.permutations, alpha=args.alpha, method=args.method)
    return 0


INSPECTION_FOLDERS = ("matrices", "explanations", "heatmaps")
INSPECTION_FILES = ".inspection-files.json"  # the files an inspection wrote into its --out, relative to it


def _earlier_inspection(out: Path) -> list[Path]:
    """The files an earlier ``autoint inspect`` wrote into ``out``, to be removed before this one writes: those
    its :data:`INSPECTION_FILES` lists, or, for an inspection written before that list, the tables and heatmaps
    of the names it writes. Files of the user's own are never among them: an ``out`` holding a ``summary.json``
    that is no inspection's is refused (it was overwritten, and every file under the three folders removed)."""
    summary, manifest = out / "summary.json", out / INSPECTION_FILES
    if not manifest.is_file():
        if not summary.is_file():
            return []
        try:
            earlier = json.loads(summary.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError):
            earlier = None
        # (the keys every version of summary.json has held)
        if not (isinstance(earlier, dict) and {"rows", "fields", "top_pairs"} <= set(earlier)):
            raise UsageError(f"--out {out} holds a summary.json that is no autoint inspection's; name another "
                             "folder, or move that file")
    try:
        listed = json.loads(manifest.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        listed = None
    if isinstance(listed, list) and all(isinstance(p, str) for p in listed):
        root = out.resolve()
        paths = [out / p for p in listed]
        # only files under out: a list edited to name ../x is not followed
        return [p for p in paths if root in p.parent.resolve().parents or p.parent.resolve() == root]
    # an inspection written before the list (or a list that cannot be read): by autoint's names
    return ([out / name for name in ("pairs.csv", "attention_long.csv")] + sorted((out / "matrices").glob("*.csv"))
            + sorted((out / "explanations").glob("row*.csv")) + sorted((out / "heatmaps").glob("*.png")))


def inspect_run(ckpt: Path, data: Path, out: Path, run: tuple[str, str] | None, *, split: str = "test",
                rows: int | None = None, explain: list[int] | tuple[int, ...] = (), top: int = 10,
                batch_size: int = 4096, model_ref: str | None = None, permutations: int | None = None,
                alpha: float | None = None, method: str = "attention", artifact_path: str | None = None):
    """Inspect a checkpoint on one split: write tables and heatmaps, print the top pairs, log to its run.

    An ``out`` that holds an earlier inspection (its ``summary.json``) loses the files that inspection wrote
    first (:func:`_earlier_inspection`), so no stale row or heatmap is left beside the new ones; files of the
    user's own stay. The files written now are logged to the run under ``artifact_path``: by default
    ``inspections/<UTC time>-<6 hex digits>-<split>``, a path of their own, as MLflow cannot delete an earlier
    inspection's files (training logs its own under ``inspection``).
    """
    import time

    from .inspection import inspect_model
    from .plots import save_heatmaps, top_pairs_bar
    from .tracking import ServerLost, log_artifacts, run_info

    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} is a file; name a folder for the tables and heatmaps")
    for marker, what in (("schema.json", "a processed data folder"), ("run.json", "a run folder")):
        if (out / marker).is_file():  # the tables and heatmaps mixed with the splits or the run's files
            raise UsageError(f"--out {out} is {what} (it holds {marker}); name a folder of the inspection's own, "
                             f"e.g. {out / ('inspection-' + split)}")
    earlier = _earlier_inspection(out)  # before any work: a folder of another's summary.json is refused now
    if artifact_path is None:  # the random part: two calls within one second shared a path, and mixed their files
        artifact_path = (f"inspections/{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}-{secrets.token_hex(3)}"
                         f"-{split}")
    test = {k: v for k, v in (("permutations", permutations), ("alpha", alpha)) if v is not None}
    result = inspect_model(ckpt, data, split, rows=rows, explain_rows=explain, batch_size=batch_size, **test)
    if method == "archdetect":
        from .detect import archdetect

        table = archdetect(ckpt, data, split, rows=min(rows or ARCHDETECT_ROWS, ARCHDETECT_ROWS),
                           batch_size=batch_size)
        result.rank_by(table, "archdetect")
        probed = table.attrs["rows"]  # a split of fewer rows than asked: those it holds (it said the number asked)
        result.meta["archdetect_rows"] = probed
        result.meta["archdetect"] = (f"archdetect_ij = mean over the first {probed:,} rows of {split} of the squared "
                                     "mixed difference of the logit in fields i and j (Archipelago's ArchDetect); "
                                     "see autoint/detect.py")
    result.meta["model"] = model_ref or str(ckpt)
    for path in earlier:  # an earlier inspection's files: no stale row or heatmap is left beside the new ones
        path.unlink(missing_ok=True)
    # the files this one will write, listed before it writes any: one killed midway is removed exactly at the next
    # call (by autoint's names, every PNG under heatmaps/ went with it)
    matrices, explained = result.matrices(), result.explanation_matrices()
    planned = (["pairs.csv", "attention_long.csv", "summary.json"] + [f"matrices/{stem}.csv" for stem in matrices]
               + [f"explanations/row{e.row}{end}.csv" for e in result.explanations for end in ("", "_top")]
               + [f"heatmaps/{stem}.png" for stem in (*matrices, *explained, "top_pairs")])
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / INSPECTION_FILES, sorted(planned))
    for name in INSPECTION_FOLDERS:
        with contextlib.suppress(OSError):  # left where it holds files of the user's own
            (out / name).rmdir()
    written = result.save(out, k=top)
    uniform = 1.0 / len(result.fields)
    note = "indistinguishable from uniform" if result.uniform else ""
    written += save_heatmaps(matrices, out / "heatmaps", prefix="mean attention: ", center=uniform, note=note)
    written += save_heatmaps(explained, out / "heatmaps", prefix="attention of ", center=uniform)
    written.append(top_pairs_bar(result.pairs, out / "heatmaps" / "top_pairs.png", k=top, by=result.ranked_by))

    best = result.top_pairs(top)
    labelled = "no labels" if result.positives is None else f"{result.positives:,} clicked"
    print(f"inspected {_plural(result.rows, 'row')} of {split} ({labelled}); "
          f"{_plural(result.num_layers, 'layer')} x {_plural(result.num_heads, 'head')} over "
          f"{_plural(len(result.fields), 'field')}")
    for line in result.verdicts():
        print(line)
    ranking = ("archdetect: the model's mean squared mixed difference of the logit, Archipelago"
               if method == "archdetect" else "score: |attention when clicked - when not|, both directions"
               if result.contrasted else "score: the attention's variability over the rows, as these rows hold "
               "no label contrast")
    tested = "; p_adjusted: of the attention score, family-wise over all pairs" if "p_adjusted" in best else ""
    if len(result.fields) < 2:
        print("no field pairs to rank: one field")
    else:
        print(f"top {len(best)} field pairs ({ranking}{tested})")
        print(format_pairs(best))
    for line in result.ranking_notes(top):
        print(line)
    written_names = sorted(p.relative_to(out).as_posix() for p in written)
    if written_names != sorted(planned):  # the plan above and the writers disagree: a bug here
        raise RuntimeError(f"inspect wrote {written_names}, planned {sorted(planned)}")
    write_json(out / INSPECTION_FILES, written_names)
    print(f"tables and heatmaps: {out} ({len(written)} files)")
    if run is not None:
        uri, run_id = run
        try:
            if run_info(uri, run_id)["lifecycle_stage"] == "deleted":  # logged to, and shown nowhere (silent before)
                log.warning("MLflow run %s is deleted in %s: the inspection is logged to it, but neither the UI nor "
                            "a search shows it until `mlflow runs restore --run-id %s`", run_id, uri, run_id)
            for path in written:  # each under artifact_path as it lies under out
                log_artifacts(uri, run_id, [path], "/".join((artifact_path, *path.relative_to(out).parent.parts)))
        except ServerLost as e:  # its advice is train's (--resume), which inspect has not
            raise UsageError(f"inspection written to {out}, but MLflow tracking server {uri} stopped answering "
                             f"while it was logged to run {run_id} ({e.cause}); "
                             "once the server answers, run this command again to log it") from None
        except Exception as e:  # the store is gone or read-only: the files on disk still stand
            raise UsageError(f"inspection written to {out}, but logging it to MLflow run {run_id} "
                             f"at {uri} failed: {e}") from None
        print(f"MLflow run    {run_id}: artifacts under {artifact_path}/  ({hide_password(uri)})")
    return result


# ----------------------------------------------------------------------------- parser
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="autoint", description=__doc__.split("\n\n")[0].replace("``", ""))
    from . import __version__

    parser.add_argument("--version", action="version", version=f"autoint {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    parser.commands = sub.choices  # name -> the command's parser, for errors in its own words

    def with_config(p: argparse.ArgumentParser) -> None:
        p.add_argument("config", type=Path, help="YAML config (see configs/)")
        p.add_argument("--set", action="append", metavar="KEY=VALUE",
                       help="override a setting, e.g. --set model.num_layers=2 (repeatable)")

    def max_bad(p: argparse.ArgumentParser) -> None:
        p.add_argument("--max-bad-fraction", dest="max_bad_fraction", type=float, metavar="F",
                       help="stop if more than this fraction of raw rows is malformed (data.max_bad_fraction, "
                            "default 0.001; 1 keeps going whatever the fraction)")

    def register(p: argparse.ArgumentParser) -> None:
        p.add_argument("--register", metavar="NAME", type=_model_name,
                       help="register the (best) model in MLflow's registry as NAME, alias champion "
                            "(then models:/NAME@champion is a MODEL for predict, evaluate, inspect and serve)")

    def scoring_precision(p: argparse.ArgumentParser) -> None:
        p.add_argument("--precision", default="32", choices=["32", "bf16"],
                       help="compute in fp32 (default: the same figures on every machine) or bf16 autocast")

    p = sub.add_parser("download", help="download a public data set (sha256-verified)")
    p.add_argument("name", nargs="?", help="data set name, e.g. movielens-100k (--list shows them all)")
    p.add_argument("--to", type=_path, help="target folder")
    p.add_argument("--list", action="store_true", help="list the known data sets and where they come from")
    p.add_argument("--url", help="a mirror to download from instead of the official URL")
    p.add_argument("--sha256", help="expected digest (with --url, or where none is published; data sets of one "
                   "file only)")
    p.add_argument("--no-verify", action="store_true", help="accept a file whose digest is not published")
    p.add_argument("--force", action="store_true", help="download again even if already present")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_download)

    p = sub.add_parser("prepare", help="encode a raw log into Parquet splits + schema + vocabularies")
    with_config(p)
    p.add_argument("--raw", nargs="+", metavar="PATH",
                   help="raw file(s), folder(s) or quoted glob(s) such as 'day_*.gz' (default: data.raw)")
    p.add_argument("--out", type=_path, help="output folder (default: data.processed, else "
                   "data/processed/CONFIG_NAME)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace a folder prepared from other settings or input (refused otherwise)")
    max_bad(p)
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_prepare)

    p = sub.add_parser("train", help="train a model, test the best epoch, track it in MLflow")
    with_config(p)
    p.add_argument("--raw", nargs="+", metavar="PATH",
                   help="raw log to prepare first: file(s), folder(s) or quoted glob(s) (default: data.raw)")
    p.add_argument("--data", type=_path, help="processed folder (default: data.processed, else "
                   "data/processed/CONFIG_NAME; prepared if absent)")
    p.add_argument("--out", type=_path, help="run folder for checkpoints and run.json (default: runs/CONFIG_NAME)")
    p.add_argument("--resume", action="store_true",
                   help="continue the run in --out from its last readable checkpoint, with the run's own config "
                        "(only --max-epochs, data.memory_limit, train.keep_freed_memory and where the data is may "
                        "change)")
    p.add_argument("--tracking-uri", help="MLflow tracking URI (default: MLFLOW_TRACKING_URI, else the config's "
                   "tracking.tracking_uri, else ./mlflow.db; with --resume, the store the run was started in)")
    p.add_argument("--devices", help="Lightning devices: a count, a list, or 'auto'")
    p.add_argument("--num-nodes", dest="num_nodes", type=int, help="machines taking part")
    p.add_argument("--strategy", help="Lightning strategy, e.g. ddp")
    p.add_argument("--accelerator", help="cpu, gpu or auto")
    p.add_argument("--precision", help="training precision, e.g. 32-true, bf16-mixed (default train.precision: "
                                       "auto, bf16-mixed where the hardware computes bf16 natively)")
    p.add_argument("--max-epochs", dest="max_epochs", type=int, help="epoch limit")
    register(p)
    max_bad(p)
    p.add_argument("--quiet", action="store_true",
                   help="no progress bars (shown only on a terminal), nor the line per epoch printed elsewhere")
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("tune", help="search hyper-parameters with Optuna; each trial an MLflow child run")
    with_config(p)
    p.add_argument("--trials", type=int, help="trials this command runs (default tune.trials; with --resume, "
                                              "added to the study)")
    p.add_argument("--timeout", type=float, metavar="S", help="start no trial after S seconds (tune.timeout_s)")
    p.add_argument("--study", help="study name (default: the config file's name)")
    p.add_argument("--storage", metavar="URL", help="Optuna storage: a database URL several machines may share "
                                                    "(default sqlite:///OUT/study.db)")
    p.add_argument("--resume", action="store_true",
                   help="add trials to the study in --out (or --storage / --study), in the same MLflow parent run")
    p.add_argument("--raw", nargs="+", metavar="PATH",
                   help="raw log to prepare first (needed when the space varies a data.* setting)")
    p.add_argument("--data", type=_path, help="processed folder (default: data.processed, else "
                   "data/processed/CONFIG_NAME; prepared if absent)")
    p.add_argument("--out", type=_path, help="study folder (default: runs/tune-CONFIG_NAME)")
    p.add_argument("--tracking-uri", help="MLflow tracking URI (default: MLFLOW_TRACKING_URI, else the config's "
                   "tracking.tracking_uri, else ./mlflow.db; with --resume, the store the study was started in)")
    p.add_argument("--max-epochs", dest="max_epochs", type=int, help="epoch limit of every trial")
    register(p)
    max_bad(p)
    p.add_argument("--quiet", action="store_true", help="no progress bars (shown only on a terminal anyway)")
    p.set_defaults(func=cmd_tune)

    p = sub.add_parser("evaluate", help="AUC and logloss of a trained model on a processed split")
    p.add_argument("model", help="checkpoint, run folder, or MLflow model URI (runs:/ID/model, "
                                 "models:/NAME@champion)")
    p.add_argument("--data", type=_path, required=True, help="processed folder")
    p.add_argument("--split", default="test", choices=["train", "valid", "test"], help="split to score (default test)")
    scoring_precision(p)
    p.add_argument("--tracking-uri", help="MLflow tracking URI for runs:/ and models:/ URIs")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(func=cmd_evaluate)

    p = sub.add_parser("predict", help="click probabilities for raw rows (CSV, TSV or Parquet)")
    p.add_argument("model", help="checkpoint, run folder, or MLflow model URI (runs:/ID/model, "
                                 "models:/NAME@champion)")
    p.add_argument("--input", type=_path, required=True,
                   help="raw rows: CSV, TSV or Parquet with the original column names, or text laid out as the "
                        "training log (e.g. headerless Criteo lines, with or without the label)")
    p.add_argument("--output", type=_path, required=True, help="CSV or Parquet file for the probabilities")
    p.add_argument("--keep", nargs="+", metavar="COLUMN",
                   help="input columns copied as text before the probability column (e.g. --keep id)")
    p.add_argument("--chunk-rows", dest="chunk_rows", type=int, default=100_000,
                   help="rows read, encoded and scored at a time (default 100,000; fewer need less memory)")
    scoring_precision(p)
    p.add_argument("--tracking-uri", help="MLflow tracking URI for runs:/ and models:/ URIs")
    p.set_defaults(func=cmd_predict)

    p = sub.add_parser("serve", help="serve a model over HTTP (MLflow's scoring server: POST /invocations)")
    p.add_argument("model", help="checkpoint, run folder, or MLflow model URI (runs:/ID/model, "
                                 "models:/NAME@champion)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=5000, help="port to listen on (default 5000; 0: a free port, printed)")
    p.add_argument("--tracking-uri", help="MLflow tracking URI for runs:/ and models:/ URIs")
    p.set_defaults(func=cmd_serve)

    p = sub.add_parser("inspect", help="attention maps of a trained model → field-pair tables and heatmaps")
    p.add_argument("model", help="checkpoint, run folder, or MLflow model URI (runs:/ID/model, "
                                 "models:/NAME@champion)")
    p.add_argument("--data", type=_path, required=True, help="processed folder the model was trained from")
    p.add_argument("--out", type=_path, required=True, help="folder for the CSV tables, summary.json and PNGs")
    p.add_argument("--split", default="test", choices=["train", "valid", "test"],
                   help="split to inspect (default test)")
    p.add_argument("--rows", type=int, help="inspect only the first N rows of the split (default: all)")
    p.add_argument("--explain", metavar="ROWS", help="row positions to explain one by one, e.g. 0,5,9")
    p.add_argument("--top", type=int, default=10, help="field pairs to print (default 10)")
    p.add_argument("--batch-size", dest="batch_size", type=int, default=4096,
                   help="rows per forward pass, also of --method archdetect (default 4096)")
    p.add_argument("--permutations", type=int,
                   help="label permutations for the pairs' p-values (default 199, so the smallest p is 0.005; "
                        "0: no test)")
    p.add_argument("--alpha", type=float, help="family-wise level at which a pair is called significant "
                                               "(default 0.05)")
    p.add_argument("--method", choices=["attention", "archdetect"], default="attention",
                   help="how pairs are ranked: the attention maps' label contrast (default), or archdetect: "
                        f"the trained model probed on {ARCHDETECT_ROWS} rows (Archipelago's mixed difference)")
    p.add_argument("--tracking-uri", help="MLflow tracking URI for runs:/ and models:/ URIs")
    p.set_defaults(func=cmd_inspect)

    p = sub.add_parser("summary", help="print the model a config describes and its parameter counts")
    with_config(p)
    p.add_argument("--data", type=_path, help="processed folder whose vocabularies size the tables")
    p.set_defaults(func=cmd_summary)
    return parser


def _quiet_third_party_noise() -> None:
    """Keep what concerns the user: warnings and errors, not the libraries' chatter.

    Dropped: Lightning's info lines ("GPU available", "Restoring states", advertisements for its cloud products,
    "LOCAL_RANK: 0 - CUDA_VISIBLE_DEVICES" on a GPU), MLflow's info lines ("Creating initial MLflow database
    tables"), its "View run at" lines and its artifact-download progress bar.
    Set ``MLFLOW_LOGGING_LEVEL=INFO`` to see MLflow's again.
    """
    for name in ("lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.rank_zero",
                 "lightning.pytorch.accelerators.cuda"):
        logging.getLogger(name).addFilter(lambda record: record.levelno >= logging.WARNING)
    os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    # "🏃 View run … at: http://…", which MLflow writes to stdout itself (not through its logger) for a server
    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
    if logging.lastResort is not None:  # the commands' warnings reach stderr through it: URLs' passwords as ***
        logging.lastResort.addFilter(_hide_passwords_in_record)
    warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\).*")
    # --resume continues in its own checkpoint folder, which Lightning warns of on every resume
    warnings.filterwarnings("ignore", message=r"Checkpoint directory .* exists and is not empty")
    # Data-parallel runs: the epoch metrics are logged from torchmetrics states that already hold every rank's rows
    # (the figures are the whole split's), which Lightning cannot tell, advising sync_dist=True once per metric
    warnings.filterwarnings("ignore", message=r"It is recommended to use `self\.log\('(val|test)_.*sync_dist=True")


def _hide_passwords_in_record(record: logging.LogRecord) -> bool:
    try:
        text = record.getMessage()
    except Exception:  # a malformed call ('%d' % 'x'): the handler reports it as it always did
        return True
    shown = hide_passwords(text)
    if shown != text:
        record.msg, record.args = shown, ()
    return True


def main(argv: Sequence[str] | None = None) -> int:
    # The commands only save figures (a study's plots go through pyplot): never a window, on any machine. The
    # library leaves the caller's backend alone (autoint.plots).
    os.environ.setdefault("MPLBACKEND", "Agg")
    _quiet_third_party_noise()
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # name the command's own usage, not the top level's
        parser.commands[args.command].error(f"unrecognized arguments: {' '.join(unknown)}")
    try:
        with stop_on_sigterm():  # a SIGTERM anywhere: finally blocks clean up, and the line below says so
            return args.func(args)
    except BrokenPipeError:  # output piped into `head` and the like
        sys.stdout = open(os.devnull, "w")
        return 0
    except Terminated as e:  # before KeyboardInterrupt, of which it is a kind
        print(f"autoint {args.command}: {e}", file=sys.stderr)
        return 143
    except KeyboardInterrupt:
        print(f"autoint {args.command}: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # one line for what the user can fix; a bug keeps its traceback
        line = None if os.environ.get("AUTOINT_DEBUG") else _one_line(e, args.command)
        if line is None:
            raise
        print(f"autoint {args.command}: error: {hide_passwords(line)}", file=sys.stderr)  # a URL's password as ***
        return 2


def _one_line(e: Exception, command: str = "") -> str | None:
    """The line an error the user can fix is shown as (bad input, a full disk anywhere in its chain, a path this
    user may not read or write), or None for a bug."""
    if isinstance(e, (InputError, FileNotFoundError)):
        return str(e)
    full = disk_full(e)
    if full is not None:
        return f"the disk is full ({message_head(full)}); free some space, or write elsewhere, and run it again"
    memory = out_of_memory(e)
    if memory is not None:
        smaller = {"prepare": "fewer rows read at a time (data.chunk_size) need less",
                   "predict": "a smaller --chunk-rows needs less",
                   "evaluate": "a smaller train.batch_size needs less",
                   "inspect": "fewer --rows or --permutations, or a smaller --batch-size, need less"}.get(
            command, "a smaller batch (train.batch_size) or a narrower model (model.embedding_dim, num_heads, "
                     "head_dim, dnn_hidden) needs less")
        return f"out of memory ({message_head(memory)}); {smaller}"
    if isinstance(e, OSError) and e.errno in (errno.EACCES, errno.EPERM, errno.EROFS) and e.filename:
        option = {"download": "--to", "predict": "--output"}.get(command, "--out")
        return f"{e.filename}: {e.strerror}; choose another path (e.g. {option}) or change its permissions"
    if isinstance(e, OSError) and e.errno in (errno.EEXIST, errno.EISDIR, errno.ENOTDIR) and e.filename:
        return (f"{e.filename}: {e.strerror}: a file or folder of that name is in the way; move it, or choose "
                "another path")
    return None


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
