"""Typed run configuration, mirrored by the YAML files in ``configs/``.

Every section is a dataclass whose ``__post_init__`` validates it; errors name
the setting by its dotted path (``model.num_heads``). YAML is read with
``yaml.safe_load`` and unknown keys are errors, so a typo never passes silently.
Overrides from the command line use the same dotted paths
(``--set model.num_layers=2``); their values are parsed as YAML scalars.
"""

from __future__ import annotations

import codecs
import contextlib
import contextvars
import dataclasses
import datetime
import logging
import math
import numbers
import os
import re
import types
import typing
from collections.abc import Collection
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import yaml

from .errors import InputError, hide_password, hide_passwords
from .files import write_text

log = logging.getLogger(__name__)


class ConfigError(InputError, ValueError):
    """A setting is missing, unknown or out of range; the message names it."""


SEED_MAX = 2**32 - 1  # numpy's and Optuna's seeds: 0 .. 2**32 - 1


def _check_seed(seed: Any, setting: str) -> None:
    """A seed numpy, torch and Optuna all take: -1 or 2**40 passed as an integer, then ended a run in numpy's
    traceback (a permutation split's, or train's, or the tuner's, after its first trial)."""
    _check(not is_int(seed) or 0 <= seed <= SEED_MAX, setting, f"must be an integer from 0 to {SEED_MAX}, got {seed!r}")


def _check(cond: bool, setting: str, msg: str) -> None:
    if not cond:
        raise ConfigError(f"{setting}: {msg}")


def _type_ok(value: Any, hint: Any) -> tuple[bool, str]:
    """Whether ``value`` is of a section field's declared type, and that type in words. Only the simple
    hints are judged here (bool, int, float, str, tuples of them, dicts and lists, ``X | None``); unions of
    several types and ``Any`` are left to the section's own checks."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        rest = [a for a in args if a is not type(None)]
        if len(rest) != 1:
            return True, ""
        if value is None and type(None) in args:
            return True, ""
        ok, words = _type_ok(value, rest[0])
        return ok, f"{words} or null" if type(None) in args else words
    if hint is bool:
        return isinstance(value, bool), "true or false"
    if hint is int:
        return is_int(value), "an integer"
    if hint is float:  # inf and nan too are floats: a learning rate of .inf trained to NaN, and the run passed
        return (isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value),
                "a finite number")
    if hint is str:
        return isinstance(value, str), "text"
    if origin is tuple:
        item = args[0] if args else Any
        words = "a list of integers" if item is int else "a list of numbers" if item is float else "a list"
        return isinstance(value, (list, tuple)) and all(_type_ok(v, item)[0] for v in value), words
    if origin is dict or hint is dict:
        return isinstance(value, dict), "a mapping"
    if origin is list or hint is list:
        return isinstance(value, list), "a list"
    return True, ""


def _check_types(section: Any, name: str) -> None:
    """Each setting of a section is of its declared type: "false" given for a flag is an error naming the
    setting, not a true value (a non-empty string is truthy), and a seed given as text fails here, not deep
    inside torch or numpy."""
    hints = typing.get_type_hints(type(section))
    for f in dataclasses.fields(section):
        hint = hints[f.name]
        if dataclasses.is_dataclass(_optional_dataclass(hint)):
            continue
        value = getattr(section, f.name)
        if isinstance(value, os.PathLike) and _type_ok("", hint)[0]:  # a Path for a path setting, from Python
            value = str(value)
            setattr(section, f.name, value)
        ok, words = _type_ok(value, hint)
        _check(ok, f"{name}.{f.name}", f"must be {words}, got {value!r}")
        if hint in (float, float | None) and isinstance(value, numbers.Real) and not isinstance(value, float):
            setattr(section, f.name, float(value))  # numpy's float32 (or an int) as a float, for the checks after


# --------------------------------------------------------------------------- model
RESIDUAL_MODES = ("projection", "identity", "none")
ATTENTION_KERNELS = ("auto", "sdpa", "explicit")


@dataclass
class ModelConfig:
    """AutoInt / AutoInt+ hyper-parameters (Song et al., 2019, Section 4).

    The defaults are the paper's: D = 16, 3 interacting layers, 2 heads of
    width d' = 32, residual through W_res, unscaled attention, no DNN.
    """

    embedding_dim: int = 16  # D
    num_layers: int = 3  # L interacting layers
    num_heads: int = 2  # H
    head_dim: int = 32  # d'
    residual: str = "projection"  # W_res ("projection"), identity, or none
    scale_attention: bool = False  # divide scores by sqrt(d'); off in the paper, on in the authors' code
    layer_norm: bool = False  # after each interacting layer, as in the authors' code
    attention_dropout: float = 0.0  # on the attention weights
    dnn_hidden: tuple[int, ...] = ()  # non-empty -> AutoInt+
    dnn_dropout: float = 0.0
    dnn_batch_norm: bool = False
    first_order: bool = False  # add a wide (logistic-regression) term to the logit
    embedding_init_std: float = 1e-2
    # How attention runs when no maps are asked for: "sdpa" (the fused
    # scaled_dot_product_attention kernel), "explicit" (batched matmuls + softmax),
    # or "auto": sdpa on accelerators, explicit on CPU, where the fused kernel is
    # slower at a few dozen fields (benchmarks/attention_kernel.py; README, Model).
    attention_kernel: str = "auto"

    def __post_init__(self) -> None:
        _check_types(self, "model")
        self.dnn_hidden = tuple(self.dnn_hidden)
        _check(self.attention_kernel in ATTENTION_KERNELS, "model.attention_kernel",
               f"must be one of {ATTENTION_KERNELS}, got {self.attention_kernel!r}")
        for name in ("embedding_dim", "num_heads", "head_dim"):
            _check(is_int(getattr(self, name)) and getattr(self, name) >= 1, f"model.{name}",
                   f"must be a positive integer, got {getattr(self, name)!r}")
        _check(is_int(self.num_layers) and self.num_layers >= 0, "model.num_layers",
               f"must be an integer >= 0, got {self.num_layers!r}")
        _check(self.residual in RESIDUAL_MODES, "model.residual",
               f"must be one of {RESIDUAL_MODES}, got {self.residual!r}")
        if self.residual == "identity" and self.num_layers > 0:
            _check(self.embedding_dim == self.num_heads * self.head_dim, "model.residual",
                   "'identity' needs embedding_dim == num_heads * head_dim "
                   f"({self.embedding_dim} != {self.num_heads} * {self.head_dim}); use 'projection'")
        for name in ("attention_dropout", "dnn_dropout"):
            v = getattr(self, name)
            _check(isinstance(v, (int, float)) and 0.0 <= v < 1.0, f"model.{name}",
                   f"must be in [0, 1), got {v!r}")
        _check(all(is_int(h) and h >= 1 for h in self.dnn_hidden), "model.dnn_hidden",
               f"must be a list of positive integers, got {list(self.dnn_hidden)!r}")
        _check(isinstance(self.embedding_init_std, (int, float)) and self.embedding_init_std > 0,
               "model.embedding_init_std", f"must be > 0, got {self.embedding_init_std!r}")
        _check(self.num_layers > 0 or self.dnn_hidden or self.first_order, "model.num_layers",
               "0 interacting layers leaves nothing but the output layer; "
               "set num_layers >= 1, dnn_hidden or first_order")


# --------------------------------------------------------------------------- data
SPLIT_METHODS = ("random", "permutation", "time", "files")
FORMATS = ("criteo", "movielens", "frappe", "table", "synthetic")


@dataclass
class SplitConfig:
    """How rows are split into train / valid / test.

    * ``random``: each row drawn independently from a hash of its position and
      the seed; streams any number of rows in constant memory.
    * ``permutation``: ``numpy.random.default_rng(seed).permutation(n)`` over the
      usable rows, cut at the fractions: exactly 80/10/10, the protocol behind
      most published figures; a counting pass first and 9 bytes per row.
    * ``time``: by a numeric time column's quantiles. ``files``: given files.
    """

    method: str = "random"
    fractions: tuple[float, float, float] = (0.8, 0.1, 0.1)  # train / valid / test
    seed: int = 2024
    time_column: str | None = None  # for method "time"
    files: dict[str, Any] | None = None  # method "files": {train: ..., valid: ..., test: ...}: path, glob or list each

    def __post_init__(self) -> None:
        _check_types(self, "data.split")
        self.fractions = tuple(self.fractions)
        _check(self.method in SPLIT_METHODS, "data.split.method",
               f"must be one of {SPLIT_METHODS}, got {self.method!r}")
        _check_seed(self.seed, "data.split.seed")
        _check(len(self.fractions) == 3 and all(isinstance(x, (int, float)) and x >= 0 for x in self.fractions)
               and abs(sum(self.fractions) - 1.0) < 1e-6 and self.fractions[0] > 0,
               "data.split.fractions", f"must be three non-negative numbers summing to 1, got {list(self.fractions)}")
        if self.method == "time":
            _check(bool(self.time_column), "data.split.time_column", "is required when method is 'time'")
        if self.method == "files":
            _check(isinstance(self.files, dict) and {"train", "valid", "test"} <= set(self.files),
                   "data.split.files", "must map train, valid and test to raw files when method is 'files'"
                   + (f"; got {sorted(map(str, self.files))}" if isinstance(self.files, dict) else ""))
            other = sorted(map(str, set(self.files) - {"train", "valid", "test"}))
            _check(not other, f"data.split.files.{other[0] if other else ''}",
                   "is no split (train, valid, test): its files would not be read")
            _check(self.fractions == (0.8, 0.1, 0.1), "data.split.fractions",
                   "is not used by method 'files' (each split is its own files); remove it")
        # A setting of another method is never ignored in silence: files given without method 'files' were
        # pooled and split at random, test rows landing in train.
        _check(self.files is None or self.method == "files", "data.split.files",
               f"is set, but data.split.method is {self.method!r}, which would pool the files and split them "
               "itself; set method: files, or remove files")
        _check(self.time_column is None or self.method == "time", "data.split.time_column",
               f"is set, but data.split.method is {self.method!r}, which does not split by time; set method: time, "
               "or remove time_column")


# Numeric transforms to a number the model scales an embedding by (autoint.encoder.NumericTransform) ...
SCALAR_TRANSFORMS = ("criteo", "log1p", "standardize", "none")
# ... and "bucket", which turns the field into a categorical one (autoint.encoder.bucket_ids).
NUMERIC_TRANSFORMS = (*SCALAR_TRANSFORMS, "bucket")


@dataclass
class DataConfig:
    """Where the raw log is, how to read it and how to encode it.

    ``format`` picks the reader; ``columns`` describes a generic CSV/TSV/Parquet
    log for ``format: table`` (see ``autoint/datasets/table.py``).
    """

    format: str = "synthetic"
    raw: str | list[str] | None = None  # raw file, folder, glob or list of them; the CLI's --raw wins
    processed: str | None = None  # processed folder; the CLI's --out / --data wins
    min_count: int = 1  # values seen fewer times in train -> OOV
    numeric_transform: str | None = None  # None: the reader's default
    include_ids: bool = False  # MovieLens: user and movie ids as fields
    columns: dict[str, Any] | None = None  # table format: label / categorical / numeric / multi / drop
    split: SplitConfig = field(default_factory=SplitConfig)
    chunk_size: int = 200_000  # rows per Parquet row group of the splits; rows read at a time (at most 65,536)
    memory_limit: str = "512MB"  # the preprocessing engine's memory cap (DuckDB); beyond it, it spills to disk
    max_bad_fraction: float = 0.001
    synthetic: dict[str, Any] | None = None  # generator settings for format "synthetic"
    max_list_len: int | None = None  # cap on a multi-valued field's padded length; None: longest in train

    def __post_init__(self) -> None:
        _check_types(self, "data")
        _check(self.format in FORMATS, "data.format", f"must be one of {FORMATS}, got {self.format!r}")
        _check(self.max_list_len is None or (is_int(self.max_list_len) and self.max_list_len >= 1),
               "data.max_list_len", f"must be a positive integer or null, got {self.max_list_len!r}")
        _check(self.numeric_transform is None or self.numeric_transform in NUMERIC_TRANSFORMS,
               "data.numeric_transform", f"must be one of {NUMERIC_TRANSFORMS} or null, got {self.numeric_transform!r}")
        _check(is_int(self.min_count) and self.min_count >= 1, "data.min_count",
               f"must be an integer >= 1, got {self.min_count!r}")
        _check(is_int(self.chunk_size) and self.chunk_size >= 1, "data.chunk_size",
               f"must be a positive integer, got {self.chunk_size!r}")
        _check(isinstance(self.max_bad_fraction, (int, float)) and 0 <= self.max_bad_fraction <= 1,
               "data.max_bad_fraction", f"must be in [0, 1], got {self.max_bad_fraction!r}")
        _check(isinstance(self.memory_limit, str) and re.fullmatch(r"\s*\d+(\.\d+)?\s*[KMGT]i?B\s*", self.memory_limit,
                                                                    re.IGNORECASE) is not None,
               "data.memory_limit", f"must be a size such as '1GB' or '512MB', got {self.memory_limit!r}")
        _check(not re.fullmatch(r"\s*0+(\.0*)?\s*[KMGT]i?B\s*", str(self.memory_limit), flags=re.IGNORECASE),
               "data.memory_limit", f"must be above zero (the engine needs memory to work in), got "
                                    f"{self.memory_limit!r}")
        _check(self.raw is None or isinstance(self.raw, str)
               or (isinstance(self.raw, list) and self.raw and all(isinstance(x, str) for x in self.raw)),
               "data.raw", f"must be a path, a glob or a list of them, got {self.raw!r}")
        if self.format == "table":
            _check(isinstance(self.columns, dict), "data.columns", "is required when format is 'table'")
        encoding = self.columns.get("encoding") if isinstance(self.columns, dict) else None
        _check(encoding is None or _known_encoding(encoding), "data.columns.encoding",
               f"unknown text encoding {encoding!r} (e.g. utf-8, latin-1, cp1252)")
        if self.synthetic is not None:  # checked with the rest, so an error names the --set or file that gave it
            from .datasets.synthetic import SyntheticConfig

            SyntheticConfig.from_dict(self.synthetic)
            if isinstance(self.synthetic, dict):  # as written, but 2_000 the integer
                self.synthetic = SyntheticConfig.with_ints(self.synthetic)


# --------------------------------------------------------------------------- training
OPTIMIZERS = ("auto", "adam", "sparse_adam")
CALIBRATIONS = ("platt", "none")  # train.calibration (autoint.calibration)


#: train.precision's values: fp32 weights, under autocast at most ("auto" picks; see resolve_precision).
PRECISIONS = ("auto", "32", "32-true", "bf16", "bf16-mixed", "16", "16-mixed")
_PRECISION_NAMES = {"32": "32-true", "bf16": "bf16-mixed", "16": "16-mixed"}


_LARGEST_RATE = 1e30  # train.lr and the weight decays: float32 holds their optimiser's products


@dataclass
class TrainConfig:
    batch_size: int = 1024
    lr: float = 1e-3
    # "adam": dense Adam over every parameter; "sparse_adam": the embedding tables take sparse
    # gradients and lazy Adam (only the rows a batch looks up are read and written), the rest Adam;
    # "auto": sparse_adam where the tables are large enough that dense Adam's pass over every row
    # would dominate a step, else adam (autoint.system.resolve_optimizer says where the line is).
    optimizer: str = "auto"
    weight_decay: float = 0.0  # on dense parameters
    embedding_weight_decay: float = 0.0  # on embedding tables (L2 on the looked-up rows' tables)
    max_epochs: int = 20
    patience: int = 2  # early stopping on validation AUC
    seed: int = 2024
    # Streamed training data (autoint.data): rows shuffled together within a window of this many
    # (on top of a per-epoch permutation of row groups), and splits of at most this many decoded
    # MB kept in memory after their first read.
    shuffle_buffer: int = 1_000_000
    in_memory_mb: int = 256
    # Rows per forward pass: a batch goes through the model in pieces of this many rows, with the
    # batch's loss and gradient whatever the pieces. "auto": on a CPU, pieces whose activations fit
    # in cache (AutoInt.rows_per_pass), the whole batch on an accelerator or through batch norm.
    forward_rows: Any = "auto"
    accelerator: str = "auto"
    devices: Any = 1
    num_nodes: int = 1
    strategy: str = "auto"
    # "auto": bf16 autocast ("bf16-mixed") where the hardware computes in bf16 natively
    # (a GPU that supports it, or a CPU with AVX512-BF16 / AMX), else "32-true".
    # Measured on MovieLens 100K and the Criteo head: test AUC within 0.0001 of fp32.
    precision: str = "auto"
    deterministic: bool = True
    # On a CPU (Linux, glibc): freed blocks stay in the process's heap for the next step instead of going back to
    # the system and being page-faulted in again (autoint.system.keep_freed_memory; README, "Freed memory kept for
    # the next step"). No effect on the figures; memory the process freed stays with it (at least until 512 MB of it
    # is free at the heap's top), for the rest of the process.
    keep_freed_memory: bool = True
    # After training, the served probability: "platt" fits sigmoid(a * logit + b) on the validation split
    # (autoint.calibration; AUC unchanged, logloss calibrated), "none" keeps the model's own.
    calibration: str = "platt"

    def __post_init__(self) -> None:
        _check_types(self, "train")
        _check_seed(self.seed, "train.seed")
        _check(self.optimizer in OPTIMIZERS, "train.optimizer", f"must be one of {OPTIMIZERS}, got {self.optimizer!r}")
        _check(self.calibration in CALIBRATIONS, "train.calibration",
               f"must be one of {CALIBRATIONS}, got {self.calibration!r}")
        _check(self.precision in PRECISIONS, "train.precision",
               f"must be one of {PRECISIONS}, got {self.precision!r}: autoint trains fp32 weights, under bf16 or fp16 "
               "autocast at most ('-mixed'), so that checkpoints and test figures are fp32 (16-true's Adam turned "
               "embedding rows NaN; bf16-true and 64 checkpoints held weights of those types)")
        self.forward_rows = underscored_int(self.forward_rows)  # 1_024 (untyped: 'auto' or a count)
        _check(self.forward_rows == "auto" or (is_int(self.forward_rows) and self.forward_rows >= 1),
               "train.forward_rows", f"must be 'auto' or a positive integer, got {self.forward_rows!r}")
        _check(is_int(self.in_memory_mb) and self.in_memory_mb >= 0, "train.in_memory_mb",
               f"must be an integer >= 0 (0: always stream), got {self.in_memory_mb!r}")
        for name in ("batch_size", "max_epochs", "num_nodes", "shuffle_buffer"):
            _check(is_int(getattr(self, name)) and getattr(self, name) >= 1, f"train.{name}",
                   f"must be a positive integer, got {getattr(self, name)!r}")
        # (0 stops exactly as 1 does: Lightning's count is reached at the first epoch without a better AUC)
        _check(is_int(self.patience) and self.patience >= 0, "train.patience", f"must be >= 0, got {self.patience!r}")
        # capped far past any that trains: Adam's first step (lr / 0.1) overflowed float32 past ~3.4e37, a traceback
        _check(isinstance(self.lr, (int, float)) and 0 < self.lr <= _LARGEST_RATE, "train.lr",
               f"must be > 0 (and at most {_LARGEST_RATE:g}), got {self.lr!r}")
        for name in ("weight_decay", "embedding_weight_decay"):
            v = getattr(self, name)
            _check(isinstance(v, (int, float)) and 0 <= v <= _LARGEST_RATE, f"train.{name}",
                   f"must be >= 0 (and at most {_LARGEST_RATE:g}), got {v!r}")


@dataclass
class TrackingConfig:
    tracking_uri: str | None = None  # None: MLFLOW_TRACKING_URI, else MLflow's local default
    experiment: str = "autoint"
    run_name: str | None = None

    def __post_init__(self) -> None:
        _check_types(self, "tracking")
        _check(bool(self.experiment.strip()), "tracking.experiment", "must be a name, got an empty one")
        _check(len(self.experiment) <= 500, "tracking.experiment",  # MLflow's limit, else its traceback mid-run
               f"must be at most 500 characters (MLflow's limit), got {len(self.experiment)}")


# --------------------------------------------------------------------------- tuning
PRUNERS = ("median", "none")
# data settings a study may vary: each combination of values gets a processed folder of its own
TUNABLE_DATA = ("data.min_count", "data.numeric_transform")
SPACE_KEYS = ("low", "high", "log", "step", "choices")

# The search space used when ``tune.space`` is absent: AutoInt and AutoInt+ (dnn_hidden not empty) alike.
DEFAULT_SPACE: dict[str, dict[str, Any]] = {
    "model.num_layers": {"low": 1, "high": 4},
    "model.num_heads": {"low": 1, "high": 4},
    "model.head_dim": {"choices": [8, 16, 32, 64]},
    "model.embedding_dim": {"choices": [8, 16, 32]},
    "model.dnn_hidden": {"choices": [[], [256, 256], [400, 400, 400]]},  # [] is AutoInt, the rest AutoInt+
    "model.first_order": {"choices": [False, True]},
    "model.attention_dropout": {"low": 0.0, "high": 0.3},
    "model.dnn_dropout": {"low": 0.0, "high": 0.5},
    "train.lr": {"low": 1e-4, "high": 1e-2, "log": True},
    "train.embedding_weight_decay": {"low": 1e-9, "high": 1e-4, "log": True},
    "train.batch_size": {"choices": [256, 512, 1024, 2048]},
}


@dataclass
class PrunerConfig:
    """Stops trials whose validation AUC after an epoch is below the median of earlier trials' at that epoch."""

    kind: str = "median"  # "median" (optuna.pruners.MedianPruner) or "none"
    startup_trials: int = 3  # trials that complete before any is pruned
    warmup_epochs: int = 1  # epochs of every trial that are never pruned (0: judge from the first epoch on)

    def __post_init__(self) -> None:
        _check_types(self, "tune.pruner")
        _check(self.kind in PRUNERS, "tune.pruner.kind", f"must be one of {PRUNERS}, got {self.kind!r}")
        for name in ("startup_trials", "warmup_epochs"):
            v = getattr(self, name)
            _check(is_int(v) and v >= 0, f"tune.pruner.{name}", f"must be an integer >= 0, got {v!r}")


@dataclass
class TuneConfig:
    """``autoint tune``: an Optuna study over ``model.*``, ``train.*``, ``data.min_count`` and
    ``data.numeric_transform``.

    ``space`` maps a dotted setting to ``{low, high}`` (``log: true``, ``step``
    optional; ints for an integer setting, floats for a float one) or to
    ``{choices: [...]}``; absent, :data:`DEFAULT_SPACE` is used. Every trial
    maximises validation AUC; the test split is scored once, for the best.
    """

    direction: str = "maximize"  # of validation AUC; the only direction
    trials: int = 20  # trials one `autoint tune` command runs (--trials wins)
    timeout_s: float | None = None  # stop starting trials after this many seconds (--timeout wins)
    seed: int | None = None  # the TPE sampler's seed; None: train.seed
    pruner: PrunerConfig = field(default_factory=PrunerConfig)
    space: dict[str, Any] | None = None  # None: DEFAULT_SPACE
    enqueue: list[dict[str, Any]] = field(default_factory=list)  # trials to run first, e.g. [{train.lr: 0.01}]

    def __post_init__(self) -> None:
        _check_types(self, "tune")
        _check(self.direction == "maximize", "tune.direction",
               f"only 'maximize' (validation AUC) is supported, got {self.direction!r}")
        _check(is_int(self.trials) and self.trials >= 0, "tune.trials",
               f"must be an integer >= 0, got {self.trials!r}")
        _check(self.timeout_s is None or (isinstance(self.timeout_s, (int, float)) and self.timeout_s > 0),
               "tune.timeout_s", f"must be a number of seconds > 0 or null, got {self.timeout_s!r}")
        _check(self.seed is None or is_int(self.seed), "tune.seed", f"must be an integer or null, got {self.seed!r}")
        if self.seed is not None:
            _check_seed(self.seed, "tune.seed")
        _check(self.space is None or (isinstance(self.space, dict) and self.space), "tune.space",
               "must map settings to ranges or choices, e.g. {model.num_layers: {low: 1, high: 4}}")
        space = self.search_space()
        for key, spec in space.items():
            _check_space_entry(key, spec)
        _check(isinstance(self.enqueue, list) and all(isinstance(t, dict) for t in self.enqueue), "tune.enqueue",
               f"must be a list of mappings of settings to values, got {self.enqueue!r}")
        for i, fixed in enumerate(self.enqueue):
            for key, value in fixed.items():
                _check(key in space, f"tune.enqueue[{i}].{key}", "is not a setting of tune.space")
                _check_in_space(f"tune.enqueue[{i}].{key}", value, space[key], setting_type(key))

    def search_space(self) -> dict[str, dict[str, Any]]:
        return dict(self.space) if self.space is not None else {k: dict(v) for k, v in DEFAULT_SPACE.items()}


def setting_type(key: str) -> Any | None:
    """The type hint of a tunable dotted setting (``model.num_layers`` -> int); None if it is not tunable."""
    section, _, name = key.partition(".")
    classes = {"model": ModelConfig, "train": TrainConfig}
    if key in TUNABLE_DATA:
        return typing.get_type_hints(DataConfig)[name]
    if section in classes and name in {f.name for f in dataclasses.fields(classes[section])}:
        return typing.get_type_hints(classes[section])[name]
    return None


def _check_space_entry(key: Any, spec: Any) -> None:
    setting = f"tune.space.{key}"
    _check(isinstance(key, str), setting, f"a setting's name is text such as train.lr, got {key!r} (YAML reads yes, "
                                          "no, on and off as booleans and bare numbers as numbers)")
    hint = setting_type(key)
    entry, _, part = key.rpartition(".")
    whole = "{choices: [...]}" if part == "choices" else "{low: ..., high: ...}"
    _check(hint is not None or part not in SPACE_KEYS or setting_type(entry) is None, setting,
           f"one part of an entry ({part}); give {entry}'s entry whole, e.g. --set 'tune.space.{entry}={whole}'")
    _check(hint is not None, setting,
           "unknown setting: the space takes model.*, train.*, data.min_count and data.numeric_transform settings")
    _check(isinstance(spec, dict), setting, f"expected {{low, high}} or {{choices: [...]}}, got {spec!r}")
    unknown = sorted(set(spec) - set(SPACE_KEYS))
    _check(not unknown, f"{setting}.{unknown[0] if unknown else ''}", f"unknown key (known: {', '.join(SPACE_KEYS)})")
    if "choices" in spec:
        _check(set(spec) == {"choices"}, setting, "choices take no low / high / log / step")
        _check(isinstance(spec["choices"], list) and len(spec["choices"]) >= 1, f"{setting}.choices",
               f"must be a non-empty list, got {spec['choices']!r}")
        if hint in (int, float):  # 1_024 is text to YAML 1.2: stored in the study as '1_024' otherwise
            spec["choices"] = [_coerce(c, hint, setting) if isinstance(c, str) else c for c in spec["choices"]]
        if hint is float:  # [0, 0.1]: 0 a float too, as low and high are (a queued 0.0 was no choice)
            spec["choices"] = [float(c) if is_int(c) else c for c in spec["choices"]]
        return
    _check(hint in (int, float), setting, "is not a number: give {choices: [...]}")
    _check({"low", "high"} <= set(spec), setting, "needs low and high (or choices)")
    low, high = spec["low"], spec["high"]
    low, high = (_coerce(v, hint, setting) for v in (low, high))  # 1e-3 a float; 1_024 an int
    kind = "an integer" if hint is int else "a number"
    ok = is_int if hint is int else (lambda v: isinstance(v, (int, float)) and not isinstance(v, bool))
    _check(ok(low) and ok(high), setting, f"low and high must each be {kind}, got {spec['low']!r} and {spec['high']!r}")
    _check(low < high, setting, f"low must be below high, got {low!r} and {high!r}")
    if key.endswith(".seed"):  # a draw outside the seeds numpy takes ended the study mid-way
        for bound in (low, high):
            _check_seed(bound, setting)
    log = spec.get("log", False)
    _check(isinstance(log, bool), f"{setting}.log", f"must be true or false, got {log!r}")
    _check(not spec.get("log") or low > 0, f"{setting}.log", f"needs low > 0, got {low!r}")
    step = None if spec.get("step") is None else _coerce(spec["step"], hint, setting)
    if step is not None:
        spec["step"] = step
    _check(step is None or (ok(step) and step > 0 and not spec.get("log")), f"{setting}.step",
           f"must be {kind} > 0, and not with log: true; got {step!r}")
    if step is not None:  # Optuna moves high down to the last step, with a warning on every trial
        _check(hint is int or (high - low) / step <= MAX_STEPS, f"{setting}.step", f"makes more than "
               f"{MAX_STEPS:.0e} steps of {low!r}..{high!r} (Optuna's decimal arithmetic fails on such); leave it out "
               "for a continuous range")
        _check(_whole_steps(high, low, step) >= 1, f"{setting}.step",
               f"must divide high - low ({high!r} - {low!r}) into whole steps, got {step!r}")
    spec["low"], spec["high"] = low, high


MAX_STEPS = 1e15  # steps of a float range in tune.space, at most (Optuna's Decimal, of 28 digits, failed past ~1e28)


def _whole_steps(value: float, low: float, step: float) -> int:
    """How many whole ``step`` s lie from ``low`` to ``value``; -1 if not a whole number. Integers exactly; floats in
    decimal, as Optuna checks a range (0.1 divides 100000000.3 - 100000000.0; 3e-12 does not divide 1)."""
    if is_int(value) and is_int(low) and is_int(step):
        steps, rest = divmod(value - low, step)
        return int(steps) if rest == 0 else -1
    try:
        steps = (Decimal(str(value)) - Decimal(str(low))) / Decimal(str(step))
    except ArithmeticError:  # a step of 0 is refused before; inf and NaN have no steps
        return -1
    return int(steps) if steps.is_finite() and steps == steps.to_integral_value() else -1


def _check_in_space(setting: str, value: Any, spec: dict[str, Any], hint: Any) -> None:
    """A value queued for a trial lies in its setting's space: one of the choices, or a number of the
    setting's type from low to high (Optuna would run it all the same, outside the space, or fail the study)."""
    if "choices" in spec:
        if hint is float and is_int(value):
            value = float(value)
        _check(any(_plain(value) == _plain(c) and isinstance(value, bool) == isinstance(c, bool)
                   and isinstance(value, float) == isinstance(c, float) for c in spec["choices"]), setting,
               f"{value!r} is not one of the choices {spec['choices']!r}")
        return
    kind = "an integer" if hint is int else "a number"
    ok = is_int(value) if hint is int else isinstance(value, (int, float)) and not isinstance(value, bool)
    _check(ok, setting, f"must be {kind}, got {value!r}")
    _check(spec["low"] <= value <= spec["high"], setting,
           f"{value!r} is outside the space's range [{spec['low']!r}, {spec['high']!r}]")
    step = spec.get("step")
    if step is not None:
        _check(_whole_steps(value, spec["low"], step) >= 0, setting,
               f"{value!r} is not on the space's steps ({spec['low']!r} + a multiple of {step!r})")


@dataclass
class Config:
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    tune: TuneConfig | None = None  # read by `autoint tune` only; a run's own config has none

    def __post_init__(self) -> None:
        _check(self.train.forward_rows == "auto" or not (self.model.dnn_hidden and self.model.dnn_batch_norm),
               "train.forward_rows", "batch norm (model.dnn_batch_norm) needs each batch in one pass; use 'auto'")
        if self.tune is not None:
            self._check_tune_values()

    def _check_tune_values(self) -> None:
        """Every bound and choice of the space must be a valid value of its setting in this config."""
        assert self.tune is not None
        for key, spec in self.tune.search_space().items():
            values = spec["choices"] if "choices" in spec else [spec["low"], spec["high"]]
            for value in values:
                try:
                    self.with_settings({key: value})
                except ConfigError as e:
                    raise ConfigError(f"tune.space.{key}: {value!r} is not a valid value here ({e})") from None

    def with_settings(self, settings: dict[str, Any]) -> Config:
        """A copy with dotted settings replaced (``{"model.num_layers": 2}``), and no tune section."""
        d = self.to_dict()
        d.pop("tune", None)
        for key, value in settings.items():
            set_dotted(d, key, value)
        return config_from_dict(d)

    def to_dict(self) -> dict:
        d = _plain(dataclasses.asdict(self))
        if d.get("tune") is None:
            d.pop("tune", None)
        return d

    def flat(self) -> dict[str, Any]:
        """``{"model.num_heads": 2, ...}``: the form MLflow params take (a run's settings: ``tune`` is left out)."""
        out: dict[str, Any] = {}

        def walk(prefix: str, d: dict) -> None:
            for k, v in d.items():
                if isinstance(v, dict) and k not in ("columns", "files", "synthetic"):
                    walk(f"{prefix}{k}.", v)
                else:
                    out[f"{prefix}{k}"] = v

        walk("", {k: v for k, v in self.to_dict().items() if k != "tune"})
        return out

    def save(self, path: str | Path) -> None:
        write_text(path, dump_yaml(self.to_dict()))

    def with_data(self, processed: str | Path | None = None, raw: Any = None) -> Config:
        """A copy naming the processed folder and the raw input a command used (``--data``, ``--raw``), each path
        absolute (a glob's folder too), as a run's params and saved config record them; None leaves a setting."""
        def one(text: str | Path) -> str:
            return str(Path(text).expanduser().absolute())

        settings: dict[str, Any] = {}
        if processed is not None:
            settings["data.processed"] = one(processed)
        if raw is not None:
            settings["data.raw"] = one(raw) if isinstance(raw, (str, Path)) else [one(r) for r in raw]
        return self.with_settings(settings) if settings else self


# --------------------------------------------------------------------------- loading
def _known_encoding(name: Any) -> bool:
    try:
        codecs.lookup(name)
    except (LookupError, TypeError):
        return False
    return True


def underscored_int(value: Any) -> Any:
    """``"1_000_000"`` as the integer: text in YAML 1.2, a number in Python and in YAML 1.1; any other value as it
    is (for the setting's own check)."""
    if isinstance(value, str) and re.fullmatch(r"[-+]?[0-9]+(?:_[0-9]+)+", value.strip()):
        return int(value)
    return value


def is_int(v: Any) -> bool:
    """An integer (a numpy one too), not a bool: what a count or a size takes."""
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def _plain(v: Any) -> Any:
    """Dicts, lists and Python scalars: a tuple as a list, a numpy number or bool as the Python one it holds (a
    notebook's ``np.logspace`` grid gave ``train.lr`` a ``numpy.float64``, which YAML cannot write)."""
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if type(v).__module__ == "numpy" and getattr(v, "ndim", None) == 0 and hasattr(v, "item"):
        return v.item()
    return v


def _build(cls: type, data: Any, path: str) -> Any:
    """Instantiate dataclass ``cls`` from a mapping, recursing into nested sections."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path or 'config'}: expected a mapping, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - known)
    if unknown:
        where = f"{path}." if path else ""
        raise ConfigError(f"unknown setting {where}{unknown[0]} (known: {', '.join(sorted(known))})")
    kwargs = {}
    for name, value in data.items():
        hint = _optional_dataclass(hints[name]) if value is not None else hints[name]
        if dataclasses.is_dataclass(hint):
            kwargs[name] = _build(hint, value, f"{path}.{name}" if path else name)
        else:
            kwargs[name] = _coerce(value, hint, f"{path}.{name}" if path else name)
    try:
        return cls(**kwargs)
    except TypeError as e:  # pragma: no cover - dataclass signature mismatch
        raise ConfigError(f"{path or 'config'}: {e}") from e


def _optional_dataclass(hint: Any) -> Any:
    """``TuneConfig | None`` -> ``TuneConfig``; any other hint as it is."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    union = typing.get_origin(hint) in (typing.Union, types.UnionType)
    return args[0] if union and len(args) == 1 and dataclasses.is_dataclass(args[0]) else hint


def _coerce(value: Any, hint: Any, setting: str) -> Any:
    """Light type coercion for YAML values: ints for floats, lists for tuples."""
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        non_none = [a for a in args if a is not type(None)]
        if len(non_none) == 1:
            return _coerce(value, non_none[0], setting)
        if str in non_none and _read_as_other(value):  # data.raw: 2024-05-01, a day's folder: its text
            return _coerce(value, str, setting)
        listed = [typing.get_args(a) for a in non_none if typing.get_origin(a) is list]
        if isinstance(value, list) and (str,) in listed:  # data.raw: [2024-05-01, 2024-05-02]
            return [_coerce(v, str, f"{setting}.{i}") if _read_as_other(v) else v for i, v in enumerate(value)]
        return value
    if hint is str and (_read_as_other(value) or isinstance(value, os.PathLike)):
        # YAML reads `precision: 32` as a number and `run_name: 2024-05-01` as a date: the setting is their text as
        # written (`run_name: 1e5` is '1e5', not '100000.0'; a checkpoint saved `precision: 32` so)
        return (_WRITTEN.get() or {}).get(setting, str(value))
    if hint is float and is_int(value):
        return float(value)
    if hint is int:
        return underscored_int(value)
    if origin is tuple and isinstance(value, (list, tuple)) and args and args[0] in (int, float):
        return tuple(_coerce(v, args[0], setting) for v in value)  # dnn_hidden: [1_000, 500]
    if hint is float and isinstance(value, str):
        try:  # "1_000.5": text to YAML 1.2
            return float(value)
        except ValueError:
            raise ConfigError(f"{setting}: expected a number, got {value!r}") from None
    if origin is tuple and isinstance(value, (list, tuple)):
        return tuple(value)
    if origin is tuple and value is None:
        return ()
    return value


def _read_as_other(value: Any) -> bool:
    """A value YAML read as a number or a date, which a text setting takes as its written text."""
    return isinstance(value, (numbers.Number, datetime.date)) and not isinstance(value, bool)


def resolve_precision(precision: str, accelerator: str = "auto", say: bool = True) -> str:
    """The Lightning precision ``train.precision`` names: ``"auto"`` → ``"bf16-mixed"`` where bf16 is native to
    the hardware, else ``"32-true"``; the short names written whole (``"bf16"`` → ``"bf16-mixed"``); and
    ``"16-mixed"`` off a GPU → ``"bf16-mixed"``, said in a warning (fp16 autocast needs a GPU: Lightning made
    the same change with a warning of its own, and the checkpoint recorded a precision the config did not;
    ``say``: the warning, which a check made before the run leaves to the run)."""
    import torch

    on_gpu = accelerator in ("gpu", "cuda") or (accelerator == "auto" and torch.cuda.is_available())
    if precision != "auto":
        precision = _PRECISION_NAMES.get(precision, precision)
        mps = getattr(torch.backends, "mps", None)
        on_cpu = accelerator == "cpu" or (accelerator == "auto" and not on_gpu
                                          and not (mps is not None and mps.is_available()))
        if precision == "16-mixed" and on_cpu:  # as Lightning does on a CPU (an Apple GPU keeps fp16)
            if say:
                log.warning("train.precision=16-mixed: fp16 autocast needs a GPU; on a CPU this trains in bf16-mixed")
            return "bf16-mixed"
        return precision
    if on_gpu:
        return "bf16-mixed" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "32-true"
    native = getattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)() or getattr(
        torch.cpu, "_is_amx_tile_supported", lambda: False)()
    return "bf16-mixed" if native else "32-true"


def differences(before: dict[str, Any], now: dict[str, Any], where: str, show: Any = repr) -> list[str]:
    """``setting: <value before> in the <where>, <value now> now`` for each setting whose value differs."""
    return [f"{k}: {show(before.get(k))} in the {where}, {show(now.get(k))} now"
            for k in sorted(set(before) | set(now)) if before.get(k) != now.get(k)]


def require_config(cfg: Any, kind: type = Config, name: str = "cfg") -> None:
    """A :class:`TypeError` naming ``name`` where the Python API is given something else than a ``kind`` (a dict
    of settings, a whole Config where a section is expected)."""
    if not isinstance(cfg, kind):
        how = ("autoint.config.config_from_dict(d) or load_config(path) builds one" if kind is Config else
               "pass the section, e.g. cfg.model" if isinstance(cfg, Config) else
               f"{kind.__name__}(**settings) builds one")
        raise TypeError(f"{name}: expected a {kind.__name__}, got {type(cfg).__name__}; {how}")


def config_from_dict(d: dict) -> Config:
    return _build(Config, _plain(d) if isinstance(d, dict) else d, "")


def saved_config(d: dict) -> dict:
    """A config a checkpoint recorded, as a dict :func:`config_from_dict` takes: a ``train.precision`` this version
    no longer trains in (16-true, bf16-true, 64: taken before) is read as ``"32-true"``. Its model is scored in fp32
    whatever it trained in, and its weights load as fp32; refused, such a model could no longer be scored."""
    train = d.get("train") if isinstance(d, dict) else None
    if isinstance(train, dict) and str(train.get("precision", "auto")) not in PRECISIONS:
        return {**d, "train": {**train, "precision": "32-true"}}
    return d


# Sections whose keys are dotted settings themselves: --set tune.space.train.lr=... sets the key "train.lr".
_DOTTED_SECTIONS = ("tune.space",)


# Settings written as a name or as a mapping: a --set into the mapping turns the name into it (the key that holds it).
_NAME_OR_MAPPING = {("data", "columns", "label"): "name", ("data", "columns", "time"): "column"}


def set_dotted(d: dict, dotted: str, value: Any) -> None:
    section = next((p for p in _DOTTED_SECTIONS if dotted.startswith(p + ".")), None)
    keys = [*section.split("."), dotted[len(section) + 1:]] if section else dotted.split(".")
    cur = d
    for i, k in enumerate(keys[:-1]):
        nxt = cur.get(k)
        if nxt is None:
            nxt = cur[k] = {}
        holds = _NAME_OR_MAPPING.get(tuple(keys[: i + 1]))
        if isinstance(nxt, str) and holds is not None:  # label: clicked → label: {name: clicked}
            nxt = cur[k] = {holds: nxt}
        if not isinstance(nxt, dict):
            held = ".".join(keys[: i + 1])
            if i == 0:  # a section the file wrote as a value (model: paper)
                raise ConfigError(f"--set {dotted}: {held} is {nxt!r}, where a section of settings is expected; "
                                  f"write it as one, e.g. {held}: {{{keys[1]}: ...}}")
            raise ConfigError(f"--set {dotted}: {held} is {nxt!r}, a value, not a section holding {keys[i + 1]!r}; "
                              f"set it as --set {held}=VALUE")
        cur = nxt
    cur[keys[-1]] = value


def parse_override(text: str) -> tuple[str, Any]:
    """``"model.num_layers=2"`` -> ``("model.num_layers", 2)``."""
    if "=" not in text:
        raise ConfigError(f"--set {text!r}: expected KEY=VALUE, e.g. model.num_layers=2")
    key, raw = text.split("=", 1)
    key = key.strip()
    if not key:
        raise ConfigError(f"--set {text!r}: empty key")
    try:
        value = parse_yaml(raw) if raw.strip() else None  # a key twice: refused, as in a file
    except yaml.YAMLError as e:
        if not raw.strip().startswith(("[", "{", '"', "'")):  # a plain word YAML cannot read ("%y%m%d%H"): itself
            return key, raw.strip()
        problem = getattr(e, "problem", None) or " ".join(str(e).split())
        raise ConfigError(f"--set {text!r}: value is not valid YAML ({problem})") from None
    return key, value


class _UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.safe_load``'s loader, refusing a key given twice in one mapping (YAML keeps the last one,
    silently: a section written twice would lose its first half), and reading numbers as YAML 1.2 does.

    PyYAML follows YAML 1.1, where ``12:30`` is the number 750 (base 60), ``1_000`` is 1000 and ``1e-3`` is
    text: ``--set train.run_name=12:30`` named the run 750. Here a number is written as YAML 1.2's core schema
    (and JSON) writes one: ``12``, ``-3``, ``0x1F``, ``0o17``, ``1.5``, ``1e-3``, ``.inf``; anything else is
    text. Booleans stay YAML 1.1's (``yes``/``no``/``on``/``off`` too), as configs written for PyYAML use them.
    """


def _unique_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False) -> Any:
    lines: dict[Any, int] = {}
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *anchor`: construct_mapping merges it
            continue
        key = loader.construct_object(key_node, deep=deep)
        try:
            if key in lines:
                raise yaml.constructor.ConstructorError(
                    None, None, f"{key!r} is given twice in one mapping (lines {lines[key]} and "
                    f"{key_node.start_mark.line + 1})", key_node.start_mark)
            lines[key] = key_node.start_mark.line + 1
        except TypeError:  # an unhashable key: the mapping's own construction says so
            continue
    return loader.construct_mapping(node, deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _unique_mapping)

_INT_TAG, _FLOAT_TAG = "tag:yaml.org,2002:int", "tag:yaml.org,2002:float"
_YAML12_NUMBERS = (  # YAML 1.2's core schema: (tag, pattern, first characters)
    (_INT_TAG, re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$"), "-+0123456789"),
    (_FLOAT_TAG, re.compile(r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
                            r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"), "-+.0123456789"),
)


def _resolvers(base: dict, drop_numbers: bool) -> dict:
    """``base``'s implicit resolvers (first character -> [(tag, pattern)]) with YAML 1.2's number patterns
    added, and YAML 1.1's dropped where ``drop_numbers``."""
    table = {c: [(tag, rx) for tag, rx in rs if not (drop_numbers and tag in (_INT_TAG, _FLOAT_TAG))]
             for c, rs in base.items()}
    for tag, rx, first in _YAML12_NUMBERS:
        for c in first:
            table.setdefault(c, []).append((tag, rx))
    return table


def _yaml12_int(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> int:
    text = loader.construct_scalar(node)
    body = text.lstrip("+-")
    try:
        value = int(body[2:], 16 if body[1:2] in "xX" else 8) if body[:2].lower() in ("0x", "0o") else int(body)
    except ValueError:  # an explicit !!int on text that is none
        raise yaml.constructor.ConstructorError(None, None, f"{text!r} is not an integer", node.start_mark) from None
    return -value if text.startswith("-") else value


def _yaml12_float(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> float:
    text = loader.construct_scalar(node)
    special = {".inf": math.inf, "+.inf": math.inf, "-.inf": -math.inf, ".nan": math.nan}.get(text.lower())
    if special is not None:
        return special
    try:
        return float(text)
    except ValueError:
        raise yaml.constructor.ConstructorError(None, None, f"{text!r} is not a number", node.start_mark) from None


_UniqueKeyLoader.yaml_implicit_resolvers = _resolvers(yaml.SafeLoader.yaml_implicit_resolvers, drop_numbers=True)
_UniqueKeyLoader.add_constructor(_INT_TAG, _yaml12_int)
_UniqueKeyLoader.add_constructor(_FLOAT_TAG, _yaml12_float)


class _Dumper(yaml.SafeDumper):
    """``yaml.safe_dump``'s dumper, quoting text that either YAML 1.1 or 1.2 would read as a number: a saved
    config reads back the same here and through any YAML library (``run_name: '12:30'``, ``'1e-3'``)."""


_Dumper.yaml_implicit_resolvers = _resolvers(yaml.SafeDumper.yaml_implicit_resolvers, drop_numbers=False)


def parse_yaml(text: str) -> Any:
    """YAML text's contents as a config file's are read (:class:`_UniqueKeyLoader`); errors are PyYAML's."""
    return yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader: safe types only


def dump_yaml(obj: Any) -> str:
    """``obj`` as YAML that :func:`parse_yaml`, and YAML 1.1 readers, read back as it is."""
    return yaml.dump(obj, Dumper=_Dumper, sort_keys=False, allow_unicode=True)


def read_yaml(path: Path) -> Any:
    """A YAML file's contents (safe types only); a syntax error or a duplicated key is a one-line
    :class:`ConfigError` naming the file and line."""
    try:
        return parse_yaml(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as e:  # a config saved by a Windows editor in cp1252
        raise ConfigError(f"{path}: not UTF-8 text ({e.reason}: byte {e.object[e.start:e.end]!r} at byte "
                          f"{e.start}); save it as UTF-8") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        what = getattr(e, "problem", None) or " ".join(str(e).split())
        raise ConfigError(f"{path}: not valid YAML{where}: {what}") from None


# dotted setting -> the text a number was written as, in the file or the --set being read (load_config): a text
# setting given a number keeps it as written
_WRITTEN: contextvars.ContextVar[dict[str, str] | None] = contextvars.ContextVar("written_numbers", default=None)


def _written_numbers(typed: Any, texts: Any, prefix: str = "") -> dict[str, str]:
    """Dotted setting -> written text of each number or date in a YAML document (a list's items as
    ``setting.0``, ...), from its typed and its all-text reading."""
    out: dict[str, str] = {}
    if isinstance(typed, dict) and isinstance(texts, dict):
        for key, value in typed.items():
            if isinstance(key, str) and key in texts:
                out.update(_written_numbers(value, texts[key], f"{prefix}{key}."))
    elif isinstance(typed, list) and isinstance(texts, list) and len(typed) == len(texts):
        for i, (value, text) in enumerate(zip(typed, texts)):
            out.update(_written_numbers(value, text, f"{prefix}{i}."))
    elif _read_as_other(typed) and isinstance(texts, str):  # a date too (run_name: 2024-05-01T10:00:00Z)
        out[prefix[:-1]] = texts.strip()
    return out


class _TextLoader(yaml.BaseLoader):
    """Every scalar as its text (what a number was written as)."""


def load_config(path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = (),
                tune: bool = True) -> Config:
    """Read a YAML config (or the defaults when ``path`` is None) and apply overrides (``KEY=VALUE`` texts).

    ``tune=False``: the ``tune`` section is left out, unread (what every command but ``autoint tune`` does:
    its space's values are checked against the rest of the config, which a run's own settings need not pass).
    """
    if isinstance(overrides, str):  # one override, not its characters
        overrides = [overrides]
    raw: dict = {}
    if isinstance(path, dict):  # pathlib's "expected str, bytes or os.PathLike object, not dict" said nothing
        raise ConfigError("load_config reads a YAML file; for a dict of settings use config_from_dict")
    if path is not None and not isinstance(path, (str, os.PathLike)):
        raise ConfigError(f"load_config: expected the path of a YAML config file, got {path!r}")
    if path is not None:
        path = Path(path).expanduser()
        if path.is_dir():
            raise ConfigError(f"{path}: a folder, not a config file")
        if not path.is_file():
            raise ConfigError(f"config file not found: {path}")
        raw = read_yaml(path) or {}
        if not isinstance(raw, dict):
            raise ConfigError(f"{path}: the top level must be a mapping of sections")
    written: dict[str, str] = {}
    if raw:
        with contextlib.suppress(yaml.YAMLError):
            written = _written_numbers(raw, yaml.load(path.read_text(encoding="utf-8"), Loader=_TextLoader))
    given: dict[str, str] = {}  # dotted key -> the --set text that gave it
    for text in overrides:
        key, value = parse_override(text)
        set_dotted(raw, key, value)
        given[key] = text
        written = {k: v for k, v in written.items() if k != key and not k.startswith(key + ".")}
        with contextlib.suppress(yaml.YAMLError):  # the value as written (a section given whole, a # comment)
            written.update(_written_numbers(value, yaml.load(text.split("=", 1)[1], Loader=_TextLoader), key + "."))
    if not tune:
        raw.pop("tune", None)
        for key, text in given.items():
            if key == "tune" or key.startswith("tune."):  # a mistyped command (train for tune) said nothing
                log.warning("--set %s: only `autoint tune` reads the tune section; ignored here", text)
    token = _WRITTEN.set(written)
    try:
        cfg = config_from_dict(raw)
        _check_table_columns(cfg.data)
    except ConfigError as e:
        raise ConfigError(f"{_culprit(str(e), given, path)}: {e}") from None
    finally:
        _WRITTEN.reset(token)
    uri = cfg.tracking.tracking_uri
    if uri and hide_password(uri) != uri:  # in the config, it is saved wherever the config goes
        log.warning("%s: tracking.tracking_uri holds a password, which is saved with the run's config (config.yaml, "
                    "its checkpoints and the logged model; MLflow's parameters show it as ***); give it through "
                    "MLFLOW_TRACKING_USERNAME / MLFLOW_TRACKING_PASSWORD (or MLFLOW_TRACKING_TOKEN) instead",
                    _culprit("tracking.tracking_uri", given, path))
    if cfg.data.chunk_size < FEW_CHUNK_ROWS:
        log.warning("%s: data.chunk_size %d makes row groups of %d rows: prepare, training and scoring read them "
                    "one at a time, far slower; the default is %d",
                    _culprit("data.chunk_size", given, path), cfg.data.chunk_size, cfg.data.chunk_size,
                    DataConfig.chunk_size)
    fmt = cfg.data.format
    for setting, used, readers in (("data.columns", cfg.data.columns is not None, ("table", "synthetic")),
                                   ("data.synthetic", cfg.data.synthetic is not None, ("synthetic",)),
                                   ("data.include_ids", bool(cfg.data.include_ids), ("movielens",))):
        if used and fmt not in readers:  # read by some readers only: a typo'd format would pass without a word
            log.warning("%s: %s does nothing with data.format %r (only %s read it)", _culprit(setting, given, path),
                        setting, fmt, " and ".join(repr(r) for r in readers))
    searched = cfg.tune.search_space() if cfg.tune is not None else {}
    for setting, why in idle_settings(cfg.model, searched):
        if setting in searched:
            log.warning("tune.space searches %s, which does nothing here: %s; its trials differ in nothing it "
                        "changes", setting, why)
        else:
            log.warning("%s: %s does nothing: %s", _culprit(setting, given, path), setting, why)
    return cfg


FEW_CHUNK_ROWS = 1024  # data.chunk_size below this gets a warning: every row group is read on its own


# model setting -> (the setting without which it does nothing, whether that one leaves it idle, why)
_NEEDS: dict[str, tuple[str, Any, str]] = {
    **{f"model.{name}": ("model.dnn_hidden", lambda m: not m.dnn_hidden, "no DNN (model.dnn_hidden is empty)")
       for name in ("dnn_dropout", "dnn_batch_norm")},
    **{f"model.{name}": ("model.num_layers", lambda m: m.num_layers == 0,
                         "no interacting layer (model.num_layers is 0)")
       for name in ("num_heads", "head_dim", "residual", "scale_attention", "layer_norm", "attention_dropout",
                    "attention_kernel")},
}


def idle_settings(model: ModelConfig, searched: Collection[str] = ()) -> list[tuple[str, str]]:
    """The model settings, given a value other than the default or ``searched`` by a study, that change nothing
    in the model ``model`` builds (``dnn_dropout`` with no DNN; the attention's with no interacting layer), each
    with why. A setting whose prerequisite is searched too is not idle: some trials use it."""
    defaults = ModelConfig()
    idle = []
    for setting, (needs, leaves_idle, why) in _NEEDS.items():
        name = setting.removeprefix("model.")
        given = setting in searched or getattr(model, name) != getattr(defaults, name)
        if given and needs not in searched and leaves_idle(model):
            idle.append((setting, why))
    return idle


def _check_table_columns(data: DataConfig) -> None:
    """A table's ``data.columns`` checked as the reader will check them, where a config is read, so that an error
    names the file or ``--set`` that gave it (it came once the log was read, naming neither). Not where a saved
    config is rebuilt: a model prepared before a later rule still loads (its reader says what it cannot do)."""
    if data.format != "table":
        return
    from .datasets.errors import DataError
    from .datasets.table import TableSpec

    try:
        TableSpec(data.columns)
    except DataError as e:
        raise ConfigError(str(e)) from None


def _culprit(message: str, given: dict[str, str], path: Path | None) -> str:
    """Who set the setting an error names: the ``--set`` that gave it, else the config file."""
    setting = message.removeprefix("unknown setting ").split(" ", 1)[0].split(":", 1)[0]
    named = [key for key in given
             if setting == key or setting.startswith((key + ".", key + "[")) or key.startswith(setting + ".")]
    if named:  # the closest: of --set data.columns={...} and --set data.columns.sep=ab, the second
        return hide_passwords(f"--set {given[max(named, key=len)]}")  # in errors and warnings: a password as ***
    return str(path) if path is not None else "config"
