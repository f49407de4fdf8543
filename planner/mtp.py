"""Multi-token prediction (MTP) modules: DeepSeek-V3's extra training objective (DeepSeek-AI 2024,
"DeepSeek-V3 Technical Report", arXiv 2412.19437, sec. 2.2; config.json num_nextn_predict_layers).

The k-th module shares the main model's embedding and output head and holds its own transformer block
TRM_k, a projection M_k (hidden x 2 hidden, eq. 21: the RMSNorm'ed hidden state and next-token
embedding concatenated) and RMSNorms (the Hugging Face checkpoint's model.layers.61.{enorm, hnorm,
eh_proj, shared_head.norm}; its block is an MoE layer in V3). The paper counts its 671B total and 37B
activated WITHOUT the MTP module ("685B ... includes 671B of the Main Model weights and 14B of the
Multi-Token Prediction (MTP) Module weights", the model card: the 14B include the checkpoint's copies of
the shared embedding and head). So ModelSpec.n_params, the planner's model FLOPs (MFU) and its step time
leave the MTP modules out; `params` and `training_flops_per_token` state them separately (not modelled in
the step time: one more block and one more output layer per token on the last pipeline stage).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from planner.model import ModelSpec


def _block_params(spec: "ModelSpec") -> int:
    """One block as the model's last layer is (an MoE layer where the model's last layer is one)."""
    from planner import moe

    block = spec.params_per_layer
    if moe.is_moe(spec) and moe.moe_layer_mask(spec)[-1]:
        block += moe.moe_mlp_params(spec) - moe.mlp_params(spec, spec.ffn)
    return block


def params(spec: "ModelSpec") -> int:
    """Parameters of the MTP modules, the shared embedding and output head not counted again."""
    h = spec.hidden
    return spec.mtp_layers * (_block_params(spec) + 2 * h * h + 3 * h)


def checkpoint_params(spec: "ModelSpec") -> int:
    """As a checkpoint stores them (V3's model card 14B): with a copy of the embedding and the head each."""
    return params(spec) + spec.mtp_layers * 2 * spec.vocab_padded * spec.hidden


def training_flops_per_token(spec: "ModelSpec", seq_len) -> float:
    """Training FLOPs per token the MTP modules add (3 x forward): their block (its active MLP), the
    projection M_k and the shared output head."""
    from planner import flops, moe

    if not spec.mtp_layers:
        return 0.0
    view = moe.dense_view(spec)  # the active MLP width of an average layer
    h, mats = spec.hidden, moe.mlp_matrices(spec)
    width = float(moe.active_ffn_per_layer(spec)[-1]) if moe.is_moe(spec) else spec.ffn
    block = flops.layer_forward_flops_per_token(view, seq_len) - 2 * h * view.ffn * mats + 2 * h * width * mats
    router = 2.0 * h * spec.moe_experts
    fwd = block + router + 2.0 * h * 2 * h + flops.logits_forward_flops_per_token(spec)
    return 3.0 * spec.mtp_layers * fwd
