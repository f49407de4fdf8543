"""GPU memory traffic of one Adafactor step as the PyTorch implementations run it.

Adafactor (Shazeer & Stern 2018) keeps only factored second moments, but neither PyTorch
implementation fuses its update: each tensor op is one kernel over the whole parameter, per
parameter, so the step streams every element through HBM many times.

Hugging Face transformers (src/transformers/optimization.py, `Adafactor.step`, the optimizer of
HF Trainer's `--optim adafactor` and of seed 003's DDP runs), per element of a factored (2-D)
parameter, with the defaults `beta1=None`, `weight_decay=0`, `scale_parameter=True`, read + write
bytes in fp32:

    state["RMS"] = _rms(p_data_fp32)                 norm of p                    4
    update = (grad**2) + eps[0]                      pow, then add                8 + 8
    update.mean(dim=-1), update.mean(dim=-2)         two reductions               4 + 4
    _approx_sq_grad: torch.mul(r_factor, c_factor)   outer product written        4
    update.mul_(grad)                                                             12
    _rms(update)                                                                  4
    update.div_(...clamp_(min=1.0))                                               8
    update.mul_(lr)                                                               8
    p_data_fp32.add_(-update)                        negation, then add           8 + 12
                                                                          total  84

and with 16-bit weights (the model loaded in bf16/fp16: `bf16_pure`), three casts more:
`grad.float()` (2 read + 4 written), `p.float()` (2 + 4) and `p.copy_(p_data_fp32)` (4 + 2): 18.

torch.optim.Adafactor (torch/optim/_adafactor.py, `_single_tensor_adafactor`; the bundled
trainer builds it with foreach=False): row and column norms of the gradient (4 + 4), the
outer product `row_var @ col_var` (4) divided in place (8), `clamp_` and `rsqrt_` (8 + 8),
`mul_(grad)` (12), the update's norm (4) and `param.add_` (12): 64.

The planner's earlier figure, 20 bytes, is what one fused kernel would move (grad, parameter and
the factored statistics read, the parameter written): 4-5x less than either implementation.
Not modelled: `scale_parameter`'s `max(eps, state["RMS"])` compares a CUDA scalar on the host,
one synchronisation per parameter tensor (a few hundred per step for a 7B model).
"""

from __future__ import annotations

import numpy as np

from planner.layout import PREC, STACK, Layout

HF_BYTES_PER_PARAM = 84.0
HF_CAST_BYTES_PER_PARAM = 18.0
TORCH_BYTES_PER_PARAM = 64.0


def bytes_per_param(layout: Layout) -> np.ndarray:
    """HBM bytes read and written per parameter of the shard by one Adafactor step: torch's
    implementation for the bundled trainer, Hugging Face's for every other stack."""
    sixteen_bit_weights = np.asarray(layout.precision) == PREC["bf16_pure"]
    hf = HF_BYTES_PER_PARAM + HF_CAST_BYTES_PER_PARAM * sixteen_bit_weights
    return np.where(np.asarray(layout.stack) == STACK["bundled"], TORCH_BYTES_PER_PARAM, hf)
