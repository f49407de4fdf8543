"""Process-group set-up: rank/world from torchrun or SLURM env, gloo on CPU, NCCL on GPU."""

from __future__ import annotations

import os
import re
import subprocess

import torch
import torch.distributed as dist

from planner.rendezvous import TORCH_DEFAULT_PORT, slurm_port


def launched_externally(env=None) -> bool:
    """True under torchrun (RANK/WORLD_SIZE) or as one task of an srun step with several tasks."""
    env = os.environ if env is None else env
    if "RANK" in env and "WORLD_SIZE" in env:
        return True
    return slurm_task_env(env) is not None


def tasks_per_node(text: str) -> list[int] | None:
    """SLURM's compressed tasks-per-node list, one count per node: "8(x2)" -> [8, 8], "3,2(x2)" -> [3, 2, 2]
    (srun(1) SLURM_STEP_TASKS_PER_NODE: "2(x3)" is 2 tasks on each of 3 nodes); None when the text is not one."""
    counts: list[int] = []
    for part in text.split(","):
        m = re.fullmatch(r"\s*(\d+)(?:\(x(\d+)\))?\s*", part)
        if m is None or int(m[1]) == 0 or (m[2] is not None and int(m[2]) == 0):
            return None
        counts += [int(m[1])] * int(m[2] or 1)
    return counts


def tasks_on_node(text: str, node: int) -> int | None:
    """Tasks on node `node` (from 0) of SLURM's compressed list; None when the text is no list or has no such node
    (a node past the list was read as the last one's count)."""
    counts = tasks_per_node(text)
    return counts[node] if counts is not None and 0 <= node < len(counts) else None


def step_tasks_per_node(env, world: int) -> int:
    """The tasks every node of the srun step holds: SLURM_STEP_TASKS_PER_NODE (else the job's SLURM_TASKS_PER_NODE,
    else --ntasks-per-node's SLURM_NTASKS_PER_NODE). A step with different counts per node ("3,2(x2)", "8(x2),4"), or
    whose counts do not add up to its SLURM_STEP_NUM_TASKS, is refused naming the variable: the trainer's node
    count (world / local ranks) and the bench's per-node groups need one count on every node."""
    from planner.errors import PlanError

    fix = "start the same number on every node: srun --ntasks-per-node=N (one task per GPU)"
    for key in ("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"):
        counts = tasks_per_node(env.get(key, "")) if env.get(key) else None
        if counts is None:
            continue
        if sum(counts) != world:
            if key == "SLURM_TASKS_PER_NODE":  # the job's tasks, not this step's
                continue
            raise PlanError(key, f"{env[key]}: {sum(counts)} tasks in all, but SLURM_STEP_NUM_TASKS is {world}; {fix}")
        if len(set(counts)) > 1:
            shown = ", ".join(map(str, counts[:8])) + (", ..." if len(counts) > 8 else "")
            raise PlanError(key, f"{env[key]}: the step's nodes hold different numbers of tasks ({shown}); {fix}")
        return counts[0]
    per_node = env.get("SLURM_NTASKS_PER_NODE", "")
    return int(per_node) if per_node.isdigit() and int(per_node) > 0 and world % int(per_node) == 0 else 1


def slurm_task_env(env) -> dict[str, str] | None:
    """torch's RANK / WORLD_SIZE / LOCAL_RANK / LOCAL_WORLD_SIZE of this process as one task of an srun step with
    several tasks, None otherwise. srun sets the step's SLURM_STEP_NUM_TASKS and SLURM_STEP_TASKS_PER_NODE in every
    task (srun(1), OUTPUT ENVIRONMENT VARIABLES); an sbatch batch script has SLURM_NTASKS (its --ntasks /
    --ntasks-per-node) and SLURM_PROCID=0 but no step variables: it is ONE process, not rank 0 of SLURM_NTASKS
    (taken for one, `plan train` / `plan tune` in a batch script waited for ranks that never came).
    SLURM_NTASKS_PER_NODE exists only with --ntasks-per-node: `srun -N 2 -n 16` made 16 "nodes" of 1 rank."""
    step_tasks = env.get("SLURM_STEP_NUM_TASKS", "")
    if "SLURM_PROCID" not in env or not step_tasks.isdigit() or int(step_tasks) <= 1:
        return None
    local = step_tasks_per_node(env, int(step_tasks))
    return {"RANK": env["SLURM_PROCID"], "WORLD_SIZE": step_tasks, "LOCAL_RANK": env.get("SLURM_LOCALID", "0"),
            "LOCAL_WORLD_SIZE": str(local)}


def launcher_ranks(env=None) -> tuple[int, int]:
    """(WORLD_SIZE, LOCAL_WORLD_SIZE) of a process torchrun / srun started (after env_from_slurm), refused naming the
    variable where the nodes cannot all hold LOCAL_WORLD_SIZE ranks (torchruns with different --nproc-per-node): the
    trainer counts its nodes as WORLD_SIZE / LOCAL_WORLD_SIZE (torch's elastic agent sets GROUP_WORLD_SIZE, the
    number of nodes, to check against)."""
    from planner.errors import PlanError

    env = os.environ if env is None else env
    world = int(env["WORLD_SIZE"])
    local = int(env.get("LOCAL_WORLD_SIZE") or world)
    nodes = env.get("GROUP_WORLD_SIZE", "")
    fix = "start the same number of ranks on every node (torchrun --nproc-per-node, srun --ntasks-per-node)"
    if local < 1 or world % local:
        raise PlanError("LOCAL_WORLD_SIZE", f"{local} ranks on this node, but WORLD_SIZE {world} is no multiple of it; {fix}")
    if nodes.isdigit() and int(nodes) * local != world:
        raise PlanError("LOCAL_WORLD_SIZE", f"{local} ranks on this node x GROUP_WORLD_SIZE {nodes} nodes, but WORLD_SIZE "
                                            f"is {world}: the nodes hold different numbers of ranks; {fix}")
    return world, local


def step_ranks(env=None) -> tuple[int, int] | None:
    """(WORLD_SIZE, LOCAL_WORLD_SIZE) that torchrun or an srun step decided for this process, None where no launcher
    did (our own launch then starts --nproc ranks). Reads the variables only (env_from_slurm writes them later)."""
    env = os.environ if env is None else env
    if "RANK" in env and "WORLD_SIZE" in env:
        return launcher_ranks(env)
    task = slurm_task_env(env)
    return None if task is None else launcher_ranks(task)


def _first_slurm_host() -> str:
    """Rank 0's host: the first node of the step (srun's SLURM_STEP_NODELIST; a step on part of the allocation
    does not start on the job's first node), else of the job."""
    nodes = (os.environ.get("SLURM_STEP_NODELIST") or os.environ.get("SLURM_JOB_NODELIST")
             or os.environ.get("SLURM_NODELIST") or "localhost")
    try:
        out = subprocess.run(["scontrol", "show", "hostnames", nodes], capture_output=True, text=True, timeout=10)
        if out.returncode == 0 and out.stdout.strip():
            return out.stdout.split()[0]
    except (OSError, subprocess.TimeoutExpired):
        pass
    return first_host(nodes)


def first_host(nodelist: str) -> str:
    """The first host of SLURM's compressed node list without scontrol: "gpu[03-04,07],cpu1" -> "gpu03" (it was
    "gpu", a host that does not exist)."""
    m = re.match(r"([^,\[]*)(?:\[([^,\]\-]*))?", nodelist)
    return (m[1] + (m[2] or "")) if m else nodelist


def check_block_placement(env) -> None:
    """The trainer's meshes take consecutive ranks as one node's (tensor-parallel groups, FSDP-hybrid shard groups:
    trainer/backends/mesh.py, fsdp.py); srun --distribution=cyclic / plane deals them over the nodes (srun(1) -m),
    so a plan would be measured with its node-local groups spread over the network. SLURM_GTIDS (srun(1): the global
    task ids on this node) is consecutive on every node under block placement and on none under cyclic with 2+
    tasks per node; without it, SLURM_DISTRIBUTION's node part says so. Refused, naming the variable."""
    from planner.errors import PlanError

    fix = "run srun with --distribution=block (its default)"
    gtids = [int(t) for t in env.get("SLURM_GTIDS", "").split(",") if t.strip().isdigit()]
    if gtids and gtids != list(range(gtids[0], gtids[0] + len(gtids))):
        shown = ",".join(map(str, gtids[:6])) + (",..." if len(gtids) > 6 else "")
        raise PlanError("SLURM_GTIDS", f"{shown}: srun placed non-consecutive ranks on this node "
                        f"(SLURM_DISTRIBUTION={env.get('SLURM_DISTRIBUTION', 'unset')}); the trainer's node-local groups "
                        f"are consecutive ranks: {fix}")
    node_part = env.get("SLURM_DISTRIBUTION", "").split(":")[0].strip().lower()
    if not gtids and (node_part in ("cyclic", "arbitrary") or node_part.startswith("plane")):
        raise PlanError("SLURM_DISTRIBUTION", f"{env['SLURM_DISTRIBUTION']}: srun deals consecutive ranks to different "
                        f"nodes; the trainer's node-local groups are consecutive ranks: {fix}")


def env_from_slurm(rdzv_endpoint: str | None, block_ranks: bool = False) -> str:
    """Fill torch's RANK/WORLD_SIZE/LOCAL_RANK/MASTER_* from SLURM's variables (srun). `block_ranks`: refuse a step
    that did not place consecutive ranks on one node (check_block_placement; the trainer needs it, the bench groups
    ranks by their host). Returns where MASTER_PORT came from (for rendezvous_line)."""
    task = None if "RANK" in os.environ else slurm_task_env(os.environ)
    if task is None:
        return "MASTER_PORT"  # torchrun's (or not launched by srun)
    if block_ranks and int(task["LOCAL_WORLD_SIZE"]) > 1:  # one rank per node: every placement is block
        check_block_placement(os.environ)
    os.environ.update(task)
    port_from = "MASTER_PORT" if os.environ.get("MASTER_PORT") else None
    if rdzv_endpoint:
        host, _, port = rdzv_endpoint.rpartition(":") if "]" in rdzv_endpoint else rdzv_endpoint.partition(":")
        os.environ["MASTER_ADDR"] = host.strip("[]")
        if port:
            os.environ["MASTER_PORT"], port_from = port, "--rdzv-endpoint"
    os.environ.setdefault("MASTER_ADDR", _first_slurm_host())
    if not port_from:
        port, port_from = slurm_master_port(os.environ)
        os.environ["MASTER_PORT"] = str(port)
    return port_from


def slurm_master_port(env) -> tuple[int, str]:
    """rank 0's store port for an srun step, the same on every task (SLURM_JOB_ID and SLURM_STEP_ID are the step's,
    srun(1) OUTPUT ENVIRONMENT VARIABLES), and different for two jobs (or two steps of one job) whose first node is
    the same (planner/rendezvous.py: the formula the exported sbatch script evaluates in shell). Returns (port,
    where from)."""
    job = env.get("SLURM_JOB_ID", "")
    step = env.get("SLURM_STEP_ID", env.get("SLURM_STEPID", ""))
    if not job.isdigit():
        return TORCH_DEFAULT_PORT, "torch's default (no SLURM_JOB_ID)"
    return slurm_port(int(job), int(step) if step.isdigit() else 0), f"SLURM_JOB_ID {job} step {step or 0}"


def rendezvous_line(where: str, env=None) -> str:
    """One line for rank 0 of an srun / torchrun step: where the ranks meet, and where the port came from."""
    env = os.environ if env is None else env
    return (f"rank 0 of {env.get('WORLD_SIZE', '?')} ({env.get('LOCAL_WORLD_SIZE', '?')} per node): rendezvous "
            f"{env.get('MASTER_ADDR', '?')}:{env.get('MASTER_PORT', '?')} (port from {where}; set MASTER_PORT to choose)")


def local_device_index(local_rank: int, visible: int, shared: bool = False,
                       listed: tuple[str, list[str]] | None = None, local_world: int = 1) -> int:
    """This rank's GPU among the `visible` ones: its local rank (torchrun, srun seeing the node's GPUs), or the
    only one a launcher that binds a GPU per task left visible (srun --gpus-per-task=1 / --gpu-bind: each task
    sees one device, index 0, whatever its SLURM_LOCALID). `shared`: the node's ranks see the same devices
    (torchrun / torch's elastic launch: one CUDA_VISIBLE_DEVICES for all of them), so local rank 1 with one GPU
    visible is a second rank on that GPU (NCCL: "Duplicate GPU detected"), not a bound task. More ranks than
    GPUs is a clear error, not CUDA's "invalid device ordinal".
    srun --gpu-bind=closest without --gpus-per-task shows each task the GPUs near its cores, fewer than the node's
    `local_world` ranks (local rank 5 sees "4,5,6,7"; under srun's default block:cyclic placement rank 1 may see
    them too): by position, ranks 1 and 5 took the same GPU. There a rank takes the GPU whose node index is its
    local rank, in `listed` (visible_devices), and refuses where that GPU is not listed."""
    from planner.errors import PlanError

    name, ids = listed or ("CUDA_VISIBLE_DEVICES / ROCR_VISIBLE_DEVICES", [])
    per_task = not shared and 1 < visible < local_world  # every task its own subset of the node's GPUs
    if 0 <= local_rank < visible and not per_task:
        return local_rank
    if visible == 1 and not shared:
        return 0
    if per_task and len(ids) == visible and str(local_rank) in ids:
        return ids.index(str(local_rank))
    seen = f"{name}={','.join(ids)}" if ids else name
    if per_task:
        raise PlanError("nproc", f"local rank {local_rank} of {local_world} on this node sees {visible} GPUs ({seen}), "
                        f"fewer than the ranks and not GPU {local_rank}: give at most one rank per GPU; under a per-task "
                        "binding (srun --gpu-bind=closest) use --gpus-per-task=1, or --gpu-bind=none (every task sees "
                        "the node's GPUs)")
    raise PlanError("nproc", f"local rank {local_rank} but {visible} GPUs are visible to this process ({seen}): give "
                    "at most one rank per visible GPU")


def visible_devices(env, rocm: bool) -> tuple[str, list[str]] | None:
    """(variable, node-wide GPU indices) of the one variable that lists this process's GPUs: CUDA_VISIBLE_DEVICES;
    on ROCm ROCR_VISIBLE_DEVICES, HIP_VISIBLE_DEVICES or CUDA_VISIBLE_DEVICES (HIP applies the last two to what ROCR
    left, so with two of them set the indices are not the node's). None: none set, several (ROCm), or not plain
    indices (UUIDs, MIG: "GPU-8f2...", "MIG-...")."""
    names = ("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES") if rocm else ("CUDA_VISIBLE_DEVICES",)
    given = [n for n in names if env.get(n, "").strip()]
    if len(given) != 1:
        return None
    ids = [t.strip() for t in env[given[0]].split(",")]
    return (given[0], ids) if all(t.isdigit() for t in ids) else None


def pick_device() -> torch.device:
    if torch.cuda.is_available():
        # torch's elastic agent (torchrun, plan's own launch) sets TORCHELASTIC_RUN_ID in every worker it starts
        local = local_device_index(int(os.environ.get("LOCAL_RANK", "0")), torch.cuda.device_count(),
                                   shared="TORCHELASTIC_RUN_ID" in os.environ,
                                   listed=visible_devices(os.environ, torch.version.hip is not None),
                                   local_world=int(os.environ.get("LOCAL_WORLD_SIZE") or 1))
        torch.cuda.set_device(local)
        return torch.device("cuda", local)
    return torch.device("cpu")


def check_precision(precision: str, device_name: str, bf16_native: bool) -> None:
    """bf16 needs bf16 tensor cores (compute capability 8.0+, or any ROCm GPU): on a V100 torch emulates it
    (`torch.cuda.is_bf16_supported()` is True there only with `including_emulation`), many times slower and
    with no catalog peak to report MFU against. Refused, naming what runs there."""
    from planner.errors import PlanError

    if precision in ("bf16", "bf16_pure") and not bf16_native:
        raise PlanError("precision", f"{device_name} has no bf16 tensor cores (torch would emulate {precision}): "
                        "use fp16 (loss-scaled) or fp32 on it")


def check_cpu_fp16(backend: str, precision: str, cpu_fp16: bool) -> None:
    """DeepSpeed on a CPU runs fp16 only where oneDNN has fp16 kernels: its engine raises "Type fp16 is not supported
    on your device" after the ranks started (deepspeed/runtime/engine.py _do_sanity_check; accelerator/
    cpu_accelerator.py is_fp16_supported = torch.ops.mkldnn._is_mkldnn_fp16_supported(), AVX512-FP16 / AMX-FP16).
    Refused before any rank starts; DDP and FSDP2 run fp16 on a CPU (autocast / MixedPrecisionPolicy, loss scaling)."""
    from planner.errors import PlanError

    if backend == "deepspeed" and precision == "fp16" and not cpu_fp16:
        raise PlanError("precision", "DeepSpeed runs fp16 on a CPU only with oneDNN fp16 kernels (AVX512-FP16 / "
                        "AMX-FP16), which this CPU has not: use bf16 or fp32, or sharding none / fsdp_* for fp16")


def check_host_precision(cfg) -> None:
    """The precision against this host's devices, before any rank starts (a CPU-only host: check_cpu_fp16)."""
    if torch.cuda.is_available():
        return  # the GPU's rules run in each rank, on its device (check_device_precision)
    precision = cfg.plan.precision
    if cfg.run.deepspeed_config:  # the file's own precision (trainer/backends/deepspeed_backend.py)
        import json
        from pathlib import Path

        conf = json.loads(Path(cfg.run.deepspeed_config).read_text())
        precision = "fp16" if (conf.get("fp16") or {}).get("enabled") else "other"
    try:
        cpu_fp16 = bool(torch.ops.mkldnn._is_mkldnn_fp16_supported())
    except (AttributeError, RuntimeError):  # DeepSpeed's own fallback: no fp16
        cpu_fp16 = False
    check_cpu_fp16(cfg.backend_name, precision, cpu_fp16)


def check_device_precision(precision: str, device: torch.device) -> None:
    if device.type == "cuda":
        check_precision(precision, torch.cuda.get_device_name(device),
                        torch.cuda.is_bf16_supported(including_emulation=False))


def set_cpu_threads() -> None:
    """OMP threads per rank = cores // ranks on this node (notes/cpu-runs.md: else 10x swings)."""
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    threads = max(1, (os.cpu_count() or 1) // max(1, local_world))
    if "OMP_NUM_THREADS" in os.environ:
        threads = int(os.environ["OMP_NUM_THREADS"])
    torch.set_num_threads(threads)


def init(timeout_s: float) -> torch.device:
    """Initialise the default process group (once) and return this rank's device."""
    import datetime

    device = pick_device()
    if device.type == "cpu":
        set_cpu_threads()
    if not dist.is_initialized():
        os.environ.setdefault("RANK", "0")
        os.environ.setdefault("WORLD_SIZE", "1")
        os.environ.setdefault("LOCAL_RANK", "0")
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        if "MASTER_PORT" not in os.environ:  # one process: its store binds a port the OS picks (no race)
            os.environ["MASTER_PORT"] = "0" if os.environ["WORLD_SIZE"] == "1" else str(free_port())
        dist.init_process_group(**process_group_args(device), timeout=datetime.timedelta(seconds=max(60, timeout_s)))
    return device


def process_group_args(device: torch.device) -> dict:
    """init_process_group's backend and bound device: NCCL (RCCL on ROCm, where torch's "cuda" device is HIP's)
    bound to this rank's GPU, else gloo. `device_id` (torch.distributed.init_process_group) binds the group to the
    GPU set with torch.cuda.set_device: barrier() allocates on it (without it torch warns and falls back to the
    current device, or global rank % GPUs before one is set) and NCCL's communicator forms now, its errors at
    start-up rather than at the first collective."""
    if device.type == "cuda":
        return {"backend": "nccl", "device_id": device}
    return {"backend": "gloo"}


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
