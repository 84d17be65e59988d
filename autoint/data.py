"""Encoded Parquet splits → batches of tensors, and the LightningDataModule.

A processed folder (made by :func:`autoint.preprocess.prepare`) holds
``train/valid/test.parquet`` with one column per field in schema order:
categorical ``int32``, numeric ``float32``, multi-valued a fixed-size list of
``int32``, plus the ``label``. Columns are read row group by row group straight
into contiguous arrays; a batch is one fancy-index per tensor, never a Python
loop over rows.

Batches are mappings ``{"categorical": (B, Fc) int64, "numeric": (B, Fn) float32,
"multi": (B, Fm, L) int64, "label": (B,) float32}`` (keys absent when the kind
has no field), the form :class:`autoint.model.AutoInt` takes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import lightning as L
import pyarrow.parquet as pq
import torch
from torch import Tensor

from .batch import tensors_from_table
from .schema import Schema

SPLITS = ("train", "valid", "test")


def read_split(path: str | Path, schema: Schema) -> dict[str, Tensor]:
    """Read one encoded split into contiguous tensors, one row group at a time."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"encoded split not found: {path} (run `autoint prepare` first)")
    pf = pq.ParquetFile(path)
    parts = [tensors_from_table(pf.read_row_group(i), schema) for i in range(pf.num_row_groups)]
    if not parts:
        return tensors_from_table(pf.schema_arrow.empty_table(), schema)
    return {k: torch.cat([p[k] for p in parts]) if len(parts) > 1 else parts[0][k] for k in parts[0]}


# ----------------------------------------------------------------------------- batches
class BatchLoader:
    """Iterates over index-sliced batches of in-memory tensors.

    Shuffling draws a fresh permutation each epoch from ``seed + epoch``, where
    ``epoch_fn`` reports the trainer's epoch, so a run resumed from a checkpoint
    sees exactly the batches an uninterrupted run would. Under data parallelism
    each global batch of ``batch_size`` rows is split across ``world_size``
    ranks, so the gradient averaged over ranks is that of the single-process
    batch. With ``pad=False`` (evaluation) ranks take disjoint strided shards and
    every row is scored exactly once.
    """

    def __init__(self, tensors: dict[str, Tensor], batch_size: int, shuffle: bool = False, seed: int = 0,
                 rank: int = 0, world_size: int = 1, epoch_fn: Callable[[], int] | None = None,
                 pad: bool = True) -> None:
        self.tensors = tensors
        self.num_rows = len(next(iter(tensors.values())))
        self.batch_size, self.shuffle, self.seed = batch_size, shuffle, seed
        self.rank, self.world_size = rank, world_size
        self.epoch_fn = epoch_fn or (lambda: 0)
        self.pad = pad

    def _indices(self) -> Tensor:
        if not self.shuffle:
            return torch.arange(self.num_rows)
        g = torch.Generator().manual_seed(self.seed + self.epoch_fn())
        return torch.randperm(self.num_rows, generator=g)

    def _batches(self) -> Iterator[Tensor]:
        order = self._indices()
        if self.world_size == 1:
            yield from order.split(self.batch_size)
        elif self.pad:  # training: each rank a strided share of every global batch, padded to equal size
            for idx in order.split(self.batch_size):
                per_rank = -(-len(idx) // self.world_size)
                if len(idx) < per_rank * self.world_size:
                    idx = torch.cat([idx, idx[: per_rank * self.world_size - len(idx)]])
                yield idx[self.rank :: self.world_size]
        else:  # evaluation: disjoint strided shards, every row exactly once
            yield from order[self.rank :: self.world_size].split(self.batch_size)

    def __iter__(self) -> Iterator[dict[str, Tensor]]:
        for idx in self._batches():
            yield {k: v[idx] for k, v in self.tensors.items()}

    def __len__(self) -> int:
        if self.world_size == 1 or self.pad:
            return -(-self.num_rows // self.batch_size)
        share = len(range(self.rank, self.num_rows, self.world_size))
        return -(-share // self.batch_size)


class CTRDataModule(L.LightningDataModule):
    """Train / valid / test splits of a processed folder, held as tensors in memory.

    Training batches are reshuffled every epoch; evaluation batches keep file order.
    """

    def __init__(self, folder: str | Path, batch_size: int = 1024, seed: int = 0,
                 eval_batch_size: int | None = None, test_split: str = "test") -> None:
        super().__init__()
        self.folder = Path(folder)
        schema_path = self.folder / "schema.json"
        if not schema_path.is_file():
            raise FileNotFoundError(f"{self.folder}: no schema.json; run `autoint prepare` to make this folder")
        self.schema = Schema.load(schema_path)
        self.batch_size, self.seed = batch_size, seed
        self.eval_batch_size = eval_batch_size or max(batch_size, 4096)
        if test_split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {test_split!r}")
        self.test_split = test_split  # what trainer.test scores: "test", or "valid" to evaluate on it
        self.splits: dict[str, dict[str, Tensor]] = {}

    def setup(self, stage: str | None = None) -> None:
        for split in SPLITS:
            if split not in self.splits and (self.folder / f"{split}.parquet").is_file():
                self.splits[split] = read_split(self.folder / f"{split}.parquet", self.schema)
        if "train" not in self.splits:
            raise FileNotFoundError(f"{self.folder}: no train.parquet")

    def _rank_world(self) -> tuple[int, int]:
        trainer = self.trainer
        return (trainer.global_rank, trainer.world_size) if trainer is not None else (0, 1)

    def _loader(self, split: str, train: bool) -> BatchLoader:
        if split not in self.splits:
            raise FileNotFoundError(f"{self.folder}: no {split}.parquet")
        rank, world = self._rank_world()
        epoch_fn = (lambda: self.trainer.current_epoch) if self.trainer is not None else None
        return BatchLoader(self.splits[split], self.batch_size if train else self.eval_batch_size,
                           shuffle=train, seed=self.seed, rank=rank, world_size=world,
                           epoch_fn=epoch_fn, pad=train)

    def train_dataloader(self) -> BatchLoader:
        return self._loader("train", train=True)

    def val_dataloader(self) -> BatchLoader:
        return self._loader("valid", train=False)

    def test_dataloader(self) -> BatchLoader:
        return self._loader(self.test_split, train=False)
