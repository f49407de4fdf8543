"""DeepSpeed versions whose ZeRO-3 parameter fetches cannot hide behind compute.

Before DeepSpeed 0.6 a ZeRO-3 fetch blocked the device: "the async version is not async at
all, because each all_gather calls torch.cuda.synchronize() to guarantee previous
communication op to be completed" (DeepSpeed PR #1188, June-September 2021), and the
prefetch of Hugging Face models was skipped by an off-by-one step id ("why stage 3 parameter
pre-fetching seems to not be working for our huggingface model?", issue #1069, May 2021; fix
attempt PR #1170). The overlapped fetch came with the PartitionedParameterCoordinator of
PR #1453 (DeepSpeed 0.6, 2022). So a run on an older DeepSpeed pays every ZeRO-3 all-gather
(and every fetch of an offloaded parameter from the host) in full: the profile's
`overlap_zero3` is 0 for it. The hf profile's 1.0 describes DeepSpeed >= 0.6; the
megatron_deepspeed profile, whose rows all ran 2021 code, sets 0 for the whole stack.

A runs file says which DeepSpeed ran in a `deepspeed_version` column or in its notes
("DeepSpeed 0.3.17", or the log line "DeepSpeed info: version=0.3.17"); without it nothing
changes.
"""

from __future__ import annotations

import re

import numpy as np

from planner.errors import PlanError

OVERLAPPED_FETCH_FROM = (0, 6)  # first DeepSpeed release with the prefetching coordinator (PR #1453)

_IN_NOTES = re.compile(r"deepspeed(?:\s+info:)?\s*(?:version\s*[=:]?\s*|v)?(\d+)\.(\d+)(?:\.\d+)?", re.I)
_CELL = re.compile(r"v?(\d+)\.(\d+)(?:\.\d+)?(?:\S*)")


def version_of(row: dict, notes: list[str]) -> str | None:
    """The DeepSpeed version a runs-file row states ("major.minor[.patch]"), else None."""
    cell = (row.get("deepspeed_version") or "").strip()
    if cell:
        m = _CELL.fullmatch(cell)
        if not m:
            raise PlanError("deepspeed_version", f"row {row.get('id')}: {cell!r} is not a version (e.g. 0.3.17, 0.9.5)")
        version = f"{m.group(1)}.{m.group(2)}"
    else:
        m = _IN_NOTES.search(row.get("notes") or "")
        if not m:
            return None
        version = f"{m.group(1)}.{m.group(2)}"
    if blocking_fetch(version):
        notes.append(f"DeepSpeed {version}: ZeRO-3 fetches block the device (no overlap before "
                     f"{OVERLAPPED_FETCH_FROM[0]}.{OVERLAPPED_FETCH_FROM[1]})")
    return version


def blocking_fetch(version: str | None) -> bool:
    """True for a stated DeepSpeed older than OVERLAPPED_FETCH_FROM."""
    if not version:
        return False
    major, minor = (int(x) for x in version.split(".")[:2])
    return (major, minor) < OVERLAPPED_FETCH_FROM


def with_fetch_overlap(prof: dict, version: str | None) -> dict:
    """The per-candidate profile values with `overlap_zero3` at 0 when the run's DeepSpeed blocks
    on every fetch (unchanged otherwise)."""
    if not blocking_fetch(version):
        return prof
    from planner.stacks import merged

    return merged(prof, {"overlap_zero3": np.zeros_like(np.asarray(prof["overlap_zero3"], dtype=np.float64))})
