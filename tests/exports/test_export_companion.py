"""Where `plan export` puts a companion file (the ds_config.json a torchrun script points at) and what it does with
one already there: beside --out (in --out's folder), else in the current folder; a companion holding something else
is never replaced without --force (it was, silently: a hand-edited ds_config.json in the folder was lost), one with
the same content is kept, and --out written over an existing file says so."""

from __future__ import annotations

import json
import subprocess

from typer.testing import CliRunner

from plan_cli.main import app

runner = CliRunner()
BASE = ["export", "torchrun", "--model", "7b", "--gpus", "8"]


def test_a_companion_with_other_content_is_refused_without_force(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    first = runner.invoke(app, [*BASE, "--sharding", "zero3"])
    assert first.exit_code == 0, first.output
    ds = tmp_path / "ds_config.json"
    assert json.loads(ds.read_text())["zero_optimization"]["stage"] == 3
    again = runner.invoke(app, [*BASE, "--sharding", "zero3"])
    assert again.exit_code == 0 and "kept ds_config.json (it holds this content already)" in again.output
    mine = '{"zero_optimization": {"stage": 1}, "note": "edited by hand"}\n'
    ds.write_text(mine)
    other = runner.invoke(app, [*BASE, "--sharding", "zero2"])
    assert other.exit_code == 2, other.output
    assert "error: companion: ds_config.json exists with other content" in other.output
    assert "--force" in other.output and ds.read_text() == mine  # nothing written
    forced = runner.invoke(app, [*BASE, "--sharding", "zero2", "--force"])
    assert forced.exit_code == 0 and "wrote ds_config.json (replaced the file that was there)" in forced.output
    assert json.loads(ds.read_text())["zero_optimization"]["stage"] == 2


def test_companions_go_beside_out_and_out_replaced_says_so(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ds_config.json").write_text("{}\n")  # the current folder's own file: not touched with --out
    out = tmp_path / "runs" / "a" / "train.sh"
    res = runner.invoke(app, [*BASE, "--sharding", "zero3", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert (out.parent / "ds_config.json").is_file() and (tmp_path / "ds_config.json").read_text() == "{}\n"
    # the script points at its companion beside itself, wherever it is launched from
    script = out.read_text()
    assert '--deepspeed-config "$SCRIPT_DIR"/ds_config.json' in script
    run = subprocess.run(["bash", "-c", script.replace("\ntorchrun ", "\necho torchrun ")], capture_output=True,
                         text=True, cwd=tmp_path)
    assert run.returncode == 0 and f"--deepspeed-config {tmp_path.resolve()}/ds_config.json" in run.stdout  # (piped: cwd)
    copy = out.parent / "echo.sh"
    copy.write_text(script.replace("\ntorchrun ", "\necho torchrun "))
    run = subprocess.run(["bash", str(copy)], capture_output=True, text=True, cwd="/")
    assert run.returncode == 0 and f"--deepspeed-config {out.parent.resolve() / 'ds_config.json'}" in run.stdout
    again = runner.invoke(app, [*BASE, "--sharding", "zero2", "--out", str(out), "--force", "--json"])
    assert again.exit_code == 0, again.output
    body = json.loads(again.output[again.output.index("{"):])
    assert body["replaced"] == [str(out), str(out.parent / "ds_config.json")], body
