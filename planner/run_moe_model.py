"""A runs row's mixture-of-experts model (planner/runs.py uses this when planner/run_moe.py finds the
row is MoE): never the dense bare-size rule.

1. A catalog preset the name spells (planner/run_model_name.py), whose total or active count agrees
   with the row's n_params_B; the experts, top-k and expert width the row states override it (noted).
2. The row's shape columns (n_layers, hidden, n_heads) with the stated experts and top-k; the expert
   width is stated, or solved from the stated total (else active) count, else the dense MLP's (noted).
3. The stated counts alone: with E routed experts, k per token, S shared experts, X the parameters of
   one expert over all layers and D the always-on rest, total = D + (E + S) X and active = D + (k + S) X,
   so total and active give X = (total - active) / (E - k); "8x7B" (E experts cut from a 7B dense model
   of one expert per layer: D + X = 7B) with the total or active count gives it too. The shape: the
   bare-size rule's layers and hidden for the dense model D + X (planner/sizes.py), SwiGLU experts
   (Mixtral, DeepSeek, Qwen-MoE, OLMoE) as wide as X / (layers x 3 x hidden), and the kv heads whose
   active count comes closest to the stated one.
Otherwise: PlanError("model", "MoE without expert count/shape ...").
"""

from __future__ import annotations

import re
from collections.abc import Callable

from planner import moe, run_model_name, run_text
from planner.errors import PlanError
from planner.model import LLAMA_BLOCK, ModelSpec
from planner.run_moe import MoeFacts
from planner.sizes import GPT2_VOCAB, HEAD_DIM, VOCAB_MULTIPLE, gpt_for_params

# Megatron-LM's --moe-router-topk default (megatron/training/arguments.py _add_moe_args: default=2), as
# in GShard and Mixtral
DEFAULT_TOP_K = 2
WIDTH_MULTIPLE = 64


def not_enough(row, facts: MoeFacts) -> PlanError:
    return PlanError("model", f"row {row.get('id')}: MoE without expert count/shape ({facts.signals[0]}); give "
                     "moe_experts and moe_top_k with n_layers/hidden/n_heads, or n_params_B and n_active_params_B")


def spec_of(row, facts: MoeFacts, preset_ids, resolve: Callable[[str], ModelSpec],
            columns_dense: Callable[[], ModelSpec | None], notes: list[str]) -> ModelSpec:
    stated_b = run_text.number(row, "n_params_B")
    preset = _preset(row, facts, preset_ids, resolve, stated_b, notes)
    if preset is not None:
        return _override(preset, facts, notes)
    if facts.experts is None:
        raise not_enough(row, facts)
    top_k = facts.top_k
    if top_k is None:
        top_k = DEFAULT_TOP_K
        notes.append(f"top-k not stated: {top_k} (Megatron-LM's --moe-router-topk default; Mixtral, GShard)")
    if not 1 <= top_k <= facts.experts:
        raise PlanError("moe_top_k", f"row {row.get('id')}: top-{top_k} of {facts.experts} experts (allowed: 1 to "
                        f"{facts.experts})")
    total_b = facts.total_b or stated_b
    dense = columns_dense()
    if dense is not None:
        return _from_columns(row, dense, facts, top_k, total_b, notes)
    return _from_counts(row, facts, top_k, total_b, notes)


def _preset(row, facts, preset_ids, resolve, stated_b, notes) -> ModelSpec | None:
    name = (row.get("model_name") or "").strip()

    def count(pid: str) -> float:  # the preset's total or active count, whichever the row's size is nearer
        spec = resolve(pid)
        counts = (spec.n_params, moe.active_params(spec)) if moe.is_moe(spec) else (spec.n_params,)
        return min(counts, key=lambda c: abs(c / 1e9 - stated_b)) if stated_b else spec.n_params

    bare = re.sub(r"\s*\([^)]*\)", "", name).strip()  # "Mixtral-8x7B (Megatron-Core)"
    pid = run_model_name.preset_of(name, preset_ids, stated_b, count, notes) or (
        run_model_name.preset_of(bare, preset_ids, stated_b, count, notes) if bare != name else None)
    if pid is None:
        return None
    spec = resolve(pid)
    if not moe.is_moe(spec):
        notes.append(f"preset {pid} is dense, the row says MoE ({facts.signals[0]}): not used")
        return None
    return spec


def _override(spec: ModelSpec, facts: MoeFacts, notes: list[str]) -> ModelSpec:
    stated = {"moe_experts": facts.experts, "moe_top_k": facts.top_k, "moe_ffn_hidden": facts.ffn,
              "moe_shared_experts": facts.shared}
    changed = {k: v for k, v in stated.items() if v is not None and getattr(spec, k) != v
               and not (k == "moe_ffn_hidden" and moe.expert_ffn(spec) == v)}
    if not changed:
        return spec
    notes.append(f"{spec.name} with the row's " + ", ".join(f"{k} {v} (preset {getattr(spec, k)})"
                                                           for k, v in changed.items()))
    return ModelSpec(**{**spec.model_dump(), **changed, "published_params": None})


def _build(fields: dict, **moe_fields) -> ModelSpec:
    return ModelSpec(**{**fields, **moe_fields})


def _solve_width(fields: dict, moe_fields: dict, target: float, of: Callable[[ModelSpec], float]) -> int:
    """The expert width whose count `of` (total or active, linear in the width) is `target` parameters."""
    lo, hi = 1024, 2048
    a, b = of(_build(fields, **moe_fields, moe_ffn_hidden=lo)), of(_build(fields, **moe_fields, moe_ffn_hidden=hi))
    width = lo + (target - a) * (hi - lo) / (b - a)
    return int(round(width / WIDTH_MULTIPLE)) * WIDTH_MULTIPLE


def _from_columns(row, dense: ModelSpec, facts: MoeFacts, top_k: int, total_b, notes) -> ModelSpec:
    fields = {**dense.model_dump(), "published_params": None}
    if dense.mlp != "swiglu" and not (row.get("ffn_hidden") or "").strip():
        fields.update(LLAMA_BLOCK)
        notes.append("MLP not stated: SwiGLU experts (Mixtral, DeepSeek, Qwen-MoE, OLMoE)")
    moe_fields = dict(moe_experts=facts.experts, moe_top_k=top_k, moe_shared_experts=facts.shared or 0)
    if facts.ffn:
        width = facts.ffn
    elif total_b or facts.active_b:
        target, of, what = ((total_b, lambda s: s.n_params, "total") if total_b
                            else (facts.active_b, moe.active_params, "active"))
        width = _solve_width(fields, moe_fields, target * 1e9, of)
        if width <= 0:
            raise PlanError("n_params_B", f"row {row.get('id')}: {target:g}B {what} is less than the stated shape "
                            "holds without experts")
        notes.append(f"expert width not stated: {width} (the stated {target:g}B {what})")
    else:
        width = _build(fields).ffn
        notes.append(f"expert width not stated: {width} (the dense MLP's)")
    return _build(fields, **moe_fields, moe_ffn_hidden=width)


def _split(row, facts: MoeFacts, top_k: int, total_b, notes) -> tuple[float, float]:
    """(X, D) in parameters: one expert over all layers, the always-on rest (module docstring)."""
    e, s, active, base = facts.experts, facts.shared or 0, facts.active_b, facts.base_b
    if total_b and active and e > top_k:
        x = (total_b - active) / (e - top_k)
        return x * 1e9, (active - (top_k + s) * x) * 1e9
    if base and total_b and e > 1:
        x = (total_b - base) / (e - 1)
        return x * 1e9, (base - x) * 1e9
    if base and active and top_k > 1:
        x = (active - base) / (top_k - 1)
        return x * 1e9, (base - x) * 1e9
    if base:
        dense = gpt_for_params(base * 1e9)
        x = (dense.n_params - dense.embedding_params) * 2 / 3  # a GPT block's MLP: 8h^2 of its 12h^2
        notes.append(f"{base:g}B per expert model, no total or active count: its MLP ({x / 1e9:.2f}B over the "
                     "layers, 2/3 of a GPT block) is one expert")
        return x, base * 1e9 - x
    raise not_enough(row, facts)


def _from_counts(row, facts: MoeFacts, top_k: int, total_b, notes) -> ModelSpec:
    x, rest = _split(row, facts, top_k, total_b, notes)
    if x <= 0 or rest <= 0:
        raise PlanError("n_active_params_B", f"row {row.get('id')}: total {total_b}B, active {facts.active_b}B, "
                        f"{facts.experts} experts, top-{top_k}: no positive expert and shared parts (active must be "
                        "less than total)")
    shared = facts.shared or 0
    base = gpt_for_params(rest + x)  # the dense model of one expert per layer
    layers, hidden, heads = base.n_layers, base.hidden, base.n_heads
    width = max(int(round(x / (layers * 3 * hidden) / WIDTH_MULTIPLE)) * WIDTH_MULTIPLE, WIDTH_MULTIPLE)
    seq = int(run_text.number(row, "seq_len") or 2048)
    fields = dict(name=(row.get("model_name") or "").strip() or "moe", family="moe", n_layers=layers, hidden=hidden,
                  n_heads=heads, ffn_hidden=width, vocab=GPT2_VOCAB, vocab_multiple=VOCAB_MULTIPLE,
                  max_positions=max(seq, 2048), **LLAMA_BLOCK, source="runs file: MoE shape from the stated counts")
    moe_fields = dict(moe_experts=facts.experts, moe_top_k=top_k, moe_ffn_hidden=width, moe_shared_experts=shared)
    want = rest + (top_k + shared) * x
    kvs = [d for d in range(1, heads + 1) if heads % d == 0]
    spec = min((_build({**fields, "n_kv_heads": kv}, **moe_fields) for kv in kvs),
               key=lambda s: abs(moe.active_params(s) - want))
    deeper = ""
    if moe.active_params(spec) < 0.95 * want:  # full attention in every layer holds less than the always-on part
        one = _build({**fields, "n_layers": 1}, **moe_fields)
        per_layer = _build({**fields, "n_layers": 2}, **moe_fields).n_params - one.n_params
        always_on_per_layer = per_layer - (moe_fields["moe_experts"] + shared) * moe.mlp_params(one, width)
        layers = max(layers, round((want - (one.n_params - per_layer) - (top_k + shared) * x) / always_on_per_layer))
        width = max(int(round(x / (layers * 3 * hidden) / WIDTH_MULTIPLE)) * WIDTH_MULTIPLE, WIDTH_MULTIPLE)
        moe_fields["moe_ffn_hidden"] = width
        spec = _build({**fields, "n_layers": layers, "ffn_hidden": width}, **moe_fields)
        deeper = ", deepened to hold the stated always-on part"
    notes.append(f"MoE shape from the stated counts: {layers} layers x {hidden} hidden (the bare-size rule for the "
                 f"{(rest + x) / 1e9:.3g}B model of one expert per layer{deeper}), {heads} heads / {spec.kv_heads} kv heads "
                 f"(head dim {HEAD_DIM}), {facts.experts} SwiGLU experts of {width}, top-{top_k}"
                 + (f" + {shared} shared" if shared else "") + f": {spec.n_params / 1e9:.1f}B total / "
                 f"{moe.active_params(spec) / 1e9:.1f}B active")
    return spec
