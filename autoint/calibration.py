"""Calibrated click probabilities: Platt scaling of a trained model's logit on the validation split.

Early stopping (and ``autoint tune``) choose an epoch by validation AUC, which
ranks rows well but may be overconfident: on Frappe the tuned model's test
logloss was 0.45 against logistic regression's 0.30 at a higher AUC (README,
Quality). Platt scaling (Platt, 1999) fits ``p = sigmoid(a * z + b)`` to the
validation rows' labels, ``z`` being the model's logit, by maximum likelihood.
With ``a > 0`` the ranking, and so every AUC, is unchanged; only the
probabilities move. The pair lives in the model (``AutoInt.logit_calibration``,
the identity while training), so the checkpoint, ``autoint predict``,
``evaluate``, the MLflow model and ``autoint serve`` all serve the calibrated
probability. torch only.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from .checkpoint import model_from_checkpoint, read_checkpoint, write_checkpoint
from .model import AutoInt

BUFFER = "model.logit_calibration"  # in a training checkpoint's state_dict


# Fewer validation rows than this of either class: no pair is fitted (two parameters on a handful of rows can
# cost test logloss more than they bring).
MIN_ROWS_PER_CLASS = 20


class Unfitted(ValueError):
    """No Platt pair could be fitted; the message says why (the model then serves its own probability)."""


def fit_platt(logits: Tensor, labels: Tensor) -> tuple[float, float, int]:
    """``(a, b, rows)``: the pair minimising the logloss of ``sigmoid(a * logits + b)`` on ``labels``, fitted on
    ``rows`` rows (those with a finite logit). Raises :class:`Unfitted` when the rows hold fewer than
    :data:`MIN_ROWS_PER_CLASS` of a class, or when the fit would reverse the ranking (``a <= 0``: the model ranks
    these rows no better than chance)."""
    z, y = logits.detach().double().flatten(), labels.detach().double().flatten()
    keep = torch.isfinite(z)
    z, y = z[keep], y[keep]
    positives = int(y.sum())
    fewest = min(positives, z.numel() - positives)
    if fewest < MIN_ROWS_PER_CLASS:
        raise Unfitted(f"the validation split holds {positives:,} clicks and {z.numel() - positives:,} non-clicks; "
                       f"at least {MIN_ROWS_PER_CLASS} of each are needed")
    ab = torch.tensor([1.0, 0.0], dtype=torch.float64, requires_grad=True)
    opt = torch.optim.LBFGS([ab], lr=1.0, max_iter=200, tolerance_grad=1e-10, tolerance_change=1e-12,
                            line_search_fn="strong_wolfe")

    def closure() -> Tensor:
        opt.zero_grad()
        loss = F.binary_cross_entropy_with_logits(ab[0] * z + ab[1], y)
        loss.backward()
        return loss

    opt.step(closure)
    a, b = (float(v) for v in ab.detach())
    if not (a > 0 and torch.isfinite(ab).all()):
        raise Unfitted(f"the fitted slope is {a:.3g}: on the validation split the model ranks no better than chance, "
                       "and a slope <= 0 would reverse its ranking")
    return a, b, int(z.numel())


@torch.no_grad()
def raw_logits(model: AutoInt, batches: Iterable[dict[str, Tensor]], rows_per_pass: int | None = None,
               device: Any = "cpu") -> tuple[Tensor, Tensor]:
    """The model's uncalibrated logits (fp32, on the CPU) and the labels over ``batches`` (mappings with a
    ``label``), the model run on ``device`` in fp32, ``rows_per_pass`` rows at a time."""
    model.eval()
    kept = model.logit_calibration.clone()
    model.logit_calibration.copy_(torch.tensor([1.0, 0.0]))
    zs, ys = [], []
    try:
        for batch in batches:
            n = len(batch["label"])
            step = rows_per_pass or n
            for s in range(0, n, step):
                piece = {k: v[s : s + step].to(device) for k, v in batch.items()}
                zs.append(model(piece).float().cpu())
            ys.append(batch["label"].float())
    finally:
        model.logit_calibration.copy_(kept)
    return torch.cat(zs) if zs else torch.zeros(0), torch.cat(ys) if ys else torch.zeros(0)


def calibrate_checkpoint(path: str | Path, batches: Iterable[dict[str, Tensor]],
                         device: Any = "cpu") -> dict[str, float]:
    """Fit Platt scaling of the checkpoint's model on ``batches`` (its validation split) and write the pair into the
    checkpoint, replacing any pair written before (the fit reads the plain logits, so a second call gives the same).
    Returns ``{"calibration_a", "calibration_b", "calibration_rows"}``; raises :class:`Unfitted` when no pair could
    be fitted, after writing the identity (the model then serves its own probability)."""
    path = Path(path)
    # Mapped: the trained system and its optimizer are still in memory here, and a whole read of the checkpoint
    # (weights and Adam's moments) raised the run's peak past what training itself took (a helper's hunt)
    ckpt = read_checkpoint(path, mmap=True)
    model, *_ = model_from_checkpoint(ckpt, path)
    device = torch.device(device)
    logits, labels = raw_logits(model.to(device), batches, model.rows_per_pass() if device.type == "cpu" else None,
                                device)
    try:
        a, b, rows = fit_platt(logits, labels)
    except Unfitted:
        ckpt["state_dict"][BUFFER] = torch.tensor([1.0, 0.0])
        write_checkpoint(ckpt, path)
        raise
    pair = torch.tensor([a, b], dtype=torch.float32)
    ckpt["state_dict"][BUFFER] = pair
    write_checkpoint(ckpt, path)
    return {"calibration_a": float(pair[0]), "calibration_b": float(pair[1]), "calibration_rows": rows}
