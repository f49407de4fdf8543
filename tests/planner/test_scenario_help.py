"""The Scenario columns' descriptions (the CLI help, the service's schema) say what a blank cell means where it is
not the planner's search: an unpinned seq_len is the model's pretraining context, else its maximum positions, an
unpinned cluster follows --gpu."""

from planner.api import estimate
from planner.scenario import ExecutionPlan, Scenario


def test_blank_seq_len_and_cluster_are_described_as_they_resolve():
    assert Scenario.model_fields["seq_len"].description == ("Tokens per sequence (default: the context the model was "
                                                            "pretrained at, else its maximum positions)")
    assert ExecutionPlan.model_fields["seq_len"].description == "Tokens per sequence"  # a plan's own: no default
    assert estimate(Scenario(model="llama2-7b", gpus=8), top=1).seq_len == 4096  # llama2-7b: 4096 positions
    assert estimate(Scenario(model="gpt-oss-20b", gpus=8), top=1).seq_len == 4096  # of 131072 positions (YaRN)
    assert "with --gpu, the first cluster of that GPU; else dgx-a100" in Scenario.model_fields["cluster"].description
    assert estimate(Scenario(model="7b", gpu="h100-80gb", gpus=8), top=1).system.cluster_id == "dgx-h100"
    assert estimate(Scenario(model="7b", gpus=8), top=1).system.cluster_id == "dgx-a100"
