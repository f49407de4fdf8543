"""A runs file's model given by name only ("LLaMA-2 70B", "Meta-Llama-3-70B", "GPT-2 XL", "GPT-3 175B"),
its shape columns blank (planner/runs.py uses this).

A name whose letters and digits are those of a catalog preset id (case, spaces, dashes, an org/ prefix, a
"Meta-" prefix and a "-hf" suffix aside) is that preset, unless the row's n_params_B contradicts it;
otherwise the size the name states ("175B", "1.3B", "350M") feeds the bare-size rule, noted.
"""

from __future__ import annotations

import re

AGREE = 0.25  # a stated n_params_B within 25% of the preset's count is the same model (embeddings, rounding)


def _key(text: str) -> str:
    t = text.strip().lower().split("/")[-1]
    t = re.sub(r"[-_\s]hf$", "", t)
    t = re.sub(r"^meta[-_\s]+", "", t)
    return re.sub(r"[^a-z0-9.]", "", t)


# what a name adds to the model's own: a context length ("128K", "32k context", "(8K ctx)"), "base", "pretraining"
_QUALIFIERS = re.compile(r"[(\[]?\s*(?<![\w.])\d+\s*k\b(?:[\s_-]*(?:context|ctx|tokens?|seq\w*))?\s*[)\]]?"
                         r"|\b(?:long[\s_-]*context|base|pre[\s_-]*train(?:ing|ed)?)\b", re.I)


def preset_of(name: str, preset_ids, stated_b: float | None, n_params_of, notes: list[str]) -> str | None:
    """The preset id `name` spells, where the row's stated size (billions) agrees; `n_params_of(id)`
    gives a preset's parameter count. A name with a context length or "base" beside the model's own
    ("Llama 3 405B 128K") is the preset its other words spell."""
    key = _key(name)
    if not key:
        return None
    ids = sorted(preset_ids)
    found = next((pid for pid in ids if _key(pid) == key), None)
    if found is None and (bare := _key(_QUALIFIERS.sub(" ", name))) and bare != key:
        found = next((pid for pid in ids if _key(pid) == bare), None)
    if found is None:
        return None
    preset_b = n_params_of(found) / 1e9
    if stated_b is not None and abs(preset_b - stated_b) > AGREE * stated_b:
        notes.append(f"model_name {name!r} is preset {found} ({preset_b:.1f}B) but n_params_B says {stated_b:g}: "
                     "the stated size")
        return None
    notes.append(f"model_name {name!r}: preset {found} (shape not stated)")
    return found


def size_in_name(name: str) -> float | None:
    """Billions of parameters a name states ("GPT-3 175B" -> 175, "GPT 350M" -> 0.35); None if none."""
    m = re.findall(r"(?<![\w.])(\d+(?:\.\d+)?)\s*([bmt])\b", name, re.I)
    if not m:
        return None
    value, unit = m[-1]
    return float(value) * {"b": 1.0, "m": 1e-3, "t": 1e3}[unit.lower()]
