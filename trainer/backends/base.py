"""What every backend provides to the training loop."""

from __future__ import annotations

import contextlib

import torch
from torch import nn

from trainer.config import TrainConfig
from trainer.memory import StorageCounter, iter_tensors, saved_tensor_meter
from trainer.model import training_loss

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16, "bf16_pure": torch.bfloat16}


def trainer_recipe(cfg: TrainConfig):
    """THE optimizer settings of every backend: the run's learning rate, no weight decay, no warm-up, no clipping,
    and the export recipe's betas / eps / momentum (planner/exports/common.py Recipe, which DeepSpeed's config is
    built from). DDP / FSDP2 / tp / pp ran torch's default betas (0.9, 0.999), DeepSpeed (0.9, 0.95): the same knobs
    trained differently by backend (ZeRO-1 vs DDP losses 1e-3 apart after 6 fp32 steps)."""
    from planner.exports.common import Recipe

    return Recipe(lr=cfg.run.lr, weight_decay=0.0, warmup_steps=0, grad_clip=0.0)


def make_optimizer(cfg: TrainConfig, params) -> torch.optim.Optimizer:
    r = trainer_recipe(cfg)
    if cfg.plan.optimizer == "adamw":
        return torch.optim.AdamW(params, lr=r.lr, betas=(r.beta1, r.beta2), eps=r.eps, weight_decay=r.weight_decay,
                                 foreach=False)
    if cfg.plan.optimizer == "sgd":
        return torch.optim.SGD(params, lr=r.lr, momentum=r.momentum, weight_decay=r.weight_decay, foreach=False)
    assert cfg.plan.optimizer == "adafactor", cfg.plan.optimizer
    return torch.optim.Adafactor(params, lr=cfg.run.lr, foreach=False)


class Engine:
    """A model wrapped for one parallelism backend.

    The loop calls, per optimizer step: `forward_loss` + `backward` for each micro batch
    (`last` on the final one), then `step`. `state_bytes` reports the bytes held now.
    """

    name = "base"
    micro_batch: int
    grad_accum: int
    knobs: dict

    def __init__(self, cfg: TrainConfig, model: nn.Module, device: torch.device):
        import torch.distributed as dist

        self.cfg, self.device = cfg, device
        self.micro_batch, self.grad_accum = cfg.plan.micro_batch, cfg.plan.grad_accum
        self.knobs = cfg.knobs()
        # data parallelism over all ranks; the tensor/pipeline engines narrow these
        self.dp = dist.get_world_size() if dist.is_initialized() else 1
        self.dp_rank = dist.get_rank() if dist.is_initialized() else 0
        self.skipped_steps, self.loss_scales = [], []

    def train_step(self, batches, device: torch.device, measure: bool) -> tuple[float, dict, int]:
        """One optimizer step over `grad_accum` micro batches: (mean loss, state bytes, saved bytes).

        With `measure`, the state bytes are taken after the last backward (before the optimizer
        step) and the saved bytes over the first micro batch's forward; else ({}, 0).
        """
        losses, state, saved = [], {}, {"bytes": 0}
        for micro in range(self.grad_accum):
            x, y = (t.to(device, non_blocking=True) for t in batches.next())
            last = micro == self.grad_accum - 1
            if measure and last and hasattr(self, "sample_grads_before_reduce"):
                self.sample_grads_before_reduce()
            if measure and micro == 0:
                with saved_tensor_meter() as saved:
                    loss = self.forward_loss(x, y, last)
            else:
                loss = self.forward_loss(x, y, last)
            self.backward(loss, last)
            losses.append(loss.detach())  # read after the step: float() here waited on the GPU every micro batch
            if measure and last:
                state = self.state_bytes()
            self.after_micro(last)
            if measure and last and hasattr(self, "finish_measurement"):
                state = self.finish_measurement(state)
        step_loss = 0.0
        for loss in losses:  # the same sum as before, in the same order
            step_loss += float(loss) / self.grad_accum
        return step_loss, state, int(saved["bytes"])

    def gather_rank_stats(self, state: dict, saved_bytes: int, warmup_steps: int) -> list[dict] | None:
        """Every rank's bytes (and timings), gathered on rank 0: tensor/pipeline engines only."""
        return None

    def parallel_stats(self, per_rank: list[dict] | None):
        """The layout and per-rank figures for the result file (None for plain data parallelism)."""
        return None

    def autocast(self):
        p = self.cfg.plan.precision
        if p in ("bf16", "fp16"):
            return torch.autocast(self.device.type, dtype=DTYPES[p])
        return contextlib.nullcontext()

    def forward_loss(self, x: torch.Tensor, y: torch.Tensor, last: bool = True) -> torch.Tensor:
        """`last`: this micro batch ends the optimizer step (gradients are synchronised)."""
        with self.autocast():
            return training_loss(self.module, self.module(x), y)  # + an MoE load-balancing loss

    # torch-optimizer engines (DDP, FSDP2) set these; DeepSpeed overrides backward/step
    optimizer: torch.optim.Optimizer
    scaler: "torch.amp.GradScaler | None" = None  # fp16 loss scaling

    def backward(self, loss: torch.Tensor, last: bool) -> None:
        loss = loss / self.grad_accum
        if self.scaler is not None:
            loss = self.scaler.scale(loss)
        loss.backward()

    # fp16: the optimizer steps skipped on an overflow (0-based step indices) and the scale after each step
    skipped_steps: list[int]
    loss_scales: list[float]

    def optimizer_step(self) -> None:
        """The optimizer step, through the fp16 loss scaler when there is one: gradients unscaled first (anything that
        reads them, clipping, goes after unscale_), the step skipped when a rank overflowed, the scale updated. A
        skipped step is the one whose scale backed off (GradScaler and ModelParallelScaler: x0.5 on an overflow
        only)."""
        if self.scaler is None:
            self.optimizer.step()
            return
        before = self.scaler.get_scale()
        self.scaler.unscale_(self.optimizer)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        after = self.scaler.get_scale()
        if after < before:
            self.skipped_steps.append(len(self.loss_scales))
        self.loss_scales.append(after)

    def scales_losses(self) -> bool:
        """Whether the run scales its losses (fp16): its result then lists the scale after each step."""
        return self.scaler is not None

    def scaling_stats(self) -> dict:
        """This rank's fp16 decisions (RankStats fields): the skipped steps and the scale after the last step."""
        if self.scaler is None:
            return {}
        return {"skipped_steps": list(self.skipped_steps), "loss_scale": self.scaler.get_scale()}

    def step(self) -> None:
        self.optimizer_step()
        self.optimizer.zero_grad(set_to_none=True)

    def after_micro(self, last: bool) -> None:
        """Called after each micro batch's backward; steps the optimizer on the last one."""
        if last:
            self.step()

    # ---- memory ---------------------------------------------------------------------
    def param_tensors(self) -> list[torch.Tensor]:
        return [p for p in self.module.parameters()]

    def grad_tensors(self) -> list[torch.Tensor]:
        return [p.grad for p in self.module.parameters() if p.grad is not None]

    def master_tensors(self) -> list[torch.Tensor]:
        return []

    def optimizer_state_tensors(self) -> list[torch.Tensor]:
        return list(iter_tensors(list(self.optimizer.state.values())))

    def state_bytes(self) -> dict[str, int]:
        c = StorageCounter()
        params = c.count(self.param_tensors())
        grads = c.count(self.grad_tensors())
        master = c.count(self.master_tensors())
        states = c.count(self.optimizer_state_tensors())
        return {"params_bytes": params, "grads_bytes": grads, "master_params_bytes": master,
                "optimizer_states_bytes": states, "optimizer_bytes": master + states}
