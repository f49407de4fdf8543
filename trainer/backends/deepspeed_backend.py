"""DeepSpeed ZeRO 0/1/2/3, offload of optimizer or optimizer+params, fp32/bf16/fp16.

The steps DeepSpeed skips on non-finite gradients and its fp16 loss scale after each step are read off its engine
(trainer/backends/deepspeed_scaling.py) into the fields the other backends report (base.Engine).

Either builds a DeepSpeed config from the knobs (`ds_config_from_knobs`: the shared builder
of planner/exports), or takes a
DeepSpeed JSON file as is (`--deepspeed-config`), so an exported config runs unchanged; the
knobs are then read back from that config.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch

from trainer import ext_locks
from trainer.backends.base import Engine, make_optimizer, trainer_recipe
from trainer.backends.deepspeed_scaling import StepDecisions
from trainer.checkpointing import apply_checkpointing
from trainer.memory import StorageCounter, iter_tensors

def ds_config_from_knobs(cfg, world_size: int, on_gpu: bool, spec) -> dict:
    """The run's DeepSpeed config from the shared builder (planner/exports/deepspeed_json.py,
    the one `plan tune` and `plan export` use), with the trainer's own recipe: its learning
    rate, no weight decay, no warm-up and no clipping (base.trainer_recipe, as its DDP/FSDP2 optimizers)."""
    from planner.exports.deepspeed_json import config_for_knobs

    recipe = trainer_recipe(cfg)
    return config_for_knobs(cfg.knobs(), dp=world_size, seq_len=cfg.plan.seq_len, model=spec,
                            target="gpu" if on_gpu else "cpu", recipe=recipe)


def knobs_from_ds_config(conf: dict, knobs: dict) -> dict:
    """The planner's knobs as the given DeepSpeed config sets them."""
    zero = conf.get("zero_optimization", {}) or {}
    stage = int(zero.get("stage", 0))
    offload = "none"
    if (zero.get("offload_optimizer") or {}).get("device", "none") not in ("none", None):
        offload = "optimizer"
    if (zero.get("offload_param") or {}).get("device", "none") not in ("none", None):
        offload = "optimizer+params"
    precision = "bf16" if (conf.get("bf16") or {}).get("enabled") else (
        "fp16" if (conf.get("fp16") or {}).get("enabled") else "fp32")
    sharding = {0: "none", 1: "zero1", 2: "zero2", 3: "zero3"}[stage]
    # `plan export deepspeed` also writes the plan's knobs under a top-level "plan" key
    # (DeepSpeed ignores unknown top-level keys): take the ones DeepSpeed's own sections do
    # not express, so an exported config runs exactly the plan it came from.
    plan = conf.get("plan") or {}
    extra = {k: plan[k] for k in ("activation_checkpointing", "attention", "optimizer") if plan.get(k)}
    # ZeRO++ (DeepSpeed's own keys, as planner/exports/deepspeed_json.py zeropp_keys writes them)
    zpp = {"zeropp_qwz": bool(zero.get("zero_quantized_weights", False)),
           "zeropp_hpz_partition_size": max(int(zero.get("zero_hpz_partition_size", 1) or 1), 1),
           "zeropp_qgz": bool(zero.get("zero_quantized_gradients", False))} if stage == 3 else {}
    return knobs | extra | zpp | {"sharding": sharding, "offload": offload, "precision": precision}


def refuse_zeropp_without_cuda(conf: dict, on_gpu: bool) -> None:
    """ZeRO++ qwZ and qgZ quantize with DeepSpeed's CUDA QuantizerBuilder kernels
    (runtime/zero/partition_parameters.py CUDAQuantizer, runtime/comm/coalesced_collectives.py):
    no CPU build exists, so a CPU run stops here with the knob named (hpZ alone needs none)."""
    from planner.errors import PlanError

    zero = conf.get("zero_optimization", {}) or {}
    for key, field in (("zero_quantized_weights", "zeropp_qwz"), ("zero_quantized_gradients", "zeropp_qgz")):
        if zero.get(key) and not on_gpu:
            raise PlanError(field, f"DeepSpeed's {key} needs its CUDA quantizer kernels: no GPU here "
                            "(allowed on a CPU: false)")


def fused_adam_buildable(prebuilt: bool, cuda_home: str | None, rocm_home: str | None = None) -> bool:
    """DeepSpeed's FusedAdam (its default for "AdamW" on a GPU) loads from a prebuilt op (DS_BUILD_FUSED_ADAM=1)
    or is JIT-compiled: with nvcc under CUDA_HOME (op_builder/builder.py installed_cuda_version raises
    MissingCUDAException without one; pip's torch wheels bring no nvcc), or on ROCm torch with hipcc under
    ROCM_HOME (builder.py skips the CUDA check where is_rocm_pytorch(); torch's cpp_extension sets ROCM_HOME only
    for a HIP build, and CUDA_HOME is None on a ROCm machine without the CUDA toolkit)."""

    def has(home: str | None, compiler: str) -> bool:
        return bool(home and os.path.exists(os.path.join(home, "bin", compiler)))

    return prebuilt or has(cuda_home, "nvcc") or has(rocm_home, "hipcc")


def fused_adam_in_config(conf: dict, on_gpu: bool) -> bool:
    """True where DeepSpeed will build the config's optimizer as FusedAdam (engine._configure_basic_optimizer: an
    Adam/AdamW not offloaded to the CPU, without torch_adam)."""
    opt = conf.get("optimizer") or {}
    zero = conf.get("zero_optimization") or {}
    offloaded = (zero.get("offload_optimizer") or {}).get("device") not in (None, "none")
    return (on_gpu and not offloaded and opt.get("type") in ("Adam", "AdamW")
            and not (opt.get("params") or {}).get("torch_adam"))


def torch_adam_where_no_fused_adam(conf: dict, on_gpu: bool) -> str:
    """A config built from the knobs whose AdamW would JIT-compile FusedAdam where it cannot be built runs
    torch's AdamW instead (DeepSpeed's `torch_adam`: the same update, unfused); returns the note said on stderr,
    "" when nothing changed. Offload runs DeepSpeedCPUAdam (load_op_once), not FusedAdam."""
    if not fused_adam_in_config(conf, on_gpu):
        return ""
    import torch.utils.cpp_extension
    from deepspeed.git_version_info import installed_ops

    ext = torch.utils.cpp_extension
    if fused_adam_buildable(bool(installed_ops.get("fused_adam")), ext.CUDA_HOME, getattr(ext, "ROCM_HOME", None)):
        return ""
    conf["optimizer"].setdefault("params", {})["torch_adam"] = True
    return ("DeepSpeed's FusedAdam is not prebuilt and no nvcc (CUDA_HOME) or hipcc (ROCM_HOME) is found to build "
            "it: running torch's AdamW (torch_adam); install the CUDA/ROCm toolkit or DS_BUILD_FUSED_ADAM=1 pip "
            "install deepspeed for the fused one")


def load_op_once(dist, builder_cls) -> None:
    """Build/load a DeepSpeed op (CPUAdamBuilder, FusedAdamBuilder) on local rank 0 first, the other ranks after a
    barrier.

    Ranks that JIT-build the op at the same time race on torch_extensions' lock file (a rank
    can find the lock released but no .so yet); one builder, then loaders, avoids that.
    """
    first = int(os.environ.get("LOCAL_RANK", "0")) == 0
    if first:
        builder_cls().load()
    dist.barrier()
    if not first:
        builder_cls().load()


def load_cpu_adam_once(dist) -> None:
    from deepspeed.ops.op_builder import CPUAdamBuilder

    load_op_once(dist, CPUAdamBuilder)


def lock_watch():
    """A `LockWatch` over torch's extensions cache on the node's first rank (LOCAL_RANK 0, read before
    `deepspeed_local_rank` rewrites it), nothing on the others."""
    import contextlib

    if os.environ.get("LOCAL_RANK", "0") != "0":
        return contextlib.nullcontext()
    return ext_locks.LockWatch(ext_locks.extensions_dir())


def deepspeed_local_rank(local_rank: str | None, device) -> str | None:
    """The LOCAL_RANK DeepSpeed must read on this rank, or None where it reads the right one already. DeepSpeed
    takes LOCAL_RANK for the rank's device index (runtime/engine.py _set_distributed_vars: set_device(local_rank);
    zero/partition_parameters.py and zero/utils.py: device_name(LOCAL_RANK)). Under srun --gpus-per-task=1 /
    --gpu-bind each task sees one GPU, index 0, while its LOCAL_RANK (SLURM_LOCALID) runs to 7: set_device(3) is
    CUDA's "invalid device ordinal". The device is trainer/dist.py's pick (local_device_index)."""
    if device.type != "cuda" or device.index is None or local_rank == str(device.index):
        return None
    return str(device.index)


class DeepSpeedEngine(Engine):
    name = "deepspeed"

    def __init__(self, cfg, model, device):
        import deepspeed
        import torch.distributed as dist

        super().__init__(cfg, model, device)
        world = dist.get_world_size()
        if cfg.run.deepspeed_config:
            conf = json.loads(Path(cfg.run.deepspeed_config).read_text())
            self.knobs = knobs_from_ds_config(conf, self.knobs)
        else:
            conf = ds_config_from_knobs(cfg, world, device.type == "cuda", model.spec)
            note = torch_adam_where_no_fused_adam(conf, device.type == "cuda")
            if note and dist.get_rank() == 0:
                print(f"note: {note}", file=sys.stderr, flush=True)
        self.ds_config = conf
        refuse_zeropp_without_cuda(conf, device.type == "cuda")
        # DeepSpeed JIT-builds its ops (CPU Adam, FusedAdam, the CPU shm comm op) from here on: a lock a killed
        # build left would make them wait forever; one watcher per node removes such locks (trainer/ext_locks.py)
        with lock_watch():
            if (conf.get("zero_optimization", {}).get("offload_optimizer") or {}).get("device") == "cpu":
                load_cpu_adam_once(dist)
            elif fused_adam_in_config(conf, device.type == "cuda"):  # a first run JIT-builds it: one rank per node
                from deepspeed.ops.op_builder import FusedAdamBuilder

                load_op_once(dist, FusedAdamBuilder)
            local_rank = deepspeed_local_rank(os.environ.get("LOCAL_RANK"), device)  # after the node's first builder
            if local_rank is not None:
                os.environ["LOCAL_RANK"] = local_rank
            apply_checkpointing(model, cfg.plan.activation_checkpointing)
            model.to(device)
            client_opt = None if "optimizer" in conf else make_optimizer(cfg, model.parameters())
            self.engine, self.optimizer, _, _ = deepspeed.initialize(
                model=model, model_parameters=model.parameters(), optimizer=client_opt, config=conf)
        self.module = self.engine.module
        self.micro_batch = self.engine.train_micro_batch_size_per_gpu()
        self.grad_accum = self.engine.gradient_accumulation_steps()
        self.knobs |= {"micro_batch": self.micro_batch, "grad_accum": self.grad_accum,
                       "global_batch": self.micro_batch * self.grad_accum * world}
        self.stage = self.engine.zero_optimization_stage()
        self.dtype = next(iter(self.engine.module.parameters())).dtype
        self.fp16 = bool(self.engine.fp16_enabled())
        self.decisions, self.optimizer_steps = StepDecisions(self.engine), 0

    def autocast(self):
        import contextlib
        return contextlib.nullcontext()  # DeepSpeed casts the model itself (bf16/fp16 params)

    def forward_loss(self, x, y, last=True):
        from trainer.model import training_loss

        return training_loss(self.module, self.engine(x), y)

    def backward(self, loss, last):
        self.engine.backward(loss)  # DeepSpeed divides by gradient_accumulation_steps

    def sample_grads_before_reduce(self) -> None:
        """Count the gradients at the end of the next backward, before DeepSpeed reduces them.

        ZeRO-1 holds full gradients until `allreduce_gradients` at the accumulation boundary
        partitions them: that, not the partition left afterwards, is what a rank must fit.
        """
        original = self.engine.allreduce_gradients

        def wrapped(*args, **kwargs):
            if self.stage == 1:  # ZeRO-2/3 reduce during backward; what is left here is bucket
                self._grads_before_reduce = StorageCounter().count(self.grad_tensors())
            self.engine.allreduce_gradients = original
            return original(*args, **kwargs)

        self.engine.allreduce_gradients = wrapped
        # mixed precision: the fp32 gradient partition exists next to the 16-bit one only
        # inside the optimizer step; sample there too (once)
        inner = getattr(self._zero(), "optimizer", None)
        if isinstance(inner, torch.optim.Optimizer) and not getattr(self, "_step_hooked", False):
            self._step_hooked = True

            def pre_step(opt, args, kwargs):
                if getattr(self, "_sample_in_step", False):
                    self._sample_in_step = False
                    self._grads_in_step = StorageCounter().count(self.grad_tensors())

            inner.register_step_pre_hook(pre_step)
        self._sample_in_step = True

    def state_bytes(self):
        out = super().state_bytes()
        out["grads_bytes"] = max(out["grads_bytes"], getattr(self, "_grads_before_reduce", 0))
        return out

    def finish_measurement(self, out: dict) -> dict:
        """After the measured step: the largest gradient footprint seen during it."""
        out["grads_bytes"] = max(out["grads_bytes"], getattr(self, "_grads_in_step", 0))
        return out

    def step(self):
        self.engine.step()

    def after_micro(self, last):
        self.engine.step()  # every micro batch; DeepSpeed steps the optimizer at the boundary
        if last:
            self.record_step()

    def record_step(self) -> None:
        """After the step that ended the accumulation: DeepSpeed's decision, as base.Engine.optimizer_step records
        GradScaler's. Its skipped steps in every precision (the ZeRO optimizers and ZeRO-0's 16-bit one skip a step
        whose gradients are not finite, bf16 and fp32 too), the scale after each step under fp16 only."""
        skipped, scale = self.decisions.read()
        if skipped:
            self.skipped_steps.append(self.optimizer_steps)
        if self.fp16:
            self.loss_scales.append(scale)
        self.optimizer_steps += 1

    def scales_losses(self) -> bool:
        return self.fp16

    def scaling_stats(self) -> dict:
        if not (self.fp16 or self.skipped_steps):
            return {}
        return {"skipped_steps": list(self.skipped_steps), "loss_scale": self.loss_scales[-1] if self.loss_scales else None}

    # ---- memory: DeepSpeed's own flat buffers -----------------------------------------
    def _zero(self):
        return self.engine.optimizer

    def param_tensors(self):
        params = list(self.module.parameters())
        if self.stage == 3:
            return [p.ds_tensor for p in params if hasattr(p, "ds_tensor")]
        return list(iter_tensors(getattr(self._zero(), "bit16_groups_flat", []))) + params

    def grad_tensors(self):
        z = self._zero()
        out = [p.grad for p in self.module.parameters() if p.grad is not None]
        for name in ("grad_partitions_flat_buffer", "grads_in_partition", "averaged_gradients"):
            out += list(iter_tensors(getattr(z, name, None)))
        inner = getattr(z, "optimizer", None)  # fp32 gradient partitions set up for the step
        for group in getattr(inner, "param_groups", []):
            out += [p.grad for p in group["params"] if p.grad is not None]
        return out

    def master_tensors(self):
        z = self._zero()
        out = []
        for name in ("single_partition_of_fp32_groups", "fp32_partitioned_groups_flat", "fp32_groups_flat"):
            out += list(iter_tensors(getattr(z, name, None)))
        return out

    def optimizer_state_tensors(self):
        inner = getattr(self._zero(), "optimizer", self._zero())
        return list(iter_tensors(list(getattr(inner, "state", {}).values())))
