"""Golden tests: the planner on the published runs of validation/data/published_dev.csv.

Tolerances (README): every row predicted; MAPE of tokens/s per GPU <= 15% over all published
rows and <= 30% per source; every OOM run flagged. The stack profiles were fitted on these rows
(the cross-validated errors are validation/fit_profiles.py's), so this guards against regressions.
"""

from pathlib import Path

import pytest

from planner.runs import load_runs
from planner.validate import validate

DATA = Path(__file__).resolve().parents[2] / "validation" / "data"
OVERALL_MAPE = 15.0
SOURCE_MAPE = 30.0


@pytest.fixture(scope="module")
def report():
    runs = load_runs(DATA / "published_dev.csv")
    assert len(runs) == 249
    return validate(runs)


def test_every_published_row_is_predicted(report):
    assert len(report.runs) == 249
    assert all(p.predicted_tokens_per_s_per_gpu > 0 for p in report.runs)
    assert sum(p.error is not None for p in report.runs) >= 240


def test_speed_error_per_source(report):
    assert report.overall_mape_pct <= OVERALL_MAPE, report.overall_mape_pct
    assert abs(report.overall_bias_pct) <= 10.0
    worst = {s.source: s.mape_pct for s in report.sources if s.mape_pct is not None and s.mape_pct > SOURCE_MAPE}
    assert not worst, worst


def test_oom_runs_are_flagged_and_ran_runs_mostly_fit(report):
    assert report.oom_runs == 3 and report.oom_flagged == 3
    assert report.false_alarms_structural == 0
    # issue 10's target: false alarms <= 2% of the runs that ran (one left: Nemotron-4 340B, README)
    assert report.false_alarms_memory <= 0.02 * report.ran


def test_fp8_and_context_parallel_rows_use_their_knobs():
    runs = {r.id: r for r in load_runs(DATA / "published_dev.csv")}
    assert runs["torchtitan_003"].plan.precision == "fp8"
    assert runs["torchtitan_005"].plan.cp == 2 and runs["torchtitan_005"].plan.dp == 4
    assert runs["nemo_perf_011"].plan.cp == 2
    assert runs["bloom_prequel_043"].plan.pp == 6  # 72 layers on 6 stages ...


def test_unstated_recompute_read_from_the_flop_counts():
    """Megatron 2020 rows give TFLOPs and iteration time: their ratio (4/3 of the model FLOPs)
    says every block was recomputed; NeMo's model TFLOPs (ratio ~1) keep the stack default."""
    runs = {r.id: r for r in load_runs(DATA / "published_dev.csv")}
    assert runs["megatron_2020_002"].plan.activation_checkpointing == "full"
    assert any("count 1.3" in a for a in runs["megatron_2020_002"].assumptions)
    assert runs["nemo_perf_001"].plan.activation_checkpointing == "selective"


def test_sequence_parallelism_only_where_the_code_had_it():
    """SC21 (2021) and the 2020 tables ran before Megatron-LM had sequence parallelism (Korthikanti
    et al. 2022); Korthikanti's full-recompute baseline ran without it (calculon's tab5 encoding
    "ar" against "rs_ag"), its present-work rows with it; Megatron-Core (no year) keeps the default."""
    runs = {r.id: r for r in load_runs(DATA / "published_dev.csv")}
    assert not any(runs[f"megatron_sc21_{i:03d}"].plan.sequence_parallel for i in range(2, 11))
    assert not runs["megatron_2020_008"].plan.sequence_parallel
    assert not runs["megatron_korthikanti_005"].plan.sequence_parallel
    assert runs["megatron_korthikanti_006"].plan.sequence_parallel
    assert runs["megatron_core_h100_004"].plan.sequence_parallel


def test_mlp_form_from_the_stated_size():
    """Nemotron-4 340B: GQA but a plain (squared-ReLU) MLP; the stated 340B picks the form."""
    r = {r.id: r for r in load_runs(DATA / "published_dev.csv")}["nemo_perf_010"]
    assert r.spec.mlp != "swiglu" and abs(r.spec.n_params / 1e9 - 340) < 10


def test_a_layout_that_contradicts_the_gpu_count_is_reported_not_scored(tmp_path):
    head = ("id,source,model_name,n_params_B,n_layers,hidden,n_heads,vocab,seq_len,gpu_type,n_gpus,gpus_per_node,"
            "framework,tp,pp,dp,sharding,activation_checkpointing,precision,micro_batch,global_batch,"
            "measured_iter_time_s,outcome\n")
    rows = ("a,t,gpt,18,40,6144,48,50257,1024,V100-32GB,16,4,megatron,4,8,1,none,full,fp16,4,256,90.5,ok\n"
            "b,t,gpt,18,40,6144,48,50257,1024,V100-32GB,16,4,megatron,4,4,1,none,full,fp16,4,256,90.5,ok\n")
    f = tmp_path / "runs.csv"
    f.write_text(head + rows)
    runs = load_runs(f)
    assert runs[0].inconsistent and "32 GPUs" in runs[0].inconsistent and not runs[0].scored
    assert runs[1].inconsistent is None and runs[1].scored
    rep = validate(runs)
    assert rep.inconsistent_rows == 1 and rep.ran == 1


def test_a_speed_above_the_gpus_peak_is_reported_not_scored(tmp_path):
    """1.3B GPT on 8 V100s: 20k tokens/s per GPU is ~160 model TFLOPs/GPU, above the V100's 125 fp16 peak
    (a per-node figure, or a typo); 2k tokens/s per GPU is plausible. Every published row stays scored."""
    head = ("id,source,model_name,n_params_B,n_layers,hidden,n_heads,vocab,seq_len,gpu_type,n_gpus,gpus_per_node,"
            "framework,tp,pp,dp,sharding,activation_checkpointing,precision,micro_batch,global_batch,"
            "measured_tokens_per_sec_per_gpu,outcome\n")
    rows = ("fast,t,gpt,1.3,24,2048,16,50257,2048,V100-32GB,8,8,megatron,1,1,8,none,none,fp16,4,32,20000,ok\n"
            "fine,t,gpt,1.3,24,2048,16,50257,2048,V100-32GB,8,8,megatron,1,1,8,none,none,fp16,4,32,2000,ok\n")
    f = tmp_path / "runs.csv"
    f.write_text(head + rows)
    fast, fine = load_runs(f)
    assert fast.inconsistent and "above the GPU's dense fp16 peak 125" in fast.inconsistent and not fast.scored
    assert fine.inconsistent is None and fine.scored
    assert validate([fast, fine]).inconsistent_rows == 1
    assert all(r.inconsistent is None for r in load_runs(DATA / "published_dev.csv"))
