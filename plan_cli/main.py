"""The `plan` command: a thin face over planner/, tuner/, trainer/ and hardware/.

Each command (group) lives in its own module with a `register(app)` function; heavy imports
(torch, DeepSpeed, Optuna) happen inside the commands. Building typer's parameters for every
command costs ~0.3 s, so `plan COMMAND ...` registers only the module of COMMAND; `plan --help`
and `from plan_cli.main import app` (tests) get them all.
"""

from __future__ import annotations

import importlib
import sys

import typer

# command name -> module in plan_cli/
COMMANDS = {
    "estimate": "estimate",
    "catalog": "catalog",
    "train": "train",
    "allreduce-bench": "bench",
    "probe": "probe",
    "tune": "tune",
    "export": "export",
    "serve": "serve",
    "validate": "validate",
    "calibrate": "validate",
}


# Commands that need the full environment (`scripts/setup.sh --full`), and what they import.
FULL_ENV = {
    "train": ("torch",),
    "allreduce-bench": ("torch",),
    "probe": ("torch",),
    "tune": ("torch", "optuna", "sqlalchemy", "pandas"),
    "serve": ("fastapi", "uvicorn"),
}


def missing_modules(names) -> list[str]:
    """The modules of `names` that cannot be imported here (found without importing them)."""
    import importlib.util

    missing = []
    for name in names:
        try:
            if importlib.util.find_spec(name) is None:
                missing.append(name)
        except (ImportError, ValueError):
            missing.append(name)
    return missing


def _check_environment(command: str | None) -> None:
    """After the planner-only set-up, a full-environment command says so in one line (exit 2)."""
    missing = missing_modules(FULL_ENV.get(command or "", ()))
    if missing and not {"--help", "-h"} & set(sys.argv[2:]):
        sys.stderr.write(f"error: `plan {command}` needs the full environment (missing: {', '.join(missing)}); "
                         "install it with scripts/setup.sh --full\n")
        raise SystemExit(2)


def _root() -> None:
    """Plan, estimate and tune distributed LLM training runs."""


def build_app(only: str | None = None) -> typer.Typer:
    """The typer app with every command, or with just the module of command `only`."""
    app = typer.Typer(
        name="plan",
        help="Capacity planner and auto-tuner for distributed LLM training.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
    )
    app.callback()(_root)
    modules = [COMMANDS[only]] if only in COMMANDS else list(dict.fromkeys(COMMANDS.values()))
    for name in modules:
        importlib.import_module(f"plan_cli.{name}").register(app)
    return app


def __getattr__(name: str) -> typer.Typer:
    if name == "app":
        globals()["app"] = full = build_app()
        return full
    raise AttributeError(name)


def main() -> None:
    command = sys.argv[1] if len(sys.argv) > 1 else None
    _check_environment(command)
    build_app(only=command)()


if __name__ == "__main__":
    main()
