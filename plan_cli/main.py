"""The `plan` command: a thin face over planner/, tuner/, trainer/ and hardware/.

Each command group lives in its own module with a `register(app)` function; heavy imports
(torch, DeepSpeed, Optuna) happen inside the commands, so `plan estimate` starts fast.
"""

from __future__ import annotations

import importlib

import typer

app = typer.Typer(
    name="plan",
    help="Capacity planner and auto-tuner for distributed LLM training.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)



@app.callback()
def _root() -> None:
    """Plan, estimate and tune distributed LLM training runs."""


# One module per command (group); a module that is not there yet is skipped.
COMMAND_MODULES = ("estimate", "catalog", "train", "bench", "probe", "tune", "export", "serve")

for _name in COMMAND_MODULES:
    try:
        _mod = importlib.import_module(f"plan_cli.{_name}")
    except ModuleNotFoundError as _e:
        if _e.name != f"plan_cli.{_name}":
            raise
        continue
    _mod.register(app)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
