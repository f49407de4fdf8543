"""`plan estimate`: rank every configuration that fits, and say why the others do not."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from plan_cli import options as opts
from plan_cli.common import NOTHING_FITS_EXIT, console, handle_errors, print_json
from planner.bounds import WithinDays, checked
from planner.errors import PlanError
from planner.fields import cli_fields
from planner.memory_recipe import MemoryRecipe
from planner.moe_options import MoeOptions
from planner.scenario import Scenario

Opt = typer.Option
SCEN = opts.SCEN
OUT = "Output"
INPUTS = "Ranking, measurements and memory margins"
MOE = "MoE and DeepSeek-V3 options"


def register(app: typer.Typer) -> None:
    app.command("estimate")(estimate)


@handle_errors
@opts.model_options(cli_fields(Scenario, skip=("gpus",)), into="knobs", panel=SCEN)
def estimate(
    knobs: dict,
    gpus: Annotated[Optional[str], Opt(help="GPU count, or a sweep LO:HI[:STEP]", rich_help_panel=SCEN)] = None,
    within_days: Annotated[Optional[float], Opt(help="With --tokens and a sweep --gpus LO:HI: "
                                                "the fewest GPUs that train them within this many days",
                                                rich_help_panel=SCEN)] = None,
    objective: Annotated[str, Opt(help="tokens_per_s|days|cost|memory-headroom", rich_help_panel=INPUTS)] = "tokens_per_s",
    network_from: Annotated[Optional[Path], Opt(help="JSON from `plan allreduce-bench --json`", rich_help_panel=INPUTS)] = None,
    calibration: Annotated[Optional[Path], Opt(help="Calibration JSON from `plan tune --calibration-out`", rich_help_panel=INPUTS)] = None,
    catalog: Annotated[Optional[list[Path]], Opt(help="Extra catalog folder(s) (also $PLAN_CATALOG)", rich_help_panel=INPUTS)] = None,
    fragmentation_margin: Annotated[Optional[float], Opt(help="Fraction of HBM kept free for the allocator, in place of the stack profile's allocator model (its largest transient buffers; default)", rich_help_panel=INPUTS)] = None,
    runtime_overhead_gib: Annotated[Optional[float], Opt(help="CUDA context/workspaces per GPU (default 1.5)", rich_help_panel=INPUTS)] = None,
    moe_capacity_factor: Annotated[Optional[float], Opt(help="MoE: pad each expert's tokens to this x the mean (default: dropless, busiest rank 1.25 x)", rich_help_panel=MOE)] = None,
    moe_fp8_dispatch: Annotated[bool, Opt(help="MoE: dispatch tokens to the experts in FP8 (DeepEP), combine in BF16", rich_help_panel=MOE)] = False,
    moe_node_limit: Annotated[Optional[int], Opt(help="MoE: node-limited routing, each token to at most N nodes, sent once per node (DeepSeek-V3 / DeepEP)", rich_help_panel=MOE)] = None,
    moe_a2a_overlap: Annotated[bool, Opt(help="MoE: hide the expert all-to-all behind another micro batch's compute (1F1B batch-level overlap, Megatron-Core --overlap-moe-expert-parallel-comm)", rich_help_panel=MOE)] = False,
    moe_shared_expert_overlap: Annotated[bool, Opt(help="MoE: hide the expert all-to-all behind the shared experts' GEMMs (Megatron-Core --moe-shared-expert-overlap)", rich_help_panel=MOE)] = False,
    recompute_norms_mla_up: Annotated[bool, Opt(help="Recompute the RMSNorms and MLA up-projections in backward, keep their inputs only (DeepSeek-V3 sec. 3.2.3)", rich_help_panel=MOE)] = False,
    fp8_activation_cache: Annotated[bool, Opt(help="With --precision fp8: keep linear inputs in FP8 (o_proj's in E5M6), SwiGLU inputs in FP8 with its output recomputed (DeepSeek-V3 sec. 3.3.2)", rich_help_panel=MOE)] = False,
    optimizer_moments_bf16: Annotated[bool, Opt(help="AdamW moments in BF16, masters and gradients in FP32 (DeepSeek-V3 sec. 3.3.2; Megatron --use-precision-aware-optimizer)", rich_help_panel=MOE)] = False,
    scenarios: Annotated[Optional[Path], Opt(help="CSV or JSONL of scenarios to evaluate in one process", rich_help_panel=OUT)] = None,
    out: Annotated[Optional[Path], Opt(help="Where --scenarios writes its results (.csv or .jsonl)", rich_help_panel=OUT)] = None,
    top: Annotated[Optional[int], Opt(min=1, help="Show the K best (default 10; 1 per scenario with --scenarios)", rich_help_panel=OUT)] = None,
    explain: Annotated[bool, Opt(help="Full breakdown of the configuration at --rank", rich_help_panel=OUT)] = False,
    rank: Annotated[int, Opt(min=1, help="Which ranked configuration --explain shows", rich_help_panel=OUT)] = 1,
    wide: Annotated[bool, Opt(help="Every column (sharding, offload, memory terms, TFLOPs, step time, cost): wider than 100", rich_help_panel=OUT)] = False,
    json_out: Annotated[bool, Opt("--json", help="Print JSON", rich_help_panel=OUT)] = False,
    csv_out: Annotated[bool, Opt("--csv", help="Print CSV", rich_help_panel=OUT)] = False,
    plot: Annotated[Optional[Path], Opt(help="PNG/SVG: days vs GPUs for a sweep, or breakdowns", rich_help_panel=OUT)] = None,
    save: Annotated[Optional[Path], Opt(help="Write the scenario to this TOML file (plan.toml: `plan tune` in that folder tunes it)", rich_help_panel=OUT)] = None,
) -> None:
    """Rank every configuration that fits, with a per-GPU memory breakdown and speed."""
    from hardware.catalog import load_catalog
    from plan_cli import estimate_view as view
    from planner import api
    from planner.units import parse_gpu_range

    if json_out and csv_out:
        raise PlanError("csv", "--json and --csv each print the whole report: give one")
    if explain and csv_out:  # the breakdown was printed as a table, --csv ignored without a word
        raise PlanError("csv", "--explain prints one plan's breakdown (a table, or --json); --csv prints the ranked "
                        "plans: give one")
    _check_scenarios_flags(scenarios, out, knobs, gpus=gpus, within_days=within_days, network_from=network_from,
                           explain=explain, rank=rank, wide=wide, json=json_out, csv=csv_out, plot=plot, save=save)
    cat = load_catalog(catalog)
    moe = MoeOptions(moe_capacity_factor=moe_capacity_factor, moe_fp8_dispatch=moe_fp8_dispatch,
                     moe_node_limit=moe_node_limit, moe_a2a_overlap=moe_a2a_overlap,
                     moe_shared_expert_overlap=moe_shared_expert_overlap)
    recipe = MemoryRecipe(recompute_norms_mla_up=recompute_norms_mla_up, fp8_activation_cache=fp8_activation_cache,
                          optimizer_moments_bf16=optimizer_moments_bf16)
    settings = recipe.settings(_settings(calibration, fragmentation_margin, runtime_overhead_gib, moe))
    if scenarios is not None:
        if out is None:
            raise PlanError("out", "--scenarios needs --out FILE (.csv or .jsonl)")
        from plan_cli.scenarios_io import run_scenarios

        n, errors = run_scenarios(scenarios, out, catalog=cat, settings=settings, objective=objective,
                                  top=top or 1, catalog_dirs=catalog)
        console.print(f"{n} rows written to {out} ({errors} with an error)")
        if n and errors == n:  # nothing evaluated is no success: a script's `plan estimate --scenarios ... && next`
            raise PlanError("scenarios", f"every row of {scenarios} has an error: see the error column of {out}")
        return

    base = dict(knobs)
    top = top or 10
    if base["model"] is None and base["n_layers"] is None:
        base["model"] = "7b"
    gpu_counts = [None] if gpus is None else parse_gpu_range(gpus, _node_size(base, cat))
    if within_days is not None:
        within_days = checked("within_days", within_days, WithinDays)
    if within_days is not None and base.get("tokens") is None:
        raise PlanError("within_days", "the fewest GPUs within a number of days needs what to train: add --tokens "
                        "(e.g. 1T)")
    if within_days is not None and len(gpu_counts) < 2:
        raise PlanError("within_days", "picks the fewest GPUs of a sweep: give --gpus LO:HI (e.g. 64:1024)")
    if plot is not None:  # before the search: a wrong name refused after the whole table was a wasted run
        from plan_cli.plots import check_plot

        check_plot(plot, sweep=len(gpu_counts) > 1, tokens=base.get("tokens"))
    if explain and len(gpu_counts) > 1:
        raise PlanError("explain", f"explains one configuration: give one GPU count, not the sweep {gpus}")
    if wide and len(gpu_counts) > 1:  # the sweep's table has its own columns: --wide was silently ignored
        raise PlanError("wide", f"shows every column of one GPU count's plans: give one GPU count, not the sweep "
                        f"{gpus} (a sweep's --json or --csv has every column of each count's best plan)")
    reports = []
    for count in gpu_counts:
        scenario = Scenario(**base, gpus=count)
        system = _system(scenario, cat, network_from)
        reports.append(api.estimate(scenario, catalog=cat, settings=settings, objective=objective,
                                    top=max(top, rank), include_rejected=True, system=system,
                                    catalog_dirs=catalog))

    if save is not None:
        from plan_cli.scenario_file import save_scenario

        if len(gpu_counts) > 1:
            raise PlanError("save", "saves one scenario: give one GPU count, not a sweep")
        save_scenario(Scenario(**base, gpus=gpu_counts[0]), save)
    if len(reports) > 1:
        _raise_if_sweep_only_structural(reports, cat.stacks, gpus)
        from plan_cli.sweep_view import show_sweep

        show_sweep(reports, json_out=json_out, csv_out=csv_out, plot=plot, within_days=within_days)
        _exit_if_nothing_fits(reports)
        return
    report = reports[0]
    _raise_if_only_structural(report, cat.stacks)
    if explain:
        view.show_explain(report, rank, json_out=json_out)
    elif json_out:
        print_json(report)
    elif csv_out:
        view.print_csv([api.estimate_row(e, report) for e in report.results[:top]])
    else:
        view.show_table(report, top, wide=wide)
    if save is not None and not (json_out or csv_out):
        from plan_cli.scenario_file import tune_hint

        console.print(f"scenario saved to {save}: {tune_hint(save)}", highlight=False)
    if plot is not None:
        from plan_cli.plots import plot_breakdown

        plot_breakdown(report.results[:top], plot)
        console.print(f"plot written to {plot}")
    _exit_if_nothing_fits(reports)


def _raise_if_only_structural(report, stacks: dict | None = None) -> None:
    """Nothing fits and no candidate got as far as the memory check: the pinned knobs rule out
    every plan. That is bad input (exit 2, its cause in one line), not "nothing fits" (3); the
    service answers 422 with the same line (planner/stack_pins.py)."""
    from planner.stack_pins import pinned_dead_end

    if (why := pinned_dead_end(report, stacks)) is not None:
        raise why


def _raise_if_sweep_only_structural(reports, stacks: dict | None, gpus: str) -> None:
    """A sweep whose every GPU count is a pinned dead end is bad input too (exit 2), not a table of
    "no configuration fits" rows and exit 3; the first count's cause is said."""
    from planner.stack_pins import pinned_dead_end

    dead = [pinned_dead_end(r, stacks) for r in reports]
    if all(dead):
        raise PlanError(dead[0].field, f"{dead[0].message}; at every GPU count of {gpus}")


def _exit_if_nothing_fits(reports) -> None:
    """A search that found no plan that fits is not a success: exit NOTHING_FITS_EXIT (3),
    distinct from bad input (2), after the closest misses were shown."""
    if not any(e.fits for r in reports for e in r.results):
        raise typer.Exit(NOTHING_FITS_EXIT)


def _first_error(e: ValueError) -> str:
    """A pydantic error's first problem as `field: message` (its str() starts with a count of errors)."""
    errors = e.errors() if hasattr(e, "errors") else []
    if not errors:
        return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    loc = ".".join(str(p) for p in errors[0].get("loc", ())) or "file"
    return f"{loc}: {errors[0]['msg']}"


def _check_scenarios_flags(scenarios: Path | None, out: Path | None, knobs: dict, **flags) -> None:
    """--out belongs to --scenarios, and --scenarios reads each row's knobs from the file: a flag the other way round
    was dropped without a word (`--out r.csv` wrote nothing; `--scenarios s.csv --model 13b` planned the file's models)."""
    if scenarios is None:
        if out is not None:
            raise PlanError("out", "--out is where --scenarios writes its rows; for one scenario print --csv or --json "
                            "and redirect it (> results.csv)")
        return
    given = [f"--{k.replace('_', '-')}" for k, v in knobs.items() if v is not None]
    defaults = {"rank": 1}
    given += [f"--{k.replace('_', '-')}" for k, v in flags.items() if v not in (None, False, defaults.get(k))]
    if given:
        raise PlanError("scenarios", f"{', '.join(given)}: not used with --scenarios, which reads every knob from the "
                        "file's columns (an empty cell: the planner chooses) and writes --out (.csv or .jsonl)")


def _settings(calibration, fragmentation_margin, runtime_overhead_gib, moe: MoeOptions | None = None):
    from planner.settings import Calibration, Settings

    update = {}
    if calibration is not None:
        try:
            update["calibration"] = Calibration.model_validate_json(calibration.read_text(encoding="utf-8"))
        except OSError as e:
            raise PlanError("calibration", f"cannot read {calibration}: {e.strerror}") from None
        except ValueError as e:
            raise PlanError("calibration", f"{calibration} is not a calibration JSON (`plan tune "
                            f"--calibration-out` writes one: {', '.join(Calibration.model_fields)}): "
                            f"{_first_error(e)}") from None
    if fragmentation_margin is not None:
        update["fragmentation_margin"] = fragmentation_margin
    if runtime_overhead_gib is not None:
        update["runtime_overhead_gib"] = runtime_overhead_gib
    return (moe or MoeOptions()).checked().settings(Settings(**update))


def _node_size(base: dict, cat) -> int:
    if base.get("gpus_per_node"):
        return base["gpus_per_node"]
    from planner.resolve import resolve_system
    from planner.scenario import Scenario

    return resolve_system(Scenario(**{**base, "gpus": None}), cat).gpus_per_node


def _system(scenario, cat, network_from):
    from planner.resolve import resolve_system

    system = resolve_system(scenario, cat)
    if network_from is None:
        return system
    from planner.network import busbw_values, read_bench, readings, with_measured

    data = read_bench(network_from)
    measured = busbw_values(data, network_from)
    values = {k: measured[f"{k}_busbw_gbps"] for k in ("intranode", "internode")}
    measured, note = with_measured(system, values, readings(data))
    if isinstance(data, dict) and data.get("backend") == "gloo" and measured.gpu.vendor != "local":
        # a CPU bench (the README's own example on a laptop) planned as a GPU cluster's links: 2% MFU, unexplained
        note += (f"; measured with gloo on CPU ranks, not the NCCL links of {measured.gpu.id}: run "
                 "`plan allreduce-bench` on the GPUs you plan for")
        measured = measured.model_copy(update={"measured_busbw_note": note})
    return measured
