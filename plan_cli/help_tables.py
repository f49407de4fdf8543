"""`plan COMMAND --help` in an 80-column terminal: typer's option table cut long option names and allowed
values with '…' ('--activation-checkp…', '(ring|ulysses|allga…': 51 cells of `plan estimate --help`, 29 of
`plan train --help`); its cells now fold onto the next line instead, so nothing of the help is lost.
typer has no setting for it: its options table and each option's help text are made to fold here."""

from __future__ import annotations

import functools

from rich.table import Table
from rich.text import Text


class FoldingTable(Table):
    """A rich Table whose implicit columns (typer's options table adds none explicitly) fold what does not fit."""

    def add_row(self, *renderables, **kwargs) -> None:
        while len(self.columns) < len(renderables):
            self.add_column(overflow="fold")
        super().add_row(*renderables, **kwargs)


def _folding(get_help):
    @functools.wraps(get_help)
    def wrapper(*args, **kwargs):
        out = get_help(*args, **kwargs)
        for part in getattr(out, "renderables", ()):  # a rich Columns of Text (help, default, ...)
            if isinstance(part, Text):
                part.overflow = "fold"
        return out

    wrapper.folds = True
    return wrapper


def install() -> None:
    """Make typer's help panels fold (idempotent; a typer without these internals keeps its own)."""
    import typer.rich_utils as rich_utils

    if hasattr(rich_utils, "Table"):
        rich_utils.Table = FoldingTable
    get_help = getattr(rich_utils, "_get_parameter_help", None)
    if get_help is not None and not getattr(get_help, "folds", False):
        rich_utils._get_parameter_help = _folding(get_help)
