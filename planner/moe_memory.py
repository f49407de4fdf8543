"""GPU and host memory of a mixture-of-experts model's experts (pure, vectorised), on top of what its
active view (planner/moe.py `dense_view`) holds under planner/memory.py.

- Model states: the view's MLP holds, per MoE layer, a token's top-k routed experts as dense weights
  split by tp and sharded over dp x cp; the real model holds every routed expert split over
  ep x etp and sharded (ZeRO-1/2 optimizer/gradients, FSDP everything) over the expert-data-parallel
  group edp = tp x cp x dp / (ep x etp) (Megatron-Core's distributed optimizer shards expert states
  over the expert DP group: megatron/core/distributed/param_and_grad_buffer.py builds the expert
  buffers on `expert_data_parallel_group`; Liu et al. 2025, arXiv 2504.14960). The difference goes
  through memory.py's own per-sharding rules (weights_bytes, grads_bytes, optimizer_bytes with the
  experts' parameters and shard degree).
- Activations of each MoE layer, tensor by tensor (as memory.py counts a block, Korthikanti et al.
  2022): the top-k copies of the tokens dispatched to the experts (saved for the up-projection's weight
  gradient), the experts' outputs (saved for the weighted combine's gradient w.r.t. the routing
  probabilities) and the router's fp32 logits and probabilities (softmax and load-balancing loss);
  the experts' intermediate activations are the view's MLP ones (a token's top-k x expert width).
- Buffers: one layer's all-to-all send and receive buffers of the dispatched tokens.
- The module a sharded plan gathers at once (memory.py `unit_params`: the view's largest module under ZeRO-3, its
  block under FSDP) is, with experts: under ZeRO-3 the whole MoE block where it is a leaf module (planner/zero3.py
  LEAF_BLOCK_STACKS) or the one module holding every local expert (zero3.STACKED_MODULE_STACKS: the bundled trainer,
  torchtitan); under FSDP on those stacks the block with every local expert. Its 16-bit weights and gradients
  replace the view's (`_gathered_delta_bytes`).
- The busiest expert rank holds its load (planner/moe_time.py load_factor: the capacity factor when
  padded to capacity, else the dropless imbalance) x the balanced routed copies: activations and
  buffers above scale by it.
"""

from __future__ import annotations

import functools

import numpy as np

from planner import moe, moe_parallel
from planner.layout import CKPT, OFFLOAD, PREC, SHARD, Layout
from planner.memory import (compute_dtype_bytes, grads_bytes, optimizer_bytes, optimizer_state_bytes_per_param,
                            shard_degree, stage_layers, weights_bytes)


def stage_moe_layers(spec, view, layout: Layout) -> np.ndarray:
    """MoE layers on the busiest pipeline stage (the model's share of MoE layers of its blocks)."""
    heaviest, _ = stage_layers(view, layout)
    layers = np.where(np.asarray(layout.pp) == 1, spec.n_layers, heaviest)
    return layers * moe.n_moe_layers(spec) / spec.n_layers


def expert_params_per_gpu(spec, view, layout: Layout) -> np.ndarray:
    """Routed-expert parameters one GPU holds: its stage's experts split over ep x etp."""
    per_layer = spec.moe_experts * moe.mlp_params(spec, moe.expert_ffn(spec))
    return stage_moe_layers(spec, view, layout) * per_layer / (np.asarray(layout.ep, dtype=np.float64) * layout.etp)


def view_expert_params_per_gpu(spec, view, layout: Layout) -> np.ndarray:
    """The part of the view's parameters on one GPU that stands for the routed experts (top-k of them
    per MoE layer, split by tp like the dense MLP)."""
    per_layer = spec.moe_top_k * moe.mlp_params(spec, moe.expert_ffn(spec))
    return stage_moe_layers(spec, view, layout) * per_layer / np.asarray(layout.tp, dtype=np.float64)


def expert_shard_degree(layout: Layout) -> np.ndarray:
    """Ranks sharing one copy of the experts' sharded states: the expert-data-parallel group."""
    return np.where(layout.sharding == SHARD["none"], 1.0, moe_parallel.edp(layout))


def _states_delta(term, spec, view, layout, system) -> np.ndarray:
    """A model-state term with every expert (ep x etp split, edp sharded) in place of the view's top-k."""
    p_e, n_e = expert_params_per_gpu(spec, view, layout), expert_shard_degree(layout)
    p_a, n_a = view_expert_params_per_gpu(spec, view, layout), shard_degree(layout, system)
    experts = term(view, layout, system, p=p_e, n=n_e) - term(view, layout, system, p=0.0, n=n_e)
    in_view = term(view, layout, system, p=p_a, n=n_a) - term(view, layout, system, p=0.0, n=n_a)
    return experts - in_view


def routed_slots_per_gpu(spec, layout: Layout) -> np.ndarray:
    """Token copies one GPU's experts process per micro batch: the stage's tokens x top-k, shared by the
    tp ranks and repeated on the etp ranks of an expert (balanced routing)."""
    tokens = np.asarray(layout.micro_batch * layout.seq_len, dtype=np.float64) / layout.cp
    return tokens * spec.moe_top_k * layout.etp / layout.tp


def dispatched_copy_bytes(layout: Layout, settings=None) -> np.ndarray:
    """Bytes per element of the routed copies kept for the experts' up-projection weight gradient: FP8 (and
    one fp32 scale per 1x128 tile) where an fp8 plan receives them in FP8 (Settings.moe_fp8_dispatch;
    DeepSeek-V3 sec. 3.3.2: "we quantize the activation before MoE up-projections into FP8 and then apply
    dispatch components, which is compatible with FP8 Fprop in MoE up-projections"; sec. 3.3: "the FP8
    Wgrad GEMM allows activations to be stored in FP8") or caches its linear inputs in FP8; else the
    compute dtype."""
    from planner.memory_savings import FP8_BYTES, TILE_SCALE_BYTES, fp8_cached

    fp8_in = getattr(settings, "moe_fp8_dispatch", False) & (layout.precision == PREC["fp8"])
    fp8 = np.asarray(fp8_in) | fp8_cached(layout, settings)
    return np.where(fp8, FP8_BYTES + TILE_SCALE_BYTES, compute_dtype_bytes(layout))


def layer_activation_bytes(spec, layout: Layout, load: float = 1.0, settings=None, outputs_kept=1.0) -> np.ndarray:
    """Bytes one MoE layer saves for backward per micro batch beyond the view's block (`load` x the
    balanced routed copies on the busiest rank); `outputs_kept`: the stack's moe_expert_outputs_kept."""
    a = compute_dtype_bytes(layout)
    slots = load * routed_slots_per_gpu(spec, layout)
    tokens = np.asarray(layout.micro_batch * layout.seq_len, dtype=np.float64) / layout.cp
    sp_div = np.where(layout.sequence_parallel == 1, layout.tp, 1)
    router = 2 * 4.0 * tokens / sp_div * spec.moe_experts  # fp32 logits and probabilities
    copies = slots * spec.hidden * dispatched_copy_bytes(layout, settings)
    return copies + outputs_kept * slots * spec.hidden * a + router  # dispatched copies, expert outputs


def activation_bytes(spec, view, layout: Layout, load: float = 1.0, settings=None, outputs_kept=1.0) -> np.ndarray:
    """The MoE layers' extra activations held on the busiest GPU: every MoE layer of the stage for
    each micro batch in flight, less what checkpointing drops, plus the one layer it rebuilds."""
    ck = layout.activation_checkpointing
    kept = np.select([ck == CKPT["full"], ck == CKPT["blocks"]], [0.0, 1.0 - layout.checkpoint_fraction],
                     default=1.0)
    in_flight = np.where(layout.pp > 1, np.minimum(layout.pp, layout.grad_accum), 1)
    rebuilt = np.where((ck == CKPT["full"]) | (ck == CKPT["blocks"]), 1.0, 0.0)
    per_layer = layer_activation_bytes(spec, layout, load, settings, outputs_kept)
    return per_layer * (kept * in_flight * stage_moe_layers(spec, view, layout) + rebuilt)


def dispatch_buffer_bytes(spec, layout: Layout, load: float = 1.0) -> np.ndarray:
    """All-to-all send and receive buffers of one layer's dispatched tokens."""
    return 2.0 * load * routed_slots_per_gpu(spec, layout) * spec.hidden * compute_dtype_bytes(layout)


def with_experts(spec, view, layout: Layout, system, out: dict, settings=None) -> dict:
    """memory.memory_arrays' terms of the view, with the experts' states, activations and buffers."""
    from planner.moe_time import load_factor

    load = load_factor(settings)
    out = dict(out)
    kept, main_fp32, amp = 1.0, False, False
    if settings is not None:
        from planner.main_grads import amp_ddp
        from planner.settings import stack_profiles
        from planner.stacks import per_candidate

        prof = per_candidate(stack_profiles(settings), layout)
        from planner.main_grads import resident_fp32

        kept, main_fp32 = prof["moe_expert_outputs_kept"], resident_fp32(layout, prof, system.grad_reduce_bytes)
        amp = amp_ddp(layout, prof["grad_bucket_params"])  # torch DDP under autocast: the experts' fp32 too
    grads = functools.partial(grads_bytes, main_fp32=main_fp32, amp=amp)  # the experts' fp32 main grads too
    terms = (("weights_bytes", functools.partial(weights_bytes, amp=amp)), ("grads_bytes", grads),
             ("optimizer_bytes", functools.partial(optimizer_bytes, amp=amp)))
    for key, term in terms:
        out[key] = out[key] + _states_delta(term, spec, view, layout, system)
    gathered_w, gathered_g = _gathered_delta_bytes(spec, view, layout)
    out["weights_bytes"], out["grads_bytes"] = out["weights_bytes"] + gathered_w, out["grads_bytes"] + gathered_g
    out["activations_bytes"] = out["activations_bytes"] + activation_bytes(spec, view, layout, load, settings, kept)
    out["comm_buffers_bytes"] = out["comm_buffers_bytes"] + dispatch_buffer_bytes(spec, layout, load)
    return out


def _gathered_delta_bytes(spec, view, layout: Layout) -> tuple[np.ndarray, np.ndarray]:
    """(weights, grads) bytes of the module a sharded plan gathers at once beyond the view's (memory.py `unit_params`:
    the view's largest module under ZeRO-3, its block under FSDP), in the compute dtype:
    - ZeRO-3, the hf leaf MoE block (zero3.leaf_block_params) or the stacked routed-expert module of the bundled
      trainer and torchtitan (zero3.stacked_experts_params: every local expert in one module); once in weights and
      once in grads, as memory.py counts the gathered module (DeepSpeed's estimator: the largest module, each).
    - FSDP (full shard, hybrid; SHARD_GRAD_OP already holds every unsharded parameter) on those two stacks: the
      wrapped block with all its local experts (`fsdp_moe_unit_params`), twice in weights (current and prefetched
      unit) and once in grads (one unsharded unit before its reduce-scatter), as memory.py counts a unit."""
    from planner.shard_units import unit_params
    from planner.zero3 import leaf_block_params, stacked_experts_params

    c = compute_dtype_bytes(layout)
    view_unit = unit_params(view, layout)
    s = np.asarray(layout.sharding)
    zero3_unit = np.maximum(leaf_block_params(spec, layout), stacked_experts_params(spec, layout))
    zero3 = (s == SHARD["zero3"]) * np.maximum(zero3_unit - view_unit, 0.0)
    fsdp_units = (s == SHARD["fsdp_full_shard"]) | (s == SHARD["fsdp_hybrid"])
    fsdp_grads = fsdp_units | (s == SHARD["fsdp_shard_grad_op"])
    fsdp = np.maximum(fsdp_moe_unit_params(spec, view, layout) - view_unit, 0.0)
    return c * (zero3 + 2.0 * fsdp_units * fsdp), c * (zero3 + fsdp_grads * fsdp)


def zero3_gathered_extra_bytes(spec, view, layout: Layout) -> np.ndarray:
    """The ZeRO-3 part of `_gathered_delta_bytes` (weights + grads): like the view's gathered module
    (memory_required.gathered_bytes), alive in forward and backward only, released before the optimizer step."""
    w, g = _gathered_delta_bytes(spec, view, layout)
    return np.where(np.asarray(layout.sharding) == SHARD["zero3"], w + g, 0.0)


def fsdp_moe_unit_params(spec, view, layout: Layout) -> np.ndarray:
    """The largest FSDP unit of an MoE layer on one GPU where the stack keeps its routed experts in one module
    (zero3.STACKED_MODULE_STACKS; 0 elsewhere), per tp rank: the block (attention, norms, router, shared experts) with
    the stacked local experts inside it (the bundled trainer's fully_shard per block, trainer/experts.py: "FSDP2 with
    the block"), or, torchtitan with ep > 1, the larger of the experts' own unit and the rest of the block
    (shard_units.expert_units: fully_shard(transformer_block.moe.experts) before fully_shard(transformer_block))."""
    from planner.layout import STACK
    from planner.zero3 import stacked_experts_params

    experts = stacked_experts_params(spec, layout)
    tp = np.asarray(layout.tp, dtype=np.float64)
    shared = spec.moe_shared_experts * moe.mlp_params(spec, moe.shared_ffn(spec))
    rest = (view.params_per_layer - moe.mlp_params(view, view.ffn) + moe.router_params(spec) + shared) / tp
    own_unit = (np.asarray(layout.stack) == STACK["torchtitan"]) & (np.asarray(layout.ep) > 1)
    unit = np.where(own_unit, np.maximum(experts, rest), rest + experts)
    return np.where(experts > 0, unit, 0.0)


def host_bytes_per_node(spec, view, layout: Layout, system) -> np.ndarray:
    """Host RAM the experts add per node (planner/host_memory.py's rules for the view): every rank
    builds its slice of the model in fp32 before sharding (FSDP: once per node; ZeRO-3 does not run
    MoE), and offloaded optimizer states (fp32 master, states, fp32 grads) of the expert shard."""
    ranks = system.gpus_per_node
    p_e, p_a = expert_params_per_gpu(spec, view, layout), view_expert_params_per_gpu(spec, view, layout)
    init = np.where(layout.is_fsdp, 4.0 * (p_e - p_a), 4.0 * (p_e - p_a) * ranks)
    per_param = optimizer_state_bytes_per_param(view, layout) + 8.0
    shard = p_e / moe_parallel.edp(layout) - p_a / shard_degree(layout, system)
    offload = np.where(layout.offload != OFFLOAD["none"], per_param * shard * ranks, 0.0)
    return init + offload


__all__ = ["activation_bytes", "expert_params_per_gpu", "host_bytes_per_node", "with_experts"]
