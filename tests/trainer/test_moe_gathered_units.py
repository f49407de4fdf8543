"""The module a sharded plan gathers at once, for the bundled trainer's MoE model, against the real thing: DeepSpeed's own
largest gathered module of the bundled GPT (deepspeed/runtime/zero/stage3.py `model_to_params`: the largest module's
direct parameters, here trainer/experts.py's one module of stacked experts) and the bundled block FSDP2 wraps (every
expert inside it). The planner's memory holds that unit's 16-bit weights and gradients (planner/moe_memory.py)."""

import numpy as np
import pytest

from planner import memory, moe
from planner.layout import Layout
from planner.model import ModelSpec
from planner.resolve import resolve_system
from planner.scenario import ExecutionPlan, Scenario
from planner.settings import Settings
from tests.trainer.zero3_probe import ENGINE, run_probe
from trainer.model import GPT

# experts (8 x 3 x 64 x 96 = 147k) far above the embedding (256 x 64) and the attention linears
SPEC = ModelSpec(name="tiny-moe", n_layers=2, hidden=64, n_heads=4, n_kv_heads=2, vocab=256, max_positions=64,
                 position="rope", norm="rmsnorm", mlp="swiglu", bias=False, tied_embeddings=False, ffn_hidden=128,
                 moe_experts=8, moe_top_k=2, moe_ffn_hidden=96)
SYSTEM = resolve_system(Scenario(gpu="h100-80gb", gpus=8))
C = 2.0  # bf16: the gathered module's bytes per parameter


def _mem(stack: str, sharding: str) -> dict:
    plan = ExecutionPlan(dp=8, seq_len=64, micro_batch=1, sharding=sharding, stack=stack, precision="bf16")
    return memory.memory_arrays(SPEC, Layout.from_plan(plan), SYSTEM, Settings())


def _extra(key: str, stack: str, sharding: str, other: str) -> float:
    """Bytes of `key` that `stack` holds beyond `other` (a stack keeping a module per expert: the view's unit)."""
    return float(np.asarray(_mem(stack, sharding)[key] - _mem(other, sharding)[key]).item())


def test_zero3_gathers_the_bundled_stacked_experts_as_deepspeed_sizes_its_largest_module():
    from deepspeed.runtime.zero.stage3 import model_to_params

    _, largest = model_to_params(GPT(SPEC))
    assert largest == SPEC.moe_experts * moe.mlp_params(SPEC, SPEC.moe_ffn_hidden)  # the Experts module
    view_unit = moe.dense_view(SPEC).largest_module_params
    assert largest > 2 * view_unit
    for key in ("weights_bytes", "grads_bytes"):  # megatron_deepspeed: DeepSpeed-MoE, a module per expert
        assert _extra(key, "bundled", "zero3", "megatron_deepspeed") == pytest.approx(C * (largest - view_unit))


def test_fsdp_unit_is_the_bundled_block_with_every_expert():
    model = GPT(SPEC)
    block = sum(p.numel() for p in model.blocks[0].parameters())  # FSDP2 wraps each block (experts inside)
    assert block == max(sum(p.numel() for p in b.parameters()) for b in model.blocks)
    view = moe.dense_view(SPEC)
    view_unit = view.largest_layer_params
    assert block > view_unit
    # current + prefetched unit in weights, one unsharded unit of gradients before its reduce-scatter
    assert _extra("weights_bytes", "bundled", "fsdp_full_shard", "fsdp") == pytest.approx(2 * C * (block - view_unit))
    assert _extra("grads_bytes", "bundled", "fsdp_full_shard", "fsdp") == pytest.approx(C * (block - view_unit))


# Real DeepSpeed ZeRO-3 on the bundled model in one process over gloo: the parameters of each fetch (one
# all_gather_coalesced of a submodule's unavailable parameters: PartitionedParameterCoordinator.__all_gather_params_)
# summed by a wrapper that calls through; the largest is what GPU memory holds gathered at once.
_RUN = """
import json, sys
import torch, deepspeed
from deepspeed.runtime.zero import partitioned_param_coordinator as ppc
from planner.model import ModelSpec
from trainer.model import GPT

spec = ModelSpec(**json.loads(sys.argv[1]))
C = ppc.PartitionedParameterCoordinator
real = C._PartitionedParameterCoordinator__all_gather_params_
largest = {"fwd": 0, "bwd": 0}
def sized(self, params, forward, quantize=False):
    n = sum(p.ds_numel for p in params if p.ds_status == ppc.ZeroParamStatus.NOT_AVAILABLE)
    key = "fwd" if forward else "bwd"
    largest[key] = max(largest[key], n)
    return real(self, params, forward, quantize)
C._PartitionedParameterCoordinator__all_gather_params_ = sized
deepspeed.init_distributed(dist_backend="gloo")
model = GPT(spec)
mb = 2
""" + ENGINE + """x = torch.randint(0, spec.vocab, (2, 32))
for _ in range(2):
    out = engine(x)
    engine.backward((out[0] if isinstance(out, tuple) else out).float().mean())
    engine.step()
json.dump(largest, open(sys.argv[2], "w"))
"""


@pytest.mark.slow
def test_deepspeed_zero3_gathers_the_stacked_experts_at_once_as_planned(tmp_path):
    got = run_probe(_RUN, tmp_path / "largest.json", SPEC.model_dump_json())
    planned = moe.dense_view(SPEC).largest_module_params + _extra("weights_bytes", "bundled", "zero3",
                                                                  "megatron_deepspeed") / C
    assert got["fwd"] == got["bwd"] == planned == SPEC.moe_experts * moe.mlp_params(SPEC, SPEC.moe_ffn_hidden)
