"""Where a command will write a file, checked before the work starts (a study's CSV, a fitted profile, a
result JSON): a folder, a path through a file, or a place this user cannot write is one error line naming
the option, not a traceback after the run (or the study's whole budget) is spent."""

from __future__ import annotations

import os
from pathlib import Path

from planner.errors import PlanError


def check_out_file(path: str | Path, field: str) -> None:
    """A PlanError naming `field` unless `path` can be written as a file. Its missing folders are made to
    find out (what cannot be made, a file on the way, /proc, no permission, is said now; as root `os.access`
    says yes to everything) and taken away again: a command that fails later leaves nothing behind; the
    writer makes them when it writes."""
    p = Path(path)
    if str(path).strip() == "":
        raise PlanError(field, "give a file path")
    if p.is_dir():
        raise PlanError(field, f"{p} is a folder; give a file path")
    missing = [d for d in (p.parent, *p.parent.parents) if not d.exists()]
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise PlanError(field, f"cannot write {p}: a file on the way to {p.parent}") from None
    except OSError as e:
        raise PlanError(field, f"cannot write {p}: {e.strerror or e}") from None
    finally:
        for d in missing:  # deepest first
            try:
                d.rmdir()
            except OSError:
                pass
    first = next((d for d in (p.parent, *p.parent.parents) if d.exists()), p.parent)
    if not os.access(first, os.W_OK | os.X_OK):
        raise PlanError(field, f"cannot write {p}: {first} is not writable")
    if not missing and not p.exists():  # its folder is there: try the file itself (/proc takes no new file, root or not)
        try:
            p.open("x").close()
        except OSError as e:
            raise PlanError(field, f"cannot write {p}: {e.strerror or e}") from None
        p.unlink(missing_ok=True)


def check_out_folder(path: str | Path, field: str) -> None:
    """A PlanError naming `field` unless `path` is, or can be made, a folder this user writes in."""
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise PlanError(field, f"{p} is a file, not a folder")
    check_out_file(p / "x", field)
