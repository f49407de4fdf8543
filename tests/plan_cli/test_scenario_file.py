"""`plan estimate --save FILE`: TOML only (a .json name got TOML inside), and the line after it says how
`plan tune` reads the file: from its folder for plan.toml, with --scenario FILE for any other name (it said
"run `plan tune --budget 2h` in DIR" for every name, and tune reads only plan.toml there)."""

from typer.testing import CliRunner

from plan_cli.main import app
from plan_cli.scenario_file import load_scenario

runner = CliRunner()


def _save(path) -> str:
    r = runner.invoke(app, ["estimate", "--model", "tiny", "--gpus", "2", "--top", "1", "--save", str(path)],
                      env={"COLUMNS": "300"})
    return r


def test_plan_toml_and_another_name_say_how_tune_reads_them(tmp_path):
    r = _save(tmp_path / "plan.toml")
    assert r.exit_code == 0, r.output
    assert f"run `plan tune --budget 2h` in {tmp_path.resolve()} to tune it" in r.output
    r = _save(tmp_path / "tiny.toml")
    assert r.exit_code == 0, r.output
    assert f"`plan tune --scenario {tmp_path / 'tiny.toml'} --budget 2h`" in r.output
    assert load_scenario(tmp_path / "tiny.toml").model == "tiny"


def test_a_non_toml_name_is_refused_before_anything_is_written(tmp_path):
    r = _save(tmp_path / "plan.json")
    assert r.exit_code == 2 and "save: " in r.output and "give a .toml file" in r.output
    assert not (tmp_path / "plan.json").exists()
