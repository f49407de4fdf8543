"""`plan.toml`: the scenario `plan estimate --save` writes and `plan tune` reads from the
current folder (the knobs that were pinned; blanks stay "the planner chooses")."""

from __future__ import annotations

import tomllib
from pathlib import Path

from planner.errors import PlanError
from planner.scenario import Scenario

DEFAULT = Path("plan.toml")
TABLE = "scenario"


def save_scenario(scenario: Scenario, path: Path) -> Path:
    from trainer.probe import to_toml  # the catalog's flat TOML writer (imports no torch)

    if path.suffix != ".toml":
        raise PlanError("save", f"{path}: the scenario is TOML; give a .toml file (plan.toml: `plan tune` in its "
                        "folder reads it)")

    fields = scenario.model_dump(mode="json", exclude_none=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"# written by `plan estimate --save`; `plan tune --budget 2h` in this folder tunes it\n"
                    f"[{TABLE}]\n" + to_toml(fields))
    return path


def load_scenario(path: Path) -> Scenario:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise PlanError("scenario", f"cannot read {path}: {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise PlanError("scenario", f"{path} is not UTF-8 text (byte {e.start})") from None
    except tomllib.TOMLDecodeError as e:
        raise PlanError("scenario", f"{path} is not valid TOML: {e}") from None
    if TABLE not in data:
        raise PlanError("scenario", f"{path} has no [{TABLE}] table (write one with `plan estimate ... --save {path}`)")
    try:
        return Scenario.model_validate(data[TABLE])
    except ValueError as e:
        err = e.errors()[0] if hasattr(e, "errors") else {"loc": ("?",), "msg": str(e)}
        raise PlanError(".".join(str(x) for x in err["loc"]), f"{path}: {err['msg']}") from None


def tune_hint(path: Path) -> str:
    """How `plan tune` reads the saved scenario: from its folder when it is plan.toml, else by --scenario."""
    if path.name == DEFAULT.name:
        return f"run `plan tune --budget 2h` in {path.parent.resolve()} to tune it"
    return f"run `plan tune --scenario {path} --budget 2h` to tune it (only plan.toml is read without --scenario)"
