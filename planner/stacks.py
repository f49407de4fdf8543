"""Stack profiles for the analytic model: which stack runs a plan, and its numbers per candidate.

The profiles are catalog data (catalog/stacks/<id>.toml, `hardware.stacks.StackProfile`); this
module turns them into per-candidate arrays for the vectorised formulas, and says which stack a
plan runs on when the scenario does not pin one.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from hardware.stacks import StackProfile
from planner.layout import SHARD, STACK, Layout
from planner.scenario import CP_IMPLS, STACKS

# Numeric fields of a profile used by the formulas (per candidate, by the candidate's stack).
NUMERIC = tuple(name for name, f in StackProfile.model_fields.items() if f.annotation in (float, bool))

# Without a pinned stack, a plan runs on the stack that usually runs its sharding: Megatron-LM
# for DDP/ZeRO-1 (its distributed optimizer is ZeRO-1), Megatron-DeepSpeed for ZeRO-2/3 with
# model parallelism, DeepSpeed + Hugging Face for ZeRO-2/3 without, PyTorch FSDP for FSDP.
DEFAULT_RULE = ("none/zero1 -> megatron; zero2/zero3 -> hf (megatron_deepspeed with tp/pp > 1); "
                "fsdp_* -> fsdp")


def default_stack(sharding: np.ndarray, tp: np.ndarray, pp: np.ndarray) -> np.ndarray:
    s = np.asarray(sharding)
    model_parallel = (np.asarray(tp) > 1) | (np.asarray(pp) > 1)
    zero23 = (s == SHARD["zero2"]) | (s == SHARD["zero3"])
    return np.select(
        [s >= SHARD["fsdp_full_shard"], zero23 & model_parallel, zero23],
        [STACK["fsdp"], STACK["megatron_deepspeed"], STACK["hf"]],
        default=STACK["megatron"],
    )


def profile_table(profiles: dict[str, StackProfile]) -> dict[str, np.ndarray]:
    """Each numeric field as an array indexed by stack code (missing stacks: the prior). Built once per
    set of profile objects (frozen; kept with the table so that their ids stay theirs): a profile fit
    plans each run thousands of times, one plan at a time. Callers index it (`v[code]`: a copy)."""
    given = tuple(profiles.get(name) for name in STACKS)
    key = tuple(map(id, given))
    entry = _TABLES.get(key)
    if entry is None:  # (the service plans in several threads: a cleared cache is only a miss)
        rows = [p or StackProfile(id=name, name=name) for p, name in zip(given, STACKS)]
        entry = (given, {k: np.array([float(getattr(r, k)) for r in rows]) for k in NUMERIC})
        if len(_TABLES) >= 64:
            _TABLES.clear()
        _TABLES[key] = entry
    return entry[1]


_TABLES: dict[tuple[int, ...], tuple[tuple, dict[str, np.ndarray]]] = {}


class Columns(Mapping):
    """Per-candidate profile values, each field gathered by the candidates' stack codes on first use:
    a search reads a fraction of the ~45 fields, and each gather is a float array as long as the
    candidates (MoE searches: millions). `merged` overrides fields without gathering the others."""

    def __init__(self, table: dict[str, np.ndarray], code: np.ndarray, done: dict | None = None):
        self._table, self._code, self._done = table, code, dict(done or {})

    def __getitem__(self, key: str) -> np.ndarray:
        if key not in self._done:
            self._done[key] = self._table[key][self._code]  # KeyError for an unknown field
        return self._done[key]

    def __contains__(self, key) -> bool:
        return key in self._done or key in self._table

    def __iter__(self):
        return iter(dict.fromkeys([*self._table, *self._done]))

    def __len__(self) -> int:
        return len(dict.fromkeys([*self._table, *self._done]))

    def merged(self, updates: Mapping) -> "Columns":
        return Columns(self._table, self._code, {**self._done, **updates})


def merged(prof: Mapping, updates: Mapping) -> Mapping:
    """`{**prof, **updates}` that leaves a `Columns`' fields not gathered yet lazy."""
    return prof.merged(updates) if isinstance(prof, Columns) else {**prof, **updates}


def per_candidate(profiles: dict[str, StackProfile], layout: Layout) -> Columns:
    return Columns(profile_table(profiles), np.asarray(layout.stack))


def unsupported(profiles: dict[str, StackProfile], layout: Layout) -> np.ndarray:
    """Candidates whose stack cannot run them (sharding, tp/pp/cp and its cp_impl, fp8, offload, compile)."""
    from planner.layout import OFFLOAD, PREC

    bad = np.zeros(len(layout), dtype=bool)
    code = np.asarray(layout.stack)
    for name, i in STACK.items():
        prof = profiles.get(name)
        if prof is None:
            continue
        mine = code == i
        if not mine.any():
            continue
        allowed = np.isin(layout.sharding, [SHARD[s] for s in prof.shardings if s in SHARD])
        b = ~allowed
        b |= (~np.bool_(prof.tensor_parallel)) & (layout.tp > 1)
        b |= (~np.bool_(prof.pipeline_parallel)) & (layout.pp > 1)
        impls = [CP_IMPLS.index(x) for x in prof.cp_impls if x in CP_IMPLS] if prof.context_parallel else []
        b |= (layout.cp > 1) & ~np.isin(layout.cp_impl, impls)
        b |= (~np.bool_(prof.fp8)) & (layout.precision == PREC["fp8"])
        b |= (~np.bool_(prof.offload)) & (layout.offload != OFFLOAD["none"])
        b |= (~np.bool_(prof.compile)) & (layout.compile == 1)
        b |= (~np.bool_(prof.async_tp)) & (layout.async_tp == 1)
        b |= (~np.bool_(prof.activation_offload)) & (layout.activation_offload == 1)
        bad |= mine & b
    return bad
