"""A runs file's mixture-of-experts facts, as people write them (planner/runs.py and
planner/run_moe_model.py use these).

Optional columns (any of the spellings in `COLUMNS`): `ep`, `etp`, `moe_experts` / `num_experts`,
`moe_top_k` / `top_k`, `moe_ffn_hidden`, `moe_shared_experts`, `n_active_params_B`, `capacity_factor`.
The same facts in the notes, a `layout` column or the model name: "EP 8", "EP8", "ep=8", "expert parallel
8", "expert-parallel size 8", "--expert-model-parallel-size 8", "8-way expert parallelism", "ETP 1",
"--expert-tensor-parallel-size 1", "8 experts, top-2", "64 experts top 6", "E8", "num_experts=64",
"--moe-router-topk 8", "2 experts per token", "capacity factor 1.25", "46.7B total / 12.9B active",
"A3B" (Qwen's "-A3B": ~3B active), "8x7B" (Mixtral's 8 experts of a 7B dense model), "1 shared expert".
A column wins over the notes; a cell that is not a number is a PlanError naming the column.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from planner import run_layout_notes, run_text
from planner.errors import PlanError

# canonical fact -> column spellings (headers are matched case-insensitively)
COLUMNS = {
    "ep": ("ep", "expert_parallel", "expert_parallel_size", "expert_model_parallel_size", "expert_parallelism"),
    "etp": ("etp", "expert_tensor_parallel", "expert_tensor_parallel_size", "expert_tensor_model_parallel_size"),
    "experts": ("moe_experts", "num_experts", "n_experts", "experts", "num_local_experts", "n_routed_experts",
                "moe_num_experts", "num_moe_experts"),
    "top_k": ("moe_top_k", "top_k", "topk", "moe_router_topk", "num_experts_per_tok", "experts_per_token",
              "moe_topk", "router_topk"),
    "ffn": ("moe_ffn_hidden", "moe_ffn_hidden_size", "moe_intermediate_size", "expert_ffn_hidden",
            "expert_ffn_hidden_size", "expert_intermediate_size"),
    "shared": ("moe_shared_experts", "shared_experts", "n_shared_experts", "num_shared_experts"),
    "active_b": ("n_active_params_B", "active_params_B", "n_params_active_B", "active_params", "n_active_params",
                 "activated_params_B"),
    "capacity": ("capacity_factor", "moe_capacity_factor", "moe_expert_capacity_factor", "expert_capacity_factor"),
}
LAYOUT_COLUMNS = ("layout", "parallelism", "parallel_layout", "parallel_config")

_DEG = r"(?:ism)?(?:[\s_-]*(?:size|degree))?\s*(?:of|=|:)?\s*(\d+)\b"
_EP = (r"\bEP\s*[=:]?\s*(\d+)\b", r"expert[\s_-]*(?:model[\s_-]*)?parallel" + _DEG, r"(\d+)[\s-]*way\s+expert")
_ETP = (r"\bETP\s*[=:]?\s*(\d+)\b", r"expert[\s_-]*tensor[\s_-]*(?:model[\s_-]*)?parallel" + _DEG,
        r"(\d+)[\s-]*way\s+expert[\s_-]*tensor")
_EXPERTS = (r"(\d+)\s*(?:routed\s+|local\s+)?experts\b(?!\s*per)", r"\bE\s*=?\s*(\d+)\b(?![.\d]*\s*[BM]\b)",
            r"(?:num|n|moe)[\s_-]*(?:routed[\s_-]*|local[\s_-]*)?experts\s*[=:]?\s*(\d+)\b",
            r"experts\s*[=:]\s*(\d+)\b")
_TOP_K = (r"\btop[\s_-]*k?\s*[=:]?\s*(\d+)\b", r"router[\s_-]*topk\s*[=:]?\s*(\d+)\b",
          r"experts[\s_-]*per[\s_-]*tok(?:en)?\s*[=:]?\s*(\d+)\b", r"(\d+)\s*(?:active|activated)\s+experts",
          r"(\d+)\s*experts?\s*per\s*token")
_FFN = (r"moe[\s_-]*(?:ffn[\s_-]*hidden|intermediate)(?:[\s_-]*size)?\s*[=:]?\s*(\d+)\b",
        r"expert[\s_-]*(?:ffn|mlp|intermediate)(?:[\s_-]*(?:hidden|width|size))*\s*[=:]?\s*(\d+)\b")
_SHARED = (r"(\d+)\s*shared[\s_-]*experts?\b", r"(?:n|num|moe)[\s_-]*shared[\s_-]*experts\s*[=:]?\s*(\d+)\b")
_CAPACITY = r"(?:capacity[\s_-]*factor|\bCF)\s*(?:of|=|:)?\s*(\d+(?:\.\d+)?)"
_B = r"(\d+(?:\.\d+)?)\s*([BMT])\b"
_SCALE = {"b": 1.0, "m": 1e-3, "t": 1e3}
_TOTAL_ACTIVE = re.compile(_B + r"\s*(?:total|params?)?[^/;]{0,12}?(?:/|,|and|with)\s*" + _B + r"\s*(?:active|activated)",
                           re.I)
_ACTIVE = (re.compile(_B + r"\s*(?:active|activated)\b", re.I),
           re.compile(r"(?:active|activated)(?:\s*param\w*)?\s*[=:]?\s*" + _B, re.I),
           re.compile(r"(?<![\w.])A(\d+(?:\.\d+)?)(B)\b"))  # Qwen's "-A3B", "A14B", "A2.7B"
_TOTAL = re.compile(_B + r"\s*total\b", re.I)
_BASE = re.compile(r"(?<![\w.])(\d+)\s*x\s*(\d+(?:\.\d+)?)\s*([BM])\b", re.I)  # "8x7B": 8 experts of a 7B model
# model families that are mixtures of experts (their papers and model cards), for names without a preset
MOE_FAMILIES = re.compile(r"mixtral|deepseek[\s_-]*(?:v2|v3|r1|moe|coder[\s_-]*v2)|qwen\d*(?:\.\d+)?[\s_-]*moe|olmoe|"
                          r"dbrx|grok[\s_-]*[12]\b|arctic|switch[\s_-]*(?:transformer|base|large|xxl|c)|\bglam\b|"
                          r"gshard|st[\s_-]*moe|phi[\s_-]*3\.5[\s_-]*moe|jetmoe|hunyuan[\s_-]*large|"
                          r"llama[\s_-]*4[\s_-]*(?:scout|maverick)|granite.*moe|minimax|kimi[\s_-]*k2", re.I)


@dataclass
class MoeFacts:
    """What a row states about its experts (None: not stated) and what says the row is MoE."""

    experts: int | None = None
    top_k: int | None = None
    ffn: int | None = None
    shared: int | None = None
    total_b: float | None = None
    active_b: float | None = None
    base_b: float | None = None  # "8x7B": the dense model each expert was cut from
    capacity_factor: float | None = None
    signals: list[str] = field(default_factory=list)

    @property
    def is_moe(self) -> bool:
        return bool(self.signals)


def _cell(row, keys: tuple[str, ...]) -> tuple[str, str] | None:
    lower = {k.lower(): k for k in row}
    for k in keys:
        real = lower.get(k.lower())
        if real and (row.get(real) or "").strip():
            return real, row[real]
    return None


def _column(row, fact: str, canonical: str, cast=int):
    """The fact's column as a number (errors name the column the row uses)."""
    found = _cell(row, COLUMNS[fact])
    if found is None:
        return None
    key, value = found
    try:
        v = run_text.number({"id": row.get("id"), canonical: value}, canonical)
    except PlanError as e:
        raise PlanError(key, e.message) from None
    if v is not None and cast is int and v != int(v):
        raise PlanError(key, f"row {row.get('id')}: {value!r} is not a whole number")
    return None if v is None else cast(v)


def text_of(row) -> str:
    """The row's free text where layouts and MoE facts are written: a layout column, then the notes."""
    found = _cell(row, LAYOUT_COLUMNS)
    return " ; ".join(t for t in ((found[1] if found else ""), row.get("notes") or "") if t)


def _int_in(text: str, patterns) -> int | None:
    for pat in patterns:
        m = re.search(pat, text, re.I)
        if m and int(m.group(1)) > 0:
            return int(m.group(1))
    return None


def _billions(m, first: int = 1) -> float:
    return float(m.group(first)) * _SCALE[m.group(first + 1).lower()]


def degree_of(row, fact: str, gpus: int, notes: list[str]) -> int | None:
    """ep or etp as stated: the column, else the text (not used where the notes describe another GPU count)."""
    given = _column(row, fact, "ep" if fact == "ep" else "etp")
    if given is not None:
        return given
    text = text_of(row)
    if fact == "ep":
        text = re.sub(r"expert[\s_-]*tensor[\s_-]*(?:model[\s_-]*)?parallel\w*", " ", text, flags=re.I)
    found = _int_in(text, _EP if fact == "ep" else _ETP)
    if found is None:
        return None
    if run_layout_notes.other_gpu_counts(text, gpus):
        notes.append(f"the notes' {fact} {found} goes with another GPU count than the row's {gpus}: not used")
        return None
    notes.append(f"{fact} {found} from the notes")
    return found


def facts_of(row) -> MoeFacts:
    """Every MoE fact the row states, and the signals that make it an MoE row."""
    name = (row.get("model_name") or "").strip()
    text = text_of(row)
    both = f"{name} ; {text}"
    f = MoeFacts(experts=_column(row, "experts", "moe_experts"), top_k=_column(row, "top_k", "moe_top_k"),
                 ffn=_column(row, "ffn", "moe_ffn_hidden"), shared=_column(row, "shared", "moe_shared_experts"),
                 active_b=_column(row, "active_b", "n_active_params_B", float),
                 capacity_factor=_column(row, "capacity", "capacity_factor", float))
    stated = [k for k, v in (("experts", f.experts), ("top-k", f.top_k), ("expert width", f.ffn),
                             ("active parameters", f.active_b)) if v is not None]
    if stated:
        f.signals.append(f"its {', '.join(stated)} column")
    base = _BASE.search(name)
    if base:
        f.experts = f.experts or int(base.group(1))
        f.base_b = _billions(base, 2)
        f.signals.append(f"{base.group(0)!r} in the name ({base.group(1)} experts of a {f.base_b:g}B model)")
    text_experts = _int_in(text, _EXPERTS)
    if text_experts and f.experts is None:
        f.experts = text_experts
        f.signals.append(f"{text_experts} experts in the notes")
    f.top_k = f.top_k or _int_in(text, _TOP_K)
    f.ffn = f.ffn or _int_in(text, _FFN)
    f.shared = f.shared if f.shared is not None else _int_in(text, _SHARED)
    if f.capacity_factor is None:
        m = re.search(_CAPACITY, text, re.I)
        f.capacity_factor = float(m.group(1)) if m else None
    pair = _TOTAL_ACTIVE.search(text)
    if pair:
        f.total_b, f.active_b = _billions(pair, 1), f.active_b or _billions(pair, 3)
        f.signals.append(f"{pair.group(0)!r}")
    if f.active_b is None:
        for pat in _ACTIVE:
            m = pat.search(both)
            if m:
                f.active_b = _billions(m)
                f.signals.append(f"{m.group(0)!r} ({f.active_b:g}B active)")
                break
    if f.total_b is None:
        m = _TOTAL.search(text)
        f.total_b = _billions(m) if m else None
    if re.search(r"\bMoE\b|mixture[\s_-]*of[\s_-]*experts", both, re.I):
        f.signals.append("'MoE' in the name or notes")
    family = MOE_FAMILIES.search(name)
    if family:
        f.signals.append(f"{family.group(0)!r} is a mixture-of-experts family")
    return f


_EP_RULES = ("ep_needs_moe", "etp_needs_moe", "ep_experts", "ep_ranks", "ep_stage_ranks")
# a stack without expert parallelism (planner/moe_parallel.py NO_EP_STACKS) -> the one that runs the row's ep
_EP_STACK = {"fsdp": "torchtitan", "hf": "megatron_deepspeed"}


@dataclass(frozen=True)
class ExpertLayout:
    ep: int
    etp: int
    stack: str
    ep_stated: bool  # False: an MoE row without ep; planner/validate.py takes the planner's best ep


def expert_layout_of(row, spec, system, tp: int, pp: int, cp: int, dp: int, stack: str,
                     notes: list[str]) -> ExpertLayout:
    """ep and etp as stated, checked by Megatron-Core's rules (planner/moe_parallel.py): a value they
    refuse is a PlanError naming ep / etp and what is allowed. Not stated: etp = tp for Megatron
    (megatron/training/arguments.py validate_args: `expert_tensor_parallel_size = tensor_model_parallel_size`
    when None) where the ranks allow it, else 1; ep left to the planner (MoE) or 1 (dense)."""
    from planner import moe, rules

    ep, etp = degree_of(row, "ep", system.gpus, notes), degree_of(row, "etp", system.gpus, notes)
    ep_stated = ep is not None or not moe.is_moe(spec)
    if ep is None:
        ep = 1
        if moe.is_moe(spec):
            notes.append("ep not stated: the planner's best for the stated layout")
    if etp is None:
        ranks = tp * cp * dp
        etp = tp if stack == "megatron" and moe.is_moe(spec) and ranks % (ep * tp) == 0 else 1
        if moe.is_moe(spec) and ep_stated:
            notes.append(f"etp not stated: {etp}" + (" (Megatron-Core's default: tp)" if etp > 1 else ""))
    if ep > 1 and stack in _EP_STACK:
        notes.append(f"stack {stack} has no expert parallelism: {_EP_STACK[stack]} runs ep {ep}")
        stack = _EP_STACK[stack]
    values = dict(ep=ep, etp=etp, tp=tp, pp=pp, cp=cp, dp=dp)
    for name in _EP_RULES if ep > 1 or etp > 1 else ():  # ep 1: the layout's own checks (a row not scored)
        rule = rules.BY_NAME[name]
        k = rules.Knobs(**{i: values[i] if i in values else {"spec": spec, "system": system}[i] for i in rule.inputs})
        if bool(rule.bad(k)):
            message = rule.explain(k)
            raise PlanError(rule.field, f"row {row.get('id')}: {message}")
    return ExpertLayout(ep, etp, stack, ep_stated)
