"""Where a command will write a file, checked before the work starts (a study's CSV, a fitted profile, a
result JSON): a folder, a path through a file, or a place this user cannot write is one error line naming
the option, not a traceback after the run (or the study's whole budget) is spent."""

from __future__ import annotations

import os
from pathlib import Path

from planner.errors import PlanError


def check_out_file(path: str | Path, field: str) -> None:
    """A PlanError naming `field` unless `path` can be written as a file (its missing folders are made)."""
    p = Path(path)
    if str(path).strip() == "":
        raise PlanError(field, "give a file path")
    if p.is_dir():
        raise PlanError(field, f"{p} is a folder; give a file path")
    try:  # its folders made now: what cannot be made (a file on the way, /proc, no permission) is said now
        p.parent.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise PlanError(field, f"cannot write {p}: a file on the way to {p.parent}") from None
    except OSError as e:
        raise PlanError(field, f"cannot write {p}: {e.strerror or e}") from None
    if not os.access(p.parent, os.W_OK | os.X_OK):
        raise PlanError(field, f"cannot write {p}: {p.parent} is not writable")

def check_out_folder(path: str | Path, field: str) -> None:
    """A PlanError naming `field` unless `path` is, or can be made, a folder this user writes in."""
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise PlanError(field, f"{p} is a file, not a folder")
    check_out_file(p / "x", field)
