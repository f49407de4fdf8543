"""Activation checkpointing, applied from outside the model: none / selective / full.

selective: recompute the attention core (scores, softmax, values) of every block
(Korthikanti et al. 2022, "selective activation recomputation"); full: recompute each whole
block from its input. Both use non-reentrant `torch.utils.checkpoint`.

Non-reentrant checkpointing keeps the region's inputs alive through the recompute closure,
not through saved-tensor hooks; `INPUT_OBSERVERS` lets the saved-bytes meter see them.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from trainer.model import GPT

INPUT_OBSERVERS: list[Callable[[torch.Tensor], None]] = []


class Checkpointed(nn.Module):
    """Runs `inner` under non-reentrant checkpointing (its activations are recomputed)."""

    def __init__(self, inner: nn.Module):
        super().__init__()
        self.inner = inner

    def forward(self, *args: torch.Tensor) -> torch.Tensor:
        if not torch.is_grad_enabled():
            return self.inner(*args)
        for observe in INPUT_OBSERVERS:
            for a in args:
                observe(a)
        return checkpoint(self.inner, *args, use_reentrant=False)


def apply_checkpointing(model: GPT, mode: str) -> None:
    """Wrap the model's modules in place; call before FSDP/DeepSpeed wrap the model."""
    if mode == "none":
        return
    if mode == "full":
        for i, block in enumerate(model.blocks):
            model.blocks[i] = Checkpointed(block)
        return
    assert mode == "selective", mode
    for block in model.blocks:
        block.attn.core = Checkpointed(block.attn.core)
