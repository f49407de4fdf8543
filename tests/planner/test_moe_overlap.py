"""The expert all-to-all hidden behind compute (planner/moe_overlap.py; Settings.moe_a2a_overlap,
moe_shared_expert_overlap): off = the fully exposed all-to-all, unchanged; on, a step is never slower than
without overlap, never hides more than the all-to-all, and the compute beside it runs on 132 - 20 SMs
(DeepSeek-V3 sec. 3.2.2: 20 of the H800's 132 SMs for communication)."""

import numpy as np
import pytest
from typer.testing import CliRunner

from hardware.catalog import load_catalog
from planner import moe_overlap, moe_time, throughput
from planner.errors import PlanError
from planner.moe_options import MoeOptions
from planner.layout import Layout
from planner.presets import resolve_model
from planner.resolve import resolve_system
from planner.scenario import ExecutionPlan, Scenario
from planner.settings import Settings
from tests.planner.moe_models import MIXTRAL_8X7B

CATALOG = load_catalog()
SYSTEM = resolve_system(Scenario(gpu="h100-80gb", gpus=256), CATALOG)
SHARE = 20 / 132  # h100-80gb: sm_count 132


def _perf(spec, settings=None, **knobs):
    plan = dict(tp=1, pp=1, dp=64, ep=8, etp=1, seq_len=4096, sharding="zero1", micro_batch=1, grad_accum=8,
                activation_checkpointing="selective")
    lay = Layout.from_plan(ExecutionPlan(**{**plan, **knobs}))
    perf = throughput.performance(spec, lay, SYSTEM, Settings(stacks=CATALOG.stacks, **(settings or {})))
    return {k: float(np.asarray(v).reshape(-1)[0]) for k, v in perf.items() if k != "bottleneck"}


LAYOUTS = [dict(), dict(grad_accum=1), dict(micro_batch=4, grad_accum=2), dict(pp=4, dp=16, grad_accum=16),
           dict(pp=4, dp=16, vpp=2, grad_accum=16), dict(pp=4, dp=16, grad_accum=3),
           dict(tp=2, dp=128, ep=32, sequence_parallel=True, activation_checkpointing="full")]


def test_sm_share_of_the_catalog_gpu():
    assert moe_overlap.comm_sm_share(SYSTEM.gpu) == pytest.approx(SHARE)
    assert moe_overlap.comm_sm_share(None) == pytest.approx(20 / 132)  # no sm_count: the H800's


@pytest.mark.parametrize("a,c", [(1.0, 0.0), (1.0, 0.5), (1.0, 1.0), (1.0, 1.2), (1.0, 3.0), (0.0, 2.0)])
def test_pair_time_is_the_two_streams_with_the_compute_on_the_rest_of_the_sms(a, c):
    """compute c beside an all-to-all a runs at r = 112/132 speed while a runs: the pair takes the overlapped
    span L = min(a, c / r) plus the compute left after it."""
    r = 1.0 - SHARE
    t = c + float(moe_overlap.exposed_s(a, c, SHARE))
    span = min(a, c / r)
    assert t == pytest.approx(max(a, span + (c - r * span)))
    assert max(a, c) <= t <= a + c + 1e-12
    assert t >= span / r * r + (c - r * span)  # never faster than the compute at the slowed speed


@pytest.mark.parametrize("pp,vpp,ga,w", [(1, 1, 8, 1), (1, 1, 1, 1), (4, 1, 16, 3), (4, 2, 16, 5), (16, 1, 4, 4)])
def test_unpaired_micro_batches(pp, vpp, ga, w):
    """pp 1: F0 and the last B unpaired (Megatron's combined 1F1B); pp > 1: the first stage's pp - 1 warm-up
    forwards; interleaved: 2 (pp - 1) + (vpp - 1) pp chunks of 1/vpp micro batch."""
    assert float(moe_overlap.unpaired_micro_batches(pp, vpp, ga)) == pytest.approx(w)


def test_off_is_exactly_the_exposed_all_to_all():
    off, default = _perf(MIXTRAL_8X7B, {"moe_a2a_overlap": False}), _perf(MIXTRAL_8X7B)
    assert off == default
    mt = {"moe_a2a_s": np.array([1.0]), "moe_a2a_layer_s": np.array([0.1]), "moe_layers": np.array([10.0])}
    assert moe_time.overlapped(mt, 1.0, None, 32, SYSTEM.gpu, Settings(), 1.0) is mt
    # a dense model has no all-to-all to hide: identical with the setting on
    dense = resolve_model("7b")
    assert _perf(dense, {"moe_a2a_overlap": True}, ep=1) == _perf(dense, ep=1)


@pytest.mark.parametrize("knobs", LAYOUTS)
def test_overlap_bounds(knobs):
    off, on = _perf(MIXTRAL_8X7B, **knobs), _perf(MIXTRAL_8X7B, {"moe_a2a_overlap": True}, **knobs)
    a2a = off["moe_a2a_s"]
    assert a2a > 0
    assert on["step_time_s"] <= off["step_time_s"] + 1e-12  # never slower
    assert SHARE * a2a - 1e-12 <= on["moe_a2a_s"] <= a2a + 1e-12  # never more than the a2a, never free
    assert on["compute_s"] == off["compute_s"]
    if knobs.get("pp", 1) == 1:  # no bubble: the step is the no-overlap step less what was hidden
        assert on["step_time_s"] >= off["step_time_s"] - a2a
        assert on["step_time_s"] - off["step_time_s"] == pytest.approx(on["moe_a2a_s"] - a2a, rel=1e-9, abs=1e-12)


def test_one_micro_batch_in_flight_hides_nothing():
    for knobs in (dict(grad_accum=1), dict(pp=4, dp=16, grad_accum=3)):
        off, on = _perf(MIXTRAL_8X7B, **knobs), _perf(MIXTRAL_8X7B, {"moe_a2a_overlap": True}, **knobs)
        assert on["moe_a2a_s"] == pytest.approx(off["moe_a2a_s"], rel=1e-12)


def test_steady_state_hides_all_but_the_sm_share_when_compute_covers_the_a2a():
    """Mixtral at ep 8 on NVLink: a layer's all-to-all is shorter than its compute, so each paired micro
    batch leaves exactly 20/132 of its all-to-all; ga 8 at pp 1: 7 pairs + 1 unpaired."""
    off, on = _perf(MIXTRAL_8X7B), _perf(MIXTRAL_8X7B, {"moe_a2a_overlap": True})
    assert on["moe_a2a_s"] == pytest.approx(off["moe_a2a_s"] * (7 * SHARE + 1) / 8, rel=1e-9)


def test_shared_expert_overlap():
    v3 = resolve_model("deepseek-v3")
    knobs = dict(pp=4, dp=16, ep=64, grad_accum=16, micro_batch=1)
    off = _perf(v3, **knobs)
    shared = _perf(v3, {"moe_shared_expert_overlap": True}, **knobs)
    assert SHARE * off["moe_a2a_s"] - 1e-12 <= shared["moe_a2a_s"] < off["moe_a2a_s"]
    # no shared expert (Mixtral): nothing to hide behind
    assert _perf(MIXTRAL_8X7B, {"moe_shared_expert_overlap": True}) == _perf(MIXTRAL_8X7B)


def test_cli_flag_and_refusal():
    from plan_cli.main import app

    base = ["estimate", "--gpu", "h100-80gb", "--gpus", "64", "--model", "mixtral-8x7b", "--tp", "1", "--pp", "1",
            "--ep", "8", "--micro-batch", "1", "--grad-accum", "4", "--sharding", "zero1", "--seq-len", "4096",
            "--json"]
    import json

    a2a = []
    for extra in ([], ["--moe-a2a-overlap"]):
        result = CliRunner().invoke(app, base + extra)
        assert result.exit_code == 0, result.output
        best = json.loads(result.output)["results"][0]
        a2a.append(best["time"]["moe_a2a_s"])
    assert 0 < a2a[1] < a2a[0]
    both = CliRunner().invoke(app, base + ["--moe-a2a-overlap", "--moe-shared-expert-overlap"])
    assert both.exit_code == 2 and "moe_shared_expert_overlap" in both.output


def test_megatron_export_flags():
    """NVIDIA/Megatron-LM megatron/training/arguments.py `_add_moe_args`: --overlap-moe-expert-parallel-comm,
    --delay-wgrad-compute, --moe-shared-expert-overlap; refusals of TransformerConfig.__post_init__."""
    from planner.exports.megatron_args import megatron_args

    plan = dict(tp=1, pp=4, vpp=2, dp=16, ep=8, micro_batch=1, grad_accum=16, seq_len=4096, sharding="zero1",
                stack="megatron", activation_checkpointing="selective")
    args = megatron_args(ExecutionPlan(**plan), MIXTRAL_8X7B, moe=MoeOptions(moe_a2a_overlap=True))
    assert "--overlap-moe-expert-parallel-comm" in args and "--delay-wgrad-compute" in args
    plain = megatron_args(ExecutionPlan(**plan), MIXTRAL_8X7B)
    assert "--overlap-moe-expert-parallel-comm" not in plain and "--delay-wgrad-compute" not in plain
    for bad, field in ((dict(vpp=1), "vpp"), (dict(activation_checkpointing="full"), "activation_checkpointing"),
                       (dict(ep=1), "ep")):
        with pytest.raises(PlanError) as e:
            megatron_args(ExecutionPlan(**{**plan, **bad}), MIXTRAL_8X7B, moe=MoeOptions(moe_a2a_overlap=True))
        assert e.value.field == field
    v3 = resolve_model("deepseek-v3")
    shared = megatron_args(ExecutionPlan(**{**plan, "ep": 64, "pp": 4, "dp": 16}), v3,
                           moe=MoeOptions(moe_shared_expert_overlap=True))
    assert "--moe-shared-expert-overlap" in shared and "--overlap-moe-expert-parallel-comm" not in shared
    assert "--moe-shared-expert-overlap" not in megatron_args(ExecutionPlan(**plan), MIXTRAL_8X7B,
                                                              moe=MoeOptions(moe_shared_expert_overlap=True))


def test_cli_export_writes_the_flags():
    from plan_cli.main import app

    args = ["export", "megatron", "--gpu", "h100-80gb", "--gpus", "64", "--model", "mixtral-8x7b", "--tp", "1",
            "--pp", "4", "--vpp", "2", "--ep", "8", "--micro-batch", "1", "--grad-accum", "8", "--sharding", "zero1",
            "--seq-len", "4096", "--stack", "megatron", "--activation-checkpointing", "selective"]
    on = CliRunner().invoke(app, args + ["--moe-a2a-overlap"])
    assert on.exit_code == 0, on.output
    assert "--overlap-moe-expert-parallel-comm" in on.output and "--delay-wgrad-compute" in on.output
    off = CliRunner().invoke(app, args)
    assert off.exit_code == 0 and "--overlap-moe-expert-parallel-comm" not in off.output
    no_vpp = CliRunner().invoke(app, [a if a != "2" else "1" for a in args] + ["--moe-a2a-overlap"])
    assert no_vpp.exit_code == 2 and "vpp" in no_vpp.output


def test_deepseek_v3_cost_prints_the_paper_settings(capsys):
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "validation" / "deepseek_v3_cost.py"
    spec = importlib.util.spec_from_file_location("deepseek_v3_cost", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.main()
    out = capsys.readouterr().out
    assert "the paper's settings" in out and "reported 2664K" in out
    hours = [float(line.split("K GPU h")[0].split()[-1]) for line in out.splitlines() if "K GPU h for" in line]
    assert len(hours) == 9 and hours[6] < hours[3] < hours[0]  # rank 1 of each: defaults > node limit > + overlap
