"""A pinned --stack with a pinned knob its profile cannot run (catalog/stacks/*.toml) is one line naming that
knob and what the stack allows, exit 2; it was the search's most common rejection, e.g. "DeepSpeed pipeline
parallelism supports ZeRO-1 only" for `--stack torchtitan --sharding zero2`."""

import subprocess
import sys

import pytest

PLAN = [sys.executable, "-m", "plan_cli.main", "estimate", "--model", "7b"]


@pytest.mark.parametrize("args, field, words", [
    (("--gpus", "8", "--stack", "torchtitan", "--sharding", "zero2"), "sharding",
     "stack torchtitan does not run zero2 (allowed with it: none, fsdp_full_shard, fsdp_hybrid)"),
    (("--gpus", "8", "--stack", "megatron", "--sharding", "fsdp_full_shard"), "sharding", "allowed with it: none, zero1"),
    (("--gpus", "8", "--stack", "megatron", "--compile"), "compile", "compile = false in catalog/stacks/megatron.toml"),
    (("--gpus", "8", "--stack", "fsdp", "--tp", "2"), "tp", "does not run tensor parallelism"),
    (("--gpus", "8", "--stack", "hf", "--pp", "2"), "pp", "does not run pipeline parallelism"),
    (("--gpus", "8", "--stack", "megatron", "--offload", "optimizer"), "offload", "does not run offload"),
    (("--gpus", "16", "--stack", "torchtitan", "--cp", "2", "--cp-impl", "ulysses"), "cp_impl",
     "allowed with it: ring, allgather"),
])
def test_pinned_stack_conflict_is_one_line(args, field, words):
    r = subprocess.run([*PLAN, *args], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {field}: ") and words in lines[0], r.stderr

