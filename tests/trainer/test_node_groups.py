"""Ranks grouped by the node they run on (trainer/nodes.py), not by rank arithmetic: srun --distribution=cyclic
deals consecutive ranks to different nodes; uneven nodes are refused in one line."""

from __future__ import annotations

import pytest

from planner.errors import PlanError
from trainer.nodes import node_groups, node_key


def test_block_layout_groups_consecutive_ranks():
    assert node_groups(["a", "a", "a", "a", "b", "b", "b", "b"]) == [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_cyclic_layout_groups_by_host_not_by_rank():
    """srun -N2 -n8 --distribution=cyclic: ranks 0,2,4,6 on node a and 1,3,5,7 on node b (the bench's
    consecutive-rank groups [0-3], [4-7] each spanned both nodes and measured the network as 'intranode')."""
    assert node_groups(["a", "b"] * 4) == [[0, 2, 4, 6], [1, 3, 5, 7]]


def test_one_node_is_one_group():
    assert node_groups(["h#0", "h#0"]) == [[0, 1]]


@pytest.mark.parametrize("keys, words", [
    (["a", "a", "a", "b", "b"], "a: 3, b: 2"),  # srun SLURM_STEP_TASKS_PER_NODE "3,2"
    (["h#0", "h#0", "h#1"], "h (node 0): 2, h (node 1): 1"),  # two agents on one machine, --nproc 2 and 1
])
def test_nodes_with_different_rank_counts_are_refused(keys, words):
    with pytest.raises(PlanError) as e:
        node_groups(keys)
    assert e.value.field == "nproc" and words in str(e.value) and "same number of ranks" in str(e.value)


@pytest.mark.parametrize("env, key", [
    ({}, "gpu07"),
    ({"SLURM_NODEID": "3"}, "gpu07#3"),  # srun task
    ({"GROUP_RANK": "1", "SLURM_NODEID": "3"}, "gpu07#1"),  # torchrun inside srun: its agent's node rank
    ({"GROUP_RANK": ""}, "gpu07"),
])
def test_node_key_names_the_host_and_the_launchers_node(env, key):
    assert node_key(env, host="gpu07") == key
