"""AutoInt and AutoInt+ in plain PyTorch.

Song, Shi, Xiao, Duan, Xu, Zhang and Tang, "AutoInt: Automatic Feature
Interaction Learning via Self-Attentive Neural Networks", CIKM 2019,
arXiv:1810.11921.

Every field (categorical, numeric or multi-valued) is embedded into the same
space; stacked *interacting layers* (multi-head self-attention across fields
with a residual connection) learn high-order crosses; the last layer's field
vectors are concatenated into one logit.

Shape letters used throughout:

    B  batch size                 F  number of fields (schema order)
    D  embedding dimension        H  attention heads
    d  width of one head (d')     L  padded length of a multi-valued field
    Fc, Fn, Fm  categorical, numeric and multi-valued fields (Fc + Fn + Fm = F)

The model takes a batch mapping with up to three tensors,

    "categorical": int32/int64 (B, Fc)     one id per field
    "numeric":     FloatTensor (B, Fn)     transformed values
    "multi":       int32/int64 (B, Fm, L)  ids padded with PAD (0)

and returns logits of shape (B,). Sigmoid, loss and optimisation belong to the
training system (:mod:`autoint.system`), not here. The logit goes out through
``logit_calibration``, an affine map fitted after training
(:mod:`autoint.calibration`) and the identity until then. With ``return_attention=True``
it also returns one attention map of shape (B, H, F, F) per interacting layer.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .config import ConfigError, ModelConfig, require_config
from .errors import InputError, out_of_memory
from .schema import NUMERIC, PAD, Schema

Batch = Mapping[str, Tensor]
# Activation bytes of one forward pass that run fastest on the 2-core Xeon measured, with freed memory kept
# (benchmarks/results/pieces_xeon{,_2x8}_{movielens,criteo}.json, speed.py --diagnose, "pieces"): the paper's
# and the 2 x 8 models on MovieLens and the Criteo head score within 4 % of their fastest piece size in pieces
# of 8 MB (4 MB: 12 % off for the paper's MovieLens model; 16 MB: 5 % for the 2 x 8 Criteo model).
# See :meth:`AutoInt.rows_per_pass`.
PASS_CACHE_BYTES = 8 * 2**20
# Fewer fields than this: attention scores are laid out key-major so the softmax is not along a
# short last dimension (MultiHeadSelfAttention.attend). Softmax forward + backward of (1024, F, F)
# on the 2-core CPU (benchmarks/softmax_layout.py): key-major is about 4x faster at F = 8 to 14,
# 1.1-1.3x at 16 and 18; at 24 and 39 the last dimension is faster.
KEY_MAJOR_BELOW = 20


# ----------------------------------------------------------------------------- embedding
class IdOutOfRange(InputError, ValueError):
    """A batch's id outside its field's vocabulary (it would look up another field's rows of the one table)."""

    def __init__(self, kind: str, value: int, field: str, row: int, size: int) -> None:
        self.kind, self.value, self.field, self.row, self.size = kind, value, field, row, size
        super().__init__(self.at(0))

    def at(self, start: int) -> str:
        """The message, the row counted from ``start`` (a batch's first row in its file)."""
        return (f"{self.kind} id {self.value} of field {self.field!r} (row {start + self.row}) is outside its "
                f"vocabulary 0..{self.size - 1}: encode rows with the model's encoder (autoint.predict.Scorer), "
                "not ids of another vocabulary")


class FieldEmbedding(nn.Module):
    """Embeds every field into R^D (paper, Section 3.3).

    * categorical: ``e_i = V_i x_i``, a row of one table;
    * multi-valued: the mean of the rows of the non-padding ids (zeros for an empty list);
    * numeric: ``e_m = v_m * x_m``, a learned vector scaled by the value.

    All categorical and multi-valued vocabularies live in one table with per-field
    offsets, so the lookup is one kernel however many fields there are.
    """

    def __init__(self, schema: Schema, dim: int, init_std: float = 1e-2) -> None:
        super().__init__()
        if not schema.is_fitted:
            unfitted = [f.name for f in schema.fields if f.kind != NUMERIC and f.vocab_size is None]
            raise ValueError(f"schema fields have no vocabulary size yet: {unfitted[:5]}")
        self.dim = dim
        cat, num, multi = schema.categorical, schema.numeric, schema.multi
        self.num_categorical, self.num_numeric, self.num_multi = len(cat), len(num), len(multi)
        sizes = [f.vocab_size for f in (*cat, *multi)]
        offsets = torch.tensor([0, *sizes[:-1]], dtype=torch.long).cumsum(0) if sizes else torch.zeros(0)
        self.register_buffer("cat_offsets", offsets[: len(cat)].clone(), persistent=False)  # (Fc,)
        self.register_buffer("multi_offsets", offsets[len(cat):].clone(), persistent=False)  # (Fm,)
        self.register_buffer("cat_sizes", torch.tensor(sizes[: len(cat)], dtype=torch.long), persistent=False)
        self.register_buffer("multi_sizes", torch.tensor(sizes[len(cat):], dtype=torch.long), persistent=False)
        self.names = {"categorical": [f.name for f in cat], "numeric": [f.name for f in num],
                      "multi": [f.name for f in multi]}
        self.table = nn.Embedding(max(sum(sizes), 1), dim)
        self.numeric = nn.Parameter(torch.empty(len(num), dim))  # (Fn, D)
        nn.init.normal_(self.table.weight, std=init_std)
        nn.init.normal_(self.numeric, std=init_std)
        # A kind with no field leaves its parameter unused by every forward: frozen, so that DDP, which refuses
        # parameters that get no gradient, trains such a schema (Criteo with its numeric fields bucketed). Kept
        # in the state dict, so checkpoints load either way.
        self.numeric.requires_grad_(len(num) > 0)
        self.table.weight.requires_grad_(sum(sizes) > 0)

        # Embeddings are computed grouped by kind; `order` puts them back in schema order.
        grouped = [f.name for f in (*cat, *num, *multi)]
        order = [grouped.index(name) for name in schema.names]
        identity = order == list(range(len(order)))  # no tensor: a model built on the meta device reads no values
        self.register_buffer("order", None if identity else torch.tensor(order, dtype=torch.long), persistent=False)

    def forward(self, batch: Batch) -> Tensor:
        try:
            parts = []
            if self.num_categorical:
                self._check_ids(batch["categorical"], self.cat_sizes, "categorical")
                ids = batch["categorical"] + self.cat_offsets  # (B, Fc)
                parts.append(self.table(ids))  # (B, Fc, D)
            if self.num_numeric:
                x = batch["numeric"].to(self.numeric.dtype)  # (B, Fn)
                parts.append(x.unsqueeze(-1) * self.numeric)  # (B, Fn, D)
            if self.num_multi:
                self._check_ids(batch["multi"], self.multi_sizes.unsqueeze(-1), "multi")
                parts.append(self.pool_multi(batch["multi"]))  # (B, Fm, D)
            e = torch.cat(parts, dim=1) if len(parts) > 1 else parts[0]  # (B, F, D), grouped by kind
        except (KeyError, IndexError, RuntimeError, TypeError, AttributeError) as err:
            if out_of_memory(err) is not None:
                raise  # a batch too large for memory, not one laid out otherwise
            # A batch not laid out as the encoder lays it out (what torch or the mapping said is chained below).
            raise ValueError(f"the batch is not what this model takes: {self._expected()}; got {_shapes(batch)} "
                             f"({type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''})") from err
        return e if self.order is None else e.index_select(1, self.order)  # (B, F, D), schema order

    def _check_ids(self, ids: Tensor, sizes: Tensor, kind: str) -> None:
        """Ids outside a field's vocabulary looked up another field's rows of the one table, silently. Checked on
        a CPU only (an accelerator would wait for the answer at every step)."""
        if ids.device.type != "cpu" or not ids.numel() or ids.is_floating_point():
            return
        bad = (ids < 0) | (ids >= sizes)
        if bool(bad.any()):
            where = bad.nonzero()[0].tolist()
            raise IdOutOfRange(kind, int(ids[tuple(where)]), self.names[kind][where[1]], where[0],
                               int(sizes.flatten()[where[1]]))

    def _expected(self) -> str:
        parts = [f"'categorical' integer ids (B, {self.num_categorical})" if self.num_categorical else "",
                 f"'numeric' floats (B, {self.num_numeric})" if self.num_numeric else "",
                 f"'multi' integer ids (B, {self.num_multi}, max_len)" if self.num_multi else ""]
        return "a mapping of tensors, " + ", ".join(p for p in parts if p)

    def pool_multi(self, ids: Tensor) -> Tensor:
        """Mean of the embeddings of the non-padding ids; an empty list gives zeros."""
        mask = (ids != PAD).unsqueeze(-1)  # (B, Fm, L, 1)
        rows = self.table(ids + self.multi_offsets.unsqueeze(-1))  # (B, Fm, L, D)
        total = (rows * mask).sum(dim=2)  # (B, Fm, D)
        count = mask.sum(dim=2).clamp_min(1)  # (B, Fm, 1); empty lists divide 0 by 1
        return total / count


def _shapes(batch: Any) -> str:
    if not isinstance(batch, Mapping):
        return f"a {type(batch).__name__}"
    return "{" + ", ".join(f"{k!r}: " + (f"{tuple(v.shape)} {str(v.dtype).removeprefix('torch.')}"
                                         if isinstance(v, Tensor) else type(v).__name__)
                           for k, v in batch.items()) + "}"


class FirstOrder(nn.Module):
    """The optional wide term: one weight per categorical value and per numeric field."""

    def __init__(self, schema: Schema) -> None:
        super().__init__()
        self.embedding = FieldEmbedding(schema, dim=1, init_std=1e-4)

    def forward(self, batch: Batch) -> Tensor:
        return self.embedding(batch).sum(dim=(1, 2))  # (B,)


# ----------------------------------------------------------------------------- interaction
class MultiHeadSelfAttention(nn.Module):
    """Multi-head self-attention across fields (paper, Eq. 5-6).

    For head h, ``alpha_{m,k} = softmax_k(<W_Q e_m, W_K e_k> * s)`` and the head's
    output for field m is ``sum_k alpha_{m,k} W_V e_k``; heads are concatenated.
    ``s`` is 1 in the paper and 1/sqrt(d') when ``scaled`` (the authors' code).
    The projections have no bias, as in the paper.
    """

    def __init__(self, in_dim: int, num_heads: int, head_dim: int, scaled: bool = False,
                 dropout: float = 0.0, kernel: str = "auto") -> None:
        super().__init__()
        self.num_heads, self.head_dim = num_heads, head_dim
        self.scale = 1.0 / math.sqrt(head_dim) if scaled else 1.0
        self.dropout = dropout
        self.kernel = kernel
        self.qkv = nn.Linear(in_dim, 3 * num_heads * head_dim, bias=False)  # [W_Q; W_K; W_V]

    def forward(self, x: Tensor, return_attention: bool = False) -> tuple[Tensor, Tensor | None]:
        heads = self.split_heads(self.qkv(x))  # 3H x (B, F, d)
        return self.attend(heads, return_attention)

    def split_heads(self, projected: Tensor) -> tuple[Tensor, ...]:
        """(B, F, 3*H*d + rest) → q_1..q_H, k_1..k_H, v_1..v_H of shape (B, F, d) (views, no copy), then
        the rest (B, F, rest) if any.

        One ``split`` rather than a (B, H, F, d) transpose per projection: each head is a strided
        view that ``bmm`` reads in place, and autograd joins the heads' gradients in one copy.
        """
        d, width = self.head_dim, 3 * self.num_heads * self.head_dim
        sizes = [d] * (3 * self.num_heads)
        if projected.shape[-1] > width:
            sizes.append(projected.shape[-1] - width)
        return projected.split(sizes, dim=-1)

    def attend(self, heads: Sequence[Tensor], return_attention: bool = False) -> tuple[Tensor, Tensor | None]:
        """Attention over already-projected heads (:meth:`split_heads`: q, k, v per head, (B, F, d)).

        Returns the concatenated head outputs (B, F, H*d) and, if asked, the
        attention weights (B, H, F, F) before dropout (each row sums to 1).
        Without maps, the fused kernel runs unless ``kernel`` says otherwise; on
        CPU, "auto" takes the explicit path, which is faster there for short
        field sequences.
        """
        H = self.num_heads
        q, k, v = heads[:H], heads[H:2 * H], heads[2 * H:3 * H]
        p = self.dropout if self.training else 0.0
        fused = self.kernel == "sdpa" or (self.kernel == "auto" and q[0].device.type != "cpu")
        if fused and not return_attention:
            q4, k4, v4 = (torch.stack(t, dim=1) for t in (q, k, v))  # (B, H, F, d)
            out = F.scaled_dot_product_attention(q4, k4, v4, dropout_p=p, scale=self.scale)  # (B, H, F, d)
            B, _, F_, d = out.shape
            return out.transpose(1, 2).reshape(B, F_, H * d), None  # (B, F, H*d)
        maps = []
        # On a CPU, under KEY_MAJOR_BELOW fields, scores are computed key-major, (B, F_key, F_query),
        # and the softmax over keys runs along dim 1: PyTorch's CPU softmax along a short last
        # dimension is up to 4x slower, forward and backward. The map is then the transposed view,
        # (B, F_query, F_key), with no copy. (Measured on a CPU only; accelerators keep the layout.)
        key_major = q[0].device.type == "cpu" and q[0].shape[1] < KEY_MAJOR_BELOW
        for qh, kh in zip(q, k):
            scores = torch.bmm(kh, qh.transpose(1, 2)) if key_major else torch.bmm(qh, kh.transpose(1, 2))
            if self.scale != 1.0:
                scores = scores * self.scale
            maps.append(scores.softmax(dim=1).transpose(1, 2) if key_major else scores.softmax(dim=-1))
        attention = torch.stack(maps, dim=1) if return_attention or p else None  # (B, H, F, F)
        if p:  # one mask over (B, H, F, F), as the fused kernel draws it
            maps = list(F.dropout(attention, p).unbind(dim=1))
        outs = [torch.bmm(a, vh) for a, vh in zip(maps, v)]  # H x (B, F, d)
        out = torch.cat(outs, dim=-1) if H > 1 else outs[0]  # (B, F, H*d)
        return out, attention if return_attention else None


class InteractingLayer(nn.Module):
    """One interacting layer (paper, Eq. 7-8): ``ReLU(attention(e) + W_res e)``.

    ``residual`` is "projection" (W_res, the paper), "identity" (needs in_dim ==
    H*d) or "none". When W_res is present its projection is computed in the same
    matmul as Q, K and V. ``layer_norm`` normalises the output, as the authors'
    code does.
    """

    def __init__(self, in_dim: int, num_heads: int, head_dim: int, residual: str = "projection",
                 scaled: bool = False, layer_norm: bool = False, dropout: float = 0.0,
                 kernel: str = "auto") -> None:
        super().__init__()
        out_dim = num_heads * head_dim
        if residual == "identity" and in_dim != out_dim:
            raise ValueError(f"identity residual needs in_dim == num_heads * head_dim ({in_dim} != {out_dim})")
        self.attention = MultiHeadSelfAttention(in_dim, num_heads, head_dim, scaled, dropout, kernel)
        self.residual_mode = residual
        self.residual = nn.Linear(in_dim, out_dim, bias=False) if residual == "projection" else None  # W_res
        self.norm = nn.LayerNorm(out_dim) if layer_norm else None
        self.out_dim = out_dim

    def forward(self, x: Tensor, return_attention: bool = False) -> tuple[Tensor, Tensor | None]:
        if self.residual is not None:
            # One (B*F, in) x (in, 4*H*d) matmul instead of four small ones.
            weight = torch.cat([self.attention.qkv.weight, self.residual.weight])  # (4*H*d, in)
            *heads, res = self.attention.split_heads(F.linear(x, weight))  # 3H x (B, F, d), (B, F, H*d)
        else:
            heads = self.attention.split_heads(self.attention.qkv(x))  # 3H x (B, F, d)
            res = x if self.residual_mode == "identity" else None
        out, attention = self.attention.attend(heads, return_attention)  # (B, F, H*d)
        if res is not None:
            out = out + res
        out = F.relu(out)
        if self.norm is not None:
            out = self.norm(out)
        return out, attention


class DNN(nn.Module):
    """The feed-forward tower of AutoInt+: Linear → [BatchNorm] → ReLU → Dropout, repeated."""

    def __init__(self, in_dim: int, hidden: tuple[int, ...], dropout: float = 0.0,
                 batch_norm: bool = False) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        for width in hidden:
            layers.append(nn.Linear(in_dim, width))
            if batch_norm:
                layers.append(nn.BatchNorm1d(width))
            layers.append(nn.ReLU())
            if dropout:
                layers.append(nn.Dropout(dropout))
            in_dim = width
        layers.append(nn.Linear(in_dim, 1))
        self.net = nn.Sequential(*layers)

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x).squeeze(-1)  # (B,)


# ----------------------------------------------------------------------------- model
class AutoInt(nn.Module):
    """AutoInt (no DNN) or AutoInt+ (``config.dnn_hidden`` non-empty).

    ``forward`` runs three named stages: :meth:`embed` → :meth:`interact` →
    :meth:`predict`.
    """

    def __init__(self, schema: Schema, config: ModelConfig | None = None) -> None:
        super().__init__()
        config = ModelConfig() if config is None else config
        require_config(config, ModelConfig, "config")
        if not isinstance(schema, Schema):
            raise TypeError(f"schema: expected a Schema (Schema.load(folder / 'schema.json')), got "
                            f"{type(schema).__name__}")
        self.schema, self.config = schema, config
        if torch.get_default_device().type != "meta":
            check_fits_memory(schema, config)  # before allocating: a model wider than memory is a setting to change
        num_fields, dim = len(schema), config.embedding_dim

        self.embedding = FieldEmbedding(schema, dim, config.embedding_init_std)
        self.layers = nn.ModuleList()
        width = dim
        for _ in range(config.num_layers):
            layer = InteractingLayer(width, config.num_heads, config.head_dim, config.residual,
                                     config.scale_attention, config.layer_norm, config.attention_dropout,
                                     config.attention_kernel)
            self.layers.append(layer)
            width = layer.out_dim
        self.output = nn.Linear(num_fields * width, 1)  # w^T [e_1 ⊕ ... ⊕ e_F] + b (Eq. 9)
        self.dnn = (DNN(num_fields * dim, config.dnn_hidden, config.dnn_dropout, config.dnn_batch_norm)
                    if config.dnn_hidden else None)
        self.first_order = FirstOrder(schema) if config.first_order else None
        # (a, b): the logit a model serves is a * logit + b, fitted after training on the validation split
        # (Platt scaling, autoint.calibration); (1, 0) while training, so training sees the plain logit.
        self.register_buffer("logit_calibration", torch.tensor([1.0, 0.0]))

    def embed(self, batch: Batch) -> Tensor:
        return self.embedding(batch)  # (B, F, D)

    def interact(self, e: Tensor, return_attention: bool = False) -> tuple[Tensor, list[Tensor]]:
        maps: list[Tensor] = []
        h = e  # (B, F, D)
        for layer in self.layers:
            h, attention = layer(h, return_attention)  # (B, F, H*d), (B, H, F, F) | None
            if attention is not None:
                maps.append(attention)
        return h, maps

    def predict(self, e: Tensor, h: Tensor, batch: Batch) -> Tensor:
        logit = self.output(h.flatten(1)).squeeze(-1)  # (B, F*H*d) -> (B,)
        if self.dnn is not None:
            logit = logit + self.dnn(e.flatten(1))  # (B, F*D) -> (B,)
        if self.first_order is not None:
            logit = logit + self.first_order(batch)
        a, b = self.logit_calibration
        return logit.float() * a + b  # exact while (1, 0); in fp32 under autocast (a model cast to bf16: in bf16)

    def _load_from_state_dict(self, state_dict: dict[str, Tensor], prefix: str, *args: object) -> None:
        # Checkpoints written before calibration existed hold no logit_calibration: theirs is the identity.
        state_dict.setdefault(prefix + "logit_calibration", torch.tensor([1.0, 0.0]))
        super()._load_from_state_dict(state_dict, prefix, *args)

    def forward(self, batch: Batch, return_attention: bool = False) -> Tensor | tuple[Tensor, list[Tensor]]:
        e = self.embed(batch)
        h, maps = self.interact(e, return_attention)
        logits = self.predict(e, h, batch)
        return (logits, maps) if return_attention else logits

    # -- running it efficiently -------------------------------------------------
    def rows_per_pass(self, cache_bytes: int = PASS_CACHE_BYTES) -> int:
        """Rows of one forward pass whose widest activations fit in ``cache_bytes``.

        A batch run through in pieces of this many rows gives the same outputs, and on a
        CPU it is faster: each layer's (B, F, 4*H*d) projection of a large batch no
        longer fits in cache (benchmarks/speed.py --diagnose times batch sizes). A power
        of two from 128 to 8192.
        """
        widest = max([self.config.embedding_dim, *(4 * layer.out_dim for layer in self.layers)])
        per_row = len(self.schema) * widest * 4  # fp32 bytes of one row's widest activation
        rows = max(1, cache_bytes // per_row)
        return int(min(8192, max(128, 1 << (rows.bit_length() - 1))))

    # -- parameter bookkeeping ------------------------------------------------
    def embedding_parameters(self) -> list[nn.Parameter]:
        """Parameters whose size follows the vocabularies and fields: tables and numeric vectors."""
        params = list(self.embedding.parameters())
        if self.first_order is not None:
            params += list(self.first_order.parameters())
        return params

    def embedding_tables(self) -> list[nn.Embedding]:
        """The lookup tables (categorical and multi-valued values; the wide term's too)."""
        tables = [self.embedding.table]
        if self.first_order is not None:
            tables.append(self.first_order.embedding.table)
        return tables

    def dense_parameters(self) -> list[nn.Parameter]:
        emb = {id(p) for p in self.embedding_parameters()}
        return [p for p in self.parameters() if id(p) not in emb]


# What training holds per parameter at its peak, in copies of the weights, by optimizer (train.optimizer as it
# runs). Measured on CPU with a 1 GB embedding table, above the process's baseline: 6.4 copies with dense Adam,
# 3.8 with sparse_adam (a helper's hunt; 3 were counted before, so a model the check passed could need twice the
# memory and be killed). Dense Adam holds the weights, their gradients, its two moments and two temporaries of
# its step (the second moment's square root and the denominator); sparse_adam the weights and its two moments,
# with the looked-up rows' gradients and temporaries besides.
TRAINING_COPIES = {"adam": 6, "sparse_adam": 4}


def physical_memory() -> int | None:
    """Bytes of memory this process may use: the machine's, or its container's (cgroup) limit where lower; None
    where the system does not say."""
    try:
        sizes = [os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")]
    except (AttributeError, ValueError, OSError):
        return None
    for limit in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):  # v2, v1
        try:
            with open(limit) as f:
                text = f.read().strip()
        except OSError:
            continue
        if text.isdigit():
            sizes.append(int(text))
    return min(sizes)


def check_fits_memory(schema: Schema, config: ModelConfig, copies: int = 1, purpose: str = "") -> None:
    """Refuse, naming the settings, a model whose parameters (times ``copies``) exceed this machine's memory.

    Counted on the meta device, so nothing is allocated: building it would fail deep inside torch, or take every
    page and be killed. ``copies`` counts what training holds beside the weights (gradients, Adam's moments)."""
    memory = physical_memory()
    if memory is None:
        return
    with torch.device("meta"):
        model = AutoInt(schema, config)
    tables = sum(t.weight.numel() for t in model.embedding_tables())
    total = sum(p.numel() for p in model.parameters())
    need = 4 * total * copies  # fp32
    if need <= memory:
        return
    rows = sum(t.num_embeddings for t in model.embedding_tables())
    held = f", {need / 1e9:.1f} GB with {purpose}" if copies > 1 else ""
    raise ConfigError(
        f"model: this model's {total:,} parameters take {4 * total / 1e9:.1f} GB in fp32{held}, more than this "
        f"machine's {memory / 1e9:.1f} GB of memory; the embedding tables are {tables:,} of them "
        f"({rows:,} vocabulary rows x model.embedding_dim={config.embedding_dim}; data.min_count shrinks the rows), "
        f"the rest {total - tables:,} (model.num_layers={config.num_layers}, num_heads={config.num_heads}, "
        f"head_dim={config.head_dim}, dnn_hidden={list(config.dnn_hidden)})")


def count_parameters(model: AutoInt) -> dict[str, int]:
    """Trainable parameters split into embedding tables and everything else."""
    embedding = sum(p.numel() for p in model.embedding_parameters() if p.requires_grad)
    dense = sum(p.numel() for p in model.dense_parameters() if p.requires_grad)
    return {"embedding": embedding, "non_embedding": dense, "total": embedding + dense}


__all__ = [
    "DNN",
    "PASS_CACHE_BYTES",
    "TRAINING_COPIES",
    "AutoInt",
    "FieldEmbedding",
    "FirstOrder",
    "IdOutOfRange",
    "InteractingLayer",
    "MultiHeadSelfAttention",
    "check_fits_memory",
    "count_parameters",
    "physical_memory",
]
