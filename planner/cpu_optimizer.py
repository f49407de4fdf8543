"""The CPU optimizer step of ZeRO-Offload / ZeRO-Infinity (DeepSpeed CPU Adam), per rank.

CPU Adam streams each parameter of the rank's shard through host memory: fp32 master, grad,
two moments read, three written, the 16-bit copy written (OPTIMIZER_BYTES_PER_PARAM of
planner/throughput.py; Ren et al. ATC'21 sec. 4.1 and 5.1: memory bound, SIMD + OpenMP). Two
limits, the smaller wins:

- the node's host memory bandwidth, shared by the node's ranks (the prior model);
- the OpenMP threads of the rank: DeepSpeed's Step_AVX loop is `#pragma omp parallel for`
  (csrc/includes/cpu_adam.h), so it runs on OMP_NUM_THREADS cores. torch.distributed.launch
  and torchrun set OMP_NUM_THREADS=1 per process when it is unset ("Setting OMP_NUM_THREADS
  environment variable for each process to be 1 in default", printed in seed 002's Jean Zay logs,
  bigscience experiments/gpt2-meg/meg_gpt2_perf_n16.out; the seed's HF + DeepSpeed scripts launch
  the same way, experiments/gpt2-hf-ds/hf_ds_gpt2_n4.slurm). The stack profile's
  `cpu_optimizer_threads_per_rank` says how many (0: the rank's share of the node, as the
  DeepSpeed launcher leaves it).

One core streams about CORE_STREAM_GBYTES_PER_S: Little's law on the core's outstanding L1
misses (12 line-fill buffers x 64 B, Intel 64 and IA-32 Architectures Optimization Reference
Manual, Skylake server microarchitecture) over ~80 ns DRAM latency is ~10 GB/s; single-core
STREAM on Skylake/Cascade Lake servers measures 10-14 GB/s.
"""

from __future__ import annotations

import numpy as np

from planner.system import System

HOST_MEMORY_GBYTES_PER_S_PER_NODE = 150.0  # two-socket server, STREAM-like (the prior model's figure)
CORE_STREAM_GBYTES_PER_S = 10.0


def cpu_adam_s(shard_params, bytes_per_param: float, system: System, threads_per_rank) -> np.ndarray:
    """Seconds of one CPU Adam step over `shard_params` parameters per rank."""
    node_share_Bps = HOST_MEMORY_GBYTES_PER_S_PER_NODE * 1e9 / system.gpus_per_node
    threads = np.asarray(threads_per_rank, dtype=np.float64)
    rank_Bps = np.where(threads > 0, np.minimum(node_share_Bps, threads * CORE_STREAM_GBYTES_PER_S * 1e9),
                        node_share_Bps)
    return np.asarray(shard_params, dtype=np.float64) * bytes_per_param / rank_Bps
