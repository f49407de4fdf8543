"""`plan catalog list --kind stacks` and `plan catalog show STACK`: the built-in stack profiles with their
cross-validated errors, and a user's own profile written by `plan calibrate` into a --catalog folder, which
shadows the built-in one of the same id."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hardware.catalog import ENV_VAR, builtin_dir
from hardware.stacks import StackProfile
from plan_cli.catalog_stacks import SECTIONS, sections
from plan_cli.main import app

runner = CliRunner()
REPO = Path(__file__).resolve().parents[2]
WIDE = {"COLUMNS": "300"}
# four llm-foundry H100 rows (FSDP, one source) from the published set
ROW_IDS = ("llmfoundry_019", "llmfoundry_020", "llmfoundry_021", "llmfoundry_022")


@pytest.fixture(autouse=True)
def _no_env_catalog(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_VAR, raising=False)


def builtin(stack_id: str) -> dict:
    return tomllib.loads((builtin_dir() / "stacks" / f"{stack_id}.toml").read_text())


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A catalog folder holding stacks/fsdp.toml as `plan calibrate` writes it from four published rows."""
    tmp = tmp_path_factory.mktemp("calibrated")
    lines = (REPO / "validation" / "data" / "published_dev.csv").read_text().splitlines()
    runs = tmp / "runs.csv"
    runs.write_text("\n".join([lines[0], *(ln for ln in lines if ln.split(",")[0] in ROW_IDS)]) + "\n")
    out = tmp / "cat" / "stacks" / "fsdp.toml"
    r = runner.invoke(app, ["calibrate", str(runs), "--stack", "fsdp", "--out", str(out)], env=WIDE)
    assert r.exit_code == 0, r.output
    return tmp / "cat"


def test_list_shows_the_builtin_stacks_with_their_errors() -> None:
    r = runner.invoke(app, ["catalog", "list", "--kind", "stacks", "--json"])
    assert r.exit_code == 0, r.output
    rows = {s["id"]: s for s in json.loads(r.stdout)["stacks"]}
    assert {"megatron", "megatron_deepspeed", "hf", "fsdp", "torchtitan", "bundled", "generic"} <= set(rows)
    for stack_id, row in rows.items():
        toml = builtin(stack_id)
        assert row["cv_mape_pct"] == toml.get("cv_mape_pct") and row["fit_sources"] == len(toml["fit_sources"])
        assert row["builtin"] and row["shadows"] is None and row["catalog_dir"] is None
    table = runner.invoke(app, ["catalog", "list", "--kind", "stacks"], env=WIDE).stdout
    line = next(ln for ln in table.splitlines() if " megatron_deepspeed " in ln)
    assert f"+-{builtin('megatron_deepspeed')['cv_mape_pct']:g}%" in line and "built-in" in line
    assert "GPUs" not in table and "Models" not in table


def test_show_prints_the_profile_by_section_with_its_fit() -> None:
    r = runner.invoke(app, ["catalog", "show", "megatron"], env=WIDE)
    assert r.exit_code == 0, r.output
    out = r.stdout
    toml = builtin("megatron")
    positions = [out.index(title) for title, _ in SECTIONS]
    assert positions == sorted(positions)  # the TOML's order
    line = next(ln for ln in out.splitlines() if " comm_time_factor " in ln)
    assert f"{toml['comm_time_factor']:.10g} (fitted)" in line
    assert toml["fit_sources"][0] in out and "bounded ridge" in out and "cv_by_source" in out
    assert "megatron.toml" in out and "built-in" in out
    shown = json.loads(runner.invoke(app, ["catalog", "show", "megatron", "--json"]).stdout)
    assert shown["kind"] == "stack" and shown["builtin"] and shown["path"].endswith("megatron.toml")
    assert StackProfile.model_validate(shown["entry"]) == StackProfile(id="megatron", **toml)


def test_sections_hold_every_field_once() -> None:
    profile = StackProfile(id="x", name="x")
    names = [n for _, fields in sections(profile) for n, _ in fields]
    assert len(names) == len(set(names))
    assert set(names) == set(StackProfile.model_fields) - {"id", "name", "description", "cv_by_source"}


def test_calibrated_profile_is_listed_and_shown_shadowing_the_builtin(calibrated: Path) -> None:
    mine = tomllib.loads((calibrated / "stacks" / "fsdp.toml").read_text())
    assert mine["cv_mape_pct"] != builtin("fsdp")["cv_mape_pct"]
    r = runner.invoke(app, ["catalog", "list", "--kind", "stacks", "--json", "--catalog", str(calibrated)])
    rows = {s["id"]: s for s in json.loads(r.stdout)["stacks"]}
    assert rows["fsdp"]["cv_mape_pct"] == mine["cv_mape_pct"] and rows["fsdp"]["fit_sources"] == 1
    assert not rows["fsdp"]["builtin"] and rows["fsdp"]["catalog_dir"] == str(calibrated.resolve())
    assert rows["fsdp"]["shadows"].endswith("catalog/stacks/fsdp.toml") and rows["megatron"]["builtin"]
    table = runner.invoke(app, ["catalog", "list", "--kind", "stacks", "--catalog", str(calibrated)], env=WIDE).stdout
    line = next(ln for ln in table.splitlines() if " fsdp " in ln)
    assert "shadows the built-in" in line and f"+-{mine['cv_mape_pct']:g}%" in line
    r = runner.invoke(app, ["catalog", "show", "fsdp", "--catalog", str(calibrated)], env=WIDE)
    assert r.exit_code == 0, r.output
    assert "shadows the built-in" in r.stdout and str(calibrated / "stacks" / "fsdp.toml") in r.stdout
    line = next(ln for ln in r.stdout.splitlines() if " gemm_time_factor " in ln)
    assert f"{mine['gemm_time_factor']:.10g} (fitted)" in line
    shown = json.loads(runner.invoke(app, ["catalog", "show", "fsdp", "--json"], env={ENV_VAR: str(calibrated)}).stdout)
    assert shown["entry"]["gemm_time_factor"] == mine["gemm_time_factor"] and shown["shadows"]


def test_unknown_id_is_one_line_exit_2_naming_the_kinds() -> None:
    r = runner.invoke(app, ["catalog", "show", "fsdpx"])
    assert r.exit_code == 2
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: id: unknown id 'fsdpx'")
    assert "did you mean fsdp" in lines[0] and "--kind gpus|clusters|models|stacks" in lines[0]
    r = runner.invoke(app, ["catalog", "list", "--kind", "stack"])
    assert r.exit_code == 2 and "allowed: gpus, clusters, models, stacks" in r.output
