"""Expert parallelism (ep) and expert tensor parallelism (etp): the groups, the search's candidates
and the feasibility rules (as planner/rules.py takes them: each names the knob its one-line error is
about and what is allowed).

Megatron-Core's MoE parallel folding (Liu et al. 2025, arXiv 2504.14960, sec. 3): the attention
layers run on tp x cp x dp x pp, the MoE layers re-split the same tp x cp x dp ranks of a pipeline
stage as etp x ep x edp (edp: expert data parallel, the ranks that hold the same experts and reduce
their gradients). megatron/core/parallel_state.py initialize_model_parallel builds the expert grid
from `expert_tensor_parallel_size` (default: tp), `expert_model_parallel_size` and pp, and raises
"world_size (...) is not divisible by expert_tensor_model_pipeline_parallel size" unless
etp x ep x pp divides the world; megatron/training/arguments.py validate_args asserts "Number of
experts should be a multiple of expert model parallel_size". DeepSpeed refuses ZeRO-3 only with its OWN MoE
layer (deepspeed 0.19 runtime/engine.py `_validate_zero3_moe_compatibility`: a `deepspeed.moe.layer.MoE` module
raises "Native DeepSpeed MoE is not supported with ZeRO Stage 3"; `has_moe_layers` looks for no other class):
that is the MoE layer of Megatron-DeepSpeed (megatron/model/transformer.py ParallelTransformerLayer: its MLP a deepspeed.moe.layer.MoE),
whatever its ep. Experts that are plain nn.Modules are sharded as any other: Hugging Face models under DeepSpeed
ZeRO-3 (with the MoE block a ZeRO-3 leaf module, planner/zero3.py), the bundled trainer (trainer/moe.py: every
expert runs every step, so ZeRO-3's fetch order is the same each step) and a generic stack.
"""

from __future__ import annotations

import numpy as np

from planner.layout import SHARD, STACK

# Stacks without expert parallelism: Hugging Face Trainer / accelerate, plain FSDP and the bundled trainer
# (trainer/moe.py) run every expert on every rank. Megatron(-Core), Megatron-DeepSpeed (DeepSpeed-MoE),
# torchtitan (expert_parallel_degree) and a generic stack do.
NO_EP_STACKS = ("hf", "fsdp", "bundled")
_NO_EP = [STACK[s] for s in NO_EP_STACKS]


def _f(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


def expert_ranks(layout) -> np.ndarray:
    """Ranks of one pipeline stage that the MoE layers re-split: tp x cp x dp."""
    return _f(layout.tp) * _f(layout.cp) * _f(layout.dp)


def edp(layout) -> np.ndarray:
    """Expert data parallel: ranks holding the same experts, tp x cp x dp / (ep x etp)."""
    return np.maximum(expert_ranks(layout) / (_f(layout.ep) * _f(layout.etp)), 1.0)


def ep_candidates(spec, tp: int, cp: int, dp: int, pinned_ep: int | None, pinned_etp: int | None) -> list[tuple[int, int]]:
    """(ep, etp) pairs the search tries for one tp x cp x dp shape: etp 1 or tp (Megatron-Core's default;
    the folding paper's recommendation for fine-grained experts is 1), ep every divisor of the expert count
    that fits in the ranks left; a dense model: (1, 1) unless pinned."""
    if not spec.moe_experts:
        return [(pinned_ep or 1, pinned_etp or 1)]
    etps = [pinned_etp] if pinned_etp is not None else sorted({1, tp})
    out = []
    for etp in etps:
        ranks = tp * cp * dp
        if ranks % etp:
            continue
        eps = [pinned_ep] if pinned_ep is not None else [
            e for e in range(1, spec.moe_experts + 1) if spec.moe_experts % e == 0 and (ranks // etp) % e == 0]
        out += [(e, etp) for e in eps]
    return out or [(pinned_ep or 1, pinned_etp or 1)]


def default_stack(stack: np.ndarray, ep: np.ndarray) -> np.ndarray:
    """Where expert parallelism needs it, the stack that runs it: FSDP plans go to torchtitan (FSDP2 with
    expert parallelism), Hugging Face's ZeRO plans to Megatron-DeepSpeed (DeepSpeed-MoE)."""
    s = np.asarray(stack)
    ep_on = np.asarray(ep) > 1
    return np.select([ep_on & (s == STACK["fsdp"]), ep_on & (s == STACK["hf"])],
                     [STACK["torchtitan"], STACK["megatron_deepspeed"]], default=s)


def _name(names, code) -> str:
    return names[int(np.asarray(code).reshape(-1)[0])]


def _is_moe(k) -> bool:
    return bool(k.spec.moe_experts)


def _rules() -> list[dict]:
    from planner.scenario import STACKS

    return [
        dict(name="ep_needs_moe", reason="ep > 1 needs a mixture-of-experts model", field="ep", inputs=("ep", "spec"),
             bad=lambda k: (k.ep > 1) & (not _is_moe(k)),
             message=lambda k: f"{k.ep} needs a mixture-of-experts model ({k.spec.name} has no experts; allowed: 1)"),
        dict(name="etp_needs_moe", reason="etp > 1 needs a mixture-of-experts model", field="etp",
             inputs=("etp", "spec"), bad=lambda k: (k.etp > 1) & (not _is_moe(k)),
             message=lambda k: f"{k.etp} needs a mixture-of-experts model ({k.spec.name} has no experts; allowed: 1)"),
        dict(name="ep_experts", reason="ep does not divide the routed experts", field="ep", inputs=("ep", "spec"),
             bad=lambda k: _is_moe(k) & (k.spec.moe_experts % np.maximum(k.ep, 1) != 0),
             message=lambda k: f"{k.ep} does not divide the {k.spec.moe_experts} routed experts (moe_experts) of "
                               f"{k.spec.name} (Megatron-LM validate_args: experts must be a multiple of ep; allowed: "
                               f"{', '.join(str(d) for d in range(1, k.spec.moe_experts + 1) if k.spec.moe_experts % d == 0)})"),
        dict(name="ep_ranks", reason="etp x ep x pp does not divide the GPUs", field="ep",
             inputs=("ep", "etp", "pp", "system"), relaxed={"etp": 1, "pp": 1},
             bad=lambda k: k.system.gpus % (k.ep * k.etp * k.pp) != 0,
             message=lambda k: f"etp x ep x pp = {k.etp} x {k.ep} x {k.pp} does not divide the {k.system.gpus} GPUs "
                               "(Megatron-Core parallel_state.py initialize_model_parallel: the experts re-split the "
                               "tp x cp x dp ranks of a stage as etp x ep x expert-data-parallel)"),
        dict(name="ep_stage_ranks", reason="etp x ep does not divide tp x cp x dp", field="ep",
             inputs=("ep", "etp", "tp", "cp", "dp"), relaxed={"etp": 1},
             bad=lambda k: (k.tp * k.cp * k.dp) % (k.ep * k.etp) != 0,
             message=lambda k: f"etp x ep = {k.etp} x {k.ep} does not divide the tp x cp x dp = "
                               f"{k.tp * k.cp * k.dp} ranks of a pipeline stage"),
        dict(name="moe_zero3", reason="DeepSpeed ZeRO-3 does not run DeepSpeed-MoE layers", field="sharding",
             inputs=("sharding", "spec", "stack"),
             bad=lambda k: (k.sharding == SHARD["zero3"]) & _is_moe(k) & (k.stack == STACK["megatron_deepspeed"]),
             message=lambda k: "zero3 with megatron_deepspeed's mixture-of-experts layers (DeepSpeed-MoE): DeepSpeed "
                               "asserts 'Native DeepSpeed MoE is not supported with ZeRO Stage 3' (engine.py "
                               "_validate_zero3_moe_compatibility; allowed: none, zero1, zero2, or zero3 on the hf "
                               "stack with ep 1)"),
        dict(name="ep_stack", reason="the stack has no expert parallelism", field="stack", inputs=("stack", "ep"),
             bad=lambda k: np.isin(k.stack, _NO_EP) & (k.ep > 1),
             message=lambda k: f"{_name(STACKS, k.stack)} has no expert parallelism (allowed with ep > 1: "
                               "megatron, megatron_deepspeed, torchtitan, generic)"),
        dict(name="bundled_moe_model_parallel", reason="the bundled trainer runs MoE models without tp/pp",
             field="tp", inputs=("stack", "tp", "pp", "spec"), relaxed={"tp": 1, "pp": 1},
             bad=lambda k: (k.stack == STACK["bundled"]) & _is_moe(k) & ((k.tp > 1) | (k.pp > 1)),
             message=lambda k: f"tp={k.tp}, pp={k.pp}: the bundled trainer runs {k.spec.name}'s experts with data "
                               "parallelism only (trainer/config.py validate_layout; allowed: tp 1, pp 1)"),
    ]


RULES = _rules()
