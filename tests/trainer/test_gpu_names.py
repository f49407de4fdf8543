"""The catalog GPU a run's device is, from the name the driver gives it (torch.cuda.get_device_name on CUDA and
ROCm, nvidia-smi / amd-smi for the tuner: the same device-property string), and the peak its MFU is against
(trainer/metrics.py catalog_peak_tflops, hardware/gpu_names.py). Pure functions: run without a GPU.

Where each name comes from (driver output in public logs):
- "NVIDIA A100-SXM4-80GB": nvidia-smi -a "Product Name" (NVIDIA/CUDALibrarySamples#104); drivers before 470
  printed "A100-SXM-80GB" (nvidia-smi table in keyu-tian/SparK#8, driver 450.191)
- "NVIDIA A100-SXM4-40GB": deviceQuery (bottlerocket-os/bottlerocket#3873); torch.cuda.get_device_name example
  in mosaicml/composer#2265 (callbacks/speed_monitor.py)
- "NVIDIA H100 80GB HBM3": torch device name (zzc0721/torch-performance-test-data#21; mosaicml/composer#2265)
- "NVIDIA H100 NVL": nvidia-smi (NVIDIA/gpu-admin-tools#4, wilicc/gpu-burn#141; 95830 MiB)
- "NVIDIA H200": nvidia-smi (NVIDIA/cuda-samples#311, 143771 MiB; "Product Name" in NVIDIA/mig-parted#120)
- "Tesla V100-SXM2-32GB": the CUDA device name in TensorFlow's device log (biocore/mmvec#79)
- "NVIDIA A800-SXM4-80GB": nvidia-smi (dexmal/dexbotic#41)
- "NVIDIA GH200 480GB": karpathy/autoresearch#168; "NVIDIA GH200 144G HBM3e": NVIDIA/mig-parted#139
- AMD on ROCm: torch reads libdrm's amdgpu.ids marketing names: "7408 AMD Instinct MI250X",
  "740C AMD Instinct MI250X / MI250", "74A0 AMD Instinct MI300A", "74A1 AMD Instinct MI300X" (mesa/libdrm
  data/amdgpu.ids, as quoted in dstackai/gpuhunt's KNOWN_AMD_GPUS and sgl-project/sglang#30984, where
  torch.cuda.get_device_name(0) gives 'AMD Instinct MI355X', and 'AMD Radeon Graphics' when amdgpu.ids is
  missing from the image)
Other parts: the catalog's own `name`, written as its driver names it.
"""

import pytest

from hardware.catalog import load_catalog
from hardware.gpu_names import match_gpu_id
from trainer import metrics
from trainer.probe import to_toml

CAT = load_catalog()

# (driver's name, memory the driver reports in GiB, catalog id)
DRIVER_NAMES = [
    ("NVIDIA A100-SXM4-80GB", 79.2, "a100-80gb"),
    ("A100-SXM-80GB", 79.3, "a100-80gb"),
    ("NVIDIA A100-SXM4-40GB", 39.4, "a100-40gb"),
    ("NVIDIA A100-PCIE-40GB", 39.4, "a100-pcie-40gb"),
    ("NVIDIA A100 80GB PCIe", 79.2, "a100-pcie-80gb"),
    ("NVIDIA A100-SXM-64GB", 63.4, "a100-64gb"),
    ("NVIDIA A800-SXM4-80GB", 80.0, "a800-80gb"),
    ("NVIDIA H100 80GB HBM3", 79.1, "h100-80gb"),
    ("NVIDIA H100 PCIe", 79.2, "h100-pcie-80gb"),
    ("NVIDIA H100 NVL", 95830 / 1024, "h100-nvl"),
    ("NVIDIA H100", 94.5, "h100-96gb"),
    ("NVIDIA H800 80GB HBM3", 79.1, "h800"),
    ("NVIDIA H200", 143771 / 1024, "h200-141gb"),
    ("NVIDIA GH200 480GB", 95.0, "gh200-96gb"),
    ("NVIDIA GH200 144G HBM3e", 143.0, "gh200-144gb"),
    ("NVIDIA L40S", 44.4, "l40s"),
    ("NVIDIA B200", 178.4, "b200"),
    ("NVIDIA B300 SXM6 AC", 268.6, "b300"),
    ("NVIDIA GB200", 184.0, "gb200"),
    ("NVIDIA GB300", 268.6, "gb300"),
    ("Tesla V100-SXM2-32GB", 31.7, "v100-32gb"),
    ("Tesla V100-SXM2-16GB", 15.8, "v100-16gb"),
    ("Tesla V100-PCIE-32GB", 31.7, "v100-pcie-32gb"),
    ("Tesla V100-PCIE-16GB", 15.8, "v100-pcie-16gb"),
    ("AMD Instinct MI250X", 64.0, "mi250x"),
    ("AMD Instinct MI250X / MI250", 64.0, "mi250x"),
    ("AMD Instinct MI300A", 128.0, "mi300a"),
    ("AMD Instinct MI300X", 192.0, "mi300x"),
    ("AMD Instinct MI325X", 256.0, "mi325x"),
    ("AMD Instinct MI350X", 288.0, "mi350x"),
    ("AMD Instinct MI355X", 288.0, "mi355x"),
]

# names of parts the catalog does not have: no catalog part's peak may be given for them
NOT_IN_CATALOG = [
    ("NVIDIA H200 NVL", 140.4),  # 600 W PCIe card: not the 700 W SXM H200's peak
    ("NVIDIA H800 PCIe", 79.2),
    ("NVIDIA H20", 95.0),
    ("Quadro RTX 6000", 23.6),
    ("NVIDIA GeForce RTX 4090", 23.6),
    ("AMD Radeon Graphics", 192.0),  # ROCm image without amdgpu.ids (sglang#30984)
    ("AMD Instinct MI308X", 192.0),
    ("NVIDIA Graphics Device", 80.0),  # a driver older than the card (pytorch/pytorch#75198)
]


@pytest.fixture
def user_catalog(tmp_path, monkeypatch):
    """A user catalog whose `local` GPU is a CPU probe (what `plan probe` writes on a machine without a GPU)."""
    gpus = tmp_path / "gpus"
    gpus.mkdir()
    (gpus / "local.toml").write_text(to_toml({
        "name": "local: AMD EPYC, 1 threads = one of 2 ranks", "vendor": "local", "hbm_gib": 8.0,
        "hbm_gbytes_per_s": 10.0, "fp32_tflops": 0.2, "fp16_tflops": 0.002, "bf16_tflops": 0.2,
        "intranode_gbps": 10.0, "source": "test"}))
    monkeypatch.setattr(metrics, "USER_CATALOG", tmp_path)
    return gpus


def test_every_catalog_gpu_has_a_driver_name_here():
    assert {gid for _, _, gid in DRIVER_NAMES} == set(CAT.gpus)


@pytest.mark.parametrize("name,gib,gid", DRIVER_NAMES)
def test_driver_name_is_its_catalog_part(name, gib, gid):
    assert match_gpu_id(CAT, name, gib) == gid


@pytest.mark.parametrize("name,gib,gid", DRIVER_NAMES)
def test_trainer_peak_is_the_catalog_part_s(user_catalog, name, gib, gid):
    """A user `local` entry (a CPU probe) is there too: a known GPU still gets its datasheet peak."""
    for precision in ("fp16", "bf16", "bf16_pure", "fp32"):
        gpu = CAT.gpus[gid]
        if precision.startswith("bf16") and gpu.bf16_tflops is None:
            assert metrics.catalog_peak_tflops(name, precision, gib) is None  # V100: no bf16 (was a ValueError)
            continue
        assert metrics.catalog_peak_tflops(name, precision, gib) == (gpu.peak_tflops(precision), f"catalog:{gid}")


def test_h200_is_not_a_gh200():
    """'h200' is inside 'gh200': the trainer's old substring matcher gave the H200 the GH200 entry."""
    assert metrics.catalog_peak_tflops("NVIDIA H200", "bf16", 140.4)[1] == "catalog:h200-141gb"


@pytest.mark.parametrize("name,gib", NOT_IN_CATALOG)
def test_unknown_gpu_gets_no_catalog_peak(user_catalog, name, gib):
    """Neither a catalog part's peak nor the CPU probe's `local` one (0.2 TFLOPS for an H200 NVL, before)."""
    assert match_gpu_id(CAT, name, gib) is None
    assert metrics.catalog_peak_tflops(name, "bf16", gib) is None
    note = metrics.unknown_gpu_note(name)
    assert repr(name) in note and "no catalog GPU" in note and "plan probe" in note


def test_local_entry_probed_on_this_gpu_is_used(user_catalog):
    (user_catalog / "local.toml").write_text(to_toml({
        "name": "local: NVIDIA H200 NVL", "vendor": "local", "hbm_gib": 140.4, "hbm_gbytes_per_s": 4000.0,
        "fp32_tflops": 50.0, "fp16_tflops": 700.0, "bf16_tflops": 710.0, "intranode_gbps": 900.0, "source": "t"}))
    peak, source = metrics.catalog_peak_tflops("NVIDIA H200 NVL", "bf16", 140.4)
    assert peak == 710.0 and source.startswith("catalog:local")
    assert metrics.catalog_peak_tflops("Quadro RTX 6000", "bf16", 23.6) is None  # probed on another device


def test_cpu_keeps_the_local_entry(user_catalog):
    """The CPU path as before: a CPU run's peak is the probe's `local` entry."""
    peak, source = metrics.catalog_peak_tflops("cpu", "fp32")
    assert peak == 0.2 and source.startswith("catalog:local")


# ROCm device properties where the driver gives no name (an image without libdrm's amdgpu.ids: torch's name is empty,
# or "AMD Radeon Graphics"): gcnArchName and multi_processor_count (CUs) per device, ROCm docs 'AMD GPU
# specifications' (rocm.docs.amd.com/en/latest/reference/gpu-specs.html); memory as ROCm reports it.
ROCM_DEVICES = [
    ("gfx90a:sramecc+:xnack-", 110, 64.0, "mi250x"),  # one MI250X GCD
    ("gfx942:sramecc+:xnack-", 304, 191.98, "mi300x"),  # amd-smi's 196592 MiB
    ("gfx942", 304, 255.98, "mi325x"),  # the MI300X's target and CUs; the memory tells them apart
    ("gfx942:sramecc+:xnack-", 228, 110.0, "mi300a"),  # unified memory: what HIP reports varies; the CUs decide
    ("gfx90a:sramecc+:xnack-", 104, 64.0, None),  # MI210 / an MI250 GCD: gfx90a, 104 CUs, not the MI250X's peak
    ("gfx942:sramecc+:xnack-", 38, 23.99, None),  # an MI300X compute partition (CPX): 38 CUs per device
    ("gfx950", 256, 287.98, None),  # MI350X or MI355X: the same target, CUs and memory, other clocks
    ("gfx1100", 48, 24.0, None),  # a Radeon RX 7900 XTX
]


@pytest.mark.parametrize("arch,cus,gib,gid", ROCM_DEVICES)
def test_rocm_device_without_a_name_is_its_catalog_part_by_arch(arch, cus, gib, gid):
    from hardware.gpu_names import match_rocm_arch

    assert match_rocm_arch(CAT, arch, cus, gib) == gid


@pytest.mark.parametrize("arch,cus,gib,gid", [d for d in ROCM_DEVICES if d[3]])
def test_trainer_peak_of_an_unnamed_rocm_device(user_catalog, arch, cus, gib, gid):
    """Its MFU was against a measured matmul (unknown name) or, with a CPU probe's `local` entry, against that CPU's
    0.2 TFLOPS (an empty name is inside every name)."""
    for name in ("", "AMD Radeon Graphics"):
        assert metrics.catalog_peak_tflops(name, "bf16", gib, arch, cus) == (CAT.gpus[gid].bf16_tflops, f"catalog:{gid}")


def test_an_unnamed_gpu_never_takes_a_cpu_probes_peak(user_catalog):
    assert metrics.catalog_peak_tflops("", "bf16", 64.0) is None
    assert metrics.catalog_peak_tflops("", "bf16", 64.0, "gfx90a:sramecc+:xnack-", 104) is None


def test_every_amd_part_has_its_rocm_target_and_cus():
    amd = [g for g in CAT.gpus.values() if g.vendor == "amd"]
    assert amd and all(g.gcn_arch and g.compute_units for g in amd)
    same = {g.id for g in amd if match_rocm_arch_of(g) is None}
    assert same == {"mi350x", "mi355x"}  # alike but for the clock


def match_rocm_arch_of(gpu):
    from hardware.gpu_names import match_rocm_arch

    found = match_rocm_arch(CAT, gpu.gcn_arch, gpu.compute_units, gpu.hbm_gib)
    assert found in (gpu.id, None)
    return found


@pytest.mark.parametrize("name,arch,cus,label", [
    ("AMD Instinct MI300X", "gfx942:sramecc+:xnack-", 304, "AMD Instinct MI300X"),
    ("", "gfx942:sramecc+:xnack-", 304, "AMD gfx942 (304 CUs)"),
    ("  ", None, None, "unnamed GPU"),
])
def test_gpu_label(name, arch, cus, label):
    assert metrics.gpu_label(name, arch, cus) == label
