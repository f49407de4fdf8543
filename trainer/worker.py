"""The function every rank runs: train, write the result (rank 0), or record why it failed.

A watchdog ends a rank that runs past `timeout_s` (status timeout); any exception is
classified (oom / bad_config / crash) into a per-rank error file next to the result file,
which the launcher reads when rank 0 wrote no result.
"""

from __future__ import annotations

import os
import sys
import threading
import traceback
from pathlib import Path

from trainer.config import TrainConfig
from trainer.status import classify, write_rank_error

TIMEOUT_EXIT_CODE = 124


def write_result_file(path: str | Path, text: str) -> None:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(p.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, p)  # atomic: a reader never sees half a file


def spawned() -> bool:
    """A rank our own elastic launch spawned (its launcher reads the rank error files and writes the result), not one
    srun or torchrun started (a process of its own: nobody of ours is there to do so)."""
    import multiprocessing

    return multiprocessing.parent_process() is not None


def _fail(cfg: TrainConfig, result_path: str, rank: int, status: str, message: str, spawned_code: int) -> None:
    """End a failed rank. Under srun / torchrun rank 0 writes the result file with the status, and every rank exits
    with the status's code (trainer/result.py EXIT_CODES; it was 1 and no result file: an OOM or a bad --data read as
    a crash). A spawned rank exits with `spawned_code` for its launcher (trainer/launch.py collect)."""
    write_rank_error(result_path, rank, status, message)
    sys.stderr.flush()
    if spawned():
        os._exit(spawned_code)
    from trainer.result import EXIT_CODES, TrainResult

    if rank == 0:
        result = TrainResult(status=status, error=f"rank 0: {message}", config=cfg.knobs(),
                             model=cfg.spec.model_dump(mode="json") if cfg.spec else {"ref": cfg.model},
                             world_size=int(os.environ.get("WORLD_SIZE", "1")))
        write_result_file(result_path, result.model_dump_json(indent=2))
    os._exit(EXIT_CODES[status])


def _start_watchdog(cfg: TrainConfig, result_path: str, rank: int) -> threading.Timer:
    timeout_s = cfg.run.timeout_s

    def fire() -> None:
        _fail(cfg, result_path, rank, "timeout", f"rank {rank} still running after {timeout_s:g} s", TIMEOUT_EXIT_CODE)

    timer = threading.Timer(timeout_s, fire)
    timer.daemon = True
    timer.start()
    return timer


def _die_with_launcher() -> None:
    """A rank spawned by the elastic launcher dies when the launcher dies (Linux parent-death
    signal): a launcher killed with SIGKILL (a tuner killed mid-trial) leaves no ranks
    training on, or hanging on a rendezvous store that is gone."""
    import multiprocessing

    parent = multiprocessing.parent_process()
    if parent is None or not sys.platform.startswith("linux"):
        return  # srun / torchrun without spawn: the launcher owns the rank's life
    try:
        import ctypes
        import ctypes.util
        import signal

        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent.pid:  # the launcher died before the signal was armed
        os._exit(137)


def run_rank(cfg_json: str, result_path: str) -> str | None:
    """Entry point of one rank (elastic_launch, torchrun or srun). Returns rank 0's JSON."""
    _die_with_launcher()
    cfg = TrainConfig.model_validate_json(cfg_json)
    rank = int(os.environ.get("RANK", "0"))
    timer = _start_watchdog(cfg, result_path, rank)
    try:
        from trainer.loop import train

        result = train(cfg)
        text = None
        if result is not None:
            text = result.model_dump_json(indent=2)
            write_result_file(result_path, text)
    except BaseException as e:  # noqa: BLE001 - every failure must be classified and recorded
        traceback.print_exc()
        # os._exit: skip interpreter teardown (collectives of the other ranks may hang it)
        _fail(cfg, result_path, rank, classify(e), f"{type(e).__name__}: {e}", 1)
    finally:
        timer.cancel()
    _shutdown()
    return text


def _shutdown() -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        try:
            dist.destroy_process_group()
        except Exception:  # exit-time teardown problems must not change a finished run's status
            pass
