"""Writing the spelling cases of tests/planner/unseen_spellings.py to a runs CSV and checking what the
planner's reader made of each (one line per miss)."""

from __future__ import annotations

import csv
from pathlib import Path

from unseen_spellings import BASE, CASES, GARBAGE, Case, Near, Refused, Same, layout_columns


def case_id(i: int, case: Case) -> str:
    return f"sp{i:03d}_{case.column}"


def write(path: Path, cases: list[Case] = CASES) -> list[tuple[str, Case]]:
    """The CSV of `cases` (one row each, layout columns plus any optional columns a case uses)."""
    cols = layout_columns()
    extra = sorted({k for c in cases for k in c.cells if k not in cols})
    out = []
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=cols + extra)
        w.writeheader()
        for i, case in enumerate(cases):
            rid = case_id(i, case)
            row = case.row(rid)
            w.writerow(row)
            out.append((row["id"], case))
            if isinstance(case.expected, Same):  # the twin row with the plain spelling
                w.writerow({**row, case.column: case.expected.cell, "id": row["id"] + "_ref"})
    return out


def write_garbage(path: Path) -> int:
    """One row per layout column and GARBAGE cell; the number of rows."""
    cols = layout_columns()
    rows = [{**BASE, c: v, "id": f"gb{i:03d}_{j:02d}"} for i, c in enumerate(cols) for j, v in enumerate(GARBAGE)]
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=cols)
        w.writeheader()
        w.writerows(rows)
    return len(rows)


def value(run, attr: str):
    """The Run attribute(s) a case names ('plan.tp,plan.pp' -> a tuple)."""
    def one(path):
        v = run
        for part in path.split("."):
            v = getattr(v, part)
        return v

    parts = attr.split(",")
    return one(parts[0]) if len(parts) == 1 else tuple(one(p) for p in parts)


def check(case: Case, rid: str, runs: dict, missed: dict) -> str | None:
    """None if row `rid` reads as `case` expects, else what went wrong (one line)."""
    exp = case.expected
    if isinstance(exp, Refused):
        if rid not in missed:
            return f"{case.cell!r} was read, expected 'not predicted' on {exp.field}"
        miss = missed[rid]
        if miss.field != exp.field or "\n" in miss.reason or not miss.reason:
            return f"{case.cell!r} refused on {miss.field}: {miss.reason!r}, expected field {exp.field}"
        return None
    if rid not in runs:
        m = missed.get(rid)
        return f"{case.cell!r} not read: {m.field}: {m.reason}" if m else f"{case.cell!r}: row missing"
    run = runs[rid]
    got = value(run, case.attr)
    if isinstance(exp, Same):
        exp = value(runs[rid + "_ref"], case.attr)
        ok = got == exp or (got is not None and exp is not None and abs(got - exp) <= 1e-9 * abs(exp))
    elif isinstance(exp, Near):
        ok = got is not None and abs(got - exp.value) <= exp.rel * abs(exp.value)
    else:
        ok = got == exp
    if not ok:
        return f"{case.cell!r} read as {got!r}, expected {exp!r}"
    if case.note and not any(case.note.lower() in n.lower() for n in run.assumptions):
        return f"{case.cell!r}: no assumption mentions {case.note!r} ({run.assumptions})"
    return None


def report(path: Path) -> tuple[int, list[str]]:
    """(cases read as expected, the failures) for the cases written to `path`."""
    from planner.runs import load_runs

    written = write(path)
    missed_list: list = []
    runs = {r.id: r for r in load_runs(path, None, missed_list)}
    missed = {m.id: m for m in missed_list}
    fails = [f"{rid} [{c.column}] {err}" for rid, c in written if (err := check(c, rid, runs, missed))]
    return len(written) - len(fails), fails
