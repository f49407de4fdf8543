"""Knobs a runs file states in free text (its `notes`, `internode_network`, optional columns).

Curators spell one fact many ways: "8x200 Gb/s InfiniBand HDR", "VP=6", "vpp 6",
"virtual_pipeline_model_parallel_size 6", "interleaved schedule with 6 model chunks", "CP=2", "cp2",
"context_parallel_size=2", "1,024". Each reader here returns the planner's value (or None where the
text says nothing) and appends to `notes` whatever it assumed. planner/runs.py calls them.
"""

from __future__ import annotations

import math
import re

from planner import context_parallel, run_units, stage_split
from planner.errors import PlanError

# ---------------------------------------------------------------- numbers

_NUMBER = re.compile(r"^[~≈]?\s*(-?\d[\d,_]*(?:\.\d+)?(?:[eE][+-]?\d+)?)\s*(?:\(.*\))?$")


def _k_hint(text: str) -> str:
    """'16K' in a count column: K is 1,000 or 1,024 (16K GPUs are 16,384 in one paper, 16,000 in another), so the
    cell is refused; the hint says to write the count itself (it said only "is not a number")."""
    k = re.fullmatch(r"(\d+(?:\.\d+)?)\s*[kK]", text.strip())
    if k is None:
        return ""
    n = float(k.group(1))
    return f" ({k.group(0)}: K may be 1,000 or 1,024; write the count itself, e.g. {n * 1024:.0f} or {n * 1000:.0f})"


def number(row, key: str) -> float | None:
    """A numeric cell: '1,024', '~64', '64 (8 nodes)', '7B', '350M', '1420 ms', '64 GPUs', 'TP8' (the column's
    unit words and scales: planner/run_units.py), '4k' (seq_len: x 1024); blank -> None. Counts and
    measurements are positive: zero, a negative number or text is a PlanError naming the cell."""
    raw = (row.get(key) or "").strip()
    if not raw or raw.lower() in ("n/a", "na", "-", "?", "none", "not stated", "unknown", "not reported"):
        return None
    v, factor = run_units.bare(key, raw)
    m = _NUMBER.match(v)
    if not m:
        raise PlanError(key, f"row {row.get('id')}: {raw!r} is not a number{_k_hint(v)}")
    value = float(m.group(1).replace(",", "").replace("_", "")) * factor
    if not math.isfinite(value):  # '1e400': float() overflows to inf
        raise PlanError(key, f"row {row.get('id')}: {raw!r} is not a finite number")
    if value <= 0:
        raise PlanError(key, f"row {row.get('id')}: {raw!r} must be > 0")
    if value < run_units.SMALLEST:
        raise PlanError(key, f"row {row.get('id')}: {raw!r} is too small (at least {run_units.SMALLEST:g})")
    most = run_units.MAXIMA.get(key)
    if most is not None and value > most:
        raise PlanError(key, f"row {row.get('id')}: {raw!r} is too large (at most {most:,.0f})")
    if key in run_units.COUNTS and value != int(value):
        raise PlanError(key, f"row {row.get('id')}: {raw!r} is not a whole number")
    return value


def mfu_of(row, notes: list[str]) -> float | None:
    """measured_mfu as a fraction: '41%' or 41.5 (a percentage, > 1) -> 0.415 (noted)."""
    mfu = number(row, "measured_mfu")
    if mfu is not None and mfu > 1:
        notes.append(f"measured_mfu {mfu:g} read as a percentage: {mfu / 100:g}")
        return mfu / 100
    return mfu


def column(row, *keys: str) -> str:
    """The first non-blank cell of the optional columns `keys` ('' if none is there)."""
    return next(((row.get(k) or "").strip() for k in keys if (row.get(k) or "").strip()), "")


def _int_in(text: str, patterns: tuple[str, ...]) -> int | None:
    for pat in patterns:
        m = re.search(pat, text, re.I)
        if m:
            return int(next(g for g in m.groups() if g))
    return None


def _int_column(row, keys: tuple[str, ...]) -> int | None:
    for k in keys:
        if (row.get(k) or "").strip():
            v = number(row, k)
            return int(v) if v is not None else None
    return None


# ---------------------------------------------------------------- network

# InfiniBand generations (and NIC families) -> Gbps per port (InfiniBand Trade Association roadmap;
# ConnectX-6 = HDR 200, ConnectX-7 = NDR 400)
_LINKS = [(r"HDR\s*100", 100.0), (r"NDR\s*200", 200.0), (r"\bXDR", 800.0), (r"NDR", 400.0), (r"HDR", 200.0),
          (r"\bEDR", 100.0), (r"\bFDR", 56.0), (r"CONNECTX-?7", 400.0), (r"CONNECTX-?6", 200.0)]
_UNITS = {"tbps": 1000.0, "tb/s": 1000.0, "tbit/s": 1000.0, "tb": 8000.0, "gbps": 1.0, "gb/s": 1.0, "gbit/s": 1.0,
          "gbits/s": 1.0, "gbe": 1.0, "g": 1.0, "gb": 8.0}
_RATE = r"(\d+(?:\.\d+)?)\s*(Tbps|Tb/s|Tbit/s|TB/s|Gbps|Gb/s|Gbit/s|Gbits/s|GbE|GB/s|G)(?![a-z])"
_COUNT = r"(\d+)\s*(?:x|×|\*)\s*"


def _gbps(value: str, unit: str) -> float:
    u = unit.lower()
    if u in ("tb/s",) and unit[1] == "B":  # TB/s: bytes
        u = "tb"
    if u == "gb/s" and unit[1] == "B":  # GB/s: bytes
        u = "gb"
    return float(value) * _UNITS[u]


def internode_gbps(text: str, per_node_gpus: int, notes: list[str]) -> float | None:
    """Gbps per node (one direction) of a row's `internode_network`; None where it gives no rate."""
    m = re.search(_COUNT + _RATE, text, re.I) or re.search(_COUNT + r"(\d+(?:\.\d+)?)(?![\d.]*\s*[a-z%])", text, re.I)
    if m:  # "8x200 Gb/s", "8 x 400G", "Slingshot-11 4x200" (a NIC's rate: Gb/s)
        unit = m.group(3) if m.lastindex and m.lastindex >= 3 and m.group(3) else "Gbps"
        return int(m.group(1)) * _gbps(m.group(2), unit)
    m = re.search(_RATE + r"\s*(?:x|×|\*)\s*(\d+)\b", text, re.I)
    if m:  # "400 Gbps x 8"
        return int(m.group(3)) * _gbps(m.group(1), m.group(2))
    link = next((gbps for pat, gbps in _LINKS if re.search(pat, text.upper())), None)
    nics = re.search(r"(\d+)\s*(?:x\s*)?(?:NICs|HCAs|rails|ports|adapters)\b|(\d+)\s*(?:x|×)\s*(?:[A-Za-z-]*\s*)?"
                     r"(?:HDR|NDR|EDR|XDR|ConnectX)", text, re.I)
    count = int(next(g for g in nics.groups() if g)) if nics else None
    m = re.search(_RATE, text, re.I)
    if m:
        gbps = _gbps(m.group(1), m.group(2))
        if re.search(r"per\s+(GPU|accelerator|device)", text, re.I):
            return gbps * per_node_gpus
        if count:
            return gbps * count
        if re.search(r"per\s+node|node[\s-]*(to|-)[\s-]*node|aggregate|total", text, re.I):
            return gbps
        if re.search(r"per\s+(NIC|HCA|port|link|rail)", text, re.I) or (link and gbps == link):
            notes.append(f"network {gbps:g} Gbps per NIC, NIC count not stated: one NIC per GPU "
                         f"({per_node_gpus}, rail-optimised DGX/HGX nodes)")
            return gbps * per_node_gpus
        notes.append(f"network {gbps:g} Gbps, neither per GPU nor a NIC count stated: read as per node")
        return gbps
    if link:
        if count:
            return link * count
        notes.append(f"network: {link:g} Gbps links, NIC count not stated: one NIC per GPU "
                     f"({per_node_gpus}, rail-optimised DGX/HGX nodes)")
        return link * per_node_gpus
    return None


# ---------------------------------------------------------------- parallel knobs

def cp_of(row, notes: list[str]) -> int:
    """Context-parallel degree: a `cp` column, else the notes ("CP=2", "cp2", "context parallel 2",
    "context_parallel_size=2", "FSDP 4 x CP 2"), a DeepSpeed-Ulysses degree ("sequence parallel
    (DeepSpeed-Ulysses) 8": planner/context_parallel.py); 1 where nothing says so."""
    given = _int_column(row, ("cp", "context_parallel", "context_parallel_size"))
    if given:
        return given
    text = row.get("notes") or ""
    found = context_parallel.ulysses_degree(text) or _int_in(text, (r"\bCP(?:[\s_-]*(?:size|degree))?\s*[=:]?\s*(\d+)\b",
                           r"context[\s_-]*parallel(?:ism)?(?:[\s_-]*(?:size|degree))?(?:\s*(?:of|=|:))?\s*(\d+)\b",
                           r"(\d+)[\s-]*way\s+(?:context[\s_-]*parallel|CP\b)"))
    return found or 1


_VPP = (r"interleave[^=\d;]*=\s*(\d+)", r"\bVPP?\s*[=:]?\s*(\d+)\b",
        r"virtual[\s_-]*pipeline(?:[\s_-]*(?:model|parallel|size|stages?|degree|chunks?))*\s*[=:]?\s*(\d+)",
        r"virtual[\s_-]*stages?[\s_-]*per[\s_-]*(?:pipeline[\s_-]*)?(?:rank|GPU|stage)\s*[=:]?\s*(\d+)",
        r"virtual[\s_-]*stages?\s*[=:]\s*(\d+)", r"model\s*chunks?(?:\s*per\s*\w+)?\s*[=:]\s*(\d+)",
        r"(\d+)\s*model\s*chunks", r"(\d+)\s*virtual\s*(?:pipeline\s*)?stages?\s*per\s*(?:GPU|rank|device|stage)")
_LAYERS_PER_VIRTUAL = (r"(\d+)\s*layers?\s*per\s*virtual", r"layers?[\s_-]*per[\s_-]*virtual[\s_-]*(?:pipeline[\s_-]*)?"
                       r"stage\s*[=:]?\s*(\d+)")


def vpp_of(row, pp: int, n_layers: int, notes: list[str], split: tuple = (0, 0, 0, 0)) -> int:
    """Virtual pipeline stages per GPU (interleaved 1F1B): a `vpp` column, else the notes ("VP=6", "vpp 6",
    "virtual_pipeline_model_parallel_size 6", "6 model chunks", "2 layers per virtual stage" -> layers /
    (pp x 2)); 1 without pipeline stages or where nothing says so. `split`: the row's uneven split
    (planner/stage_split.SPLIT_KNOBS order), whose chunks must hold whole blocks."""
    if pp <= 1:
        return 1
    given = _int_column(row, ("vpp", "virtual_pipeline", "virtual_pipeline_size", "interleave"))
    text = row.get("notes") or ""
    per = None if given else _int_in(text, _LAYERS_PER_VIRTUAL)  # before _VPP: "..._virtual_pipeline_stage=2"
    vpp = given or (None if per else _int_in(text, _VPP))
    if vpp is None:
        if per:
            sp = stage_split.split(n_layers, pp, 1, *split)
            stage_layers = int(sp.heaviest) if any(split) else n_layers // pp
            vpp = max(stage_layers // per, 1)
            notes.append(f"vpp {vpp} = {n_layers} layers / pp {pp} / {per} layers per virtual stage")
        elif re.search(r"interleav", text, re.I) and not re.search(r"\bno[nt]?[\s-]*interleav", text, re.I):
            vpp = 2
            notes.append("interleaved schedule, virtual stages not stated: vpp 2")
        else:
            return 1
    if vpp > 1 and stage_split.chunks_bad(n_layers, pp, vpp, *split):
        notes.append(f"vpp {vpp} does not divide the layers: vpp 1 ({stage_split.chunk_need(n_layers, pp, vpp, *split)})")
        return 1
    return vpp


# sequence parallelism (Korthikanti et al. 2022, arXiv 2205.05198) in Megatron-LM from 2022 (Megatron-LM
# v3.0, `--sequence-parallel`); a stack whose default has it (Megatron-LM, torchtitan) is read with it off
# for a source of an earlier year (SC21 2021, the 2020 README tables: the code then had no such flag), a
# row of an unnamed stack from this year on is read with it on
SP_FIRST_YEAR = 2022


def sequence_parallel_of(row, tp: int, stack_default: bool, year: int | None, generic: bool,
                         notes: list[str]) -> bool | None:
    """Sequence parallelism as stated (a `sequence_parallel` column, the notes: "sequence parallel",
    "--sequence-parallel", "TP8 + SP", "no sequence parallelism", "SP off"); else the stack's default, off
    for a source of a year before SP_FIRST_YEAR (noted); for an unnamed stack with tp > 1, on from
    SP_FIRST_YEAR (noted). None: nothing says, no default."""
    cell = column(row, "sequence_parallel", "sp").lower()
    if cell:
        return cell in ("yes", "y", "true", "1", "on", "sp", "enabled")
    text = context_parallel.without_ulysses(row.get("notes") or "")  # DeepSpeed's "sequence parallel" is Ulysses CP
    if re.search(r"\b(no|without|w/o|disabled?)\s+(sequence[\s_-]*parallel\w*|SP)\b|\bSP\s*(off|=\s*(0|false))\b"
                 r"|sequence[\s_-]*parallel\w*\s*(off|[=:]\s*(0|false|no))", text, re.I):
        return False
    if re.search(r"sequence[\s_-]*parallel|\bSP\b", text, re.I):
        return True
    if stack_default and tp > 1 and year is not None and year < SP_FIRST_YEAR:
        notes.append(f"sequence parallelism not stated: off (source {year}; Megatron-LM has it from {SP_FIRST_YEAR})")
        return False
    if tp <= 1 or stack_default or not generic:
        if stack_default and tp > 1 and "sequence parallel" not in (row.get("activation_checkpointing") or "").lower():
            notes.append(f"sequence parallelism not stated: on with tp {tp} (the stack's default)")
        return stack_default and tp > 1
    on = year is None or year >= SP_FIRST_YEAR
    notes.append(f"sequence parallelism not stated: {'on' if on else 'off'} with tp {tp} "
                 f"(source {year or 'year not stated'}; Megatron-LM has it from {SP_FIRST_YEAR})")
    return on


# TP communication overlap: Megatron-LM `--tp-comm-overlap` (store_true, off unless given: megatron/training/
# arguments.py, core_v0.7.0), NeMo 1.0's `ub_tp_comm_overlap: True` (NeMo-Framework-Launcher launcher_scripts/conf/
# training/*/*.yaml) and NeMo 2.0's `MegatronCommOverlapCallback(tp_comm_overlap=True)` (nemo/collections/llm/
# recipes/*.py), torchtitan's "async TP"; "ub_tp_comm_overlap: False", "no async TP", "TP comm overlap not stated": off
_TP_OVERLAP = r"(?:async[\s_-]*tp|tp[\s_-]*comm[\s_-]*overlap)"
_TP_OVERLAP_OFF = re.compile(rf"\b(?:no|without|w/o)\s+(?:--)?(?:ub_)?{_TP_OVERLAP}"
                             rf"|{_TP_OVERLAP}\s*(?:[=:]\s*(?:false|0|off|no)\b|off\b|not\s+stated)", re.I)


def tp_comm_overlap_of(row) -> bool:
    """TP collectives overlapped with the GEMMs (ExecutionPlan.async_tp) as the notes state it; off unless stated."""
    text = row.get("notes") or ""
    if _TP_OVERLAP_OFF.search(text):
        return False
    return re.search(_TP_OVERLAP, text, re.I) is not None


def grad_accum_of(row) -> int | None:
    """Micro batches per step from a column (grad_accum, gradient_accumulation_steps) or the notes."""
    given = _int_column(row, ("grad_accum", "gradient_accumulation_steps", "gradient_accumulation"))
    if given:
        return given
    return _int_in(row.get("notes") or "", (
        r"grad(?:ient)?[\s_-]*accum\w*(?:[\s_-]*steps?)?\s*(?:of|=|:)?\s*(\d+)\b", r"\bGA\s*[=:]\s*(\d+)\b",
        r"(\d+)\s*(?:gradient|grad)[\s_-]*accumulation"))


def micro_batch_in_notes(row) -> int | None:
    return _int_in(row.get("notes") or "", (r"micro[\s_-]*batch(?:[\s_-]*size)?\s*(?:of|=|:)?\s*(\d+)\b",
                                            r"\bMBS\s*[=:]?\s*(\d+)\b"))


def outcome_of(row, notes: list[str]) -> str:
    """ok | OOM | the cell as written (a run that failed otherwise: reported, not scored)."""
    raw = (row.get("outcome") or "").strip()
    low = raw.lower()
    if re.search(r"\boom\b|out[\s_-]*of[\s_-]*memory", low):
        return "OOM"
    if not raw or re.fullmatch(r"(ok|okay|success\w*|succeeded|ran|run|completed?|done|yes|finished|pass\w*)\b.*", low):
        return "ok"
    notes.append(f"outcome {raw!r}: neither ok nor OOM, not scored")
    return raw
