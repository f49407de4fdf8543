"""A runs file's free-text knob columns -> the planner's vocabulary (planner/runs.py uses these).

Published tables write one knob many ways ("ZeRO-1", "zero stage 3", "FSDP (full shard)", "HSDP",
"Megatron-LM + DeepSpeed", "GPT-NeoX", "selective recompute", "yes"). Each reader returns the planner's
value and appends to `notes` what it assumed where the cell was blank; a cell it cannot read is a
PlanError naming the column and what is allowed.
"""

from __future__ import annotations

import re

from planner import run_attention, run_recompute
from planner.errors import PlanError
from planner.scenario import FP8_RECIPES, GRAD_REDUCE_DTYPES

# framework text (regex) -> stack, first match wins (both "megatron" and "deepspeed" -> megatron_deepspeed
# first; a Hugging Face marker before FSDP: HF accelerate + FSDP runs transformers code -> hf)
_STACKS = [
    ("torchtitan", "torchtitan"), ("metaseq", "fsdp"), ("gpt-neox", "megatron_deepspeed"), ("neox", "megatron_deepspeed"),
    ("megatron", "megatron"), (r"\bm-?core\b", "megatron"), ("nemo", "megatron"), ("megascale", "megatron"),
    ("nanotron", "megatron"),
    # AMD Primus (AMD-AGI/Primus README): Megatron-LM is its first and default backend; "Primus (TorchTitan)"
    # matched torchtitan above, a MaxText one is JAX (the generic note). BAAI FlagScale (FlagOpen/FlagScale
    # README) extends Megatron-LM.
    (r"primus(?!.*(maxtext|jax))", "megatron"), ("flagscale", "megatron"),
    ("llm-foundry", "fsdp"), ("composer", "fsdp"), ("mosaic", "fsdp"), ("fms-fsdp", "fsdp"), (r"\bolmo", "fsdp"),
    ("hf-deepspeed", "hf"), ("accelerate", "hf"), ("transformers", "hf"), ("hugging ?face", "hf"), (r"\bhf\b", "hf"),
    # fine-tuning front ends that run the Hugging Face Trainer / accelerate over transformers models
    ("axolotl", "hf"), (r"llama[\s_-]*factory", "hf"), (r"\btrl\b", "hf"),
    ("fsdp", "fsdp"), ("fairscale", "fsdp"), ("bundled", "bundled"),
]
# Bare DeepSpeed / DDP (or no framework, or one we have no data for): the model code is not named, so
# nothing ties the row to one fitted stack; `generic` is the pooled fit of all stacks, with the
# leave-one-stack-out error as its stated error. The seed logs' bare "deepspeed", "ddp", "fsdp" rows ran
# transformers models (BLOOM-7b1, GPT-2) in the Hugging Face stack (issue 10: "Hugging Face + DeepSpeed
# stacks (seeds 002, 003)"): hf.
GENERIC = "generic"
_HF_CODE = ("s002", "s003")
# Sources from before fused (Flash) attention was in these stacks (2020-2022): the s x s score
# matrix is materialised (Megatron's fused scale-mask-softmax, HF eager attention; BLOOM's ALiBi
# could not use FlashAttention, seed 000). Rows of other files: by the year their source states.
_EAGER_ERA = ("megatron_2020", "megatron_sc21", "megatron_korthikanti", "bloom_prequel", "s002", "s003")
FLASH_FIRST_YEAR = 2023  # FlashAttention (Dao et al., May 2022) reached Megatron/TE and HF in 2023


def _cell(row, *keys) -> str:
    return next(((row.get(k) or "").strip() for k in keys if (row.get(k) or "").strip()), "")


def framework_cell(row) -> str:
    """The row's framework as written (the `framework` column, or `stack`); "" where it says none."""
    return _cell(row, "framework", "stack")


def stack_of(row, notes) -> str:
    fw = framework_cell(row).lower()
    if "megatron" in fw and "deepspeed" in fw or "megatron-ds" in fw:
        return "megatron_deepspeed"
    if (row.get("id") or "").startswith(_HF_CODE) and re.search(r"deepspeed|ddp|fsdp", fw):
        return "hf"
    for key, stack in _STACKS:
        if re.search(key, fw):
            return stack
    jax = " (a JAX/XLA stack: no profile of its own)" if re.search(r"jax|maxtext|pax|t5x|levanter|tpu", fw) else ""
    notes.append(f"framework {fw or 'not stated'}{jax}: stack generic (the pooled fit of all stacks)")
    return GENERIC


# FSDP's SHARD_GRAD_OP, or FSDP2's fully_shard(reshard_after_forward=False): the parameters kept after forward
_KEEPS_PARAMS = r"shard[_\s-]*grad[_\s-]*op|grad[_\s-]*op|reshard[_\s-]*after[_\s-]*forward\s*[=:]?\s*(false|0|no)\b"
# FSDP's ShardingStrategy._HYBRID_SHARD_ZERO2 (or HSDP with reshard_after_forward=False): HSDP whose in-node shard
# keeps the parameters after forward; the planner has no such strategy, so it reads as fsdp_hybrid with a note
HYBRID_ZERO2 = "fsdp_hybrid_zero2"
HYBRID_ZERO2_NOTE = ("sharding {cell!r} (HSDP whose in-node shard keeps the parameters after forward, ZeRO-2-like) "
                     "read as fsdp_hybrid, the closest the planner has: it gathers them again in backward (more "
                     "in-node traffic) and leaves out the kept parameters' memory")


def _shard_word(v: str) -> str | None:
    v = v.lower().strip()
    if re.fullmatch(r"(none|no|ddp|off|-|n/?a|false|0)?|(no|not|without)[\s_-]*shard\w*|.*\bno[_\s-]*shard\b.*", v):
        return "none"
    if re.fullmatch(r"[0-3]", v):
        return f"zero{v}" if v != "0" else "none"
    if re.search(r"infinity|zero\s*\+\+", v):
        return "zero3"
    if re.search(r"zero[\s_-]*offload", v):
        return "zero2"  # ZeRO-Offload runs on ZeRO-2 (Ren et al. 2021)
    if re.search(r"hsdp|hybrid", v):
        return HYBRID_ZERO2 if re.search(r"zero[\s_-]*(?:stage)?[\s_=:-]*2|" + _KEEPS_PARAMS, v) else "fsdp_hybrid"
    if re.search(_KEEPS_PARAMS, v):
        # FSDP2's fully_shard(reshard_after_forward=False) keeps the parameters after forward: SHARD_GRAD_OP
        return "fsdp_shard_grad_op"
    if re.search(r"fsdp|full[_\s-]*shard|fully[_\s-]*shard", v):
        return _fsdp_by_zero_stage(v) or "fsdp_full_shard"
    if re.search(r"distributed[_\s-]*optimi[sz]er|dist\.?[_\s-]*opt", v) or v == "do":  # "DO": Megatron's shorthand
        return "zero1"
    m = re.search(r"zero[\s_-]*(?:stage)?[\s_=:-]*([0-3])|stage[\s_=:-]*([0-3])|\bz([0-3])\b", v)
    if m:
        n = int(next(g for g in m.groups() if g))
        return f"zero{n}" if n else "none"
    return None


_ZERO_STAGE = re.compile(r"zero[\s_-]*(?:stage)?[\s_=:-]*([0-3])")
# FSDP's strategies by the ZeRO stage they match (Lightning Thunder's FSDPType docs: ZERO2 ~ SHARD_GRAD_OP, ZERO3 ~
# FULL_SHARD); PyTorch FSDP has no ZeRO-1 (optimizer states only) or ZeRO-0 strategy
FSDP_OF_ZERO = {"2": "fsdp_shard_grad_op", "3": "fsdp_full_shard"}


def _fsdp_by_zero_stage(v: str) -> str | None:
    """An FSDP cell that names a ZeRO stage ("FSDP (ZeRO-2-like)"): the FSDP strategy of that stage; a stage
    FSDP has not is "fsdp_zeroN", which sharding_of refuses (it read as full shard, ZeRO-3's memory)."""
    m = _ZERO_STAGE.search(v)
    if m is None:
        return None
    return FSDP_OF_ZERO.get(m.group(1), f"fsdp_zero{m.group(1)}")


def sharding_column(row) -> str:
    """The column the row's sharding came from, as the file names it (an error named zero_stage_or_fsdp
    where the user's file has a `sharding` column)."""
    return next((k for k in ("sharding", "zero_stage_or_fsdp") if (row.get(k) or "").strip()), "zero_stage_or_fsdp")


def sharding_of(row, stack: str, notes) -> str:
    v = _cell(row, "sharding", "zero_stage_or_fsdp")
    if v.startswith("zero (stage not stated") or re.fullmatch(r"(deepspeed\s*)?zero(\s*\([^0-9]*\))?", v, re.I):
        params_off = (row.get("offload") or "").strip() == "optimizer+params"
        stage = "zero3" if "ZeRO3" in v or params_off else "zero1"
        notes.append(f"ZeRO stage not stated: {stage}")
        return stage
    if not v:
        text = f"{row.get('notes') or ''} {row.get('framework') or ''}"
        year = _year(f"{row.get('source') or ''} {row.get('notes') or ''}")
        modern = re.search(r"overlap-param-gather|use-distributed-optimizer|nemo|megatron-core|mcore|megascale",
                           text, re.I) or (year is not None and year >= 2023)
        if stack == "megatron" and modern:
            # NeMo and Megatron-Core recipes turn the distributed optimizer on (NeMo's megatron configs:
            # use_distributed_optimizer: true); Megatron-LM from 2023 on is run that way in its examples
            notes.append("sharding not stated: zero1 (Megatron distributed optimizer)")
            return "zero1"
        notes.append("sharding not stated: none")
        return "none"
    word = _shard_word(v)
    if word is not None and word.startswith("fsdp_zero"):
        raise PlanError(sharding_column(row), f"row {row.get('id')}: {v!r}: PyTorch FSDP has no ZeRO-{word[-1]} "
                        "strategy (SHARD_GRAD_OP is ZeRO-2-like, FULL_SHARD ZeRO-3-like); write zero1 if only the "
                        "optimizer states were sharded (DeepSpeed ZeRO-1, Megatron's distributed optimizer or "
                        "Megatron-FSDP 'optim'), else the FSDP strategy the run used")
    if word == HYBRID_ZERO2:
        notes.append(HYBRID_ZERO2_NOTE.format(cell=v))
        return "fsdp_hybrid"
    if word is None:
        raise PlanError(sharding_column(row), f"row {row.get('id')}: {v!r} is not a sharding (allowed: none, zero1-3 "
                        "(ZeRO-1, zero stage 2, distributed optimizer), fsdp_full_shard, fsdp_shard_grad_op, "
                        "fsdp_hybrid / HSDP)")
    return word


def offload_of(row, notes) -> str:
    v = _cell(row, "offload").lower()
    shard = _cell(row, "sharding", "zero_stage_or_fsdp").lower()
    if not v and re.search(r"infinity|offload", shard):  # "ZeRO-Offload" / "ZeRO-Infinity" in the sharding cell
        v = shard
    if not v:
        notes.append("offload not stated: none")
        return "none"
    if re.fullmatch(r"(none|no|off|false|-|n/?a|0)", v):
        return "none"
    if "param" in v or "full" in v or "infinity" in v:
        return "optimizer+params"
    if "optim" in v or "cpu" in v or "yes" in v or "offload" in v or "nvme" in v:
        return "optimizer"
    raise PlanError("offload", f"row {row.get('id')}: {v!r} is not an offload (allowed: none, optimizer, "
                    "optimizer+params)")


def checkpointing_of(row, stack: str, notes) -> tuple[str, float, bool]:
    raw = _cell(row, "activation_checkpointing").lower()
    sp = "sequence parallel" in raw
    if not raw:
        ckpt = "selective" if stack == "megatron" else "full"
        notes.append(f"checkpointing not stated: {ckpt}")
        return ckpt, 1.0, sp
    if raw.startswith("selective"):
        if "per-op" in raw or stack == "torchtitan":
            return "op", 1.0, sp
        if stack in ("fsdp", "hf"):
            notes.append("selective = half of the blocks recomputed (fms-fsdp/torchtitan block form)")
            return "blocks", 0.5, sp
        return "selective", 1.0, sp
    word = re.split(r"[\s(:=,;]+", raw)[0]
    fraction = run_recompute.partial_fraction(raw)
    if fraction is not None and fraction < 1:
        notes.append(f"checkpointing {raw!r}: {fraction:g} of the blocks recomputed (blocks {fraction:g})")
        return "blocks", fraction, sp
    if word in ("none", "no", "n", "off", "false", "0", "disabled", "n/a", "na", "-") or re.search(r"\bno\s+(recomput|checkpoint)", raw):
        return "none", 1.0, sp
    if re.search(r"every\s+(other|2nd|second)\b|\bhalf\b", raw):
        notes.append("checkpointing: every other block recomputed (blocks 0.5)")
        return "blocks", 0.5, sp
    if re.search(r"selective", raw):  # "recompute_granularity=selective"
        return checkpointing_of({**row, "activation_checkpointing": "selective"}, stack, notes)
    if word in ("full", "yes", "y", "on", "true", "1", "all", "uniform", "block", "enabled") or re.search(
            r"\bfull\b|every\s+(layer|block)|all\s+(layers|blocks)|recompute|checkpointing", raw):
        return "full", 1.0, sp
    raise PlanError("activation_checkpointing", f"row {row.get('id')}: {raw!r} is not a checkpointing (allowed: "
                    "none, selective, full, a share of the layers: '1/2 of layers', '25%', 'every 4th layer')")


def precision_of(row, system, notes) -> str:
    raw = _cell(row, "precision").lower()
    if re.search(r"fp8|float8|e4m3", raw):
        return "fp8"
    if re.search(r"bf16|bfloat", raw):
        return "bf16"
    if re.search(r"fp16|float16|\bhalf\b", raw):
        return "fp16"
    if re.search(r"fp32|float32|tf32|full precision|single", raw):
        return "fp32"
    if re.fullmatch(r"16(-mixed)?|(nvidia\s*)?apex\s*o[1-3]|o[1-3]", raw):  # Lightning's "16-mixed"; apex amp levels
        return "fp16"
    if re.fullmatch(r"32(-true)?", raw):  # Lightning's full precision
        return "fp32"
    if raw.startswith("mixed") or "amp" in raw:
        notes.append("mixed precision without a format: fp16 (torch.cuda.amp's default dtype)")
        return "fp16"
    if raw:
        raise PlanError("precision", f"row {row.get('id')}: {raw!r} is not a training precision the planner "
                        "models (allowed: fp32/tf32, fp16, bf16, fp8, their mixed forms)")
    p = "bf16" if system.gpu.bf16_tflops else "fp16"
    notes.append(f"precision not stated: {p}")
    return p


# Stacks whose fp8 runs through Transformer Engine (Megatron-Core's --fp8-format, NeMo, Megatron-DeepSpeed's TE
# path, llm-foundry's `amp_fp8`): TE's default recipe is DelayedScaling (transformer_engine/common/recipe)
_TE_STACKS = ("megatron", "megatron_deepspeed")
_TE_FRAMEWORK = r"nemo|megatron|llm-foundry|composer|mosaic|transformer[\s_-]*engine|\bte\b"


def fp8_recipe_of(row, precision: str, notes, stack: str = "") -> str:
    """The row's `fp8_recipe` column, else the recipe its precision names ("float8 rowwise"), else
    the stated fp8 library's default (named in the precision cell, or the framework's: Transformer
    Engine's delayed scaling for Megatron/NeMo/llm-foundry); tensorwise for rows not in fp8."""
    given = _cell(row, "fp8_recipe").lower()
    if given:
        if given not in FP8_RECIPES:
            raise PlanError("fp8_recipe", f"row {row.get('id')}: {given!r} is not a recipe (allowed: "
                            f"{', '.join(FP8_RECIPES)})")
        return given
    raw = (row.get("precision") or "").lower()
    named = next((r for r in FP8_RECIPES if r in raw), None)
    if named or precision != "fp8":
        return named or "tensorwise"
    if re.search(r"mxfp8|\bmx\b|block[\s_-]*scal", raw):
        notes.append("fp8 recipe MXFP8 (block scaling) is not modelled: tensorwise (dynamic scaling, the closest)")
        return "tensorwise"
    # E4M3 forward / E5M2 backward is TE's HYBRID format (its DelayedScaling default)
    if "transformer engine" in raw or re.search(r"\bte\b|hybrid|delayed|e5m2", raw):
        notes.append("fp8 recipe not stated: delayed (Transformer Engine's default DelayedScaling)")
        return "delayed"
    fw = framework_cell(row).lower()
    if stack in _TE_STACKS or re.search(_TE_FRAMEWORK, fw):
        notes.append(f"fp8 recipe not stated: delayed (the fp8 of {fw or stack} is Transformer Engine's: "
                     "its default DelayedScaling)")
        return "delayed"
    notes.append("fp8 recipe not stated: tensorwise (torchao float8's default)")
    return "tensorwise"


def _year(text: str) -> int | None:
    m = re.search(r"arXiv[:\s]*(\d{2})(\d{2})\.\d{4,5}", text, re.I)
    if m:
        return 2000 + int(m.group(1))
    years = [int(y) for y in re.findall(r"(?<!\d)(20[12]\d)(?!\d)", text)]
    return max(years) if years else None


def year_of(row) -> int | None:
    """The year the row's source or notes state (arXiv id or a 20xx), None if none."""
    return _year(f"{row.get('source') or ''} {row.get('notes') or ''}")


def attention_of(row, system, notes) -> str:
    """The kernel the row names (planner/run_attention.py), else flash unless the row says otherwise; eager (materialised s x s scores) where FlashAttention
    was not available: V100 (FlashAttention needs Turing/Ampere or newer; Dao et al. 2022 README),
    the dev tables of 2020-2022, or a source whose stated year is before 2023."""
    text = f"{row.get('notes') or ''} {row.get('precision') or ''}".lower()
    if re.search(r"eager|no flash|without flash", text):
        return "eager"
    named = run_attention.stated(f"{text} {row.get('framework') or ''}".lower())
    allowed = system.gpu.attention_kernels
    if named and allowed and named not in allowed:  # e.g. FlashAttention-2 / cuDNN named on a V100 (sm70)
        notes.append(f"attention {named} does not run on {system.gpu.id}: the stack's fused kernel (flash)")
        return "flash"
    if named:
        return named
    if "flash" in text:
        return "flash"
    if row["id"].startswith(_EAGER_ERA):
        notes.append("attention not stated: eager (pre-FlashAttention stack)")
        return "eager"
    if system.gpu.name.upper().find("V100") >= 0:
        notes.append("attention not stated: eager (FlashAttention does not run on V100)")
        return "eager"
    year = _year(f"{row.get('source') or ''} {row.get('notes') or ''}")
    if year is not None and year < FLASH_FIRST_YEAR:
        notes.append(f"attention not stated: eager (source of {year}, before FlashAttention in training stacks)")
        return "eager"
    notes.append("attention not stated: flash (fused attention kernel)")
    return "flash"


# when the stated framework's profile cannot run the row's stated layout (e.g. metaseq = FSDP + Megatron
# TP, HF + DeepSpeed with pipeline stages), the nearest stack that can, in this order
_FALLBACK = {
    "fsdp": ("torchtitan", "megatron_deepspeed"), "hf": ("megatron_deepspeed", "torchtitan"),
    "megatron": ("megatron_deepspeed", "torchtitan"), "megatron_deepspeed": ("megatron", "torchtitan"),
    "torchtitan": ("megatron", "megatron_deepspeed"), "bundled": ("megatron_deepspeed", "torchtitan"),
}


def capable_stack(plan, profiles, notes):
    """The plan on a stack whose profile can run it: its own, else the nearest that can (noted)."""
    from planner.layout import Layout
    from planner.stacks import unsupported

    if plan.stack not in profiles or not unsupported(profiles, Layout.from_plan(plan))[0]:
        return plan
    for other in _FALLBACK.get(plan.stack, ()):
        moved = plan.model_copy(update={"stack": other})
        if other in profiles and not unsupported(profiles, Layout.from_plan(moved))[0]:
            notes.append(f"stack {plan.stack} cannot run this layout (tp {plan.tp}, pp {plan.pp}, cp {plan.cp}, "
                         f"{plan.sharding}): profile {other}")
            return moved
    return plan


def grad_reduce_dtype_of(row, notes) -> str:
    """The row's optional `grad_reduce_dtype` column (fp32, bf16 or default; blank: default, the stack
    profile's main_grads_fp32): the dtype its gradient buffer and data-parallel reduction ran in."""
    given = _cell(row, "grad_reduce_dtype").lower()
    if not given:
        return "default"
    if given not in GRAD_REDUCE_DTYPES:
        raise PlanError("grad_reduce_dtype", f"row {row.get('id')}: {given!r} (allowed: {', '.join(GRAD_REDUCE_DTYPES)})")
    if given != "default":
        notes.append(f"gradients accumulated and reduced in {given} (grad_reduce_dtype column)")
    return given
