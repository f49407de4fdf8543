"""The feasibility rules of an execution plan: one table, each rule with its name, the reason
counted by the search and the one-line message shown for one plan.

The same rule objects are evaluated three ways:
- `first_violation`: vectorised over every candidate of the search (`Knobs.of_layout`), the
  index of the first rule each candidate breaks (`FITS` if none), counted by reason;
- `violations` / `check`: one plan or a partial set of knobs (the pinned knobs of a scenario,
  the trainer's config), as plain values; `check` raises a `PlanError` naming the rule's field.
  A rule whose inputs are not all given is skipped, unless its `relaxed` values stand in for the
  missing ones (values that make the rule weakest: if it fails with them it fails for all).

A rule reads only the names in its `inputs` (knobs of `ExecutionPlan`, or the context names
`spec`, `system`, `seq_len`, `global_batch` (the batch asked for, None: free), `profiles`,
`mem`); the one-plan path hands it exactly those, so a missing declaration is an error.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from types import SimpleNamespace

import numpy as np

from planner import context_parallel, stage_split
from planner.errors import PlanError
from planner.layout import _BOOLEAN, _CATEGORICAL, ATTN, CKPT, OFFLOAD, PREC, SHARD, Layout
from planner import bundled_rules, moe_parallel, ssm_time, zeropp_rules
from planner.stacks import unsupported
from planner.layout import STACK

STACKS_BUNDLED = STACK["bundled"]

GIB = 2**30
FITS = -1
# Without a pinned global batch, batches stay at or under this many tokens (LLaMA 2 trained
# with 4M-token batches, Touvron et al. 2023); pin --global-batch to plan a given one.
MAX_DEFAULT_BATCH_TOKENS = 4 * 2**20
CONTEXT = ("spec", "system", "seq_len", "global_batch", "profiles", "mem")


class Knobs(SimpleNamespace):
    """What a rule reads: knob values (categoricals as Layout codes), scalars or arrays."""

    def __len__(self) -> int:  # planner.stacks.unsupported sizes its answer by the tp column
        return int(np.size(self.tp))

    @classmethod
    def of_layout(cls, lay: Layout, **context) -> "Knobs":
        return cls(**({f.name: getattr(lay, f.name) for f in fields(lay)} | context))


@dataclass(frozen=True)
class Rule:
    name: str
    reason: str  # counted by the search, shown for a rejected candidate
    field: str  # the knob a PlanError names
    inputs: tuple[str, ...]
    bad: Callable[[Knobs], object]  # True where the plan breaks the rule (vectorised)
    message: Callable[[Knobs], str] | None = None  # one plan's line (default: `reason`)
    relaxed: Mapping[str, int] = field(default_factory=dict)
    memory: bool = False  # a memory rule: checked after every structural one

    def explain(self, k: Knobs) -> str:
        return self.message(k) if self.message is not None else self.reason


def _gib(x) -> float:
    return float(np.asarray(x).reshape(-1)[0]) / GIB


def _needed(mem):
    """Bytes alive at once (the allocator flushes its cache before it fails), else the reserved peak."""
    need = mem.get("required_bytes")
    return mem["total_bytes"] if need is None else need


def _batch(k: Knobs):
    return k.micro_batch * k.grad_accum * k.dp


_SPLIT = ("pp", "first_stage_layers", "last_stage_layers", "embedding_in_split", "loss_in_split")


def _split(k: Knobs) -> tuple:
    return tuple(getattr(k, name) for name in _SPLIT)


def _barred_kernels(gpu) -> list[int]:
    """Codes of the attention kernels the GPU's catalog entry does not list (none barred if it lists none)."""
    return [code for name, code in ATTN.items() if gpu.attention_kernels and name not in gpu.attention_kernels]


def _zero12(s):
    return (s == SHARD["zero1"]) | (s == SHARD["zero2"])


def _tp_norms_unsplit(spec) -> bool:
    return spec.qk_norm == "full" or (spec.parallel_block and spec.norms_per_layer == 4)


RULES: tuple[Rule, ...] = (
    Rule("gpus_divisible", "gpus not divisible by tp x pp x cp", "gpus", ("tp", "pp", "cp", "system"),
         lambda k: k.system.gpus % (k.tp * k.pp * k.cp) != 0,
         lambda k: f"{k.system.gpus} is not divisible by tp x pp x cp = {k.tp} x {k.pp} x {k.cp} = "
                   f"{k.tp * k.pp * k.cp}", relaxed={"tp": 1, "pp": 1, "cp": 1}),
    Rule("tp_in_node", "tp exceeds gpus_per_node", "tp", ("tp", "system"),
         lambda k: k.tp > k.system.gpus_per_node,
         lambda k: f"{k.tp} exceeds gpus_per_node ({k.system.gpus_per_node}); tensor parallelism stays "
                   "inside a node"),
    Rule("tp_heads", "tp does not divide n_heads", "tp", ("tp", "spec"),
         lambda k: ssm_time.has_attention(k.spec) & (k.spec.n_heads % k.tp != 0),
         lambda k: f"{k.tp} does not divide the {k.spec.n_heads} attention heads (n_heads) of {k.spec.name}"),
    Rule("pp_layers", "pp exceeds n_layers", "pp", ("pp", "spec"),
         lambda k: k.pp > k.spec.n_layers,
         lambda k: f"{k.pp} pipeline stages for {k.spec.n_layers} layers: every stage needs at least one "
                   f"layer (allowed: pp <= {k.spec.n_layers})"),
    Rule("cp_seq_len", "cp does not divide seq_len", "cp", ("cp", "seq_len"),
         lambda k: k.seq_len % k.cp != 0, lambda k: f"{k.cp} does not divide seq_len ({k.seq_len})"),
    # ring and all-gather CP keep every head on every GPU; the all-to-all ones (ulysses, a2a+p2p)
    # split each TP rank's heads over their all-to-all group (planner/context_parallel.py)
    Rule("cp_heads", "cp_impl ulysses / a2a+p2p: the all-to-all degree does not divide the heads", "cp",
         ("cp", "cp_impl", "tp", "spec", "system"),
         lambda k: context_parallel.heads_unsplittable(k.spec, k, k.system.gpus_per_node),
         lambda k: context_parallel.heads_message(k.spec, k, k.system.gpus_per_node), relaxed={"tp": 1}),
    Rule("tp_kv_heads", "tp does not divide n_kv_heads", "tp", ("tp", "spec"),
         lambda k: ssm_time.has_attention(k.spec) & (k.spec.kv_heads % k.tp != 0),
         lambda k: f"{k.tp} does not divide the {k.spec.kv_heads} key/value heads (n_kv_heads) of {k.spec.name}: "
                   "Megatron-Core needs num_query_groups to be a multiple of tp and torchtitan splits wk/wv by "
                   f"whole heads (allowed: tp dividing {k.spec.kv_heads})"),
    # trainer/config.py validate_layout refuses these under tp, so the tuner must not propose them: OLMo 2's q/k
    # RMSNorm over the full width (tp would split one norm), a parallel block with post-norms (not implemented)
    Rule("bundled_tp_norms", "the bundled trainer cannot split this model's norms over tp", "tp", ("stack", "tp", "spec"),
         lambda k: (k.stack == STACKS_BUNDLED) & (k.tp > 1) & _tp_norms_unsplit(k.spec),
         lambda k: f"tp={k.tp}: the bundled trainer cannot split {k.spec.name}'s "
                   + ("q/k norms over the full width (qk_norm full)" if k.spec.qk_norm == "full" else
                      "parallel block with post-norms") + " over tensor-parallel ranks (allowed: tp 1)",
         relaxed={"tp": 1}),
    # the embedding/loss accounting places the embedding or the loss as a layer of a pipeline stage
    # (Megatron-Core --account-for-embedding/loss-in-pipeline-split): without stages there is none
    Rule("embedding_split_needs_pp", "embedding_in_split needs pp > 1", "embedding_in_split",
         ("embedding_in_split", "pp"), lambda k: (k.embedding_in_split == 1) & (k.pp <= 1),
         lambda k: "counting the embedding as a pipeline stage's layer needs pp > 1 (pin --pp, or drop the flag)"),
    Rule("loss_split_needs_pp", "loss_in_split needs pp > 1", "loss_in_split",
         ("loss_in_split", "pp"), lambda k: (k.loss_in_split == 1) & (k.pp <= 1),
         lambda k: "counting the loss as a pipeline stage's layer needs pp > 1 (pin --pp, or drop the flag)"),
    Rule("split_layers", "uneven pipeline: the first/last stage blocks leave no equal share to the others",
         "first_stage_layers", _SPLIT + ("spec",), lambda k: stage_split.split_bad(k.spec.n_layers, *_split(k)),
         lambda k: f"first {k.first_stage_layers} / last {k.last_stage_layers} blocks of {k.spec.n_layers} on pp "
                   f"{k.pp} stages: the stages between need an equal, whole, non-empty share (and pp > 1)",
         relaxed={"first_stage_layers": 0, "last_stage_layers": 0, "embedding_in_split": 0, "loss_in_split": 0}),
    Rule("split_both", "first/last stage blocks and the embedding/loss accounting are exclusive", "first_stage_layers",
         _SPLIT, lambda k: ((k.first_stage_layers > 0) | (k.last_stage_layers > 0))
         & ((k.embedding_in_split == 1) | (k.loss_in_split == 1)),
         lambda k: "give the first/last stage blocks or embedding_in_split/loss_in_split, not both (Megatron-Core)",
         relaxed={"pp": 1, "first_stage_layers": 0, "last_stage_layers": 0, "embedding_in_split": 0, "loss_in_split": 0}),
    Rule("vpp_layers", "interleaved pipeline: a model chunk gets no whole number of blocks", "vpp",
         ("vpp",) + _SPLIT + ("spec",),
         lambda k: stage_split.chunks_bad(k.spec.n_layers, k.pp, k.vpp, *_split(k)[1:]),
         lambda k: f"interleaving {k.vpp} model chunks per stage needs whole chunks: "
                   f"{stage_split.chunk_need(k.spec.n_layers, k.pp, k.vpp, *_split(k)[1:])}",
         relaxed={"pp": 1, "first_stage_layers": 0, "last_stage_layers": 0, "embedding_in_split": 0,
                  "loss_in_split": 0}),
    Rule("vpp_needs_pp", "vpp > 1 needs pp > 1", "vpp", ("pp", "vpp"),
         lambda k: (k.vpp > 1) & (k.pp == 1), lambda k: f"{k.vpp} virtual stages need pp > 1"),
    Rule("sp_needs_tp", "sequence_parallel needs tp > 1", "sequence_parallel", ("sequence_parallel", "tp"),
         lambda k: (k.sequence_parallel == 1) & (k.tp == 1)),
    Rule("offload_needs_sharding", "offload needs ZeRO or FSDP sharding", "offload", ("offload", "sharding"),
         lambda k: (k.offload != OFFLOAD["none"]) & (k.sharding == SHARD["none"]),
         lambda k: "needs sharding zero1/zero2/zero3 or fsdp_* (plain data parallelism cannot offload)"),
    Rule("param_offload_zero3", "parameter offload needs ZeRO-3 or FSDP", "offload", ("offload", "sharding"),
         lambda k: (k.offload == OFFLOAD["optimizer+params"]) & _zero12(k.sharding),
         lambda k: "optimizer+params needs sharding zero3 or fsdp_* (DeepSpeed offloads parameters only "
                   "in stage 3)"),
    Rule("fsdp_offload_params", "FSDP offloads parameters with the optimizer (use optimizer+params)", "offload",
         ("offload", "sharding"),
         lambda k: (k.offload == OFFLOAD["optimizer"]) & (k.sharding >= SHARD["fsdp_full_shard"]),
         lambda k: "FSDP offloads parameters, gradients and optimizer together: use optimizer+params"),
    Rule("unified_memory_offload", "offload frees nothing where host RAM is the GPU's memory", "offload",
         ("offload", "activation_offload", "system"),
         lambda k: ((k.offload != OFFLOAD["none"]) | (k.activation_offload == 1)) & k.system.unified_memory,
         lambda k: "host RAM and GPU memory are the same HBM on this node (unified memory, an APU): offloading "
                   "moves bytes within it and frees nothing (allowed: offload none, activation_offload false)"),
    Rule("deepspeed_pp_zero1", "DeepSpeed pipeline parallelism supports ZeRO-1 only", "sharding",
         ("pp", "sharding"), lambda k: (k.pp > 1) & ((k.sharding == SHARD["zero2"]) | (k.sharding == SHARD["zero3"]))),
    Rule("activation_offload_ckpt", "activation offload needs full or blocks checkpointing", "activation_offload",
         ("activation_offload", "activation_checkpointing"),
         lambda k: (k.activation_offload == 1) & (k.activation_checkpointing != CKPT["full"])
         & (k.activation_checkpointing != CKPT["blocks"]),
         lambda k: "moves the checkpointed block inputs to host memory: needs activation_checkpointing full or "
                   "blocks"),
    Rule("fp8_gpu", "the GPU has no fp8 tensor cores", "precision", ("precision", "system"),
         lambda k: (k.precision == PREC["fp8"]) & (not k.system.gpu.fp8_tflops),
         lambda k: f"{k.system.gpu.id} has no fp8 tensor cores (fp8 needs H100/H200/B200/MI300X class GPUs; "
                   "allowed here: bf16, fp16, fp32)"),
    Rule("bf16_gpu", "the GPU has no bf16", "precision", ("precision", "system"),
         lambda k: ((k.precision == PREC["bf16"]) | (k.precision == PREC["bf16_pure"])) & (not k.system.gpu.bf16_tflops),
         lambda k: f"{k.system.gpu.id} has no bf16 support (allowed: fp16, fp32)"),
    Rule("attention_gpu", "the GPU cannot run this attention kernel", "attention", ("attention", "system"),
         lambda k: np.isin(k.attention, _barred_kernels(k.system.gpu)),
         lambda k: f"{k.system.gpu.id} cannot run this attention kernel (allowed: "
                   f"{', '.join(k.system.gpu.attention_kernels or ATTN)})"),
    Rule("batch_divisible", "global_batch not divisible by micro_batch x dp", "global_batch",
         ("micro_batch", "grad_accum", "dp", "global_batch"),
         lambda k: (k.global_batch is not None) & (_batch(k) != (k.global_batch or 0)),
         lambda k: f"{k.global_batch} != micro_batch x grad_accum x dp = {k.micro_batch} x {k.grad_accum} x "
                   f"{k.dp} = {_batch(k)}"),
    Rule("batch_tokens", "batch above 4M tokens (pin --global-batch to plan a larger one)", "global_batch",
         ("micro_batch", "grad_accum", "dp", "seq_len", "global_batch"),
         lambda k: (k.global_batch is None) & (_batch(k) * k.seq_len > MAX_DEFAULT_BATCH_TOKENS) & (k.grad_accum > 1),
         lambda k: f"micro_batch x grad_accum x dp x seq_len = {_batch(k) * k.seq_len:,} tokens is above 4M "
                   "tokens (pin --global-batch to plan a larger batch)"),
    *(Rule(**r) for r in zeropp_rules.RULES),
    *(Rule(**r) for r in moe_parallel.RULES),
    *(Rule(**r) for r in ssm_time.RULES),
    *(Rule(**r) for r in bundled_rules.RULES),  # the bundled trainer's refusals (trainer/config.py)
    Rule("stack_supports", "the stack cannot run this plan (see catalog/stacks)", "stack",
         ("stack", "sharding", "tp", "pp", "cp", "cp_impl", "precision", "offload", "compile", "async_tp", "activation_offload",
          "profiles"),
         lambda k: unsupported(k.profiles, k) if k.profiles is not None else False),
    Rule("gpu_memory", "does not fit in GPU memory", "memory", ("mem",),
         lambda k: _needed(k.mem) > k.mem["capacity_bytes"],
         lambda k: f"needs {_gib(_needed(k.mem)):.1f} GiB per GPU > {_gib(k.mem['capacity_bytes']):.1f} GiB "
                   f"(reserved peak {_gib(k.mem['total_bytes']):.1f} GiB)", memory=True),
    Rule("host_memory", "does not fit in host RAM", "memory", ("mem",),
         lambda k: k.mem["host_bytes_per_node"] > k.mem["host_capacity_bytes_per_node"],
         lambda k: f"needs {_gib(k.mem['host_bytes_per_node']):.0f} GiB host RAM per node > "
                   f"{_gib(k.mem['host_capacity_bytes_per_node']):.0f} GiB", memory=True),
)
BY_NAME = {r.name: r for r in RULES}
INDEX = {r.name: i for i, r in enumerate(RULES)}
REASONS = tuple(r.reason for r in RULES)
GPU_OOM = RULES.index(BY_NAME["gpu_memory"])
HOST_OOM = RULES.index(BY_NAME["host_memory"])
MEMORY = frozenset(i for i, r in enumerate(RULES) if r.memory)
assert len(set(REASONS)) == len(REASONS) == len(BY_NAME)
assert all(set(r.inputs) <= set(Layout.__dataclass_fields__) | {"dp", *CONTEXT} for r in RULES)


def first_violation(k: Knobs, rules: tuple[Rule, ...] = RULES) -> np.ndarray:
    """Index into RULES of the first rule each candidate breaks (FITS if none); `k` holds
    arrays of one length (Knobs.of_layout) and every context name the rules read."""
    n = len(k)
    reason = np.full(n, FITS, dtype=np.int64)
    for rule in reversed(rules):
        reason = np.where(np.broadcast_to(rule.bad(k), (n,)), INDEX[rule.name], reason)
    return reason


def structural(rules: tuple[Rule, ...] = RULES) -> tuple[Rule, ...]:
    return tuple(r for r in rules if not r.memory)


def _coded(name: str, value):
    if name in _CATEGORICAL and isinstance(value, str):
        return _CATEGORICAL[name].index(value)
    if name in _BOOLEAN:
        return int(bool(value))
    return value


def _knobs_for(rule: Rule, values: Mapping[str, object], context: Mapping[str, object]) -> Knobs | None:
    """The rule's inputs from the given values (None when one is missing and not relaxed)."""
    got = {}
    for name in rule.inputs:
        if name in context:
            got[name] = context[name]
        elif values.get(name) is not None:
            got[name] = _coded(name, values[name])
        elif name in rule.relaxed:
            got[name] = rule.relaxed[name]
        else:
            return None
    return Knobs(**got)


def violations(values: Mapping[str, object], **context) -> list[tuple[Rule, str]]:
    """Every rule that one plan (or a partial set of knobs) breaks, in table order, with its
    message. `values`: knob name -> value (strings for categoricals, as in ExecutionPlan);
    `context`: any of CONTEXT (`global_batch=None` means the batch is free)."""
    out = []
    for rule in RULES:
        k = _knobs_for(rule, values, context)
        if k is not None and bool(np.all(rule.bad(k))):
            out.append((rule, rule.explain(k)))
    return out


def check(values: Mapping[str, object], **context) -> None:
    """Raise a PlanError (the rule's field, its message) for the first rule broken."""
    broken = violations(values, **context)
    if broken:
        rule, message = broken[0]
        raise PlanError(rule.field, message)


__all__ = ["FITS", "GPU_OOM", "HOST_OOM", "REASONS", "RULES", "Knobs", "Rule", "check",
           "first_violation", "violations"]
