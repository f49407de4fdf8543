"""torch DDP's bucket copy of the gradients in the exports (planner/exports/ddp_settings.py): no format can switch
gradient_as_bucket_view, so each file runs what its software does (accelerate's DDP: torch's default, a second copy;
the bundled trainer and Megatron-Core: views) and a note says where that is not what the plan counted, or, for
accelerate, how to get the views in code."""

from __future__ import annotations

import pytest

from hardware.catalog import load_catalog
from planner import api
from planner.exports.bundle import Chosen, ExportOptions, export
from planner.scenario import ExecutionPlan, Scenario
from planner.system import System

SYSTEM = System(gpu=load_catalog().gpus["a100-80gb"], gpus=8, gpus_per_node=8, host_ram_gib=512,
                host_to_gpu_gbps=100, intranode_gbps=100, internode_gbps=100)
CODE = "DistributedDataParallelKwargs(gradient_as_bucket_view=True)"


def _ddp_notes(fmt: str, stack: str, **knobs) -> list[str]:
    plan = ExecutionPlan(**({"dp": 8, "sharding": "none", "precision": "bf16", "stack": stack} | knobs))
    chosen = Chosen(plan=plan, model_ref="1b", system=SYSTEM)
    return [n for n in export(fmt, chosen, ExportOptions(time="0-01:00:00")).notes if n.startswith("DDP:")]


def test_accelerate_says_how_to_get_the_views_and_whether_the_plan_counted_the_copy():
    (counted,) = _ddp_notes("accelerate", "hf")
    assert CODE in counted and "which this plan counts" in counted and "TrainingArguments" in counted
    (missed,) = _ddp_notes("accelerate", "megatron")  # a views plan written for accelerate's DDP
    assert CODE in missed and "did not count" in missed and "--stack hf" in missed
    # no DDP (sharded, one replica) or no torch DDP in the file's software (DeepSpeed's engine): no note
    assert _ddp_notes("accelerate", "hf", sharding="zero2") == [] and _ddp_notes("accelerate", "hf", dp=1) == []
    assert _ddp_notes("deepspeed", "hf") == []


@pytest.mark.parametrize("fmt", ["torchrun", "slurm", "megatron"])
def test_software_with_views_is_noted_only_where_the_plan_counted_a_copy(fmt):
    (note,) = _ddp_notes(fmt, "hf" if fmt != "megatron" else "generic")
    assert "holds no such copy" in note
    assert _ddp_notes(fmt, "megatron" if fmt == "megatron" else "bundled") == []


def test_the_note_states_the_copy_the_plan_counted():
    """plan estimate's DDP plan on the hf stack counts the copy in its comm buffers; the accelerate export of it says
    that many GiB, and accelerate's own default is what the hf profile says (no view)."""
    from accelerate.utils import DistributedDataParallelKwargs

    assert DistributedDataParallelKwargs().gradient_as_bucket_view is load_catalog().stacks["hf"].ddp_bucket_view
    hf = api.estimate(Scenario(model="1b", gpus=8, cluster="dgx-a100", sharding="none", stack="hf"), top=1).best
    views = api.estimate(Scenario(model="1b", gpus=8, cluster="dgx-a100", sharding="none", stack="hf",
                                  tp=hf.plan.tp, pp=hf.plan.pp, micro_batch=hf.plan.micro_batch,
                                  activation_checkpointing=hf.plan.activation_checkpointing,
                                  precision=hf.plan.precision, attention=hf.plan.attention), top=1).best
    assert views.plan == hf.plan
    copy_gib = hf.memory.grads_bytes / 2**30  # the copy is the gradients, as the plan holds them
    assert hf.memory.comm_buffers_bytes >= hf.memory.grads_bytes > 0
    chosen = Chosen(plan=hf.plan, model_ref="1b", system=SYSTEM)
    (note,) = [n for n in export("accelerate", chosen).notes if n.startswith("DDP:")]
    assert f"{copy_gib:.1f} GiB a GPU" in note
