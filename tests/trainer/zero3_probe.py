"""Run a DeepSpeed ZeRO-3 probe script (a string for `python -c`) in one process over gloo and read the JSON it
writes: the fetch-count and fetch-size tests of tests/trainer share it."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

# Inside a probe script, after `spec`, `model` and the micro batch `mb` exist: ZeRO-3 releasing every parameter after
# each use (no prefetch bucket, max live parameters and reuse distance 0), so each submodule's parameters are fetched
# every time it runs; parameters under 10 x hidden stay persistent (DeepSpeed's stage3_param_persistence_threshold).
ENGINE = """
cfg = {"train_micro_batch_size_per_gpu": mb, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "torch_adam": True}},
       "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 10 * spec.hidden,
                             "stage3_prefetch_bucket_size": 0, "stage3_max_live_parameters": 0,
                             "stage3_max_reuse_distance": 0}}
engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=cfg)
"""


def run_probe(script: str, out: Path, *args: str, timeout: int = 300) -> dict:
    """Runs `script` as rank 0 of 1 (argv: *args with `out` second, as the probes read sys.argv[2]) and returns
    the JSON it wrote to `out`."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = os.environ | {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": "0", "WORLD_SIZE": "1",
                        "LOCAL_RANK": "0", "OMP_NUM_THREADS": "1"}
    argv = [args[0], str(out), *args[1:]]
    proc = subprocess.run([sys.executable, "-c", script, *argv], env=env, capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0 or out.exists(), proc.stderr[-3000:]
    return json.loads(out.read_text())
