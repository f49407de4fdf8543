"""`plan export FORMAT`: the chosen plan as files that run as they are.

FORMAT is deepspeed (JSON config), fsdp (FSDP2 settings JSON), accelerate (YAML; + the DeepSpeed JSON for zero* plans),
torchrun (a launch script for the bundled trainer), slurm (an sbatch script) or megatron (the
Megatron-LM / Megatron-Core pretrain_gpt.py arguments, a bash array one flag per line). The plan is
the top proposal of `plan estimate` for the scenario flags (a fully pinned scenario gives
exactly that plan), or the best trial of a tuning study (--from-study).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from plan_cli import options as opts
from plan_cli.common import err_console, handle_errors, print_json
from planner.errors import PlanError, unknown
from planner.fields import cli_fields
from planner.memory_recipe import MemoryRecipe
from planner.moe_options import MoeOptions
from planner.scenario import Scenario

Opt = typer.Option
SCEN = opts.SCEN
FMT = "Format options"


def register(app: typer.Typer) -> None:
    app.command("export")(export)


@handle_errors
@opts.model_options(cli_fields(Scenario), into="knobs", panel=SCEN)
def export(
    format: Annotated[str, typer.Argument(help="deepspeed | fsdp | accelerate | torchrun | slurm | megatron")],
    knobs: dict,
    objective: opts.Objective = "tokens_per_s",
    catalog: opts.CatalogDirs = None,
    from_study: Annotated[Optional[str], Opt(help="Export the best trial of this tuning study")] = None,
    storage: Annotated[Optional[str], Opt(help="Optuna storage URL of --from-study")] = None,
    target: Annotated[Optional[str], Opt(help="gpu|cpu (default: from the GPU entry); cpu = no pinned memory", rich_help_panel=FMT)] = None,
    steps: Annotated[Optional[int], Opt(min=1, help="Optimizer steps to train (default: from --tokens)", rich_help_panel=FMT)] = None,
    lr: Annotated[float, Opt(help="Peak learning rate", rich_help_panel=FMT)] = 3e-4,
    warmup_steps: Annotated[int, Opt(min=0, help="LR warm-up steps", rich_help_panel=FMT)] = 2000,
    grad_clip: Annotated[float, Opt(min=0, help="Gradient clipping norm (0: off)", rich_help_panel=FMT)] = 1.0,
    time: Annotated[Optional[str], Opt(help="SLURM time limit (default: predicted time x 1.2 + 10 min)", rich_help_panel=FMT)] = None,
    job_name: Annotated[str, Opt(rich_help_panel=FMT)] = "plan",
    partition: Annotated[Optional[str], Opt(rich_help_panel=FMT)] = None,
    account: Annotated[Optional[str], Opt(rich_help_panel=FMT)] = None,
    cpus_per_task: Annotated[Optional[int], Opt(min=1, help="SLURM cores per node task (default: the cluster's)", rich_help_panel=FMT)] = None,
    moe_capacity_factor: Annotated[Optional[float], Opt(help="MoE: plan and write a capacity factor, each expert padded to this x the mean (megatron: --moe-expert-capacity-factor --moe-pad-expert-input-to-capacity)", rich_help_panel=FMT)] = None,
    moe_fp8_dispatch: Annotated[bool, Opt(help="MoE: plan with FP8 dispatch (DeepEP); no export writes it (Megatron-LM has no flag): refused", rich_help_panel=FMT)] = False,
    moe_node_limit: Annotated[Optional[int], Opt(help="MoE: plan and write node-limited routing, each token to at most N nodes (megatron: --moe-router-num-groups --moe-router-group-topk, DeepEP flex dispatcher)", rich_help_panel=FMT)] = None,
    moe_a2a_overlap: Annotated[bool, Opt(help="MoE: plan and write the 1F1B all-to-all overlap (megatron: --overlap-moe-expert-parallel-comm --delay-wgrad-compute)", rich_help_panel=FMT)] = False,
    moe_shared_expert_overlap: Annotated[bool, Opt(help="MoE: plan and write the shared-expert overlap (megatron: --moe-shared-expert-overlap)", rich_help_panel=FMT)] = False,
    recompute_norms_mla_up: Annotated[bool, Opt(help="Plan and write the recompute of the norms and MLA up-projections (megatron: --recompute-granularity selective --recompute-modules layernorm mla_up_proj); other formats: refused", rich_help_panel=FMT)] = False,
    fp8_activation_cache: Annotated[bool, Opt(help="Plan with FP8 activation caching (DeepSeek-V3 sec. 3.3.2); no format has a flag for it: refused", rich_help_panel=FMT)] = False,
    optimizer_moments_bf16: Annotated[bool, Opt(help="Plan and write AdamW moments in BF16 (megatron, zero1 plans: --use-precision-aware-optimizer --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16); other formats: refused", rich_help_panel=FMT)] = False,
    out: Annotated[Optional[Path], Opt(help="Main output file (default: stdout; an existing one is replaced, and the "
                                       "line says so). Companion files (the ds_config.json / fsdp_config.json a "
                                       "torchrun script or accelerate YAML points at) go beside it in --out's folder; "
                                       "without --out into the current folder, where the printed script looks for "
                                       "them")] = None,
    force: Annotated[bool, Opt("--force", help="Replace an existing companion file that holds something else (without "
                               "it: an error naming the file; one with the same content is kept)")] = False,
    json_out: Annotated[bool, Opt("--json", help="Print the export (plan, files, notes) as JSON")] = False,
) -> None:
    """Write the chosen plan as a DeepSpeed config, FSDP2 settings, accelerate config, torchrun or sbatch script, or Megatron-LM arguments.

    Files: the main one to --out (else stdout); its companions (a torchrun script's or a DeepSpeed accelerate YAML's
    ds_config.json, a study's fsdp_config.json) beside --out, or in the current folder without --out. A companion
    that exists with other content is never replaced without --force (one line names it); --out itself is."""
    from planner.errors import PlanError
    from planner.exports.bundle import FORMATS, ExportOptions, export as render_export
    from planner.exports.common import Recipe, check_target

    if format not in FORMATS:
        raise unknown("format", format, tuple(FORMATS))
    if target is not None:
        check_target(target)
    companion_dir = out.parent if out is not None else Path(".")
    options = ExportOptions(
        target=target, recipe=Recipe(lr=lr, warmup_steps=warmup_steps, grad_clip=grad_clip),
        steps=steps, time=time, job_name=job_name, partition=partition, account=account,
        cpus_per_task=cpus_per_task,
        deepspeed_file=str(out) if format == "deepspeed" and out else str(companion_dir / "ds_config.json"),
        fsdp_file=str(out) if format == "fsdp" and out else str(companion_dir / "fsdp_config.json"),
        accelerate_file=str(out) if format == "accelerate" and out else "accelerate.yaml")
    moe = MoeOptions(moe_capacity_factor=moe_capacity_factor, moe_fp8_dispatch=moe_fp8_dispatch,
                     moe_node_limit=moe_node_limit, moe_a2a_overlap=moe_a2a_overlap,
                     moe_shared_expert_overlap=moe_shared_expert_overlap).checked()
    memory = MemoryRecipe(recompute_norms_mla_up=recompute_norms_mla_up, fp8_activation_cache=fp8_activation_cache,
                          optimizer_moments_bf16=optimizer_moments_bf16)
    if from_study is not None:
        from tuner.report import chosen_from_study  # the winner, on the system it ran on

        chosen = chosen_from_study(from_study, storage).model_copy(update={"moe": moe, "memory": memory})
    else:
        if knobs["model"] is None and knobs["n_layers"] is None:
            knobs["model"] = "7b"
        chosen = _from_scenario(knobs, objective, catalog, format, moe, memory)
    result = render_export(format, chosen, options)
    written, replaced, kept = _write(result, out, force)
    if json_out:
        print_json(result.model_dump(mode="json") | {"written": written, "replaced": replaced, "unchanged": kept})
    elif out is None:
        typer.echo(result.files[0].content, nl=False)
        _say_written(written, replaced, kept)  # companions (the DeepSpeed JSON a script points at)
        for note in result.notes:  # on stderr: stdout stays the file
            if note != f"plan from {result.source}":
                err_console.print(f"  {note}", highlight=False)
    else:
        _say_written(written, replaced, kept)
        for note in result.notes:
            err_console.print(f"  {note}", highlight=False)


def _from_scenario(fields: dict, objective: str, catalog_dirs, fmt: str, moe: MoeOptions, memory: MemoryRecipe):
    from hardware.catalog import load_catalog
    from plan_cli.estimate import _settings
    from planner import api
    from planner.exports.bundle import choose_from_estimate
    from planner.stack_pins import pinned_dead_end

    cat = load_catalog(catalog_dirs)
    scenario = Scenario(**fields)
    report = api.estimate(scenario, catalog=cat, settings=memory.settings(_settings(None, None, None, moe)), objective=objective, top=500,
                          include_rejected=True)  # nothing fits: its closest misses, for the one-line error
    if (why := pinned_dead_end(report, cat.stacks)) is not None:
        raise why  # the pins rule out every plan: `plan estimate`'s line for the same flags
    cluster = cat.clusters.get(report.system.cluster_id or "")
    chosen = choose_from_estimate(report, scenario.model, cluster.cpu_cores_per_node if cluster else None, fmt)
    return chosen.model_copy(update={"moe": moe, "memory": memory, "stack_profile": cat.stacks.get(chosen.plan.stack)})


# each format's usual file name (the hint when --out names a folder)
DEFAULT_NAMES = {"deepspeed": "ds_config.json", "fsdp": "fsdp_config.json", "accelerate": "accelerate.yaml",
                 "torchrun": "torchrun.sh", "slurm": "job.sbatch", "megatron": "megatron_args.sh"}


def _say_written(written: list[str], replaced: list[str], kept: list[str]) -> None:
    for path in written:
        err_console.print(f"wrote {path}" + (" (replaced the file that was there)" if path in replaced else ""),
                          highlight=False)
    for path in kept:
        err_console.print(f"kept {path} (it holds this content already)", highlight=False)


def _write(result, out: Path | None, force: bool = False) -> tuple[list[str], list[str], list[str]]:
    """Main file to --out (stdout when absent); companions by name (beside --out, else in the current folder).
    Returns (written, replaced: written over another content, kept: already this content). A companion with other
    content is refused before anything is written, unless `force`."""
    todo = []
    for i, f in enumerate(result.files):
        if i == 0 and out is None:
            continue
        path = out if i == 0 else Path(f.name)
        try:
            before = path.read_text() if path.is_file() else None
        except (OSError, UnicodeDecodeError):
            before = ""  # unreadable: other content
        if i > 0 and before is not None and before != f.content and not force:
            main = f"--out {out}" if out is not None else "the export printed on stdout"
            raise PlanError("companion", f"{path} exists with other content ({main} points at it); give --out in "
                            "another folder for both files, or --force to replace it")
        todo.append((i, path, f.content, before))
    written, replaced, kept = [], [], []
    for i, path, content, before in todo:
        if i > 0 and before == content:
            kept.append(str(path))
            continue
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content)
        except OSError as e:
            field = "out" if i == 0 else "companion"
            hint = f" (give a file name, e.g. {path / DEFAULT_NAMES[result.format]})" if path.is_dir() else ""
            raise PlanError(field, f"cannot write {path}: {e.strerror}{hint}") from None
        if result.format in ("torchrun", "slurm", "megatron") and i == 0:
            path.chmod(0o755)
        written.append(str(path))
        if before is not None and before != content:
            replaced.append(str(path))
    return written, replaced, kept
