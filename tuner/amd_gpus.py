"""AMD GPUs (ROCm) for `plan tune`: (name, memory GiB) per visible GPU, from the first tool that answers.

1. `amd-smi static --asic --vram --json` (ROCm/amdsmi amdsmi_cli/amdsmi_commands.py static_gpu): one dict per GPU
   with "asic": {"market_name": ...} and "vram": {"size": {"value": N, "unit": "MB"}} (the library's vram_size, in
   MiB: 196592 on an MI300X, 191.98 GiB); amdsmi_logger.combine_arrays_to_json wraps the list as
   {"cpu_data": [...], "core_data": [...], "gpu_data": [...]}, older releases print the bare list.
2. `rocm-smi --showproductname --showmeminfo vram --json` (ROCm/rocm_smi_lib python_smi_tools/rocm_smi.py
   showProductName, showMemInfo): {"card0": {"Card series": ..., "VRAM Total Memory (B)": "68702699520", ...},
   "system": {...}}, the values strings; later releases spell "Card Series"; older ones name a part as pci.ids
   does ("Aldebaran/MI200 [Instinct MI250X/MI250]"). A warning line may precede the JSON.
3. torch built for ROCm (torch.version.hip set; torch.cuda is HIP there): get_device_properties(i).name and
   .total_memory (bytes). Tried only where the amdgpu kernel driver's /dev/kfd exists, so that a CPU machine never
   imports torch here (the tuner stays light).

An MI250X shows as two devices, one per GCD (64 GiB each), as the catalog's mi250x entry counts it.

The tools list every GPU; the trials' ranks see those ROCm's isolation variables leave (ROCm docs, "GPU isolation
techniques"): ROCR_VISIBLE_DEVICES first (the ROCr runtime), then HIP_VISIBLE_DEVICES, else CUDA_VISIBLE_DEVICES
(HIP reads both, HIP's first), as indices among the devices ROCR left (torch/cuda/__init__.py
_parse_visible_devices, pytorch/pytorch#142292: "The ROCR env var is processed first which then reduces the number
of GPUs that HIP can select from"). torch's own HIP devices (3.) are already narrowed.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess

GIB = 2**30


def _json_after_noise(text: str):
    """The JSON document in a tool's output, skipping warning lines printed before it (and text after it)."""
    decoder = json.JSONDecoder()
    for match in re.finditer(r"[{\[]", text):
        try:
            return decoder.raw_decode(text, match.start())[0]
        except json.JSONDecodeError:
            continue
    return None


def clean_name(name: str) -> str:
    """A driver's product name with pci.ids punctuation as spaces: "Aldebaran/MI200 [Instinct MI250X/MI250]" ->
    "Aldebaran MI200 Instinct MI250X MI250" (the catalog matcher reads whole words)."""
    return " ".join(re.sub(r"[/\[\]()]", " ", name).split())


def parse_amd_smi_static(text: str) -> list[tuple[str, float]]:
    """(name, GiB) per GPU of `amd-smi static --asic --vram --json`."""
    doc = _json_after_noise(text)
    gpus = doc.get("gpu_data", []) if isinstance(doc, dict) else doc if isinstance(doc, list) else []
    rows = []
    for gpu in gpus:
        if not isinstance(gpu, dict):
            continue
        name = (gpu.get("asic") or {}).get("market_name")
        size = ((gpu.get("vram") or {}).get("size"))
        mib = size.get("value") if isinstance(size, dict) else size
        try:
            gib = float(mib) / 1024
        except (TypeError, ValueError):
            continue
        if isinstance(name, str) and name not in ("", "N/A"):
            rows.append((clean_name(name), gib))
    return rows


def parse_rocm_smi(text: str) -> list[tuple[str, float]]:
    """(name, GiB) per card of `rocm-smi --showproductname --showmeminfo vram --json`, in card order."""
    doc = _json_after_noise(text)
    if not isinstance(doc, dict):
        return []
    rows = []
    cards = sorted((k for k in doc if re.fullmatch(r"card\d+", k)), key=lambda k: int(k[4:]))
    for key in cards:
        fields = {k.lower(): v for k, v in doc[key].items()} if isinstance(doc[key], dict) else {}
        name, total = fields.get("card series"), fields.get("vram total memory (b)")
        try:
            gib = float(total) / GIB
        except (TypeError, ValueError):
            continue
        if isinstance(name, str) and name.strip() not in ("", "N/A"):
            rows.append((clean_name(name.strip()), gib))
    return rows


def _run(argv: list[str]) -> str | None:
    exe = shutil.which(argv[0])
    if not exe:
        return None
    try:
        return subprocess.run([exe, *argv[1:]], capture_output=True, text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None


def torch_hip_gpus() -> list[tuple[str, float]]:
    """(name, GiB) per device of a ROCm build of torch; [] where torch is absent or built for CUDA/CPU."""
    try:
        import torch
    except ImportError:
        return []
    if getattr(torch.version, "hip", None) is None or not torch.cuda.is_available():
        return []
    rows = []
    for i in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(i)
        name = hip_device_name(props.name, getattr(props, "gcnArchName", ""),
                               getattr(props, "multi_processor_count", None), props.total_memory / GIB)
        if name:
            rows.append((name, props.total_memory / GIB))
    return rows


def hip_device_name(name: str, arch: str, compute_units: int | None, gib: float) -> str | None:
    """A HIP device's name for the catalog matcher: the driver's, else (an image without libdrm's amdgpu.ids: an
    empty name) the name of the catalog part its LLVM target and compute units are (hardware/gpu_names.py
    match_rocm_arch); None when neither (the device was dropped: no part to plan with)."""
    if name and name.strip():
        return clean_name(name)
    if not arch:
        return None
    from hardware.catalog import load_catalog
    from hardware.gpu_names import match_rocm_arch

    cat = load_catalog()
    gid = match_rocm_arch(cat, arch, compute_units, gib)
    return cat.gpus[gid].name if gid else None


def amd_gpus() -> list[tuple[str, float]]:
    """(name, GiB) per visible AMD GPU: amd-smi, else rocm-smi (narrowed as ROCm narrows them), else torch's HIP
    devices."""
    out = _run(["amd-smi", "static", "--asic", "--vram", "--json"])
    if out and (rows := parse_amd_smi_static(out)):
        return rocm_visible(rows, os.environ)
    out = _run(["rocm-smi", "--showproductname", "--showmeminfo", "vram", "--json"])
    if out and (rows := parse_rocm_smi(out)):
        return rocm_visible(rows, os.environ)
    return torch_hip_gpus() if os.path.exists("/dev/kfd") else []


def rocm_visible(rows: list, env) -> list:
    """The rows (in the tools' order) a ROCm process sees under `env`: ROCR_VISIBLE_DEVICES, then
    HIP_VISIBLE_DEVICES (else CUDA_VISIBLE_DEVICES) among what ROCR left."""
    rows = _pick(rows, env.get("ROCR_VISIBLE_DEVICES"))
    hip = env.get("HIP_VISIBLE_DEVICES")
    return _pick(rows, hip if hip is not None else env.get("CUDA_VISIBLE_DEVICES"))


def _pick(rows: list, visible: str | None) -> list:
    """`rows` chosen by a visibility list as torch reads one (_parse_visible_devices): each entry's leading
    digits; the first entry that names no device ("", "-1", past the last) ends the list; a repeated one
    leaves no device. UUID entries ("GPU-...") are not resolved (the tools' rows here carry none): all rows stay."""
    if visible is None:
        return rows
    entries = [e.strip() for e in visible.split(",")]
    if any(e.upper().startswith("GPU-") for e in entries):
        return rows
    chosen: list[int] = []
    for entry in entries:
        digits = re.match(r"\+?\d+", entry)
        index = int(digits.group()) if digits else -1
        if not 0 <= index < len(rows):
            break
        if index in chosen:
            return []
        chosen.append(index)
    return [rows[i] for i in chosen]
