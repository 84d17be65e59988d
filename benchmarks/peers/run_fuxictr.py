"""FuxiCTR 2.3.10's AutoInt on a processed folder: training and inference samples/s, test AUC.

Run with the peer's own venv (``bash benchmarks/setup_peers.sh fuxictr``)::

    benchmarks/.peers/fuxictr/bin/python benchmarks/peers/run_fuxictr.py --data DIR --out result.json

The ``fuxictr`` wheel ships the library (``BaseModel``, ``FeatureMap``, the data
loaders and the layers) but not its model zoo, where AutoInt lives
(``model_zoo/AutoInt/src/AutoInt.py`` in the FuxiCTR repository). :class:`AutoInt`
below is assembled from the wheel's own layers the way the model zoo builds it:
``FeatureEmbedding`` → stacked multi-head self-attention blocks (``W_q``, ``W_k``,
``W_v`` projections, the wheel's ``ScaledDotProductAttention``, ``W_res`` only where
the width changes, ReLU) → ``Linear(fields x attention_dim, 1)`` → sigmoid, with
the optional ``MLP_Block`` (AutoInt+) and ``LogisticRegression`` (wide) terms off.

Idiomatic FuxiCTR: a ``feature_map.json`` loaded into ``FeatureMap``, the splits
as ``.npz`` files read by ``RankDataLoader(data_format="npz")`` (``NpzDataLoader``:
a torch ``DataLoader`` over rows of one stacked float64 array, one worker process,
a ``BatchCollator`` that slices columns back out), and ``model.fit(train_gen,
epochs, validation_data)``: per step forward, BCE, regularisation, backward,
gradient-norm clipping at 10 and Adam; validation and a checkpoint each epoch.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from common import (
    CATEGORICAL,
    MULTI,
    NUMERIC,
    Processed,
    StepClock,
    autocast_forward,
    count_parameters,
    load_processed,
    machine,
    peak_rss_mb,
    quality,
    runner_args,
    setup_torch,
    time_forward,
    write_result,
)
from torch import nn

INFER_ROWS = 200_000


def build_autoint(feature_map: Any, **params: Any) -> Any:
    """The model zoo's AutoInt, from the wheel's ``BaseModel`` and layers (see the module docstring)."""
    from fuxictr.pytorch.layers import FeatureEmbedding, LogisticRegression, MLP_Block, ScaledDotProductAttention
    from fuxictr.pytorch.models import BaseModel

    class SelfAttentionBlock(nn.Module):
        """One interacting layer as the model zoo writes it: heads share ``attention_dim``."""

        def __init__(self, input_dim: int, attention_dim: int, num_heads: int, dropout_rate: float = 0.0,
                     use_residual: bool = True, use_scale: bool = False, layer_norm: bool = False) -> None:
            super().__init__()
            if attention_dim % num_heads:
                raise ValueError(f"attention_dim={attention_dim} is not divisible by num_heads={num_heads}")
            self.head_dim, self.num_heads, self.use_residual = attention_dim // num_heads, num_heads, use_residual
            self.scale = self.head_dim**0.5 if use_scale else None
            self.W_q = nn.Linear(input_dim, attention_dim, bias=False)
            self.W_k = nn.Linear(input_dim, attention_dim, bias=False)
            self.W_v = nn.Linear(input_dim, attention_dim, bias=False)
            self.W_res = (nn.Linear(input_dim, attention_dim, bias=False)
                          if use_residual and input_dim != attention_dim else None)
            self.dot_attention = ScaledDotProductAttention(dropout_rate)
            self.layer_norm = nn.LayerNorm(attention_dim) if layer_norm else None

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            b = x.size(0)
            q, k, v = (w(x).view(b, -1, self.num_heads, self.head_dim).transpose(1, 2)
                       for w in (self.W_q, self.W_k, self.W_v))
            out, _ = self.dot_attention(q, k, v, scale=self.scale)
            out = out.transpose(1, 2).contiguous().view(b, -1, self.num_heads * self.head_dim)
            if self.use_residual:
                out = out + (self.W_res(x) if self.W_res is not None else x)
            if self.layer_norm is not None:
                out = self.layer_norm(out)
            return out.relu()

    class AutoInt(BaseModel):
        def __init__(self, feature_map: Any, model_id: str = "AutoInt", gpu: int = -1, learning_rate: float = 1e-3,
                     embedding_dim: int = 10, dnn_hidden_units: tuple[int, ...] = (), attention_layers: int = 2,
                     num_heads: int = 1, attention_dim: int = 8, net_dropout: float = 0.0, batch_norm: bool = False,
                     layer_norm: bool = False, use_scale: bool = False, use_wide: bool = False,
                     use_residual: bool = True, **kwargs: Any) -> None:
            super().__init__(feature_map, model_id=model_id, gpu=gpu, **kwargs)
            self.embedding_layer = FeatureEmbedding(feature_map, embedding_dim)
            self.lr_layer = LogisticRegression(feature_map, use_bias=False) if use_wide else None
            self.dnn = (MLP_Block(input_dim=feature_map.sum_emb_out_dim(), output_dim=1,
                                  hidden_units=list(dnn_hidden_units), hidden_activations="ReLU",
                                  output_activation=None, dropout_rates=net_dropout, batch_norm=batch_norm)
                        if dnn_hidden_units else None)
            self.self_attention = nn.Sequential(*[
                SelfAttentionBlock(embedding_dim if i == 0 else attention_dim, attention_dim, num_heads,
                                   net_dropout, use_residual, use_scale, layer_norm)
                for i in range(attention_layers)])
            self.fc = nn.Linear(feature_map.num_fields * attention_dim, 1)
            self.compile(kwargs["optimizer"], kwargs["loss"], learning_rate)
            self.reset_parameters()
            self.model_to_device()

        def forward(self, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
            x = self.get_inputs(inputs)
            emb = self.embedding_layer(x)  # (B, F, D)
            y = self.fc(self.self_attention(emb).flatten(start_dim=1))
            if self.dnn is not None:
                y = y + self.dnn(emb.flatten(start_dim=1))
            if self.lr_layer is not None:
                y = y + self.lr_layer(x)
            return {"y_pred": self.output_activation(y)}

    return AutoInt(feature_map, **params)


def feature_map_json(data: Processed, dataset_id: str) -> dict[str, Any]:
    """A FuxiCTR ``feature_map.json`` for the processed folder (ids keep their values; 0 is padding)."""
    features = []
    for f in data.fields:
        if f.kind == CATEGORICAL:
            spec = {"source": "", "type": "categorical", "vocab_size": f.vocab_size, "padding_idx": 0}
        elif f.kind == MULTI:
            spec = {"source": "", "type": "sequence", "vocab_size": f.vocab_size, "max_len": f.max_len,
                    "padding_idx": 0, "feature_encoder": "layers.MaskedAveragePooling()"}
        else:
            spec = {"source": "", "type": "numeric"}
        features.append({f.name: spec})
    return {"dataset_id": dataset_id, "num_fields": len(data.fields),
            "total_features": sum(f.vocab_size or 1 for f in data.fields),
            "input_length": sum(f.max_len for f in data.fields), "labels": [data.label], "features": features}


def write_npz(data: Processed, split: str, path: Path, rows: int | None = None) -> None:
    part = data.splits[split]
    n = len(part) if rows is None else min(rows, len(part))
    arrays = {name: col[:n] for name, col in part.columns.items()}
    arrays[data.label] = part.label[:n]
    np.savez(path, **arrays)


def main() -> int:
    args = runner_args(__doc__.splitlines()[0])
    setup_torch(args.threads, args.seed)
    logging.basicConfig(level=logging.WARNING)
    import fuxictr
    from fuxictr.features import FeatureMap
    from fuxictr.pytorch.dataloaders import RankDataLoader

    data = load_processed(args.data)
    work = args.work or args.out.parent / "fuxictr_work"
    dataset_id = "autoint_speed"
    data_dir = work / dataset_id
    data_dir.mkdir(parents=True, exist_ok=True)
    (data_dir / "feature_map.json").write_text(json.dumps(feature_map_json(data, dataset_id), indent=2))
    for split in ("train", "valid", "test"):
        write_npz(data, split, data_dir / f"{split}.npz")
    n_infer = min(len(data.splits["train"]), INFER_ROWS)
    write_npz(data, "train", data_dir / "infer.npz", n_infer)

    feature_map = FeatureMap(dataset_id, str(data_dir))
    feature_map.load(str(data_dir / "feature_map.json"), {"embedding_dim": args.embedding_dim})
    train_gen, valid_gen = RankDataLoader(
        feature_map, stage="train", train_data=str(data_dir / "train.npz"), valid_data=str(data_dir / "valid.npz"),
        batch_size=args.batch_size, shuffle=True, data_format="npz")

    attention_dim = args.num_heads * args.head_dim
    model = build_autoint(
        feature_map, model_id="AutoInt_speed", gpu=0 if args.device == "cuda" else -1, learning_rate=args.lr,
        embedding_dim=args.embedding_dim,
        dnn_hidden_units=(), attention_layers=args.num_layers, num_heads=args.num_heads,
        attention_dim=attention_dim, use_residual=True, use_scale=False, layer_norm=False, use_wide=False,
        optimizer="adam", loss="binary_crossentropy", metrics=["logloss", "AUC"], model_root=str(work / "models"),
        verbose=0, monitor="AUC", monitor_mode="max", early_stop_patience=args.epochs + 1,
        reduce_lr_on_plateau=False, save_best_only=False, embedding_regularizer=None, net_regularizer=None)
    precision = autocast_forward(model, args.bf16, args.device)
    Path(model.model_dir).mkdir(parents=True, exist_ok=True)  # FuxiCTR's run_expid.py makes it too

    # Validation runs inside the loop, after the epoch's last step: its time is left out.
    clock = StepClock()
    model.eval_step = clock.exclude(model.eval_step)
    timed_train = clock.wrap_loader(train_gen, size=lambda b: len(b[data.label]))
    started = time.perf_counter()
    model.fit(timed_train, epochs=args.epochs, validation_data=valid_gen)
    fit_seconds = time.perf_counter() - started

    # Inference: forward on batches exactly as FuxiCTR's loader yields them, collected first.
    infer_gen = RankDataLoader(feature_map, stage="test", test_data=str(data_dir / "infer.npz"),
                               batch_size=args.infer_batch_size, shuffle=False, data_format="npz")
    batches = [(b, len(b[data.label])) for b in infer_gen]
    model.eval()
    forward = time_forward(model, batches)
    predict_batch = args.predict_batch_size or args.infer_batch_size
    predict_gen = RankDataLoader(feature_map, stage="test", test_data=str(data_dir / "infer.npz"),
                                 batch_size=predict_batch, shuffle=False, data_format="npz")
    start = time.perf_counter()
    model.predict(predict_gen)
    predict_s = time.perf_counter() - start

    test_probs = model.predict(RankDataLoader(feature_map, stage="test", test_data=str(data_dir / "test.npz"),
                                              batch_size=predict_batch, shuffle=False,
                                              data_format="npz"))
    test_labels = data.splits["test"].label
    result = {
        "library": "fuxictr",
        "precision": precision,
        "device": args.device,
        "version": fuxictr.__version__,
        "model": "AutoInt assembled from the fuxictr wheel's layers as model_zoo/AutoInt builds it",
        "widths": {"embedding_dim": args.embedding_dim, "num_layers": args.num_layers, "num_heads": args.num_heads,
                   "head_dim": attention_dim // args.num_heads, "attention_out_per_field": attention_dim,
                   "batch_size": args.batch_size},
        "mismatches": [
            "W_res only where the width changes (layer 1, 16 -> 64); layers 2.. use an identity residual",
            "multi-valued fields: sequence features pooled by MaskedAveragePooling (padding rows are zero)"
            if data.of_kind(MULTI) else "",
            "numeric fields: Linear(1, D, bias=False), i.e. v * x as in the paper" if data.of_kind(NUMERIC) else "",
        ],
        "loop": "BaseModel.fit(verbose=0) over NpzDataLoader (torch DataLoader, per-row indexing, 1 worker "
                "process, BatchCollator); per step forward, BCE, regulariser, backward, clip_grad_norm(10), "
                "Adam; validation + checkpoint each epoch; best/last weights reloaded at the end",
        "epochs": args.epochs,
        "rows": {s: len(v) for s, v in data.splits.items()},
        "fields": len(data.fields),
        "parameters": count_parameters(model, lambda name: name.startswith("embedding_layer")),
        "train": {**clock.summary(), "fit_seconds": round(fit_seconds, 2)},
        "infer_forward": forward,
        "infer_predict": {"samples_per_s": n_infer / predict_s, "rows": n_infer, "batch_size": predict_batch,
                          "api": "model.predict(RankDataLoader(..., batch_size))"},
        "test": quality(test_labels, test_probs),
        "peak_rss_mb": round(peak_rss_mb(), 1),
        "machine": machine(),
    }
    result["mismatches"] = [m for m in result["mismatches"] if m]
    write_result(args.out, result)
    print(f"fuxictr: train {result['train']['samples_per_s']:.0f}/s, forward {forward['samples_per_s']:.0f}/s, "
          f"test AUC {result['test']['auc']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
