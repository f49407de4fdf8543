"""Pinned plans for the sanity sweep (validation/sanity_sweep.py): a model zoo, the GPUs with a
catalog cluster each, and `evaluate` (one fully pinned plan -> its step-time breakdown, speed and
memory, also where it does not fit in memory, or the rule that refuses it).

The models are given by their columns (no preset): GPT-style (GELU MLP, learned positions,
max_positions = the plan's seq_len) from 125M to 1T (Brown et al. 2020 Table 2.1; Narayanan et
al. 2021 Table 1 shapes) and LLaMA-style (SwiGLU, GQA with 8 key/value heads) 8B/70B/405B
(Llama 3 model card shapes).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from hardware.catalog import load_catalog
from planner import rules, throughput
from planner.api import _global_batch
from planner.errors import PlanError
from planner.resolve import resolve_model, resolve_system, seq_len_of
from planner.scenario import Scenario
from planner.search import search
from planner.settings import Settings

GPT = {  # name: (layers, hidden, heads)
    "gpt-125m": (12, 768, 12), "gpt-1.3b": (24, 2048, 16), "gpt-6.7b": (32, 4096, 32),
    "gpt-13b": (40, 5120, 40), "gpt-39b": (48, 8192, 64), "gpt-175b": (96, 12288, 96),
    "gpt-530b": (105, 20480, 128), "gpt-1t": (128, 25600, 160),
}
LLAMA = {  # name: (layers, hidden, heads, kv heads, ffn)
    "llama-8b": (32, 4096, 32, 8, 14336), "llama-70b": (80, 8192, 64, 8, 28672),
    "llama-405b": (126, 16384, 128, 8, 53248),
}
# GPU id -> a catalog cluster of that GPU (its node size, NICs, host link)
CLUSTERS = {
    "v100-32gb": "dgx-v100", "a100-40gb": "dgx-a100-40gb", "a100-80gb": "dgx-a100", "h100-80gb": "dgx-h100",
    "h200-141gb": "dgx-h200", "mi250x": "lumi-g", "mi300x": "mi300x-8", "b200": "dgx-b200",
}
# Every knob pinned (one candidate per scenario); a check overrides what it varies.
BASE = dict(tp=1, pp=1, vpp=1, cp=1, cp_impl="ring", sequence_parallel=False, sharding="zero1", offload="none",
            activation_checkpointing="none", micro_batch=1, stack="megatron", precision="bf16",
            attention="flash", compile=False, async_tp=False, optimizer="adamw", activation_offload=False,
            fp8_recipe="tensorwise", zeropp_qwz=False, zeropp_hpz_partition_size=1, zeropp_qgz=False)


def model_columns(name: str) -> dict:
    """Scenario columns of a zoo model."""
    if name in GPT:
        n, h, a = GPT[name]
        return dict(n_layers=n, hidden=h, n_heads=a, vocab=50257, mlp="gelu")
    n, h, a, kv, f = LLAMA[name]
    return dict(n_layers=n, hidden=h, n_heads=a, n_kv_heads=kv, ffn_hidden=f, vocab=128256, mlp="swiglu")


@lru_cache(maxsize=1)
def catalog():
    return load_catalog(None)


@lru_cache(maxsize=1)
def settings() -> Settings:
    return Settings(stacks=catalog().stacks)


@dataclass
class Result:
    """One evaluated plan: `refused` (a structural rule's message) or its numbers."""

    knobs: dict
    refused: str = ""
    spec: object = None  # planner.model.ModelSpec
    fits: bool = True
    perf: dict = field(default_factory=dict)  # throughput.performance keys, scalars
    mem: dict = field(default_factory=dict)  # memory terms, bytes

    def __getitem__(self, key):
        return self.perf[key] if key in self.perf else self.mem[key]

    def describe(self) -> str:
        k = self.knobs
        arch = k.get("model") or f"L{k['n_layers']}xh{k['hidden']}/{k.get('mlp', 'gelu')}"
        lay = (f"tp{k['tp']} pp{k['pp']} vpp{k['vpp']} cp{k['cp']}{' sp' if k['sequence_parallel'] else ''} "
               f"{k['sharding']} mb{k['micro_batch']} gb{k.get('global_batch')}")
        extra = "".join(f" {n}={k[n]}" for n in ("internode_gbps", "offload", "activation_checkpointing")
                        if k.get(n) not in (None, "none"))
        return (f"{arch} s{k['seq_len']} {k['gpu']} x{k['gpus']} {k['stack']} {k['precision']} {lay}{extra}")

    def breakdown(self) -> str:
        if self.refused:
            return f"refused: {self.refused}"
        p = self.perf
        return (f"tok/s/gpu {p['tokens_per_s_per_gpu']:.1f} mfu {p['mfu']:.3f} hfu {p['hfu']:.3f} | step "
                f"{p['step_time_s']:.4g}s = compute {p['compute_s']:.4g} + comm {p['comm_exposed_s']:.4g} "
                f"(tp {p['tp_comm_s']:.3g} cp {p['cp_comm_s']:.3g} pp {p['pp_comm_s']:.3g} dp {p['dp_comm_s']:.3g})"
                f" + bubble {p['bubble_s']:.4g} + offload {p['offload_s']:.4g}{'' if self.fits else ' [no fit]'}")


def evaluate(**knobs) -> Result:
    """One fully pinned plan. `gpu` picks the cluster (CLUSTERS) unless `cluster` is given."""
    knobs = {**BASE, **knobs}
    if "model" not in knobs and "n_layers" not in knobs:
        raise ValueError("give model= or the architecture columns")
    knobs.setdefault("cluster", CLUSTERS[knobs["gpu"]])
    cols = {k: v for k, v in knobs.items() if k != "gpu" or "cluster" not in knobs}
    try:
        scn = Scenario(**{k: v for k, v in cols.items() if k in Scenario.model_fields})
        spec = resolve_model(scn)
        system = resolve_system(scn, catalog())
        seq = seq_len_of(scn, spec)
        gb, _ = _global_batch(scn, spec, system, seq)
        found = search(spec, system, scn, settings(), seq, gb)
    except PlanError as e:
        return Result(knobs, refused=str(e))
    assert len(found.layout) == 1, f"{len(found.layout)} candidates: pin every knob"
    reason = int(found.reason[0])
    if reason >= 0 and reason not in rules.MEMORY:
        return Result(knobs, refused=rules.RULES[reason].reason)
    perf = throughput.performance(spec, found.layout, system, settings())
    scalar = {k: (np.asarray(v).reshape(-1)[0]).item() for k, v in perf.items()}
    scalar["gpus_dp"] = float(found.layout.dp[0])
    mem = {k: float(np.asarray(v).reshape(-1)[0]) for k, v in found.mem.items()}
    return Result(knobs, fits=reason < 0, perf=scalar, mem=mem, spec=spec)


def plateau(gpu: str) -> float:
    """The GPU's GEMM plateau: the largest share of dense peak in its catalog matmul curve."""
    return max(p.fraction for p in catalog().gpus[gpu].matmul_efficiency)
