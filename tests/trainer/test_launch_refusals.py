"""`plan train` and `plan allreduce-bench` inputs validation/opts_fuzz.py found getting past the checks to a
rank start (or a traceback): each is now refused before any process starts, one line naming the option."""

from __future__ import annotations

import time

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from plan_cli.main import app
from planner.errors import PlanError
from trainer.collectives import MAX_SIZE, parse_size
from trainer.config import TrainConfig, check_launch, validate_config

runner = CliRunner()


def error_line(args: list[str]) -> str:
    t0 = time.perf_counter()
    res = runner.invoke(app, args, env={"COLUMNS": "400"})
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    lines = res.stderr.strip().splitlines()
    assert res.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error: "), (res.exit_code, res.stderr)
    assert time.perf_counter() - t0 < 10, "refused before any rank starts"
    return lines[0]


@pytest.mark.parametrize("text", ["nan", "inf", "1e400", "1e30G", "0.1", "2048G"])
def test_sizes_outside_one_byte_to_a_tebibyte(text):
    """nan was a ValueError and inf an OverflowError traceback; 1e30G reached the ranks' allocation."""
    with pytest.raises(PlanError) as e:
        parse_size(text)
    assert e.value.field == "sizes"


def test_sizes_at_the_edges_are_taken():
    assert parse_size("1") == 1 and parse_size("1024G") == MAX_SIZE


@pytest.mark.parametrize("nnodes, node_rank, endpoint, field", [
    (1, 1, None, "node_rank"),  # node 1 of 1
    (2, 5, "host:29500", "node_rank"),
    (1, 0, "nohost.invalid", "rdzv_endpoint"),  # no address for the host
    (1, 0, "host:abc", "rdzv_endpoint"),
    (1, 0, "host:99999", "rdzv_endpoint"),
    (1, 0, "", "rdzv_endpoint"),
    (2, 0, None, "rdzv_endpoint"),  # several nodes with no place to meet: each waited alone
])
def test_launch_settings_refused(nnodes, node_rank, endpoint, field, monkeypatch):
    for var in ("RANK", "WORLD_SIZE", "SLURM_NTASKS", "SLURM_PROCID"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(PlanError) as e:
        check_launch(nnodes, node_rank, endpoint)
    assert e.value.field == field


def test_launch_settings_taken():
    check_launch(2, 1, "localhost:29500")  # a host that resolves here (node001 does not: refused)
    check_launch(1, 0, "[::1]:29500")


@pytest.mark.parametrize("knobs, field", [
    (dict(seed=-1), "seed"), (dict(seed=2**64), "seed"),  # Optuna's / numpy's seed range
    (dict(lr=float("inf")), "lr"),
    (dict(steps=10**20), "steps"),
    (dict(nproc=100_000), "nproc"),
    (dict(seq_len=10**9), "seq_len"),  # the trainer built a billion positions
])
def test_train_config_bounds(knobs, field):
    with pytest.raises(ValidationError) as e:
        TrainConfig(**knobs)
    assert field in str(e.value.errors()[0]["loc"])


@pytest.mark.parametrize("knobs, field", [
    (dict(data="no-such-file.txt"), "data"),
    (dict(zeropp_hpz_partition_size=2, nproc=2), "zeropp_hpz_partition_size"),  # needs ZeRO-3: silently unused
    (dict(zeropp_qwz=True), "zeropp_qwz"),
])
def test_train_config_refused_before_launch(knobs, field, tmp_path):
    with pytest.raises(PlanError) as e:
        validate_config(TrainConfig(**knobs))
    assert e.value.field == field


@pytest.mark.parametrize("args, field", [
    (["--json", "{folder}"], "json"),  # an IsADirectoryError traceback
    (["--json", "{file}/result.json"], "json"),  # a FileExistsError traceback
    (["--seed", "-1"], "seed"),
    (["--node-rank", "1"], "node_rank"),
])
def test_train_cli(args, field, tmp_path):
    (tmp_path / "folder").mkdir()
    (tmp_path / "file").write_text("x\n")
    args = [a.format(folder=tmp_path / "folder", file=tmp_path / "file") for a in args]
    line = error_line(["train", "--model", "tiny", "--steps", "3", *args])
    assert line.startswith(f"error: {field}"), line


@pytest.mark.parametrize("args, field", [
    (["--ops", ""], "ops"),  # no op: a benchmark of nothing
    (["--sizes", "nan"], "sizes"),
    (["--node-rank", "3"], "node_rank"),
    (["--rdzv-endpoint", "host:abc"], "rdzv_endpoint"),
    (["--nnodes", "2"], "rdzv_endpoint"),
    (["--json", "{folder}"], "json"),  # written only after the benchmark: an IsADirectoryError then
])
def test_allreduce_bench_cli(args, field, tmp_path, monkeypatch):
    for var in ("RANK", "WORLD_SIZE", "SLURM_NTASKS", "SLURM_PROCID"):
        monkeypatch.delenv(var, raising=False)
    (tmp_path / "folder").mkdir()
    line = error_line(["allreduce-bench", "--nproc", "2", *[a.format(folder=tmp_path / "folder") for a in args]])
    assert line.startswith(f"error: {field}"), line


def test_allreduce_bench_nproc_bound():
    res = runner.invoke(app, ["allreduce-bench", "--nproc", "100000"])
    assert res.exit_code == 2 and "--nproc" in res.output
