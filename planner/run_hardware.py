"""Which catalog GPU and cluster a measured run's free-text `gpu_type` means.

Published tables spell one part many ways ("A100-80GB", "NVIDIA A100-SXM4-80GB", "A100 80 GB PCIe",
"8x H800", "NVIDIA GH200 480GB"); the cluster (nodes, network) comes from what the row says about the
machine (its `internode_network`, `notes` and `source`: "Jean Zay", "Omni-Path", "DGX-2", "Grand Teton",
"LUMI", "Perlmutter", "Summit", "Alps", ...), else the vendor's reference node for that part (DGX/HGX,
8-GPU MI300X node). A named machine also fixes a part whose memory the row does not state (an "A100" on
Perlmutter is its 40 GB card). Pure string logic, no I/O: the caller passes the catalog's GPU ids.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# family pattern (on the upper-cased text, NVIDIA/AMD/Tesla removed) -> family; first match wins
_FAMILIES = [
    # a Grace superchip's part before the bare GPU its name contains (GB300 holds B300)
    (r"GB300", "gb300"), (r"GB200", "gb200"), (r"GH200", "gh200"), (r"B300", "b300"), (r"B200", "b200"),
    (r"H200", "h200"), (r"H100|H800|GH100", "h100"), (r"A100|A800", "a100"), (r"V100", "v100"), (r"L40S", "l40s"),
    (r"MI355", "mi355x"), (r"MI350", "mi350x"), (r"MI325", "mi325x"), (r"MI300A", "mi300a"), (r"MI300", "mi300x"),
    (r"MI250", "mi250x"),
]
# accelerators the planner has no model of: refused by name, before a family pattern can match a part
# named beside them ("Gaudi2 vs H100")
_UNMODELLED = (r"GAUDI|\bTPU|CEREBRAS|\bWSE-?\d|PONTE\s*VECCHIO|\bPVC\b|\bMAX\s*1[15]\d0\b|GPU\s+MAX|TRAINIUM|"
               r"INFERENTIA")
ALLOWED = ("V100 (16/32 GB, SXM/PCIe), A100/A800 (40/64/80 GB, SXM/PCIe), H100/H800 (80/94/96 GB, SXM/PCIe/NVL), "
           "GH200 (96/144 GB), H200, B200, B300, GB200, GB300, L40S, MI250X, MI300X, MI300A, MI325X, MI350X, MI355X")
# the memory sizes (GB) each family's parts have (the ALLOWED line; GH200's 480/576/624 count its host
# LPDDR5X, see _part): a stated size outside them is a typo, refused, not read as the nearest part
_SIZES = {"v100": (16, 32), "a100": (40, 64, 80), "h100": (80, 94, 96), "gh200": (96, 141, 144, 480, 576, 624)}
# export-control variants: the same silicon with NVLink cut to 400 GB/s in total, i.e. 1600 Gbps per
# direction (NVIDIA A800 and H800 product briefs) -> (part it reads as, NVLink Gbps per direction)
_VARIANTS = {"H800": ("H100", 1600.0), "A800": ("A100", 1600.0)}
# variants with a catalog entry of their own (catalog/gpus/h800.toml, a800-80gb.toml): part key -> (GPU id,
# part key); the others (PCIe cards, A800 40 GB) keep the base part with the NVLink above
_OWN_ENTRY = {"H800": ("h100", "h800"), "A800": ("a100-80", "a800-80gb")}
# reference cluster per part key when the row names no machine
_DEFAULT_CLUSTER = {
    "v100-16": "dgx-v100", "v100-32": "dgx-v100", "a100-40": "dgx-a100-40gb", "a100-80": "dgx-a100",
    "a100-64": "leonardo-booster", "h100": "dgx-h100", "h100-96": "grand-teton-h100-96gb", "h100-nvl": "dgx-h100",
    "gh200-96": "jupiter-booster", "gh200-144": "jupiter-booster", "h200": "dgx-h200", "b200": "dgx-b200",
    "gb200": "gb200-nvl72", "l40s": "dgx-a100", "mi250x": "adastra-mi250x", "mi300x": "mi300x-8",
    "mi300a": "el-capitan", "mi325x": "mi325x-8", "b300": "dgx-b300", "gb300": "gb300-nvl72", "mi355x": "mi355x-8",
    "mi350x": "mi350x-8", "h800": "hgx-h800", "a800-80gb": "hgx-a800",
}
# parts without a reference node of their own: whose node stands in, said in the row's notes
_STAND_IN = {"h100-nvl": "PCIe gen5 host link", "l40s": "PCIe gen4 host link"}


@dataclass(frozen=True)
class _Machine:
    """What a row may say of a named machine: its cluster per part key, and the part (GPU id, key) it
    has when the row does not state the memory."""

    pattern: str
    clusters: dict[str, str]
    unstated: dict[str, tuple[str, str]] = field(default_factory=dict)


_A100_40, _GH200_96 = ("a100-40gb", "a100-40"), ("gh200-96gb", "gh200-96")
_MACHINES = [
    _Machine(r"JEAN[\s-]?ZAY|OMNI[\s-]?PATH|\bOPA\b", {"v100-16": "jean-zay-v100-16gb", "v100-32": "jean-zay-v100-32gb",
                                                       "a100-80": "jean-zay-a100", "a100-40": "jean-zay-a100"}),
    _Machine(r"DGX-?2\b", {"v100-32": "dgx2-v100", "v100-16": "dgx2-v100"}),
    _Machine(r"GRAND\s*TETON", {"h100": "grand-teton-h100-96gb", "h100-96": "grand-teton-h100-96gb"}),
    _Machine(r"\bLUMI\b", {"mi250x": "lumi-g"}),
    _Machine(r"\bFRONTIER\b", {"mi250x": "frontier"}),
    _Machine(r"NVL72", {"gb200": "gb200-nvl72", "b200": "gb200-nvl72", "gb300": "gb300-nvl72", "b300": "gb300-nvl72"}),
    _Machine(r"\bPERLMUTTER\b", {"a100-40": "perlmutter", "a100-80": "perlmutter"}, {"a100": _A100_40}),
    _Machine(r"\bPOLARIS\b", {"a100-40": "polaris", "a100-80": "polaris"}, {"a100": _A100_40}),
    _Machine(r"\bJUWELS\b", {"a100-40": "juwels-booster", "a100-80": "juwels-booster"}, {"a100": _A100_40}),
    _Machine(r"\bLEONARDO\b", dict.fromkeys(("a100-64", "a100-40", "a100-80"), "leonardo-booster"),
             {"a100": ("a100-64gb", "a100-64")}),
    _Machine(r"\bSUMMIT\b(?!\s*\d)", {"v100-16": "summit", "v100-32": "summit"}, {"v100": ("v100-16gb", "v100-16")}),
    _Machine(r"\bALPS\b|\bCLARIDEN\b", {"gh200-96": "alps", "gh200-144": "alps"}, {"gh200": _GH200_96}),
    _Machine(r"\bJUPITER\b|\bJEDI\b", {"gh200-96": "jupiter-booster", "gh200-144": "jupiter-booster"},
             {"gh200": _GH200_96}),
    # "Eos" as a name (capitalised, or with NVIDIA / SuperPOD beside it), not an EOS token
    _Machine(r"(?-i:\bEos\b)|NVIDIA\s+EOS\b|\bEOS\s+(?:SUPERPOD|SUPERCOMPUTER|CLUSTER)", {"h100": "eos"}),
    _Machine(r"\bSELENE\b", {"a100-80": "selene"}, {"a100": ("a100-80gb", "a100-80")}),
    _Machine(r"EL\s*CAPITAN|\bTUOLUMNE\b|\bRZADAMS\b", {"mi300a": "el-capitan"}),
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


def _part(family: str, text: str, mem: int | None, notes: list[str]) -> tuple[str, str]:
    """(catalog GPU id, part key) of a family, from the memory and form factor the text states."""
    pcie = "PCIE" in text
    if family == "v100":
        size = 16 if mem == 16 else 32
        return f"v100-{'pcie-' if pcie else ''}{size}gb", f"v100-{size}"
    if family == "a100":
        size = mem if mem in (40, 64) else 80
        return (f"a100-{'pcie-' if pcie else ''}{size}gb" if size != 64 else "a100-64gb"), f"a100-{size}"
    if family == "h100":
        if re.search(r"NVL(?!INK|\d)", text):
            return "h100-nvl", "h100-nvl"
        if mem in (94, 96):
            return "h100-96gb", "h100-96"
        return ("h100-pcie-80gb" if pcie else "h100-80gb"), "h100"
    if family == "gh200":  # Grace Hopper: 96 GB HBM3 or 144 GB HBM3e (NVIDIA GH200 datasheet)
        if mem in (141, 144, 624) or "HBM3E" in text:
            if mem == 624:
                notes.append("GH200 624GB = 144 GB HBM3e + 480 GB LPDDR5X host memory: the 144 GB GPU")
            return "gh200-144gb", "gh200-144"
        if mem in (480, 576):
            notes.append(f"GH200 {mem}GB counts the superchip's LPDDR5X host memory: the 96 GB HBM3 GPU")
        return "gh200-96gb", "gh200-96"
    return {"h200": "h200-141gb"}.get(family, family), family


def resolve(gpu_type: str, machine_text: str, gpu_ids: set[str]) -> RowHardware:
    """The catalog GPU and cluster for a row's `gpu_type`, given what the row says of the machine."""
    raw = gpu_type.strip()
    text = re.sub(r"\b(NVIDIA|AMD|TESLA|INSTINCT)\b", " ", raw.upper())
    if re.search(_UNMODELLED, text):
        raise UnknownGpu(f"{raw} (no model of this accelerator)")
    family = next((f for pat, f in _FAMILIES if re.search(pat, text)), None)
    if family is None:
        raise UnknownGpu(raw)
    stated = re.search(r"(\d{2,3})\s*GI?B\b", text)  # an explicit size unit (a bare "400G" may be a link)
    if stated and family in _SIZES and int(stated.group(1)) not in _SIZES[family]:
        sizes = "/".join(map(str, _SIZES[family][:3]))
        raise UnknownGpu(f"{raw} (no {family.upper()} has {stated.group(1)} GB: {sizes} GB)")
    notes: list[str] = []
    nvlink = None
    for variant, (base, gbps) in _VARIANTS.items():
        if variant in text:
            nvlink = gbps
            notes.append(f"{variant} read as {base} with NVLink {gbps:g} Gbps per direction")
    said = f"{raw} {machine_text}"
    machines = [m for m in _MACHINES if re.search(m.pattern, said, re.IGNORECASE)]
    mem = _memory_gb(text)
    unstated = next((m.unstated[family] for m in machines if family in m.unstated), None)
    if mem is None and unstated is not None and "PCIE" not in text:
        gpu, key = unstated
        notes.append(f"{family.upper()} memory not stated: {gpu} (the machine the row names)")
    else:
        gpu, key = _part(family, text, mem, notes)
        if mem is None and family in ("v100", "a100", "gh200"):
            notes.append(f"{family.upper()} memory not stated: {key.split('-')[1]} GB")
    own = next((_OWN_ENTRY[v] for v in _OWN_ENTRY if v in text and "PCIE" not in text), None)
    if own is not None and own[0] == key and own[1] in gpu_ids:  # the variant's own entry: its NVLink is in it
        gpu = key = own[1]
        nvlink = None
        notes = [n for n in notes if "read as" not in n]
    if gpu not in gpu_ids:
        raise UnknownGpu(f"{raw} (catalog GPU {gpu} missing)")
    cluster = next((m.clusters[key] for m in machines if key in m.clusters), None)
    if cluster is None:
        cluster = _DEFAULT_CLUSTER[key]
        if key in _STAND_IN:
            notes.append(f"{gpu}: no reference node; {cluster}'s node and network stand in ({_STAND_IN[key]})")
    return RowHardware(gpu, cluster, tuple(notes), nvlink)
