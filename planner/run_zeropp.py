"""A run row's ZeRO++ features (planner/zeropp.py) from its text, as planner/runs.py reads them.

Spellings: "ZeRO++" (all three, hpZ over one node, as the paper and DeepSpeed's tutorial run it),
the feature names alone or joined ("qwZ", "hpZ 8", "hpZ=16", "qwZ+qgZ"), "no qgZ" / "without hpZ",
and DeepSpeed's JSON keys quoted in the notes (`"zero_quantized_weights": true`,
`zero_hpz_partition_size: 8`, `zero_quantized_gradients=true`). Named features win over the bare
"ZeRO++" ("ZeRO++ (qwZ + hpZ)" is those two).
"""

from __future__ import annotations

import math
import re

from planner import run_columns
from planner.errors import PlanError

_TEXT_COLUMNS = ("zero_stage_or_fsdp", "sharding", "framework", "notes")
_ZEROPP = re.compile(r"zero\s*\+\+|\bzero[-_\s]?pp\b", re.I)
_NEG = r"(?:\bno|\bwithout|\bw/o)[\s-]*"
_ON = r"[\"']?\s*[:=]\s*(?:true|1)\b"
_OFF = r"[\"']?\s*[:=]\s*(?:false|0)\b"


def _flag(text: str, word: str, key: str) -> bool | None:
    """True / False where the text turns the feature on / off, None where it does not say."""
    if re.search(_NEG + word + r"\b", text, re.I) or re.search(key + _OFF, text, re.I) \
            or re.search(r"\b" + word + r"\s*[:=]?\s*(?:off|false)\b", text, re.I):
        return False
    if re.search(r"\b" + word + r"\b", text, re.I) or re.search(key + _ON, text, re.I):
        return True
    return None


def _hpz(text: str) -> int | None | bool:
    """The stated partition size, True for "hpZ" without one, False for "no hpZ", None if silent."""
    if re.search(_NEG + r"hpz\b", text, re.I) or re.search(r"\bhpz\s*[:=]?\s*(?:off|false)\b", text, re.I):
        return False
    m = re.search(r"zero_hpz_partition_size[\"']?\s*[:=]\s*(\d+)", text, re.I) \
        or re.search(r"\bhpz\s*[:=(]?\s*(\d+)\b", text, re.I)
    if m:
        return int(m.group(1))
    return True if re.search(r"\bhpz\b", text, re.I) else None


def zeropp_of(row, sharding: str, gpus_per_node: int, dp: int, notes: list[str]) -> dict:
    """The row's `zeropp_*` plan fields (all off when its text names no ZeRO++ feature)."""
    text = " ".join((row.get(k) or "") for k in _TEXT_COLUMNS)
    qwz = _flag(text, "qwz", "zero_quantized_weights")
    qgz = _flag(text, "qgz", "zero_quantized_gradients")
    hpz = _hpz(text)
    named = any(v is True or (isinstance(v, int) and not isinstance(v, bool)) for v in (qwz, qgz, hpz))
    if _ZEROPP.search(text) and not named:  # "ZeRO++" alone: all three (less those said off)
        qwz, qgz = qwz is not False, qgz is not False
        hpz = True if hpz is None else hpz
        notes.append("ZeRO++ without its features named: qwZ + hpZ over one node + qgZ (the paper's setup)")
    if hpz is True:
        size = math.gcd(gpus_per_node, dp) if dp % gpus_per_node else gpus_per_node
        notes.append(f"hpZ partition size not stated: {size} (the GPUs of a node that the data-parallel group has)")
        hpz = size
    out = {"zeropp_qwz": bool(qwz), "zeropp_hpz_partition_size": int(hpz) if hpz else 1, "zeropp_qgz": bool(qgz)}
    if sharding != "zero3" and (out["zeropp_qwz"] or out["zeropp_qgz"] or out["zeropp_hpz_partition_size"] > 1):
        raise PlanError(run_columns.sharding_column(row), f"row {row.get('id')}: ZeRO++ needs ZeRO stage 3, the row says "
                        f"{sharding} (allowed with qwZ/hpZ/qgZ: zero3, ZeRO++)")
    return out
