"""`python -m trainer`: the same flags as `plan train` (the tuner launches this as a subprocess).

Exit codes: 0 ok, 2 bad_config, 3 oom, 4 timeout, 1 crash; the result file says the same.
"""

from __future__ import annotations

import argparse
import sys

from planner.scenario import ATTENTIONS, CHECKPOINTINGS, OFFLOADS, OPTIMIZERS, PRECISIONS, SHARDINGS
from trainer.config import PP_SCHEDULES

EXIT_CODES = {"ok": 0, "bad_config": 2, "oom": 3, "timeout": 4, "crash": 1}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m trainer", description="Run the bundled GPT trainer.")
    a = p.add_argument
    a("--model", default="tiny", help="preset id, bare size, config.json or ModelSpec JSON")
    a("--nproc", type=int, default=1, help="ranks on this node")
    a("--nnodes", type=int, default=1)
    a("--node-rank", type=int, default=0)
    a("--rdzv-endpoint", default=None, help="host:port of the rendezvous (multi-node)")
    a("--sharding", choices=SHARDINGS, default="none")
    a("--offload", choices=OFFLOADS, default="none")
    a("--activation-checkpointing", choices=CHECKPOINTINGS, default="none")
    a("--precision", choices=PRECISIONS, default="fp32")
    a("--optimizer", choices=OPTIMIZERS, default="adamw")
    a("--attention", choices=ATTENTIONS, default="flash")
    a("--micro-batch", type=int, default=1)
    a("--grad-accum", type=int, default=1)
    a("--tp", type=int, default=1, help="tensor-parallel ranks (DTensor, sequence-parallel norms)")
    a("--pp", type=int, default=1, help="pipeline stages (torch.distributed.pipelining)")
    a("--vpp", type=int, default=1, help="virtual pipeline stages per rank (interleaved 1F1B)")
    a("--pp-schedule", choices=PP_SCHEDULES, default=None, help="default: 1f1b (gpipe when grad_accum < pp; interleaved_1f1b when vpp > 1)")
    a("--seq-len", type=int, default=64)
    a("--deepspeed-config", default=None, help="a DeepSpeed JSON config, used as is")
    a("--fsdp-config", default=None, help="an FSDP settings JSON (plan export fsdp), used as is")
    a("--compile", action="store_true")
    a("--low-precision-norm", action="store_true")
    a("--steps", type=int, default=6)
    a("--warmup-steps", type=int, default=2)
    a("--lr", type=float, default=1e-3)
    a("--seed", type=int, default=0)
    a("--data", default="synthetic", help="'synthetic' or a local text file (byte-level)")
    a("--timeout-s", type=float, default=1800.0)
    a("--no-measure-memory", dest="measure_memory", action="store_false")
    a("--json", dest="json_out", default=None, help="write the result JSON here")
    return p


def main(argv: list[str] | None = None) -> int:
    from pydantic import ValidationError

    from trainer.config import TrainConfig
    from trainer.launch import launch, summary_line

    args = vars(parser().parse_args(argv))
    try:
        cfg = TrainConfig(**args)
    except ValidationError as e:
        first = e.errors()[0]
        print(f"error: {'.'.join(map(str, first['loc']))}: {first['msg']}", file=sys.stderr)
        return 2
    result = launch(cfg)
    print(summary_line(result), file=sys.stderr if result.status != "ok" else sys.stdout)
    return EXIT_CODES[result.status]
