"""`plan tune`: validate the planner with real runs (Optuna study of trainer trials).

`plan tune --model tiny --gpus 2 --budget 3m` runs a study; `plan tune report --study NAME`
prints what a study found at any time (also while workers are running).
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Optional

import typer

from plan_cli.common import console, err_console, handle_errors, print_json
from planner.bounds import InfeasibleMargin, checked
from planner.errors import PlanError, unknown

Opt = typer.Option
RUN = "Run"
SPACE = "Search space"
OUT = "Output"

tune_app = typer.Typer(name="tune", invoke_without_command=True, no_args_is_help=False,
                       help="Tune execution plans with real trainer runs (Optuna; resumable).")


def register(app: typer.Typer) -> None:
    app.add_typer(tune_app, name="tune")


@tune_app.callback()
@handle_errors
def tune(
    ctx: typer.Context,
    model: Annotated[Optional[str], Opt(help="Preset id, size (7b, 52b), path to a HF config.json, or hub id (org/name)", rich_help_panel=RUN)] = None,
    gpus: Annotated[Optional[int], Opt(min=1, help="Ranks (GPUs; CPU ranks without a GPU). Default: this machine's devices", rich_help_panel=RUN)] = None,
    budget: Annotated[Optional[str], Opt(help="Wall-clock budget: 2h, 90m, 3m, 45s (at most 7d: run the same command again to go on)", rich_help_panel=RUN)] = None,
    steps: Annotated[int, Opt(min=2, help="Trainer steps per trial (warm-up included)", rich_help_panel=RUN)] = 4,
    storage: Annotated[Optional[str], Opt(help="Optuna RDB URL (default sqlite:///plan-tune.db; postgresql://... works)", rich_help_panel=RUN)] = None,
    study: Annotated[Optional[str], Opt(help="Study name (default MODEL-NxDEVICE-BACKEND)", rich_help_panel=RUN)] = None,
    backend: Annotated[str, Opt(help="deepspeed|fsdp|any", rich_help_panel=SPACE)] = "any",
    top_k: Annotated[int, Opt(min=0, help="Planner proposals tried first (re-ranked after every trial)", rich_help_panel=SPACE)] = 10,
    choices: Annotated[Optional[list[str]], Opt(help="Narrow the space: KNOB=V1,V2 (repeatable)", rich_help_panel=SPACE)] = None,
    global_batch: Annotated[Optional[int], Opt(min=1, help="Fix sequences per step (grad_accum follows)", rich_help_panel=SPACE)] = None,
    seq_len: Annotated[Optional[int], Opt(min=1, help="Tokens per sequence (default: the model's, at most 2048)", rich_help_panel=SPACE)] = None,
    explore_infeasible: Annotated[bool, Opt(help="Also launch what the planner predicts will not fit", rich_help_panel=SPACE)] = False,
    infeasible_margin: Annotated[float, Opt(help="Launch predicted memory misses smaller than this fraction", rich_help_panel=SPACE)] = 0.10,
    device_memory_gib: Annotated[Optional[float], Opt(min=0.1, help="Per-rank memory cap (CPU: a real RLIMIT_AS)", rich_help_panel=RUN)] = None,
    gpu: Annotated[Optional[str], Opt(help="Catalog GPU id of this machine's GPUs", rich_help_panel=RUN)] = None,
    cluster: Annotated[Optional[str], Opt(help="Catalog cluster id", rich_help_panel=RUN)] = None,
    max_trials: Annotated[Optional[int], Opt(min=1, help="Launch at most this many trials", rich_help_panel=RUN)] = None,
    remeasure_rounds: Annotated[int, Opt(min=0, help="Re-runs of the top 3 configurations at the end, interleaved "
                                         "(0: none; at most a quarter of the budget)", rich_help_panel=RUN)] = 2,
    trial_timeout: Annotated[Optional[str], Opt(help="Kill a trial after this long (default 3x its expected time)", rich_help_panel=RUN)] = None,
    sampler: Annotated[str, Opt(help="tpe|random (after the planner's proposals)", rich_help_panel=SPACE)] = "tpe",
    seed: Annotated[Optional[int], Opt(help="The sampler's random seed (default: a fresh one each run)", rich_help_panel=SPACE)] = None,
    calibration: Annotated[Optional[Path], Opt(help="Start from this Calibration JSON", rich_help_panel=RUN)] = None,
    calibration_out: Annotated[Optional[Path], Opt(help="Write the fitted Calibration JSON here (for plan estimate --calibration)", rich_help_panel=OUT)] = None,
    csv: Annotated[Optional[Path], Opt(help="Write the trial table as CSV", rich_help_panel=OUT)] = None,
    stack_out: Annotated[Optional[Path], Opt(help="Write the bundled stack's profile fitted on the trials (DIR/stacks/bundled.toml, for --catalog DIR)", rich_help_panel=OUT)] = None,
    no_network: Annotated[bool, Opt("--no-network-bench", help="Skip the all-reduce measurement", rich_help_panel=RUN)] = False,
    init_only: Annotated[bool, Opt(help="Create the study (and measure) but run no trial: do this once before starting several workers", rich_help_panel=RUN)] = False,
    heartbeat_interval: Annotated[int, Opt(min=1, hidden=True)] = 10,
    grace_period: Annotated[int, Opt(min=1, hidden=True)] = 30,
    workdir: Annotated[Optional[Path], Opt(help="Trial logs and result files (default: a temp dir)", rich_help_panel=OUT)] = None,
    json_out: Annotated[bool, Opt("--json", help="Print the report as JSON", rich_help_panel=OUT)] = False,
    no_progress: Annotated[bool, Opt("--no-progress", help="No progress bar", rich_help_panel=OUT)] = False,
    scenario: Annotated[Path, Opt(help="Scenario TOML from `plan estimate --save` (used when --model is not given)", rich_help_panel=RUN)] = Path("plan.toml"),
) -> None:
    """Run (or resume) a study: planner proposals first, then an Optuna sampler; each trial a
    real trainer run. Open the study in optuna-dashboard: `optuna-dashboard sqlite:///plan-tune.db`."""
    if ctx.invoked_subcommand is not None:
        return
    if model is None:
        if not scenario.is_file():
            raise PlanError("model", f"nothing to tune: no {scenario} here; pass --model (e.g. --model tiny --gpus 2), "
                            f"or run `plan estimate --model ... --save {scenario}` in this folder first")
        from plan_cli.scenario_file import load_scenario
        from tuner.space import TUNED_KNOBS

        saved = load_scenario(scenario)
        if saved.model is None:
            raise PlanError("model", f"{scenario} names no model (save it again with `plan estimate --model ... --save`)")
        model, gpus, seq_len = saved.model, gpus or saved.gpus, seq_len or saved.seq_len
        global_batch, gpu, cluster = global_batch or saved.global_batch, gpu or saved.gpu, cluster or saved.cluster
        pinned = [f"{k}={getattr(saved, k)}" for k in TUNED_KNOBS if getattr(saved, k) is not None]
        choices = pinned + list(choices or [])  # flags given now win (parsed later, last one kept)
    if budget is None:
        raise PlanError("budget", "give a wall-clock budget, e.g. --budget 2h")
    from tuner.config import TuneConfig
    from tuner.space import parse_choices

    if backend not in ("deepspeed", "fsdp", "any"):
        raise unknown("backend", backend, ("deepspeed", "fsdp", "any"))
    if sampler not in ("tpe", "random"):
        raise unknown("sampler", sampler, ("tpe", "random"))
    _check_model(model)
    if calibration is not None and not calibration.is_file():
        raise PlanError("calibration", f"{calibration}: " + ("a folder, not a file" if calibration.is_dir() else "file not found"))
    _check_places(storage=storage, study=study, gpu=gpu, cluster=cluster, calibration_out=calibration_out, csv=csv,
                  stack_out=stack_out, workdir=workdir)
    cfg = _tune_config(
        TuneConfig, model=model, gpus=gpus, budget_s=budget, steps=steps, storage=storage, study=study,
        backend=backend, top_k=top_k, explore_infeasible=explore_infeasible, infeasible_margin=checked("infeasible_margin", infeasible_margin, InfeasibleMargin),
        device_memory_gib=device_memory_gib, choices=parse_choices(choices or []), global_batch=global_batch,
        seq_len=seq_len, gpu=gpu, cluster=cluster, max_trials=max_trials, remeasure_rounds=remeasure_rounds,
        trial_timeout_s=trial_timeout,
        sampler=sampler, seed=seed, calibration_in=str(calibration) if calibration else None,
        calibration_out=str(calibration_out) if calibration_out else None, csv=str(csv) if csv else None,
        measure_network=not no_network, heartbeat_interval_s=heartbeat_interval, grace_period_s=grace_period,
        workdir=str(workdir) if workdir else None, progress=not (json_out or no_progress),
    )
    if init_only:
        from tuner.api import create_study

        with _stopped_early():
            sc = create_study(cfg)
        msg = {"study": sc.study.study_name, "space_size": sc.space.size, "network": sc.meta.network_note,
               "network_effect": sc.meta.network_effect, "device": sc.device_note}
        print_json(msg) if json_out else console.print(
            f"study [bold]{sc.study.study_name}[/] ready: {sc.space.size} configurations; network: {msg['network']}; "
            f"{msg['network_effect']}" + (f"\nnote: {sc.device_note}" if sc.device_note else ""))
        return
    from tuner.api import start_study

    with _stopped_early():
        report = start_study(cfg, console=err_console, on_phase=_starting_lines(cfg.progress))
    report.stack_profile = _write_profile(report.study, cfg.storage, stack_out, json_out)
    _show(report, cfg.storage, json_out)
    if report.interrupted_by:  # the Unix convention for a command stopped by a signal: 128 + its number
        raise typer.Exit(INTERRUPTED_EXIT[report.interrupted_by])


def _check_model(model: str) -> None:
    """A model that does not resolve (a typo, a missing config.json) is refused before the study is opened and
    this machine measured: no storage file left behind, no start-up lines before the one-line error."""
    from planner.resolve import resolve_model
    from planner.scenario import Scenario

    resolve_model(Scenario(model=model))


def _starting_lines(progress: bool):
    """What the tuner does before its first trial ends (opening the study, measuring this machine, launching trial
    #0), one line each on stderr, where `plan serve`'s page shows it as the phase; none with --json / --no-progress."""
    from tuner.activity import STARTING, no_phase

    if not progress:
        return no_phase
    said: set[str] = set()

    def on_phase(phase: str, doing: str) -> None:
        if phase == STARTING and doing not in said:
            said.add(doing)
            err_console.print(f"starting: {doing}", highlight=False, soft_wrap=True)
    return on_phase


@tune_app.command("report")
@handle_errors
def report(
    study: Annotated[str, Opt(help="Study name")],
    storage: Annotated[Optional[str], Opt(help="Optuna RDB URL (default sqlite:///plan-tune.db)")] = None,
    csv: Annotated[Optional[Path], Opt(help="Write the trial table as CSV")] = None,
    stack_out: Annotated[Optional[Path], Opt(help="Write the bundled stack's profile fitted on the trials (DIR/stacks/bundled.toml)")] = None,
    json_out: Annotated[bool, Opt("--json", help="Print JSON")] = False,
) -> None:
    """What a study has found so far: best configuration, trial table, prediction errors."""
    from tuner.report import build_report, load, trials_frame

    _check_places(csv=csv, stack_out=stack_out)
    st = load(study, storage)
    rep = build_report(st, storage)
    if csv:
        csv.parent.mkdir(parents=True, exist_ok=True)  # as `plan tune --csv` does (an OSError traceback here)
        trials_frame(st).to_csv(csv, index=False)
    rep.stack_profile = _write_profile(study, storage, stack_out, json_out)
    _show(rep, storage, json_out)


# An interrupted study is saved and its report printed, but it did not finish: 128 + the signal's number, as a
# shell reports it (a script's `plan tune ... && next` must not go on as if the budget had run out; it exited 0)
INTERRUPTED_EXIT = {"SIGINT": 130, "SIGTERM": 143}


@contextmanager
def _stopped_early():
    """Ctrl-C or SIGTERM before the first trial (while this machine is measured): one line saying so and exit
    130 (it ended with no word; the bench's ranks are killed by tuner/network.py). Once trials run, the tuner
    itself stops cleanly and prints its report."""
    from tuner.api import Terminated

    try:
        yield
    except KeyboardInterrupt as e:
        what = "SIGTERM" if isinstance(e, Terminated) else "Ctrl-C"
        err_console.print(f"stopped by {what} while measuring this machine, before any trial: nothing to keep; "
                          "run the same command again", highlight=False, soft_wrap=True)
        raise typer.Exit(INTERRUPTED_EXIT["SIGTERM" if isinstance(e, Terminated) else "SIGINT"]) from None


def _write_profile(study: str, storage: str | None, out: Path | None, json_out: bool) -> dict | None:
    """Write --stack-out; the check (held-out vs shipped error, n, which was written) for the JSON report."""
    if out is None:
        return None
    from tuner.report import load
    from tuner.stack_profile import write_study_profile

    prof, check = write_study_profile(load(study, storage), out)
    held = check["held_out_mean_abs_pct"]
    errors = (f"leave-one-run-out error of tokens/s over {check['n']} trials: fitted {held:.1f}%, shipped "
              f"{check['shipped_mean_abs_pct']:.1f}%" if held is not None else "n/a (one trial)")
    what = ("stack profile fitted on the trials written" if check["kept"] == "fitted" else
            "the shipped stack profile written, not the fit (" + check["why"] + ")")
    (err_console if json_out else console).print(
        f"{what} to {out} ({errors}); use it with --catalog {out.parent.parent} --stack bundled", highlight=False)
    return check | {"path": str(out)}


def _show(rep, storage: str | None, json_out: bool) -> None:
    if json_out:
        print_json(rep)
        return
    if rep.setup is not None:  # a new study measuring the network (or whose set-up was stopped): no trial table yet
        from tuner.study_setup import line

        console.print(line(rep.study, rep.setup), highlight=False, soft_wrap=True)
        return
    from rich.table import Table

    from tuner.report import load, trials_frame

    df = trials_frame(load(rep.study, storage))
    t = Table(title=f"study {rep.study}: {rep.launched} run of {rep.trials} trials in all ({rep.device}, {rep.ranks} ranks)")
    cols = ["trial", "status", "source", "sharding", "offload", "activation_checkpointing", "precision",
            "micro_batch", "grad_accum", "measured_tokens_per_s", "predicted_tokens_per_s_default",
            "predicted_memory_gib", "measured_memory_gib", "reason"]
    heads = ["#", "status", "source", "sharding", "offload", "ckpt", "prec", "mb", "ga", "tok/s",
             "pred tok/s", "pred GiB", "meas GiB", "note"]
    for h in heads:
        t.add_column(h, overflow="fold")
    for _, row in df.iterrows():
        t.add_row(*[_fmt(row[c]) for c in cols])
    console.print(t)
    if rep.this_run is not None:
        console.print(this_run_line(rep), highlight=False)
    for r in rep.running:  # a trial starting (imports, DeepSpeed's op build) or stepping now: its log says which
        console.print(running_line(r), highlight=False)
    if rep.best:
        b = rep.best
        knobs = " ".join(f"{k}={b[k]}" for k in ("sharding", "offload", "activation_checkpointing",
                                                 "precision", "micro_batch", "grad_accum") if k in b)
        console.print(f"[bold green]best[/] trial {b['trial']}: {best_speed(rep)}  {knobs}")
    else:
        console.print("[yellow]no completed trial yet[/]")
    if rep.winner:
        console.print(rep.winner, highlight=False)
    fr = rep.final_ranking
    if fr:
        console.print(f"re-measured top candidates (interleaved, median ± half-range): {remeasured(fr['rows'])}; "
                      f"noise {fr['noise_pct']:.1f}%, tie window {fr['tie_window_pct']:.1f}%", highlight=False)
    if rep.by_backend:
        console.print("trials per backend: " + "; ".join(
            f"{b}: " + ", ".join(f"{n} {s}" for s, n in sorted(c.items())) for b, c in sorted(rep.by_backend.items())),
            highlight=False)
    for b in rep.no_result:
        console.print(f"[yellow]no result for backend {b}[/] (no trial of it completed: see the table's notes)")
    if rep.network:
        console.print(f"network: {rep.network}" + (f"; {rep.network_effect}" if rep.network_effect else ""), highlight=False)
    e0, e1 = rep.error_before, rep.error_after
    if e0["n"]:
        console.print(f"prediction error of tokens/s over {e0['n']} trials: mean {e0['mean_abs_pct']:.0f}% "
                      f"uncalibrated, {e1['mean_abs_pct']:.0f}% with the calibration applied (both on these trials)",
                      highlight=False)
    if rep.calibration_check:
        from tuner.calibration_check import line

        console.print(line(rep.calibration_check, rep.calibration), highlight=False)
    if rep.deepspeed_config:
        console.print("DeepSpeed config (ds_config.json):")
        console.print_json(json.dumps(rep.deepspeed_config))
    elif rep.launch_settings:
        console.print("launch settings (accelerate):")
        console.print_json(json.dumps(rep.launch_settings))
    if rep.launch_command:
        console.print(f"launch: [bold]{rep.launch_command}[/]", soft_wrap=True)
    if rep.export_command:  # the export that writes the winner (a plain-DDP winner: deepspeed, as ZeRO stage 0)
        console.print(f"export: {rep.export_command}", soft_wrap=True, highlight=False, markup=False)
    if rep.stop_reason:
        console.print(f"stopped: {rep.stop_reason}")


def _fmt(v) -> str:
    if v is None or (isinstance(v, float) and v != v):
        return ""
    if isinstance(v, float):
        return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}"
    return str(v)


def this_run_line(rep) -> str:
    """What this run did, apart from the study's totals (a resumed study's `launched` counted every run's)."""
    r = rep.this_run
    outcomes = ", ".join(f"{n} {s}" for s, n in sorted(r["by_status"].items()))
    again = f", re-measured the top candidates {r['remeasurements']} time{'s' if r['remeasurements'] != 1 else ''}" \
        if r.get("remeasurements") else ""
    return (f"this run: launched {r['launched']} trial{'s' if r['launched'] != 1 else ''}"
            f"{' (' + outcomes + ')' if outcomes else ''}{again}; the study in all: {rep.launched} launched of "
            f"{rep.trials} trials")


def running_line(r: dict) -> str:
    """A trial running now and what its log says ('running now: trial #0 for 41 s: starting: DeepSpeed building its
    op cpu_adam (first run on this machine)'): the table only said 'running' while its first step was minutes away."""
    since = "" if r.get("for_s") is None else f" for {r['for_s']:.0f} s"
    return f"running now: trial #{r['trial']}{since}: {r['doing']}"


def best_speed(rep) -> str:
    """The winner's speed as the ranking judged it: the median of its re-measurements where it has them (the
    line gave its first run, 37,308 tokens/s, under 'ddp won: trial 2, 26,775 tokens/s (median ...)')."""
    b = rep.best
    row = next((r for r in (rep.final_ranking or {}).get("rows", []) if r["trial"] == b["trial"]), None)
    if row is None or len(row["samples_tokens_per_s"]) < 2:
        return f"{b['tokens_per_s']:,.0f} tokens/s measured"
    first = f" (its first {b['tokens_per_s']:,.0f})" if round(b["tokens_per_s"]) != round(row["median_tokens_per_s"]) \
        else " (its first run's)"  # the median was its first run: '22,691 ... (its first 22,691)' said it twice
    return f"{row['median_tokens_per_s']:,.0f} tokens/s, the median of {len(row['samples_tokens_per_s'])} runs{first}"


def remeasured(rows: list[dict]) -> str:
    """The final re-measurements, one per candidate: "#1 12,854 tok/s ±23% (2 runs)"; a candidate run once
    has no spread to show ("#0 11,485 tok/s (1 run)", was "±0% (1 runs)")."""
    def one(r: dict) -> str:
        n = len(r["samples_tokens_per_s"])
        spread = f" ±{r['spread_pct']:.0f}%" if n > 1 else ""
        return f"#{r['trial']} {r['median_tokens_per_s']:,.0f} tok/s{spread} ({n} run{'s' if n != 1 else ''})"
    return "; ".join(one(r) for r in rows)


def _check_places(storage: str | None = None, study: str | None = None, gpu: str | None = None,
                  cluster: str | None = None, calibration_out: Path | None = None, csv: Path | None = None,
                  stack_out: Path | None = None, workdir: Path | None = None) -> None:
    """What a study would find wrong only after its budget is spent (an output path that is a folder or not
    writable) or silently replace (an empty --storage / --study, an unknown --gpu / --cluster), refused first."""
    from planner.out_path import check_out_file, check_out_folder

    for name, text in (("storage", storage), ("study", study)):
        if text is not None and not text.strip():
            raise PlanError(name, "empty; leave the option out for the default")
    if gpu is not None or cluster is not None:
        from hardware.catalog import load_catalog

        cat = load_catalog(None)
        for name, value, ids in (("gpu", gpu, cat.gpus), ("cluster", cluster, cat.clusters)):
            if value is not None and value not in ids:
                raise unknown(name, value, ids)
    if stack_out is not None and (stack_out.name != "bundled.toml" or stack_out.parent.name != "stacks"):
        # a bundled.toml outside a stacks/ folder is a profile no --catalog DIR reads (it was written all the same)
        raise PlanError("stack_out", f"{stack_out}: the file must be DIR/stacks/bundled.toml, where --catalog DIR "
                        "reads it (e.g. mycat/stacks/bundled.toml)")
    for name, path in (("calibration_out", calibration_out), ("csv", csv), ("stack_out", stack_out)):
        if path is not None:
            check_out_file(path, name)
    if workdir is not None:
        check_out_folder(workdir, "workdir")


# TuneConfig fields whose `plan tune` option is spelled otherwise: an error names the option
CLI_NAMES = {"budget_s": "budget", "trial_timeout_s": "trial_timeout", "heartbeat_interval_s": "heartbeat_interval",
             "grace_period_s": "grace_period", "calibration_in": "calibration", "measure_network": "no_network"}


def _tune_config(config_cls, **fields):
    """The study's config from the options; a refused value is a PlanError naming the option the
    user typed (--budget, not the config's budget_s)."""
    from pydantic import ValidationError

    try:
        return config_cls(**fields)
    except ValidationError as e:
        first = e.errors()[0]
        name = next((str(p) for p in first.get("loc", ()) if isinstance(p, str)), "input")
        raise PlanError(CLI_NAMES.get(name, name), first["msg"]) from None
