"""Enumerate execution plans for a scenario and evaluate them all in one vectorised pass.

Every blank knob of the scenario is searched (sharding x offload x checkpointing x micro batch x
gradient accumulation x tp x pp x vpp x cp and its implementation x sequence parallelism, and for a
mixture-of-experts model ep x etp: planner/moe_parallel.py); pinned
knobs take one value. Each candidate is either rejected with a reason (invalid combination, or
does not fit in GPU memory or host RAM) or kept; the kept ones are scored by the throughput model and ranked.
Combinations of searched knobs that no stack runs are not enumerated at all (planner/search_prune.py).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from planner import context_parallel, memory, moe_parallel, rules, search_prune, stage_split, zeropp
from planner.errors import PlanError
from planner.layout import ATTN, CKPT, FP8, GRAD_REDUCE, OFFLOAD, OPTIM, PREC, SHARD, STACK, Layout
from planner.model import ModelSpec
from planner.pinned import check_pinned
from planner.context_parallel import IMPL as CP_IMPL
from planner.scenario import CHECKPOINTINGS, CP_IMPLS, SHARDINGS, Scenario
from planner.settings import Settings, stack_profiles
from planner.stage_split import SPLIT_KNOBS
from planner.stacks import default_stack
from planner.system import System

MICRO_BATCHES = (1, 2, 4, 8, 16, 32, 64)
GRAD_ACCUMS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
# Context-parallel degrees the search tries (ring attention pays off on long sequences only:
# each GPU keeps at least this many tokens of the sequence).
CONTEXT_PARALLEL = (1, 2, 4, 8)
MIN_TOKENS_PER_CP_RANK = 4096
# "blocks" checkpointing: the share of blocks recomputed when the scenario does not pin it.
DEFAULT_CHECKPOINT_FRACTION = 0.5

# Rejection reasons: the rules of planner/rules.py, in table order (the first broken is counted).
REASONS, GPU_OOM, HOST_OOM, FITS = rules.REASONS, rules.GPU_OOM, rules.HOST_OOM, rules.FITS


@dataclass(frozen=True)
class SearchResult:
    layout: Layout  # every candidate
    reason: np.ndarray  # index into REASONS, FITS (-1) for those that fit
    mem: dict[str, np.ndarray]  # memory terms of every candidate

    @property
    def fits(self) -> np.ndarray:
        return self.reason == FITS

    def rejected_counts(self) -> dict[str, int]:
        counts = np.bincount(self.reason[self.reason >= 0], minlength=len(REASONS))
        return {REASONS[i]: int(c) for i, c in enumerate(counts) if c}


def default_precision(system: System) -> str:
    """bf16 where the GPU has it (A100 and later, MI200 and later), fp16 otherwise (V100)."""
    return "bf16" if system.gpu.bf16_tflops else "fp16"


def _divisors(n: int, limit: int | None = None) -> list[int]:
    top = n if limit is None else min(n, limit)
    return [d for d in range(1, top + 1) if n % d == 0]


def _values(pinned, default: list) -> list:
    return [pinned] if pinned is not None else default


def candidates(spec: ModelSpec, system: System, scenario: Scenario, seq_len: int,
               global_batch: int | None = None, profiles=None) -> Layout:
    """The cartesian product of every searched knob, as one Layout of arrays, less the combinations of
    searched knobs that no stack runs (planner/search_prune.py; `profiles`: the stack profiles, whose
    unsupported plans are left out too)."""
    gpus = system.gpus
    check_pinned(spec, system, scenario, seq_len,
                 global_batch if global_batch is not None else _global_batch(scenario, seq_len))
    tps = _values(scenario.tp, [d for d in _divisors(system.gpus_per_node) if gpus % d == 0])
    # pp need not divide n_layers (uneven stages); at most one block per stage
    pps = _values(scenario.pp, [d for d in _divisors(gpus, min(64, spec.n_layers))])
    vpps = _values(scenario.vpp, [1, 2])
    cps = _values(scenario.cp, [c for c in CONTEXT_PARALLEL
                                if c == 1 or (seq_len % (2 * c) == 0 and seq_len // c >= MIN_TOKENS_PER_CP_RANK)])
    sps = _values(scenario.sequence_parallel, [False, True])
    # an uneven pipeline only where pinned (Megatron-Core's --decoder-first/last-pipeline-num-layers, ...)
    split = tuple(int(getattr(scenario, k) or 0) for k in SPLIT_KNOBS)
    impls = [CP_IMPL[v] for v in _values(scenario.cp_impl, list(CP_IMPLS))]
    shape_rows = []
    for tp, pp, vpp, cp, impl, sp in itertools.product(tps, pps, vpps, cps, impls, sps):
        if gpus % (tp * pp * cp):
            continue
        if cp == 1 and impl != impls[0]:  # the implementation is moot without context parallelism
            continue
        if (impl == CP_IMPL["a2a+p2p"] and scenario.cp_impl is None
                and not context_parallel.hybrid_is_distinct(cp, tp, system.gpus_per_node)):
            continue  # the same plan as ring or ulysses
        # knob values that only repeat another candidate are skipped unless pinned
        if vpp > 1 and scenario.vpp is None and (pp == 1 or stage_split.chunks_bad(spec.n_layers, pp, vpp, *split)):
            continue
        if sp and tp == 1 and scenario.sequence_parallel is None:
            continue
        dp = gpus // (tp * pp * cp)
        for ep, etp in moe_parallel.ep_candidates(spec, tp, cp, dp, scenario.ep, scenario.etp):
            shape_rows.append((tp, pp, vpp, cp, impl, int(sp), dp, ep, etp))
    if not shape_rows:
        raise PlanError("gpus", f"no tp x pp x cp layout divides {gpus} GPUs")

    precision = scenario.precision or default_precision(system)
    global_batch = global_batch if global_batch is not None else _global_batch(scenario, seq_len)
    derive_ga = global_batch is not None and scenario.grad_accum is None
    zpp = zeropp.pinned(scenario)  # ZeRO++ knobs the scenario pins (None: searched)
    shardings = ["zero3"] if zpp is not None and zeropp.knobs_on(zpp) and scenario.sharding is None else list(SHARDINGS)
    grid = {
        "sharding": [SHARD[v] for v in _values(scenario.sharding, shardings)],
        "offload": [OFFLOAD[v] for v in _values(scenario.offload, list(OFFLOAD))],
        "activation_checkpointing": [CKPT[v] for v in _values(scenario.activation_checkpointing, list(CHECKPOINTINGS))],
        "micro_batch": _values(scenario.micro_batch, list(MICRO_BATCHES)),
        "grad_accum": [1] if derive_ga else _values(scenario.grad_accum, list(GRAD_ACCUMS)),
    }
    shapes = np.asarray(shape_rows, dtype=np.int64)
    mesh = np.meshgrid(np.arange(len(shapes)), *[np.asarray(v) for v in grid.values()], indexing="ij")
    flat = [m.reshape(-1) for m in mesh]
    idx, cols = flat[0], dict(zip(grid, flat[1:]))
    tp, pp, vpp, cp, cp_impl, sp, dp, ep, etp = (shapes[idx, j] for j in range(9))
    micro = cols["micro_batch"]
    if derive_ga:
        ga = np.maximum(global_batch // (micro * dp), 1)
    else:
        ga = cols["grad_accum"]
    if scenario.stack is not None:
        stack = np.full(idx.size, STACK[scenario.stack])
    else:
        stack = moe_parallel.default_stack(default_stack(cols["sharding"], tp, pp), ep)
    # DeepSpeed-style bucket sizes as Hugging Face's "auto" sets them: hidden^2 elements.
    h2 = spec.hidden * spec.hidden
    fraction = scenario.checkpoint_fraction or DEFAULT_CHECKPOINT_FRACTION
    ckpt = cols["activation_checkpointing"]
    varying = dict(stack=stack, tp=tp, pp=pp, vpp=vpp, cp=cp, cp_impl=cp_impl, ep=ep, etp=etp, dp=dp,
                   sequence_parallel=sp, sharding=cols["sharding"], offload=cols["offload"],
                   activation_checkpointing=ckpt, checkpoint_fraction=np.where(ckpt == CKPT["blocks"], fraction, 1.0),
                   micro_batch=micro, grad_accum=ga)
    constant = dict(
        **dict(zip(SPLIT_KNOBS, split)),
        precision=PREC[precision], fp8_recipe=FP8[scenario.fp8_recipe or "tensorwise"],
        grad_reduce_dtype=GRAD_REDUCE[scenario.grad_reduce_dtype or "default"],
        optimizer=OPTIM[scenario.optimizer or "adamw"], attention=ATTN[scenario.attention or "flash"],
        compile=int(bool(scenario.compile)), async_tp=int(bool(scenario.async_tp)),
        activation_offload=int(bool(scenario.activation_offload)), seq_len=seq_len,
        reduce_bucket_elems=h2, allgather_bucket_elems=h2, stage3_prefetch_elems=int(0.9 * h2),
        stage3_max_live_params=1_000_000_000, **{k: int(v) for k, v in (zpp or zeropp.OFF).items()},
    )
    # combinations no stack runs, of knobs the search chose, are not evaluated (planner/search_prune.py);
    # the rules that read no per-step knob are evaluated once per shape x sharding x offload
    context = dict(spec=spec, system=system, global_batch=global_batch, profiles=profiles)
    inner = idx.size // (len(shapes) * len(grid["sharding"]) * len(grid["offload"]))
    coarse = {k: v[::inner] for k, v in varying.items() if k not in search_prune.PER_STEP}
    drop = search_prune.dropped(rules.Knobs(**varying, **constant, **context), search_prune.searched_rules(system, scenario),
                                rules.Knobs(**coarse, **constant, **context), inner)
    if drop.any():
        keep = np.flatnonzero(~drop)
        varying = {k: v[keep] for k, v in varying.items()}
    n = varying["tp"].size
    lay = Layout(**varying, **{k: np.full(n, v) for k, v in constant.items()})
    lay = lay if zpp is not None else zeropp.with_searched(lay, system.gpus_per_node)
    if scenario.sharding is not None:  # pinned: the user asked for it, even over one rank
        return lay
    return lay.take(np.flatnonzero(~moot_sharding(spec, lay, system)))


def moot_sharding(spec: ModelSpec, lay: Layout, system: System) -> np.ndarray:
    """Sharding that repeats a plainer candidate. ZeRO / FSDP over a group of one rank (dp x cp = 1,
    or fsdp_hybrid with one rank per node) shards nothing: the unsharded plan under another name (the
    same numbers, or only the wrapper's overhead); kept where it offloads (ZeRO-Offload runs on one
    GPU: Ren et al. 2021) or a mixture-of-experts model still shards its experts over edp > 1. And
    fsdp_hybrid whose shard group is the whole data-parallel group replicates nothing: it is
    fsdp_full_shard (PyTorch HYBRID_SHARD with a replicate group of one)."""
    degree = memory.shard_degree(lay, system)
    moot = (lay.sharding != SHARD["none"]) & (degree == 1) & (lay.offload == OFFLOAD["none"])
    if spec.moe_experts:
        moot &= moe_parallel.edp(lay) <= 1
    return moot | ((lay.sharding == SHARD["fsdp_hybrid"]) & (degree == lay.dp * lay.cp))


def _global_batch(scenario: Scenario, seq_len: int) -> int | None:
    if scenario.global_batch_tokens is not None:
        if scenario.global_batch_tokens % seq_len:  # "4M" is 4,000,000: say what is near it
            lo = scenario.global_batch_tokens // seq_len * seq_len
            near = " and ".join(f"{t:,} ({t // seq_len:,} sequence{'s' * (t != seq_len)})" for t in (lo, lo + seq_len) if t > 0)
            raise PlanError("global_batch_tokens", f"{scenario.global_batch_tokens:,} is not a multiple of seq_len "
                            f"({seq_len}); the nearest: {near}, or pin --global-batch in sequences")
        tokens_batch = scenario.global_batch_tokens // seq_len
        if scenario.global_batch is not None and scenario.global_batch != tokens_batch:
            raise PlanError("global_batch", f"{scenario.global_batch} sequences disagrees with "
                            f"global_batch_tokens ({tokens_batch} sequences)")
        return tokens_batch
    return scenario.global_batch


def reject_reasons(spec: ModelSpec, system: System, lay: Layout, seq_len: int, global_batch: int | None,
                   profiles=None, mem: dict | None = None) -> np.ndarray:
    """Index into REASONS of the first rule each candidate breaks (FITS if none); the memory
    rules count only where `mem` is given."""
    k = rules.Knobs.of_layout(lay, spec=spec, system=system, seq_len=seq_len, global_batch=global_batch,
                              profiles=profiles, mem=mem)
    return rules.first_violation(k, rules.RULES if mem is not None else rules.structural())


def search(spec: ModelSpec, system: System, scenario: Scenario, settings: Settings, seq_len: int,
           global_batch: int | None = None) -> SearchResult:
    profiles = stack_profiles(settings)
    lay = candidates(spec, system, scenario, seq_len, global_batch, profiles)
    mem = memory.memory_arrays(spec, lay, system, settings)
    global_batch = global_batch if global_batch is not None else _global_batch(scenario, seq_len)
    reason = reject_reasons(spec, system, lay, seq_len, global_batch, profiles, mem)
    return SearchResult(layout=lay, reason=reason, mem=mem)


def simplicity(lay: Layout) -> np.ndarray:
    """Lower is simpler: less sharding, no offload, no recompute, smaller tp/pp, bigger micro batch."""
    return (
        lay.sharding * 1000
        + lay.offload * 300
        + np.minimum(lay.activation_checkpointing, 1) * 100 + lay.activation_checkpointing * 10
        + (lay.tp * lay.pp * lay.vpp * lay.cp) * 10
        + lay.sequence_parallel * 5
        + zeropp.any_on(lay) * 500
        - np.log2(lay.micro_batch)
        + 0.5 * np.log2(lay.grad_accum)
    )


# Tokens per optimizer step by model size (Brown et al. 2020, GPT-3 Table 2.1), capped at the
# 4M tokens of Llama 2 (Touvron et al. 2023): interpolated in log(parameters).
GPT3_BATCH_TOKENS = ((125e6, 0.5e6), (760e6, 0.5e6), (1.3e9, 1e6), (2.7e9, 1e6), (6.7e9, 2e6),
                     (13e9, 2e6), (175e9, 3.2e6), (1e12, 4e6))


def batch_size_params(spec: ModelSpec) -> tuple[float, str]:
    """The parameter count the batch rule reads, and its word: a dense model's total; a mixture of
    experts' ACTIVE parameters, since the optimal batch follows compute per token, not storage
    (DeepSeek LLM, Bi et al. 2024, arXiv 2401.02954, sec. 3.1: B_opt = 0.292 C^0.327 with C = M D,
    M the FLOPs per token; an MoE token runs through its active parameters only)."""
    from planner import moe

    if moe.is_moe(spec):
        return float(moe.active_params(spec)), "active "
    return float(spec.n_params), ""


def default_global_batch(spec: ModelSpec, gpus: int, seq_len: int) -> tuple[int, str]:
    """One global batch (sequences) for every plan of a scenario that does not pin one, and the
    rule that chose it: the GPT-3 batch for the model's size (an MoE's active parameters),
    rounded (in log) to the GPU count's odd part times a power of two, so that every
    data-parallel degree divides it."""
    xs = np.log([p for p, _ in GPT3_BATCH_TOKENS])
    ys = np.log([t for _, t in GPT3_BATCH_TOKENS])
    n_params, word = batch_size_params(spec)
    target_tokens = float(np.exp(np.interp(np.log(n_params), xs, ys)))
    target = max(target_tokens / seq_len, 1.0)
    odd = gpus
    while odd % 2 == 0:
        odd //= 2
    k = max(round(np.log2(target / odd)), 0)
    batch = odd * 2**k
    size = f"{n_params / 1e9:.3g}B" if n_params >= 1e9 else f"{n_params / 1e6:.3g}M"  # not 0.000479B
    rule = (f"global batch {batch} sequences ({batch * seq_len / 1e6:.2g}M tokens): GPT-3's "
            f"{target_tokens / 1e6:.2g}M tokens for {size} {word}parameters, rounded to "
            f"{odd} x 2^k sequences; pin --global-batch to plan another")
    return batch, rule
