"""The plan's grad_reduce_dtype in real bundled-trainer runs (gloo on CPU): FSDP2 reduces in the compute dtype
(MixedPrecisionPolicy reduce_dtype None) with bf16, DeepSpeed ZeRO-1 bf16 accumulates and reduces in fp32
(communication_data_type fp32, data_types.grad_accum_dtype fp32: its BF16_Optimizer)."""

from pathlib import Path

import pytest

from trainer.config import TrainConfig
from trainer.launch import launch

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("kw, backend", [
    (dict(sharding="fsdp_shard_grad_op", precision="bf16", grad_reduce_dtype="bf16"), "fsdp2"),
    (dict(sharding="zero1", precision="bf16", grad_reduce_dtype="fp32"), "deepspeed"),
])
def test_the_trainer_runs_the_asked_reduction(tmp_path, kw, backend):
    out = str(tmp_path / "r.json")
    r = launch(TrainConfig(model="tiny", nproc=2, steps=3, warmup_steps=1, seq_len=32, timeout_s=300, json_out=out, **kw))
    assert r.status == "ok", r.error
    assert r.backend == backend and r.config["grad_reduce_dtype"] == kw["grad_reduce_dtype"]
    assert len(r.losses) == 3 and all(x == x for x in r.losses)  # no NaN
    if backend == "deepspeed":  # fp32 gradients held beside the bf16 parameters: 4 B against 2 (default: 2 B)
        assert r.memory.grads_bytes == 2 * r.memory.params_bytes > 0
