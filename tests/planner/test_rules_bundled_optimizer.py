"""The optimizers the bundled trainer cannot step, as planner rules (planner/bundled_rules.py OPTIMIZER_RULES): the
planner refuses a pinned plan with the rule's line, the search drops such candidates, and the trainer refuses the same
knobs with the same line (trainer/config.py check_optimizer reads the rules)."""

import pytest

from planner import api
from planner.errors import PlanError
from planner.layout import SHARD
from planner.scenario import Scenario
from trainer.config import TrainConfig, validate_config

CASES = [  # pinned knobs, the rule, words of its line
    (dict(optimizer="adafactor", tp=2, sharding="fsdp_full_shard"), "bundled_adafactor_dtensor", "DTensor shards"),
    (dict(optimizer="adafactor", tp=2, sharding="none"), "bundled_adafactor_dtensor", "tp=2, sharding=none"),
    (dict(optimizer="adafactor", sharding="fsdp_shard_grad_op"), "bundled_adafactor_dtensor", "allowed: adamw, sgd"),
    (dict(optimizer="sgd", sharding="zero2", offload="optimizer"), "bundled_offload_optimizer", "DeepSpeedCPUAdam"),
    (dict(optimizer="adafactor", sharding="zero3", offload="optimizer+params"), "bundled_offload_optimizer",
     "allowed with an offload and zero*: adamw"),
]


@pytest.mark.parametrize("pins, rule, words", CASES,
                         ids=[c[1] + "-" + "-".join(map(str, c[0].values())) for c in CASES])
def test_planner_explains_and_trainer_refuses_alike(pins, rule, words):
    with pytest.raises(PlanError) as planned:
        api.estimate(Scenario(model="7b", gpu="a100-80gb", gpus=16, stack="bundled", **pins))
    assert planned.value.field == "optimizer" and words in str(planned.value), planned.value
    with pytest.raises(PlanError) as refused:
        validate_config(TrainConfig(model="tiny", nproc=2, **pins))
    assert str(refused.value) == str(planned.value)  # one wording: the rule's


def test_search_drops_what_the_trainer_cannot_step():
    scenario = Scenario(model="7b", gpu="a100-80gb", gpus=16, stack="bundled", optimizer="adafactor")
    r = api.estimate(scenario, top=1000, include_rejected=True)
    # tp and sharding are the search's choices: it leaves those combinations out (planner/search_prune.py)
    lay = api.search(scenario).found.layout
    assert len(lay) and not ((lay.tp > 1) | (lay.sharding >= SHARD["fsdp_full_shard"])).any()
    assert "the bundled trainer runs adafactor without DTensor shards" not in r.rejected
    assert r.fitting and all(p.plan.tp == 1 and not p.plan.sharding.startswith("fsdp") for p in r.results if p.fits)
    # other stacks are not concerned
    other = api.estimate(Scenario(model="7b", gpu="a100-80gb", gpus=16, stack="torchtitan", optimizer="adafactor"),
                         include_rejected=True)
    assert "the bundled trainer runs adafactor without DTensor shards" not in other.rejected


@pytest.mark.parametrize("pins", [dict(optimizer="adafactor", pp=2), dict(optimizer="adafactor", sharding="zero3"),
                                  dict(optimizer="sgd", sharding="fsdp_full_shard", offload="optimizer+params")])
def test_what_the_trainer_steps_stays_allowed(pins):
    validate_config(TrainConfig(model="tiny", nproc=2, **pins))
