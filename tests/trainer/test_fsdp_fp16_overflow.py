"""fp16 under FSDP2 (trainer/backends/fsdp.py FSDPEngine): an overflow in ONE rank's gradient shard skips the step on
every rank. Real gloo ranks on CPU, the trainer's own engine (trainer/loop.py build) and step (Engine.train_step).

After the last backward, before the optimizer step, rank 0 writes an inf into its local shard of one gradient (the
trainer's hook between the two, Engine.after_micro); rank 1's shards stay finite (recorded). A per-rank decision
(GradScaler on plain tensors) skips on rank 0 only. Layouts: full shard over a 1-D mesh, full shard with
CPUOffloadPolicy (the gradient shards on the CPU), and hybrid sharding over the (replicate 2, shard 1) mesh the
trainer builds for 2 ranks on one node. torch's GradScaler, which the engine ran before, decided together over the
1-D mesh (DTensor's dispatcher all-reduces its flag over the sharded mesh dimension) but not under hybrid sharding
(the replicate dimension is left out): there rank 1 stepped at the scale 2**16 while rank 0 skipped and halved it, and
the replicas' weights drifted apart.
"""

from __future__ import annotations

import json
import os

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from tests.trainer.gloo_rank import gloo_rank

LAYOUTS = {
    "full_shard": dict(sharding="fsdp_full_shard"),
    "full_shard_offload": dict(sharding="fsdp_full_shard", offload="optimizer+params"),
    "hybrid": dict(sharding="fsdp_hybrid"),
}
STEPS = 3
SCALE = 2.0**16


def _run_layout(rank: int, world: int, kw: dict) -> dict:
    from trainer.config import TrainConfig
    from trainer.data import Batches
    from trainer.loop import build
    from trainer.memory import local_tensor

    cfg = TrainConfig(model="tiny", nproc=world, steps=STEPS, seq_len=32, precision="fp16", loss_scale=SCALE, **kw)
    device = torch.device("cpu")
    spec, model, engine = build(cfg, device)
    batches = Batches("synthetic", spec.vocab, engine.micro_batch, cfg.plan.seq_len, seed=engine.dp_rank)
    params = list(engine.module.parameters())
    record: dict = {"finite": [], "stepped": [], "scales": []}
    step_after_micro = engine.after_micro

    def inject_then_step(last: bool) -> None:
        if last and len(record["finite"]) == 0 and rank == 0:
            local_tensor(params[0].grad).view(-1)[0] = float("inf")  # an overflow in rank 0's shard only
        if last:
            record["finite"].append(all(bool(torch.isfinite(local_tensor(p.grad)).all()) for p in params))
            before = [local_tensor(p).detach().clone() for p in params]
        step_after_micro(last)
        if last:
            record["stepped"].append(any(not torch.equal(b, local_tensor(p).detach()) for b, p in zip(before, params)))
            record["scales"].append(engine.scaler.get_scale())

    engine.after_micro = inject_then_step
    for _ in range(STEPS):
        engine.train_step(batches, device, measure=False)
    record["scaling_stats"] = engine.scaling_stats()  # what the result reports for this rank
    # every rank's copy of the weights: the replicas of hybrid sharding must hold the same ones
    mine = torch.cat([local_tensor(p).detach().float().reshape(-1) for p in params])
    copies = [torch.empty_like(mine) for _ in range(world)]
    dist.all_gather(copies, mine)
    record["same_weights_as_rank1"] = torch.equal(copies[0], copies[1])
    record["placements"] = str(params[0].grad.placements) if params[0].grad is not None else \
        str(getattr(params[0], "placements", None))
    return record


def _worker(rank: int, world: int, init_file: str, out_dir: str) -> None:
    with gloo_rank(rank, world, init_file):
        record = {name: _run_layout(rank, world, kw) for name, kw in LAYOUTS.items()}
        with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
            json.dump(record, f)


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fsdp_fp16")
    mp.spawn(_worker, args=(2, str(tmp / "init"), str(tmp)), nprocs=2, join=True)
    return [json.loads((tmp / f"rank{r}.json").read_text()) for r in range(2)]


@pytest.mark.slow
@pytest.mark.parametrize("layout", LAYOUTS)
def test_an_overflow_in_one_ranks_shard_skips_the_step_on_every_rank(ranks, layout):
    r0, r1 = ranks[0][layout], ranks[1][layout]
    assert r0["placements"] == ("(Replicate(), Shard(dim=0))" if layout == "hybrid" else "(Shard(dim=0),)")
    # the overflow is rank 0's alone: a per-rank check would skip there and step on rank 1
    assert r0["finite"] == [False, True, True] and r1["finite"] == [True, True, True]
    for r in (r0, r1):
        assert r["stepped"] == [False, True, True], (layout, r)  # step 0 skipped everywhere, then both train
        assert r["scales"] == [SCALE / 2] * STEPS, (layout, r)  # halved once, no growth before 2000 clean steps
        assert r["scaling_stats"] == {"skipped_steps": [0], "loss_scale": SCALE / 2}
    if layout == "hybrid":  # the replicas still hold the same weights
        assert r0["same_weights_as_rank1"] and r1["same_weights_as_rank1"]
