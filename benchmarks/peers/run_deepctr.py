"""DeepCTR-Torch 0.3.0's AutoInt on a processed folder: training and inference samples/s, test AUC.

Run with the peer's own venv (``bash benchmarks/setup_peers.sh deepctr``)::

    benchmarks/.peers/deepctr/bin/python benchmarks/peers/run_deepctr.py --data DIR --out result.json

Idiomatic DeepCTR-Torch: feature columns (``SparseFeat``, ``DenseFeat``,
``VarLenSparseFeat`` with the ``mean`` combiner), ``model.compile("adam",
"binary_crossentropy")`` and ``model.fit(x, y, batch_size, epochs,
validation_data)``, which concatenates every input into one float tensor, wraps it
in a ``TensorDataset`` and a shuffling ``DataLoader`` (per-row indexing and
collation), and per step runs forward, its regularisation loss, backward and Adam.
``verbose=0`` keeps its per-batch sklearn metrics off (they only run when verbose).

Widths the API cannot match (see benchmarks/peers/README.md): a head's width is
tied to the embedding size (``D / heads``, so 2 heads x 8 and an output of 16 per
field, against 2 x 32 = 64), and numeric fields are not embedded into the
attention: without a DNN they reach the logit only through the linear part.
Its forward cannot run under bf16 autocast (``--bf16``): its attention layer's
``torch.tensordot`` is not an autocast op, so bf16 activations meet fp32 weights
("both inputs should have same dtype").
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
        raise SystemExit(f"run_deepctr.py: --device {args.device} is not supported; of the peers only "
                         "run_fuxictr.py runs on a GPU")
    setup_torch(args.threads, args.seed)
    import deepctr_torch
    import deepctr_torch.models.basemodel as basemodel
    from deepctr_torch.inputs import DenseFeat, SparseFeat, VarLenSparseFeat, get_feature_names
    from deepctr_torch.models import AutoInt

    data = load_processed(args.data)
    columns: list[Any] = []
    for f in data.fields:
        if f.kind == CATEGORICAL:
            columns.append(SparseFeat(f.name, f.vocab_size, embedding_dim=args.embedding_dim))
        elif f.kind == MULTI:
            columns.append(VarLenSparseFeat(SparseFeat(f.name, f.vocab_size, embedding_dim=args.embedding_dim),
                                            maxlen=f.max_len, combiner="mean"))
        else:
            columns.append(DenseFeat(f.name, 1))
    dense = [c for c in columns if isinstance(c, DenseFeat)]
    names = get_feature_names(columns)

    def inputs(split: str) -> dict[str, np.ndarray]:
        return {n: data.splits[split].columns[n] for n in names}

    model = AutoInt(linear_feature_columns=dense, dnn_feature_columns=columns, att_layer_num=args.num_layers,
                    att_head_num=args.num_heads, att_res=True, dnn_hidden_units=(), l2_reg_embedding=0.0,
                    seed=args.seed, device="cpu")
    precision = autocast_forward(model, args.bf16)
    model.compile(torch.optim.Adam(model.parameters(), lr=args.lr), "binary_crossentropy",
                  metrics=["binary_crossentropy", "auc"])

    # fit() builds its training DataLoader itself (shuffle=True; predict's loaders do not
    # shuffle): wrap that one so each batch handed to the loop stamps the clock.
    clock = StepClock()
    make_loader = basemodel.DataLoader

    def timed_loader(*a: Any, **kw: Any) -> Any:
        loader = make_loader(*a, **kw)
        return clock.wrap_loader(loader, size=lambda b: len(b[1])) if kw.get("shuffle") else loader

    basemodel.DataLoader = timed_loader
    train, valid = data.splits["train"], data.splits["valid"]
    started = time.perf_counter()
    model.fit(inputs("train"), train.label, batch_size=args.batch_size, epochs=args.epochs, verbose=0,
              validation_data=(inputs("valid"), valid.label), shuffle=True)
    fit_seconds = time.perf_counter() - started
    basemodel.DataLoader = make_loader
    history = {k: [float(x) for x in v] for k, v in model.history.history.items()}

    # Inference: forward on pre-built batches in DeepCTR's input format (one float tensor,
    # columns in the model's feature_index order, as fit and predict lay them out).
    n = min(len(train), INFER_ROWS)
    order = list(model.feature_index)
    flat = np.concatenate([np.asarray(train.columns[c]).reshape(len(train), -1)[:n] for c in order], axis=1)
    flat_t = torch.from_numpy(flat.astype(np.float32))
    batches = [(flat_t[s], s.stop - s.start) for s in batches_of(n, args.infer_batch_size)]
    model.eval()
    forward = time_forward(model, batches)
    head = {c: train.columns[c][:n] for c in names}
    start = time.perf_counter()
    model.predict(head, batch_size=args.predict_batch_size or args.infer_batch_size)
    predict_s = time.perf_counter() - start

    test = data.splits["test"]
    probs = model.predict(inputs("test"), batch_size=args.predict_batch_size or args.infer_batch_size).ravel()
    result = {
        "library": "deepctr-torch",
        "precision": precision,
        "version": deepctr_torch.__version__,
        "model": "deepctr_torch.models.AutoInt",
        "widths": {"embedding_dim": args.embedding_dim, "num_layers": args.num_layers, "num_heads": args.num_heads,
                   "head_dim": args.embedding_dim // args.num_heads,
                   "attention_out_per_field": args.embedding_dim, "batch_size": args.batch_size},
        "mismatches": [
            f"head width tied to the embedding size: {args.num_heads} heads x {args.embedding_dim // args.num_heads}"
            f" (asked {args.num_heads} x {args.head_dim})",
            "numeric fields are not attention fields: they enter through the linear part only"
            if data.of_kind(NUMERIC) else "",
            "multi-valued fields: VarLenSparseFeat, mean combiner, mask = id != 0",
        ],
        "loop": "model.fit(verbose=0): TensorDataset + DataLoader(shuffle) over one concatenated float tensor; "
                "per step forward, BCE (sum), regularisation loss, backward, Adam; validation each epoch",
        "epochs": args.epochs,
        "rows": {s: len(v) for s, v in data.splits.items()},
        "fields": len(data.fields),
        "parameters": count_parameters(model, lambda name: "embedding_dict" in name),
        "train": {**clock.summary(), "fit_seconds": round(fit_seconds, 2)},
        "infer_forward": forward,
        "infer_predict": {"samples_per_s": n / predict_s, "rows": n,
                          "batch_size": args.predict_batch_size or args.infer_batch_size,
                          "api": "model.predict(x, batch_size)"},
        "test": quality(test.label, probs),
        "history": history,
        "peak_rss_mb": round(peak_rss_mb(), 1),
        "machine": machine(),
    }
    result["mismatches"] = [m for m in result["mismatches"] if m]
    write_result(args.out, result)
    print(f"deepctr: train {result['train']['samples_per_s']:.0f}/s, forward {forward['samples_per_s']:.0f}/s, "
          f"test AUC {result['test']['auc']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
