"""Does a change to the search leave its answers alone? Dump, for a fixed set of scenarios (dense, MoE,
pinned), the fitting count and the ranked top 10 (plans and every number of --json), then compare two
dumps made by two versions of the code (the counts of rejections may differ; they are printed).

    PYTHONPATH=OLD python benchmarks/search_same.py dump old.json
    PYTHONPATH=NEW python benchmarks/search_same.py dump new.json
    python benchmarks/search_same.py compare old.json new.json
"""

from __future__ import annotations

import json
import sys

SCENARIOS = [
    dict(model="mixtral-8x7b", gpus=64, gpu="h100-80gb"),
    dict(model="70b", gpus=1024),
    dict(model="7b", gpus=48),
    dict(model="125m", gpus=8, gpu="a100-80gb"),
    dict(model="llama2-70b", gpus=512),
    dict(model="gpt2-52b", gpus=64),
    dict(model="mixtral-8x7b", gpus=16, gpu="a100-80gb", seq_len=4096),
    dict(model="7b", gpus=16, offload="optimizer"),
    dict(model="13b", gpus=8, gpu="a100-40gb", sharding="zero3"),
    dict(model="70b", gpus=64, pp=4, cp=1),
    dict(model="7b", gpus=32, stack="megatron_deepspeed"),
    dict(model="7b", gpus=16, stack="torchtitan", offload="optimizer+params"),
    dict(model="mixtral-8x7b", gpus=64, gpu="h100-80gb", ep=8, cp=2),
    dict(model="125m", gpus=8, gpu="a100-80gb", sharding="none", offload="none", tp=1, pp=1),
    dict(model="deepseek-v3", gpus=256, gpu="h100-80gb"),
    dict(model="olmoe-1b-7b", gpus=8, gpu="a100-80gb"),
    dict(model="70b", gpus=8, gpu="a100-40gb", sharding="none"),  # nothing fits: the closest misses
    dict(model="70b", gpus=8, gpu="a100-40gb"),
    dict(model="7b", gpus=8, stack="bundled"),
]


def dump(path: str) -> None:
    from planner import api
    from planner.errors import PlanError
    from planner.scenario import Scenario

    out = []
    for kw in SCENARIOS:
        try:
            r = api.estimate(Scenario(**kw), top=10, include_rejected=True)
            out.append(dict(scenario=kw, fitting=r.fitting, evaluated=r.evaluated, rejected=r.rejected,
                            top=[api.estimate_row(e) for e in r.results]))
        except PlanError as e:
            out.append(dict(scenario=kw, error=str(e)))
    with open(path, "w") as f:
        json.dump(out, f, indent=1, default=str)


def compare(a: str, b: str) -> int:
    old, new = json.load(open(a)), json.load(open(b))
    bad = 0
    for o, n in zip(old, new, strict=True):
        same = o.get("error") == n.get("error") and o.get("fitting") == n.get("fitting") and o.get("top") == n.get("top")
        bad += not same
        print(f"{'same' if same else 'DIFFERENT':>9}  {json.dumps(o['scenario'])}  fitting {o.get('fitting')} -> "
              f"{n.get('fitting')}, evaluated {o.get('evaluated')} -> {n.get('evaluated')}")
        for k in sorted(set(o.get("rejected", {})) | set(n.get("rejected", {}))):
            x, y = o.get("rejected", {}).get(k, 0), n.get("rejected", {}).get(k, 0)
            if x != y:
                print(f"{'':>11}rejected {k!r}: {x} -> {y}")
    print(f"{bad} of {len(old)} scenarios differ in fitting count, top 10 or error")
    return int(bad > 0)


if __name__ == "__main__":
    if sys.argv[1] == "dump":
        dump(sys.argv[2])
    else:
        sys.exit(compare(sys.argv[2], sys.argv[3]))
