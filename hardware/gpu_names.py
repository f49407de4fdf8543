"""A driver's GPU name -> the catalog GPU it is: one matcher for the tuner (nvidia-smi, amd-smi, rocm-smi names)
and the trainer (torch.cuda.get_device_name, the same CUDA/HIP device-property string).

Names as drivers print them (tests/trainer/test_gpu_names.py cites each): "NVIDIA A100-SXM4-80GB",
"NVIDIA H100 80GB HBM3", "NVIDIA H100 NVL", "NVIDIA H200", "Tesla V100-SXM2-32GB", "NVIDIA GH200 480GB",
"AMD Instinct MI250X / MI250" (libdrm amdgpu.ids, what ROCm's torch reports), "AMD Instinct MI300X".
"""

from __future__ import annotations

import re

from hardware.models import Catalog

# a form factor a driver's name states ("NVIDIA H100 NVL", "NVIDIA H100 PCIe"): a different part (other clocks,
# power, peak) from the SXM one of the same model, so a name and a catalog part must agree on it
FORM_FACTORS = ("nvl", "pcie")


def words(text: str) -> str:
    """Lower case, the punctuation drivers put between words as spaces: "A100-SXM4-80GB", "MI250X/MI250",
    pci.ids' "[Instinct MI250X/MI250]"."""
    return " ".join(re.sub(r"[-/,\[\]()]", " ", text.lower()).split())


def has_word(token: str, name: str) -> bool:
    """`token` as a whole word of `name`: B200 is not GB200, H200 not GH200."""
    return re.search(rf"(?<![a-z0-9]){re.escape(token)}(?![a-z0-9])", words(name)) is not None


# words of a name that are no model: memory sizes ("80gb", "144g", "480gb"), memory kinds ("hbm3e"), sockets
# ("sxm4", "sxm6"); a model word has letters and digits (h100, mi250x, l40s)
NOT_A_MODEL = re.compile(r"\d+gb?|hbm\d*e?|sxm\d*|[a-z]+|\d+")


def model_words(name: str) -> list[str]:
    """The words of a driver's name that name a model, in order: "NVIDIA H100 80GB HBM3" -> ["h100"],
    "AMD Instinct MI250X / MI250" -> ["mi250x", "mi250"], "AMD Radeon Graphics" -> []."""
    return [w for w in words(name).split() if not NOT_A_MODEL.fullmatch(w)]


def match_gpu_id(catalog: Catalog, name: str, memory_gib: float | None = None) -> str | None:
    """The catalog GPU `name` is: the first model word of the name (e.g. h100) that some catalog name has,
    among those parts the one sharing most of the name's words, carrying no form factor the name lacks nor
    lacking one it states, then the closest memory. None when no part fits: vendor words alone ("AMD
    Instinct", "Tesla") or a size ("80GB") never pick a part."""
    key = words(name).replace("nvidia", "")
    tokens = key.split()
    stated = {m for m in FORM_FACTORS if has_word(m, key)}

    def fits(gpu) -> bool:
        return gpu.id != "local" and all(has_word(m, gpu.name) for m in stated)

    for model in model_words(key):
        hits = [g for g in catalog.gpus.values() if fits(g) and has_word(model, g.name)]
        if hits:
            return min(hits, key=lambda g: (-sum(has_word(t, g.name) for t in tokens),
                                            sum(has_word(m, g.name) for m in FORM_FACTORS if m not in stated),
                                            abs(g.hbm_gib - memory_gib) if memory_gib else 0.0)).id
    return None


def match_rocm_arch(catalog: Catalog, arch: str, compute_units: int | None = None,
                    memory_gib: float | None = None) -> str | None:
    """The catalog GPU a ROCm device is by its LLVM target (torch's gcnArchName, "gfx942:sramecc+:xnack-"), its
    compute units (multi_processor_count) and memory, for a device whose driver gave no name (libdrm's amdgpu.ids
    missing from the image: an empty name, or "AMD Radeon Graphics"). The part with that target and CU count; of
    several (MI300X / MI325X), the one whose memory is within 10% of the device's. None when none fits (an MI210:
    gfx90a with 104 CUs; an MI300X compute partition: fewer CUs) or two still do (MI350X / MI355X differ only in
    clock)."""
    target = arch.split(":")[0].strip().lower()
    hits = [g for g in catalog.gpus.values() if g.gcn_arch is not None and g.gcn_arch == target
            and (compute_units is None or g.compute_units in (None, compute_units))]
    if len(hits) > 1 and memory_gib:
        hits = [g for g in hits if abs(g.hbm_gib - memory_gib) <= 0.1 * g.hbm_gib]
    return hits[0].id if len(hits) == 1 else None
