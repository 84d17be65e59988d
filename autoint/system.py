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

from typing import Any

import lightning as L
import torch
import torch.nn.functional as F
from torch import Tensor
from torchmetrics import MeanMetric
from torchmetrics.classification import BinaryAUROC

from .checkpoint import CHECKPOINT_KEY, PRECISION_KEY
from .config import Config, TrainConfig, config_from_dict
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
        self.model = AutoInt(self.schema, self.cfg.model)
        self.metrics = torch.nn.ModuleDict({
            split: torch.nn.ModuleDict({"auc": BinaryAUROC(), "logloss": MeanMetric()}) for split in ("val", "test")
        })

    def setup(self, stage: str) -> None:
        if torch.are_deterministic_algorithms_enabled():
            # Deterministic kernels are what reproducibility needs; filling every fresh
            # tensor with NaN (on by default with them) only costs 10-15 % of a step.
            torch.utils.deterministic.fill_uninitialized_memory = False

    # -- forward and loss -------------------------------------------------------
    def forward(self, batch: dict[str, Tensor]) -> Tensor:
        return self.model(batch)

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        logits = self.model(batch)
        loss = F.binary_cross_entropy_with_logits(logits.float(), batch["label"])
        # The epoch value is the batch-size-weighted mean over every batch (and rank),
        # visible to callbacks in on_train_epoch_end.
        self.log("train_loss", loss, prog_bar=True, on_step=True, on_epoch=True, batch_size=len(logits),
                 sync_dist=True)
        return loss

    def on_train_epoch_start(self) -> None:
        # Dropout draws from a stream fixed by (seed, epoch), so a resumed run replays it.
        torch.manual_seed(self.cfg.train.seed * 1000 + self.current_epoch)

    def _eval_step(self, split: str, batch: dict[str, Tensor]) -> None:
        logits = self.model(batch).float()
        labels = batch["label"]
        metrics = self.metrics[split]
        metrics["auc"].update(torch.sigmoid(logits), labels.long())
        metrics["logloss"].update(F.binary_cross_entropy_with_logits(logits, labels, reduction="none"))

    def _eval_epoch_end(self, split: str) -> None:
        metrics = self.metrics[split]
        self.log(f"{split}_auc", metrics["auc"].compute(), prog_bar=True)
        self.log(f"{split}_logloss", metrics["logloss"].compute(), prog_bar=split == "val")
        for m in metrics.values():
            m.reset()

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        self._eval_step("val", batch)

    def on_validation_epoch_end(self) -> None:
        self._eval_epoch_end("val")

    def test_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        self._eval_step("test", batch)

    def on_test_epoch_end(self) -> None:
        self._eval_epoch_end("test")

    def predict_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        return torch.sigmoid(self.model(batch).float())

    # -- optimiser --------------------------------------------------------------
    def configure_optimizers(self) -> torch.optim.Optimizer:
        return make_optimizer(self.model, self.cfg.train)

    # -- self-describing checkpoints -------------------------------------------
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint[CHECKPOINT_KEY] = {
            "config": self.cfg.to_dict(),
            "schema": self.schema.to_dict(),
            "encoder": self.encoder_state,
            PRECISION_KEY: str(self.trainer.precision),  # "auto" resolved on the training host, for reports
        }

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self.encoder_state = checkpoint.get(CHECKPOINT_KEY, {}).get("encoder", self.encoder_state)


def make_optimizer(model: AutoInt, train: TrainConfig) -> torch.optim.Optimizer:
    """``train.optimizer``: "adam" (dense Adam over every parameter) or "sparse_adam"
    (:class:`DenseSparseAdam`: the embedding tables switch to sparse gradients; their
    ``embedding_weight_decay`` applies to the looked-up rows only)."""
    if train.optimizer == "adam":
        return torch.optim.Adam([
            {"params": model.dense_parameters(), "weight_decay": train.weight_decay},
            {"params": model.embedding_parameters(), "weight_decay": train.embedding_weight_decay},
        ], lr=train.lr)
    tables = model.embedding_tables()
    for table in tables:
        table.sparse = True
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
