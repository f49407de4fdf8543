"""Tensor parallelism of parallel attention+MLP blocks (trainer/backends/tp_parallel_block.py):
2 gloo ranks on CPU, tiny models. tp=2 must give tp=1's loss and gradients, and a block must issue
the TP collectives that planner/parallel_block.tp_calls_per_pass counts: one all-gather and one
reduce-scatter (sequence parallel) or one all-reduce per pass for a parallel block, two for a
sequential one. The collectives are the real ones, recorded as they run by a dispatch mode."""

from __future__ import annotations

import copy
import json
from collections import Counter

import pytest
import torch
import torch.multiprocessing as mp
from torch.distributed.tensor import DTensor
from torch.utils._python_dispatch import TorchDispatchMode

from planner.model import ModelSpec
from planner.parallel_block import tp_calls_per_pass

from tests.trainer.gloo_rank import gloo_rank

B, S, H = 2, 8, 32
CASES = {  # name: (ModelSpec fields, sequence parallel)
    "parallel_1norm_sp": (dict(parallel_block=True, norms_per_layer=1), True),
    "parallel_1norm_nosp": (dict(parallel_block=True, norms_per_layer=1), False),
    "parallel_2norm_sp": (dict(parallel_block=True, mlp="swiglu", norm="rmsnorm", position="rope"), True),
    "parallel_2norm_nosp": (dict(parallel_block=True, bias=False, norm="rmsnorm"), False),
    "parallel_2norm_layernorm_sp": (dict(parallel_block=True), True),
    "sequential_sp": (dict(), True),
    "sequential_nosp": (dict(), False),
}


def _spec(fields: dict) -> ModelSpec:
    return ModelSpec(**({"n_layers": 2, "hidden": H, "n_heads": 4, "vocab": 64, "max_positions": S} | fields))


NOT_COLLECTIVES = ("wait_tensor", "_wrap_tensor_autograd")  # bookkeeping ops of the same namespace


class CountCollectives(TorchDispatchMode):
    """Counts the functional collectives that run, by kind, with at least `min_numel` elements
    (the activation-sized ones: the norms' and biases' weight-gradient reductions are smaller)."""

    def __init__(self, min_numel: int):
        super().__init__()
        self.min_numel, self.counts = min_numel, Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if any(issubclass(t, DTensor) for t in types):
            return NotImplemented  # let DTensor run first and issue its collectives (as CommDebugMode does)
        name = func.overloadpacket.__name__
        collective = func.namespace == "_c10d_functional" and name not in NOT_COLLECTIVES
        if collective and args[0].numel() >= self.min_numel:
            self.counts[name] += 1
        return func(*args, **(kwargs or {}))


def _grad(p: torch.Tensor) -> torch.Tensor:
    return p.grad.full_tensor() if hasattr(p.grad, "full_tensor") else p.grad


def _case(fields: dict, sp: bool, mesh) -> dict:
    from trainer.backends.tensor_parallel import align_grad_placements, apply_tensor_parallel, parallel_loss
    from trainer.model import GPT, loss_fn

    torch.manual_seed(0)
    ref = GPT(_spec(fields))
    model = copy.deepcopy(ref)
    x, y = torch.randint(0, 64, (B, S)), torch.randint(0, 64, (B, S))
    ref_loss = loss_fn(ref(x), y)
    ref_loss.backward()
    apply_tensor_parallel(model, mesh, sequence_parallel=sp)
    loss = parallel_loss(model(x), y)
    with torch.distributed.tensor.parallel.loss_parallel():
        loss.backward()
    align_grad_placements(model.parameters())
    ref_grads = dict(ref.named_parameters())
    grad_err = max((_grad(p) - ref_grads[n].grad).abs().max().item() for n, p in model.named_parameters())
    # one block alone: its input is this rank's sequence shard (sp) or the full stream
    t = mesh.size()
    h = torch.randn(B, S // t if sp else S, H, requires_grad=True)
    fwd, bwd = CountCollectives(B * (S // t) * H), CountCollectives(B * (S // t) * H)
    with fwd:
        out = model.blocks[0](h)
    with bwd:
        out.square().sum().backward()
    return {"ref_loss": ref_loss.item(), "tp_loss": loss.item(), "grad_err": grad_err,
            "fwd": dict(fwd.counts), "bwd": dict(bwd.counts)}


def _worker(rank: int, world: int, init_file: str, out_path: str) -> None:
    with gloo_rank(rank, world, init_file):
        from torch.distributed.device_mesh import init_device_mesh

        mesh = init_device_mesh("cpu", (world,))
        results = {name: _case(fields, sp, mesh) for name, (fields, sp) in CASES.items()}
        if rank == 0:
            with open(out_path, "w") as f:
                json.dump(results, f)


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("tp_parallel_block")
    out = tmp / "results.json"
    mp.spawn(_worker, args=(2, str(tmp / "init"), str(out)), nprocs=2, join=True)
    return json.loads(out.read_text())


@pytest.mark.parametrize("name", CASES)
def test_tp2_matches_tp1(results, name):
    r = results[name]
    assert r["tp_loss"] == pytest.approx(r["ref_loss"], rel=1e-5)
    assert r["grad_err"] < 1e-5, r


KNOWN_GAPS = {  # DTensor's layer_norm backward all-reduces a partial dY: one all-reduce per norm
    "parallel_2norm_layernorm_sp": "two LayerNorms on the gathered input: backward AG + 2 all-reduces, not AG + RS",
}


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.xfail(reason=KNOWN_GAPS[n], strict=True))
                                  if n in KNOWN_GAPS else n for n in CASES])
def test_block_collectives_are_the_planners(results, name):
    fields, sp = CASES[name]
    k = int(tp_calls_per_pass(_spec(fields)))
    assert k == (1 if fields.get("parallel_block") else 2)
    expected = {"all_gather_into_tensor": k, "reduce_scatter_tensor": k} if sp else {"all_reduce": k}
    r = results[name]
    assert (r["fwd"], r["bwd"]) == (expected, expected)
