"""DeepSpeed ZeRO-3: the parameter fetches and gradient reduce-scatter of one micro batch.

DeepSpeed's ZeRO-3 (runtime/zero/partitioned_param_coordinator.py) all-gathers a submodule's
parameters just before the submodule runs and releases them right after, unless the trace shows
the same parameter used again within `stage3_max_reuse_distance` parameters (the planner exports
`stage3_max_live_params` for it; 1e9 by default). Parameters below
`stage3_param_persistence_threshold` (10 x hidden with the HF "auto" config, as the planner
exports) stay resident and are never gathered: biases and norms. Per micro batch that makes
(Rajbhandari et al. SC20 sec. 7; ZeRO++, Wang et al. 2023, sec. 2: forward all-gather M,
backward all-gather M, gradient reduce-scatter M):
- block weights: gathered in forward and again in backward. With activation recompute the
  recompute forward gathers them and the block's backward, one block later, reuses them (the HF
  DeepSpeed guide on stage3_max_reuse_distance: "super helpful when you have activation
  checkpointing enabled, where we do a forward recompute and backward passes a single layer
  granularity and want to keep the parameter in the forward recompute till the backward").
  With a reuse distance shorter than one block the backward gathers a third time.
- the embedding and the output layer (tied or not): the input embedding is gathered in forward
  and again for its backward (all blocks lie in between both times); the output layer is
  gathered in forward (a tied one again, the embedding having been released) and kept for its
  backward, which follows at once: three vocabulary-sized gathers per micro batch.
- one reduce-scatter of the gradients.
Each fetch is one all-gather call (coalesced over the submodule's weights): its latency is paid
per weight matrix, not per block.

Mixture-of-experts layers (`moe_spec`, `spec` its active view): ZeRO-3 gathers every local expert's weights,
not the view's top-k share, for forward and backward, and reduce-scatters all of their gradients (the expert
term of planner/moe_time.py leaves ZeRO-3 plans to this module). The router is one more fetch where it is above
the persistence threshold, each shared expert one per projection, and the routed experts as many fetches as the
stack keeps modules for them (`routed_expert_fetches`): DeepSpeed gathers a submodule's own parameters in one
all_gather_coalesced (runtime/zero/partitioned_param_coordinator.py fetch_sub_module / __all_gather_params_); a
stack that marks the MoE block a ZeRO-3 leaf module (`LEAF_BLOCK_STACKS`: hf) fetches the whole block at once.

Overlap: the prefetch gathers the next submodule while the current one computes, so a pass
hides at most the stack's overlap share of its compute time, in seconds as they really are:
exposed = max(c * T - overlap * compute, c * T / fetches), c the stack's comm_time_factor (the
collectives run c times slower than the catalog links); `exposed_s` returns it (the profile fit takes
its slope in c: planner/dp_exposure.py).
"""

from __future__ import annotations

import numpy as np

from planner import flops, moe
from planner.comm import Group
from planner.layout import STACK
from planner.model import ModelSpec

# stage3_param_persistence_threshold that HF's "auto" DeepSpeed config sets, and that
# planner/exports/deepspeed_json.py writes: 10 x hidden.
PERSISTENCE_THRESHOLD_PER_HIDDEN = 10


def _gathered_weights(spec: ModelSpec) -> list[int]:
    """Element counts of one block's parameters that ZeRO-3 gathers (above the persistence
    threshold): the weight matrices. Each nn.Linear is its own submodule and fetch (a fused QKV
    projection, as in GPT-2 and BLOOM, is one fetch where this counts three: an upper bound)."""
    limit = PERSISTENCE_THRESHOLD_PER_HIDDEN * spec.hidden
    sizes = [int(np.prod(s)) for s in spec.layer_param_shapes()]
    return [n for n in sizes if n > limit]


# How each stack keeps one MoE layer's routed experts, as fetches per layer (n: its local experts, m: an expert's
# projections, 3 with SwiGLU):
# - one module holding every expert's projections stacked: 1 fetch. The bundled trainer (trainer/experts.py
#   Experts: gate/up/down (E, out, in) parameters of one module) and torchtitan (torchtitan/models/moe/moe.py
#   GroupedExperts: w1, w2, w3 (E, ...) parameters of one module).
# - Megatron-Core with --moe-grouped-gemm (the export writes it for more than one local expert):
#   megatron/core/transformer/moe/experts.py TEGroupedMLP holds two modules, linear_fc1 (gate and up) and linear_fc2.
# - one module per expert: n x m fetches. DeepSpeed-MoE (deepspeed/moe/experts.py Experts: an nn.ModuleList of
#   deep copies of the expert, each of nn.Linear projections), Hugging Face transformers 4.x (modeling_mixtral.py
#   MixtralSparseMoeBlock.experts: an nn.ModuleList of MixtralBlockSparseTop2MLP with w1, w2, w3 nn.Linear), and
#   plain FSDP / a generic stack running such models.
STACKED_EXPERT_FETCHES = {"bundled": 1.0, "torchtitan": 1.0, "megatron": 2.0}

# Stacks whose whole MoE block (router, shared and routed experts) ZeRO-3 fetches as ONE leaf module. Hugging Face:
# a transformers MoE block whose experts are separate modules runs only the experts its tokens chose, so the ranks'
# fetch orders differ and ZeRO-3 hangs or re-traces (DeepSpeed PR #4966: "ZeRO3 does not work with MoE models because
# the order of executing modules can change at every forward/backward pass"); what runs marks the block a leaf with
# deepspeed.utils.set_z3_leaf_modules (deepspeed/utils/z3_leaf_module.py; the coordinator then gathers the leaf's
# parameters recursively in one fetch: runtime/zero/partitioned_param_coordinator.py `iter_params(sub_module,
# recurse=z3_leaf_module(sub_module))`), as accelerate does from `deepspeed_moe_layer_cls_names`
# (accelerate/utils/dataclasses.py DeepSpeedPlugin.set_moe_leaf_modules) and LLaMA-Factory for Mixtral/Qwen-MoE.
LEAF_BLOCK_STACKS = ("hf",)


def routed_expert_fetches(moe_spec: ModelSpec, layout) -> np.ndarray:
    """ZeRO-3 fetches of one MoE layer's routed experts on one GPU, by the plan's stack."""
    stack = np.asarray(layout.stack)
    local = moe_spec.moe_experts / np.maximum(np.asarray(layout.ep, dtype=np.float64), 1.0)
    per_expert = local * moe.mlp_matrices(moe_spec)
    return np.select([stack == STACK[s] for s in STACKED_EXPERT_FETCHES],
                     list(STACKED_EXPERT_FETCHES.values()), default=per_expert)


def block_calls(spec: ModelSpec, layout, moe_spec: ModelSpec | None = None):
    """All-gather calls of one block (averaged over the layers): one per gathered weight of `spec`; the
    MoE layers of `moe_spec` (`spec` its active view) with their router, shared experts and routed experts
    as fetched (module header)."""
    weights = _gathered_weights(spec)
    if moe_spec is None or not moe.is_moe(moe_spec):
        return float(len(weights))
    mats = moe.mlp_matrices(moe_spec)
    attention = len(weights) - mats  # the view's weights: attention, then its MLP's projections
    router = float(moe.router_params(moe_spec) > PERSISTENCE_THRESHOLD_PER_HIDDEN * moe_spec.hidden)
    moe_mlp = router + moe_spec.moe_shared_experts * mats + routed_expert_fetches(moe_spec, layout)
    leaf = np.isin(np.asarray(layout.stack), [STACK[s] for s in LEAF_BLOCK_STACKS])
    moe_mlp = np.where(leaf, 1.0, moe_mlp)  # the leaf MoE block: one fetch (LEAF_BLOCK_STACKS)
    share = moe.n_moe_layers(moe_spec) / moe_spec.n_layers
    return attention + (1.0 - share) * mats + share * moe_mlp


def leaf_block_params(moe_spec: ModelSpec, layout) -> np.ndarray:
    """Parameters one GPU gathers at once for a leaf MoE block (LEAF_BLOCK_STACKS; 0 elsewhere): the router, the
    shared and the local routed experts of one MoE layer, split by tp (set_z3_leaf_modules: one fetch)."""
    if not moe.is_moe(moe_spec):
        return np.zeros(np.shape(layout.stack))
    leaf = np.isin(np.asarray(layout.stack), [STACK[s] for s in LEAF_BLOCK_STACKS])
    routed = moe_spec.moe_experts / _ep(layout) * moe.mlp_params(moe_spec, moe.expert_ffn(moe_spec))
    shared = moe_spec.moe_shared_experts * moe.mlp_params(moe_spec, moe.shared_ffn(moe_spec))
    block = (moe.router_params(moe_spec) + shared + routed) / np.asarray(layout.tp, dtype=np.float64)
    return np.where(leaf, block, 0.0)


# Stacks whose routed experts are ONE module holding every local expert's projections (STACKED_EXPERT_FETCHES 1):
# trainer/experts.py Experts (gate/up/down (E, out, in) parameters and biases (E, out) of one module) and torchtitan
# GroupedExperts (torchtitan/models/moe/moe.py: w1, w2, w3 (E, ...) nn.Parameters of one module). ZeRO-3 gathers that
# module's own parameters at once (partitioned_param_coordinator.py fetch_sub_module), every local expert together.
STACKED_MODULE_STACKS = ("bundled", "torchtitan")


def stacked_experts_params(moe_spec: ModelSpec, layout) -> np.ndarray:
    """Parameters of one MoE layer's stacked routed-expert module on one GPU (STACKED_MODULE_STACKS; 0 elsewhere):
    its E / ep local experts, split by etp (planner/moe_memory.py expert_params_per_gpu's split), biases included."""
    if not moe.is_moe(moe_spec):
        return np.zeros(np.shape(layout.stack))
    stacked = np.isin(np.asarray(layout.stack), [STACK[s] for s in STACKED_MODULE_STACKS])
    etp = np.maximum(np.asarray(getattr(layout, "etp", 1.0), dtype=np.float64), 1.0)
    local = moe_spec.moe_experts / _ep(layout) * moe.mlp_params(moe_spec, moe.expert_ffn(moe_spec)) / etp
    return np.where(stacked, local, 0.0)


def _ep(layout) -> np.ndarray:
    return np.maximum(np.asarray(getattr(layout, "ep", 1.0), dtype=np.float64), 1.0)


def expert_extra_params(spec: ModelSpec, layout, moe_spec: ModelSpec | None = None):
    """Parameters of the MoE model beyond its active view `spec` on one GPU's experts (the idle experts of
    every MoE layer, over expert parallelism); 0 for a dense model."""
    if moe_spec is None or not moe.is_moe(moe_spec):
        return 0.0
    return max(moe_spec.n_params - spec.n_params, 0) / _ep(layout)


def params_per_gpu(spec: ModelSpec, layout, moe_spec: ModelSpec | None = None) -> np.ndarray:
    """The parameters ZeRO-3 shards on one GPU's model-parallel part (before the dp split)."""
    P = spec.n_params + expert_extra_params(spec, layout, moe_spec)
    return P / (np.asarray(layout.tp, dtype=np.float64) * np.asarray(layout.pp, dtype=np.float64))


def gathers(spec: ModelSpec, layout, moe_spec: ModelSpec | None = None) -> dict[str, np.ndarray]:
    """Elements all-gathered per micro batch in forward and in backward, and the number of
    all-gather calls, for the parameters of the busiest stage of one GPU (before sharding:
    tensor/pipeline parallel parts of the model, over dp ranks); `moe_spec`: the MoE model whose
    active view `spec` is (its layers' fetch calls: `block_calls`)."""
    tp = np.asarray(layout.tp, dtype=np.float64)
    pp = np.asarray(layout.pp, dtype=np.float64)
    layers = np.maximum(np.ceil(spec.n_layers / pp), 1.0)
    weights = _gathered_weights(spec)
    block = (float(sum(weights)) + expert_extra_params(spec, layout, moe_spec) / spec.n_layers) / tp
    block_calls_ = block_calls(spec, layout, moe_spec)
    emb = spec.vocab_padded * spec.hidden / tp
    # Recompute forward + a reuse distance shorter than one block: backward gathers again.
    block_recompute, _, _ = flops.recompute_share(layout.activation_checkpointing, layout.checkpoint_fraction)
    short_reuse = np.asarray(layout.stage3_max_live_params, dtype=np.float64) < block
    bwd_block_gathers = 1.0 + block_recompute * short_reuse
    # (DeepSpeed runs ZeRO-3 without pipeline stages: both ends are on every GPU)
    fwd = layers * block + 2.0 * emb  # input embedding, output layer
    bwd = layers * block * bwd_block_gathers + emb  # the embedding's backward
    calls_fwd = layers * block_calls_ + 2.0
    calls_bwd = layers * block_calls_ * bwd_block_gathers + 1.0
    return {"fwd": fwd, "bwd": bwd, "calls_fwd": calls_fwd, "calls_bwd": calls_bwd}


def exposed_s(spec: ModelSpec, layout, g: Group, gather_bytes, grad_bytes, fwd_micro, bwd_micro, prof,
              moe_spec: ModelSpec | None = None):
    """(exposed seconds per step, bytes one node sends across the network per step) of the
    ZeRO-3 collectives: `gather_bytes`/`grad_bytes` per parameter on the wire, `fwd_micro` and
    `bwd_micro` the stack-scaled compute seconds of one micro batch's passes."""
    n = gathers(spec, layout, moe_spec)
    P = params_per_gpu(spec, layout, moe_spec)
    k = prof["comm_time_factor"]
    ov = prof["overlap_zero3"]
    ag_f = g.allgather_s(n["fwd"] * gather_bytes, n["calls_fwd"])
    ag_b = g.allgather_s(n["bwd"] * gather_bytes, n["calls_bwd"])
    rs = g.allgather_s(P * grad_bytes, np.ceil(P / layout.reduce_bucket_elems))
    fwd = fetch_exposed(k * ag_f, ov * fwd_micro, n["calls_fwd"])
    bwd = np.maximum(k * (ag_b + rs) - ov * bwd_micro, k * rs / n["calls_bwd"])
    ga = layout.grad_accum
    exposed = ga * (fwd + bwd)
    node = ga * (g.node_bytes((n["fwd"] + n["bwd"]) * gather_bytes, 1.0) + g.node_bytes(P * grad_bytes, 1.0))
    return exposed, node


def fetch_exposed(busy_s, hidden_s, calls):
    """Exposed seconds of a pass's fetches: `busy_s` of collectives (stack-scaled), at most
    `hidden_s` of them behind the pass's compute, never less than one fetch (the first)."""
    return np.maximum(busy_s - hidden_s, busy_s / calls)
