"""DeepSpeed fp16 through the bundled trainer on a GPU: the result lists the steps DeepSpeed skipped (0-based) and its
loss scale after each step, as the DDP/FSDP2/tp/pp backends do (trainer/backends/deepspeed_scaling.py). DeepSpeed runs
no fp16 on a CPU (its CPU accelerator's is_fp16_supported): skipped without CUDA; the same reader and backend run on
CPU in bf16/fp32 in tests/trainer/test_deepspeed_skipped_steps.py.

A first scale of 2**30 overflows every step of the tiny model (a fp16 gradient above 65504), so each step is skipped
and the scale shows each optimizer's own rule (deepspeed 0.19.8): ZeRO-0's FP16_Optimizer / FP16_UnfusedOptimizer
halve it on every overflow (runtime/fp16/fused_optimizer.py, unfused_optimizer.py _update_scale); the ZeRO-1/2/3
optimizers' DynamicLossScaler skips its first overflow at the same scale (hysteresis 2, runtime/fp16/loss_scaler.py
update_scale) and halves after. The default 2**16 trains: nothing skipped, the scale kept (loss_scale_window 1000).
"""

from __future__ import annotations

import json

import pytest
import torch

GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0
pytestmark = [pytest.mark.gpu, pytest.mark.slow,
              pytest.mark.skipif(GPUS == 0, reason="DeepSpeed fp16 needs a CUDA GPU (torch.cuda.is_available() is False)")]
STEPS = 6


def _run(tmp_path, stage: int, power: int):
    from trainer.config import TrainConfig
    from trainer.launch import launch

    conf = {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1, "train_batch_size": 2,
            "zero_optimization": {"stage": stage},
            "fp16": {"enabled": True, "loss_scale": 0, "initial_scale_power": power, "loss_scale_window": 1000,
                     "hysteresis": 2, "min_loss_scale": 1},
            "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "torch_adam": True}}}
    path = tmp_path / f"ds_zero{stage}_{power}.json"
    path.write_text(json.dumps(conf))
    r = launch(TrainConfig(model="tiny", nproc=1, steps=STEPS, warmup_steps=1, seq_len=64, timeout_s=600,
                           deepspeed_config=str(path), json_out=str(tmp_path / f"r{stage}_{power}.json")))
    assert r.status == "ok", r.error
    assert r.backend == "deepspeed" and r.config["precision"] == "fp16"
    return r


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_deepspeed_fp16_reports_its_skipped_steps_and_scales(tmp_path, stage):
    r = _run(tmp_path, stage, 30)
    assert r.skipped_steps == list(range(STEPS)), r.skipped_steps
    first = 2.0**30 if stage else 2.0**29  # ZeRO-1/2/3: hysteresis keeps the scale on the first overflow
    assert r.loss_scales == [first / 2**i for i in range(STEPS)], r.loss_scales
    clean = _run(tmp_path, stage, 16)
    assert clean.skipped_steps == [] and clean.loss_scales == [2.0**16] * STEPS, (clean.skipped_steps, clean.loss_scales)
    assert clean.losses[-1] < clean.losses[0]
