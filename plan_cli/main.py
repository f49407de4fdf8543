"""The `plan` command: a thin face over planner/, tuner/, trainer/ and hardware/.

Each command (group) lives in its own module with a `register(app)` function; heavy imports
(torch, DeepSpeed, Optuna) happen inside the commands. Building typer's parameters for every
command costs ~0.3 s, so `plan COMMAND ...` registers only the module of COMMAND; `plan --help`
and `from plan_cli.main import app` (tests) get them all.
"""

from __future__ import annotations

import importlib
import re
import sys

import typer
from rich.markup import escape

from plan_cli import help_tables

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
    help_tables.install()
    modules = [COMMANDS[only]] if only in COMMANDS else list(dict.fromkeys(COMMANDS.values()))
    for name in modules:
        importlib.import_module(f"plan_cli.{name}").register(app)
    return app


def __getattr__(name: str) -> typer.Typer:
    if name == "app":
        globals()["app"] = full = build_app()
        return full
    raise AttributeError(name)


# click's exception base, from typer's own (typer >= 0.29 vendors click as typer._click; older ones use click)
_CLICK_ERROR = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException")


def _usage_error_line(e: Exception) -> str:
    """A usage error (a bad int, an unknown option, a missing argument) as one line naming the option,
    instead of typer's multi-line panel; a missing argument also says what it takes (its help)."""
    ctx, param = getattr(e, "ctx", None), getattr(e, "param", None)
    takes = f" ({param.help})" if type(e).__name__ == "MissingParameter" and getattr(param, "help", None) else ""
    where = f"; see `{ctx.command_path} --help`" if ctx is not None else ""
    msg = e.format_message().rstrip('.')  # type: ignore[attr-defined]
    if "valid integer" in msg and _SUFFIXED.fullmatch(_given(param)):
        takes += _WHOLE_NUMBER.get(getattr(param, "name", ""), "; write the whole number (8192, not 8k)")
    elif "valid integer" in msg and re.fullmatch(r"\d+:\d+(:\d+)?", _given(param)):
        takes += "; this command takes one count (a sweep such as 8:128 is `plan estimate`'s)"
    return f"{msg}{takes}{where}"


_SUFFIXED = re.compile(r"\d+(\.\d+)?\s*[kKmMgGtT]")


def _given(param) -> str:
    """The value the command line gave `param` (its last `--opt VALUE` or `--opt=VALUE`), "" if none is found."""
    opts, argv, found = set(getattr(param, "opts", ()) or ()), sys.argv[1:], ""
    for i, a in enumerate(argv):
        if a in opts and i + 1 < len(argv):
            found = argv[i + 1]
        elif "=" in a and a.split("=", 1)[0] in opts:
            found = a.split("=", 1)[1]
    return found


# a count with a unit suffix ("4k", "4M") is not an integer: say what to write instead
_WHOLE_NUMBER = {"global_batch": "; write the whole number of sequences (1024, not 1k), or give tokens with --global-batch-tokens"}


def main() -> None:
    command = sys.argv[1] if len(sys.argv) > 1 else None
    _check_environment(command)
    try:
        rv = build_app(only=command)(standalone_mode=False)
    except _CLICK_ERROR as e:
        if type(e).__name__ != "NoArgsIsHelpError":  # that one has printed the help already
            from plan_cli.common import err_console

            err_console.print(f"[bold red]error:[/] {escape(_usage_error_line(e))}", highlight=False, soft_wrap=True)
        raise SystemExit(e.exit_code) from None  # type: ignore[attr-defined]
    except typer.Abort:
        sys.stderr.write("Aborted!\n")
        raise SystemExit(1) from None
    # without standalone mode, click returns typer.Exit's code, else the command's return value
    raise SystemExit(rv if isinstance(rv, int) else 0)


if __name__ == "__main__":
    main()
