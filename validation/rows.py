"""Calibration CSV rows -> (ModelSpec, ExecutionPlan, System) and the measured speed.

Used by validate_calibration.py and the golden tests. What a row does not state is derived
and said so in `Case.assumptions` (never guessed silently).
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass, field
from pathlib import Path

from hardware.catalog import load_catalog
from planner.model import ModelSpec
from planner.scenario import ExecutionPlan
from planner.sizes import gpt_for_params
from planner.system import System

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA_DIR = REPO / "validation" / "data"  # a copy of ../shared/calibration: works in a fresh clone
MEGATRON_VOCAB = 51200  # what the Megatron runs used when a row leaves vocab empty

# gpu_type prefix -> (catalog GPU id, cluster whose nodes and network the row ran on)
_GPUS = [
    ("V100-16GB", "v100-16gb", "jean-zay-v100-32gb"),
    ("V100-32GB (DGX-2)", "v100-32gb", "dgx-v100"),
    ("V100-32GB", "v100-32gb", "jean-zay-v100-32gb"),
    ("A100-80GB", "a100-80gb", "dgx-a100"),
    ("A100-40GB", "a100-40gb", "dgx-a100"),
    ("A100", "a100-80gb", "jean-zay-a100"),
    ("MI250X", "mi250x", "adastra-mi250x"),
]


@dataclass
class Case:
    id: str
    source: str  # seed002, seed003, published
    spec: ModelSpec
    plan: ExecutionPlan
    system: System
    outcome: str
    measured_tokens_per_s: float | None
    measured_iter_time_s: float | None
    assumptions: list[str] = field(default_factory=list)

    @property
    def scored(self) -> bool:
        """Rows with a measured speed, a run that finished and a consistent layout."""
        consistent = not any(a.startswith("INCONSISTENT") for a in self.assumptions)
        return bool(self.measured_tokens_per_s) and self.outcome == "ok" and consistent


def read_rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def source_of(row: dict[str, str]) -> str:
    rid = row["id"]
    if rid.startswith("s002"):
        return "seed002"
    if rid.startswith("s003"):
        return "seed003"
    return "published:" + rid.rsplit("_", 1)[0]


def _num(row, key, cast=float):
    v = (row.get(key) or "").strip()
    return cast(float(v)) if v else None


def _spec(row, notes: list[str]) -> ModelSpec:
    name = row["model_name"]
    catalog = load_catalog()
    if name in catalog.models:
        from planner.presets import resolve_model

        return resolve_model(name)
    layers, hidden, heads = _num(row, "n_layers", int), _num(row, "hidden", int), _num(row, "n_heads", int)
    seq = _num(row, "seq_len", int) or 2048
    if layers and hidden and heads:
        vocab = _num(row, "vocab", int)
        if vocab is None:
            vocab = MEGATRON_VOCAB
            notes.append(f"vocab {MEGATRON_VOCAB} (Megatron's)")
        return ModelSpec(name=name, n_layers=layers, hidden=hidden, n_heads=heads,
                         n_kv_heads=_num(row, "n_kv_heads", int), ffn_hidden=_num(row, "ffn_hidden", int),
                         vocab=vocab, vocab_multiple=128, max_positions=max(seq, 2048))
    notes.append("shape from the bare-size rule")
    return gpt_for_params(float(row["n_params_B"]) * 1e9, name=name)


def _system(row, notes: list[str]) -> System:
    catalog = load_catalog()
    gtype = row["gpu_type"]
    gpu_id, cluster_id = next((g, c) for prefix, g, c in _GPUS if gtype.startswith(prefix))
    cluster = catalog.clusters[cluster_id]
    gpus = int(row["n_gpus"])
    per_node = _num(row, "gpus_per_node", int) or cluster.gpus_per_node
    notes.append(f"nodes and network of {cluster_id}")
    gpu = catalog.gpus[gpu_id]
    return System(gpu=gpu, cluster_id=cluster_id, gpus=gpus, gpus_per_node=min(per_node, gpus),
                  host_ram_gib=cluster.host_ram_gib, host_to_gpu_gbps=cluster.host_to_gpu_gbps,
                  intranode_gbps=cluster.intranode_gbps or gpu.intranode_gbps,
                  internode_gbps=cluster.internode_gbps)


def _sharding(row, notes) -> str:
    v = (row.get("sharding") or row.get("zero_stage_or_fsdp") or "none").strip()
    if v.startswith("zero (stage not stated"):
        if "ZeRO3" in v:
            notes.append("ZeRO stage not stated; the branch is named ZeRO3: zero3")
            return "zero3"
        notes.append("ZeRO stage not stated: zero1")
        return "zero1"
    return v or "none"


def _plan(row, spec: ModelSpec, system: System, notes: list[str]) -> ExecutionPlan:
    tp, pp = _num(row, "tp", int) or 1, _num(row, "pp", int) or 1
    dp = _num(row, "dp", int) or system.gpus // (tp * pp)
    mb = _num(row, "micro_batch", int) or 1
    gbs = _num(row, "global_batch", int) or mb * dp
    ga = _num(row, "grad_accum", int) or max(gbs // (mb * dp), 1)
    ckpt_raw = (row.get("activation_checkpointing") or "").strip()
    sp = "sequence parallel" in ckpt_raw
    ckpt = ckpt_raw.split(" ")[0] if ckpt_raw else ""
    if not ckpt:
        ckpt = "full"
        notes.append("checkpointing not stated: full (Megatron examples)")
    prec_raw = (row.get("precision") or "").strip().split(" ")[0]
    precision = prec_raw if prec_raw in ("fp32", "fp16", "bf16") else ("bf16" if system.gpu.bf16_tflops else "fp16")
    m = re.search(r"interleave[^=]*=\s*(\d+)", row.get("notes") or "")
    vpp = int(m.group(1)) if m and pp > 1 else 1
    offload = (row.get("offload") or "none").strip() or "none"
    optimizer = "adafactor" if "adafactor" in (row.get("notes") or "").lower() else "adamw"
    if tp * pp * dp != system.gpus:
        notes.append(f"INCONSISTENT layout: tp*pp*dp = {tp * pp * dp} != {system.gpus} GPUs (not scored)")
    return ExecutionPlan(optimizer=optimizer, tp=tp, pp=pp, vpp=vpp, dp=dp, sequence_parallel=sp, sharding=_sharding(row, notes),
                         offload=offload, activation_checkpointing=ckpt, precision=precision,
                         micro_batch=mb, grad_accum=ga, seq_len=_num(row, "seq_len", int) or 2048,
                         reduce_bucket_elems=spec.hidden**2, allgather_bucket_elems=spec.hidden**2,
                         stage3_prefetch_elems=int(0.9 * spec.hidden**2))


def megatron_iteration_flops(spec: ModelSpec, seq: int, global_batch: int) -> float:
    """Narayanan et al. SC21 eq. (3): 96 B s l h^2 (1 + s/6h + V/16lh), recompute included."""
    l, h, v = spec.n_layers, spec.hidden, spec.vocab_padded
    return 96.0 * global_batch * seq * l * h * h * (1 + seq / (6 * h) + v / (16 * l * h))


def _measured(row, spec: ModelSpec, plan: ExecutionPlan, notes) -> tuple[float | None, float | None]:
    tokens_step = plan.global_batch * plan.seq_len
    it = _num(row, "measured_iter_time_s")
    if it:
        return tokens_step / it, it
    days = _num(row, "days_per_100B_tokens")
    if days:
        tps = 1e11 / (days * 86400)
        return tps, tokens_step / tps
    tf = _num(row, "measured_tflops_per_gpu")
    if tf:
        gpus = plan.gpus
        if row["id"].startswith("s00"):  # seed 002's formula with the row's stated size
            factor = 4 if plan.activation_checkpointing == "full" else 3
            flop = float(row["n_params_B"]) * 1e9 * factor * 2 * tokens_step
        else:
            flop = megatron_iteration_flops(spec, plan.seq_len, plan.global_batch)
        notes.append("iteration time from the measured TFLOPs")
        it = flop / (tf * 1e12 * gpus)
        return tokens_step / it, it
    return None, None


def load_cases(data_dir: Path) -> tuple[list[Case], list[str]]:
    """Every row that names a layout; the ids of rows skipped (and why)."""
    cases, skipped = [], []
    for name in ("seed_runs.csv", "published_dev.csv"):
        for row in read_rows(data_dir / name):
            notes: list[str] = []
            if not (row.get("tp") and row.get("n_gpus")):
                skipped.append(f"{row['id']}: no parallel layout in the row")
                continue
            spec = _spec(row, notes)
            system = _system(row, notes)
            plan = _plan(row, spec, system, notes)
            tps, it = _measured(row, spec, plan, notes)
            cases.append(Case(row["id"], source_of(row), spec, plan, system, row.get("outcome") or "ok",
                              tps, it, notes))
    return cases, skipped
