"""The bundled trainer's modules are the ZeRO-3 fetch units planner/zero3.py counts for the bundled stack: DeepSpeed
gathers, per submodule, its own parameters in one all_gather_coalesced (runtime/zero/partitioned_param_coordinator.py
fetch_sub_module: iter_params(module, recurse=False)), parameters under stage3_param_persistence_threshold stay
resident. Built on the meta device (no memory), every block of real MoE presets."""

import numpy as np
import pytest
import torch

from planner import moe, zero3
from planner.layout import Layout
from planner.presets import resolve_model
from planner.scenario import ExecutionPlan
from tests.trainer.zero3_probe import ENGINE, run_probe
from trainer.model import GPT


def _fetching_modules(block, threshold: int) -> int:
    """Submodules of `block` owning a parameter ZeRO-3 partitions (above the persistence threshold)."""
    return sum(1 for m in block.modules() if any(p.numel() > threshold for p in m.parameters(recurse=False)))


@pytest.mark.parametrize("preset", ["mixtral-8x7b", "qwen3-30b-a3b", "llama4-maverick", "olmoe-1b-7b"])
def test_bundled_fetch_calls_are_the_trainers_modules(preset):
    spec = resolve_model(preset)
    with torch.device("meta"):
        model = GPT(spec)
    threshold = zero3.PERSISTENCE_THRESHOLD_PER_HIDDEN * spec.hidden
    per_block = [_fetching_modules(b, threshold) for b in model.blocks]
    layout = Layout.from_plan(ExecutionPlan(dp=8, seq_len=2048, micro_batch=1, sharding="zero3", stack="bundled"))
    planned = float(np.asarray(zero3.block_calls(moe.dense_view(spec), layout, spec)).item())
    assert planned == pytest.approx(sum(per_block) / len(per_block))
    # a stack keeping a module per expert would fetch far more often: the per-expert rule is not the trainer's
    per_expert = Layout.from_plan(ExecutionPlan(dp=8, seq_len=2048, micro_batch=1, sharding="zero3",
                                                stack="megatron_deepspeed"))
    assert float(np.asarray(zero3.block_calls(moe.dense_view(spec), per_expert, spec)).item()) > 2 * max(per_block)


# DeepSpeed ZeRO-3 on the trainer's model in one process over gloo: each fetch launch (one all_gather_coalesced of a
# submodule's unavailable parameters: PartitionedParameterCoordinator.__all_gather_params_) counted by a wrapper
# that calls through; parameters released after each use (max live / reuse distance 0, no prefetch bucket).
_RUN = """
import json, sys
import torch, deepspeed
from deepspeed.runtime.zero import partitioned_param_coordinator as ppc
from planner import moe, zero3
from planner.layout import Layout
from planner.model import ModelSpec
from planner.scenario import ExecutionPlan
from trainer.model import GPT

spec = ModelSpec(**json.loads(sys.argv[1]))
C = ppc.PartitionedParameterCoordinator
real = C._PartitionedParameterCoordinator__all_gather_params_
seen = {"fwd": 0, "bwd": 0}
def counted(self, params, forward, quantize=False):
    if any(p.ds_status == ppc.ZeroParamStatus.NOT_AVAILABLE for p in params):
        seen["fwd" if forward else "bwd"] += 1
    return real(self, params, forward, quantize)
C._PartitionedParameterCoordinator__all_gather_params_ = counted
deepspeed.init_distributed(dist_backend="gloo")
model = GPT(spec)
mb = 2
""" + ENGINE + """x = torch.randint(0, spec.vocab, (2, 32))
fwd = []
for _ in range(3):
    seen.update(fwd=0, bwd=0)
    out = engine(x)
    engine.backward((out[0] if isinstance(out, tuple) else out).float().mean())
    engine.step()
    fwd.append(seen["fwd"])
plans = {s: Layout.from_plan(ExecutionPlan(dp=1, seq_len=32, micro_batch=2, sharding="zero3", stack=s))
         for s in ("bundled", "megatron_deepspeed")}
planned = {s: float(zero3.gathers(moe.dense_view(spec), lay, spec)["calls_fwd"][0]) for s, lay in plans.items()}
json.dump({"fwd": fwd, "planned": planned}, open(sys.argv[2], "w"))
"""


@pytest.mark.slow
def test_deepspeed_zero3_fetches_the_stacked_experts_in_one_call(tmp_path):
    import json

    tiny = dict(name="tiny-moe", n_layers=2, hidden=64, n_heads=4, n_kv_heads=2, vocab=256, max_positions=64,
                position="rope", norm="rmsnorm", mlp="swiglu", bias=False, tied_embeddings=False, ffn_hidden=128,
                moe_experts=16, moe_top_k=2, moe_ffn_hidden=32)
    got = run_probe(_RUN, tmp_path / "fetches.json", json.dumps(tiny))
    # after the first step's trace: q, k, v, o, the router (16 x 64 > 10 x hidden) and ONE experts module per
    # layer, plus the embedding and the output layer: 2 x 6 + 2
    assert got["fwd"][1:] == [14, 14]
    assert got["planned"]["bundled"] == 14.0
    assert got["planned"]["megatron_deepspeed"] == 2 * (4 + 1 + 16 * 3) + 2  # a module per expert: not this trainer
