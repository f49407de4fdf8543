"""The bundled trainer: a GPT built from the planner's ModelSpec, run under DDP, DeepSpeed
ZeRO or FSDP2 with the planner's knobs, reporting speed and exact memory as a result JSON.

Entry points: `plan train` / `python -m trainer` (trainer/cli.py) -> trainer/launch.py
(elastic launch, or join torchrun/srun) -> trainer/worker.py on each rank -> trainer/loop.py.

Per-rank baseline memory (for an RLIMIT_AS budget): a CPU rank of the tiny model peaks at
~0.45 GB RSS (DDP/FSDP2) to ~0.55 GB (DeepSpeed, which imports more); address space (VSZ)
is larger than RSS (1-3 GB: shared libraries and reserved mappings), so an address-space limit
must leave ~4 GB per rank above the model's own bytes.
"""
