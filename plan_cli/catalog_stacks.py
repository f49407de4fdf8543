"""Stack profiles in `plan catalog list|show`: catalog/stacks/<id>.toml, the built-in ones and a user's own
(`plan calibrate RUNS.csv --stack ID --out DIR/stacks/ID.toml`, then `--catalog DIR`), which shadows the
built-in profile of the same id."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel
from rich.table import Table

from hardware.stacks import StackProfile

# The profile's fields in the order of its TOML (hardware/stacks.py writes them in model order), cut into
# the sections hardware/stacks.py's StackProfile marks: (title, first field of the section).
SECTIONS = (
    ("what it can run", "shardings"),
    ("time multipliers", "gemm_time_factor"),
    ("overlap (fractions)", "overlap_ddp"),
    ("fused kernels, fp8", "compile_elementwise_factor"),
    ("memory (allocator)", "allocator_transient_factor"),
    ("how it was fitted", "fit_method"),
)
HEADER_FIELDS = ("id", "name", "description")
TABLE_FIELDS = ("cv_by_source",)  # written as [[cv_by_source]] tables after the keys


class StackOrigin(BaseModel):
    """Where a profile comes from: the built-in catalog or a --catalog / PLAN_CATALOG folder."""

    id: str
    path: str
    builtin: bool
    catalog_dir: str | None = None  # the user folder holding it (None: built-in)
    shadows: str | None = None  # the built-in file this user profile replaces


class StackRow(StackOrigin):
    """One line of `plan catalog list --kind stacks`."""

    name: str
    cv_mape_pct: float | None  # the +-N% printed with every speed
    fit_sources: int
    fit_method: str


class StackShown(StackOrigin):
    """`plan catalog show STACK --json`: the profile and where it came from."""

    kind: Literal["stack"] = "stack"
    entry: StackProfile


def origin(stack_id: str, path: str) -> StackOrigin:
    from hardware.catalog import builtin_dir

    builtin = builtin_dir() / "stacks" / f"{stack_id}.toml"
    if Path(path).resolve() == builtin.resolve():
        return StackOrigin(id=stack_id, path=path, builtin=True)
    return StackOrigin(id=stack_id, path=path, builtin=False, catalog_dir=str(Path(path).parent.parent),
                       shadows=str(builtin) if builtin.is_file() else None)


def rows(stacks: dict[str, StackProfile], paths: dict[str, str]) -> list[StackRow]:
    return [StackRow(**origin(i, paths[f"stacks/{i}"]).model_dump(), name=p.name, cv_mape_pct=p.cv_mape_pct,
                     fit_sources=len(p.fit_sources), fit_method=p.fit_method) for i, p in sorted(stacks.items())]


def shown(stack_id: str, profile: StackProfile, path: str) -> StackShown:
    return StackShown(**origin(stack_id, path).model_dump(), entry=profile)


def from_text(o: StackOrigin) -> str:
    if o.builtin:
        return "built-in"
    return f"{o.catalog_dir}" + (" (shadows the built-in)" if o.shadows else "")


def list_table(stack_rows: list[dict]) -> Table:
    t = Table(title="Stacks")
    for col in ("id", "name", "CV error", "fit sources", "from"):
        t.add_column(col, justify="right" if col in ("CV error", "fit sources") else "left")
    for r in map(StackRow.model_validate, stack_rows):
        cv = "-" if r.cv_mape_pct is None else f"+-{r.cv_mape_pct:g}%"
        t.add_row(r.id, r.name, cv, str(r.fit_sources), from_text(r))
    t.caption = "CV error: the +-N% printed with every speed (cross-validated MAPE of tokens/s; show ID: how)"
    return t


def sections(profile: StackProfile) -> list[tuple[str, list[tuple[str, object]]]]:
    """The profile's fields by TOML section, in file order (every field but the header and tables once)."""
    starts = dict((first, title) for title, first in SECTIONS)
    out: list[tuple[str, list[tuple[str, object]]]] = []
    for name in StackProfile.model_fields:
        if name in HEADER_FIELDS or name in TABLE_FIELDS:
            continue
        if name in starts:
            out.append((starts[name], []))
        out[-1][1].append((name, getattr(profile, name)))
    return out


def value_text(value: object) -> str:
    """A field's value as its TOML writes it, without the quotes."""
    if value is None or value == "":
        return "-"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return format(value, ".10g")
    if isinstance(value, list):
        return ", ".join(map(value_text, value)) or "-"
    return str(value)


def show_tables(s: StackShown) -> list[Table]:
    from planner.profile_fit import PARAMS

    p = s.entry
    prior = StackProfile.model_fields["fit_method"].default
    fitted = {f[0] for f in PARAMS} if p.fit_method != prior else set()  # bundled, generic: the pooled fit
    head = Table(title=f"stack {s.id}: {p.name}", show_header=False)
    head.add_column("field", style="bold")
    head.add_column("value")
    head.add_row("description", p.description or "-")
    head.add_row("file", s.path)
    head.add_row("from", from_text(s) + (f"; built-in: {s.shadows}" if s.shadows else ""))
    tables = [head]
    for title, fields in sections(p):
        t = Table(title=title, show_header=False)
        t.add_column("field", style="bold")
        t.add_column("value")
        for name, value in fields:
            t.add_row(name, value_text(value) + (" (fitted)" if name in fitted else ""))
        tables.append(t)
    if p.cv_by_source:
        t = Table(title="cv_by_source: leave-one-source-out error per source")
        for col in ("source", "rows", "MAPE %", "bias %"):
            t.add_column(col, justify="left" if col == "source" else "right")
        for e in p.cv_by_source:
            t.add_row(e.source, str(e.rows), f"{e.mape_pct:g}", f"{e.bias_pct:+g}")
        tables.append(t)
    return tables
