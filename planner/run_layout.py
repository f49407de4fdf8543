"""A runs file's layout and batch columns, completed where cells are blank (planner/runs.py uses these).

Published tables leave out different parts of a configuration: the GPU count (given as tp x pp x dp),
tp and pp (given only dp), the global batch, the micro batch, the sequence length. Each default
taken here is a named rule and is written into the run's assumptions.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from planner import run_layout_notes, run_moe, run_text
from planner.errors import PlanError
from planner.model import ModelSpec
from planner.search import default_global_batch

DEFAULT_SEQ_LEN = 2048  # GPT-3's context (Brown et al. 2020), the planner's default


def gpus_of(row, notes: list[str]) -> int:
    """n_gpus, else tp x pp x cp x dp where all of tp, pp and dp are given."""
    n = run_text.number(row, "n_gpus")
    if n is not None:
        return int(n)
    parts = [run_text.number(row, k) for k in ("tp", "pp", "dp")]
    if any(p is None for p in parts):
        raise PlanError("n_gpus", f"row {row.get('id')}: blank; give n_gpus, or tp, pp and dp")
    cp = run_text.cp_of(row, [])
    n = int(parts[0] * parts[1] * parts[2]) * cp
    notes.append(f"n_gpus not stated: {n} = tp x pp x cp x dp")
    return n


def seq_len_of(row, notes: list[str]) -> int:
    seq = run_text.number(row, "seq_len")
    if seq is None:
        notes.append(f"seq_len not stated: {DEFAULT_SEQ_LEN} (GPT-3's context)")
        return DEFAULT_SEQ_LEN
    return int(seq)


@dataclass(frozen=True)
class RowLayout:
    tp: int
    pp: int
    dp: int
    stated: bool  # False: neither tp, pp nor dp given; the planner's best layout is used


def layout_of(row, gpus: int, per_node: int, cp: int, notes: list[str]) -> RowLayout:
    """tp, pp, dp as given; a blank one from the others: dp = GPUs / (tp x pp x cp); only dp given ->
    the model-parallel degree GPUs / (dp x cp) as tensor parallelism inside a node, pipeline stages
    across nodes (Megatron-LM's placement, Narayanan et al. SC21 sec. 3.3)."""
    tp, pp, dp = (run_text.number(row, k) for k in ("tp", "pp", "dp"))
    tp, pp, dp = (int(v) if v is not None else None for v in (tp, pp, dp))
    if None in (tp, pp, dp):
        said = run_layout_notes.degrees_in_notes(run_moe.text_of(row), gpus, notes)  # a layout column, the notes
        blank = {k: v for k, v in said.items() if {"tp": tp, "pp": pp, "dp": dp}[k] is None}
        if blank:
            notes.append(f"{', '.join(f'{k} {v}' for k, v in blank.items())} from the notes")
            tp, pp, dp = blank.get("tp", tp), blank.get("pp", pp), blank.get("dp", dp)
    stated = tp is not None or pp is not None
    if tp is None and pp is None and dp is not None and gpus % (dp * cp) == 0:
        model = gpus // (dp * cp)
        if model <= per_node:
            tp, pp = model, 1
        elif model % per_node == 0:
            tp, pp = per_node, model // per_node
        else:
            tp, pp = 1, model
        notes.append(f"tp, pp not stated: tp {tp}, pp {pp} (GPUs / (dp x cp) = {model}: tensor parallel in the "
                     "node, pipeline across nodes)")
        stated = True
    elif stated and (tp is None or pp is None):
        blank = "tp" if tp is None else "pp"
        notes.append(f"{blank} not stated: 1")
        tp, pp = tp or 1, pp or 1
    tp, pp = tp or 1, pp or 1
    derived = gpus // (tp * pp * cp)  # 0 where tp x pp x cp exceeds the GPUs: the row is not scored
    if dp is None:
        dp = max(derived, 1)
    elif tp * pp * cp * dp != gpus:
        notes.append(f"dp {dp} does not match {gpus} GPUs / (tp x pp x cp): dp {derived}")
        dp = max(derived, 1)
    return RowLayout(tp, pp, dp, stated)


def global_batch_of(row, seq_len: int, notes: list[str]) -> float | None:
    """Sequences per step: `global_batch`, or a token count ('4M tokens', '4M', a `global_batch_tokens`
    column) over the sequence length (noted; 'M' as 10^6 or 2^20, whichever gives whole sequences)."""
    cell = (row.get("global_batch") or "").strip()
    m = re.fullmatch(r"([\d.,]+)\s*([KM])?\s*(tokens?\b.*|tok)?", cell, re.I)  # "4M tokens (global batch)"
    if m and (m.group(2) or "").lower() == "k" and not m.group(3):  # "1.5K": thousands of sequences, binary
        batch = round(float(m.group(1).replace(",", "")) * 1024)
        notes.append(f"global batch {cell!r}: {batch} sequences (K read as 1024)")
        return float(batch)
    if m and (m.group(2) or m.group(3)):
        value = float(m.group(1).replace(",", ""))
        unit = (m.group(2) or "").lower()
        scales = {"k": (1e3, 2**10), "m": (1e6, 2**20)}.get(unit, (1.0,))
        tokens = min((value * sc for sc in scales), key=lambda t: abs(t / seq_len - round(t / seq_len)))
    else:
        tokens = run_text.number(row, "global_batch_tokens")
        if tokens is None:
            return run_text.number(row, "global_batch")
    batch = max(round(tokens / seq_len), 1)
    notes.append(f"global batch of {tokens:,.0f} tokens: {batch} sequences of {seq_len}")
    return float(batch)


def batch_of(row, spec: ModelSpec, gpus: int, dp: int, pp: int, seq_len: int, notes: list[str]) -> tuple[int, int]:
    """(micro batch, grad accumulation): from the columns (grad_accum, else global_batch), else the
    notes, else the planner's own batch rule (`plan estimate`'s: GPT-3's tokens per step for the size),
    with at least one micro batch per pipeline stage in flight."""
    mb = run_text.number(row, "micro_batch")
    if mb is None:
        mb = run_text.micro_batch_in_notes(row)
        if mb is None:
            mb = 1
            notes.append("micro batch not stated: 1")
    mb = int(mb)
    ga_column = run_text.grad_accum_of({k: v for k, v in row.items() if k != "notes"})
    gbs = global_batch_of(row, seq_len, notes)
    if ga_column:
        return mb, ga_column
    if gbs is not None:
        ga = max(int(gbs) // (mb * dp), 1)
        if mb * dp * ga != int(gbs):
            notes.append(f"global batch {int(gbs)} is not micro batch {mb} x dp {dp} x k: grad_accum {ga}")
        return mb, ga
    ga = run_text.grad_accum_of(row)
    if ga:
        return mb, ga
    batch, rule = default_global_batch(spec, gpus, seq_len)
    ga = max(batch // (mb * dp), 1)
    if ga < pp:
        notes.append(f"global batch not stated: {rule}; grad_accum {ga} -> {pp} (one micro batch per pipeline stage)")
        return mb, pp
    notes.append(f"global batch not stated: {rule} (grad_accum {ga})")
    return mb, ga
