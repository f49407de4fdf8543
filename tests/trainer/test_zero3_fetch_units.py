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
    hf = Layout.from_plan(ExecutionPlan(dp=8, seq_len=2048, micro_batch=1, sharding="zero3", stack="hf"))
    assert float(np.asarray(zero3.block_calls(moe.dense_view(spec), hf, spec)).item()) > 2 * max(per_block)
