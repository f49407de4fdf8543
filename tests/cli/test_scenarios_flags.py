"""`plan estimate` flags that did nothing without a word: `--out r.csv` without --scenarios wrote no file, and
`--scenarios s.csv --model 13b` (or --gpus, --json) planned the file's rows as if the flag were not there."""

from pathlib import Path

import pytest
from typer.testing import CliRunner

from plan_cli.main import app

runner = CliRunner()


def _one_line(r) -> str:
    lines = r.stderr.strip().splitlines()
    assert r.exit_code == 2 and len(lines) == 1, r.output
    return lines[0]


def test_out_without_scenarios_is_refused(tmp_path: Path):
    out = tmp_path / "r.csv"
    line = _one_line(runner.invoke(app, ["estimate", "--model", "7b", "--gpus", "8", "--out", str(out)]))
    assert line.startswith("error: out: --out is where --scenarios writes its rows") and "--csv or --json" in line
    assert not out.exists()


@pytest.mark.parametrize("flags,named", [(["--model", "13b"], "--model"), (["--gpus", "8"], "--gpus"),
                                         (["--json"], "--json"), (["--explain", "--rank", "2"], "--explain, --rank")])
def test_flags_scenarios_does_not_use_are_refused(tmp_path: Path, flags, named):
    src, out = tmp_path / "s.csv", tmp_path / "r.csv"
    src.write_text("id,model,gpus\na,7b,8\n")
    line = _one_line(runner.invoke(app, ["estimate", "--scenarios", str(src), "--out", str(out), *flags]))
    assert line.startswith(f"error: scenarios: {named}: not used with --scenarios"), line
    assert not out.exists()


def test_flags_scenarios_uses_still_work(tmp_path: Path):
    src, out = tmp_path / "s.csv", tmp_path / "r.csv"
    src.write_text("id,model,gpus\na,7b,8\n")
    r = runner.invoke(app, ["estimate", "--scenarios", str(src), "--out", str(out), "--top", "2",
                            "--objective", "memory-headroom", "--runtime-overhead-gib", "2"])
    assert r.exit_code == 0, r.output
    assert len(out.read_text().splitlines()) == 3  # header + the 2 best
