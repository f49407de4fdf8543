"""The Megatron-LM export's attention kernel (planner/exports/attention_backend.py): --attention-backend set to the
kernel planner/attention_kernel.py timed the plan with. Before, every fused plan was written --use-flash-attn, which
Megatron-Core reads for no kernel (Transformer Engine then ran cuDNN on Hopper whatever the plan timed), and an eager
plan was written nothing (a fused kernel ran)."""

import numpy as np
import pytest
from typer.testing import CliRunner

from hardware.catalog import load_catalog
from plan_cli.main import app
from planner import attention_kernel
from planner.errors import PlanError
from planner.exports.attention_backend import NVTE
from planner.exports.megatron_args import megatron_args
from planner.flops import attention_efficiency
from planner.layout import ATTN
from planner.presets import resolve_model
from planner.scenario import ExecutionPlan
from tests.exports.test_export_megatron import CHOICES, MEGATRON_FLAG_SOURCES, check_flags, values

CATALOG = load_catalog()


def _backend(attention: str, stack: str, gpu: str | None, preset: str = "llama3-8b", **kw):
    plan = ExecutionPlan(dp=8, sharding="zero1", seq_len=4096, attention=attention, stack=stack, **kw)
    notes: list[str] = []
    args = megatron_args(plan, resolve_model(preset), gpu=CATALOG.gpus[gpu] if gpu else None, notes=notes)
    if not resolve_model(preset).moe_experts:  # MoE / MLA flags are checked in their own tests (test_export_mla.py)
        check_flags(args)
    assert "--use-flash-attn" not in args
    return values(args, "--attention-backend"), notes


@pytest.mark.parametrize("attention, stack, gpu, backend", [
    ("flash", "megatron", "h100-80gb", "fused"),  # the megatron profile's cudnn_attention on a GPU with a cuDNN curve
    ("flash", "megatron", "h200-141gb", "fused"),
    ("flash", "megatron", "a100-80gb", "flash"),  # no cuDNN curve: timed as FlashAttention-2
    ("flash", "megatron", "h100-pcie-80gb", "flash"),
    ("flash", "generic", "h100-80gb", "flash"),  # a profile without cudnn_attention: FlashAttention-2
    ("flash2", "megatron", "h100-80gb", "flash"),  # FlashAttention-2 named: not TE's Hopper pick (cuDNN)
    ("cudnn", "generic", "a100-80gb", "fused"),  # cuDNN named: not TE's Ampere pick (FlashAttention)
    ("triton", "megatron", "a100-80gb", "flash"),
    ("eager", "megatron", "h100-80gb", "unfused"),  # scores materialised, as timed
    ("eager", "generic", "a100-80gb", "unfused"),
])
def test_the_backend_runs_the_kernel_the_plan_was_timed_with(attention, stack, gpu, backend):
    written, notes = _backend(attention, stack, gpu)
    assert written == [backend] and backend in CHOICES["--attention-backend"]
    # the older-Megatron way to the same kernel: Transformer Engine's switches, as Megatron-Core's LanguageModule sets them
    flash, fused, unfused = NVTE[backend]
    assert any(f"NVTE_FLASH_ATTN={flash} NVTE_FUSED_ATTN={fused} NVTE_UNFUSED_ATTN={unfused}" in n for n in notes)


@pytest.mark.parametrize("gpu", sorted(g for g, spec in CATALOG.gpus.items() if spec.vendor == "nvidia"
                                       and spec.attention_efficiency))
def test_a_flash_plan_is_written_fused_exactly_where_the_planner_charges_the_cudnn_curve(gpu):
    """Tie to the timing itself: on every NVIDIA GPU of the catalog, the megatron profile's flash plan is written
    fused where planner/attention_kernel.py's efficiency is the cuDNN curve's and differs from FlashAttention-2's."""
    spec = CATALOG.gpus[gpu]
    seq = np.array([8192])
    timed = attention_kernel.efficiency(spec, seq, 128, np.array([1]), np.array([ATTN["flash"]]))
    fa2, cudnn = attention_kernel.curves(spec)
    on_cudnn = bool(spec.cudnn_attention_efficiency) and np.allclose(timed, attention_efficiency(cudnn, seq, 128)) \
        and not np.allclose(timed, attention_efficiency(fa2, seq, 128))
    written, _ = _backend("flash", "megatron", gpu)
    assert written == (["fused"] if on_cudnn else ["flash"])


def test_no_gpu_lets_transformer_engine_pick_and_says_so():
    written, notes = _backend("flash", "megatron", None)
    assert written == ["auto"] and any("no GPU given" in n for n in notes)
    assert _backend("flash", "generic", None)[0] == ["flash"]  # FlashAttention-2 whatever the GPU


def test_triton_and_flash_attention_3_are_said_in_notes():
    _, notes = _backend("triton", "megatron", "a100-80gb")
    assert any("no Triton FlashAttention" in n for n in notes)
    _, hopper = _backend("flash2", "megatron", "h100-80gb")
    assert any("flash-attn 3" in n for n in hopper)
    _, ampere = _backend("flash2", "megatron", "a100-80gb")
    assert not any("flash-attn 3" in n for n in ampere)


def test_multi_latent_attention_runs_in_cudnn_with_a_note():
    """Transformer Engine's FlashAttention does not run MLA (q/k and v head dims differ): flash would leave no kernel."""
    written, notes = _backend("flash2", "megatron", "a100-80gb", preset="deepseek-v2-lite", ep=8)
    assert written == ["fused"] and any("multi-head latent attention" in n for n in notes)
    assert _backend("eager", "megatron", "a100-80gb", preset="deepseek-v2-lite", ep=8)[0] == ["unfused"]


def test_eager_with_context_parallelism_is_refused():
    plan = ExecutionPlan(dp=4, cp=2, sharding="zero1", seq_len=8192, attention="eager")
    with pytest.raises(PlanError) as e:
        megatron_args(plan, resolve_model("llama3-8b"), gpu=CATALOG.gpus["h100-80gb"])
    assert e.value.field == "attention" and "context parallelism" in str(e.value)
    assert values(megatron_args(plan.model_copy(update={"attention": "flash"}), resolve_model("llama3-8b"),
                                gpu=CATALOG.gpus["h100-80gb"]), "--attention-backend") == ["fused"]


def test_the_cli_file_writes_the_backend_of_the_plans_gpu(tmp_path):
    runner = CliRunner()
    base = ["export", "megatron", "--model", "llama2-7b", "--gpus", "8", "--stack", "megatron", "--sharding", "zero1"]
    for extra, backend in ((["--gpu", "h100-80gb"], "fused"), (["--gpu", "a100-80gb"], "flash"),
                           (["--gpu", "h100-80gb", "--attention", "flash2"], "flash"),
                           (["--gpu", "h100-80gb", "--attention", "eager"], "unfused")):
        out = tmp_path / "args.sh"
        res = runner.invoke(app, [*base, *extra, "--out", str(out)])
        assert res.exit_code == 0, res.output
        text = out.read_text()
        assert f"    --attention-backend {backend}\n" in text and "--use-flash-attn" not in text
    assert "--attention-backend" in MEGATRON_FLAG_SOURCES
