"""`plan train --deepspeed-config F` runs F as written, its knobs read back from it: `--sharding zero3` beside a
stage-0 file ran stage 0 without a word. A knob flag the file contradicts is refused in one line naming both."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from plan_cli.main import app
from plan_cli.train import _check_file_knobs

runner = CliRunner()


def _exported(tmp_path, fmt="deepspeed", sharding="zero1", *extra):
    path = tmp_path / f"{fmt}.json"
    r = runner.invoke(app, ["export", fmt, "--model", "tiny", "--gpus", "2", "--gpus-per-node", "2", "--target", "cpu",
                            "--global-batch", "64", "--sharding", sharding, *extra, "--out", str(path)])
    assert r.exit_code == 0, r.output
    return path


@pytest.mark.parametrize("fmt,in_file,flag", [("deepspeed", "zero1", "zero3"),
                                              ("fsdp", "fsdp_full_shard", "fsdp_shard_grad_op")])
def test_a_knob_the_file_contradicts_is_one_line(tmp_path, fmt, in_file, flag):
    path = _exported(tmp_path, fmt, in_file, "--precision", "bf16")
    r = runner.invoke(app, ["train", "--model", "tiny", "--nproc", "2", "--steps", "3", f"--{fmt}-config", str(path),
                            "--sharding", flag], env={"COLUMNS": "400"})
    lines = r.stderr.strip().splitlines()
    assert r.exit_code == 2 and len(lines) == 1, r.output
    assert lines[0].startswith(f"error: sharding: --sharding {flag} (the file: {in_file}): --{fmt}-config"), lines[0]
    assert f"plan export {fmt}" in lines[0]


def test_agreeing_or_absent_flags_pass(tmp_path):
    path = str(_exported(tmp_path))
    assert json.loads(Path(path).read_text())["zero_optimization"]["stage"] == 1
    _check_file_knobs({"deepspeed_config": path, "sharding": "zero1", "offload": "none"})
    _check_file_knobs({"deepspeed_config": path})
    _check_file_knobs({"deepspeed_config": None, "sharding": "zero3"})
    fsdp = str(_exported(tmp_path, "fsdp", "fsdp_full_shard", "--precision", "bf16"))
    _check_file_knobs({"fsdp_config": fsdp, "sharding": "fsdp_full_shard", "precision": "bf16"})
