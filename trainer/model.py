"""A GPT built from a `planner.model.ModelSpec`; it knows nothing of parallelism.

Options the seeds found to matter: SDPA ("flash") vs eager attention, learned positions vs
RoPE, LayerNorm vs RMSNorm (optionally run in low precision), GELU MLP vs SwiGLU, GQA, vocab
padded to `spec.vocab_multiple`, tied embeddings. The attention core (scores, softmax, values)
is its own module so that selective checkpointing can recompute exactly that part.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from planner import attn_window, moe
from planner.model import ROPE_THETA_DEFAULT, ModelSpec
from trainer import local_attention


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Zhang & Sennrich 2019: x / rms(x) * g
        if x.dtype == torch.float32:
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight
        # 16-bit x (FSDP2 / DeepSpeed cast the parameters; no autocast): the mean square in fp32, as HF's
        # LlamaRMSNorm upcasts. In fp16 the backward of rsqrt, -r^3 / 2, passes 65504 once rms(x) < ~0.025: every
        # gradient was inf and GradScaler skipped every step (an fp16 FSDP run of a Llama never trained).
        ms = torch.linalg.vector_norm(x, dim=-1, keepdim=True, dtype=torch.float32).pow(2) / x.shape[-1]
        return x * torch.rsqrt(ms + self.eps).to(x.dtype) * self.weight


class LayerNorm(nn.LayerNorm):
    """LayerNorm that can run in the input's (low) precision under autocast (seed 000 #3)."""

    def __init__(self, dim: int, parametric: bool = True, bias: bool = True, low_precision: bool = False):
        super().__init__(dim, elementwise_affine=parametric, bias=parametric and bias)
        self.low_precision = low_precision

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not (self.low_precision and torch.is_autocast_enabled(x.device.type)):
            return super().forward(x)
        dtype = torch.get_autocast_dtype(x.device.type)
        w = self.weight.to(dtype) if self.weight is not None else None
        b = self.bias.to(dtype) if self.bias is not None else None
        with torch.autocast(x.device.type, enabled=False):
            return F.layer_norm(x.to(dtype), self.normalized_shape, w, b, self.eps)


def make_norm(spec: ModelSpec, low_precision: bool, dim: int | None = None) -> nn.Module:
    if spec.norm == "rmsnorm":
        return RMSNorm(dim or spec.hidden)
    return LayerNorm(dim or spec.hidden, parametric=spec.norm == "layernorm", bias=spec.norm_bias,
                     low_precision=low_precision)


def rope_tables(seq_len: int, head_dim: int, device=None, theta: float = ROPE_THETA_DEFAULT
                ) -> tuple[torch.Tensor, torch.Tensor]:
    # Su et al. 2021 (RoFormer, arXiv 2104.09864 sec. 3.2.2): frequency i = theta^(-2i/d), theta the model's base
    # (ModelSpec.rope_theta; RoFormer's 10000), in float32 as transformers' default rope init
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=device).float() / head_dim))
    angles = torch.outer(torch.arange(seq_len, device=device).float(), inv)
    return angles.cos(), angles.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x: (B, H, S, D); rotate pairs (x1, x2) of the two halves of the head dimension."""
    x1, x2 = x.chunk(2, dim=-1)
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)


# F.scaled_dot_product_attention's enable_gqa (torch 2.5, torch/nn/functional.py): the kernel reads each K/V head for
# its n_heads / kv_heads query heads, where repeat_interleave made that many copies of K and V (and of their grads)
SDPA_HAS_GQA = torch.__version__ >= (2, 5)


def native_gqa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None) -> bool:
    """SDPA takes GQA itself here: torch >= 2.5 and a fused kernel accepts the shapes with enable_gqa. A kernel that
    does not (ATen sdp_utils.cpp check_batch_size_and_num_heads_dense<supports_gqa>: false for ROCm's memory-efficient
    kernel, and in some releases for CUDA's; flash runs no fp32 nor head_dim > 256) sends SDPA to its math kernel,
    which materialises the S x S scores: there the caller expands K/V and keeps a fused kernel (transformers #45776
    gates enable_gqa on the same predicates)."""
    if not SDPA_HAS_GQA:
        return False
    if q.device.type == "cuda":  # torch.backends.cuda's predicates (dynamo folds them to constants)
        from torch.backends.cuda import SDPAParams, can_use_efficient_attention, can_use_flash_attention

        params = SDPAParams(q, k, v, mask, 0.0, mask is None, True)
        return can_use_flash_attention(params) or can_use_efficient_attention(params)
    if torch.compiler.is_compiling():  # the chooser below is no constant to dynamo: expand as before
        return False
    try:  # the backend SDPA would run on this device (CPU: its flash kernel takes GQA, torch 2.13)
        return torch._fused_sdp_choice(q, k, v, mask, 0.0, mask is None, enable_gqa=True) > 0  # 0: MATH, -1: ERROR
    except (RuntimeError, TypeError):
        return False


class AttentionCore(nn.Module):
    """softmax(q k^T / sqrt(d)) v with a causal mask, or a local one (`window`: a sliding window, or with `chunked`
    blocks of `window` tokens: trainer/local_attention.py); no parameters (selective recompute)."""

    def __init__(self, kind: str, window: int | None = None, chunked: bool = False):
        super().__init__()
        # any fused kernel the planner names (flash, flash2, cudnn, triton) runs as PyTorch SDPA here
        assert kind in ("flash", "eager", "flash2", "cudnn", "triton"), kind
        self.kind = "eager" if kind == "eager" else "flash"
        self.window, self.chunked = window, chunked

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        gqa = k.shape[1] != q.shape[1]  # GQA: each kv head serves n_heads / kv_heads query heads
        if self.window is not None and self.window < q.shape[-2]:  # a window as long as the sequence: causal
            return self._local(q, k, v, gqa)
        if self.kind == "flash" and gqa and native_gqa(q, k, v):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        if gqa:
            rep = q.shape[1] // k.shape[1]
            k = k.repeat_interleave(rep, dim=1)
            v = v.repeat_interleave(rep, dim=1)
        if self.kind == "flash":
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        s = q.shape[-2]
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
        mask = torch.ones(s, s, dtype=torch.bool, device=q.device).triu(1)
        scores = scores.masked_fill(mask, float("-inf"))
        return torch.softmax(scores.float(), dim=-1).to(q.dtype) @ v

    def _local(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, gqa: bool) -> torch.Tensor:
        path = local_attention.local_path(q.device.type, q.dtype, q.shape[-1], self.chunked, self.kind)
        if path == "flash_attn":
            return local_attention.flash_window(q, k, v, self.window)
        if path == "flex":
            return local_attention.flex_local(q, k, v, self.window, self.chunked)
        mask = local_attention.local_mask(q.shape[-2], self.window, self.chunked, q.device)
        if self.kind == "flash" and gqa and native_gqa(q, k, v, mask):
            return local_attention.sdpa_masked(q, k, v, mask, gqa=True)
        if gqa:
            rep = q.shape[1] // k.shape[1]
            k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        if self.kind == "flash":
            return local_attention.sdpa_masked(q, k, v, mask, gqa=False)
        return local_attention.eager_masked(q, k, v, mask)


class Attention(nn.Module):
    def __init__(self, spec: ModelSpec, attention: str, local: bool = False):
        """`local`: this layer runs the spec's sliding window or chunks (planner/attn_window.py local_layer_mask)."""
        super().__init__()
        h, kv, qd = spec.hidden, spec.kv_dim, spec.q_dim
        self.n_heads, self.kv_heads, self.head_dim = spec.n_heads, spec.kv_heads, spec.head_dim
        qkv_bias = spec.bias if spec.qkv_bias is None else spec.qkv_bias  # Qwen2: q/k/v only
        self.q = nn.Linear(h, qd, bias=qkv_bias)
        self.k = nn.Linear(h, kv, bias=qkv_bias)
        self.v = nn.Linear(h, kv, bias=qkv_bias)
        self.o = nn.Linear(qd, h, bias=spec.bias)
        # q/k RMSNorm: per head (Gemma 3, Qwen3) or over the full width (OLMo 2)
        self.qk_norm = spec.qk_norm
        if spec.qk_norm != "none":
            per_head = spec.qk_norm == "per_head"
            self.q_norm = RMSNorm(spec.head_dim if per_head else qd)
            self.k_norm = RMSNorm(spec.head_dim if per_head else kv)
        self.core = AttentionCore(attention, spec.attn_window if local else None, spec.attn_chunked)
        self.rope = spec.position == "rope"
        self.rope_theta = spec.rope_theta or ROPE_THETA_DEFAULT

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        q, k = self.q(x), self.k(x)
        if self.qk_norm == "full":
            q, k = self.q_norm(q), self.k_norm(k)
        q = q.view(b, s, self.n_heads, self.head_dim).transpose(1, 2)
        k = k.view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v(x).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        if self.qk_norm == "per_head":
            q, k = self.q_norm(q), self.k_norm(k)
        if self.rope:
            cos, sin = rope_tables(s, self.head_dim, x.device, self.rope_theta)
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        y = self.core(q, k, v)
        return self.o(y.transpose(1, 2).reshape(b, s, -1))


class Mlp(nn.Module):
    def __init__(self, spec: ModelSpec, width: int | None = None):
        """`width`: the hidden width (default ffn; an expert's: planner/moe.py expert_ffn, shared_ffn)."""
        super().__init__()
        h, f = spec.hidden, width or spec.ffn
        self.swiglu = spec.mlp == "swiglu"
        if self.swiglu:  # Shazeer 2020: down(silu(gate x) * up x)
            self.gate = nn.Linear(h, f, bias=spec.bias)
        self.up = nn.Linear(h, f, bias=spec.bias)
        self.down = nn.Linear(f, h, bias=spec.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.swiglu:
            return self.down(F.silu(self.gate(x)) * self.up(x))
        return self.down(F.gelu(self.up(x)))


class Block(nn.Module):
    """Pre-norm block; `spec.norms_per_layer` 4 adds post-norms (Gemma 2/3). `spec.parallel_block`
    runs attention and MLP on the same input, on one norm (Falcon-7B, GPT-J) or two (GPT-NeoX)."""

    def __init__(self, spec: ModelSpec, attention: str, low_precision_norm: bool, layer: int = 0,
                 moe_aux_loss_coef: float = 0.0):
        """`layer`: this block's index (0-based), which decides whether it is local (planner/attn_window.py) and MoE
        (planner/moe.py moe_layer_mask)."""
        super().__init__()
        if spec.norms_per_layer not in (1, 2, 4):
            raise ValueError(f"{spec.norms_per_layer} norms per layer are not implemented by the bundled trainer")
        self.parallel = spec.parallel_block
        self.norm1 = make_norm(spec, low_precision_norm)
        self.attn = Attention(spec, attention, local=bool(attn_window.local_layer_mask(spec)[layer]))
        self.norm2 = None if spec.norms_per_layer == 1 else make_norm(spec, low_precision_norm)
        if moe.moe_layer_mask(spec)[layer]:
            from trainer.moe import MoeMlp

            self.mlp = MoeMlp(spec, moe_aux_loss_coef)
        else:
            self.mlp = Mlp(spec)
        post = spec.norms_per_layer == 4
        self.post_attn_norm = make_norm(spec, low_precision_norm) if post else None
        self.post_mlp_norm = make_norm(spec, low_precision_norm) if post else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.parallel:
            y = self.norm1(x)
            return x + self.attn(y) + self.mlp(y if self.norm2 is None else self.norm2(x))
        a = self.attn(self.norm1(x))
        x = x + (a if self.post_attn_norm is None else self.post_attn_norm(a))
        m = self.mlp(self.norm2(x))
        return x + (m if self.post_mlp_norm is None else self.post_mlp_norm(m))


class GPT(nn.Module):
    """Pre-norm decoder-only transformer with exactly `spec.n_params` parameters."""

    def __init__(self, spec: ModelSpec, attention: str = "flash", low_precision_norm: bool = False,
                 moe_aux_loss_coef: float = 0.0):
        """`moe_aux_loss_coef`: the load-balancing loss's weight (trainer/moe.py), read by `aux_loss` after a
        forward."""
        super().__init__()
        self.spec = spec
        v, h = spec.vocab_padded, spec.hidden
        self.embed = nn.Embedding(v, h)
        self.pos = nn.Embedding(spec.max_positions, h) if spec.position == "learned" else None
        if spec.position == "alibi":
            raise ValueError("alibi positions are not implemented by the bundled trainer")
        self.embed_norm = make_norm(spec, low_precision_norm) if spec.embedding_norm else None
        self.blocks = nn.ModuleList(Block(spec, attention, low_precision_norm, i, moe_aux_loss_coef)
                                    for i in range(spec.n_layers))
        # the MoE MLPs, held outside the module tree (they are the blocks' own; wrappers keep these objects)
        self._moe_mlps = tuple(b.mlp for b in self.blocks if not isinstance(b.mlp, Mlp))
        self.norm = make_norm(spec, low_precision_norm)
        self.head = None if spec.tied_embeddings else nn.Linear(h, v, bias=False)
        self.apply(_init)
        assert sum(p.numel() for p in self.parameters()) == spec.n_params, "GPT and ModelSpec disagree"

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens (B, S) -> logits (B, S, vocab_padded)."""
        x = self.embed_tokens(tokens)
        for block in self.blocks:
            x = block(x)
        return self.output_logits(x)

    def aux_loss(self) -> torch.Tensor | None:
        """The MoE layers' load-balancing loss of the last forward, their mean x the coefficient (None: dense, or
        no coefficient): what a training loss adds (trainer/moe.py)."""
        losses = [m.aux for m in self._moe_mlps if m.aux is not None]
        return sum(losses) / len(losses) if losses else None

    # The two ends of the network. They read only `embed`, `pos`, `embed_norm` (input) and
    # `norm`, `head`, `embed` (output), so a module holding just those parts can run them.
    def embed_tokens(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        if self.pos is not None:
            x = x + self.pos(torch.arange(tokens.shape[1], device=tokens.device))
        if self.embed_norm is not None:
            x = self.embed_norm(x)
        return x

    def output_logits(self, x: torch.Tensor) -> torch.Tensor:
        x = self.norm(x)
        weight = self.embed.weight if self.head is None else self.head.weight
        return F.linear(x, weight)


def _init(m: nn.Module) -> None:
    if isinstance(m, (nn.Linear, nn.Embedding)):
        nn.init.normal_(m.weight, std=0.02)
    if isinstance(m, nn.Linear) and m.bias is not None:
        nn.init.zeros_(m.bias)


def loss_fn(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.reshape(-1))


def training_loss(model: nn.Module, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """The cross entropy plus `model`'s MoE load-balancing loss (Hugging Face MixtralForCausalLM: loss +=
    router_aux_loss_coef x aux_loss) where it has one; `model` is the GPT under any wrapper."""
    loss = loss_fn(logits, targets)
    aux = model.aux_loss() if isinstance(model, GPT) else None
    return loss if aux is None else loss + aux
