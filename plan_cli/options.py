"""Typer options generated from the pydantic models, so a flag reads the same everywhere.

`model_options` adds one option per model field (planner/fields.py: type, default, help from
the field's description) to a command and hands the command their values as one dict.
Scenario knobs (`plan estimate`, `plan export`): blank = the planner chooses.
Trainer knobs (`plan train`): TrainConfig's fields; left out = the model's default.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from planner.fields import CliField

SCEN = "Scenario (blank = planner chooses)"

Objective = Annotated[str, typer.Option(help="tokens_per_s|days|cost|memory-headroom")]
CatalogDirs = Annotated[Optional[list[Path]], typer.Option(help="Extra catalog folder(s) (also $PLAN_CATALOG)")]

Nproc = Annotated[int, typer.Option(min=1, max=1024, help="Ranks on this node.")]  # trainer/config.py's bounds
Nnodes = Annotated[int, typer.Option(min=1, max=1_000_000, help="Nodes (the same command on each, with --node-rank; under srun / torchrun: the launcher's nodes, another value is refused).")]
NodeRank = Annotated[int, typer.Option(min=0, help="This node's rank, 0 to nnodes-1 (0: the node of the rendezvous).")]
RdzvEndpoint = Annotated[Optional[str], typer.Option(help="host:port of the rendezvous.")]


def option(field: CliField, *, panel: str | None, show_default: bool) -> inspect.Parameter:
    """One typer option, None when not given: the model applies its own default (the planner
    chooses, for a scenario; `show_default` names the model's default in the help)."""
    decls = [f"{field.flag}/--no-{field.flag[2:]}"] if field.kind is bool else [field.flag]
    text = field.help_with_default() if show_default else field.help
    info = typer.Option(*decls, help=text or None, rich_help_panel=panel, show_default=False)
    return inspect.Parameter(field.name, inspect.Parameter.KEYWORD_ONLY, default=None,
                             annotation=Annotated[Optional[field.kind], info])


def model_options(fields: Sequence[CliField], *, into: str, panel: str | None = None,
                  show_default: bool = False) -> Callable[[Callable], Callable]:
    """Decorate a typer command: its `into` parameter (a dict) is replaced by one option per
    field; the command gets {field name: value} of the options given (None: left out)."""

    def decorate(fn: Callable) -> Callable:
        sig = inspect.signature(fn, eval_str=True)
        own = [p for p in sig.parameters.values() if p.name != into]
        generated = [option(f, panel=panel, show_default=show_default) for f in fields]
        clash = {p.name for p in own} & {p.name for p in generated}
        assert not clash, f"{fn.__name__}: options declared twice: {clash}"
        names = [f.name for f in fields]

        @functools.wraps(fn)
        def command(*args: Any, **kwargs: Any) -> Any:
            values = {name: kwargs.pop(name) for name in names}
            return fn(*args, **kwargs, **{into: values})

        positional = [p for p in own if p.kind is not inspect.Parameter.KEYWORD_ONLY and p.default is p.empty]
        rest = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own if p not in positional]
        params = positional + generated + rest
        command.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
        command.__annotations__ = {p.name: p.annotation for p in params}
        del command.__wrapped__  # typer reads this signature, not fn's
        return command

    return decorate
