"""fp16 loss scaling through the bundled trainer's tensor- and pipeline-parallel backends
(trainer/backends/loss_scale.py): real gloo ranks on CPU, tiny models.

A tp / pp / tp x pp fp16 run must train as its one-rank DDP twin (torch's GradScaler) does: the same losses within the
trainer matrices' fp16 tolerance, the same skipped steps and the same scales. With a first scale of 2**20 the first
steps overflow; in the tp2 x pp2 run one pipeline stage finds an inf in its gradients while the other finds none (seen
per rank before the all-reduce), so every rank skipping the same steps is the all-reduced decision at work.
"""

from __future__ import annotations

import json
import os

import pytest
import torch
import torch.multiprocessing as mp

from validation.trainer_matrix4 import TOLERANCE

from tests.trainer.gloo_rank import gloo_rank

STEPS = 6


def _scaler_worker(rank: int, world: int, init_file: str, out_dir: str) -> None:
    with gloo_rank(rank, world, init_file):
        from trainer.backends.loss_scale import ModelParallelScaler

        record = {}
        for name in ("model_parallel", "grad_scaler"):
            p = torch.nn.Parameter(torch.ones(4))
            opt = torch.optim.SGD([p], lr=0.1)
            scaler = ModelParallelScaler(8.0, growth_interval=2) if name == "model_parallel" else \
                torch.amp.GradScaler("cpu", init_scale=8.0, growth_interval=2)
            steps = []
            for step in range(4):
                scaler.scale((p * (rank + 1)).sum()).backward()  # this rank's slice: gradient rank + 1
                if step == 0 and rank == world - 1:
                    p.grad[0] = float("inf")  # an overflow on ONE rank
                scaler.unscale_(opt)
                grad = p.grad.tolist()  # what clipping would read: unscaled
                before = p.detach().clone()
                scaler.step(opt)
                scaler.update()
                steps.append({"stepped": not torch.equal(before, p.detach()), "scale": float(scaler.get_scale()),
                              "grad": grad})
                opt.zero_grad(set_to_none=True)
            record[name] = steps
        with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
            json.dump(record, f)


def test_an_overflow_on_one_rank_skips_the_step_on_every_rank(tmp_path):
    mp.spawn(_scaler_worker, args=(2, str(tmp_path / "init"), str(tmp_path)), nprocs=2, join=True)
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    for r, rec in enumerate(ranks):
        steps = rec["model_parallel"]
        # step 0 skipped everywhere (scale 8 -> 4), then 2 clean steps grow it back (growth_interval 2)
        assert [s["stepped"] for s in steps] == [False, True, True, True], (r, steps)
        assert [s["scale"] for s in steps] == [4.0, 4.0, 8.0, 8.0], (r, steps)
        assert all(s["grad"] == [float(r + 1)] * 4 for s in steps[1:])  # unscaled before step (and clipping)
    # torch's GradScaler alone decides per rank: the rank without the inf stepped, the replicas drifted apart
    assert [rec["grad_scaler"][0]["stepped"] for rec in ranks] == [True, False]


# --- real trainer runs --------------------------------------------------------------------------------------------

BASE = dict(model="tiny", nproc=2, steps=STEPS, warmup_steps=1, seq_len=32, timeout_s=300, precision="fp16")
LAYOUTS = {
    "tp2": dict(tp=2, optimizer="sgd"),  # SGD: a gradient left scaled moves the weights 65536x (Adam would hide it)
    "pp2": dict(pp=2, grad_accum=2),
    "tp2pp2": dict(nproc=4, tp=2, pp=2, grad_accum=2),
}
_twins: dict = {}


def _run(tmp_path, name, **kw):
    from trainer.config import TrainConfig
    from trainer.launch import launch

    r = launch(TrainConfig(**(BASE | kw | {"json_out": str(tmp_path / f"{name}.json")})))
    assert r.status == "ok", r.error
    return r


def _twin(tmp_path, **kw):
    """The one-rank DDP run of the same model, data and knobs (torch's GradScaler)."""
    kw = {k: v for k, v in kw.items() if k not in ("tp", "pp")} | {"nproc": 1}
    key = json.dumps(kw, sort_keys=True)
    if key not in _twins:
        _twins[key] = _run(tmp_path, "twin", **kw)
    return _twins[key]


@pytest.mark.slow
@pytest.mark.parametrize("loss_scale", [2.0**16, 2.0**20], ids=["default_scale", "overflowing_scale"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_fp16_model_parallel_run_matches_its_ddp_twin(tmp_path, layout, loss_scale):
    kw = LAYOUTS[layout] | {"loss_scale": loss_scale}
    r, twin = _run(tmp_path, layout, **kw), _twin(tmp_path, **kw)
    assert r.backend == ("pipeline" if "pp" in kw else "tensor_parallel")
    assert max(abs(a - b) for a, b in zip(r.losses, twin.losses)) <= TOLERANCE["fp16"], (r.losses, twin.losses)
    assert r.skipped_steps == twin.skipped_steps and r.loss_scales == twin.loss_scales
    assert len(r.parallel.ranks) == r.world_size
    for rank in r.parallel.ranks:  # every rank took the same decisions
        assert rank.skipped_steps == twin.skipped_steps and rank.loss_scale == twin.loss_scales[-1], rank
    if loss_scale > 2.0**16:
        assert 0 < len(r.skipped_steps) < STEPS and r.skipped_steps[0] == 0  # the first step overflows, some train
        assert r.loss_scales[-1] < loss_scale
    else:
        assert r.skipped_steps == [] and r.losses[-1] < r.losses[0]


@pytest.mark.slow
def test_adafactor_runs_a_pipeline_without_dtensors(tmp_path):
    """pp with no sharding holds plain tensors: torch's Adafactor steps them (refused with tp or FSDP2 only)."""
    kw = dict(pp=2, grad_accum=2, optimizer="adafactor", precision="fp32")
    r = _run(tmp_path, "pp2-adafactor", **kw)
    assert r.losses == pytest.approx(_twin(tmp_path, **kw).losses, abs=TOLERANCE["fp32"])


def test_deepspeed_keeps_its_own_loss_scale(tmp_path):
    r = _bad(tmp_path, sharding="zero2", loss_scale=1024.0)
    assert r.startswith("loss_scale:") and "initial_scale_power" in r


def _bad(tmp_path, **kw) -> str:
    from planner.errors import PlanError
    from trainer.config import TrainConfig, validate_config

    with pytest.raises(PlanError) as e:
        validate_config(TrainConfig(**(BASE | kw)))
    return str(e.value)
