"""The MoE routing settings (planner/moe_options.py: capacity factor, FP8 dispatch, node-limited routing) in
each export format, or a one-line refusal naming the field; the two all-to-all overlaps are in moe_settings.py.

Megatron-LM, every flag checked in NVIDIA/Megatron-LM megatron/training/arguments.py `_add_moe_args` (the 2025
file at commit 000c4ac24f61159c138b0975def722c65245983c, the one moe_settings.py cites):
- capacity factor c: --moe-expert-capacity-factor c ("The capacity factor for each expert, None means no token
  will be dropped") with --moe-pad-expert-input-to-capacity ("Pads the input for each expert to match the expert
  capacity length, effective only after the --moe-expert-capacity-factor is set"): the padded capacity the
  planner models (planner/moe_time.py load_factor). --moe-token-drop-policy stays at its default, probs ("the
  tokens with the lowest probabilities will be dropped"), the rule of GShard and Switch Transformer.
- node-limited routing to M nodes: --moe-router-num-groups G ("Node-limited routing: Set equal to number of
  nodes in EP group to limit each token to experts on a subset of nodes (See DeepSeek-V3)") and
  --moe-router-group-topk M ("Number of selected groups for group-limited routing"). The planner models its
  hierarchical dispatch (each token sent once per node, forwarded over NVLink: DeepEP's normal kernels), which
  Megatron-Core runs with --moe-token-dispatcher-type flex and --moe-enable-deepep ("Only works with flex token
  dispatcher"). Megatron-Core's group-limited top-k scores a group by its best topk // group_topk experts
  (megatron/core/transformer/moe/moe_utils.py group_limited_topk), so M is written as min(M, topk): the same
  routing, k experts reach at most k groups. An ep group inside one node, or M >= its nodes, limits nothing:
  DeepEP's dispatcher is written, no routing flags, and a note says why.
- FP8 dispatch: no flag. Megatron-Core's DeepEP path (megatron/core/transformer/moe/fused_a2a.py FusedDispatch)
  dispatches the hidden states as it gets them (BF16) and its HybridEP backend asserts "HybridEP dispatcher does
  not support fp8 dispatch now": refused, so that no exported run is slower than its plan said.
- megatron/core/transformer/transformer_config.py TransformerConfig.__post_init__: "Flex token dispatcher does not
  support moe_pad_expert_input_to_capacity": a capacity factor with node-limited routing is refused.

DeepSpeed JSON, FSDP settings and accelerate YAML have no key for any of these (DeepSpeed-MoE takes capacity_factor
and drop_tokens in deepspeed.moe.layer.MoE(...), in the model code); those formats export an MoE model at ep 1 only
(moe_settings.py), where no token crosses a GPU: the capacity factor becomes a note naming where to set it, FP8
dispatch, the node limit and the overlaps a note that they change nothing at ep 1. A dense model takes none of them
(MoeOptions.check_model).
"""

from __future__ import annotations

from planner import comm, moe
from planner.errors import PlanError
from planner.model import ModelSpec
from planner.moe_options import MoeOptions
from planner.scenario import ExecutionPlan

FP8_REFUSAL = ("Megatron-LM has no FP8-dispatch flag (megatron/core/transformer/moe/fused_a2a.py: DeepEP dispatches "
               "the BF16 hidden states; HybridEP 'does not support fp8 dispatch now'); allowed: plan without "
               "--moe-fp8-dispatch")


def ep_nodes(plan: ExecutionPlan, gpus_per_node: int) -> int:
    """Nodes one expert-parallel group spans (members etp ranks apart, as planner/moe_time.py places them)."""
    m = int(min(comm.members_per_node(plan.ep, plan.etp, gpus_per_node), plan.ep))
    return max(plan.ep // max(m, 1), 1)


def megatron_refusal(plan: ExecutionPlan, model: ModelSpec, options: MoeOptions) -> PlanError | None:
    if not moe.is_moe(model):
        return None
    if options.moe_fp8_dispatch:
        return PlanError("moe_fp8_dispatch", FP8_REFUSAL)
    if options.moe_capacity_factor is not None and options.moe_node_limit is not None:
        return PlanError("moe_capacity_factor", "Megatron-Core's flex (DeepEP) dispatcher of --moe-node-limit pads "
                         "nothing ('Flex token dispatcher does not support moe_pad_expert_input_to_capacity'); "
                         "allowed: a capacity factor or a node limit")
    if options.moe_node_limit is not None and plan.ep * plan.tp <= 1:
        return PlanError("moe_node_limit", "Megatron-Core's flex (DeepEP) dispatcher needs tp x ep > 1 ('Flex token "
                         "dispatcher requires TPxEP > 1'); allowed: ep > 1, or no node limit")
    return None


def dispatcher(options: MoeOptions) -> str:
    """--moe-token-dispatcher-type: DeepEP's flex dispatcher for node-limited routing, else all-to-all."""
    return "flex" if options.moe_node_limit is not None else "alltoall"


def megatron_args(plan: ExecutionPlan, model: ModelSpec, options: MoeOptions, gpus_per_node: int,
                  notes: list[str] | None = None) -> list[str]:
    """The routing flags of an MoE model (after --moe-token-dispatcher-type); a refusal raises."""
    if not moe.is_moe(model):
        return []
    if (why := megatron_refusal(plan, model, options)) is not None:
        raise why
    args: list[str] = []
    c = options.moe_capacity_factor
    if c is not None:
        args += ["--moe-expert-capacity-factor", f"{c:g}", "--moe-pad-expert-input-to-capacity"]
    limit = options.moe_node_limit
    if limit is not None:
        args.append("--moe-enable-deepep")
        nodes = ep_nodes(plan, gpus_per_node)
        if limit < nodes:
            args += ["--moe-router-num-groups", str(nodes), "--moe-router-group-topk", str(min(limit, model.moe_top_k))]
        elif notes is not None:
            notes.append(f"node limit {limit}: the ep group of {plan.ep} GPUs spans {nodes} node(s), nothing to "
                         "limit (no --moe-router-num-groups)")
    return args


def header(options: MoeOptions) -> str:
    """The comment above an MoE model's Megatron arguments: how the experts' load was planned."""
    c = options.moe_capacity_factor
    if c is not None:
        return (f"capacity factor {c:g}, padded to capacity as planned; tokens past it dropped by their router "
                "probability (--moe-token-drop-policy probs, the default)")
    return ("dropless routing (Megatron-Core's default); to cap the busiest expert at the planner's 1.25 x mean "
            "load: --moe-expert-capacity-factor 1.25 --moe-token-drop-policy probs")


def model_code_notes(fmt: str, plan: ExecutionPlan, model: ModelSpec | None, options: MoeOptions) -> list[str]:
    """DeepSpeed / FSDP / accelerate (an MoE model at ep 1, its experts in the user's code): what has no key."""
    if model is None or not moe.is_moe(model):
        return []
    notes = []
    if options.moe_capacity_factor is not None:
        c = options.moe_capacity_factor
        notes.append(f"capacity factor {c:g} planned: a {fmt} config has no key for it; set it in your MoE layer "
                     f"(DeepSpeed-MoE: deepspeed.moe.layer.MoE(..., capacity_factor={c:g}, drop_tokens=True))")
    ignored = [k for k in options.given if k != "moe_capacity_factor"]
    if ignored and plan.ep == 1:
        notes.append(f"{', '.join(ignored)}: no effect at ep 1 (no token crosses a GPU), nothing to write")
    return notes
