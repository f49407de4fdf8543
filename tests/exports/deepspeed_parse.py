"""DeepSpeed's own parse of exported configs, in a subprocess (world size 1 over gloo; the batch is rescaled to it):
what the export tests check the keys against, as installed."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

_SCRIPT = """
import json, sys
import torch.distributed as dist
import deepspeed
from deepspeed.runtime.config import DeepSpeedConfig

dist.init_process_group("gloo", rank=0, world_size=1)
deepspeed.init_distributed(dist_backend="gloo")
out = []
for cfg in json.load(open(sys.argv[1])):
    cfg["train_batch_size"] = cfg["train_micro_batch_size_per_gpu"] * cfg["gradient_accumulation_steps"]
    try:
        c = DeepSpeedConfig(cfg)
        out.append(EXTRACT)
    except Exception as e:
        out.append({"error": type(e).__name__ + ": " + str(e)[:200]})
json.dump(out, open(sys.argv[2], "w"))
"""


def parse_with_deepspeed(tmp_path, configs: list[dict], extract: str) -> list[dict]:
    """`extract`: a Python expression over the parsed `c` (a DeepSpeedConfig), one JSON-able dict a config; a config
    DeepSpeed refuses gives {"error": ...}."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    src, out = tmp_path / "configs.json", tmp_path / "parsed.json"
    src.write_text(json.dumps(configs))
    env = os.environ | {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-c", _SCRIPT.replace("EXTRACT", extract), str(src), str(out)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.read_text())
