"""A mixture-of-experts MLP, the shapes planner/moe.py counts: a router (hidden x experts linear, no bias, as Mixtral,
OLMoE, Qwen-MoE and DeepSeek have), `moe_experts` routed experts of width `moe_ffn_hidden`, `moe_top_k` per token,
and `moe_shared_experts` experts every token runs; each expert an MLP of the model's `mlp` form. Not built, as
planner/moe.py does not count them: Qwen2-MoE's shared-expert gate, gpt-oss's router bias.

Routing (Hugging Face MixtralSparseMoeBlock.forward): softmax over all the router logits in fp32, the top-k, their
weights renormalised to sum to 1 (= a softmax over the top-k logits) when spec.moe_norm_topk_prob (Mixtral; Qwen3-MoE's
norm_topk_prob checkpoints); Qwen2-MoE and OLMoE (Qwen2MoeSparseMoeBlock / OlmoeSparseMoeBlock: `if
self.norm_topk_prob:` false) keep the top-k softmax probabilities as they are, which changes no shape nor FLOP.

Dispatch (no dense all-experts compute): the (token, slot) pairs sorted by expert, the routed experts
(trainer/experts.py: stacked weights, one grouped GEMM per projection on CUDA sm90+ in bf16, else a loop of GEMMs) run
on the gathered tokens, the weighted outputs go back with index_add. Every expert runs every step, on 0 tokens when
none chose it: a GEMM over no rows gives its weights a zero gradient, so every parameter takes part in every backward
(DDP needs no find_unused_parameters, DeepSpeed ZeRO's gradient hooks fire for all of them).

Load-balancing loss (Switch Transformer, Fedus et al. 2022 eq. 4, in Hugging Face's top-k form
load_balancing_loss_func): E x sum_i f_i P_i, f_i the share of the tokens that chose expert i among their top-k,
P_i the mean router probability of expert i; x the coefficient (RunSettings.moe_aux_loss_coef, default 0.001 as
MixtralConfig / Qwen2MoeConfig router_aux_loss_coef), averaged over the MoE layers (GPT.aux_loss).
"""

from __future__ import annotations

import torch
from torch import nn

from planner import moe
from planner.model import ModelSpec
from trainer.experts import Experts


class MoeMlp(nn.Module):
    def __init__(self, spec: ModelSpec, aux_loss_coef: float = 0.0):
        super().__init__()
        from trainer.model import Mlp

        self.n_experts, self.top_k, self.aux_loss_coef = spec.moe_experts, spec.moe_top_k, aux_loss_coef
        self.norm_topk = spec.moe_norm_topk_prob
        self.router = nn.Linear(spec.hidden, spec.moe_experts, bias=False)
        self.experts = Experts(spec.moe_experts, spec.hidden, moe.expert_ffn(spec), spec.mlp == "swiglu", spec.bias)
        self.shared = nn.ModuleList(Mlp(spec, moe.shared_ffn(spec)) for _ in range(spec.moe_shared_experts))
        self.aux: torch.Tensor | None = None  # the last forward's weighted load-balancing loss

    def route(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x (T, hidden) -> (router probabilities (T, E) fp32, top-k weights (T, k), top-k experts (T, k))."""
        probs = torch.softmax(self.router(x).float(), dim=-1)
        weights, experts = probs.topk(self.top_k, dim=-1)
        if self.norm_topk:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        return probs, weights, experts

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        x = x.reshape(-1, shape[-1])
        probs, weights, experts = self.route(x)
        flat = experts.reshape(-1)
        order = flat.argsort(stable=True)  # (token, slot) pairs grouped by expert
        counts = torch.bincount(flat, minlength=self.n_experts)
        token = order // self.top_k
        ys = self.experts(x[token], counts)
        ys = ys * weights.reshape(-1)[order].unsqueeze(-1).to(ys.dtype)
        out = ys.new_zeros(x.shape[0], ys.shape[-1]).index_add(0, token, ys)
        for shared in self.shared:
            out = out + shared(x)
        self.aux = None
        if self.aux_loss_coef and torch.is_grad_enabled():
            self.aux = self.aux_loss_coef * balance_loss(probs, counts)
        return out.view(shape)


def balance_loss(probs: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    """E x sum_i (tokens that chose i / tokens) x (mean probability of i) (Hugging Face load_balancing_loss_func:
    top_k at a uniform router, as its sum over the k slots)."""
    tokens, n_experts = probs.shape
    return n_experts * (counts.to(probs.dtype) / tokens * probs.mean(dim=0)).sum()
