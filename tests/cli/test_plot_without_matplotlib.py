"""After the planner-only set-up (no matplotlib), `plan estimate ... --plot days.png` printed the whole sweep and
only then "needs matplotlib": the check runs before the search, as the plot's name and place are checked."""

import sys

from typer.testing import CliRunner

from plan_cli.main import app


def test_missing_matplotlib_is_refused_before_the_search(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # what an environment without it imports
    r = CliRunner().invoke(app, ["estimate", "--model", "7b", "--gpus", "8:16", "--tokens", "1B",
                                 "--plot", str(tmp_path / "days.png")], env={"COLUMNS": "200"})
    assert r.exit_code == 2
    assert r.stdout.strip() == "", r.stdout  # no table printed before the refusal
    assert r.stderr.strip().splitlines() == ["error: plot: needs matplotlib (pip install 'plan[plot]')"]
    assert not (tmp_path / "days.png").exists()
