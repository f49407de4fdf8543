"""`plan estimate --scenarios FILE --out FILE`: many scenarios in one process (CSV or JSONL).

Empty cells mean "the planner chooses". A row that cannot be evaluated gets an `error` cell and
the batch goes on. Extra `id`/`name` columns are passed through.
"""

from __future__ import annotations

import csv
import difflib
import json
from pathlib import Path

from pydantic import ValidationError

from hardware.errors import CatalogError
from plan_cli.common import literal_line
from planner import api, run_csv
from planner.errors import PlanError
from planner.scenario import Scenario

PASSTHROUGH = ("id", "name")


def read_rows(path: Path) -> list[dict]:
    suffix = path.suffix.lower()
    try:
        text = path.read_text(encoding="utf-8-sig")
    except OSError as e:
        raise PlanError("scenarios", f"cannot read {path}: {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise PlanError("scenarios", f"{path} is not UTF-8 text (byte {e.start}); save it as CSV UTF-8") from None
    if suffix == ".csv":  # read as the runs files are: Excel's BOM, ';' or tab separators, blanks around cells
        _check_header(path, run_csv.header(text))
        rows = run_csv.read_table(text, keep_empty_rows=True)  # a row of blanks: every knob chosen
    elif suffix in (".jsonl", ".ndjson"):
        rows = []
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as e:
                    row = {"__error__": f"line {n}: invalid JSON ({e.msg})"}
                if not isinstance(row, dict):
                    row = {"__error__": f"line {n}: a scenario is a JSON object of columns"}
                rows.append(row)
    else:
        raise PlanError("scenarios", f"{path}: use a .csv or .jsonl file")
    if not rows:
        raise PlanError("scenarios", f"{path} has no scenario rows")
    return rows


def _check_header(path: Path, header: list[str] | None) -> None:
    """The first CSV line names the columns; a headerless file would lose its first row and
    read the others under the wrong names."""
    allowed = [*Scenario.model_fields, *PASSTHROUGH]
    names = [h.strip() for h in header or [] if h is not None]
    unknown = [h for h in names if h not in allowed]
    if not names or unknown:
        close = {c for h in unknown for c in difflib.get_close_matches(h, allowed, n=1, cutoff=0.6)}
        hint = f" (did you mean {', '.join(sorted(close))}?)" if close else ""
        got = f"unknown column(s) {', '.join(map(repr, unknown))}{hint}" if unknown else "no columns"
        raise PlanError("scenarios", f"{path}: the first line must be a header of column names "
                        f"({got}; allowed: {', '.join(allowed)})")


def _scenario(row: dict) -> Scenario:
    if "__error__" in row:
        raise PlanError("row", row["__error__"])
    clean = {k.strip(): v for k, v in row.items() if k is not None and k.strip() not in PASSTHROUGH}
    clean = {k: v for k, v in clean.items() if v not in ("", None)}
    return Scenario(**clean)


def _error_text(e: Exception) -> str:
    if isinstance(e, ValidationError):
        first = e.errors()[0]
        field = ".".join(str(p) for p in first.get("loc", ())) or "row"
        return literal_line(field, first) or f"{field}: {first['msg']}"
    return str(e)


def evaluate_rows(rows: list[dict], *, catalog, settings, objective: str, top: int, catalog_dirs=None) -> list[dict]:
    out: list[dict] = []
    for n, row in enumerate(rows, 1):
        keep = {k: row[k] for k in PASSTHROUGH if k in row}
        try:
            report = api.estimate(_scenario(row), catalog=catalog, settings=settings,
                                  objective=objective, top=top, include_rejected=True,
                                  catalog_dirs=catalog_dirs)
        except (PlanError, CatalogError, ValidationError) as e:
            out.append({"scenario": n, **keep, "error": _error_text(e)})
            continue
        if not report.results:
            out.append({"scenario": n, **keep, **api.params_columns(report), "fits": False,
                        "error": "no valid plan: " + "; ".join(report.rejected)})
            continue
        for rank, est in enumerate(report.results[:top], 1):
            out.append({"scenario": n, **keep, "rank": rank, **api.estimate_row(est, report),
                        "evaluated": report.evaluated, "fitting": report.fitting, "error": ""})
    return out


def write_rows(rows: list[dict], path: Path) -> None:
    if path.suffix.lower() == ".csv":
        keys = list(dict.fromkeys(k for r in rows for k in r))
        with path.open("w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=keys)
            w.writeheader()
            w.writerows(rows)
    elif path.suffix.lower() in (".jsonl", ".ndjson"):
        with path.open("w") as f:
            for r in rows:
                f.write(json.dumps(r, default=str) + "\n")
    else:
        raise PlanError("out", f"{path}: use a .csv or .jsonl file")


def run_scenarios(src: Path, dst: Path, *, catalog, settings, objective: str, top: int = 1,
                  catalog_dirs=None) -> tuple[int, int]:
    if dst.suffix.lower() not in (".csv", ".jsonl", ".ndjson"):
        raise PlanError("out", f"{dst}: use a .csv or .jsonl file")
    rows = evaluate_rows(read_rows(src), catalog=catalog, settings=settings, objective=objective,
                         top=top, catalog_dirs=catalog_dirs)
    write_rows(rows, dst)
    return len(rows), sum(1 for r in rows if r.get("error"))
