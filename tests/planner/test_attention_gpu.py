"""Which attention kernels a GPU can run (catalog `attention_kernels`, planner/rules.py `attention_gpu`):
FlashAttention-2 and cuDNN fused attention need sm80+, so a V100 plan cannot name them."""

from __future__ import annotations

import pytest

from hardware.catalog import load_catalog
from planner.api import estimate
from planner.errors import PlanError
from planner.run_columns import attention_of
from planner.scenario import Scenario
from planner.resolve import resolve_system


def _scenario(gpu: str, attention: str) -> Scenario:
    return Scenario(model="llama2-7b", gpu=gpu, gpus=8, seq_len=2048, global_batch=64, precision="fp16",
                    attention=attention)


@pytest.mark.parametrize("kernel", ["flash2", "cudnn"])
def test_v100_refuses_kernels_that_need_ampere(kernel: str) -> None:
    with pytest.raises(PlanError, match="cannot run this attention kernel"):
        estimate(_scenario("v100-32gb", kernel), top=1)


@pytest.mark.parametrize("gpu,kernel", [("v100-32gb", "flash"), ("v100-32gb", "eager"), ("a100-80gb", "flash2"),
                                        ("mi300x", "flash2")])
def test_kernels_that_run_are_planned(gpu: str, kernel: str) -> None:
    assert estimate(_scenario(gpu, kernel), top=1).best.fits


def test_a_v100_row_naming_flash_attention_2_gets_the_fused_kernel_that_runs() -> None:
    system = resolve_system(Scenario(model="llama2-7b", gpu="v100-32gb"), load_catalog())
    notes: list[str] = []
    row = {"id": "x", "notes": "FlashAttention-2", "precision": "fp16", "framework": "megatron"}
    assert attention_of(row, system, notes) == "flash" and "does not run" in notes[0]
    a100 = resolve_system(Scenario(model="llama2-7b", gpu="a100-80gb"), load_catalog())
    assert attention_of(row, a100, []) == "flash2"
