"""Holes the trainer matrix found (validation/trainer_matrix.py: every knob combination the tuner may propose,
2 ranks): fp16 RMSNorm under FSDP2, and DeepSpeed fp16 on a CPU without oneDNN fp16 kernels."""

import pytest
import torch

from planner.errors import PlanError
from trainer.config import TrainConfig
from trainer.dist import check_cpu_fp16
from trainer.launch import launch
from trainer.model import RMSNorm

LLAMA = dict(name="tiny-llama", n_layers=2, hidden=64, n_heads=4, n_kv_heads=2, vocab=256, max_positions=64,
             mlp="swiglu", norm="rmsnorm", position="rope", tied_embeddings=False, bias=False, ffn_hidden=128)


def test_fp16_rmsnorm_backward_is_finite_and_matches_fp32():
    """rms(x) = 0.02 (a fresh residual stream): in fp16 rsqrt's backward -r^3/2 = -62500 * ... overflowed to inf."""
    torch.manual_seed(0)
    x = torch.randn(4, 64) * 0.02
    norm = RMSNorm(64)
    ref_in = x.clone().requires_grad_()
    norm(ref_in).sum().backward()
    half = x.half().requires_grad_()
    norm.half()(half).float().sum().backward()
    assert torch.isfinite(half.grad).all()
    assert half.grad.float() == pytest.approx(ref_in.grad, rel=2e-2, abs=2e-2)


def test_fp32_rmsnorm_unchanged():
    x = torch.randn(3, 64)
    assert torch.equal(RMSNorm(64)(x), x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5))


@pytest.mark.slow
def test_fp16_fsdp_llama_trains_as_ddp(tmp_path):
    """FSDP2 casts the parameters to fp16 (no autocast): every gradient was inf, GradScaler skipped every step and
    the loss never fell. Now its losses are DDP's (autocast) on one rank, same seed."""
    losses = {}
    for sharding in ("fsdp_full_shard", "none"):
        r = launch(TrainConfig(model="tiny-llama", spec=LLAMA, nproc=1, steps=6, warmup_steps=1, seq_len=32,
                               micro_batch=2, precision="fp16", sharding=sharding, timeout_s=240,
                               json_out=str(tmp_path / f"{sharding}.json")))
        assert r.status == "ok", r.error
        losses[sharding] = r.losses
    assert losses["fsdp_full_shard"] == pytest.approx(losses["none"], abs=1e-2)
    assert losses["fsdp_full_shard"][-1] < losses["fsdp_full_shard"][0] - 0.1


@pytest.mark.parametrize("backend, precision, cpu_fp16, refused", [
    ("deepspeed", "fp16", False, True),
    ("deepspeed", "fp16", True, False),  # oneDNN fp16 kernels (AVX512-FP16 / AMX-FP16): DeepSpeed runs it
    ("deepspeed", "bf16", False, False),
    ("fsdp2", "fp16", False, False),  # MixedPrecisionPolicy + loss scaling run fp16 on a CPU
    ("ddp", "fp16", False, False),
])
def test_cpu_fp16_rule(backend, precision, cpu_fp16, refused):
    if refused:
        with pytest.raises(PlanError, match="DeepSpeed runs fp16 on a CPU only") as e:
            check_cpu_fp16(backend, precision, cpu_fp16)
        assert e.value.field == "precision"
    else:
        check_cpu_fp16(backend, precision, cpu_fp16)


@pytest.mark.skipif(torch.cuda.is_available() or torch.ops.mkldnn._is_mkldnn_fp16_supported(),
                    reason="this host runs DeepSpeed fp16")
def test_deepspeed_fp16_on_this_cpu_is_refused_before_launch(tmp_path):
    """It crashed in every rank ("Type fp16 is not supported on your device", deepspeed/runtime/engine.py)."""
    r = launch(TrainConfig(model="tiny", nproc=2, steps=2, warmup_steps=1, seq_len=32, precision="fp16",
                           sharding="zero1", timeout_s=120, json_out=str(tmp_path / "r.json")))
    assert r.status == "bad_config" and r.error.startswith("precision:"), r.error
    assert not r.exit_codes  # no rank started


GEMMA = LLAMA | dict(name="tiny-gemma", tied_embeddings=True, norms_per_layer=4, attn_head_dim=32, qk_norm="per_head",
                     attn_window=8, attn_local_layers=1)


@pytest.mark.slow
def test_tp_gemma_post_norms_and_qk_norms_match_one_rank(tmp_path):
    """The post-norms and per-head q/k norms were left plain under tp: each rank stepped its copy on its own sequence
    shard's / heads' gradient, and the losses drifted from one rank's (1.3e-4 by step 3, fp32) without an error."""
    kw = dict(model="tiny-gemma", spec=GEMMA, steps=6, warmup_steps=1, seq_len=32, micro_batch=2, timeout_s=240)
    tp = launch(TrainConfig(nproc=2, tp=2, json_out=str(tmp_path / "tp.json"), **kw))
    one = launch(TrainConfig(nproc=1, json_out=str(tmp_path / "one.json"), **kw))
    assert tp.status == "ok" and one.status == "ok", (tp.error, one.error)
    assert tp.losses == pytest.approx(one.losses, abs=1e-5)


def test_full_width_qk_norm_with_tp_is_refused():
    from planner.model import ModelSpec
    from trainer.config import validate_layout

    spec = ModelSpec(**(LLAMA | dict(name="tiny-olmo2", qk_norm="full")))
    with pytest.raises(PlanError, match="qk_norm full") as e:
        validate_layout(TrainConfig(model="tiny-olmo2", spec=spec, nproc=2, tp=2, seq_len=32), spec)
    assert e.value.field == "tp"
    validate_layout(TrainConfig(model="tiny-olmo2", spec=spec, nproc=2, seq_len=32), spec)  # dp: runs


@pytest.mark.parametrize("optimizer", ["adamw", "sgd"])
def test_deepspeed_and_torch_backends_share_one_optimizer_recipe(optimizer):
    """DeepSpeed's config had betas (0.9, 0.95) (the export recipe), the torch backends torch's (0.9, 0.999)."""
    from trainer.backends.base import make_optimizer
    from trainer.backends.deepspeed_backend import ds_config_from_knobs

    cfg = TrainConfig(model="tiny", nproc=2, sharding="zero1", optimizer=optimizer, lr=3e-4, seq_len=32)
    from trainer.spec import resolve_spec

    ds = ds_config_from_knobs(cfg, 2, False, resolve_spec("tiny"))["optimizer"]["params"]
    torch_opt = make_optimizer(cfg, [torch.nn.Parameter(torch.zeros(2))]).defaults
    for key in ("lr", "eps", "momentum", "weight_decay"):
        if key in ds:
            assert torch_opt[key] == ds[key], key
    if "betas" in ds:
        assert tuple(torch_opt["betas"]) == tuple(ds["betas"])


@pytest.mark.slow
def test_zero1_losses_are_ddps(tmp_path):
    kw = dict(model="tiny", nproc=2, steps=5, warmup_steps=1, seq_len=32, timeout_s=240)
    z = launch(TrainConfig(sharding="zero1", json_out=str(tmp_path / "z.json"), **kw))
    d = launch(TrainConfig(sharding="none", json_out=str(tmp_path / "d.json"), **kw))
    assert z.status == "ok" and d.status == "ok", (z.error, d.error)
    assert z.losses == pytest.approx(d.losses, abs=1e-5)


def test_matrix_sample_covers_every_accepted_pair():
    """validation/trainer_matrix.py: the all-pairs sample holds only combinations the trainer accepts, and every pair
    of knob values that some accepted combination holds."""
    import itertools

    from validation.trainer_matrix import FACTORS, all_pairs, refusal

    product = [dict(zip(FACTORS, v)) for v in itertools.product(*FACTORS.values())]
    accepted = [c for c in product if refusal(c) is None]
    chosen = all_pairs(accepted)
    assert len(chosen) < len(accepted) // 10 and all(c in accepted for c in chosen)
    pairs = lambda cs: {p for c in cs for p in itertools.combinations(sorted(c.items()), 2)}  # noqa: E731
    assert pairs(chosen) == pairs(accepted)
    assert any(c["par"] == "tp2" and c["shape"] == "llama" for c in chosen)  # RoPE under tp (eb1db4d)
    assert refusal(dict(shape="mixtral", par="tp2", sharding="none", ckpt="none", precision="bf16", ga=1))
