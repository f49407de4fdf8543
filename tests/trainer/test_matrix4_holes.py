"""Holes validation/trainer_matrix4.py found (offload, bf16_pure, 4-rank layouts): combinations the bundled trainer
refuses before launch that no planner rule refused, so `plan tune` could propose them and lose a trial."""

import itertools

import pytest

from planner import rules
from planner.errors import PlanError

BUNDLED_REFUSALS = [  # (knobs, the field the trainer's refusal names)
    (dict(sharding="zero1", precision="bf16_pure"), "precision"),
    (dict(sharding="zero3", precision="bf16_pure", dp=4), "precision"),
    (dict(sharding="fsdp_hybrid", tp=2, dp=1), "sharding"),
    (dict(sharding="fsdp_hybrid", dp=3), "sharding"),
    (dict(sharding="none", tp=2, dp=2), "sharding"),
    (dict(sharding="zero1", pp=2, dp=2), "sharding"),  # the general rule allows DeepSpeed pp with ZeRO-1
    (dict(sharding="fsdp_full_shard", offload="optimizer+params", tp=2, dp=2), "offload"),
    (dict(sharding="fsdp_full_shard", optimizer="adafactor", pp=2, dp=2), "optimizer"),
    (dict(sharding="zero2", offload="optimizer", optimizer="sgd"), "optimizer"),
    (dict(sharding="none", compile=True, pp=2), "compile"),
]


@pytest.mark.parametrize("knobs, field", BUNDLED_REFUSALS, ids=lambda v: str(v))
def test_bundled_refusals_are_rules(knobs, field):
    knobs = dict(dict(stack="bundled", tp=1, pp=1, dp=2, offload="none", precision="bf16", compile=False), **knobs)
    with pytest.raises(PlanError) as e:
        rules.check(knobs)
    assert e.value.field == field
    # other stacks are not the bundled trainer: none of these rules for them
    assert not [r for r, _ in rules.violations(knobs | {"stack": "torchtitan"}) if r.name.startswith("bundled_")]


@pytest.mark.parametrize("knobs", [
    dict(sharding="fsdp_hybrid", dp=4), dict(sharding="fsdp_full_shard", tp=2, dp=2, precision="bf16_pure"),
    dict(sharding="none", pp=2, dp=2), dict(sharding="zero2", offload="optimizer"), dict(sharding="none", tp=2, dp=1),
    dict(sharding="fsdp_full_shard", precision="fp16", pp=2, dp=2), dict(sharding="none", optimizer="adafactor", pp=2),
])
def test_bundled_runs_pass_the_rules(knobs):
    rules.check(dict(dict(stack="bundled", tp=1, pp=1, offload="none", precision="bf16", compile=False), **knobs))


def test_every_trainer_refusal_is_a_planner_rule():
    """The trainer's own checks (validate_config / validate_layout) against the planner's rules, over the matrix's
    shapes x layouts x sharding x offload x precision: what the trainer refuses a rule refuses (the host's fp16 rule
    apart: the tuner proposes fp16 on a GPU only)."""
    from trainer.config import validate_config, validate_layout
    from trainer.dist import check_host_precision
    from validation.trainer_matrix4 import FACTORS, label, train_config

    holes = {}
    for shape, par, sharding, offload, precision in itertools.product(
            ("gpt", "mixtral"), FACTORS["par"], FACTORS["sharding"], FACTORS["offload"], FACTORS["precision"]):
        combo = dict(shape=shape, par=par, sharding=sharding, offload=offload, ckpt="none", precision=precision, ga=1)
        cfg = train_config(combo)
        try:
            validate_config(cfg)
            validate_layout(cfg, cfg.spec)
        except PlanError as e:
            if not rules.violations(cfg.plan.model_dump(), spec=cfg.spec, seq_len=cfg.plan.seq_len):
                holes.setdefault(e.field, (label(combo), e.message))
            continue
        try:
            check_host_precision(cfg)
        except PlanError:
            assert precision == "fp16"
    assert not holes, holes


@pytest.mark.slow
def test_tp_pp_with_full_checkpointing_matches_one_rank(tmp_path):
    """tp2 x pp2 with full checkpointing crashed in every rank ("'Checkpointed' object has no attribute 'mlp'": the
    pipeline wrapped the blocks before the tp plans, which name the blocks' modules). fp32: float rounding only."""
    from trainer.config import TrainConfig
    from trainer.launch import launch

    kw = dict(model="tiny4", steps=3, warmup_steps=1, seq_len=32, micro_batch=2, grad_accum=2, timeout_s=300,
              activation_checkpointing="full")
    tp_pp = launch(TrainConfig(nproc=4, tp=2, pp=2, json_out=str(tmp_path / "tp_pp.json"), **kw))
    one = launch(TrainConfig(nproc=1, json_out=str(tmp_path / "one.json"), **kw))
    assert tp_pp.status == "ok" and one.status == "ok", (tp_pp.error, one.error)
    assert tp_pp.losses == pytest.approx(one.losses, abs=2e-5)


@pytest.mark.slow
def test_matrix4_sample_covers_every_new_pair():
    """validation/trainer_matrix4.py: the sample holds only accepted combinations, and every pair of knob values that
    holds an offload, bf16_pure or a 4-rank layout and some accepted combination holds."""
    from validation.trainer_matrix4 import FACTORS, NEW, all_pairs, refusal

    product = [dict(zip(FACTORS, v)) for v in itertools.product(*FACTORS.values())]
    accepted = [c for c in product if refusal(c) is None]
    chosen = all_pairs(accepted)
    assert len(chosen) < 40 and all(c in accepted for c in chosen)

    def pairs(cs):
        return {p for c in cs for p in itertools.combinations(sorted(c.items()), 2) if p[0] in NEW or p[1] in NEW}
    assert pairs(chosen) == pairs(accepted)
    assert any(c["par"] == "dp4" and c["sharding"] == "fsdp_hybrid" for c in chosen)  # HSDP: replicate 2 x shard 2
    assert any(c["par"] == "tp2pp2" and c["ckpt"] == "full" for c in chosen)  # the tp x pp checkpointing crash
