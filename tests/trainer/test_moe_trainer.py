"""Mixture-of-experts MLPs in the bundled trainer: shapes as planner/moe.py counts them, routing and dispatch against a
per-token loop, every expert's gradient in every step, the load-balancing loss, a short fit, and the refusals."""

import pytest
import torch
import torch.nn.functional as F

from planner import moe
from planner.errors import PlanError
from planner.model import ModelSpec
from trainer.config import TrainConfig, validate_config, validate_layout
from trainer.model import GPT, Mlp, loss_fn, training_loss
from trainer.moe import MoeMlp, balance_loss

BASE = dict(name="tiny-moe", n_layers=2, hidden=64, n_heads=4, n_kv_heads=2, vocab=256, max_positions=64,
            position="rope", norm="rmsnorm", mlp="swiglu", bias=False, tied_embeddings=False, ffn_hidden=128,
            moe_experts=4, moe_top_k=2, moe_ffn_hidden=32)


def spec(**kw) -> ModelSpec:
    return ModelSpec(**(BASE | kw))


@pytest.mark.parametrize("kw", [
    {}, dict(bias=True), dict(mlp="gelu", norm="layernorm"), dict(moe_shared_experts=2, moe_shared_ffn_hidden=48),
    dict(moe_layer_freq=2), dict(moe_first_dense_layers=1), dict(qkv_bias=True, tied_embeddings=True, moe_top_k=1),
])
def test_parameters_are_the_planners(kw):
    s = spec(**kw)
    model = GPT(s)
    assert sum(p.numel() for p in model.parameters()) == s.n_params
    layers = [isinstance(b.mlp, MoeMlp) for b in model.blocks]
    assert layers == moe.moe_layer_mask(s).tolist()
    routed = sum(p.numel() for b in model.blocks if isinstance(b.mlp, MoeMlp) for p in b.mlp.experts.parameters())
    assert routed == moe.routed_expert_params(s)


def per_token(layer: MoeMlp, x: torch.Tensor) -> torch.Tensor:
    """Each token alone: softmax over all logits, its top-k, weights renormalised (Mixtral) or not (OLMoE), a
    weighted sum."""
    out = []
    for t in x.reshape(-1, x.shape[-1]):
        p = torch.softmax(layer.router(t).float(), dim=-1)
        w, e = p.topk(layer.top_k)
        w = w / w.sum() if layer.norm_topk else w
        y = sum(wi * layer.experts.one(int(ei), t) for wi, ei in zip(w, e))
        out.append(y + sum((s(t) for s in layer.shared), torch.zeros_like(t)))
    return torch.stack(out).view(x.shape)


@pytest.mark.parametrize("kw", [{}, dict(moe_shared_experts=1), dict(bias=True, mlp="gelu"), dict(moe_top_k=3),
                                dict(moe_norm_topk_prob=False)])
def test_dispatch_matches_a_per_token_loop(kw):
    torch.manual_seed(0)
    layer = MoeMlp(spec(**kw)).double()
    for name, p in layer.named_parameters():
        if name.endswith("bias"):
            torch.nn.init.normal_(p)
    x = torch.randn(3, 7, 64, dtype=torch.float64)
    torch.testing.assert_close(layer(x), per_token(layer, x))


def test_unchosen_experts_get_a_zero_gradient():
    """Every expert runs every step (on no tokens when none chose it): DDP and ZeRO see every parameter."""
    torch.manual_seed(0)
    layer = MoeMlp(spec())
    with torch.no_grad():
        layer.router.weight.zero_()
        layer.router.weight[:2] = 1.0  # every token picks experts 0 and 1 (positive inputs)
    x = torch.rand(2, 5, 64)
    layer(x).sum().backward()
    grads = [[p.grad[e] for p in layer.experts.parameters()] for e in range(layer.n_experts)]
    assert all(g is not None for gs in grads for g in gs)
    assert all(float(g.abs().sum()) > 0 for gs in grads[:2] for g in gs)
    assert all(float(g.abs().sum()) == 0 for gs in grads[2:] for g in gs)


def test_balance_loss_is_hugging_faces():
    """Mixtral's load_balancing_loss_func written out: one-hot of the top-k, means over tokens, x experts."""
    torch.manual_seed(0)
    logits = torch.randn(40, 4)
    probs = torch.softmax(logits, dim=-1)
    _, top = probs.topk(2, dim=-1)
    hf = (F.one_hot(top, 4).float().mean(dim=0) * probs.mean(dim=0)).sum() * 4
    counts = torch.bincount(top.reshape(-1), minlength=4)
    torch.testing.assert_close(balance_loss(probs, counts), hf)
    uniform = torch.full((8, 4), 0.25)
    assert float(balance_loss(uniform, torch.tensor([4, 4, 4, 4]))) == pytest.approx(2.0)  # top_k


def test_training_loss_adds_the_weighted_aux_loss():
    torch.manual_seed(0)
    x = torch.randint(0, 256, (2, 16))
    model = GPT(spec(), moe_aux_loss_coef=0.01)
    logits = model(x)
    aux = [b.mlp.aux for b in model.blocks]
    assert all(a is not None and a.item() > 0 for a in aux)
    torch.testing.assert_close(training_loss(model, logits, x), loss_fn(logits, x) + (aux[0] + aux[1]) / 2)
    without = GPT(spec())
    assert without.aux_loss() is None and training_loss(without, without(x), x).item() == loss_fn(without(x), x).item()


def test_loss_falls_on_a_repeated_batch():
    torch.manual_seed(0)
    model = GPT(spec(moe_shared_experts=1, attn_window=4), moe_aux_loss_coef=0.001)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    x = torch.randint(0, 256, (4, 32))
    losses = []
    for _ in range(8):
        loss = training_loss(model, model(x[:, :-1]), x[:, 1:])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0] - 0.3, losses


def test_dense_mlp_width_is_its_own():
    assert Mlp(spec(), 32).up.out_features == 32 and Mlp(spec()).up.out_features == 128


def cfg(**kw) -> TrainConfig:
    return TrainConfig(nproc=2, **kw)


@pytest.mark.parametrize("kw, field", [(dict(ep=2), "ep"), (dict(etp=2), "etp")])
def test_expert_parallelism_is_refused_in_one_line(kw, field):
    with pytest.raises(PlanError) as e:
        validate_config(cfg(**kw))
    assert e.value.field == field and "\n" not in str(e.value)
    assert str(e.value).startswith(f"{field}: 2: the bundled trainer keeps every expert on every rank")
    assert "allowed: 1" in str(e.value)


@pytest.mark.parametrize("kw, field", [(dict(tp=2), "tp"), (dict(pp=2), "pp")])
def test_tp_and_pp_with_moe_are_refused_in_one_line(kw, field):
    with pytest.raises(PlanError) as e:
        validate_layout(cfg(**kw), spec())
    assert e.value.field == field and "\n" not in str(e.value)
    assert "mixture-of-experts" in str(e.value) and "allowed: tp 1, pp 1" in str(e.value)
    validate_layout(cfg(sharding="zero3"), spec())  # data parallelism and sharding run it
    validate_layout(cfg(**kw), spec(moe_experts=0, moe_top_k=0, moe_ffn_hidden=None, attn_window=8))


def test_aux_loss_coefficient_is_a_run_setting():
    assert TrainConfig().run.moe_aux_loss_coef == 0.001
    with pytest.raises(ValueError):
        TrainConfig(moe_aux_loss_coef=-1)


@pytest.mark.parametrize("preset", ["mixtral-8x7b", "llama4-scout", "gpt-oss-20b", "mistral-7b"])
def test_real_presets_build_with_the_planners_count(preset):
    """On the meta device (no memory): GPT.__init__ asserts exactly spec.n_params; the local layers are the spec's."""
    from planner import attn_window
    from planner.presets import resolve_model

    s = resolve_model(preset)
    with torch.device("meta"):
        model = GPT(s)
    assert sum(p.numel() for p in model.parameters()) == s.n_params
    assert [b.attn.core.window is not None for b in model.blocks] == attn_window.local_layer_mask(s).tolist()
    assert [isinstance(b.mlp, MoeMlp) for b in model.blocks] == moe.moe_layer_mask(s).tolist()
