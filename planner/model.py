"""Model shapes: `ModelSpec` and its exact parameter count.

One `ModelSpec` builds both the trainer's model and the planner's numbers, so a measured run
and its prediction always describe the same model. Nothing here knows about parallelism.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from planner import bounds as B
from planner.units import format_params

Mlp = Literal["gelu", "swiglu"]
Norm = Literal["layernorm", "rmsnorm", "nonparametric"]
Position = Literal["learned", "rope", "alibi", "none"]  # none: no position encoding (Mamba: the recurrence orders tokens)
QkNorm = Literal["none", "per_head", "full"]
# The LLaMA block (Touvron et al. 2023, arXiv 2302.13971, sec. 2.2): SwiGLU MLP, RMSNorm, rotary
# positions; untied embeddings and no biases as in its released configs.
ROPE_THETA_DEFAULT = 10000.0  # RoFormer's base (Su et al. 2021, arXiv 2104.09864 sec. 3.2.2), transformers' default
LLAMA_BLOCK = dict(mlp="swiglu", norm="rmsnorm", position="rope", tied_embeddings=False, bias=False)


def round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


class ModelSpec(BaseModel):
    """A decoder-only transformer, described by its shapes.

    `vocab` is the tokenizer's vocabulary; the embedding has `vocab_padded` rows, `vocab`
    rounded up to `vocab_multiple` (seed 000: 50257 -> 50304 with 128 gave ~11% speed-up).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = "custom"
    family: str = "gpt"
    # Upper bounds are far beyond any real model; they keep nonsense input from exhausting memory.
    n_layers: Annotated[int, B.model_size(10_000)] = Field(gt=0)
    hidden: Annotated[int, B.model_size(1_000_000)] = Field(gt=0)
    n_heads: Annotated[int, B.model_size(100_000)] = Field(gt=0)
    n_kv_heads: Annotated[int, Field(gt=0), B.model_size(100_000)] | None = Field(default=None)  # None: = n_heads (no GQA)
    ffn_hidden: Annotated[int, Field(gt=0), B.model_size(10_000_000)] | None = Field(default=None)  # None: 4 * hidden
    vocab: Annotated[int, B.model_size(100_000_000)] = Field(gt=0)
    vocab_multiple: Annotated[int, B.model_size(1_000_000)] = Field(default=1, gt=0)
    max_positions: Annotated[int, B.model_size(100_000_000)] = Field(default=2048, gt=0)
    # The context it was pretrained at, where it is below max_positions (a RoPE-scaled model: Llama 3.1/4's
    # rope_scaling original_max_position_embeddings, gpt-oss's initial_context_length): the default seq_len.
    train_seq_len: Annotated[int, Field(gt=0), B.model_size(100_000_000)] | None = Field(default=None)
    mlp: Mlp = "gelu"
    norm: Norm = "layernorm"
    position: Position = "learned"
    tied_embeddings: bool = True
    bias: bool = True  # biases on the linear layers
    embedding_norm: bool = False  # BLOOM's word_embeddings_layernorm
    norm_bias: bool = True  # LayerNorm has a bias (MPT with no_bias=True: weight only); False for any other norm
    # Family differences read from Hugging Face configs (defaults: the classic GPT/LLaMA block).
    attn_head_dim: Annotated[int, Field(gt=0), B.model_size(100_000)] | None = Field(default=None)  # None: hidden / n_heads (Gemma: 256)
    qkv_bias: bool | None = None  # biases on q/k/v only; None: as `bias` (Qwen2: True with bias False)
    norms_per_layer: Annotated[int, B.model_size(8)] = Field(default=2, ge=0)  # Gemma 2/3: 4 (post-norms); Falcon-7B: 1
    qk_norm: QkNorm = "none"  # RMSNorm on queries and keys: per head (Gemma 3, Qwen3) or full width (OLMo 2)
    # y = x + attn(norm(x)) + mlp(norm'(x)) (GPT-J, GPT-NeoX, PaLM, Falcon): planner/parallel_block.py.
    # Given norms_per_layer 1 and left out, it is True (one norm feeds both: nothing else has one).
    parallel_block: bool = False
    # Sliding-window (local) attention: each query sees its last `attn_window` keys (Mistral-7B-v0.1
    # sliding_window 4096) on `attn_local_layers` of the layers (None: all; Gemma 2: every other
    # layer, Gemma 3: 5 of 6), full causal attention on the others: planner/attn_window.py.
    attn_window: Annotated[int, Field(gt=0), B.model_size(100_000_000)] | None = Field(default=None)
    attn_local_layers: Annotated[int, Field(ge=0), B.model_size(10_000)] | None = Field(default=None)
    # Chunked local attention instead of a sliding window (Llama 4: attention_chunk_size 8192): the
    # sequence is cut into blocks of `attn_window` tokens and a query sees the keys of its own block only.
    attn_chunked: bool = False
    # gpt-oss's learnable attention sinks: one logit per head joins each softmax's denominator (transformers
    # GptOssAttention.sinks); n_heads parameters per layer, left out of n_params (0.002%): exports only.
    attn_sinks: bool = False
    # RoPE scaling to reach max_positions (HF rope_scaling: "yarn", Peng et al. 2023 arXiv 2309.00071, with
    # its factor and, in DeepSeek-V2/V3, the attention scales mscale / mscale_all_dim; "llama3", Llama 3.1/4's
    # frequency-band rule; None: plain RoPE): no shape nor FLOP, exports only (planner/exports/rope_settings.py).
    rope_scaling: Literal["yarn", "llama3"] | None = None
    # RoPE base theta (Su et al. 2021, arXiv 2104.09864 sec. 3.2.2: frequency i of a head of d is theta^(-2i/d); HF
    # config.json rope_theta): Llama 3 500000, Qwen2/3 1000000; a RoPE model without it takes RoFormer's 10000,
    # other positions none. No shape nor FLOP: the trainer's rotary tables and the exports (Megatron --rotary-base).
    rope_theta: float | None = Field(default=None, gt=0, le=1e12)
    rope_scaling_factor: float | None = Field(default=None, gt=0, le=1_000_000)
    yarn_mscale: float | None = Field(default=None, ge=0, le=1_000)
    yarn_mscale_all_dim: float | None = Field(default=None, ge=0, le=1_000)
    # Mixture of experts (planner/moe.py; 0 routed experts: a dense model). In an MoE layer the MLP is
    # `moe_experts` routed experts of width `moe_ffn_hidden`, `moe_top_k` of them per token, chosen by
    # a router (a hidden x experts linear), plus `moe_shared_experts` always-on experts of width
    # `moe_shared_ffn_hidden`; each expert is an MLP of the model's `mlp` form. The other layers are
    # dense (MLP of `ffn_hidden`). Hugging Face spellings: num_local_experts / num_experts /
    # n_routed_experts, num_experts_per_tok, moe_intermediate_size, n_shared_experts (DeepSeek) or
    # one shared expert of shared_expert_intermediate_size (Qwen2-MoE).
    moe_experts: Annotated[int, B.model_size(1_000_000)] = Field(default=0, ge=0)  # routed experts per MoE layer
    moe_top_k: Annotated[int, B.model_size(1_000_000)] = Field(default=0, ge=0)  # routed experts per token
    moe_ffn_hidden: Annotated[int, Field(gt=0), B.model_size(10_000_000)] | None = Field(default=None)  # one routed expert's width; None: ffn
    moe_shared_experts: Annotated[int, B.model_size(1024)] = Field(default=0, ge=0)  # always-on experts per MoE layer
    moe_shared_ffn_hidden: Annotated[int, Field(gt=0), B.model_size(10_000_000)] | None = Field(default=None)  # one shared expert's width; None: moe_ffn
    # Which layers are MoE: layer i (0-based) when i >= moe_first_dense_layers and (i + 1) % moe_layer_freq
    # == 0 (Qwen2-MoE decoder_sparse_step; DeepSeek first_k_dense_replace; DeepSeek's own moe_layer_freq
    # counts from 0, the same for its only value 1).
    moe_layer_freq: Annotated[int, B.model_size(10_000)] = Field(default=1, ge=1)
    moe_first_dense_layers: Annotated[int, B.model_size(10_000)] = Field(default=0, ge=0)
    # Router weights of a token's top-k experts renormalised to sum to 1 (HF norm_topk_prob; Mixtral always,
    # Qwen3-30B-A3B true) or left as the softmax over all experts gave them (Qwen2-MoE, OLMoE): no shape nor FLOP.
    moe_norm_topk_prob: bool = True
    # Multi-head latent attention (planner/mla.py; kv_lora_rank None: standard attention): K/V compressed
    # to a latent of kv_lora_rank (and queries to q_lora_rank; None: one q projection, DeepSeek-V2-Lite),
    # query/key heads of qk_nope_head_dim + qk_rope_head_dim, value heads of v_head_dim.
    q_lora_rank: Annotated[int, Field(gt=0), B.model_size(1_000_000)] | None = Field(default=None)
    kv_lora_rank: Annotated[int, Field(gt=0), B.model_size(1_000_000)] | None = Field(default=None)
    qk_nope_head_dim: Annotated[int, Field(gt=0), B.model_size(100_000)] | None = Field(default=None)
    qk_rope_head_dim: Annotated[int, Field(ge=0), B.model_size(100_000)] | None = Field(default=None)
    v_head_dim: Annotated[int, Field(gt=0), B.model_size(100_000)] | None = Field(default=None)
    # DeepSeek-V3's multi-token prediction modules (num_nextn_predict_layers): counted apart from
    # n_params and the model FLOPs, as the V3 report counts them (planner/mtp.py).
    mtp_layers: Annotated[int, B.model_size(64)] = Field(default=0, ge=0)
    # State-space (Mamba) and hybrid stacks (planner/ssm.py). `layer_pattern`: one character per layer as
    # Nemotron-H's hybrid_override_pattern (M a Mamba mixer, * attention, - an MLP; each with one pre-norm);
    # None: every layer is the transformer block above. The ssm_* fields shape the Mamba mixer (None:
    # mamba_ssm's defaults): version 1 (Gu & Dao 2023) or 2 (Dao & Gu 2024), d_state, d_inner (2 x hidden),
    # conv kernel (4), Mamba-2 head dim (64) and groups (1), Mamba-1 dt rank (ceil(hidden / 16)), and
    # Jamba's RMSNorms on dt, B and C.
    layer_pattern: str | None = Field(default=None, min_length=1, max_length=10_000)
    ssm_version: Literal[1, 2] | None = None
    ssm_state_size: Annotated[int, Field(gt=0), B.model_size(100_000)] | None = Field(default=None)
    ssm_inner: Annotated[int, Field(gt=0), B.model_size(10_000_000)] | None = Field(default=None)
    ssm_conv_kernel: Annotated[int, Field(gt=0), B.model_size(1024)] | None = Field(default=None)
    ssm_head_dim: Annotated[int, Field(gt=0), B.model_size(100_000)] | None = Field(default=None)
    ssm_groups: Annotated[int, Field(gt=0), B.model_size(100_000)] | None = Field(default=None)
    ssm_dt_rank: Annotated[int, Field(gt=0), B.model_size(1_000_000)] | None = Field(default=None)
    ssm_dt_bc_norms: bool = False
    published_params: int | None = None  # the count the model's authors publish, for tests
    source: str | None = None  # where the shape comes from (config file, paper, rule)

    @model_validator(mode="before")
    @classmethod
    def _one_norm_is_parallel(cls, data):
        if isinstance(data, dict) and data.get("norms_per_layer") == 1 and data.get("parallel_block") is None:
            data = {**data, "parallel_block": True}
        if isinstance(data, dict) and data.get("position") == "rope" and data.get("rope_theta") is None:
            data = {**data, "rope_theta": ROPE_THETA_DEFAULT}
        # a norm bias exists only on a LayerNorm (RMSNorm, Zhang & Sennrich 2019, has a weight only)
        if isinstance(data, dict) and data.get("norm", "layernorm") != "layernorm" and data.get("norm_bias", True):
            data = {**data, "norm_bias": False}
        return data

    @model_validator(mode="after")
    def _check(self) -> "ModelSpec":
        if self.norms_per_layer == 1 and not self.parallel_block:
            raise ValueError("norms_per_layer 1 needs parallel_block (a sequential block has a norm before "
                             "attention and one before the MLP)")
        if self.parallel_block and self.norms_per_layer > 2:
            raise ValueError(f"parallel_block with {self.norms_per_layer} norms per layer is not modelled (1 or 2)")
        if self.attn_head_dim is None and self.hidden % self.n_heads:
            raise ValueError(f"hidden ({self.hidden}) must be divisible by n_heads ({self.n_heads})")
        if self.attn_local_layers is not None and self.attn_window is None:
            raise ValueError("attn_local_layers needs attn_window (the window of the local layers)")
        if self.attn_chunked and self.attn_window is None:
            raise ValueError("attn_chunked needs attn_window (the chunk of the local layers)")
        if self.attn_local_layers is not None and self.attn_local_layers > self.n_layers:
            raise ValueError(f"attn_local_layers ({self.attn_local_layers}) exceeds n_layers ({self.n_layers})")
        if (self.rope_scaling is None) != (self.rope_scaling_factor is None):
            raise ValueError("rope_scaling and rope_scaling_factor go together (a scaling type and its factor)")
        if self.rope_theta is not None and self.position != "rope":
            raise ValueError(f"rope_theta needs position rope (got {self.position})")
        if self.rope_scaling is not None and self.position != "rope":
            raise ValueError(f"rope_scaling needs position rope (got {self.position})")
        if self.n_heads % self.kv_heads:
            raise ValueError(f"n_heads ({self.n_heads}) must be divisible by n_kv_heads ({self.kv_heads})")
        from planner import mla
        from planner.moe import check_spec  # it reads this model's fields

        mla.check_spec(self)
        check_spec(self)
        from planner import ssm

        ssm.check_spec(self)
        return self

    # ---- derived shapes -------------------------------------------------------------
    @property
    def kv_heads(self) -> int:
        return self.n_kv_heads or self.n_heads

    @property
    def ffn(self) -> int:
        return self.ffn_hidden or 4 * self.hidden

    @property
    def head_dim(self) -> int:
        """Query/key head dim (multi-head latent attention: qk_nope_head_dim + qk_rope_head_dim)."""
        if self.kv_lora_rank is not None:
            return self.qk_nope_head_dim + self.qk_rope_head_dim
        return self.attn_head_dim or self.hidden // self.n_heads

    @property
    def q_dim(self) -> int:
        """Width of the queries (and of the attention output): hidden, unless head_dim says otherwise."""
        return self.n_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        if self.kv_lora_rank is not None:  # the mean of the decompressed K and V widths (planner/mla.py)
            from planner import mla

            return mla.kv_dim(self)
        return self.kv_heads * self.head_dim

    @property
    def vocab_padded(self) -> int:
        return round_up(self.vocab, self.vocab_multiple)

    # ---- parameter counts -------------------------------------------------------------
    def layer_param_shapes(self) -> list[tuple[int, ...]]:
        """Shapes of one transformer block's parameters (weights as (out, in))."""
        h, f, kv, q = self.hidden, self.ffn, self.kv_dim, self.q_dim
        shapes: list[tuple[int, ...]] = [(q, h), (kv, h), (kv, h), (h, q)]  # q, k, v, o
        if self.kv_lora_rank is not None:  # multi-head latent attention
            from planner import mla

            shapes = mla.attention_param_shapes(self)
        if self.mlp == "swiglu":
            shapes += [(f, h), (f, h), (h, f)]  # gate, up, down
        else:
            shapes += [(f, h), (h, f)]  # fc1, fc2
        if self.bias if self.qkv_bias is None else self.qkv_bias:
            shapes += [(q,), (kv,), (kv,)]
        if self.bias:
            shapes += [(h,)]  # o
            shapes += [(f,), (f,), (h,)] if self.mlp == "swiglu" else [(f,), (h,)]
        shapes += self._norm_shapes() * self.norms_per_layer
        if self.qk_norm == "per_head":
            shapes += [(self.head_dim,), (self.head_dim,)]
        elif self.qk_norm == "full":
            shapes += [(q,), (kv,)]
        return shapes

    def _norm_shapes(self) -> list[tuple[int, ...]]:
        if self.norm == "nonparametric":  # OLMo-1: LayerNorm without weight or bias
            return []
        if self.norm == "rmsnorm":
            return [(self.hidden,)]
        return [(self.hidden,), (self.hidden,)] if self.norm_bias else [(self.hidden,)]

    def other_param_shapes(self) -> list[tuple[int, ...]]:
        """Embeddings, final norm and output head."""
        shapes: list[tuple[int, ...]] = [(self.vocab_padded, self.hidden)]
        if self.position == "learned":
            shapes.append((self.max_positions, self.hidden))
        if self.embedding_norm:
            shapes += self._norm_shapes()
        shapes += self._norm_shapes()
        if not self.tied_embeddings:
            shapes.append((self.vocab_padded, self.hidden))
        return shapes

    @property
    def params_per_layer(self) -> int:
        """One block's parameters (a hybrid stack: its layers' mean, planner/ssm.py)."""
        if self.layer_pattern is not None:
            from planner import ssm

            return ssm.mean_layer_params(self)
        return sum(_numel(s) for s in self.layer_param_shapes())

    @property
    def embedding_params(self) -> int:
        """Parameters outside the blocks (embeddings, positions, final norm, head)."""
        return sum(_numel(s) for s in self.other_param_shapes())

    @property
    def n_params(self) -> int:
        """Exact parameter count.

        For GPT-2 shapes this is seed 002's formula l*(12h^2 + 13h) + v*h + s*h + 2h.
        """
        if self.layer_pattern is not None:  # every layer of the pattern, exactly (planner/ssm.py)
            from planner import ssm

            return ssm.layers_params(self) + self.embedding_params + self._moe_params_delta
        return self.n_layers * self.params_per_layer + self.embedding_params + self._moe_params_delta

    @property
    def _moe_params_delta(self) -> int:
        """What the MoE layers' MLPs (router, routed and shared experts) hold beyond the dense MLP
        that `params_per_layer` counts (planner/moe.py; 0 for a dense model)."""
        if not self.moe_experts:
            return 0
        from planner import moe

        return moe.params_delta(self)

    @property
    def largest_layer_params(self) -> int:
        """Largest FSDP unit: one block (FSDP wraps each block), or the root's embedding."""
        block = self.params_per_layer
        if self.layer_pattern is not None:
            from planner import ssm

            block = ssm.largest_layer_params(self)
        emb = self.vocab_padded * self.hidden
        return max(block, emb)

    @property
    def largest_module_params(self) -> int:
        """Largest module holding parameters of its own, what ZeRO-3 gathers at once.

        DeepSpeed fetches and releases each submodule's direct parameters in its forward and
        backward hooks, and sizes "largest_layer_params" the same way in its estimators
        (deepspeed/runtime/zero/stage3.py `model_to_params`: max over modules of
        `sum(p.numel() for p in m.parameters(recurse=False))`): the embedding or one linear,
        not a whole block. Linears counted fused where implementations fuse them (q, k and v in
        GPT-2, Megatron-LM and BLOOM), so the bound holds for either form."""
        h, f, q = self.hidden, self.ffn, self.q_dim
        bias = int(self.bias)
        qkv = q + 2 * self.kv_dim
        linears = [qkv * (h + int(self.bias if self.qkv_bias is None else self.qkv_bias)),  # q, k, v fused
                   h * (q + bias), f * (h + bias), h * (f + bias)]  # o, up (and gate), down
        if self.kv_lora_rank is not None:  # multi-head latent attention: its own linears (planner/mla.py)
            from planner import mla

            linears = [lin.out * lin.inp for lin in mla.linears(self)] + linears[2:]
        if self.layer_pattern is not None:
            from planner import ssm

            linears.append(ssm.largest_module_params(self))
        return max(self.vocab_padded * h, self.max_positions * h, *linears)

    def describe(self) -> str:
        gqa = f", {self.kv_heads} kv heads" if self.kv_heads != self.n_heads else ""
        par = ", parallel attention+MLP" if self.parallel_block else ""
        from planner.attn_window import describe as window

        if self.kv_lora_rank is not None:
            from planner import mla

            gqa = mla.describe(self)
        from planner import ssm

        if self.moe_experts:
            from planner import moe

            return moe.describe(self, gqa + window(self)) + ssm.describe(self)
        return (
            f"{self.name}: {format_params(self.n_params)} params, {self.n_layers} layers x "
            f"{self.hidden} hidden, {self.n_heads} heads{gqa}{window(self)}, ffn {self.ffn} ({self.mlp}{par}), "
            f"vocab {self.vocab_padded}"
        ) + ssm.describe(self)


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n
