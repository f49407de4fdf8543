"""torch DDP with its default gradient_as_bucket_view=False (HF Trainer / accelerate, Composer, torchtitan's replicate,
an unknown script) keeps every gradient twice: in param.grad and in the Reducer's flat buckets; with True (the bundled
trainer) the gradients are the buckets. Two real gloo ranks on CPU wrap the bundled trainer's GPT (exactly the tiny
preset's parameters) in plain torch DDP both ways, under autocast (fp32 parameters, fp32 gradients) and in pure bf16,
and count the bytes of the distinct storages that hold gradients (param.grad and the buckets DDP all-reduces, seen by a
comm hook that all-reduces as DDP's default does). The planner's gradients plus its DDP bucket copy
(planner/comm_buffers.py ddp_bucket_copy_bytes) must match: the hf stack profile (ddp_bucket_view false) the default,
the bundled one (true) the views."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import torch.multiprocessing as mp

from hardware.catalog import load_catalog
from planner import memory
from planner.layout import Layout
from planner.presets import resolve_model
from planner.scenario import ExecutionPlan
from planner.settings import Settings
from planner.system import System

from tests.trainer.gloo_rank import gloo_rank

CASES = [(view, precision) for view in (False, True) for precision in ("bf16", "bf16_pure")]


def _held_bytes(model, view: bool, precision: str) -> dict:
    """Two steps of `model` under torch DDP; the distinct gradient-holding storages of the second."""
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
    from torch.nn.parallel import DistributedDataParallel

    from trainer.model import training_loss

    if precision == "bf16_pure":
        model.to(torch.bfloat16)
    ddp = DistributedDataParallel(model, gradient_as_bucket_view=view)
    buckets: dict[int, int] = {}

    def hook(state, bucket):
        store = bucket.buffer().untyped_storage()
        buckets[store.data_ptr()] = store.nbytes()
        return allreduce_hook(state, bucket)

    ddp.register_comm_hook(None, hook)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randint(0, model.spec.vocab, (2, 32))
    for _ in range(2):  # DDP rebuilds its buckets after the first iteration: count the second's
        buckets.clear()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
            loss = training_loss(model, ddp(x), x)
        loss.backward()
        grads = {p.grad.untyped_storage().data_ptr(): p.grad.untyped_storage().nbytes()
                 for p in model.parameters() if p.grad is not None}
        dtypes = sorted({str(p.grad.dtype) for p in model.parameters() if p.grad is not None})
        opt.step()
        opt.zero_grad(set_to_none=True)
    return {"held": sum({**grads, **buckets}.values()), "grads": sum(grads.values()), "n_grad_storages": len(grads),
            "n_buckets": len(buckets), "shared": len(grads.keys() & buckets.keys()), "dtypes": dtypes}


def _worker(rank: int, world: int, init_file: str, out_path: str) -> None:
    with gloo_rank(rank, world, init_file):
        from trainer.model import GPT

        out = {}
        for view, precision in CASES:
            torch.manual_seed(0)
            model = GPT(resolve_model("tiny"), attention="flash")
            out[f"{view}-{precision}"] = _held_bytes(model, view, precision) | {"n_params": sum(
                p.numel() for p in model.parameters())}
        if rank == 0:
            with open(out_path, "w") as f:
                json.dump(out, f)


def _planned(stack: str, precision: str) -> float:
    """The planner's gradient bytes plus DDP's bucket copy of them on one GPU (comm_buffers_bytes beyond the staging
    buffers comm_buffer_bytes counts for every DDP plan)."""
    spec = resolve_model("tiny")
    layout = Layout.from_plan(ExecutionPlan(dp=2, seq_len=32, micro_batch=2, stack=stack, sharding="none",
                                            precision=precision))
    system = System(gpu=load_catalog().gpus["h100-80gb"], gpus=2, gpus_per_node=2, host_ram_gib=24,
                    host_to_gpu_gbps=100, intranode_gbps=100, internode_gbps=100)
    out = memory.memory_arrays(spec, layout, system, Settings())
    copy = out["comm_buffers_bytes"] - memory.comm_buffer_bytes(spec, layout)
    return float(np.asarray(out["grads_bytes"] + copy).reshape(-1)[0])


@pytest.mark.slow
def test_default_ddp_holds_the_gradients_twice_as_the_planner_counts(tmp_path):
    out = tmp_path / "r.json"
    mp.spawn(_worker, args=(2, str(tmp_path / "init"), str(out)), nprocs=2, join=True)
    r = json.loads(out.read_text())
    assert r["False-bf16"]["n_params"] == resolve_model("tiny").n_params, r
    # the default: one storage per gradient and, apart from them, the buckets (as many bytes again)
    default, views = r["False-bf16"], r["True-bf16"]
    assert default["shared"] == 0 and default["n_grad_storages"] > 10 and default["dtypes"] == ["torch.float32"], r
    assert default["held"] == pytest.approx(2 * default["grads"], rel=0.01), r
    # gradient_as_bucket_view=True: the gradients are the buckets
    assert views["n_grad_storages"] <= 2 and views["shared"] == views["n_grad_storages"], r
    assert views["held"] == pytest.approx(default["grads"], rel=0.01), r
    for precision in ("bf16", "bf16_pure"):
        for view, stack in ((False, "hf"), (True, "bundled")):
            measured, planned = r[f"{view}-{precision}"]["held"], _planned(stack, precision)
            assert planned == pytest.approx(measured, rel=0.02), (precision, stack, measured, planned, r)
