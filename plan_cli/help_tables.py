"""`plan COMMAND --help` in an 80-column terminal: typer's option table cut long option names and allowed
values with '…' ('--activation-checkp…', '(ring|ulysses|allga…': 51 cells of `plan estimate --help`, 29 of
`plan train --help`); its cells now fold onto the next line instead, so nothing of the help is lost.
typer has no setting for it: its options table and each option's help text are made to fold here."""

from __future__ import annotations

import functools

from rich.table import Table
from rich.text import Text


# typer's options row: [required,] --long, -short, --no-long, -no-short, <type>, help (typer 0.12-0.29)
_ROW_CELLS = (6, 7)


def _with_negatives(cells: tuple) -> tuple:
    """One cell for an option's names: a boolean's '--no-...' form under its '--...' form, short names after.
    typer gave the negative forms a column of their own, as wide as the longest '--no-...' of the table
    (30 characters for `plan estimate`), which left the help text a quarter of an 80-column terminal."""
    if len(cells) not in _ROW_CELLS or not all(isinstance(c, Text) for c in cells[-6:-1]):
        return cells
    head, (long, short, neg_long, neg_short, kind, text) = cells[:-6], cells[-6:]
    names = Text()
    for part in (long, short, neg_long, neg_short):
        if part.plain:
            if names.plain:
                names.append("\n")
            names.append_text(part)
    return (*head, names, kind, text)


class FoldingTable(Table):
    """A rich Table whose implicit columns (typer's options table adds none explicitly) fold what does not fit."""

    def add_row(self, *renderables, **kwargs) -> None:
        renderables = _with_negatives(renderables)
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
