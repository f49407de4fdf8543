"""`plan tune` on ROCm finds its AMD GPUs (tuner/amd_gpus.py) and maps them to the catalog (tuner/device.py
guess_gpu_id, the whole-word matcher). The fixtures are the tools' JSON in the layout their sources print:
- amd-smi: ROCm/amdsmi amdsmi_cli/amdsmi_commands.py static_gpu ("asic" with market_name, "vram" with
  "size": {"value": vram_size, "unit": "MB"}) and amdsmi_logger.combine_arrays_to_json ({"cpu_data", "core_data",
  "gpu_data"}); older releases print the bare list of GPUs;
- rocm-smi: ROCm/rocm_smi_lib python_smi_tools/rocm_smi.py showProductName ("Card series", "Card model",
  "Card vendor", "Card SKU"; later "Card Series", ..., "GFX Version") and showMemInfo ("VRAM Total Memory (B)"),
  keyed by card, values as strings, a "system" entry beside them.
Parsing runs on CPU; the tools are found on PATH as they would be on a ROCm machine (scripts printing the fixtures).
"""

from __future__ import annotations

import json
import stat

import pytest

from hardware.catalog import load_catalog
from tuner import amd_gpus, device
from tuner.device import guess_gpu_id

# amd-smi static --asic --vram --json, one MI300X (vram_size 196592 MiB = 191.98 GiB), ROCm 6.3+ layout
AMD_SMI_MI300X = {"cpu_data": [], "core_data": [], "gpu_data": [{
    "gpu": 0,
    "asic": {"market_name": "AMD Instinct MI300X", "vendor_id": "0x1002",
             "vendor_name": "Advanced Micro Devices Inc. [AMD/ATI]", "subvendor_id": "0x1002", "device_id": "0x74a1",
             "subsystem_id": "0x74a1", "rev_id": "0x00", "asic_serial": "0x6F1F0A2B3C4D5E6F", "oam_id": 0,
             "num_compute_units": 304, "target_graphics_version": "gfx942"},
    "vram": {"type": "HBM3", "vendor": "N/A", "size": {"value": 196592, "unit": "MB"}, "bit_width": 8192,
             "max_bandwidth": {"value": 5300, "unit": "GB/s"}}}]}
# the bare list of older amd-smi releases, an MI355X (294896 MiB = 287.98 GiB)
AMD_SMI_MI355X_LIST = [{"gpu": 0, "asic": {"market_name": "AMD Instinct MI355X", "target_graphics_version": "gfx950"},
                        "vram": {"type": "HBM3E", "size": {"value": 294896, "unit": "MB"}}}]
# rocm-smi --showproductname --showmeminfo vram --json on an MI250X: two GCDs of 64 GiB, the pci.ids name
ROCM_SMI_MI250X = {
    "card0": {"VRAM Total Memory (B)": "68702699520", "VRAM Total Used Memory (B)": "10960896",
              "Card series": "Aldebaran/MI200 [Instinct MI250X/MI250]", "Card model": "0x0b0c",
              "Card vendor": "Advanced Micro Devices, Inc. [AMD/ATI]", "Card SKU": "D65209"},
    "card1": {"VRAM Total Memory (B)": "68702699520", "VRAM Total Used Memory (B)": "10960896",
              "Card series": "Aldebaran/MI200 [Instinct MI250X/MI250]", "Card model": "0x0b0c",
              "Card vendor": "Advanced Micro Devices, Inc. [AMD/ATI]", "Card SKU": "D65209"},
    "system": {"Driver version": "6.2.4"}}
# a later rocm-smi: "Card Series" and friends, an MI325X (256 GiB)
ROCM_SMI_MI325X = {"card0": {"VRAM Total Memory (B)": "274877906944", "VRAM Total Used Memory (B)": "297451520",
                             "Card Series": "AMD Instinct MI325X", "Card Model": "0x74a5",
                             "Card Vendor": "Advanced Micro Devices, Inc. [AMD/ATI]", "Card SKU": "M3250101",
                             "Subsystem ID": "0x74a5", "Device Rev": "0x00", "Node ID": "2", "GUID": "35264",
                             "GFX Version": "gfx942"}}
WARNING = "WARNING: AMD GPU device(s) is/are in a low-power state. Check power control/runtime_status\n\n"


def test_amd_smi_static_json_both_layouts():
    assert amd_gpus.parse_amd_smi_static(json.dumps(AMD_SMI_MI300X)) == [("AMD Instinct MI300X", 196592 / 1024)]
    assert amd_gpus.parse_amd_smi_static(json.dumps(AMD_SMI_MI355X_LIST, indent=4)) == [
        ("AMD Instinct MI355X", 294896 / 1024)]
    assert amd_gpus.parse_amd_smi_static('{"cpu_data": [], "core_data": [], "gpu_data": []}') == []
    assert amd_gpus.parse_amd_smi_static("amd-smi: command failed") == []


def test_rocm_smi_json_both_spellings_cards_in_order_and_a_warning_before_it():
    rows = amd_gpus.parse_rocm_smi(WARNING + json.dumps(ROCM_SMI_MI250X))
    assert rows == [("Aldebaran MI200 Instinct MI250X MI250", 68702699520 / 2**30)] * 2
    assert rows[0][1] == pytest.approx(63.98, abs=0.01)
    assert amd_gpus.parse_rocm_smi(json.dumps(ROCM_SMI_MI325X)) == [("AMD Instinct MI325X", 256.0)]
    twelve = {f"card{i}": ROCM_SMI_MI325X["card0"] | {"Card Series": f"AMD Instinct MI325X #{i}"} for i in (10, 2, 1)}
    assert [n for n, _ in amd_gpus.parse_rocm_smi(json.dumps(twelve))] == [f"AMD Instinct MI325X #{i}" for i in (1, 2, 10)]
    assert amd_gpus.parse_rocm_smi("") == [] and amd_gpus.parse_rocm_smi('{"system": {}}') == []


def test_parsed_names_map_to_the_catalog_parts():
    cat = load_catalog()
    parsed = (amd_gpus.parse_amd_smi_static(json.dumps(AMD_SMI_MI300X))
              + amd_gpus.parse_amd_smi_static(json.dumps(AMD_SMI_MI355X_LIST))
              + amd_gpus.parse_rocm_smi(json.dumps(ROCM_SMI_MI250X))[:1]
              + amd_gpus.parse_rocm_smi(json.dumps(ROCM_SMI_MI325X)))
    assert [guess_gpu_id(cat, name, gib) for name, gib in parsed] == ["mi300x", "mi355x", "mi250x", "mi325x"]
    # the MI250X's pci.ids name read as words, not "mi250x/mi250]": the matcher (hardware/gpu_names.py) reads
    # the punctuation itself too, as torch's device name on ROCm comes uncleaned ("AMD Instinct MI250X / MI250")
    assert guess_gpu_id(cat, "Aldebaran/MI200 [Instinct MI250X/MI250]", 64.0) == "mi250x"


@pytest.mark.parametrize("name, arch, cus, gib, gid", [
    ("", "gfx942:sramecc+:xnack-", 304, 191.98, "mi300x"),  # no amdgpu.ids in the image: torch's name is empty
    ("", "gfx90a:sramecc+:xnack-", 110, 63.98, "mi250x"),
    ("", "gfx950", 256, 287.98, None),  # MI350X or MI355X: no part to plan with, the device is left out
    ("", "", None, 64.0, None),
    ("AMD Instinct MI300X", "gfx942", 304, 191.98, "mi300x"),
])
def test_a_hip_device_without_a_name_is_found_by_its_arch(name, arch, cus, gib, gid):
    """Torch's HIP devices were dropped when the name was empty (the tuner then saw no GPU)."""
    cat = load_catalog()
    found = amd_gpus.hip_device_name(name, arch, cus, gib)
    assert (guess_gpu_id(cat, found, gib) if found else None) == gid


def _tool(folder, name: str, output: str) -> None:
    path = folder / name
    assert "'" not in output
    path.write_text(f"#!/bin/sh\nprintf '%s\\n' '{output}'\n")  # a shell builtin: PATH holds only these tools
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def test_detection_asks_amd_smi_then_rocm_smi(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi here; the AMD tools as a ROCm machine has them
    monkeypatch.delenv("PLAN_FORCE_CPU", raising=False)
    assert device.local_gpus() == [] or amd_gpus.os.path.exists("/dev/kfd")
    _tool(tmp_path, "rocm-smi", json.dumps(ROCM_SMI_MI250X))
    assert [n for n, _ in device.local_gpus()] == ["Aldebaran MI200 Instinct MI250X MI250"] * 2
    assert device.has_cuda_gpu()
    _tool(tmp_path, "amd-smi", json.dumps(AMD_SMI_MI300X))
    assert device.local_gpus() == [("AMD Instinct MI300X", 196592 / 1024)]  # amd-smi first
    monkeypatch.setenv("PLAN_FORCE_CPU", "1")
    assert not device.has_cuda_gpu()


def test_torch_without_hip_finds_no_amd_gpu():
    torch = pytest.importorskip("torch")
    if torch.version.hip is not None:
        pytest.skip("a ROCm build of torch: tests/tuner/test_amd_gpus.py::test_rocm_torch_devices checks it")
    assert amd_gpus.torch_hip_gpus() == []


def test_rocm_torch_devices():
    """On a ROCm machine (skipped elsewhere): torch's HIP devices, named and sized as the SMI tools say."""
    torch = pytest.importorskip("torch")
    if torch.version.hip is None or not torch.cuda.is_available():
        pytest.skip("no ROCm build of torch with an AMD GPU here")
    rows = amd_gpus.torch_hip_gpus()
    assert len(rows) == torch.cuda.device_count() and all(gib > 1 for _, gib in rows)
    assert guess_gpu_id(load_catalog(), *rows[0]) is not None, rows[0]
