"""Start the ranks (torch's elastic launch API, or join torchrun/srun) and collect the result.

The status is judged by the result file, not only the exit code: rank 0 writes the result
after training; a rare abort at process exit afterwards keeps status ok (notes/cpu-runs.md).
Without a result, the per-rank error files tell oom / timeout / bad_config / crash.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

from planner.errors import PlanError
from trainer.config import TrainConfig, check_launcher_nodes, check_launcher_ranks, validate_config, validate_layout
from trainer.result import TrainResult
from trainer.spec import resolve_spec
from trainer.status import classify_text, clear_rank_errors, read_rank_errors
from trainer.worker import TIMEOUT_EXIT_CODE, run_rank, write_result_file

LAUNCH_GRACE_S = 60.0  # the launcher's own backstop after the ranks' watchdogs


def threads_per_rank(nproc: int) -> int:
    return max(1, (os.cpu_count() or 1) // nproc)


def launch(cfg: TrainConfig) -> TrainResult:
    """Run one training job and return its result (also written to cfg.run.json_out if given)."""
    if cfg.run.json_out:  # a folder, a file on the way, /proc: one error line before any rank starts
        from planner.out_path import check_out_file

        check_out_file(cfg.run.json_out, "json")
    result_path = cfg.run.json_out or str(Path(tempfile.mkdtemp(prefix="plan-train-")) / "result.json")
    Path(result_path).parent.mkdir(parents=True, exist_ok=True)
    owner = result_owner() and cfg.launch.node_rank == 0  # node 1.. of our own launch: node 0 writes it
    if owner:
        Path(result_path).unlink(missing_ok=True)
        clear_rank_errors(result_path)
    t0 = time.perf_counter()
    from trainer.dist import check_host_precision, env_from_slurm, launched_externally, launcher_ranks, rendezvous_line

    try:
        external = launched_externally()  # an srun step with uneven tasks per node: refused here (bad_config)
        if external:  # torchrun / srun decide the ranks: validate against them
            port_from = env_from_slurm(cfg.launch.rdzv_endpoint, block_ranks=True)
            world, local = launcher_ranks()
            asked, asked_nodes = cfg.launch.nproc, cfg.launch.nnodes
            cfg = cfg.on_ranks(nproc=local, nnodes=world // local)
            check_launcher_ranks(asked, local)
            check_launcher_nodes(asked_nodes, world // local)
        validate_config(cfg)
        if cfg.spec is None:
            cfg = cfg.model_copy(update={"spec": resolve_spec(cfg.model)})
        validate_layout(cfg, cfg.spec)
        check_host_precision(cfg)
    except PlanError as e:
        return _finish(cfg, result_path, TrainResult(status="bad_config", error=str(e), config=cfg.knobs()), owner)

    exit_codes: dict[str, int] = {}
    launch_error = ""
    if external:
        if os.environ["RANK"] == "0":  # after the checks: a refusal stays one line
            print(rendezvous_line(port_from), file=sys.stderr, flush=True)
        run_rank(cfg.model_dump_json(), result_path)  # this process is one rank
        if int(os.environ["RANK"]) != 0:
            return TrainResult(status="ok", config=cfg.knobs())  # rank 0 reports
    else:
        try:
            exit_codes, launch_error = _elastic(cfg, result_path)
        except PlanError as e:  # several nodes' agreed rendezvous port is held here
            return _finish(cfg, result_path, TrainResult(status="bad_config", error=str(e), config=cfg.knobs()), owner)
        if cfg.launch.node_rank > 0 and not launch_error:  # node 0 holds rank 0, which reports
            return _finish(cfg, result_path, TrainResult(status="ok", config=cfg.knobs(), exit_codes=exit_codes), owner)
    result = collect(cfg, result_path, exit_codes, launch_error)
    if result.wall_s is None:
        result.wall_s = time.perf_counter() - t0
    return _finish(cfg, result_path, result, owner)


def _elastic(cfg: TrainConfig, result_path: str) -> tuple[dict[str, int], str]:
    import torch
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    from trainer.ranks import elastic_run

    if not torch.cuda.is_available():
        os.environ["OMP_NUM_THREADS"] = str(threads_per_rank(cfg.launch.nproc))
    backstop = threading.Timer(cfg.run.timeout_s + LAUNCH_GRACE_S, lambda: os.kill(os.getpid(), signal.SIGTERM))
    backstop.daemon = True
    backstop.start()
    try:
        elastic_run(run_rank, (cfg.model_dump_json(), result_path), cfg.launch.nproc, cfg.launch.nnodes,
                    cfg.launch.node_rank, cfg.launch.rdzv_endpoint, "plan-train")
        return {str(r): 0 for r in range(cfg.launch.world_size)}, ""
    except ChildFailedError as e:
        codes = {str(r): f.exitcode for r, f in e.failures.items()}
        return codes, failures_line(e.failures)
    except SignalException as e:
        return {}, f"launcher timeout: {e}"
    finally:
        backstop.cancel()


def failures_line(failures) -> str:
    """torch's ChildFailedError.failures (global rank -> ProcessFailure) in one line."""
    return "; ".join(f"rank {r}: exit {f.exitcode} {failure_text(f.message)}".strip() for r, f in failures.items())


def failure_text(message) -> str:
    """torch's ProcessFailure.message in one line: a string for a process that wrote no error file (a signal, an
    exit), but for a function rank whose exception escaped torch's record() wrapper the error file's dict
    {"message": "Type: text", "extraInfo": {"py_callstack": traceback, ...}} (torch ErrorHandler.record_exception):
    printed as a dict with the whole traceback inside. Its message's first line, else the traceback's last line."""
    if isinstance(message, dict):
        text = str(message.get("message") or "")
        if not text.strip():
            stack = (message.get("extraInfo") or {}).get("py_callstack") or ""
            text = next((line for line in reversed(str(stack).splitlines()) if line.strip()), "")
        message = text
    lines = [line.strip() for line in str(message or "").splitlines() if line.strip()]
    return lines[0][:300] if lines else ""


def collect(cfg: TrainConfig, result_path: str, exit_codes: dict[str, int], launch_error: str) -> TrainResult:
    """The run's result, judged by the files the ranks wrote before the exit codes."""
    p = Path(result_path)
    if p.is_file():
        try:
            result = TrainResult.model_validate_json(p.read_text())
            result.exit_codes = exit_codes
            return result
        except ValueError:
            pass
    errors = read_rank_errors(result_path)
    if errors:
        first = errors[0]
        return TrainResult(status=first["status"], error=f"rank {first['rank']}: {first['error']}",
                           config=cfg.knobs(), exit_codes=exit_codes)
    if launch_error.startswith("launcher timeout") or TIMEOUT_EXIT_CODE in exit_codes.values():
        status = "timeout"
    else:  # a rank died without a word (killed by the kernel, a segfault, RLIMIT_AS abort)
        status = classify_text(launch_error)
    return TrainResult(status=status, error=launch_error or "no result file was written",
                       config=cfg.knobs(), exit_codes=exit_codes)


def result_owner(env=None) -> bool:
    """This process may write (and first clears) the result file: rank 0 of a torchrun / srun step (RANK, else
    SLURM_PROCID), or our own launcher (on node 0: launch()). On a --json every node shares (a home directory), every
    rank of a step wrote it, a rank starting late deleted what a refusing rank 0 had written, and node 1 of our own
    multi-node launch replaced node 0's result with its empty 'ok' (node 0 holds rank 0, which reports)."""
    env = os.environ if env is None else env
    return env.get("RANK", env.get("SLURM_PROCID", "0")) == "0"


def _finish(cfg: TrainConfig, result_path: str, result: TrainResult, write: bool = True) -> TrainResult:
    if not result.model:
        result.model = cfg.spec.model_dump(mode="json") if cfg.spec else {"ref": cfg.model}
    result.world_size = result.world_size or cfg.launch.world_size
    if write:
        write_result_file(result_path, result.model_dump_json(indent=2))
        clear_rank_errors(result_path)
    return result


def summary_line(result: TrainResult) -> str:
    if result.status != "ok":
        return f"{result.status}: {result.error}"
    if result.step_time_s_median is None:  # a rank other than 0 under torchrun/srun
        return "ok: this rank is done; rank 0 writes the result"
    return (f"ok: {result.step_time_s_median * 1e3:.1f} ms/step, {result.tokens_per_s:,.0f} tokens/s, "
            f"MFU {result.mfu:.1%}, loss {result.losses[0]:.3f} -> {result.losses[-1]:.3f}")


def read_result(path: str | Path) -> TrainResult:
    return TrainResult.model_validate(json.loads(Path(path).read_text()))
