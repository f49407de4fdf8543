"""DeepSpeed's own record of its optimizer steps, read the way the other backends report fp16 loss scaling
(trainer/backends/base.py Engine.optimizer_step: `skipped_steps`, 0-based, and `loss_scales`, the scale after each
step).

DeepSpeed keeps the decision inside its engine (deepspeed 0.19.8, runtime/engine.py): `_take_model_step` reads the
optimizer's `overflow` after its step, sets `_step_applied = not overflow` (`was_step_applied()`) and adds one to
`skipped_steps` on an overflow. The fp16 optimizers hold the scale as `loss_scale`: FP16_Optimizer and
FP16_UnfusedOptimizer for ZeRO-0 (runtime/fp16/fused_optimizer.py, unfused_optimizer.py: loss_scale_config.cur_scale,
None without grad scaling), the ZeRO-1/2 and ZeRO-3 optimizers (runtime/zero/stage_1_and_2.py, stage3.py:
loss_scaler.cur_scale, a static 1.0 under bf16). ZeRO-0 under torch autocast scales with a torch GradScaler
(engine.torch_autocast_z0_gradscaler). A skipped step is read off the counter, not off the scale: the ZeRO-1/2/3
optimizers' DynamicLossScaler backs off only after `hysteresis` overflows (runtime/fp16/loss_scaler.py update_scale;
default 2), so their first overflow skips the step at an unchanged scale (ZeRO-0's FP16 optimizers, like GradScaler,
halve it on every overflow: fused_optimizer.py / unfused_optimizer.py _update_scale).
"""

from __future__ import annotations


def loss_scale_of(engine) -> float | None:
    """The loss scale `engine` (a deepspeed.DeepSpeedEngine) applies now; None where it keeps none."""
    scaler = getattr(engine, "torch_autocast_z0_gradscaler", None)
    if scaler is not None:
        return float(scaler.get_scale())
    scale = getattr(engine.optimizer, "loss_scale", None)
    return None if scale is None else float(scale)


class StepDecisions:
    """Reads, after each optimizer step, whether DeepSpeed skipped it and the scale it left."""

    def __init__(self, engine):
        self.engine = engine
        self._skipped = int(engine.skipped_steps)

    def read(self) -> tuple[bool, float | None]:
        """(skipped, scale) of the step DeepSpeed took since the last read: skipped when its skipped_steps counter moved
        (module header). Call once per optimizer step, after the engine.step() that ended the accumulation."""
        now = int(self.engine.skipped_steps)
        skipped, self._skipped = now > self._skipped, now
        return skipped, loss_scale_of(self.engine)
