"""torch-rechub 0.9.0's AutoInt on a processed folder: training and inference samples/s, test AUC.

Run with the peer's own venv (``bash benchmarks/setup_peers.sh rechub``)::

    benchmarks/.peers/rechub/bin/python benchmarks/peers/run_rechub.py --data DIR --out result.json

Idiomatic torch-rechub: ``SparseFeature`` / ``SequenceFeature`` (mean pooling,
``padding_idx=0``) / ``DenseFeature`` columns, ``DataGenerator(x, y)
.generate_dataloader(x_val, y_val, x_test, y_test, batch_size)`` (torch
``DataLoader`` over a ``TorchDataset`` whose items are per-row dicts, collated by
torch's default collate) and ``CTRTrainer(model, optimizer_params, n_epoch,
earlystop_patience).fit(train_dl, val_dl)``: per step forward, ``BCELoss``, its
regularisation loss, backward and Adam; a tqdm bar and validation AUC each epoch.

Widths the API cannot match (see benchmarks/peers/README.md): a head's width is
tied to the embedding size (``D / heads``), attention is always scaled by
1/sqrt(d), and the model always adds a linear (LR) term over the flattened
embeddings.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch
from common import (
    CATEGORICAL,
    MULTI,
    NUMERIC,
    StepClock,
    autocast_forward,
    batches_of,
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

INFER_ROWS = 200_000


def main() -> int:
    args = runner_args(__doc__.splitlines()[0])
    if args.device != "cpu":  # its forward takes CPU tensors as this runner builds them: not wired for a GPU
        raise SystemExit(f"run_rechub.py: --device {args.device} is not supported; of the peers only "
                         "run_fuxictr.py runs on a GPU")
    setup_torch(args.threads, args.seed)
    import torch_rechub
    from torch_rechub.basic.features import DenseFeature, SequenceFeature, SparseFeature
    from torch_rechub.models.ranking import AutoInt
    from torch_rechub.trainers import CTRTrainer
    from torch_rechub.utils.data import DataGenerator

    data = load_processed(args.data)
    sparse: list[Any] = []
    dense: list[Any] = []
    for f in data.fields:
        if f.kind == CATEGORICAL:
            sparse.append(SparseFeature(f.name, vocab_size=f.vocab_size, embed_dim=args.embedding_dim))
        elif f.kind == MULTI:
            sparse.append(SequenceFeature(f.name, vocab_size=f.vocab_size, embed_dim=args.embedding_dim,
                                          pooling="mean", padding_idx=0))
        else:
            dense.append(DenseFeature(f.name))

    def x_of(split: str, rows: int | None = None) -> dict[str, np.ndarray]:
        cols = data.splits[split].columns
        return {name: col[:rows] if rows else col for name, col in cols.items()}

    splits = data.splits
    train_dl, val_dl, test_dl = DataGenerator(x_of("train"), splits["train"].label).generate_dataloader(
        x_val=x_of("valid"), y_val=splits["valid"].label, x_test=x_of("test"), y_test=splits["test"].label,
        batch_size=args.batch_size)

    model = AutoInt(sparse_features=sparse, dense_features=dense, num_layers=args.num_layers,
                    num_heads=args.num_heads, dropout=0.0, mlp_params=None)
    precision = autocast_forward(model, args.bf16)
    work = args.work or args.out.parent / "rechub_work"
    work.mkdir(parents=True, exist_ok=True)
    trainer = CTRTrainer(model, optimizer_params={"lr": args.lr, "weight_decay": 0.0}, n_epoch=args.epochs,
                         earlystop_patience=args.epochs + 1, device="cpu", model_path=str(work))

    clock = StepClock()
    timed_train = clock.wrap_loader(train_dl, size=lambda b: len(b[1]))
    started = time.perf_counter()
    trainer.fit(timed_train, val_dl)
    fit_seconds = time.perf_counter() - started

    # Inference: forward on pre-built batches in rechub's input format (a dict of column tensors).
    train = splits["train"]
    n = min(len(train), INFER_ROWS)
    tensors = {name: torch.from_numpy(col[:n]) for name, col in train.columns.items()}
    batches = [({k: v[s] for k, v in tensors.items()}, s.stop - s.start) for s in batches_of(n, args.infer_batch_size)]
    model.eval()
    forward = time_forward(model, batches)
    _, _, infer_dl = DataGenerator(x_of("train", n), train.label[:n]).generate_dataloader(
        x_val=x_of("valid"), y_val=splits["valid"].label, x_test=x_of("train", n), y_test=train.label[:n],
        batch_size=args.predict_batch_size or args.infer_batch_size)
    start = time.perf_counter()
    trainer.predict(model, infer_dl)
    predict_s = time.perf_counter() - start

    test_dl = DataGenerator(x_of("test"), splits["test"].label).generate_dataloader(
        x_val=x_of("valid"), y_val=splits["valid"].label, x_test=x_of("test"), y_test=splits["test"].label,
        batch_size=args.predict_batch_size or args.infer_batch_size)[2]
    probs = np.asarray(trainer.predict(model, test_dl), dtype=np.float64)
    result = {
        "library": "torch-rechub",
        "precision": precision,
        "version": getattr(torch_rechub, "__version__", "0.9.0"),
        "model": "torch_rechub.models.ranking.AutoInt",
        "widths": {"embedding_dim": args.embedding_dim, "num_layers": args.num_layers, "num_heads": args.num_heads,
                   "head_dim": args.embedding_dim // args.num_heads,
                   "attention_out_per_field": args.embedding_dim, "batch_size": args.batch_size},
        "mismatches": [
            f"head width tied to the embedding size: {args.num_heads} heads x {args.embedding_dim // args.num_heads}"
            f" (asked {args.num_heads} x {args.head_dim})",
            "attention always scaled by 1/sqrt(d); a linear (LR) term over the flattened embeddings is always added",
            "multi-valued fields: SequenceFeature, mean pooling, mask = id != padding_idx (0)"
            if data.of_kind(MULTI) else "",
            "numeric fields: Linear(1, D, bias=False), i.e. v * x as in the paper" if data.of_kind(NUMERIC) else "",
        ],
        "loop": "CTRTrainer.fit: DataLoader over per-row dict items (default collate); per step forward, BCELoss, "
                "regularisation loss, backward, Adam; tqdm bar; validation AUC each epoch",
        "epochs": args.epochs,
        "rows": {s: len(v) for s, v in splits.items()},
        "fields": len(data.fields),
        "parameters": count_parameters(model, lambda name: "embed" in name.split(".")[0]),
        "train": {**clock.summary(), "fit_seconds": round(fit_seconds, 2)},
        "infer_forward": forward,
        "infer_predict": {"samples_per_s": n / predict_s, "rows": n,
                          "batch_size": args.predict_batch_size or args.infer_batch_size,
                          "api": "CTRTrainer.predict(model, dataloader)"},
        "test": quality(splits["test"].label, probs),
        "peak_rss_mb": round(peak_rss_mb(), 1),
        "machine": machine(),
    }
    result["mismatches"] = [m for m in result["mismatches"] if m]
    write_result(args.out, result)
    print(f"rechub: train {result['train']['samples_per_s']:.0f}/s, forward {forward['samples_per_s']:.0f}/s, "
          f"test AUC {result['test']['auc']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
