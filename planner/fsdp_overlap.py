"""The part of FSDP's per-unit collectives that no prefetch hides.

FSDP gathers unit i+1 while unit i computes, and reduce-scatters unit i's gradient while unit
i-1's backward runs (Zhao et al. VLDB 2023), so only the first gather of forward and the last
reduce-scatter of backward have nothing to hide behind: 1/L of the traffic in theory. The
traces of IBM and PyTorch's fms-fsdp runs (Llama-2 7B, 128 A100, 400 Gbps; "Maximizing training
throughput using PyTorch FSDP", PyTorch blog, 2024, appendix "Communication computation overlap")
measure less: "the overlap percentage possible is 90%. This is because the first block in forward
pass and the last block in backward pass are not able to be overlapped", and on their H100
cluster (800 Gbps) "there is a 10% gap due to network 'peeking' out". So at least
`MIN_EXPOSED_SHARE` of each pass's FSDP traffic stays on the critical path, however much
compute there is to hide it behind.
"""

from __future__ import annotations

import numpy as np

MIN_EXPOSED_SHARE = 0.10  # fms-fsdp traces: "the overlap percentage possible is 90%"


def exposed_floor(comm_s, units) -> np.ndarray:
    """Seconds of `comm_s` (one pass's FSDP collectives over `units` wrapped units) never hidden."""
    comm_s = np.asarray(comm_s, dtype=np.float64)
    return comm_s * np.maximum(1.0 / np.maximum(units, 1.0), MIN_EXPOSED_SHARE)
