"""`plan validate RUNS.csv`: score the planner on measured runs; `plan calibrate RUNS.csv`: fit a
stack profile to them (a user's own logs, in the layout of validation/data/published_dev.csv)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from plan_cli import options as opts
from plan_cli.common import console, err_console, handle_errors, print_json
from planner.errors import PlanError, unknown


def register(app: typer.Typer) -> None:
    app.command("validate")(validate)
    app.command("calibrate")(calibrate)


def _pct(v, fmt="{:.1f}%") -> str:
    return "-" if v is None else fmt.format(v)


@handle_errors
def validate(
    runs: Annotated[Path, typer.Argument(help="CSV of measured runs (layout: validation/data/README.md)")],
    catalog: opts.CatalogDirs = None,
    rows: Annotated[bool, typer.Option(help="Also print every run")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON")] = False,
) -> None:
    """Score the planner on measured runs: speed error per source, OOM flags, memory, ranking."""
    from hardware.catalog import load_catalog
    from planner.runs import load_runs
    from planner.settings import Settings
    from planner.validate import validate as run_validate

    from planner.run_csv import repeated_note
    from planner.runs import repeated_ids

    cat = load_catalog(catalog)
    skipped: list = []
    report = run_validate(load_runs(runs, cat, skipped), Settings(stacks=cat.stacks), skipped)
    repeated = repeated_ids(runs)
    report = report.model_copy(update={"repeated_ids": repeated})
    if not report.runs and report.not_predicted:  # nothing to score: the first reason is the error
        first = report.not_predicted[0]
        raise PlanError(first.field, f"row {first.id}: {first.reason} (no row of {runs} could be predicted)")
    if repeated:  # a row pasted twice weighs double in every average below (it was scored twice with no word)
        (err_console if json_out else console).print(
            f"note: {repeated_note(repeated)} of {runs}: each row is scored; remove a row pasted twice",
            highlight=False, soft_wrap=True)
    if json_out:
        print_json(report)
        return
    if rows:
        console.print(f"{'id':28} {'stack':18} {'meas tok/s/GPU':>14} {'pred':>9} {'err':>7} {'GiB':>6} "
                      f"{'meas GiB':>17} verdict")
        for p in report.runs:
            meas = "-" if p.measured_tokens_per_s_per_gpu is None else f"{p.measured_tokens_per_s_per_gpu:,.0f}"
            err = "-" if p.error is None else f"{100 * p.error:+.0f}%"
            mem = "-" if p.measured_mem_gib is None else f"{p.measured_mem_gib:.1f} ({p.mem_convention})"
            console.print(f"{p.id:28} {p.stack:18} {meas:>14} {p.predicted_tokens_per_s_per_gpu:9,.0f} {err:>7} "
                          f"{p.predicted_mem_gib:6.1f} {mem:>17} {p.outcome}/{p.verdict or 'fits'}"
                          + (f"; not scored: {p.not_scored}" if p.not_scored else ""), highlight=False, soft_wrap=True)
    for miss in report.not_predicted:
        console.print(f"not predicted: {miss.id}: {miss.field}: {miss.reason}", highlight=False)
    total = len(report.runs) + len(report.not_predicted)
    console.print(f"{total} runs, {len(report.runs)} predicted ({len(report.not_predicted)} not predicted). Stack profiles: "
                  "catalog/stacks (in-sample on the runs they were fitted on, their fit_sources; "
                  "cross-validated errors: validation/fit_profiles.py)", highlight=False)
    console.print(f"{'source':60} {'runs':>4} {'scored':>6} {'MAPE':>7} {'bias':>7} {'iter MAPE':>9}")
    for s in report.sources:
        console.print(f"{s.source[:60]:60} {s.rows:4} {s.speed_rows:6} {_pct(s.mape_pct):>7} "
                      f"{_pct(s.bias_pct, '{:+.1f}%'):>7} {_pct(s.iter_mape_pct):>9}", highlight=False)
    console.print(f"all: MAPE {_pct(report.overall_mape_pct)}, bias {_pct(report.overall_bias_pct, '{:+.1f}%')} "
                  "of tokens/s per GPU", highlight=False)
    console.print(f"OOM runs flagged: {report.oom_flagged}/{report.oom_runs}; runs that ran called infeasible: "
                  f"{report.false_alarms_memory} for memory, {report.false_alarms_structural} structural "
                  f"(of {report.ran})" + (f"; {_n(report.inconsistent_rows, 'row')} not scored: layout contradicts "
                                          "the GPU count, or speed above the GPU's peak or below 0.1% of it (--rows says which)" if report.inconsistent_rows else ""),
                  highlight=False)
    console.print(f"memory: {report.memory_rows} runs with a measured peak, MAPE {_pct(report.memory_mape_pct)}, "
                  f"{report.memory_within_10pct} of {report.memory_rows} within 10% "
                  "(each against the prediction in its source's convention: nvidia-smi, reserved, allocated)",
                  highlight=False)
    for m in report.memory_sources:
        console.print(f"  {m.source[:50]:50} {m.convention:10} n={m.rows:2} MAPE {m.mape_pct:5.1f}% bias "
                      f"{m.bias_pct:+5.1f}%; worst {m.worst_id} {m.worst_pct:+.1f}%", highlight=False)
    if report.groups:
        console.print(f"ranking in {len(report.groups)} groups (same model, GPU, count, seq; >= 3 configs): "
                      f"Spearman {report.mean_spearman:.2f}, top-1 regret {100 * report.mean_top1_regret:.1f}%",
                      highlight=False)
        for g in report.groups:
            console.print(f"  {g.group[:70]:70} n={g.runs:2} Spearman {g.spearman:+.2f} regret "
                          f"{100 * g.top1_regret:.1f}%", highlight=False)


@handle_errors
def calibrate(
    runs: Annotated[Path, typer.Argument(help="CSV of your measured runs (layout: validation/data/README.md)")],
    stack: Annotated[str, typer.Option(help="The stack the runs used: megatron|megatron_deepspeed|hf|fsdp|torchtitan|bundled")],
    out: Annotated[Path, typer.Option(help="Where to write the profile: DIR/stacks/STACK.toml")],
    catalog: opts.CatalogDirs = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the profile as JSON")] = False,
    all_rows: Annotated[bool, typer.Option("--all-rows", help="Fit on every run, also those whose framework "
                                           "column names another stack (default: those are left out)")] = False,
) -> None:
    """Fit a stack profile to your own runs; then plan with --catalog DIR --stack STACK."""
    from hardware.catalog import load_catalog
    from hardware.stacks import profile_to_toml
    from planner import profile_fit
    from planner.calibrate_rows import dropped_note, runs_for_stack
    from planner.run_csv import repeated_note
    from planner.runs import load_runs, repeated_ids
    from planner.scenario import STACKS

    if stack not in STACKS:
        raise unknown("stack", stack, tuple(STACKS))
    if out.suffix != ".toml" or out.parent.name != "stacks" or out.stem != stack:
        raise PlanError("out", f"{out}: must be DIR/stacks/{stack}.toml so that --catalog DIR finds it")
    from planner.out_path import check_out_file

    check_out_file(out, "out")  # a folder, a file on the way, an unwritable place: said before the fit
    cat = load_catalog(catalog)
    read = load_runs(runs, cat)
    repeated = repeated_ids(runs)
    if repeated:  # strict, as for a row it cannot read: a row pasted twice would weigh double in the fit
        raise PlanError("runs", f"{repeated_note(repeated)} of {runs}: a fit would weigh that run twice; "
                        "remove the repeated row, or give each run its own id")
    usable = [r for r in read if r.scored and r.layout_stated]
    if not usable:
        raise PlanError("runs", f"{runs}: nothing to fit: {_unusable(read)}")
    mine, dropped = runs_for_stack(usable, stack, all_rows)
    if not mine:
        named = ", ".join(f"{s} {c}" for s, c in dropped.items())
        raise PlanError("stack", f"{runs}: no run names stack {stack} in its framework column ({named}); "
                        f"--stack one of those, or --all-rows to fit {stack} on them all")
    note = dropped_note(stack, len(mine), dropped)
    fitted = profile_fit.fit_one(mine, cat.stacks[stack])
    _write(out, profile_to_toml(fitted))
    if json_out:
        if note:
            err_console.print(note, highlight=False, soft_wrap=True)
        print_json(fitted)
        return
    if note:
        console.print(note, highlight=False, soft_wrap=True)
    factors = ", ".join(f"{f} {getattr(fitted, f):.3g}" for f, *_ in profile_fit.PARAMS)
    console.print(f"fitted {stack} on {len(mine)} runs: {factors}", highlight=False)
    held_out = (f"{len(fitted.fit_sources)} sources held out in turn" if len(fitted.fit_sources) > 1
                else f"one source: each of the {len(mine)} runs held out in turn")
    console.print(f"cross-validated MAPE of tokens/s: {_pct(fitted.cv_mape_pct)} ({held_out})", highlight=False)
    if len(mine) < len(profile_fit.PARAMS):  # more factors than runs: the ridge, not the runs, sets most of them
        console.print(f"warning: {len(mine)} runs for {len(profile_fit.PARAMS)} fitted factors: the runs cannot tell "
                      f"the factors apart, each stays near its prior ({stack}'s catalog profile) unless the runs pull "
                      "it; runs that vary model size, sequence length, micro batch, accumulation and GPU count "
                      "identify them", highlight=False, soft_wrap=True)
    console.print(f"wrote {out}; plan with: plan estimate ... --catalog {out.parent.parent} --stack {stack}",
                  highlight=False)


def _unusable(read) -> str:
    """Why no run of a file can be fitted, counted (it said only 'no run with a stated layout, a measured
    speed and outcome ok', not which of the three the rows lack)."""
    from planner.validate import not_scored_reason

    if not read:
        return "the file has no rows"
    unscored = [r for r in read if not r.scored]
    no_layout = [r for r in read if r.scored and not r.layout_stated]
    parts = [f"{len(read)} rows read"]
    if no_layout:
        parts.append(f"{len(no_layout)} state no parallel layout (columns tp and pp, or dp; e.g. {no_layout[0].id}), "
                     "which a fit needs: `plan validate` scores such rows with the planner's best layout")
    if unscored:
        first = unscored[0]
        why = not_scored_reason(first) or f"outcome {first.outcome}"
        parts.append(f"{len(unscored)} have no speed to fit (e.g. {first.id}: {why})")
    return "; ".join(parts)


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")


def _write(out: Path, text: str) -> None:
    """The profile written to `out` (its folders made); a place that cannot be written is one error line."""
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)
    except OSError as e:
        raise PlanError("out", f"cannot write {out}: {e.strerror or e}") from None
