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

    _check_file_knobs(knobs)
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


FILE_KNOBS = ("sharding", "offload", "precision", "activation_checkpointing", "attention", "optimizer", "zeropp_qwz",
              "zeropp_hpz_partition_size", "zeropp_qgz")


def _check_file_knobs(knobs: dict) -> None:
    """--deepspeed-config / --fsdp-config run the file as is, its knobs read back from it
    (trainer/backends/deepspeed_backend.py knobs_from_ds_config, planner/exports/fsdp_settings.py knobs_of): a
    --sharding zero3 beside a stage-0 file ran stage 0 without a word. A flag the file contradicts is refused."""
    option = "deepspeed_config" if knobs.get("deepspeed_config") else "fsdp_config"
    path = knobs.get(option)
    given = {k: knobs[k] for k in FILE_KNOBS if knobs.get(k) is not None}
    if not path or not given:
        return
    import json

    from planner.errors import PlanError

    try:
        text = json.loads(Path(path).read_text())
        if option == "deepspeed_config":
            from trainer.backends.deepspeed_backend import knobs_from_ds_config

            from_file = knobs_from_ds_config(text, {})
        else:
            from planner.exports.fsdp_settings import knobs_of

            from_file = knobs_of(text)
    except (OSError, ValueError, KeyError, TypeError, AttributeError, PlanError):
        return  # not found / not JSON / an odd stage or strategy: the config check names it (trainer/config.py)
    clash = [k for k, v in given.items() if k in from_file and from_file[k] != v]
    if clash:
        flag, export = option.replace("_", "-"), option.split("_")[0]
        said = ", ".join(f"--{k.replace('_', '-')} {given[k]} (the file: {from_file[k]})" for k in clash)
        raise PlanError(clash[0], f"{said}: --{flag} {path} runs as written; leave the flag out, or export "
                        f"the config again with it (plan export {export} ...)")


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
