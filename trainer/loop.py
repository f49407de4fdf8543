"""One rank's training run: build the model and backend, train, measure, report (rank 0)."""

from __future__ import annotations

import sys
import time

import torch
import torch.distributed as dist

from planner.flops import hardware_flops_per_token, model_flops_per_token
from trainer import dist as tdist
from trainer.backends import build_engine
from trainer.config import TrainConfig, validate_config, validate_layout
from trainer.data import Batches
from trainer.kernels import kernel_line
from trainer.metrics import (catalog_peak_tflops, cuda_identity, gpu_label, host_peak_rss_bytes, measured_matmul_tflops,
                             step_stats, unknown_gpu_note)
from trainer.model import GPT
from trainer.result import STEP_MARK, MemoryStats, TrainResult
from trainer.spec import resolve_spec


def measured_step_index(cfg: TrainConfig) -> int:
    """A warm-up step after the first optimizer step (states exist), else the last step."""
    return cfg.run.warmup_steps - 1 if cfg.run.warmup_steps >= 2 else cfg.run.steps - 1


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def device_name(device: torch.device) -> str:
    if device.type != "cuda":
        return "cpu"
    gpu = cuda_identity(device)
    return f"cuda:{gpu_label(gpu['name'], gpu['arch'], gpu['compute_units'])}"


def build(cfg: TrainConfig, device: torch.device):
    spec = cfg.spec or resolve_spec(cfg.model)
    validate_layout(cfg, spec)  # learned positions cover seq_len (config.check_positions)
    torch.manual_seed(cfg.run.seed)
    model = GPT(spec, cfg.plan.attention, cfg.run.low_precision_norm, cfg.run.moe_aux_loss_coef)
    if cfg.plan.compile:
        for block in model.blocks:
            block.compile()
    return spec, model, build_engine(cfg, model, device)


def train(cfg: TrainConfig) -> TrainResult | None:
    """Runs on every rank; returns the result on rank 0 and None elsewhere."""
    validate_config(cfg)
    t_start = time.perf_counter()
    device = tdist.init(cfg.run.timeout_s)
    rank, world = dist.get_rank(), dist.get_world_size()
    tdist.check_device_precision(cfg.plan.precision, device)
    spec, model, engine = build(cfg, device)
    tdist.check_device_precision(engine.knobs["precision"], device)  # a --deepspeed-config / --fsdp-config's
    if rank == 0:
        print(kernel_line(spec, cfg.plan.attention, device, engine.knobs["precision"], cfg.plan.seq_len),
              file=sys.stderr, flush=True)
    # ranks of one tensor/pipeline-parallel group read the same batches: seed by data-parallel rank
    batches = Batches(cfg.run.data, spec.vocab, engine.micro_batch, cfg.plan.seq_len, seed=cfg.run.seed * 1000 + engine.dp_rank)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)

    measure_at = measured_step_index(cfg) if cfg.run.measure_memory else -1
    times_s, losses, saved, state = [], [], {"bytes": 0}, {}
    for step in range(cfg.run.steps):
        _sync(device)
        t0 = time.perf_counter()
        measure = step == measure_at
        step_loss, step_state, step_saved = engine.train_step(batches, device, measure)
        if measure:
            state, saved = step_state, {"bytes": step_saved}
        _sync(device)
        times_s.append(time.perf_counter() - t0)
        if rank == 0:  # the tuner tells a start-up timeout from a slow run by these lines
            print(f"{STEP_MARK} {step + 1}/{cfg.run.steps} {times_s[-1]:.4f} s", file=sys.stderr, flush=True)
        if rank == 0 and step in engine.skipped_steps:  # (DeepSpeed skips non-finite bf16/fp32 steps too: no scale)
            scale = f", loss scale now {engine.loss_scales[-1]:g}" if engine.loss_scales else ""
            print(f"[trainer] {'fp16 ' if engine.loss_scales else ''}overflow: step {step + 1} skipped{scale} "
                  f"({len(engine.skipped_steps)} skipped so far)", file=sys.stderr, flush=True)
        losses.append(step_loss)
    per_rank = engine.gather_rank_stats(state, saved["bytes"], cfg.run.warmup_steps)

    result = None
    if rank == 0:
        result = report(cfg, spec, engine, device, world, times_s, losses, saved, state, measure_at)
        result.parallel = engine.parallel_stats(per_rank)
        result.wall_s = time.perf_counter() - t_start
    dist.barrier()
    return result


def report(cfg, spec, engine, device, world, times_s, losses, saved, state, measure_at) -> TrainResult:
    timed = times_s[cfg.run.warmup_steps:]
    stats = step_stats(timed)
    tokens_per_step = engine.micro_batch * engine.grad_accum * engine.dp * cfg.plan.seq_len
    tps = tokens_per_step / stats["step_time_s_median"]
    precision = engine.knobs["precision"]
    name = device_name(device).removeprefix("cuda:")
    gpu = cuda_identity(device) if device.type == "cuda" else {"name": "cpu", "memory_gib": None, "arch": None,
                                                                "compute_units": None}
    peak = catalog_peak_tflops(gpu["name"], precision, gpu["memory_gib"], gpu["arch"], gpu["compute_units"])
    if peak is None:
        sizes = (1024, 2048, 4096) if device.type == "cuda" else (256, 512, 1024)
        source = f"measured matmul (best of {sizes} x 3, {precision})"
        if device.type == "cuda":
            source += f"; {unknown_gpu_note(name)}"
            print(f"warning: {unknown_gpu_note(name)}", file=sys.stderr, flush=True)
        peak = (measured_matmul_tflops(precision, sizes), source)
    # the planner's FLOP count, so that measured and predicted MFU use one formula
    model_tflops = float(model_flops_per_token(spec, cfg.plan.seq_len)) * tps / world / 1e12
    hw_tflops = float(hardware_flops_per_token(spec, cfg.plan.seq_len, engine.knobs["activation_checkpointing"])) \
        * tps / world / 1e12
    if hw_tflops > peak[0]:  # the run itself proves the peak was measured low (a busy machine)
        peak = (hw_tflops, f"{peak[1]}, raised to the run's own hardware rate")
    memory = None
    if state:
        memory = MemoryStats(
            params_bytes=state["params_bytes"], grads_bytes=state["grads_bytes"],
            optimizer_bytes=state["optimizer_bytes"], master_params_bytes=state["master_params_bytes"],
            optimizer_states_bytes=state["optimizer_states_bytes"],
            saved_activations_bytes=int(saved["bytes"]), measured_step=measure_at,
            host_peak_rss_bytes=host_peak_rss_bytes())
        if device.type == "cuda":
            memory.cuda_peak_allocated_bytes = torch.cuda.max_memory_allocated(device)
            memory.cuda_peak_reserved_bytes = torch.cuda.max_memory_reserved(device)
    return TrainResult(
        status="ok", config=engine.knobs, model=spec.model_dump(mode="json"), backend=engine.name,
        device=device_name(device), world_size=world, steps=cfg.run.steps, warmup_steps=cfg.run.warmup_steps,
        **stats, tokens_per_s=tps, tokens_per_s_per_device=tps / world, tokens_per_step=tokens_per_step,
        model_tflops_per_device=model_tflops, hw_tflops_per_device=hw_tflops,
        peak_tflops_per_device=peak[0], mfu=model_tflops / peak[0], peak_source=peak[1],
        losses=losses, memory=memory, skipped_steps=list(engine.skipped_steps),
        loss_scales=list(engine.loss_scales) if engine.scales_losses() else None)
