"""Measured bus bandwidths from a `plan allreduce-bench --json` file.

Format: {"busbw_gbps": {"intranode": X | null, "internode": Y | null}, ...}; with `results` (the
all-reduce sizes), `nproc` and `gpus_per_node` as `plan allreduce-bench --json` writes them, each busbw is
read on the planner's curve at the size, ranks and nodes it was measured at (planner/measured_plateau.py;
every size of `results` where they were measured over all ranks) and the plateau that gives becomes
System.measured_*_busbw_gbps, which the comm model prefers to the catalog's link numbers; a file with the
busbw alone gives the plateau itself.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from planner.errors import PlanError
from planner.measured_plateau import Fit, Reading, fitted_plateau, share_at
from planner.system import System


def load_network(path: str | Path) -> dict[str, float | None]:
    """{'intranode_busbw_gbps': X | None, 'internode_busbw_gbps': Y | None}; PlanError if malformed."""
    return busbw_values(read_bench(path), path)


def read_bench(path: str | Path):
    """The parsed JSON of a bench file; PlanError where it cannot be read."""
    field = "network_from"
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise PlanError(field, f"file not found: {path}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise PlanError(field, f"cannot read {path} ({e})") from None
    except json.JSONDecodeError as e:
        raise PlanError(field, f"{path} is not JSON ({e.msg} at line {e.lineno})") from None
    return data


def busbw_values(data, path: str | Path) -> dict[str, float | None]:
    """The busbw_gbps object of a bench file, checked."""
    field = "network_from"
    bw = data.get("busbw_gbps") if isinstance(data, dict) else None
    if not isinstance(bw, dict):
        raise PlanError(field, f"{path} has no 'busbw_gbps' object (write it with `plan allreduce-bench --json`)")
    out: dict[str, float | None] = {}
    for key in ("intranode", "internode"):
        v = bw.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v <= 0):
            raise PlanError(field, f"busbw_gbps.{key} must be a positive number or null, not {v!r}")
        out[f"{key}_busbw_gbps"] = float(v) if v is not None else None
    if out["intranode_busbw_gbps"] is None and out["internode_busbw_gbps"] is None:
        raise PlanError(field, f"{path}: busbw_gbps has neither 'intranode' nor 'internode'")
    return out


def readings(data) -> dict[str, Reading | None]:
    """Where each busbw of a `plan allreduce-bench --json` report was measured ({"intranode": Reading | None,
    "internode": ...}): at its largest all-reduce size (trainer/collectives.py reports that size's busbw, and
    measures a node's own busbw at the largest size asked), over all `nproc` ranks with `gpus_per_node` on
    each node, or over one node's ranks. The busbw measured over all ranks also carries every size of
    `results` (Reading.points: the plateau is fitted to all of them, planner/measured_plateau.py), the
    largest at the busbw_gbps figure. None where the file does not say (a busbw alone, hand-written)."""
    none = {"intranode": None, "internode": None}
    if not isinstance(data, dict) or not isinstance(data.get("results"), list):
        return none
    measured = {float(r["size_bytes"]): float(r["busbw_gbps"]) for r in data["results"]
                if isinstance(r, dict) and r.get("op") == "all_reduce" and _positive(r.get("busbw_gbps"))
                and _positive(r.get("size_bytes"))}
    world, per_node = data.get("nproc"), data.get("gpus_per_node")
    if not measured or not isinstance(world, int) or not isinstance(per_node, int) or not 1 <= per_node <= world:
        return none
    bw = data.get("busbw_gbps") or {}
    largest = max(measured)
    out = dict(none)
    for key, ranks in (("intranode", per_node), ("internode", world)):
        if _positive(bw.get(key)) and ranks >= 2 and (key == "intranode" or world > per_node):
            value = float(bw[key])
            points = ()  # a node's own busbw (several nodes) is measured at the largest size alone
            if ranks == world:
                points = tuple(sorted({**measured, largest: value}.items()))
            out[key] = Reading(busbw_gbps=value, size_bytes=largest, ranks=ranks, per_node=per_node,
                               points=points if len(points) > 1 else ())
    return out


def _positive(v) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and v > 0


def with_measured(system: System, values: dict[str, float | None],
                  where: dict[str, Reading | None]) -> tuple[System, str]:
    """`system` with measured plateaus (values: {"intranode": Gbps | None, "internode": ...}, each read on the
    system's curve where `where` says at which size it was measured), and one line saying which plateau was
    inferred from what."""
    from planner.comm import system_curves

    curves = system_curves(system)
    update, words = {}, []
    for key, label in (("intranode", "within a node"), ("internode", "between nodes")):
        value, reading = values.get(key), where.get(key)
        if not value:
            update[f"measured_{key}_busbw_gbps"] = None
            continue
        fit = fitted_plateau(curves, reading) if reading else None
        plateau = fit.plateau_gbps if fit else None
        update[f"measured_{key}_busbw_gbps"] = plateau or value
        words.append(f"{_gbps(plateau or value)} Gbps {label}{_said(curves, reading, value, fit)}")
    note = ", ".join(words)
    return system.model_copy(update={**update, "measured_busbw_note": note}), note


def _said(curves, reading: Reading | None, value: float, fit: Fit | None) -> str:
    """How a plateau came from its measurement ("" where the file gave a busbw alone: taken as the plateau)."""
    if reading is None:
        return ""
    at = f"{_gbps(value)} Gbps measured at {_size(reading.size_bytes)} over {reading.ranks} ranks"
    if fit is None:
        return f" ({at}, taken as the plateau: faster than the curve allows there; measure larger sizes)"
    plateau = fit.plateau_gbps
    if len(fit.used) > 1:
        sizes = _span(fit.used[0][0], fit.used[-1][0])
        left = len(reading.points) - len(fit.used)
        skipped = f", {left} faster than the curve allows left out" if left else ""
        return (f" (plateau fitted to {len(fit.used)} sizes, {sizes} over {reading.ranks} ranks{skipped}: each "
                f"size's own plateau within {fit.spread_pct:.1f}% of it; {_gbps(value)} Gbps at "
                f"{_size(reading.size_bytes)}, curve share {share_at(curves, reading, plateau):.2f} there)")
    if plateau == value:
        return f" (measured at {_size(reading.size_bytes)} over {reading.ranks} ranks: the top of the curve there)"
    return f" (plateau inferred from {at}: curve share {share_at(curves, reading, plateau):.2f} there)"


def _gbps(v: float) -> str:
    return f"{v:,.0f}" if v >= 100 else f"{v:.3g}"


def _size(n: float) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.4g} {unit}"
    return f"{n:.0f} B"


def _span(a: float, b: float) -> str:
    """'4-64 MiB', '64 MiB-1 GiB'."""
    lo, hi = _size(a), _size(b)
    return f"{lo.split()[0]}-{hi}" if lo.split()[1:] == hi.split()[1:] else f"{lo}-{hi}"
