"""The training system: an AutoInt model plus loss, metrics and optimiser.

Kept apart from :mod:`autoint.model` (which only maps a batch to logits).
Metrics are computed over a whole split, not averaged over batches: AUC from
every prediction, logloss as the mean of every row's binary cross-entropy;
under data parallelism torchmetrics gathers them across ranks first.

A checkpoint carries what is needed to rebuild and use the model with nothing
else: the resolved config, the schema, the encoder state (vocabularies and
numeric transforms) and the precision Lightning trained in under ``checkpoint["autoint"]``.
:func:`autoint.checkpoint.load_checkpoint` reads it back with torch alone.
"""

from __future__ import annotations

import contextlib
import ctypes
import warnings
from typing import Any

import lightning as L
import torch
import torch.nn.functional as F
from torch import Tensor
from torchmetrics import MeanMetric, SumMetric
from torchmetrics.classification import BinaryAUROC

from .checkpoint import CHECKPOINT_KEY, PRECISION_KEY
from .config import Config, ConfigError, TrainConfig, config_from_dict
from .model import AutoInt
from .schema import Schema


class CTRSystem(L.LightningModule):
    """Binary cross-entropy on logits, Adam, AUC and logloss on valid and test."""

    def __init__(self, config: dict[str, Any], schema: dict[str, Any], encoder: dict[str, Any] | None = None) -> None:
        super().__init__()
        # Config and schema are small and go in hparams; the encoder can hold
        # millions of vocabulary entries, so it travels in the checkpoint only.
        self.save_hyperparameters({"config": config, "schema": schema})
        self.cfg: Config = config_from_dict(config)
        self.schema = Schema.from_dict(schema)
        self.encoder_state = encoder
        self.data_identity: dict[str, Any] | None = None  # of the processed folder (train.data_identity)
        self.model = AutoInt(self.schema, self.cfg.model)
        self.test_in_fp32 = False  # set by train: its test pass ignores the training precision's autocast
        self.metrics = torch.nn.ModuleDict({
            split: torch.nn.ModuleDict({"auc": BinaryAUROC(), "logloss": MeanMetric(), "clicks": SumMetric(),
                                        "rows": SumMetric()}) for split in ("val", "test")
        })

    def setup(self, stage: str) -> None:
        # Before the strategy wraps the model: DDP decides at wrapping time which parameters get
        # sparse gradients, so the tables must be sparse (or not) by now.
        backend = torch.distributed.get_backend() if torch.distributed.is_initialized() else None
        self.optimizer_name = resolve_optimizer(self.cfg.train, self.model, backend)
        for table in self.model.embedding_tables():
            table.sparse = self.optimizer_name == "sparse_adam"
        # The device the strategy will move the model to (this hook runs before the move).
        device = self.trainer.strategy.root_device.type
        self.rows_per_pass = rows_per_pass(self.cfg, self.model, device)
        self.train_rows_per_pass = rows_per_pass(self.cfg, self.model, device, training=True)
        if device == "cpu" and self.cfg.train.keep_freed_memory:
            keep_freed_memory()
        if torch.are_deterministic_algorithms_enabled():
            # Deterministic kernels are what reproducibility needs; filling every fresh
            # tensor with NaN (on by default with them) only costs 10-15 % of a step.
            torch.utils.deterministic.fill_uninitialized_memory = False

    # -- forward and loss -------------------------------------------------------
    def forward(self, batch: dict[str, Tensor]) -> Tensor:
        return self.model(batch)

    def in_pieces(self, batch: dict[str, Tensor], training: bool = False) -> Tensor:
        """The model's logits for ``batch``, run ``train.forward_rows`` rows at a time (see
        :func:`rows_per_pass`); the same logits (and gradients) as one pass over the batch."""
        rows = getattr(self, "train_rows_per_pass" if training else "rows_per_pass", None)
        if training and self.model.dnn is not None and self.cfg.model.dnn_batch_norm:
            rows = None  # batch statistics are the whole batch's
        n = len(next(iter(batch.values())))
        if rows is None or rows >= n:
            return self.model(batch)
        return torch.cat([self.model({k: v[s : s + rows] for k, v in batch.items()}) for s in range(0, n, rows)])

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        logits = self.in_pieces(batch, training=True)
        loss = F.binary_cross_entropy_with_logits(logits.float(), batch["label"])
        # The epoch value is the batch-size-weighted mean over every batch (and rank),
        # visible to callbacks in on_train_epoch_end.
        self.log("train_loss", loss, prog_bar=True, on_step=True, on_epoch=True, batch_size=len(logits),
                 sync_dist=True)
        return loss

    def on_train_start(self) -> None:
        # Training sees the plain logit: a run resumed from a calibrated best.ckpt (its last.ckpt lost) must not
        # train through that Platt pair, which is fitted again once training ends (autoint.calibration).
        self.model.logit_calibration.copy_(torch.tensor([1.0, 0.0]))

    def on_train_epoch_start(self) -> None:
        # Dropout draws from a stream fixed by (seed, epoch), so a resumed run replays it.
        torch.manual_seed(self.cfg.train.seed * 1000 + self.current_epoch)

    def _eval_step(self, split: str, batch: dict[str, Tensor]) -> None:
        logits = self.in_pieces(batch).float()
        labels = batch["label"]
        metrics = self.metrics[split]
        metrics["auc"].update(torch.sigmoid(logits), labels.long())
        metrics["logloss"].update(F.binary_cross_entropy_with_logits(logits, labels, reduction="none"))
        metrics["clicks"].update(labels.sum())
        metrics["rows"].update(torch.tensor(float(len(labels)), device=labels.device))

    def _eval_epoch_end(self, split: str) -> None:
        metrics = self.metrics[split]
        clicks, rows = float(metrics["clicks"].compute()), float(metrics["rows"].compute())
        # AUC ranks clicks above non-clicks: undefined on rows of one class (torchmetrics gave 0.0, with a warning
        # few read, and best.ckpt and early stopping followed it)
        auc = metrics["auc"].compute() if 0 < clicks < rows else torch.tensor(float("nan"), device=self.device)
        self.log(f"{split}_auc", auc, prog_bar=True)
        self.log(f"{split}_logloss", metrics["logloss"].compute(), prog_bar=split == "val")
        for m in metrics.values():
            m.reset()

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        self._eval_step("val", batch)

    def on_validation_epoch_end(self) -> None:
        self._eval_epoch_end("val")

    def test_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        # train tests in fp32 whatever it trained in, so its figures are those evaluate, predict and serve give
        with torch.autocast(self.device.type, enabled=False) if self.test_in_fp32 else contextlib.nullcontext():
            self._eval_step("test", batch)

    def on_test_epoch_end(self) -> None:
        self._eval_epoch_end("test")

    def predict_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        return torch.sigmoid(self.in_pieces(batch).float())

    # -- optimiser --------------------------------------------------------------
    def configure_optimizers(self) -> torch.optim.Optimizer:
        name = getattr(self, "optimizer_name", None) or resolve_optimizer(self.cfg.train, self.model)
        return make_optimizer(self.model, self.cfg.train, name)

    # -- self-describing checkpoints -------------------------------------------
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint[CHECKPOINT_KEY] = {
            "config": self.cfg.to_dict(),
            "schema": self.schema.to_dict(),
            "encoder": self.encoder_state,
            PRECISION_KEY: str(self.trainer.precision),  # "auto" resolved on the training host, for reports
        }
        if self.data_identity is not None:
            checkpoint[CHECKPOINT_KEY]["data"] = self.data_identity

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self.encoder_state = checkpoint.get(CHECKPOINT_KEY, {}).get("encoder", self.encoder_state)


# Under "auto", a training batch goes in pieces only when it holds more than this many times the
# rows of one pass: below that, the pieces' extra backward work cost more than the cache saved
# (MovieLens at the paper's widths, batch 1024: 26.0k samples/s in pieces of 128 against 36.0k whole). Above
# it they no longer pay at batch 1024 either on the Xeon measured once freed memory is kept (the Criteo head:
# 8.0k in 8 pieces of 128, 8.2k whole, within the noise; benchmarks/results/pieces_xeon*.json); 4 stays
# because larger batches, where pieces bound the activations' memory, were not measured.
TRAIN_PIECES_FROM = 4


# glibc's malloc gives a freed block of over 128 KB back to the system (munmap, or trimming the heap's top), so a
# training step's large activations (the paper's MovieLens model at batch 1024: 9.4 MB per layer's projection) can
# be page-faulted in afresh at every step, as often as the process's history has moved glibc's own thresholds
# (README, Speed: benchmarks/results/heap_movielens_*.json). keep_freed_memory raises both thresholds, and the heap
# keeps the blocks for the next step.
HEAP_MMAP_BYTES = 256 * 2**20  # blocks up to this size come from the heap (M_MMAP_THRESHOLD)
HEAP_MMAP_BYTES_CAPPED = 32 * 2**20  # the most that glibc releases capping M_MMAP_THRESHOLD accept
HEAP_TRIM_BYTES = 512 * 2**20  # the heap gives memory back once this much is free at its top (M_TRIM_THRESHOLD)


def keep_freed_memory() -> bool:
    """Have the C heap keep freed blocks (up to :data:`HEAP_MMAP_BYTES` each, :data:`HEAP_TRIM_BYTES` in all) for the
    process to reuse, instead of returning them to the system at once: glibc's ``mallopt``, for the rest of the
    process. ``train.keep_freed_memory`` (default on) calls it when training or testing on a CPU. False where the C
    library has no ``mallopt`` (macOS, Windows) or refuses the values; nothing changes there."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError, TypeError):  # no C library by that name, or no mallopt in it
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    m_trim_threshold, m_mmap_threshold = -1, -3  # malloc.h
    # glibc releases that cap the threshold refuse more (0): they keep the blocks below the cap
    mmap = mallopt(m_mmap_threshold, HEAP_MMAP_BYTES) or mallopt(m_mmap_threshold, HEAP_MMAP_BYTES_CAPPED)
    return bool(mmap) and bool(mallopt(m_trim_threshold, HEAP_TRIM_BYTES))


def rows_per_pass(cfg: Config, model: AutoInt, device_type: str, training: bool = False) -> int | None:
    """``train.forward_rows`` as it runs: rows per forward pass, or None for the whole batch.

    "auto" is :meth:`AutoInt.rows_per_pass` on a CPU (pieces whose activations fit in
    cache: faster there, the same results) and the whole batch on an accelerator; for
    training, the whole batch as well unless it holds more than :data:`TRAIN_PIECES_FROM`
    pieces.
    """
    rows = cfg.train.forward_rows
    if rows != "auto":
        return int(rows)
    if device_type != "cpu":
        return None
    rows = model.rows_per_pass()
    return None if training and cfg.train.batch_size <= TRAIN_PIECES_FROM * rows else rows


# ``train.optimizer: auto`` takes sparse_adam from this many embedding-table rows on (every table
# of the model, the wide term's too). Dense Adam reads and writes every row, with both moments,
# at every step; sparse_adam only the rows a batch looked up. Measured with the paper's Criteo
# model at batch 1024 (benchmarks/train_scale.py, part "vocab"; README, Training at scale).
AUTO_SPARSE_ROWS = 500_000


def resolve_optimizer(train: TrainConfig, model: AutoInt, backend: str | None = None) -> str:
    """``train.optimizer`` as it runs: "adam" or "sparse_adam".

    "auto" is sparse_adam when the model's tables hold at least :data:`AUTO_SPARSE_ROWS` rows,
    else adam. ``backend`` is the process group's (None in one process): sparse gradients are
    all-reduced by gloo (CPU); on another backend "auto" stays dense and an explicit
    sparse_adam is refused, naming the setting.
    """
    if train.optimizer != "auto":
        if train.optimizer == "sparse_adam" and backend not in (None, "gloo"):
            raise ConfigError(f"train.optimizer: sparse_adam needs sparse all-reduce, which autoint runs on the "
                              f"gloo process group (CPU) only, not {backend!r}; use adam (or auto) here")
        return train.optimizer
    rows = sum(t.num_embeddings for t in model.embedding_tables())
    return "sparse_adam" if rows >= AUTO_SPARSE_ROWS and backend in (None, "gloo") else "adam"


def make_optimizer(model: AutoInt, train: TrainConfig, name: str | None = None) -> torch.optim.Optimizer:
    """The optimizer ``name`` (default: ``train.optimizer`` resolved by :func:`resolve_optimizer`):
    "adam" (dense Adam over every parameter) or "sparse_adam" (:class:`DenseSparseAdam`: the
    embedding tables switch to sparse gradients; their ``embedding_weight_decay`` applies to the
    looked-up rows only)."""
    name = name or resolve_optimizer(train, model)
    tables = model.embedding_tables()
    for table in tables:
        table.sparse = name == "sparse_adam"
    if name == "adam":
        return torch.optim.Adam([
            {"params": model.dense_parameters(), "weight_decay": train.weight_decay},
            {"params": model.embedding_parameters(), "weight_decay": train.embedding_weight_decay},
        ], lr=train.lr)
    sparse = [t.weight for t in tables]
    ids = {id(p) for p in sparse}
    rest = [p for p in model.embedding_parameters() if id(p) not in ids]  # the numeric fields' vectors
    return DenseSparseAdam([{"params": model.dense_parameters(), "weight_decay": train.weight_decay},
                            {"params": rest, "weight_decay": train.embedding_weight_decay}], sparse, train.lr,
                           sparse_weight_decay=train.embedding_weight_decay)


class DenseSparseAdam(torch.optim.Optimizer):
    """Adam for the dense parameters and SparseAdam for the embedding tables, as one optimizer.

    The tables produce sparse gradients (``nn.Embedding(sparse=True)``), so a step
    reads and writes only the rows the batch looked up, with their moments:
    lazy Adam (Kingma & Ba's update applied to the touched rows only). Lightning's
    automatic optimisation takes one optimizer, hence the pair behind one object.
    """

    def __init__(self, dense_groups: list[dict[str, Any]], sparse_params: list[torch.nn.Parameter],
                 lr: float, sparse_weight_decay: float = 0.0) -> None:
        self.dense = torch.optim.Adam(dense_groups, lr=lr)
        self.sparse = torch.optim.SparseAdam(sparse_params, lr=lr)
        self.sparse_weight_decay = sparse_weight_decay
        super().__init__([*dense_groups, {"params": sparse_params}], {"lr": lr})
        # The inner optimizers' own groups, so a changed learning rate reaches them.
        self.param_groups = self.dense.param_groups + self.sparse.param_groups

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self.dense.step()
        if self.sparse_weight_decay:  # L2 on the rows the batch looked up, as dense Adam's decay does on all rows
            for p in self.sparse.param_groups[0]["params"]:
                if p.grad is not None:
                    g = p.grad.coalesce()
                    rows = g.indices()[0]
                    with warnings.catch_warnings():  # skipped on purpose (coalesced above), which torch 2.11 warned of
                        warnings.filterwarnings("ignore", message="Sparse invariant checks are implicitly disabled")
                        p.grad = torch.sparse_coo_tensor(g.indices(), g.values() + self.sparse_weight_decay * p[rows],
                                                         g.shape, is_coalesced=True, check_invariants=False)
        self.sparse.step()
        return loss

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.dense.zero_grad(set_to_none)
        self.sparse.zero_grad(set_to_none)

    def state_dict(self) -> dict[str, Any]:
        return {"dense": self.dense.state_dict(), "sparse": self.sparse.state_dict()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.dense.load_state_dict(state_dict["dense"])
        self.sparse.load_state_dict(state_dict["sparse"])
