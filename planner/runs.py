"""Measured training runs (published tables, seed logs, a user's own logs) as planner inputs.

A runs file has the columns of validation/data/published_dev.csv (README there). Each row
becomes a `Run`: the model, the system, the execution plan with every published knob pinned,
and what was measured (tokens/s per GPU, iteration time, peak memory, OOM). A blank cell means
"not stated": the default used is written into `Run.assumptions`, never guessed silently.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from hardware.models import Catalog
from planner import (attn_window, context_parallel, deepspeed_era, flops, launch_sync, megatron_ddp, parallel_block,
                     peak_memory, run_capacity, run_checks, run_columns, run_csv, run_hardware, run_layout,
                     run_model_name, run_moe, run_moe_model, run_precision, run_split, run_text, run_zeropp)
from planner.errors import PlanError
from planner.model import LLAMA_BLOCK, ModelSpec
from planner.scenario import ExecutionPlan, Frozen
from planner.sizes import gpt_for_params
from planner.system import System

MEGATRON_VOCAB = 51200  # what the Megatron runs used when a row leaves vocab empty
REQUIRED = ("id", "n_gpus", "gpu_type")

@dataclass
class Run:
    id: str
    source: str  # one table of one origin
    spec: ModelSpec
    plan: ExecutionPlan
    system: System
    outcome: str  # ok | OOM
    measured_tokens_per_s_per_gpu: float | None
    measured_iter_time_s: float | None
    measured_peak_mem_gib: float | None
    model: str  # the row's model name (groups for ranking)
    gpu_type: str
    assumptions: list[str] = field(default_factory=list)
    layout_stated: bool = True  # False: tp/pp not in the row, the planner's best layout is used
    inconsistent: str | None = None  # why the row cannot be scored as stated (kept, reported)
    mem_convention: str = "nvidia-smi"  # how the peak memory was measured (planner/peak_memory.py)
    ep_stated: bool = True  # False: an MoE row without ep: planner/validate.py takes the planner's best ep
    moe_capacity_factor: float | None = None  # the row's expert load (planner/run_capacity.py); None: the settings'
    framework_stated: bool = True  # False: no framework cell (the stack is the generic fallback, not the row's word)

    @property
    def scored(self) -> bool:
        return bool(self.measured_tokens_per_s_per_gpu) and self.outcome == "ok" and self.inconsistent is None


def read_rows(path: Path) -> list[dict[str, str]]:
    """The rows of a runs CSV; a file without the required columns is an error."""
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            text = f.read()
    except OSError as e:
        raise PlanError("runs", f"cannot read {path}: {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise PlanError("runs", f"{path} is not UTF-8 text (byte {e.start}); save it as CSV UTF-8") from None
    if not text.strip():
        raise PlanError("runs", f"{path} is empty (a header line naming at least {', '.join(REQUIRED)}, then one "
                        "row per run; layout: validation/data/README.md)")
    rows = run_csv.read_table(text)
    missing = [c for c in REQUIRED if c not in run_csv.header(text)]
    if missing:
        raise PlanError("runs", f"{path} has no columns {', '.join(missing)} (a header line naming at least "
                        f"{', '.join(REQUIRED)}; layout: validation/data/README.md)")
    if not rows:
        raise PlanError("runs", f"{path} has a header but no runs (one row per run under it)")
    return rows


def repeated_ids(path: Path) -> dict[str, list[int]]:
    """Ids on more than one row of a runs file, with their lines (planner/run_csv.repeated_ids)."""
    with open(path, newline="", encoding="utf-8-sig") as f:  # read_rows has read it: its errors are said there
        return run_csv.repeated_ids(f.read())


def source_of(row: dict[str, str]) -> str:
    """`origin:table`: the id's prefix and the table or section the row's `source` names. A row whose
    id has no `origin_` prefix (a user's own file: ids r1, r2 ...) is grouped by its `source` text."""
    rid, text = row["id"], row.get("source") or ""
    if rid.startswith("s00"):
        rest = re.sub(r"^\S+\.txt\s*", "", text).strip()
        return f"seed{rid[1:4]}:{rest or 'log'}"
    if "_" not in rid and text.strip():
        return text.strip()
    prefix = rid.rsplit("_", 1)[0]
    m = (re.search(r"table\s+'([^']+)'", text, re.I) or re.search(r"section\s+'([^']+)'", text, re.I)
         or re.search(r"\b(Tables?\s+[\d\-]+)", text))
    if m:
        return f"{prefix}:{m.group(1)}"
    m = re.search(r"/([\w\-.]+\.md)", text)
    return f"{prefix}:{m.group(1)}" if m else prefix


def _num(row, key, cast=float):
    v = run_text.number(row, key)
    return None if v is None else cast(v)


def _spec(row, catalog: Catalog, notes: list[str]) -> ModelSpec:
    """The row's model, with the attention+MLP block (planner/parallel_block.py) and the sliding
    window (planner/attn_window.py) the row states."""
    return attn_window.apply_row(row, parallel_block.apply_row(row, _shape(row, catalog, notes), notes), notes)


def _shape(row, catalog: Catalog, notes: list[str]) -> ModelSpec:
    from planner.presets import resolve_model

    name = (row.get("model_name") or "").strip()
    layers, hidden, heads = _num(row, "n_layers", int), _num(row, "hidden", int), _num(row, "n_heads", int)
    seq = _num(row, "seq_len", int) or run_layout.DEFAULT_SEQ_LEN
    if name in catalog.models:
        return resolve_model(name)
    facts = run_moe.facts_of(row)
    if facts.is_moe:  # never the dense bare-size rule (planner/run_moe_model.py)
        def columns() -> ModelSpec | None:
            return _columns_shape({**row, "n_params_B": ""}, name, layers, hidden, heads, seq, notes) \
                if layers and hidden and heads else None

        return run_moe_model.spec_of(row, facts, catalog.models, resolve_model, columns, notes)
    if layers and hidden and heads:
        return _columns_shape(row, name, layers, hidden, heads, seq, notes)
    return _named_or_sized(row, name, catalog, notes)


def _columns_shape(row, name, layers, hidden, heads, seq, notes) -> ModelSpec:
    """The model the shape columns state (a GPT or LLaMA block, whichever they and the size say)."""
    vocab = _num(row, "vocab", int)
    if vocab is None:
        vocab = MEGATRON_VOCAB
        notes.append(f"vocab not stated: {MEGATRON_VOCAB} (Megatron's)")
    ffn = _num(row, "ffn_hidden", int)
    kv = _num(row, "n_kv_heads", int)
    llama = bool(kv and kv != heads) or "llama" in name.lower()
    if ffn and ffn != 4 * hidden and ffn % 2 == 0 and not ("mpt" in name.lower()):
        llama = llama or abs(ffn - 8 * hidden / 3) / hidden < 1.2
    gated = LLAMA_BLOCK

    def build(shape: dict) -> ModelSpec:
        return ModelSpec(name=name or "custom", n_layers=layers, hidden=hidden, n_heads=heads, n_kv_heads=kv,
                         ffn_hidden=ffn, vocab=vocab, vocab_multiple=128, max_positions=max(seq, 2048), **shape)

    spec = build(gated if llama else {})
    stated = _num(row, "n_params_B")
    if stated and not _num(row, "ffn_hidden"):
        # MLP width not stated: the MLP form (gated or not) whose size matches the stated one
        other = build({} if llama else gated)
        if abs(other.n_params / 1e9 - stated) < abs(spec.n_params / 1e9 - stated):
            notes.append(f"MLP not stated: {other.mlp} ({other.n_params / 1e9:.0f}B, as stated {stated:g}B)")
            spec = other
    return spec


def _named_or_sized(row, name, catalog: Catalog, notes) -> ModelSpec:
    """A dense model by name (a preset) or by size (the bare-size rule)."""
    from planner.presets import resolve_model

    params = _num(row, "n_params_B")
    preset = run_model_name.preset_of(name, catalog.models, params, lambda p: resolve_model(p).n_params, notes)
    if preset:
        return resolve_model(preset)
    from_name = run_model_name.size_in_name(name) if params is None else None
    if name:
        notes.append(f"model_name {name!r}: no preset matches" + (f"; {from_name:g}B from the name" if from_name else ""))
    params = params or from_name
    if params is None:
        named = f"model {name!r} matches no preset and states no size; " if name else ""
        raise PlanError("model", f"row {row['id']}: {named}give the model shape (n_layers, hidden, n_heads) or n_params_B")
    notes.append("shape from the bare-size rule")
    spec = gpt_for_params(params * 1e9, name=name or f"{params:g}b")
    pp = _num(row, "pp", int) or 1
    if pp > spec.n_layers:  # the run had at least one block per stage: the guess was short of layers
        notes.append(f"pp {pp} > the rule's {spec.n_layers} layers: {pp} layers")
        spec = spec.model_copy(update={"n_layers": pp})
    return spec


def _system(row, catalog: Catalog, notes: list[str]) -> System:
    gtype = (row.get("gpu_type") or "").strip()
    if not gtype:
        raise PlanError("gpu_type", f"row {row['id']}: blank; give the GPU (e.g. H100-80GB, A100-40GB, MI300X)")
    machine = " ".join(row.get(k) or "" for k in ("internode_network", "notes", "source"))
    try:
        hw = run_hardware.resolve(gtype, machine, set(catalog.gpus))
    except run_hardware.UnknownGpu as e:
        raise PlanError("gpu_type", f"row {row['id']}: {e} is not a GPU the planner models "
                        f"(allowed: {run_hardware.ALLOWED})") from None
    notes.extend(hw.notes)
    gpu_id, cluster_id = hw.gpu_id, hw.cluster_id
    cluster = catalog.clusters[cluster_id]
    gpus = run_layout.gpus_of(row, notes)
    per_node = _num(row, "gpus_per_node", int)
    if per_node is None:
        per_node = cluster.gpus_per_node
        notes.append(f"gpus_per_node not stated: {per_node} ({cluster_id})")
    net = run_text.internode_gbps(row.get("internode_network") or "", per_node, notes)
    if net is None:
        notes.append(f"network of {cluster_id} ({cluster.internode_gbps:g} Gbps per node)")
    gpu = catalog.gpus[gpu_id]
    return System(gpu=gpu, cluster_id=cluster_id, gpus=gpus, gpus_per_node=min(per_node, gpus),
                  host_ram_gib=cluster.host_ram_gib, host_to_gpu_gbps=cluster.host_to_gpu_gbps,
                  intranode_gbps=hw.intranode_gbps or cluster.intranode_gbps or gpu.intranode_gbps,
                  internode_gbps=net or cluster.internode_gbps,
                  internode_efficiency=None if net else cluster.internode_collective_efficiency,
                  intranode_link=catalog.links[gpu.intranode_link], internode_link=catalog.links[cluster.internode_link],
                  nvls_link=catalog.links[gpu.nvls_link] if gpu.nvls_link else None,
                  unified_memory=cluster.unified_memory,
                  launch_blocking=launch_sync.launch_blocking_of(row, notes),
                  deepspeed_version=deepspeed_era.version_of(row, notes),
                  ddp_after_backward=megatron_ddp.after_backward_of(row, notes),
                  megatron_core_buckets=megatron_ddp.core_buckets_of(row, notes))


def _plan(row, spec: ModelSpec, system: System, notes: list[str]) -> tuple[ExecutionPlan, bool, bool]:
    """The row's plan, whether it states its parallel layout, and whether it states ep."""
    text = row.get("notes") or ""
    stack = run_columns.stack_of(row, notes)
    cp = run_text.cp_of(row, notes)
    cp_impl = context_parallel.impl_of(row, cp, notes)
    lay = run_layout.layout_of(row, system.gpus, system.gpus_per_node, cp, notes)
    tp, pp, dp = lay.tp, lay.pp, lay.dp
    experts = run_moe.expert_layout_of(row, spec, system, tp, pp, cp, dp, stack, notes)
    stack = experts.stack
    seq = run_layout.seq_len_of(row, notes)
    mb, ga = run_layout.batch_of(row, spec, system.gpus, dp, pp, seq, notes)
    ckpt, fraction, sp_ckpt = run_columns.checkpointing_of(row, stack, notes)
    year = run_columns.year_of(row)
    sp = run_text.sequence_parallel_of(row, tp, sp_ckpt or (tp > 1 and stack in ("megatron", "torchtitan")), year,
                                       stack == run_columns.GENERIC, notes)
    split = run_split.split_of(row, pp, notes)
    vpp = run_text.vpp_of(row, pp, spec.n_layers, notes, tuple(split.knobs().values()))
    lowered = text.lower()
    precision = run_columns.precision_of(row, system, notes)
    attention = run_columns.attention_of(row, system, notes)
    sharding = run_columns.sharding_of(row, stack, notes)
    plan = ExecutionPlan(
        attention=attention,
        stack=stack, tp=tp, pp=pp, vpp=vpp, **split.knobs(), cp=cp, cp_impl=cp_impl, ep=experts.ep, etp=experts.etp,
        dp=dp, sequence_parallel=sp,
        sharding=sharding, **run_zeropp.zeropp_of(row, sharding, system.gpus_per_node, dp, notes),
        offload=run_columns.offload_of(row, notes),
        activation_checkpointing=ckpt, checkpoint_fraction=fraction,
        activation_offload="cpu checkpointing" in (row.get("activation_checkpointing") or "").lower(),
        precision=precision, fp8_recipe=run_columns.fp8_recipe_of(row, precision, notes, stack),
        grad_reduce_dtype=run_columns.grad_reduce_dtype_of(row, notes),
        optimizer="adafactor" if "adafactor" in lowered else "adamw",
        compile="compile" in lowered and "no compile" not in lowered,
        async_tp=run_text.tp_comm_overlap_of(row),
        micro_batch=mb, grad_accum=ga, seq_len=seq,
        reduce_bucket_elems=spec.hidden**2, allgather_bucket_elems=spec.hidden**2,
        stage3_prefetch_elems=int(0.9 * spec.hidden**2),
    )
    return plan, lay.stated, experts.ep_stated


def _measured(row, spec: ModelSpec, plan: ExecutionPlan, system: System, notes) -> tuple[float | None, float | None]:
    """Tokens/s per GPU and iteration time, from whichever the row gives (convention-free first)."""
    tokens_step = plan.global_batch * plan.seq_len
    gpus = plan.gpus
    tps = _num(row, "measured_tokens_per_sec_per_gpu")
    it = _num(row, "measured_iter_time_s")
    if tps:
        return tps, it or tokens_step / (tps * gpus)
    if it:
        return tokens_step / it / gpus, it
    days = _num(row, "days_per_100B_tokens")
    if days:
        total = 1e11 / (days * 86400)
        return total / gpus, tokens_step / total
    tf, mfu = _num(row, "measured_tflops_per_gpu"), run_text.mfu_of(row, notes)
    rid = row["id"]
    if tf and rid.startswith("s00"):  # seed 002's formula with the row's stated size
        factor = 4 if plan.activation_checkpointing == "full" else 3
        flop = _num(row, "n_params_B") * 1e9 * factor * 2 * tokens_step
        notes.append("speed from the seed's TFLOPs formula")
    elif tf and "MFU vs" in (row.get("notes") or ""):
        # model TFLOPs (6N + attention), as MFU against the 16-bit peak
        flop = float(flops.model_flops_per_token(spec, plan.seq_len)) * tokens_step
        notes.append("speed from the model TFLOPs (6N + attention)")
    elif tf:
        # Megatron's formula (Narayanan et al. SC21 eq. 3): 96 B s l h^2 (...) counts the recomputed
        # forward of full recompute (4 passes); without it hardware and model FLOPs agree on 3 passes
        l, h, v, s = spec.n_layers, spec.hidden, spec.vocab_padded, plan.seq_len
        passes = 4 if plan.activation_checkpointing == "full" else 3
        flop = 24.0 * passes * plan.global_batch * s * l * h * h * (1 + s / (6 * h) + v / (16 * l * h))
        notes.append(f"speed from the TFLOPs (Megatron's formula, {passes} passes)")
    elif mfu:
        peak = system.gpu.peak_tflops("bf16" if system.gpu.bf16_tflops else "fp16")
        per_token = float(flops.model_flops_per_token(spec, plan.seq_len))
        notes.append(f"speed from the MFU against {peak:g} TFLOPs")
        tps = mfu * peak * 1e12 / per_token
        return tps, tokens_step / (tps * gpus)
    else:
        return None, None
    it = flop / (tf * 1e12 * gpus)
    return tokens_step / it / gpus, it


def _recompute_from_counts(row, spec: ModelSpec, plan: ExecutionPlan, tps: float | None, notes) -> ExecutionPlan:
    """Checkpointing not stated, but the row gives TFLOPs next to a measured speed: TFLOPs that
    count 4/3 of the model FLOPs (HFU, Narayanan et al. SC21 eq. 3) say the run recomputed every
    block, so the run is read as full recomputation (Megatron-LM 2020's README tables)."""
    tf = _num(row, "measured_tflops_per_gpu")
    given = _num(row, "measured_iter_time_s") or _num(row, "measured_tokens_per_sec_per_gpu")
    if (row.get("activation_checkpointing") or "").strip() or not (tf and tps and given):
        return plan
    ratio = tf * 1e12 / (tps * float(flops.model_flops_per_token(spec, plan.seq_len)))
    if ratio < 1.2 or plan.activation_checkpointing == "full":
        return plan
    notes.append(f"checkpointing not stated: full (the TFLOPs count {ratio:.2f}x the model FLOPs: recompute)")
    return plan.model_copy(update={"activation_checkpointing": "full", "checkpoint_fraction": 1.0})


class NotPredicted(Frozen):
    """A row the planner cannot express: kept out of the scores, reported with its reason."""

    id: str
    field: str
    reason: str

    @classmethod
    def of(cls, rid: str, error: Exception) -> "NotPredicted":
        if isinstance(error, PlanError):
            return cls(id=rid, field=error.field, reason=error.message.removeprefix(f"row {rid}: "))
        if isinstance(error, ValidationError):
            field, reason = run_checks.field_of(error)
            return cls(id=rid, field=field, reason=reason)
        return cls(id=rid, field="row", reason=str(error))


def _run(row, catalog: Catalog) -> Run:
    notes: list[str] = []
    run_checks.check_cells(row)
    spec = _spec(row, catalog, notes)
    system = _system(row, catalog, notes)
    plan, stated, ep_stated = _plan(row, spec, system, notes)
    tps, it = _measured(row, spec, plan, system, notes)
    plan = _recompute_from_counts(row, spec, plan, tps, notes)
    plan = run_columns.capable_stack(plan, catalog.stacks, notes)
    plan = run_precision.pure_if_amp_cannot_fit(row, plan, spec, system, notes)
    system = system.model_copy(update={"grad_reduce_bytes": megatron_ddp.reduce_bytes_of(row, plan.precision, notes)})
    capacity = run_capacity.capacity_of(row, spec, plan.stack, notes)
    mem = run_checks.peak_memory_gib(row, system)
    outcome = run_text.outcome_of(row, notes)
    inconsistent = None
    if plan.gpus != system.gpus:
        inconsistent = (f"tp {plan.tp} x pp {plan.pp} x cp {plan.cp} x dp {plan.dp} = {plan.gpus} GPUs, "
                        f"the row says {system.gpus}: not scored")
        notes.append(inconsistent)
    if inconsistent is None:
        inconsistent = next(filter(None, (run_checks.speed_out_of_range(spec, plan, system, v)
                                          for v in (tps, *run_checks.stated_speeds(row, plan, it)))), None)
        if inconsistent:
            notes.append(inconsistent)
    if not stated:
        notes.append("parallel layout not stated: the planner's best layout with the stated knobs")
    return Run(row["id"], source_of(row), spec, plan, system, outcome, tps, it, mem,
               (row.get("model_name") or spec.name).strip(), (row.get("gpu_type") or "").strip(), notes,
               stated, inconsistent, peak_memory.convention_of(row, notes), ep_stated, capacity,
               bool(run_columns.framework_cell(row)))


def load_runs(path: Path, catalog: Catalog | None = None, not_predicted: list[NotPredicted] | None = None) -> list[Run]:
    """Every row of a runs CSV as a `Run`. A row the planner cannot express is an error naming it, or,
    given a `not_predicted` list, is appended there with its reason and the other rows are read."""
    if catalog is None:
        from hardware.catalog import load_catalog

        catalog = load_catalog()
    runs = []
    for row in read_rows(Path(path)):
        try:
            runs.append(_run(row, catalog))
        except (PlanError, ValidationError) as e:
            missed = NotPredicted.of(row.get("id") or "?", e)
            if not_predicted is None:  # one line naming the row and its field (plan calibrate)
                raise PlanError(missed.field, f"row {missed.id}: {missed.reason}") from None
            not_predicted.append(missed)
    return runs
