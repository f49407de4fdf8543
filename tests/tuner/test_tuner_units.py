"""Pure parts of the tuner: durations, space, calibration fit, result classification, and the
process-group reaping of the trial runner (real processes)."""

from __future__ import annotations

import json
import math
import os
import sys
import time
from pathlib import Path

import pytest

from planner.errors import PlanError
from planner.settings import Calibration
from planner.units import parse_duration_s
from tuner.budget import Budget, trial_duration_s
from tuner.calibrate import Observation, fit_calibration, predicted_step_s
from tuner.runner import classify, kill_group, rank_env, run_command
from tuner.space import build_space, complete, config_key, parse_choices
from tuner.trial import run_backend


@pytest.mark.parametrize("text,seconds", [("2h", 7200), ("90m", 5400), ("1h30m", 5400), ("45s", 45), ("120", 120), ("1.5m", 90)])
def test_parse_duration(text, seconds):
    assert parse_duration_s("budget", text) == seconds


@pytest.mark.parametrize("text", ["", "abc", "2x", "0s", "-3m"])
def test_parse_duration_rejects(text):
    with pytest.raises(PlanError, match="budget"):
        parse_duration_s("budget", text)


def test_budget_refuses_a_trial_that_cannot_finish():
    b = Budget(total_s=10.0)
    assert b.allows(trial_duration_s(2.0, 4, 0, 1.0))  # 6 s
    assert not b.allows(trial_duration_s(2.0, 10, 0, 1.0))  # 12 s


def test_parse_choices_and_errors():
    c = parse_choices(["sharding=zero1,zero2", "micro-batch=1,4"])
    assert c == {"sharding": ("zero1", "zero2"), "micro_batch": (1, 4)}
    with pytest.raises(PlanError, match="sharding"):
        parse_choices(["sharding=zero9"])
    with pytest.raises(PlanError, match="choices"):
        parse_choices(["tpp=1"])
    with pytest.raises(PlanError, match="micro_batch"):
        parse_choices(["micro_batch=0"])


def test_space_size_and_global_batch_derives_grad_accum():
    space = build_space("deepspeed", on_gpu=False, overrides={"micro_batch": (1, 2, 3, 4)}, global_batch=8, dp=2)
    assert space.choices["sharding"] == ("none", "zero1", "zero2", "zero3")
    assert space.choices["micro_batch"] == (1, 2, 4)  # 3 does not divide 8 / dp
    assert "grad_accum" not in space.choices
    assert space.size == len(space.configs())
    knobs = complete({"micro_batch": 2}, global_batch=8, dp=2)
    assert knobs["grad_accum"] == 2
    assert config_key({"b": 1, "a": 2}) == config_key({"a": 2, "b": 1}) == "a=2;b=1"


def test_calibration_fit_recovers_known_factors():
    rows = [(1.0, 0.2, 0.05), (2.0, 0.1, 0.0), (0.5, 0.5, 0.1), (3.0, 0.3, 0.2), (1.5, 0.8, 0.0)]
    obs0 = [Observation(a, b, r, 0.0) for a, b, r in rows]
    truth = predicted_step_s(obs0, compute=0.5, network=0.25)
    obs = [Observation(a, b, r, float(m)) for (a, b, r), m in zip(rows, truth)]
    cal = fit_calibration(obs)
    assert cal.compute == pytest.approx(0.5, rel=0.02)
    assert cal.network == pytest.approx(0.25, rel=0.05)
    # without communication, the network factor is not identifiable and stays at 1
    cal1 = fit_calibration([Observation(1.0, 0.0, 0.0, 10.0)])
    assert cal1.compute == pytest.approx(0.1, rel=0.02) and cal1.network == pytest.approx(1.0, rel=0.01)
    assert fit_calibration([]) == Calibration(source=fit_calibration([]).source)


def _result(tmp_path: Path, **kw) -> Path:
    p = tmp_path / "r.json"
    p.write_text(json.dumps({"status": "ok", "steps": 4, "warmup_steps": 1, **kw}))
    return p


def test_classify_trusts_the_result_file_over_the_exit_code(tmp_path):
    p = _result(tmp_path, tokens_per_s=1000.0, step_time_s_median=0.5)
    o = classify(p, 250, False, 10.0, "terminate called without an active exception")
    assert o.status == "ok" and o.tokens_per_s == 1000.0 and o.startup_s == pytest.approx(8.0)


def test_classify_failures(tmp_path):
    missing = tmp_path / "none.json"
    assert classify(missing, 1, False, 1.0, "RuntimeError: DefaultCPUAllocator: can't allocate memory").status == "oom"
    assert classify(missing, 1, False, 1.0, "torch.OutOfMemoryError: CUDA out of memory").status == "oom"
    assert classify(missing, 2, False, 1.0, "usage: python -m trainer\nerror: argument --sharding: invalid choice").status == "bad_config"
    assert classify(missing, 1, False, 1.0, "ZeroDivisionError").status == "crash"
    assert classify(missing, -9, True, 1.0, "").status == "timeout"
    p = _result(tmp_path, status="oom", error="rank 0: out of memory")
    assert classify(p, 3, False, 1.0, "").status == "oom"


_TREE = """
import os, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
open(sys.argv[1], "w").write(str(child.pid))
time.sleep(60)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_timeout_kills_the_whole_process_group(tmp_path):
    pidfile = tmp_path / "child.pid"
    cmd = [sys.executable, "-c", _TREE, str(pidfile)]
    t0 = time.monotonic()
    o = run_command(cmd, json_out=tmp_path / "none.json", timeout_s=3.0, memory_cap_bytes=None,
                    env=rank_env(1), log_path=tmp_path / "log")
    assert o.status == "timeout"
    assert time.monotonic() - t0 < 15
    child = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(child), "a grandchild of the trial survived the timeout"


def test_memory_cap_is_a_real_limit(tmp_path):
    cmd = [sys.executable, "-c", "x = bytearray(600 * 2**20); print('allocated')"]
    o = run_command(cmd, json_out=tmp_path / "none.json", timeout_s=30, memory_cap_bytes=300 * 2**20,
                    env=rank_env(1), log_path=tmp_path / "log")
    assert o.status == "oom", o.log_tail
    o2 = run_command(cmd, json_out=tmp_path / "none.json", timeout_s=30, memory_cap_bytes=2 * 2**30,
                     env=rank_env(1), log_path=tmp_path / "log2")
    assert o2.status == "crash" and "allocated" in o2.log_tail  # no result file: not ok


def test_kill_group_of_a_dead_group_is_harmless():
    kill_group(2**22 + 12345)
    assert math.isfinite(1.0)


def test_residual_model_learns_a_knob_the_calibration_cannot():
    from tuner.residual import ResidualModel

    choices = {"sharding": ("zero2", "zero3"), "micro_batch": (4, 32)}
    # zero3 measures 2x slower than predicted, everything else as predicted
    knobs = [{"sharding": s, "micro_batch": m} for s in ("zero2", "zero3") for m in (4, 32)] * 3
    ratios = [math.log(0.5) if k["sharding"] == "zero3" else 0.0 for k in knobs]
    model = ResidualModel(choices, explore=0.0).fit(knobs, ratios)
    z2 = model.score({"sharding": "zero2", "micro_batch": 32}, 0.0)
    z3 = model.score({"sharding": "zero3", "micro_batch": 32}, 0.0)
    assert z2 - z3 == pytest.approx(math.log(2), rel=0.15)
    # untrained: the planner's prediction as is, an exploration bonus for the unknown
    fresh = ResidualModel(choices, explore=0.3)
    assert fresh.score({"sharding": "zero2", "micro_batch": 4}, 1.0) > 1.0


def test_one_measured_plan_corrects_its_whole_backend_and_unmeasured_backends_go_first():
    from tuner.residual import ResidualModel

    choices = {"sharding": ("none", "zero2", "fsdp_full_shard", "fsdp_shard_grad_op"), "micro_batch": (4, 32)}
    # the planner's prior is 2x low on FSDP: one FSDP measurement at twice the prediction
    knobs = [{"sharding": "none", "micro_batch": 32}, {"sharding": "zero2", "micro_batch": 32},
             {"sharding": "fsdp_full_shard", "micro_batch": 32}]
    model = ResidualModel(choices, explore=0.0).fit(knobs, [0.0, 0.0, math.log(2)])
    # ... lifts the FSDP plan never measured (another sharding, another micro batch) by most of 2x
    other = model.correction({"sharding": "fsdp_shard_grad_op", "micro_batch": 4})
    assert 0.5 * math.log(2) < other < math.log(2)
    assert abs(model.correction({"sharding": "zero2", "micro_batch": 4})) < 0.1
    # before any FSDP measurement, the best FSDP plan of the space is tried first
    early = ResidualModel(choices).fit(knobs[:2], [0.0, 0.0])
    ranked = [{"sharding": "zero2", "micro_batch": 4}, {"sharding": "none", "micro_batch": 4}]
    space = ranked + [{"sharding": "fsdp_shard_grad_op", "micro_batch": 4}, {"sharding": "fsdp_full_shard", "micro_batch": 4}]
    assert early.backends_first(ranked, space) == [space[2], *ranked]
    assert model.backends_first(ranked, space) == ranked  # every backend measured: exploit
    assert ResidualModel(choices).backends_first(ranked, space) == ranked  # nothing measured: the planner's order


def test_gpu_name_from_nvidia_smi_maps_to_the_catalog():
    from hardware.catalog import load_catalog
    from tuner.device import guess_gpu_id

    cat = load_catalog()
    assert guess_gpu_id(cat, "NVIDIA H100 80GB HBM3", 79.6) == "h100-80gb"
    assert guess_gpu_id(cat, "NVIDIA A100-SXM4-40GB", 39.4) == "a100-40gb"
    assert guess_gpu_id(cat, "Tesla V100-SXM2-32GB", 31.7) == "v100-32gb"
    # PCIe cards of the same model and memory are told apart by the other words of the name
    assert guess_gpu_id(cat, "NVIDIA H100 PCIe", 79.2) == "h100-pcie-80gb"
    assert guess_gpu_id(cat, "NVIDIA A100-PCIE-40GB", 39.4) == "a100-pcie-40gb"
    assert guess_gpu_id(cat, "Tesla V100-PCIE-16GB", 15.8) == "v100-pcie-16gb"
    assert guess_gpu_id(cat, "NVIDIA H100", 94.5) == "h100-96gb"  # not the 94 GB H100 NVL: the name says no NVL
    assert guess_gpu_id(cat, "NVIDIA H100 NVL", 93.6) == "h100-nvl"
    assert guess_gpu_id(cat, "NVIDIA B200", 178.4) == "b200"
    # Blackwell Ultra: the driver's names (HGX B300 "NVIDIA B300 SXM6 AC", 275040 MiB; NVL72 "NVIDIA GB300"),
    # a whole word each: B300 is not GB300 and B200 not GB200, whatever the memory says
    assert guess_gpu_id(cat, "NVIDIA B300 SXM6 AC", 268.6) == "b300"
    assert guess_gpu_id(cat, "NVIDIA B300", 268.6) == "b300"
    assert guess_gpu_id(cat, "NVIDIA GB300", 268.6) == "gb300"
    assert guess_gpu_id(cat, "NVIDIA GB200", 184.0) == "gb200"
    assert guess_gpu_id(cat, "NVIDIA B200", 186.0) == "b200"  # at GB200's memory still the B200
    assert guess_gpu_id(cat, "NVIDIA GB200", 178.4) == "gb200"  # at B200's memory still the GB200
    # AMD (rocm-smi / torch device names): the model word decides, not the vendor words every part shares
    assert guess_gpu_id(cat, "AMD Instinct MI355X", 288.0) == "mi355x"
    assert guess_gpu_id(cat, "AMD Instinct MI350X", 288.0) == "mi350x"
    assert guess_gpu_id(cat, "AMD Instinct MI300X", 191.7) == "mi300x"
    assert guess_gpu_id(cat, "AMD Instinct MI325X", 256.0) == "mi325x"
    assert guess_gpu_id(cat, "Some Unknown Card", 16) is None


def test_run_backend_follows_the_sharding_unless_the_study_is_deepspeed_only():
    assert [run_backend({"sharding": s}, "any") for s in ("none", "zero1", "zero3", "fsdp_full_shard")] == \
        ["ddp", "deepspeed", "deepspeed", "fsdp"]
    assert run_backend({}, "any") == "ddp" and run_backend({"sharding": "none"}, "deepspeed") == "deepspeed"


def test_allreduce_bench_failure_names_the_error_not_the_banner():
    from tuner.network import failure_line

    elastic = ("Traceback (most recent call last):\n  File \"x.py\", line 1\n"
               "torch.distributed.DistBackendError: [Gloo] connect timed out\n"
               "============================================================\n"
               "trainer FAILED\n------------------------------------------------------------\n"
               "Failures:\n  <NO_OTHER_FAILURES>\n============================================================\n")
    assert failure_line(elastic) == "torch.distributed.DistBackendError: [Gloo] connect timed out"
    assert failure_line("starting\nrank 1 exited\n=====\n") == "rank 1 exited"
    assert failure_line("") == ""
