"""MFU is never above 1, whatever peak the machine's catalog gives (a busy machine measures
its peak low): a real run against an absurdly low cached peak raises the peak to its own rate."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from planner import flops
from planner.model import ModelSpec
from trainer.probe import to_toml

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_mfu_at_most_one_against_a_low_cached_peak(tmp_path):
    gpus = tmp_path / ".config" / "plan" / "catalog" / "gpus"
    gpus.mkdir(parents=True)
    (gpus / "local.toml").write_text(to_toml({
        "name": "local: a peak measured under load", "vendor": "local", "hbm_gib": 8.0, "hbm_gbytes_per_s": 10.0,
        "fp32_tflops": 1e-6, "fp16_tflops": 1e-6, "bf16_tflops": 1e-6, "intranode_gbps": 10.0, "source": "test"}))
    env = dict(os.environ, HOME=str(tmp_path), OMP_NUM_THREADS="1",
               PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = tmp_path / "r.json"
    p = subprocess.run([sys.executable, "-m", "trainer", "--model", "tiny", "--nproc", "1", "--steps", "3",
                        "--warmup-steps", "1", "--seq-len", "32", "--activation-checkpointing", "selective",
                        "--json", str(out)],
                       env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    r = json.loads(out.read_text())
    assert r["status"] == "ok" and 0 < r["mfu"] <= 1
    assert r["peak_source"].startswith("catalog:local") and "raised" in r["peak_source"]
    assert r["peak_tflops_per_device"] == pytest.approx(r["hw_tflops_per_device"])
    # the trainer's MFU counts FLOPs with the planner's function (one count for both)
    spec, rate = ModelSpec(**r["model"]), r["tokens_per_s_per_device"] / 1e12
    assert r["model_tflops_per_device"] == pytest.approx(flops.model_flops_per_token(spec, 32) * rate, rel=1e-9)
    assert r["hw_tflops_per_device"] == pytest.approx(flops.hardware_flops_per_token(spec, 32, "selective") * rate,
                                                      rel=1e-9)
    assert r["hw_tflops_per_device"] > r["model_tflops_per_device"]
