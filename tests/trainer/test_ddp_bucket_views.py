"""The bundled trainer's DDP keeps its gradients as views of the all-reduce buckets (gradient_as_bucket_view):
the memory planner/comm_buffers.py plans for DDP (2 x 25 MiB staging, no second copy of the gradients). Two real
gloo ranks on CPU run the trainer's own engine; the gradients must share a few flat bucket storages, and accumulate
and step exactly as before."""

from __future__ import annotations

import json

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from tests.trainer.gloo_rank import gloo_rank


def _worker(rank: int, world: int, init_file: str, out_path: str) -> None:
    with gloo_rank(rank, world, init_file):
        from trainer.config import TrainConfig
        from trainer.loop import build

        cfg = TrainConfig(model="tiny", nproc=world, steps=2, micro_batch=2, seq_len=32, sharding="none",
                          precision="bf16", grad_accum=2)
        device = torch.device("cpu")
        _, model, engine = build(cfg, device)
        torch.manual_seed(1 + rank)
        x = torch.randint(0, 64, (2, 32))
        losses = []
        for micro in range(2):
            last = micro == 1
            loss = engine.forward_loss(x, x, last)
            engine.backward(loss, last)
            losses.append(float(loss))
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        storages = {g.untyped_storage().data_ptr() for g in grads}
        # the gradients after the all-reduce: identical on both ranks
        flat = torch.cat([g.reshape(-1).float() for g in grads])
        same = torch.tensor([flat.sum().item()])
        gathered = [torch.zeros(1) for _ in range(world)]
        dist.all_gather(gathered, same)
        engine.after_micro(True)  # the optimizer step, then zero_grad(set_to_none)
        loss2 = engine.forward_loss(x, x, True)
        engine.backward(loss2, True)
        storages2 = {p.grad.untyped_storage().data_ptr() for p in model.parameters() if p.grad is not None}
        if rank == 0:
            with open(out_path, "w") as f:
                json.dump({"n_grads": len(grads), "n_storages": len(storages), "n_storages_after_step": len(storages2),
                           "sums": [t.item() for t in gathered], "losses": losses, "loss2": float(loss2)}, f)


def test_ddp_gradients_are_bucket_views(tmp_path):
    out = tmp_path / "r.json"
    mp.spawn(_worker, args=(2, str(tmp_path / "init"), str(out)), nprocs=2, join=True)
    r = json.loads(out.read_text())
    # tiny's gradients fit one or two 25 MiB buckets: a handful of flat storages, not one per parameter
    assert r["n_grads"] > 10 and r["n_storages"] <= 2, r
    assert r["n_storages_after_step"] <= 2, r  # zero_grad(set_to_none) then backward: views again
    assert r["sums"][0] == r["sums"][1], r  # all-reduced through the views
    assert all(l == l for l in r["losses"] + [r["loss2"]])
