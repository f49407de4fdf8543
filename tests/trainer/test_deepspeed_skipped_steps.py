"""The DeepSpeed backend reports the steps DeepSpeed skipped and its fp16 loss scale (trainer/backends/
deepspeed_scaling.py) in the fields the other backends fill (base.Engine: skipped_steps, loss_scales).

DeepSpeed refuses fp16 on this CPU ("Type fp16 is not supported on your device": its CPU accelerator's
is_fp16_supported needs mkldnn fp16), so the fp16 runs are tests/trainer/test_gpu_deepspeed_fp16.py, skipped without
CUDA. Here, real DeepSpeed engines on one gloo rank in bf16 / fp32, where DeepSpeed skips a step whose gradients are not
finite just the same (ZeRO-0 bf16's FP16_UnfusedOptimizer and the ZeRO-1/2/3 optimizers; runtime/engine.py
_take_model_step counts it): an infinite loss on one step must be reported as that step skipped, and the weights must
show DeepSpeed really skipped it. Before, the DeepSpeed backend reported no skipped step at all.
"""

from __future__ import annotations

import json

import pytest
import torch
import torch.multiprocessing as mp

from tests.trainer.gloo_rank import gloo_rank

pytestmark = pytest.mark.slow
INF_STEP, STEPS = 1, 4


DS_ENV = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1"}  # DeepSpeed reads them


def _weights(module) -> list[torch.Tensor]:
    # ZeRO-3 leaves each parameter's partition in ds_tensor (the whole of it on one rank)
    return [getattr(p, "ds_tensor", p).detach().float().clone() for p in module.parameters()]


def _reader_worker(rank: int, init_file: str, out: str) -> None:
    with gloo_rank(rank, 1, init_file, DS_ENV):
        import deepspeed

        from trainer.backends.deepspeed_scaling import StepDecisions

        record = {}
        for stage in (0, 1, 2, 3):
            torch.manual_seed(0)
            model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 1))
            conf = {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1, "train_batch_size": 2,
                    "zero_optimization": {"stage": stage}, "bf16": {"enabled": True},
                    "optimizer": {"type": "AdamW", "params": {"lr": 1e-2, "torch_adam": True}}}
            engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=conf)
            decisions, steps = StepDecisions(engine), []
            for step in range(STEPS):
                before = _weights(engine.module)
                loss = engine(torch.randn(2, 8, dtype=torch.bfloat16)).float().pow(2).mean()
                engine.backward(loss * float("inf") if step == INF_STEP else loss)
                engine.step()
                skipped, scale = decisions.read()
                moved = any(not torch.equal(a, b) for a, b in zip(before, _weights(engine.module)))
                steps.append({"skipped": skipped, "scale": scale, "moved": moved,
                              "applied": engine.was_step_applied(), "optimizer": type(engine.optimizer).__name__})
            record[stage] = steps
        with open(out, "w") as f:
            json.dump(record, f)


def test_the_reader_sees_deepspeeds_skipped_step_on_every_zero_stage(tmp_path):
    out = tmp_path / "reader.json"
    mp.spawn(_reader_worker, args=(str(tmp_path / "init"), str(out)), nprocs=1, join=True)
    record = json.loads(out.read_text())
    for stage, steps in record.items():
        assert [s["skipped"] for s in steps] == [s == INF_STEP for s in range(STEPS)], (stage, steps)
        # what DeepSpeed did, seen independently: the skipped step left the weights, the others moved them
        assert [s["moved"] for s in steps] == [not s["skipped"] for s in steps], (stage, steps)
        assert [s["applied"] for s in steps] == [not s["skipped"] for s in steps], (stage, steps)
        # bf16: the 16-bit optimizers' static scale (LossScaler(1)); no dynamic scaling
        assert {s["scale"] for s in steps} == {1.0}, (stage, steps)
    assert record["0"][0]["optimizer"] == "FP16_UnfusedOptimizer"
    assert record["3"][0]["optimizer"] == "DeepSpeedZeroOptimizer_Stage3"


def _engine_worker(rank: int, init_file: str, out: str, runs: list[dict]) -> None:
    with gloo_rank(rank, 1, init_file, DS_ENV):
        from trainer.config import TrainConfig
        from trainer.data import Batches
        from trainer.loop import build

        record = []
        device = torch.device("cpu")
        for kw in runs:
            cfg = TrainConfig(**({"model": "tiny", "nproc": 1, "steps": STEPS, "warmup_steps": 1, "seq_len": 32} | kw))
            spec, model, engine = build(cfg, device)
            poison = {"on": False}
            engine.module.register_forward_hook(lambda m, i, o: o * float("inf") if poison["on"] else None)
            batches = Batches("synthetic", spec.vocab, engine.micro_batch, cfg.plan.seq_len, seed=0)
            moved = []
            for step in range(STEPS):
                poison["on"] = step == INF_STEP
                before = _weights(engine.module)
                engine.train_step(batches, device, False)
                moved.append(any(not torch.equal(a, b) for a, b in zip(before, _weights(engine.module))))
            record.append({"backend": engine.name, "skipped_steps": engine.skipped_steps,
                           "loss_scales": engine.loss_scales, "scales_losses": engine.scales_losses(),
                           "stats": engine.scaling_stats(), "moved": moved, "grad_accum": engine.grad_accum})
        with open(out, "w") as f:
            json.dump(record, f)


RUNS = [dict(sharding="zero1", precision="bf16"), dict(sharding="zero2", precision="bf16", grad_accum=2),
        dict(sharding="zero3", precision="bf16"), dict(sharding="zero2", precision="fp32", optimizer="sgd")]


def test_the_deepspeed_backend_reports_the_step_deepspeed_skipped(tmp_path):
    """The trainer's own DeepSpeedEngine (the knobs' config, its train_step): the poisoned step is listed, 0-based, and
    no loss scales outside fp16 (the result's loss_scales stay None)."""
    out = tmp_path / "engine.json"
    mp.spawn(_engine_worker, args=(str(tmp_path / "init"), str(out), RUNS), nprocs=1, join=True)
    record = json.loads(out.read_text())
    for kw, r in zip(RUNS, record):
        assert r["backend"] == "deepspeed" and r["grad_accum"] == kw.get("grad_accum", 1), (kw, r)
        assert r["skipped_steps"] == [INF_STEP], (kw, r)
        assert r["moved"] == [s != INF_STEP for s in range(STEPS)], (kw, r)
        assert r["loss_scales"] == [] and r["scales_losses"] is False, (kw, r)
        assert r["stats"] == {"skipped_steps": [INF_STEP], "loss_scale": None}, (kw, r)
