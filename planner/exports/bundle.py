"""Choose a plan and render one export format to files: the part the CLI (`plan export`) and
the HTTP service (`GET /export/...`) share."""

from __future__ import annotations

import json
from pathlib import PurePath
from typing import Literal

from pydantic import Field

from hardware.stacks import StackProfile
from planner.errors import NothingFits, PlanError, unknown
from planner.exports.accelerate import accelerate_config, accelerate_yaml
from planner.exports import ddp_settings, memory_settings, moe_leaf, moe_routing, moe_settings
from planner.exports.common import Recipe, Target, is_deepspeed, is_fsdp, steps_for_tokens, target_for
from planner.exports.cp_settings import megatron_args
from planner.exports.deepspeed_json import config_text, deepspeed_config
from planner.exports.megatron_args import args_script, refusal as megatron_refusal
from planner.exports.megatron_args import megatron_args as megatron_all_args
from planner.exports.fsdp_settings import FSDP_FILE, fsdp_settings
from planner.exports.slurm import sbatch_script, slurm_time, time_limit_s
from planner.exports.torchrun import SCRIPT_DIR, render, torchrun_command, torchrun_script, trainer_args
from planner.memory_recipe import MemoryRecipe
from planner.model import ModelSpec
from planner.moe_options import MoeOptions
from planner.presets import resolve_model
from planner.scenario import ExecutionPlan, Frozen
from planner.system import System

Format = Literal["deepspeed", "fsdp", "accelerate", "torchrun", "slurm", "megatron"]
FORMATS: tuple[str, ...] = Format.__args__  # type: ignore[attr-defined]
CPUS_PER_GPU_DEFAULT = 8  # when the cluster entry does not say its cores per node


class Chosen(Frozen):
    """A plan to export, with what the formats need besides the knobs."""

    plan: ExecutionPlan
    model_ref: str = Field(description="what the trainer's --model takes (preset, size, JSON path)")
    model: ModelSpec | None = None
    system: System
    step_time_s: float | None = None  # predicted (or measured) seconds per optimizer step
    tokens: float | None = None
    cpus_per_node: int | None = None
    source: str = ""  # "estimate rank 1", "study NAME trial 7", ...
    note: str | None = None  # why this is not the source's #1 (the format cannot write #1)
    # the exact DeepSpeed JSON / FSDP settings a tuner trial ran: exported byte for byte
    deepspeed_json: str | None = None
    fsdp_json: str | None = None
    # the MoE routing and all-to-all settings the prediction assumed (planner/moe_options.py)
    moe: MoeOptions = MoeOptions()
    # the memory-saving switches the plan was chosen with (planner/memory_recipe.py)
    memory: MemoryRecipe = MemoryRecipe()
    # the profile of plan.stack the plan was timed with (a --catalog's); None: the built-in catalog's. Its
    # gradient reduction dtype is what the files write (planner/grad_dtype.py)
    stack_profile: StackProfile | None = None


class ExportOptions(Frozen):
    target: Target | None = None  # None: from the system's accelerator
    recipe: Recipe = Recipe()
    steps: int | None = Field(default=None, gt=0)  # optimizer steps; None: from tokens if known
    time: str | None = None  # SLURM time limit; None: from the prediction
    job_name: str = "plan"
    partition: str | None = None
    account: str | None = None
    cpus_per_task: int | None = Field(default=None, gt=0)
    deepspeed_file: str = "ds_config.json"
    fsdp_file: str = FSDP_FILE
    megatron_file: str = "megatron_args.sh"
    accelerate_file: str = "accelerate.yaml"  # the YAML's own name, as its launch comment says it (--out)


class ExportFile(Frozen):
    name: str
    content: str


class ExportResult(Frozen):
    format: str
    plan: ExecutionPlan
    source: str
    files: list[ExportFile]
    steps: int | None = None
    time_limit: str | None = None
    notes: list[str] = Field(default_factory=list)


def choose_from_estimate(report, model_ref: str | None, cpus_per_node: int | None = None,
                         fmt: str | None = None) -> Chosen:
    """The best proposal of an `api.estimate` report that `fmt` can express: `plan estimate`'s #1 for
    the same flags, or, where the format cannot write #1 (DeepSpeed takes no FSDP plan; tp/pp need
    Megatron-style model code), the first of its ranking that it can, with a note naming why #1 was
    passed over. When the format can write none of them, the error says why and which knobs to pin."""
    fitting = [e for e in report.results if e.fits]
    if not fitting:
        # the memory misses first (the search's own impossible combinations after them), then the closest miss
        rejected = sorted(report.rejected.items(), key=lambda kv: ("does not fit" not in kv[0], -kv[1]))
        reasons = "; ".join(f"{k}: {v}" for k, v in rejected) or "nothing to search"
        miss = report.results[0] if report.results and report.results[0].reason else None
        closest = "" if miss is None else (
            f"; the closest (tp{miss.plan.tp} pp{miss.plan.pp} dp{miss.plan.dp} {miss.plan.sharding} offload="
            f"{miss.plan.offload} ckpt={miss.plan.activation_checkpointing} mb={miss.plan.micro_batch}) {miss.reason}")
        raise NothingFits("scenario", f"no plan fits ({reasons}){closest}; add GPUs or unpin knobs")
    # tp/pp > 1 in a DeepSpeed JSON needs Megatron-style model code: exported only when pinned
    pinned_mp = (report.scenario.tp or 1) > 1 or (report.scenario.pp or 1) > 1

    def refusal(e):
        return refusal_of(fmt, e.plan, report.system, allow_model_parallel=pinned_mp) if fmt else None

    first_refusal = refusal(fitting[0])
    rank, est = 1, fitting[0]
    if first_refusal is not None:
        rank, est = next(((i, e) for i, e in enumerate(fitting[1:], 2) if refusal(e) is None), (None, None))
        if est is None:
            p = fitting[0].plan
            raise PlanError(first_refusal.field, f"plan estimate's #1 (tp {p.tp}, pp {p.pp}, {p.sharding}, stack "
                            f"{p.stack}) cannot be written as {fmt}: {first_refusal.message}; none of its "
                            f"{len(fitting)} ranked plans can; pin the knobs you want (e.g. --sharding, --tp 1 --pp 1)")
    note = None if rank == 1 else _passed_over(fmt, fitting[0], est, rank, first_refusal)
    return Chosen(plan=est.plan, model_ref=model_ref or report.model.name, model=report.model,
                  system=report.system, step_time_s=est.time.step_time_s if est.time else None,
                  tokens=report.scenario.tokens, cpus_per_node=cpus_per_node,
                  source=f"plan estimate rank {rank} of {report.fitting} fitting", note=note)


def _passed_over(fmt: str, first, chosen, rank: int, why: PlanError) -> str:
    """Why the export is not `plan estimate`'s #1, and what it costs by the model."""
    p = first.plan
    tps = [e.performance.tokens_per_s if e.performance else None for e in (first, chosen)]
    cost = f", {1 - tps[1] / tps[0]:.0%} fewer tokens/s by the model" if None not in tps and tps[0] > 0 else ""
    return (f"plan estimate's #1 (tp {p.tp}, pp {p.pp}, {p.sharding}, stack {p.stack}) cannot be written as "
            f"{fmt} ({why.message}); this is its #{rank}, the best plan {fmt} can express{cost}")


def refusal_of(fmt: str, plan: ExecutionPlan, system: System, *, allow_model_parallel: bool = False) -> PlanError | None:
    """Why `fmt` cannot express `plan` (None: it can). Without `allow_model_parallel`, a
    DeepSpeed plan must be pure data parallel (what a plain model under DeepSpeed runs)."""
    if (why := moe_settings.refusal(fmt, plan)) is not None:
        return why
    if fmt == "deepspeed" and not allow_model_parallel and (plan.tp > 1 or plan.pp > 1):
        return PlanError("tp", "tp/pp > 1 needs Megatron-style model code; pin --tp/--pp to export such a plan")
    try:
        if fmt == "deepspeed" or (fmt in ("torchrun", "slurm") and is_deepspeed(plan)):
            deepspeed_config(plan)
        if fmt == "fsdp":
            fsdp_settings(plan)
        if fmt == "accelerate":
            accelerate_config(plan, system)
        if fmt == "megatron" and (why := megatron_refusal(plan)) is not None:
            raise why
        if fmt in ("torchrun", "slurm"):
            trainer_args(plan, model="m")
    except PlanError as e:
        return e
    return None


def export(fmt: str, chosen: Chosen, options: ExportOptions | None = None) -> ExportResult:
    if fmt not in FORMATS:
        raise unknown("format", fmt, tuple(FORMATS))
    model = chosen.model  # (torchrun/slurm resolve model_ref: _bundled_trainer_runs)
    if (why := moe_settings.refusal(fmt, chosen.plan, model)) is not None:
        raise why
    if model is not None:
        chosen.moe.checked().check_model(model)
    _refuse_hybrid(chosen)
    chosen.memory.check_scenario(chosen.plan)  # fp8 caching on a plan not in fp8: bad input
    if (why := memory_settings.refusal(fmt, chosen.plan, chosen.memory)) is not None:
        raise why
    options = options or ExportOptions()
    target = options.target or target_for(chosen.system)
    steps = options.steps or (steps_for_tokens(chosen.plan, chosen.tokens) if chosen.tokens else None)
    recipe = options.recipe.model_copy(update={"steps": steps}) if steps else options.recipe
    plan, notes = chosen.plan, [f"plan from {chosen.source}"] if chosen.source else []
    if chosen.note:
        notes.append(chosen.note)
    if (moe_note := moe_settings.note(fmt, plan, model)) is not None:
        notes.append(moe_note)
    leaf_model = model or _model_of(chosen)
    if (leaf_note := moe_leaf.note(fmt, plan, leaf_model)) is not None:
        notes.append(leaf_note)
    if fmt in moe_settings.MODEL_CODE_FORMATS:
        notes += moe_routing.model_code_notes(fmt, plan, model, chosen.moe)
    if (stack_note := other_stack_note(fmt, plan)) is not None:
        notes.append(stack_note)
    if (ddp_note := ddp_settings.note(fmt, plan, chosen.stack_profile, leaf_model, chosen.system)) is not None:
        notes.append(ddp_note)  # DDP's gradient bucket copy: what the file's software holds vs what the plan counted
    if chosen.deepspeed_json is not None:
        notes.append("DeepSpeed config exactly as the trial ran it (recipe options do not apply)")
    if chosen.fsdp_json is not None:
        notes.append("FSDP settings exactly as the trial ran them")
    ran_as = {"deepspeed": chosen.deepspeed_json, "fsdp": chosen.fsdp_json}
    if chosen.source.startswith("study ") and fmt in ran_as and ran_as[fmt] is None:
        # a DDP (or other-backend) winner exported as a DeepSpeed JSON said nothing: it was never measured under it
        notes.append(f"the winner ran without {'DeepSpeed' if fmt == 'deepspeed' else 'FSDP'} (plan tune report: its "
                     f"launch line); this file is built for its plan ({plan.sharding}), not measured as such")
    if plan.cp > 1 and plan.stack in ("megatron", "generic") and fmt != "megatron":
        notes.append("Megatron-LM flags of this plan's context parallelism: "
                     + " ".join(megatron_args(plan, chosen.system.gpus_per_node)))

    def ds_text() -> str:
        if chosen.deepspeed_json is not None:
            return chosen.deepspeed_json
        return config_text(deepspeed_config(plan, target=target, recipe=recipe, model=chosen.model,
                                            profile=chosen.stack_profile))

    def fsdp_text() -> str:
        if chosen.fsdp_json is not None:
            return chosen.fsdp_json
        return config_text(fsdp_settings(plan, target=target, nodes=_nodes_of(plan, chosen.system),
                                         profile=chosen.stack_profile))

    ds = lambda: json.loads(ds_text())  # noqa: E731
    ran_deepspeed = is_deepspeed(plan) or chosen.deepspeed_json is not None  # (ZeRO-0 trials too)
    if fmt == "deepspeed":
        files = [ExportFile(name=options.deepspeed_file, content=ds_text())]
        return ExportResult(format=fmt, plan=plan, source=chosen.source, files=files, steps=steps, notes=notes)
    if fmt == "fsdp":
        files = [ExportFile(name=options.fsdp_file, content=fsdp_text())]
        return ExportResult(format=fmt, plan=plan, source=chosen.source, files=files, steps=steps, notes=notes)
    if fmt == "accelerate":
        fsdp = json.loads(fsdp_text()) if is_fsdp(plan) else None
        if fsdp is not None and (fsdp["mixed_precision"]["reduce_dtype"] == "float32" and fsdp["mixed_precision"]["param_dtype"]):
            # accelerate's mixed_precision builds MixedPrecisionPolicy(param_dtype=d, reduce_dtype=d) (accelerate
            # utils/dataclasses.py FullyShardedDataParallelPlugin.set_mixed_precision): no YAML key says float32
            notes.append("gradients: the plan was timed with an fp32 reduce-scatter (reduce_dtype float32, as in the FSDP "
                         "settings: plan export fsdp), but accelerate's mixed_precision reduces in the 16-bit dtype; pass "
                         "FullyShardedDataParallelPlugin(mixed_precision_policy={..., 'reduce_dtype': torch.float32}) "
                         "in code, or plan with --grad-reduce-dtype bf16")
        if fsdp is not None and plan.activation_checkpointing not in ("none", "full"):
            # accelerate_fsdp_section: fsdp_activation_checkpointing is a switch that wraps whole blocks
            notes.append(f"activation checkpointing: the plan was timed with {plan.activation_checkpointing}, but "
                         "accelerate's fsdp_activation_checkpointing recomputes every whole block (full): more "
                         "recompute than planned; plan with --activation-checkpointing full to time that, or "
                         "checkpoint in your model code")
        files = [ExportFile(name=options.accelerate_file, content=accelerate_yaml(accelerate_config(
            plan, chosen.system, target=target, deepspeed_config_file=options.deepspeed_file, fsdp=fsdp,
            moe_layer_cls=moe_leaf.accelerate_value(plan, leaf_model)),
            file_name=options.accelerate_file))]
        if is_deepspeed(plan):
            files.append(ExportFile(name=options.deepspeed_file, content=ds_text()))
        if chosen.fsdp_json is not None:  # the settings the trial ran, beside their accelerate form
            files.append(ExportFile(name=options.fsdp_file, content=fsdp_text()))
        return ExportResult(format=fmt, plan=plan, source=chosen.source, files=files, steps=steps, notes=notes)
    if fmt == "megatron":
        files = [ExportFile(name=options.megatron_file, content=_megatron_text(plan, chosen, notes, steps))]
        return ExportResult(format=fmt, plan=plan, source=chosen.source, files=files, steps=steps, notes=notes)
    if fmt in ("torchrun", "slurm"):
        _bundled_trainer_runs(chosen, notes if chosen.model is None else None)
    if fmt == "torchrun":
        ds_file = options.deepspeed_file if ran_deepspeed else None
        # the script finds its companion beside itself, wherever it is launched from (plan_cli/export.py writes
        # companions beside --out)
        argv = torchrun_command(plan, chosen.system, model=chosen.model_ref, steps=steps, recipe=recipe,
                                deepspeed_config_file=f"{SCRIPT_DIR}/{PurePath(ds_file).name}" if ds_file else None)
        files = [ExportFile(name="torchrun.sh", content=torchrun_script(argv))]
        if ds_file:
            files.append(ExportFile(name=ds_file, content=ds_text()))
        return ExportResult(format=fmt, plan=plan, source=chosen.source, files=files, steps=steps, notes=notes)
    limit = _time_limit(options.time, chosen.step_time_s, steps, notes)
    cpus = options.cpus_per_task or chosen.cpus_per_node
    if cpus is None:
        cpus = CPUS_PER_GPU_DEFAULT * min(chosen.system.gpus_per_node, plan.gpus)
        notes.append(f"cpus-per-task {cpus}: the cluster entry has no cpu_cores_per_node (set --cpus-per-task)")
    script = sbatch_script(
        plan, chosen.system, model=chosen.model_ref, time_limit=limit, cpus_per_task=cpus, target=target,
        job_name=options.job_name, partition=options.partition, account=options.account, steps=steps,
        recipe=recipe, deepspeed_config=ds() if ran_deepspeed else None, notes=notes)
    return ExportResult(format=fmt, plan=plan, source=chosen.source, steps=steps, time_limit=limit,
                        notes=notes, files=[ExportFile(name="job.sbatch", content=script)])


# The stacks (catalog/stacks) whose software runs each format's file as written: a DeepSpeed JSON under
# HF/accelerate, Megatron-DeepSpeed or the bundled trainer; FSDP settings under PyTorch FSDP (the bundled
# trainer's `--fsdp-config`, llm-foundry, HF, torchtitan); torchrun/SLURM scripts launch the bundled trainer.
RUN_BY = {"deepspeed": ("hf", "megatron_deepspeed", "bundled"), "fsdp": ("bundled", "fsdp", "hf", "torchtitan"),
          "accelerate": ("hf",), "torchrun": ("bundled",), "slurm": ("bundled",), "megatron": ("megatron", "generic")}


def other_stack_note(fmt: str, plan: ExecutionPlan) -> str | None:
    """A plan ranked and timed as one stack (`plan estimate` picks one by sharding: zero1 -> megatron)
    but written for another stack's software: its predicted speed (and a SLURM time limit from it)
    belongs to the first. The note says so and which --stack plans for the file's software."""
    runs = RUN_BY.get(fmt, ())
    if not runs or plan.stack in runs:
        return None
    return (f"ranked and timed as stack {plan.stack}, not the software this {fmt} file is for "
            f"({' / '.join(runs)}): add --stack {runs[0]} to rank and time plans for it")


def _model_of(chosen: Chosen) -> ModelSpec | None:
    """The chosen plan's model: given, or resolved from model_ref (None where that names no model)."""
    if chosen.model is not None or not chosen.model_ref:
        return chosen.model
    try:
        return resolve_model(chosen.model_ref)
    except PlanError:
        return None


def _refuse_hybrid(chosen: Chosen) -> None:
    """No export writes Mamba / hybrid layer settings (Megatron-Core's --hybrid-override-pattern, ...) yet."""
    model = chosen.model
    if model is None and chosen.model_ref:
        try:
            model = resolve_model(chosen.model_ref)
        except PlanError:
            return
    if model is not None and getattr(model, "layer_pattern", None):
        raise PlanError("model", f"{model.name}: Mamba / hybrid layer stacks are not exported yet (the planner models "
                        "them; no export writes their layer pattern)")


def _megatron_text(plan: ExecutionPlan, chosen: Chosen, notes: list[str], steps: int | None = None) -> str:
    model = chosen.model or resolve_model(chosen.model_ref)
    args = megatron_all_args(plan, model, chosen.system.gpus_per_node, moe=chosen.moe, notes=notes,
                             memory=chosen.memory, profile=chosen.stack_profile, gpu=chosen.system.gpu)
    if steps:  # --steps, or --tokens / the global batch's tokens: Megatron-LM's own iteration count
        args += ["--train-iters", str(steps)]
    per_node = min(chosen.system.gpus_per_node, plan.gpus)
    header = [f"Megatron-LM / Megatron-Core arguments of {model.name} on {plan.gpus} x {chosen.system.gpu.id}"
              + (f" ({chosen.source})" if chosen.source else "")]
    if model.moe_experts:
        header.append(moe_routing.header(chosen.moe))
    if plan.grad_accum > 1:
        notes.append(f"{plan.grad_accum} micro-batches per step: --global-batch-size / (--micro-batch-size x dp {plan.dp})")
    return args_script(args, header=header, nproc_per_node=per_node, nodes=_nodes_of(plan, chosen.system))


def _bundled_trainer_runs(chosen: Chosen, notes: list[str] | None = None) -> None:
    """The bundled trainer runs the model's experts with ep 1 and no tp/pp (moe_settings.refusal); its sliding-window
    and chunked layers it builds (trainer/local_attention.py). `notes`: where the MoE note goes when export() had no
    model to write it from."""
    model = chosen.model or resolve_model(chosen.model_ref)
    if (why := moe_settings.refusal("torchrun", chosen.plan, model)) is not None:
        raise why
    if notes is not None and (note := moe_settings.note("torchrun", chosen.plan, model)) is not None:
        notes.append(note)


def _nodes_of(plan: ExecutionPlan, system: System) -> int:
    return max(1, plan.gpus // max(1, min(system.gpus_per_node, plan.gpus)))


# A derived time limit above this gets a note: a SLURM partition's MaxTime is site policy (slurm.conf
# PartitionName ... MaxTime), a day or two or less on most shared clusters' user guides
LONG_JOB_S = 2 * 86400


def _time_limit(given: str | None, step_time_s: float | None, steps: int | None, notes: list[str]) -> str:
    if given:
        return given
    if step_time_s and steps:
        limit_s = time_limit_s(step_time_s, steps)
        notes.append(f"time limit = {steps} steps x {step_time_s:.3g} s predicted x 1.2 + 10 min start-up")
        if limit_s > LONG_JOB_S:
            notes.append(f"the job asks for {limit_s / 86400:.1f} days in one allocation: most SLURM partitions cap a "
                         "job at 1-2 days (MaxTime in `scontrol show partition`), and sbatch refuses a longer --time or "
                         "the job ends at the cap; export fewer steps per job (--steps) and chain the jobs")
        return slurm_time(limit_s)
    missing = "a step count (--steps or --tokens)" if step_time_s else "a predicted step time"
    raise PlanError("time", f"cannot derive a time limit without {missing}; pass --time D-HH:MM:SS")
