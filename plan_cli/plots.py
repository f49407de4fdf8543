"""Figures for `plan estimate --plot FILE` (matplotlib, imported lazily; PNG or SVG by extension).

plot_sweep(points, path): days-to-train against GPU count, the best plan labelled at each point
(seed 003's figure). plot_breakdown(estimates, path): memory and step-time bars of the top plans.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from planner.errors import PlanError

FORMATS = (".png", ".svg")
GIB = 2**30


def _figure_path(path: str | Path) -> Path:
    p = Path(path)
    if p.suffix.lower() not in FORMATS:
        raise PlanError("plot", f"{p.name}: use a .png or .svg file name")
    return p


def check_plot(path: str | Path, *, sweep: bool, tokens) -> None:
    """What `plot_sweep` / `plot_breakdown` would refuse only after the search: the name, the place, and a sweep
    plot's days (it needs --tokens)."""
    import importlib.util

    from planner.out_path import check_out_file

    _figure_path(path)
    check_out_file(path, "plot")
    if sweep and tokens is None:
        raise PlanError("plot", "a sweep plot shows days to train: add --tokens (e.g. 100B)")
    if importlib.util.find_spec("matplotlib") is None:  # the planner-only set-up: said after the whole table
        raise PlanError("plot", NO_MATPLOTLIB)


NO_MATPLOTLIB = "needs matplotlib (pip install 'plan[plot]')"


def _pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise PlanError("plot", NO_MATPLOTLIB) from None
    return plt


def _get(obj: Any, key: str, default=None):
    if isinstance(obj, Mapping):
        return obj.get(key, default)
    return getattr(obj, key, default)


def plan_label(plan: Any) -> str:
    """Short label of an ExecutionPlan (or a dict with its knobs)."""
    parts = []
    tp, pp = _get(plan, "tp", 1), _get(plan, "pp", 1)
    if tp > 1 or pp > 1:
        parts.append(f"tp{tp}pp{pp}")
    sharding = _get(plan, "sharding", "none")
    parts.append("ddp" if sharding == "none" else sharding)
    if _get(plan, "offload", "none") != "none":
        parts.append("off:" + _get(plan, "offload"))
    ckpt = _get(plan, "activation_checkpointing", "none")
    if ckpt != "none":
        parts.append("ckpt:" + ckpt)
    parts.append(f"mb{_get(plan, 'micro_batch', 1)}xga{_get(plan, 'grad_accum', 1)}")
    return " ".join(parts)


def plot_sweep(points: Sequence[Mapping | Any], path: str | Path) -> Path:
    """Days-to-train vs GPU count. Each point: gpus, days (None: nothing fits), label (or plan)."""
    out = _figure_path(path)
    rows = []
    for pt in points:
        label = _get(pt, "label") or (plan_label(_get(pt, "plan")) if _get(pt, "plan") is not None else "")
        rows.append((int(_get(pt, "gpus")), _get(pt, "days"), label))
    rows.sort(key=lambda r: r[0])
    ok = [(g, d, lab) for g, d, lab in rows if d is not None]
    if not ok:
        raise PlanError("plot", "no GPU count of the sweep has a plan that fits; nothing to plot")
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 5))
    xs, ys = [g for g, _, _ in ok], [d for _, d, _ in ok]
    ax.plot(xs, ys, marker="o", label="best plan")
    ideal = [ys[0] * xs[0] / g for g in xs]
    ax.plot(xs, ideal, linestyle=":", color="grey", label="linear scaling")
    for g, d, lab in ok:
        ax.annotate(lab, (g, d), textcoords="offset points", xytext=(4, 6), fontsize=7, rotation=20)
    for g, d, _ in rows:
        if d is None:
            ax.axvline(g, color="red", alpha=0.3, linestyle="--")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(xs, [str(x) for x in xs])
    ax.set_xlabel("GPUs")
    ax.set_ylabel("days to train")
    ax.set_title("Days to train vs GPU count (best plan at each count)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)
    return out


_MEM_PARTS = ("weights", "grads", "optimizer", "activations", "comm_buffers", "runtime", "fragmentation")
_TIME_PARTS = ("compute_s", "comm_exposed_s", "bubble_s", "offload_s")


def plot_breakdown(estimates: Sequence[Any], path: str | Path) -> Path:
    """Stacked bars: memory per GPU (GiB) and step time (s) of each Estimate, best first."""
    out = _figure_path(path)
    if not estimates:
        raise PlanError("plot", "no plans to plot")
    plt = _pyplot()
    labels = [f"#{i + 1} {plan_label(e.plan)}" for i, e in enumerate(estimates)]
    fig, (ax_m, ax_t) = plt.subplots(1, 2, figsize=(12, 0.6 * len(estimates) + 2.5))
    ys = list(range(len(estimates)))
    left = [0.0] * len(estimates)
    for part in _MEM_PARTS:
        vals = [getattr(e.memory, f"{part}_bytes") / GIB for e in estimates]
        ax_m.barh(ys, vals, left=left, label=part)
        left = [a + b for a, b in zip(left, vals)]
    cap = estimates[0].memory.capacity_bytes / GIB
    ax_m.axvline(cap, color="black", linestyle="--", label="capacity")
    ax_m.set_yticks(ys, labels, fontsize=7)
    ax_m.invert_yaxis()
    ax_m.set_xlabel("GiB per GPU")
    ax_m.legend(fontsize=7)
    left = [0.0] * len(estimates)
    for part in _TIME_PARTS:
        vals = [getattr(e.time, part) if e.time is not None else 0.0 for e in estimates]
        ax_t.barh(ys, vals, left=left, label=part.removesuffix("_s"))
        left = [a + b for a, b in zip(left, vals)]
    ax_t.set_yticks(ys, [""] * len(ys))
    ax_t.invert_yaxis()
    ax_t.set_xlabel("seconds per optimizer step")
    ax_t.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)
    return out
