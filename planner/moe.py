"""Mixture-of-experts (MoE) shapes: which layers are MoE, exact total and active parameter counts,
model FLOPs per token, and the dense "active view" the rest of the planner computes on.

An MoE layer replaces the block's MLP by a router (a hidden x experts linear, no bias: Mixtral,
OLMoE, Qwen3-MoE, DeepSeek), `moe_experts` routed experts of which each token runs `moe_top_k`
(Shazeer et al. 2017; Fedus et al. 2022, Switch Transformer), and `moe_shared_experts` experts every
token runs (DeepSeekMoE, Dai et al. 2024, arXiv 2401.06066). Every expert is an MLP of the model's
`mlp` form (SwiGLU: gate, up, down). Not modelled: Qwen2-MoE's shared-expert gate (a 1 x hidden
linear, 0.0003% of Qwen1.5-MoE-A2.7B) and DeepSeek-V3's per-expert score-correction bias.

The active view (`dense_view`): the same model with every layer's MLP as wide as what one token
runs through it (top-k routed + shared experts, averaged over the layers); its GEMM FLOPs per token,
activations and TP traffic are the MoE model's. planner/moe_memory.py and planner/moe_time.py add
what the view does not hold: the inactive experts' states sharded over expert parallelism, the
grouped expert GEMMs' small shapes, the token all-to-alls and the expert-gradient reduction.

Model FLOPs (MFU) convention: the ACTIVE parameters (6 x active matrix parameters per token, the
router included, plus the attention core), as Megatron-Core's MoE FLOPs count
(megatron/training/training.py num_floating_point_operations: `moe_router_topk` experts per token)
and the DeepSeek-V3 / Mixtral reports quote; the inactive experts cost no FLOPs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from planner.model import ModelSpec

FLOPS_CONVENTION = ("model FLOPs per token = 6 x ACTIVE parameters (top-k routed + shared experts, routers, "
                    "attention and output projections) + the attention core; inactive experts cost none")
MOE_FIELDS = ("moe_experts", "moe_top_k", "moe_ffn_hidden", "moe_shared_experts", "moe_shared_ffn_hidden",
              "moe_layer_freq", "moe_first_dense_layers")
DENSE = {"moe_experts": 0, "moe_top_k": 0, "moe_ffn_hidden": None, "moe_shared_experts": 0,
         "moe_shared_ffn_hidden": None, "moe_layer_freq": 1, "moe_first_dense_layers": 0}


def is_moe(spec: "ModelSpec") -> bool:
    return spec.moe_experts > 0


def check_spec(spec: "ModelSpec") -> None:
    """One-line errors naming the field (ModelSpec's validator raises them as ValueError)."""
    if not is_moe(spec):
        given = [k for k in MOE_FIELDS if getattr(spec, k) != DENSE[k]]
        if given:
            raise ValueError(f"{given[0]} needs moe_experts > 0 (a mixture-of-experts model)")
        return
    if not 1 <= spec.moe_top_k <= spec.moe_experts:
        raise ValueError(f"moe_top_k ({spec.moe_top_k}) must be between 1 and moe_experts ({spec.moe_experts})")
    if n_moe_layers(spec) == 0:
        raise ValueError(f"moe_first_dense_layers ({spec.moe_first_dense_layers}) and moe_layer_freq "
                         f"({spec.moe_layer_freq}) leave no MoE layer among the {spec.n_layers}")


def moe_layer_mask(spec: "ModelSpec") -> np.ndarray:
    """True for each MoE layer (0-based i >= moe_first_dense_layers and (i + 1) % moe_layer_freq == 0)."""
    i = np.arange(spec.n_layers)
    if not is_moe(spec):
        return np.zeros(spec.n_layers, dtype=bool)
    return (i >= spec.moe_first_dense_layers) & ((i + 1) % spec.moe_layer_freq == 0)


def n_moe_layers(spec: "ModelSpec") -> int:
    return int(moe_layer_mask(spec).sum())


def expert_ffn(spec: "ModelSpec") -> int:
    return spec.moe_ffn_hidden or spec.ffn


def shared_ffn(spec: "ModelSpec") -> int:
    return spec.moe_shared_ffn_hidden or expert_ffn(spec)


def mlp_matrices(spec: "ModelSpec") -> int:
    return 3 if spec.mlp == "swiglu" else 2


def mlp_params(spec: "ModelSpec", width: int) -> int:
    """One MLP of `width` (the MLP part of ModelSpec.layer_param_shapes, biases included)."""
    h, mats = spec.hidden, mlp_matrices(spec)
    biases = (mats - 1) * width + h if spec.bias else 0
    return mats * h * width + biases


def router_params(spec: "ModelSpec") -> int:
    return spec.moe_experts * spec.hidden


def moe_mlp_params(spec: "ModelSpec") -> int:
    """One MoE layer's MLP: router, every routed expert, the shared experts."""
    return (router_params(spec) + spec.moe_experts * mlp_params(spec, expert_ffn(spec))
            + spec.moe_shared_experts * mlp_params(spec, shared_ffn(spec)))


def params_delta(spec: "ModelSpec") -> int:
    """MoE layers' MLP parameters beyond the dense MLP that ModelSpec.params_per_layer counts."""
    return n_moe_layers(spec) * (moe_mlp_params(spec) - mlp_params(spec, spec.ffn))


def routed_expert_params(spec: "ModelSpec") -> int:
    """Every routed expert of the model: what expert parallelism shards."""
    return n_moe_layers(spec) * spec.moe_experts * mlp_params(spec, expert_ffn(spec))


def active_params(spec: "ModelSpec") -> int:
    """Parameters one token runs through (embeddings included, as Mixtral's 12.9B and Qwen3's 3.3B
    count them): the total less the routed experts it does not run."""
    idle = spec.moe_experts - spec.moe_top_k
    return spec.n_params - n_moe_layers(spec) * idle * mlp_params(spec, expert_ffn(spec))


def active_ffn_per_layer(spec: "ModelSpec") -> np.ndarray:
    """The MLP width one token runs through, layer by layer (dense: ffn; MoE: top-k + shared)."""
    moe_w = spec.moe_top_k * expert_ffn(spec) + spec.moe_shared_experts * shared_ffn(spec)
    return np.where(moe_layer_mask(spec), moe_w, spec.ffn)


def dense_view(spec: "ModelSpec") -> "ModelSpec":
    """The dense model the planner's dense terms compute on: every layer's MLP as wide as a token's
    active MLP width averaged over the layers (the spec itself for a dense model)."""
    if not is_moe(spec):
        return spec
    from planner.model import ModelSpec

    from planner import ssm  # a hybrid stack: averaged over its MLP layers only (planner/ssm.py)

    width = max(int(round(float(active_ffn_per_layer(spec)[ssm.mlp_mask(spec)].mean()))), 1)
    fields = {**spec.model_dump(), **DENSE, "ffn_hidden": width, "published_params": None,
              "name": f"{spec.name} (active view)"}
    return ModelSpec(**fields)


def router_forward_flops_per_token(spec: "ModelSpec") -> float:
    """The router GEMM of every MoE layer, forward: 2 x hidden x experts per token and layer."""
    return 2.0 * n_moe_layers(spec) * spec.hidden * spec.moe_experts


def model_flops_per_token(spec: "ModelSpec", seq_len) -> np.ndarray:
    """Training FLOPs per token of an MoE model: 3 x forward, the forward counting the attention
    projections and core of every block, each layer's ACTIVE MLP (top-k routed + shared experts, or
    the dense MLP), the routers and the logits (planner/flops.py's conventions otherwise)."""
    from planner import flops

    h = spec.hidden
    proj = flops.attention_projection_flops_per_token(spec)
    attn = spec.n_layers * (proj + flops.attention_core_forward_flops_per_token(spec, seq_len))
    mlp = 2.0 * h * mlp_matrices(spec) * float(active_ffn_per_layer(spec).sum())
    fwd = attn + mlp + router_forward_flops_per_token(spec) + flops.logits_forward_flops_per_token(spec)
    return 3.0 * fwd


def describe(spec: "ModelSpec", gqa: str) -> str:
    from planner.units import format_params

    shared = f" + {spec.moe_shared_experts} shared" if spec.moe_shared_experts else ""
    layers = "" if n_moe_layers(spec) == spec.n_layers else f" in {n_moe_layers(spec)} of the layers"
    return (f"{spec.name}: {format_params(spec.n_params)} params ({format_params(active_params(spec))} active, "
            f"embeddings included), "
            f"{spec.n_layers} layers x {spec.hidden} hidden, {spec.n_heads} heads{gqa}, {spec.moe_experts} experts "
            f"(top-{spec.moe_top_k}{shared}) of ffn {expert_ffn(spec)} ({spec.mlp}){layers}, vocab {spec.vocab_padded}")
