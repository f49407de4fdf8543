"""The feasibility rules of the ZeRO++ knobs (planner/zeropp.py), as planner/rules.py takes them:
each names the knob a one-line error is about and what is allowed.

ZeRO++ changes DeepSpeed ZeRO-3's collectives, so each feature needs sharding zero3 on a stack
that runs DeepSpeed; hpZ and qgZ build their groups from consecutive world ranks (DeepSpeed
utils/groups.py `_create_zero_param_parallel_group`; stage3.py's all-to-all groups of
`device_count()` ranks), which are data-parallel groups only without tensor parallelism; the hpZ
partition must divide the data-parallel size; its secondary copy is modelled in GPU memory, so
not with parameters offloaded to the host.
"""

from __future__ import annotations

import numpy as np

from planner.layout import OFFLOAD, SHARD, STACK
from planner.zeropp import DEEPSPEED_STACKS

_FEATURES = {
    "zeropp_qwz": ("qwZ", lambda k: k.zeropp_qwz == 1),
    "zeropp_hpz_partition_size": ("hpZ", lambda k: k.zeropp_hpz_partition_size > 1),
    "zeropp_qgz": ("qgZ", lambda k: k.zeropp_qgz == 1),
}
_DS_CODES = [STACK[s] for s in DEEPSPEED_STACKS]


def _stack_name(code) -> str:
    from planner.scenario import STACKS

    return STACKS[int(np.asarray(code).reshape(-1)[0])]


def _sharding_name(code) -> str:
    from planner.scenario import SHARDINGS

    return SHARDINGS[int(np.asarray(code).reshape(-1)[0])]


def _rules():
    out = []
    for field, (name, on) in _FEATURES.items():
        out.append(dict(
            name=f"{field}_zero3", reason=f"ZeRO++ {name} needs sharding zero3", field=field,
            inputs=(field, "sharding"), bad=lambda k, on=on: on(k) & (k.sharding != SHARD["zero3"]),
            message=lambda k, name=name: f"ZeRO++ {name} changes DeepSpeed ZeRO-3's collectives: needs sharding "
                                         f"zero3 (got {_sharding_name(k.sharding)})",
            relaxed={"sharding": SHARD["zero3"]}))
        out.append(dict(
            name=f"{field}_stack", reason=f"ZeRO++ {name} needs a DeepSpeed stack", field=field,
            inputs=(field, "stack"), bad=lambda k, on=on: on(k) & ~np.isin(k.stack, _DS_CODES),
            message=lambda k, name=name: f"ZeRO++ {name} is a DeepSpeed feature: stack {_stack_name(k.stack)} "
                                         f"cannot run it (allowed: {', '.join(DEEPSPEED_STACKS)})"))
    for field in ("zeropp_hpz_partition_size", "zeropp_qgz"):
        name, on = _FEATURES[field]
        out.append(dict(
            name=f"{field}_tp", reason=f"ZeRO++ {name} needs tp 1", field=field, inputs=(field, "tp", "cp"),
            bad=lambda k, on=on: on(k) & ((k.tp > 1) | (k.cp > 1)),
            message=lambda k, name=name: f"ZeRO++ {name} builds its groups from consecutive ranks, data-parallel "
                                         f"ones only without model parallelism (allowed: tp 1 and cp 1; got tp "
                                         f"{k.tp}, cp {k.cp})",
            relaxed={"tp": 1, "cp": 1}))
    out.append(dict(
        name="zeropp_hpz_divides_dp", reason="ZeRO++ hpZ partition size does not divide dp",
        field="zeropp_hpz_partition_size", inputs=("zeropp_hpz_partition_size", "dp"),
        bad=lambda k: (k.zeropp_hpz_partition_size > 1) & (k.dp % k.zeropp_hpz_partition_size != 0),
        message=lambda k: f"{k.zeropp_hpz_partition_size} does not divide the data-parallel size ({k.dp}): the "
                          "secondary partition splits each data-parallel group evenly (allowed: 1 or a divisor of dp, "
                          "usually gpus_per_node)"))
    out.append(dict(
        name="zeropp_hpz_param_offload", reason="ZeRO++ hpZ with parameter offload", field="zeropp_hpz_partition_size",
        inputs=("zeropp_hpz_partition_size", "offload"),
        bad=lambda k: (k.zeropp_hpz_partition_size > 1) & (k.offload == OFFLOAD["optimizer+params"]),
        message=lambda k: "hpZ's secondary copy would sit in host memory with offload optimizer+params, which the "
                          "planner does not model (allowed: offload none or optimizer, or hpZ 1)"))
    return tuple(out)


RULES = _rules()
