"""A run's free-text gpu_type and machine description -> catalog GPU and cluster (planner/run_hardware.py)."""

import pytest

from hardware.catalog import load_catalog
from planner.errors import PlanError
from planner.run_hardware import UnknownGpu, resolve
from planner.runs import load_runs

IDS = set(load_catalog().gpus)


@pytest.mark.parametrize("text,machine,gpu,cluster", [
    ("A100-80GB", "", "a100-80gb", "dgx-a100"),
    ("NVIDIA A100-SXM4-40GB", "", "a100-40gb", "dgx-a100-40gb"),
    ("A100 80 GB PCIe", "", "a100-pcie-80gb", "dgx-a100"),
    ("A100", "Selene: 8x200Gbps HDR IB per node", "a100-80gb", "selene"),  # dgx-a100 figures: see test_machines
    ("A100-80GB", "Omni-Path (Jean Zay)", "a100-80gb", "jean-zay-a100"),
    ("A100", "Omni-Path (Jean Zay)", "a100-80gb", "jean-zay-a100"),
    ("V100-32GB", "", "v100-32gb", "dgx-v100"),
    ("V100-32GB", "Omni-Path (Jean Zay)", "v100-32gb", "jean-zay-v100-32gb"),
    ("V100-16GB", "Jean Zay", "v100-16gb", "jean-zay-v100-16gb"),
    ("V100-32GB (DGX-2)", "", "v100-32gb", "dgx2-v100"),
    ("Tesla V100", "", "v100-32gb", "dgx-v100"),
    ("H100-80GB (DGX-H100)", "", "h100-80gb", "dgx-h100"),
    ("H100 SXM5", "", "h100-80gb", "dgx-h100"),
    ("H100-96GB-HBM2e (500W)", "", "h100-96gb", "grand-teton-h100-96gb"),
    ("H800", "", "h800", "hgx-h800"),
    ("H800 SXM5", "", "h800", "hgx-h800"),
    ("A800-80GB", "", "a800-80gb", "hgx-a800"),
    ("NVIDIA A800-SXM4-80GB", "", "a800-80gb", "hgx-a800"),
    ("H200", "", "h200-141gb", "dgx-h200"),
    ("B200", "", "b200", "dgx-b200"),
    ("AMD Instinct MI250X", "", "mi250x", "adastra-mi250x"),
    ("MI250X", "LUMI", "mi250x", "lumi-g"),
    ("MI250X", "OLCF Frontier", "mi250x", "frontier"),
    ("MI300X", "", "mi300x", "mi300x-8"),
    # the newest parts as NeMo/Megatron-Bridge and MLPerf tables write them
    ("B300", "", "b300", "dgx-b300"),
    ("HGX B300", "", "b300", "dgx-b300"),
    ("DGX B300", "", "b300", "dgx-b300"),
    ("NVIDIA B300 SXM6 AC", "", "b300", "dgx-b300"),
    ("GB300", "", "gb300", "gb300-nvl72"),
    ("GB300 NVL72", "", "gb300", "gb300-nvl72"),
    ("NVIDIA GB300", "GB300 NVL72 rack", "gb300", "gb300-nvl72"),
    ("B300", "GB300 NVL72", "b300", "gb300-nvl72"),  # the machine the text names (as B200 in an NVL72)
    ("GB200", "", "gb200", "gb200-nvl72"),  # and the Blackwell generation before is still itself
    ("B200", "DGX B200", "b200", "dgx-b200"),
    ("MI355X", "", "mi355x", "mi355x-8"),
    ("MI355X 288GB", "", "mi355x", "mi355x-8"),
    ("AMD Instinct MI355X 288GB HBM3e", "", "mi355x", "mi355x-8"),
    ("MI350X", "", "mi350x", "mi350x-8"),
    ("AMD Instinct MI350X 288GB HBM3e", "", "mi350x", "mi350x-8"),
])
def test_gpu_and_cluster_from_free_text(text, machine, gpu, cluster):
    hw = resolve(text, machine, IDS)
    assert (hw.gpu_id, hw.cluster_id) == (gpu, cluster)


def test_a_bare_a100_is_not_taken_for_the_slow_omnipath_cluster():
    """Only a row that names Jean Zay / Omni-Path gets Jean Zay's network (it ran at 0.3 of the
    link): a 2240-GPU Selene run written "A100" is a DGX A100 with InfiniBand."""
    assert resolve("A100", "", IDS).cluster_id == "dgx-a100"
    assert "memory not stated" in resolve("A100", "", IDS).notes[0]


def test_export_variants_keep_the_gpu_but_not_its_nvlink():
    """A800 / H800 SXM: their own catalog entries (NVLink 1600 Gbps per direction in the entry); the
    variants without one (PCIe cards, A800 40 GB) read as the base part with the NVLink cut."""
    cat = load_catalog()
    hw = resolve("8x A800-SXM4-80GB", "", IDS)
    assert (hw.gpu_id, hw.intranode_gbps) == ("a800-80gb", None)
    assert cat.gpu("a800-80gb").intranode_gbps == cat.gpu("h800").intranode_gbps == 1600.0
    pcie = resolve("H800 PCIe", "", IDS)
    assert pcie.gpu_id == "h100-pcie-80gb" and pcie.intranode_gbps == 1600.0 and "H800" in pcie.notes[0]
    forty = resolve("A800 40GB", "", IDS)
    assert forty.gpu_id == "a100-40gb" and forty.intranode_gbps == 1600.0
    assert resolve("A100-SXM4-80GB", "", IDS).intranode_gbps is None


def test_unknown_part_is_an_error_naming_it(tmp_path):
    with pytest.raises(UnknownGpu):
        resolve("TPU v4", "", IDS)
    f = tmp_path / "runs.csv"
    f.write_text("id,n_gpus,gpu_type,n_params_B\nx,8,TPU v4,7\n")
    with pytest.raises(PlanError) as e:
        load_runs(f)
    assert "gpu_type" in str(e.value) and "TPU v4" in str(e.value)


@pytest.mark.parametrize("text", ["V100-61GB", "A100 48GB", "H100-100GB", "NVIDIA A100-SXM4-20GB"])
def test_a_memory_size_the_part_never_had_is_refused(text):
    """A typo in the stated memory was read as the family's default part (V100-61GB as a 32 GB V100)."""
    with pytest.raises(UnknownGpu, match=r"no (V100|A100|H100) has \d+ GB"):
        resolve(text, "", IDS)


def test_a_link_speed_beside_the_part_is_not_its_memory():
    assert resolve("H100 (400G IB)", "", IDS).gpu_id == "h100-80gb"
    assert resolve("GH200 480GB", "", IDS).gpu_id == "gh200-96gb"  # the superchip's host memory counted


def test_rows_take_the_cluster_they_name(tmp_path):
    head = "id,n_gpus,gpu_type,internode_network,n_params_B,tp,pp,micro_batch\n"
    f = tmp_path / "runs.csv"
    f.write_text(head + "a,16,A100,Omni-Path (Jean Zay),7,1,1,1\nb,16,A100,,7,1,1,1\nc,16,A800-80GB,,7,1,1,1\n")
    a, b, c = load_runs(f)
    assert a.system.cluster_id == "jean-zay-a100" and a.system.internode_efficiency == pytest.approx(0.30)
    assert b.system.cluster_id == "dgx-a100" and b.system.internode_efficiency is None
    assert c.system.intranode_gbps == 1600.0 and b.system.intranode_gbps > 1600.0
