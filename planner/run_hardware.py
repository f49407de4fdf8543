"""Which catalog GPU and cluster a measured run's free-text `gpu_type` means.

Published tables spell one part many ways ("A100-80GB", "NVIDIA A100-SXM4-80GB", "A100 80 GB PCIe",
"8x H800"); the cluster (nodes, network) comes from what the row says about the machine (its
`internode_network`, `notes` and `source`: "Jean Zay", "Omni-Path", "DGX-2", "Grand Teton", "LUMI"),
else the vendor's reference node for that part (DGX/HGX, 8-GPU MI300X node). Pure string logic,
no I/O: the caller passes the catalog's GPU ids.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# family pattern (on the upper-cased text, NVIDIA/AMD/Tesla removed) -> family
_FAMILIES = [
    (r"GB200", "gb200"), (r"B200", "b200"), (r"H200", "h200"), (r"H100|H800|GH100", "h100"),
    (r"A100|A800", "a100"), (r"V100", "v100"), (r"MI325", "mi325x"), (r"MI300", "mi300x"),
    (r"MI250", "mi250x"),
]
# export-control variants: the same silicon with NVLink cut to 400 GB/s in total, i.e. 1600 Gbps per
# direction (NVIDIA A800 and H800 product briefs) -> (part it reads as, NVLink Gbps per direction)
_VARIANTS = {"H800": ("H100", 1600.0), "A800": ("A100", 1600.0)}
# reference cluster per family when the row names no machine
_DEFAULT_CLUSTER = {
    "v100-16": "dgx-v100", "v100-32": "dgx-v100", "a100-40": "dgx-a100-40gb", "a100-80": "dgx-a100", "h100": "dgx-h100",
    "h100-96": "grand-teton-h100-96gb", "h200": "dgx-h200", "b200": "dgx-b200", "gb200": "gb200-nvl72",
    "mi250x": "adastra-mi250x", "mi300x": "mi300x-8", "mi325x": "mi325x-8",
}
# what the row says about the machine -> cluster, per family
_NAMED_CLUSTERS = [
    (r"JEAN[\s-]?ZAY|OMNI[\s-]?PATH|\bOPA\b", {"v100-16": "jean-zay-v100-16gb", "v100-32": "jean-zay-v100-32gb",
                                                "a100-80": "jean-zay-a100", "a100-40": "jean-zay-a100"}),
    (r"DGX-?2\b", {"v100-32": "dgx2-v100", "v100-16": "dgx2-v100"}),
    (r"GRAND\s*TETON", {"h100": "grand-teton-h100-96gb", "h100-96": "grand-teton-h100-96gb"}),
    (r"\bLUMI\b", {"mi250x": "lumi-g"}),
    (r"\bFRONTIER\b", {"mi250x": "frontier"}),
    (r"NVL72", {"gb200": "gb200-nvl72", "b200": "gb200-nvl72"}),
]


@dataclass(frozen=True)
class RowHardware:
    gpu_id: str
    cluster_id: str
    notes: tuple[str, ...]
    intranode_gbps: float | None = None  # set where the part's NVLink differs from the catalog GPU's


class UnknownGpu(ValueError):
    """The text names no GPU the catalog can stand for."""


def _memory_gb(text: str) -> int | None:
    m = re.search(r"(\d{2,3})\s*G(?:I?B)?\b", text)
    return int(m.group(1)) if m else None


def resolve(gpu_type: str, machine_text: str, gpu_ids: set[str]) -> RowHardware:
    """The catalog GPU and cluster for a row's `gpu_type`, given what the row says of the machine."""
    raw = gpu_type.strip()
    text = re.sub(r"\b(NVIDIA|AMD|TESLA|INSTINCT)\b", " ", raw.upper())
    notes: list[str] = []
    nvlink = None
    for variant, (base, gbps) in _VARIANTS.items():
        if variant in text:
            nvlink = gbps
            notes.append(f"{variant} read as {base} with NVLink {gbps:g} Gbps per direction")
    family = next((f for pat, f in _FAMILIES if re.search(pat, text)), None)
    if "GH200" in text:  # Grace Hopper: one Hopper GPU with 96 GB HBM3 or 144 GB HBM3e (NVIDIA GH200 datasheet)
        notes.append("GH200 read as H200 (the same Hopper GPU; the 96 GB HBM3 variant has less memory)")
    if family is None:
        raise UnknownGpu(raw)
    mem = _memory_gb(text)
    pcie = "PCIE" in text
    key = family
    if family == "v100":
        size = 16 if mem == 16 else 32
        if mem is None:
            notes.append("V100 memory not stated: 32 GB")
        gpu, key = f"v100-{'pcie-' if pcie else ''}{size}gb", f"v100-{size}"
    elif family == "a100":
        size = 40 if mem == 40 else 80
        if mem is None:
            notes.append("A100 memory not stated: 80 GB")
        gpu, key = f"a100-{'pcie-' if pcie else ''}{size}gb", f"a100-{size}"
    elif family == "h100":
        if mem in (94, 96):
            gpu, key = "h100-96gb", "h100-96"
        else:
            gpu = "h100-pcie-80gb" if pcie else "h100-80gb"
    else:
        gpu = {"h200": "h200-141gb"}.get(family, family)
    if gpu not in gpu_ids:
        raise UnknownGpu(f"{raw} (catalog GPU {gpu} missing)")
    said = f"{raw} {machine_text}".upper()
    cluster = next((table[key] for pat, table in _NAMED_CLUSTERS if re.search(pat, said) and key in table),
                   _DEFAULT_CLUSTER[key])
    return RowHardware(gpu, cluster, tuple(notes), nvlink)
