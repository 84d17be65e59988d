"""Encoded Parquet splits → batches of tensors, streamed, and the LightningDataModule.

A processed folder (made by :func:`autoint.preprocess.prepare`) holds
``train/valid/test.parquet`` with one column per field in schema order
(categorical ``int32``, numeric ``float32``, multi-valued a fixed-size list of
``int32``, plus the ``label``), in row groups of exactly ``data.chunk_size``
rows (the last one shorter).

No split is held whole. A :class:`SplitLoader` reads row groups as it goes:

* **Order.** Each epoch draws a permutation of the row groups from
  ``(seed, epoch)``; the rows of consecutive row groups fill a shuffle buffer of
  ``train.shuffle_buffer`` rows, shuffled with a generator drawn from
  ``(seed, epoch, rank, window)``. The order depends on nothing else, so a run
  resumed from a checkpoint sees exactly the batches an uninterrupted run would.
  Evaluation keeps file order.
* **Shards.** The epoch's stream of rows is cut into one contiguous share per
  rank, sizes differing by at most one row (shares are counted in rows, so any
  row-group size balances); a rank reads only the row groups its share
  overlaps. Every training row is seen once per epoch across all ranks, and
  every evaluation row scored once. Training ranks take the same number of
  steps (DDP needs it): each takes ``ceil(batch_size / world_size)`` rows a
  step, and where one rank's share would need one step more, the others' last
  batches are split smaller instead of padded with repeated rows.
* **Small splits stay in memory.** A split whose decoded size is at most
  ``train.in_memory_bytes`` keeps its decoded row groups after the first
  read; the batches are the same either way.

Batches are mappings ``{"categorical": (B, Fc) int32, "numeric": (B, Fn) float32,
"multi": (B, Fm, L) int32, "label": (B,) float32}`` (see :mod:`autoint.batch`);
ids stay ``int32`` until the model's embedding lookup.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch
from torch import Tensor

from .batch import first_bad_id, first_bad_label, first_non_finite, tensors_from_table
from .config import ConfigError
from .datasets.errors import PREPARE_AGAIN as AGAIN
from .datasets.errors import DataError
from .datasets.text import open_parquet, reading_parquet
from .errors import MissingInput
from .files import read_json
from .schema import MULTI, NUMERIC, Schema


def data_identity(folder: Path) -> dict[str, Any] | None:
    """What tells a processed folder's data apart (its raw input's paths, sizes and times, rows and clicks per split,
    vocabulary sizes), from its prepare.json; None without one. Not its path: a moved folder is the same data."""
    try:
        report = read_json(folder / "prepare.json", DataError)
    except (FileNotFoundError, DataError):
        return None
    return {k: report.get(k) for k in ("input", "rows", "positives", "vocab_sizes")}


SPLITS = ("train", "valid", "test")

Batch = dict[str, Tensor]


# ----------------------------------------------------------------------------- one split file
def decoded_row_bytes(schema: Schema) -> int:
    """Bytes a row takes once decoded into a batch's tensors (:func:`tensors_from_table`): 4 per categorical and
    numeric field and the label, 4 per slot of the multi-valued fields' padded lists. The Parquet row groups'
    sizes (``total_byte_size``, dictionary- and run-length-encoded) undercounted it 2-7 times, so a split kept in
    memory took several times ``train.in_memory_mb`` (a helper's hunt)."""
    multi = schema.of_kind(MULTI)
    return 4 * (len(schema.fields) - len(multi) + 1) + 4 * len(multi) * max((f.max_len for f in multi), default=0)


class SplitFile:
    """An encoded split's row groups, read one at a time (and kept, when the split is small)."""

    def __init__(self, path: str | Path, schema: Schema, in_memory_bytes: int = 0) -> None:
        self.path = Path(path)
        if not self.path.is_file():
            raise MissingInput(f"encoded split not found: {self.path} (run `autoint prepare` first)")
        self.schema = schema
        meta = open_parquet(self.path, AGAIN).metadata
        self.group_rows = np.array([meta.row_group(i).num_rows for i in range(meta.num_row_groups)], dtype=np.int64)
        self.num_rows = int(self.group_rows.sum())
        self.in_memory = self.num_rows * decoded_row_bytes(schema) <= in_memory_bytes
        self._cache: dict[int, Batch] = {}
        self._file: pq.ParquetFile | None = None
        self.reads = 0  # row groups decoded from the file (a test watches it)
        self._id_sizes = {f.name: f.vocab_size for f in schema.fields if f.kind != NUMERIC}  # (_ids_in_range)

    def _ids_in_range(self, group: int) -> bool:
        """Whether row group ``group``'s statistics show every categorical and multi-valued id within its field's
        vocabulary; False where they cannot tell (no statistics) or show one outside."""
        sizes = self._id_sizes
        if self._file is None:
            return False
        meta = self._file.metadata.row_group(group)
        seen = set()
        for i in range(meta.num_columns):
            column = meta.column(i)
            name = column.path_in_schema.split(".")[0]
            if name not in sizes:
                continue
            stats = column.statistics
            # (min and max leave nulls out, and a null id reads as -2**31: checked by the ids themselves)
            if (stats is None or not stats.has_min_max or not meta.num_rows or not stats.has_null_count
                    or stats.null_count):
                return False
            if stats.min < 0 or stats.max >= sizes[name]:
                return False
            seen.add(name)
        return seen == set(sizes)

    def read(self, group: int) -> Batch:
        """Row group ``group`` as batch tensors."""
        if group in self._cache:
            return self._cache[group]
        if self._file is None:
            self._file = open_parquet(self.path, AGAIN)
        with reading_parquet(self.path, f", row group {group}{AGAIN}"):
            table = self._file.read_row_group(group)
        tensors = self._checked(table, group)
        self.reads += 1
        if self.in_memory:
            self._cache[group] = tensors
        return tensors

    def _checked(self, table: pa.Table, group: int) -> Batch:
        """A row group as batch tensors, refused naming the file where it is not what prepare writes: a missing
        column (a traceback, KeyError 'label'), a label other than 0 or 1 (NaN labels gave AUC 0 and status 0;
        -1/1 a wrong logloss), a numeric value that is not finite. A hand-edited split passes the page checksums."""
        where = f"{self.path}, row group {group}"
        absent = [c for c in (*self.schema.names, self.schema.label) if c not in table.column_names]
        if absent:
            raise DataError(f"{where}: no column for {absent[:5]}{AGAIN}")
        tensors = tensors_from_table(table, self.schema)
        bad = first_bad_label(tensors["label"])
        if bad is not None:
            raise DataError(f"{where}: row {bad[0]} has label {bad[1]}; labels are 0 or 1{AGAIN}")
        # the model said so by its row in a forward piece, and no file; the row group's statistics (prepare writes
        # them) answer for nearly free, the ids themselves only where they cannot (a full check made reading a
        # split half as fast again)
        wrong = None if self._ids_in_range(group) else first_bad_id(tensors, self.schema)
        if wrong is not None:
            kind, value, name, row, size = wrong
            raise DataError(f"{where}: row {row} holds {kind} id {value} of field {name!r}, outside its vocabulary "
                            f"0..{size - 1}{AGAIN}")
        found = first_non_finite(tensors, self.schema)
        if found is not None:
            raise DataError(f"{where}: row {found[0]} holds {found[2]} in numeric field {found[1]!r}, where prepare "
                            f"writes finite values only{AGAIN}")
        return tensors

    def empty(self) -> Batch:
        return tensors_from_table(open_parquet(self.path, AGAIN).schema_arrow.empty_table(), self.schema)

    def __getstate__(self) -> dict:  # DataLoader workers and spawned ranks re-open the file themselves
        return {**self.__dict__, "_file": None}


def read_split(path: str | Path, schema: Schema) -> Batch:
    """A whole split as tensors: for small splits in analyses and tests, never for training."""
    split = SplitFile(path, schema)
    parts = [split.read(i) for i in range(len(split.group_rows))]
    if not parts:
        return split.empty()
    return {k: torch.cat([p[k] for p in parts]) if len(parts) > 1 else parts[0][k] for k in parts[0]}


# ----------------------------------------------------------------------------- the epoch's plan
def rank_share(num_rows: int, rank: int, world_size: int) -> tuple[int, int]:
    """Rows ``[start, stop)`` of a stream of ``num_rows`` that ``rank`` takes: contiguous, sizes within one."""
    return num_rows * rank // world_size, num_rows * (rank + 1) // world_size


def batch_sizes(rows: int, steps: int, batch_size: int) -> list[int]:
    """``rows`` cut into ``steps`` non-empty batches of at most ``batch_size``: full ones first, and the
    last ones smaller only where fewer rows than ``steps * batch_size`` would leave a batch empty."""
    if not steps <= rows <= steps * batch_size:
        raise ValueError(f"{rows} rows cannot make {steps} non-empty batches of at most {batch_size}")
    sizes, left = [], rows
    for k in range(steps):
        size = min(batch_size, left - (steps - 1 - k))  # leave one row for each batch still to come
        sizes.append(size)
        left -= size
    return sizes


class SplitLoader:
    """Batches of one split, streamed by row groups (see the module docstring).

    ``epoch_fn`` reports the trainer's epoch; ``pad=True`` (training) makes every
    rank take the same number of steps, ``pad=False`` (evaluation) lets shares
    end where they end.
    """

    def __init__(self, split: SplitFile, batch_size: int, shuffle: bool = False, seed: int = 0,
                 rank: int = 0, world_size: int = 1, epoch_fn: Callable[[], int] | None = None,
                 pad: bool = True, shuffle_buffer: int = 1_000_000) -> None:
        self.split = split
        self.shuffle, self.seed, self.pad = shuffle, seed, pad
        self.rank, self.world_size = rank, world_size
        self.epoch_fn = epoch_fn or (lambda: 0)
        self.shuffle_buffer = max(int(shuffle_buffer), 1)
        # Training: a global batch of batch_size rows is split across the ranks.
        self.batch_size = math.ceil(batch_size / world_size) if pad else batch_size
        if pad and split.num_rows < world_size:
            raise ValueError(f"{split.path}: {split.num_rows} rows cannot be shared by {world_size} ranks")
        if pad and self.batch_size == 1 and split.num_rows % world_size:  # a rank a row short has a step without one
            raise ConfigError(f"train.batch_size: {batch_size} over {world_size} processes is one row per process and "
                              f"step, and {split.num_rows:,} rows do not share evenly, so the processes cannot take "
                              f"equal steps; use train.batch_size >= {2 * world_size}")

    @property
    def num_rows(self) -> int:
        return self.split.num_rows

    def _steps(self) -> list[int]:
        """This rank's batch sizes this epoch."""
        start, stop = rank_share(self.num_rows, self.rank, self.world_size)
        rows = stop - start
        if not self.pad:
            return [min(self.batch_size, rows - i) for i in range(0, rows, self.batch_size)]
        longest = -(-self.num_rows // self.world_size)
        return batch_sizes(rows, -(-longest // self.batch_size), self.batch_size)

    def _segments(self, epoch: int) -> list[tuple[int, int, int]]:
        """``(row group, first row, end row)`` pieces of this rank's share, in stream order."""
        groups = np.arange(len(self.split.group_rows))
        if self.shuffle:
            groups = np.random.default_rng([self.seed, epoch]).permutation(groups)
        start, stop = rank_share(self.num_rows, self.rank, self.world_size)
        out, offset = [], 0
        for g in groups:
            n = int(self.split.group_rows[g])
            lo, hi = max(start - offset, 0), min(stop - offset, n)
            if lo < hi:
                out.append((int(g), lo, hi))
            offset += n
            if offset >= stop:
                break
        return out

    def _windows(self, epoch: int) -> Iterator[Batch]:
        """The share's rows as consecutive blocks, each shuffled within itself (training)."""
        pending: list[Batch] = []
        rows = 0
        window = 0
        for g, lo, hi in self._segments(epoch):
            block = self.split.read(g)
            piece = {k: v[lo:hi] for k, v in block.items()} if (lo, hi) != (0, len(block["label"])) else block
            if not self.shuffle:  # file order: the pieces as they are, no window to gather
                yield piece
                continue
            pending.append(piece)
            rows += hi - lo
            if rows >= self.shuffle_buffer:
                yield self._mix(pending, epoch, window)
                pending, rows, window = [], 0, window + 1
        if pending:
            yield self._mix(pending, epoch, window)

    def _mix(self, parts: list[Batch], epoch: int, window: int) -> Batch:
        block = parts[0] if len(parts) == 1 else {k: torch.cat([p[k] for p in parts]) for k in parts[0]}
        g = torch.Generator().manual_seed(int(np.random.default_rng([self.seed, epoch, self.rank, window])
                                              .integers(2**62)))
        order = torch.randperm(len(block["label"]), generator=g)
        return {k: v[order] for k, v in block.items()}

    def __iter__(self) -> Iterator[Batch]:
        epoch = self.epoch_fn()
        sizes = iter(self._steps())
        carry: Batch | None = None
        want = next(sizes, None)
        for block in self._windows(epoch):
            if carry is not None:
                block = {k: torch.cat([carry[k], block[k]]) for k in block}
                carry = None
            at, n = 0, len(block["label"])
            while want is not None and n - at >= want:
                yield {k: v[at : at + want] for k, v in block.items()}
                at += want
                want = next(sizes, None)
            if at < n:
                carry = {k: v[at:] for k, v in block.items()}
        if want is not None or carry is not None:  # the plan and the share disagree: a bug here, not in the data
            raise RuntimeError(f"{self.split.path}: rank {self.rank} batches do not cover its share")

    def __len__(self) -> int:
        return len(self._steps())


# ----------------------------------------------------------------------------- the data module
class CTRDataModule(L.LightningDataModule):
    """Train / valid / test splits of a processed folder, streamed (small ones kept in memory).

    Training batches are reshuffled every epoch; evaluation batches keep file order.
    """

    def __init__(self, folder: str | Path, batch_size: int = 1024, seed: int = 0,
                 eval_batch_size: int | None = None, test_split: str = "test",
                 shuffle_buffer: int = 1_000_000, in_memory_bytes: int = 256 * 2**20,
                 batch_norm: bool = False) -> None:
        super().__init__()
        self.batch_norm = batch_norm  # training batches of one row are refused: batch norm cannot normalise one
        self.folder = Path(folder)
        schema_path = self.folder / "schema.json"
        if not schema_path.is_file():
            raise MissingInput(f"{self.folder}: no schema.json; run `autoint prepare` to make this folder")
        self.schema = Schema.load(schema_path)
        self.batch_size, self.seed = batch_size, seed
        self.eval_batch_size = eval_batch_size or max(batch_size, 4096)
        self.shuffle_buffer, self.in_memory_bytes = shuffle_buffer, in_memory_bytes
        if test_split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {test_split!r}")
        self.test_split = test_split  # what trainer.test scores: "test", or "valid" to evaluate on it
        self.splits: dict[str, SplitFile] = {}

    def setup(self, stage: str | None = None) -> None:
        # "fit" checks the test split too: train tests after fitting, and should not find it empty an hour later
        needed = {"fit": ("train", "valid", self.test_split), "validate": ("valid",), "test": (self.test_split,)}.get(
            stage or "", ())
        # Only the splits the stage reads are opened: evaluating the test split needed train.parquet, and a
        # damaged train.parquet blocked it (a helper's hunt)
        for split in needed or SPLITS:
            if split not in self.splits and (self.folder / f"{split}.parquet").is_file():
                self.splits[split] = SplitFile(self.folder / f"{split}.parquet", self.schema, self.in_memory_bytes)
        for split in needed[:1] or ("train",):  # (the stage's first: fit fails on a missing valid or test later)
            if split not in self.splits:
                raise MissingInput(f"{self.folder}: no {split}.parquet")
        for split in needed:
            if split in self.splits and self.splits[split].num_rows == 0:
                why = {"train": "nothing to train on", "valid": "nothing to choose the best epoch by"}.get(
                    split, "nothing to score")
                raise DataError(f"{self.folder}: the {split} split holds no rows ({why}); prepare the folder with "
                                "other data.split settings (a time split puts every row at a cut-off time on the "
                                "earlier side, so coarse times can leave a later split empty)")

    def _rank_world(self) -> tuple[int, int]:
        trainer = self.trainer
        return (trainer.global_rank, trainer.world_size) if trainer is not None else (0, 1)

    def _loader(self, split: str, train: bool) -> SplitLoader:
        if split not in self.splits:
            raise MissingInput(f"{self.folder}: no {split}.parquet")
        rank, world = self._rank_world()
        epoch_fn = (lambda: self.trainer.current_epoch) if self.trainer is not None else None
        loader = SplitLoader(self.splits[split], self.batch_size if train else self.eval_batch_size,
                             shuffle=train, seed=self.seed, rank=rank, world_size=world,
                             epoch_fn=epoch_fn, pad=train, shuffle_buffer=self.shuffle_buffer)
        if train:
            self.check_batch_norm(world, [rank])
        return loader

    def check_batch_norm(self, world: int = 1, ranks: Sequence[int] | None = None) -> None:
        """Under batch norm (``batch_norm``), refuse a ``batch_size`` that leaves a training batch of one row on
        any of ``ranks`` (default: all ``world``) processes (torch's ValueError, a traceback, mid-epoch), naming
        a nearby one that does not. Call after :meth:`setup`."""
        if not self.batch_norm or "train" not in self.splits:
            return
        split = self.splits["train"]
        # ranks hold shares of two sizes at most: each size's plan is made once
        shares = {}
        for r in range(world) if ranks is None else ranks:
            start, stop = rank_share(split.num_rows, r, world)
            shares.setdefault(stop - start, r)

        def one_row(batch_size: int) -> bool:  # the loader's own refusals (too few rows for the ranks) propagate
            return any(1 in SplitLoader(split, batch_size, rank=r, world_size=world)._steps()
                       for r in shares.values())

        if not one_row(self.batch_size):
            return

        def works(batch_size: int) -> bool:
            try:
                return not one_row(batch_size)
            except (ConfigError, ValueError):
                return False

        # multiples of the process count: each process takes ceil(batch_size / processes) rows a step
        base = max(world, self.batch_size - self.batch_size % world)
        near = next((b for d in range(0, 65) for b in (base - d * world, base + (d + 1) * world)
                     if b >= 2 * world and b != self.batch_size and works(b)), None)
        raise ConfigError(f"train.batch_size: {self.batch_size} leaves a batch of one row ({split.num_rows:,} train "
                          f"rows{f' over {world} processes' if world > 1 else ''}), which batch norm "
                          "(model.dnn_batch_norm) cannot normalise; choose another"
                          + (f", e.g. {near}" if near is not None else ""))

    def whole_split(self, split: str) -> SplitLoader:
        """Every row of ``split`` in file order, in evaluation batches, whatever this process's rank."""
        if split not in self.splits:
            raise MissingInput(f"{self.folder}: no {split}.parquet")
        return SplitLoader(self.splits[split], self.eval_batch_size, pad=False)

    def train_dataloader(self) -> SplitLoader:
        return self._loader("train", train=True)

    def val_dataloader(self) -> SplitLoader:
        return self._loader("valid", train=False)

    def test_dataloader(self) -> SplitLoader:
        return self._loader(self.test_split, train=False)


def data_module(cfg: Any, data: str | Path, test_split: str = "test") -> CTRDataModule:
    """The processed folder's splits as the run's settings (``cfg.train``) stream them."""
    t = cfg.train
    return CTRDataModule(data, t.batch_size, seed=t.seed, test_split=test_split, shuffle_buffer=t.shuffle_buffer,
                         in_memory_bytes=t.in_memory_mb * 2**20,
                         batch_norm=bool(cfg.model.dnn_hidden and cfg.model.dnn_batch_norm))
