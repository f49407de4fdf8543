"""The bytes a real DeepSpeed ZeRO-1/2 engine holds at its optimizer step, against the planner's terms for the same
plan. Two gloo ranks on CPU build the bundled trainer's DeepSpeed engine (the tiny GPT, the knobs' config, torch_adam)
in bf16 and fp32 and, from a post-hook on the inner torch optimizer's second step (every state exists and the step's
fp32 gradient partition is still attached), walk the engine's, the ZeRO optimizer's and the model's tensors and sum
the distinct storages by role:

- params: the module's parameters (DeepSpeed flattens them into one bit16_groups_flat buffer): weights_bytes;
- master + Adam: the inner optimizer's params (single_partition_of_fp32_groups, a separate fp32 copy even in fp32)
  and state exp_avg / exp_avg_sq: optimizer_bytes;
- the fp32 gradient partition the step made (single_partition_of_fp32_groups[i].grad, deepspeed 0.19
  runtime/zero/stage_1_and_2.py step: flatten the partition's gradients, .to(fp32)): the planner's step copy
  (planner/memory_required.py step_only_bytes: 4P/N, in bf16 and in fp32 alike; before, none in fp32);
- by then the 16-bit gradients are freed (free_grad_in_param_list) and nothing else of size is held;
- as the engine's step begins (after backward and the boundary's reduce_gradients) only the partition's gradients are
  held, in ZeRO-1 as in ZeRO-2: the planner's gradients less the step's fp32 partition and, for ZeRO-1, the gradients
  outside the partition it counts through backward only (memory_required.zero1_reduced_grads_bytes; before, 2P held).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import torch.multiprocessing as mp

from hardware.catalog import load_catalog
from planner import memory
from planner.layout import Layout
from planner.memory_required import step_only_bytes, zero1_reduced_grads_bytes
from planner.presets import resolve_model
from planner.scenario import ExecutionPlan
from planner.settings import Settings
from planner.system import System

from tests.trainer.gloo_rank import gloo_rank

pytestmark = pytest.mark.slow
CASES = [(s, p) for s in ("zero1", "zero2") for p in ("bf16", "fp32")]


def _storages(obj, found: dict, seen: set, depth=0) -> None:
    """Every tensor storage reachable from `obj` through DeepSpeed/torch objects, lists and dicts: {data_ptr: nbytes}."""
    if depth > 6 or id(obj) in seen:
        return
    seen.add(id(obj))
    if isinstance(obj, torch.Tensor):
        store = obj.untyped_storage()
        if store.nbytes():
            found[store.data_ptr()] = store.nbytes()
        if obj.grad is not None:
            _storages(obj.grad, found, seen, depth + 1)
    elif isinstance(obj, dict):
        for v in list(obj.values()):
            _storages(v, found, seen, depth + 1)
    elif isinstance(obj, (list, tuple, set)):
        for v in obj:
            _storages(v, found, seen, depth + 1)
    elif isinstance(obj, torch.nn.Module):
        for t in list(obj.parameters()) + list(obj.buffers()):
            _storages(t, found, seen, depth + 1)
    elif hasattr(obj, "__dict__") and type(obj).__module__.split(".")[0] in ("deepspeed", "torch"):
        for k, v in list(vars(obj).items()):
            if k not in ("module", "_modules"):
                _storages(v, found, seen, depth + 1)


def _census(engine) -> dict:
    inner = engine.optimizer.optimizer  # the torch AdamW DeepSpeed steps its fp32 partition with
    params, master, states, grads, everything = {}, {}, {}, {}, {}
    for p in engine.module.parameters():
        params[p.untyped_storage().data_ptr()] = p.untyped_storage().nbytes()
    for group in inner.param_groups:
        for p in group["params"]:
            master[p.untyped_storage().data_ptr()] = p.untyped_storage().nbytes()
            if p.grad is not None:
                grads[p.grad.untyped_storage().data_ptr()] = p.grad.untyped_storage().nbytes()
            for t in inner.state[p].values():
                if torch.is_tensor(t) and t.numel() > 1:
                    states[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
    seen: set = set()
    for root in (engine.module, engine.optimizer, engine):
        _storages(root, everything, seen)
    known = params | master | states | grads
    return {"params": sum(params.values()), "optimizer": sum(master.values()) + sum(states.values()),
            "fp32_grads": sum(grads.values()), "other": sum(v for k, v in everything.items() if k not in known),
            "all": sum(everything.values()), "param_grads": sum(p.grad is not None for p in engine.module.parameters()),
            "optimizer_type": type(engine.optimizer).__name__}


def _grads_at_step(engine) -> dict:
    """The gradients held as the engine's step begins (after backward and the boundary's reduce): param.grad and the
    ZeRO optimizer's averaged_gradients, distinct storages; and the largest parameter's gradient bytes."""
    held: dict = {}
    _storages([p.grad for p in engine.module.parameters() if p.grad is not None], held, set())
    _storages(list(engine.optimizer.averaged_gradients.values()), held, set())
    biggest = max(p.numel() * p.element_size() for p in engine.module.parameters())
    return {"grads_at_step": sum(held.values()), "largest_grad": biggest}


def _worker(rank: int, world: int, init_file: str, out_path: str) -> None:
    env = {"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_WORLD_SIZE": str(world)}
    with gloo_rank(rank, world, init_file, env):
        from trainer.config import TrainConfig
        from trainer.data import Batches
        from trainer.loop import build

        device, out = torch.device("cpu"), {}
        for sharding, precision in CASES:
            cfg = TrainConfig(model="tiny", nproc=world, steps=2, warmup_steps=1, seq_len=32, stack="bundled",
                              sharding=sharding, precision=precision)
            spec, model, eng = build(cfg, device)
            seen: dict = {}
            hook = eng.engine.optimizer.optimizer.register_step_post_hook(lambda *a: seen.update(_census(eng.engine)))
            engine_step = eng.engine.step
            eng.engine.step = lambda *a, **k: (seen.update(_grads_at_step(eng.engine)), engine_step(*a, **k))[1]
            batches = Batches("synthetic", spec.vocab, eng.micro_batch, cfg.plan.seq_len, seed=rank)
            for _ in range(2):  # the second step: Adam's states exist
                eng.train_step(batches, device, False)
            hook.remove()
            out[f"{sharding}-{precision}"] = seen | {"n_params": sum(p.numel() for p in eng.engine.module.parameters())}
        if rank == 0:
            with open(out_path, "w") as f:
                json.dump(out, f)


def _planned(sharding: str, precision: str) -> dict:
    spec = resolve_model("tiny")
    layout = Layout.from_plan(ExecutionPlan(dp=2, seq_len=32, micro_batch=2, stack="bundled", sharding=sharding,
                                            precision=precision))
    system = System(gpu=load_catalog().gpus["h100-80gb"], gpus=2, gpus_per_node=2, host_ram_gib=24,
                    host_to_gpu_gbps=100, intranode_gbps=100, internode_gbps=100)
    out = memory.memory_arrays(spec, layout, system, Settings())
    fp32_part, step_peak = step_only_bytes(spec, layout, system)
    reduced = zero1_reduced_grads_bytes(spec, layout, system)
    one = lambda v: float(np.asarray(v).reshape(-1)[0])  # noqa: E731
    # the step's fp32 gradient copy: the fp32 partition in mixed precision; in fp32 the step's whole peak (its
    # flattened source is that fp32 tensor itself)
    return {"params": one(out["weights_bytes"]), "optimizer": one(out["optimizer_bytes"]),
            "fp32_grads": one(fp32_part) or one(step_peak),
            "grads_at_step": one(out["grads_bytes"]) - one(fp32_part) - one(reduced)}


def test_deepspeed_zero12_step_census_matches_the_planner(tmp_path):
    out = tmp_path / "r.json"
    mp.spawn(_worker, args=(2, str(tmp_path / "init"), str(out)), nprocs=2, join=True)
    r = json.loads(out.read_text())
    n = resolve_model("tiny").n_params
    for sharding, precision in CASES:
        m, planned = r[f"{sharding}-{precision}"], _planned(sharding, precision)
        assert m["n_params"] == n and m["optimizer_type"] == "DeepSpeedZeroOptimizer", m
        assert m["param_grads"] == 0, m  # the 16-bit gradients are freed before the inner step
        assert m["other"] < 0.01 * m["all"], m  # nothing else of size (buckets are 16384 elements here)
        for role in ("params", "optimizer", "fp32_grads"):
            assert m[role] == pytest.approx(planned[role], rel=0.01), (sharding, precision, role, m, planned)
        # as the step begins: the partition's gradients only (ZeRO-1 too: reduce_gradients freed the others); the
        # parameter straddling the partition's end keeps its whole gradient (at most the largest one more)
        assert planned["grads_at_step"] <= m["grads_at_step"] <= planned["grads_at_step"] + m["largest_grad"], (
            sharding, precision, m, planned)
