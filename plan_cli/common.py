"""Shared pieces of the CLI face: error boundary, JSON output, consoles."""

from __future__ import annotations

import functools
import json
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import typer
from pydantic import BaseModel, ValidationError
from rich.console import Console
from rich.markup import escape

from hardware.errors import CatalogError
from planner.errors import NothingFits, PlanError

class _Environ(Mapping):
    """os.environ as rich reads it, live at every print, so a COLUMNS set after import (CliRunner's env, an
    xdist worker's) is the width: rich fixes the width at construction when COLUMNS is set then, hence no
    COLUMNS until the consoles exist. Piped output (CI logs, files) without COLUMNS gets 200 columns, not 80."""

    live = False

    def __getitem__(self, key: str) -> str:
        if key in ("COLUMNS", "LINES") and not self.live:
            raise KeyError(key)
        if key == "COLUMNS" and not os.environ.get(key) and not sys.stdout.isatty():
            return "200"
        return os.environ[key]

    def __iter__(self):
        return iter(os.environ)

    def __len__(self) -> int:
        return len(os.environ)


_ENVIRON = _Environ()
console = Console(_environ=_ENVIRON, emoji=False)  # user text such as "host:x:" is never an emoji
err_console = Console(stderr=True, _environ=_ENVIRON, emoji=False)
_ENVIRON.live = True

F = TypeVar("F", bound=Callable[..., Any])

# Exit codes: 2 = bad input (one line naming the field); 3 = valid input, but no plan fits.
NOTHING_FITS_EXIT = 3


def handle_errors(fn: F) -> F:
    """The error boundary: a user error becomes one line on stderr and exit code 2 (3: valid input
    that no plan fits)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except NothingFits as e:
            fail(str(e), NOTHING_FITS_EXIT)
        except (PlanError, CatalogError) as e:
            fail(str(e))
        except ValidationError as e:
            first = e.errors()[0]
            field = ".".join(str(p) for p in first.get("loc", ())) or "input"
            fail(literal_line(field, first) or f"{field}: {first['msg']}")
        except FileNotFoundError as e:
            fail(f"{e.filename}: file not found")
        except ModuleNotFoundError as e:  # an optional part missing after the planner-only set-up
            fail(f"{e.name or e}: not installed; this needs the full environment (scripts/setup.sh --full)")

    return wrapper  # type: ignore[return-value]


def literal_line(field: str, error: dict) -> str | None:
    """A closed choice mistyped (--sharding ZeRO-3, --stack megatronn) in the words of every other closed choice,
    "unknown value ...; did you mean zero3?" (pydantic said only "Input should be 'none', 'zero1', ...")."""
    import re

    from hardware.errors import closest
    from planner.errors import unknown

    if error.get("type") != "literal_error" or not isinstance(error.get("input"), str):
        return None
    allowed = re.findall(r"'([^']*)'", str((error.get("ctx") or {}).get("expected", "")))
    value = error["input"]
    line = str(unknown(field, value, allowed))
    squeezed = re.sub(r"[\s_-]", "", value.lower())  # 'ZeRO-3' -> zero3, 'bf-16' -> bf16
    if "did you mean" not in line and (near := closest(squeezed, allowed)):
        line = line.replace(f"{value!r} (allowed", f"{value!r}; did you mean {', '.join(near)}? (allowed", 1)
    return line if allowed else None


def fail(message: str, code: int = 2) -> None:
    """Print one error line (no markup interpretation of the message) and exit."""
    err_console.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def to_jsonable(obj: Any) -> Any:
    if isinstance(obj, BaseModel):
        return obj.model_dump(mode="json")
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(o) for o in obj]
    if isinstance(obj, dict):
        return {k: to_jsonable(v) for k, v in obj.items()}
    return obj


def print_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(to_jsonable(obj), indent=2, default=str) + "\n")


def writable_file(path: Path, option: str, example: str = "out.json") -> None:
    """The file's folder exists (made here if need be) and the path is not a folder: a one-line error naming
    the option otherwise (a folder gets an example file name; the rest: planner/out_path.check_out_file)."""
    from planner.out_path import check_out_file

    if path.is_dir():
        raise PlanError(option, f"{path}: is a folder; give a file name, e.g. {path / example}")
    check_out_file(path, option)
    path.parent.mkdir(parents=True, exist_ok=True)  # kept: the command writes here once it has measured
