"""`plan train`: run the bundled GPT trainer on N local ranks (or join torchrun / srun)."""

from __future__ import annotations

from pathlib import Path

import typer

from plan_cli import options as opts
from plan_cli.common import console, err_console, handle_errors, print_json, writable_file
from trainer.cli import trainer_fields


def register(app: typer.Typer) -> None:
    app.command("train")(train)


@handle_errors
@opts.model_options(trainer_fields(), into="knobs", show_default=True)
def train(knobs: dict) -> None:
    """Train the bundled GPT with the given knobs and report speed, MFU and memory."""
    from trainer.config import TrainConfig
    from trainer.launch import launch, summary_line
    from trainer.result import EXIT_CODES

    cfg = _config(TrainConfig, {k: v for k, v in knobs.items() if v is not None})
    if cfg.run.json_out:  # a folder ended in an IsADirectoryError traceback
        writable_file(Path(cfg.run.json_out), "json", "result.json")
    result = launch(cfg)
    if result.status == "bad_config":
        err_console.print(f"[bold red]error:[/] {result.error}", highlight=False, soft_wrap=True)
        raise typer.Exit(2)
    (console if result.status == "ok" else err_console).print(summary_line(result), highlight=False, soft_wrap=True)
    if result.status == "ok" and result.memory is not None:
        m = result.memory
        console.print(f"rank 0 holds: params {m.params_bytes:,} B, grads {m.grads_bytes:,} B, "
                      f"optimizer {m.optimizer_bytes:,} B; saved activations {m.saved_activations_bytes:,} B",
                      highlight=False)
    if result.status == "ok" and result.parallel is not None:
        par = result.parallel
        line = f"layout: tp {par.tp} x pp {par.pp} (vpp {par.vpp}) x dp {par.dp}"
        if par.pp > 1:
            line += f", {par.schedule}, micro batches {par.micro_batches}, layers per stage {par.stage_layers}"
            if par.bubble_ratio is not None:
                line += f", measured bubble {par.bubble_ratio:.2f} (planner (p-1)/(m*v) = {(par.pp - 1) / (par.micro_batches * par.vpp):.2f})"
        console.print(line, highlight=False, soft_wrap=True)
    if result.status != "ok":
        raise typer.Exit(EXIT_CODES[result.status])


def _config(config_cls, knobs: dict):
    """The run's config from the flat options; a refused value names the option the user typed
    (`steps`, not the config's nested `run.steps`)."""
    from pydantic import ValidationError

    from planner.errors import PlanError

    try:
        return config_cls(**knobs)
    except ValidationError as e:
        first = e.errors()[0]
        names = [str(p) for p in first.get("loc", ()) if isinstance(p, str)]
        name = next((n for n in reversed(names) if n in knobs), names[-1] if names else "input")
        raise PlanError(name, first["msg"]) from None


__all__ = ["register", "print_json"]
