"""The hardware catalog: built-in entries, user overrides, malformed files, lookups."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from hardware.catalog import ENV_VAR, load_catalog
from hardware.errors import CatalogError

GPU_IDS = {
    "v100-16gb", "v100-32gb", "v100-pcie-16gb", "v100-pcie-32gb", "a100-40gb", "a100-80gb",
    "a100-pcie-40gb", "a100-pcie-80gb", "h100-80gb", "h100-pcie-80gb", "h100-96gb", "h200-141gb",
    "b200", "gb200", "mi250x", "mi300x", "mi325x", "gh200-96gb", "gh200-144gb", "a100-64gb", "h100-nvl", "l40s",
    "mi300a", "b300", "gb300", "mi355x", "mi350x", "a800-80gb", "h800",
}
CLUSTER_IDS = {
    "dgx-v100", "dgx2-v100", "dgx-a100", "dgx-a100-40gb", "dgx-h100", "dgx-h200", "hgx-h200",
    "dgx-b200", "gb200-nvl72", "grand-teton-h100-96gb", "jean-zay-v100-16gb", "jean-zay-v100-32gb",
    "jean-zay-a100", "adastra-mi250x", "lumi-g", "frontier", "mi300x-8", "mi325x-8", "perlmutter", "polaris",
    "juwels-booster", "leonardo-booster", "summit", "alps", "jupiter-booster", "eos", "selene", "el-capitan",
    "dgx-b300", "gb300-nvl72", "mi355x-8", "mi350x-8", "hgx-a800", "hgx-h800",
}
NO_FP8 = {"v100-16gb", "v100-32gb", "v100-pcie-16gb", "v100-pcie-32gb", "a100-40gb", "a100-80gb",
          "a100-pcie-40gb", "a100-pcie-80gb", "mi250x", "a100-64gb", "a800-80gb"}
CLUSTER = ('name = "c"\ngpu = "h100-80gb"\ngpus_per_node = 4\nhost_ram_gib = 1\nhost_to_gpu_gbps = 1\n'
           'internode_gbps = 1\nsource = "t"\n')

GOOD_GPU = """
name = "Test GPU"
vendor = "test"
hbm_gib = 94
hbm_gbytes_per_s = 3900
fp32_tflops = 60
fp16_tflops = 800
bf16_tflops = 800
intranode_gbps = 3600
source = "unit test"
"""


@pytest.fixture(autouse=True)
def _no_env_catalog(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_VAR, raising=False)


def write(folder: Path, kind: str, entry_id: str, text: str) -> Path:
    (folder / kind).mkdir(parents=True, exist_ok=True)
    path = folder / kind / f"{entry_id}.toml"
    path.write_text(text)
    return path


def test_every_required_id_is_there_with_a_source() -> None:
    cat = load_catalog()
    assert GPU_IDS <= set(cat.gpus)
    assert CLUSTER_IDS <= set(cat.clusters)
    for entry in [*cat.gpus.values(), *cat.clusters.values()]:
        assert len(entry.source) > 10, entry.id


def test_every_gpu_entry_is_complete_and_consistent() -> None:
    cat = load_catalog()
    assert set(cat.gpus) == GPU_IDS and set(cat.clusters) == CLUSTER_IDS  # a new file: add it here
    for g in cat.gpus.values():
        assert g.supports_fp8 == (g.id not in NO_FP8), g.id
        assert g.bf16_tflops is None or g.fp32_tflops < g.bf16_tflops == g.fp16_tflops, g.id
        if g.tf32_tflops:  # dense TF32 is half the dense 16-bit rate on every part here
            assert g.tf32_tflops == pytest.approx(g.fp16_tflops / 2, rel=0.03), g.id
        if g.fp8_tflops:  # L40S: its datasheet's dense 16-bit figure (362.05) is not half its FP8 (733)
            assert g.fp8_tflops == pytest.approx(2 * g.fp16_tflops, rel=0.015 if g.id == "l40s" else 1e-3), g.id
        curve = [(p.gemm_gflop, p.fraction) for p in g.matmul_efficiency]
        assert len(curve) >= 5 and curve == sorted(curve), g.id  # rising in size and in share
        assert all(b[1] >= a[1] for a, b in zip(curve, curve[1:])), g.id
        if g.supports_fp8:
            assert g.peak_tflops("fp8") == g.fp8_tflops
        else:
            with pytest.raises(ValueError, match="no fp8"):
                g.peak_tflops("fp8")


def test_new_parts_match_their_sources() -> None:
    cat = load_catalog()
    teton = cat.gpu("h100-96gb")  # torchtitan: 96GB HBM2e, 2.4 TB/s, SXM peaks used for MFU
    assert (teton.hbm_gib, teton.hbm_gbytes_per_s, teton.bf16_tflops) == (96, 2400, 989.4)
    assert cat.cluster("grand-teton-h100-96gb").internode_gbps == 8 * 400
    pcie = cat.gpu("h100-pcie-80gb")  # datasheet 1513 sparse -> 756.5 dense; PCIe gen5 between cards
    assert pcie.bf16_tflops == pytest.approx(1513 / 2) and pcie.intranode_gbps == 504
    assert cat.gpu("a100-pcie-40gb").bf16_tflops == cat.gpu("a100-40gb").bf16_tflops
    assert cat.gpu("v100-pcie-16gb").fp16_tflops == 112 and cat.gpu("v100-pcie-16gb").bf16_tflops is None
    assert cat.gpu("gb200").fp8_tflops * 72 * 2 == pytest.approx(720_000)  # NVL72: 720 PF sparse fp8
    assert cat.gpu("b200").bf16_tflops * 8 * 2 == pytest.approx(36_000)  # DGX B200: 72 PF fp8 = 2 x bf16
    assert cat.gpu("b200").intranode_gbps == cat.gpu("gb200").intranode_gbps == 7200  # 1.8 TB/s both ways
    mi325x, mi300x = cat.gpu("mi325x"), cat.gpu("mi300x")
    assert mi325x.bf16_tflops == mi300x.bf16_tflops and (mi325x.hbm_gib, mi325x.hbm_gbytes_per_s) == (256, 6000)


def test_nvlink_domain_defaults_to_one_node_and_spans_the_nvl72_rack() -> None:
    cat = load_catalog()
    for rid in ("gb200-nvl72", "gb300-nvl72"):
        rack = cat.cluster(rid)
        assert (rack.gpus_per_node, rack.nvlink_domain_gpus, rack.nvlink_domain) == (4, 72, 72)
    for cluster in cat.clusters.values():
        if cluster.id not in ("gb200-nvl72", "gb300-nvl72"):
            assert cluster.nvlink_domain_gpus is None and cluster.nvlink_domain == cluster.gpus_per_node
    assert cat.cluster("jean-zay-v100-16gb").gpus_per_node == 4 and cat.cluster("dgx2-v100").gpus_per_node == 16


@pytest.mark.parametrize(("value", "words"), [("70", "multiple of gpus_per_node (4)"), ("0", "greater than 0"),
                                              ('"rack"', "valid integer")])
def test_bad_nvlink_domain_names_file_and_field(tmp_path: Path, value: str, words: str) -> None:
    path = write(tmp_path, "clusters", "bad", CLUSTER + f"nvlink_domain_gpus = {value}\n")
    with pytest.raises(CatalogError) as e:
        load_catalog([tmp_path])
    assert e.value.field == "nvlink_domain_gpus" and str(path.resolve()) in str(e.value)
    assert words in str(e.value) and "Value error" not in str(e.value)
    write(tmp_path, "clusters", "bad", CLUSTER + "nvlink_domain_gpus = 8\n")
    assert load_catalog([tmp_path]).cluster("bad").nvlink_domain == 8


def test_datasheet_relations_hold() -> None:
    cat = load_catalog()
    v100 = cat.gpu("v100-32gb")
    assert v100.bf16_tflops is None and v100.fp8_tflops is None and v100.intranode_gbps == 1200
    h100 = cat.gpu("h100-80gb")
    assert h100.fp8_tflops == pytest.approx(2 * h100.bf16_tflops, rel=1e-3)  # dense, no sparsity
    assert h100.bf16_tflops == pytest.approx(989.4)
    assert cat.gpu("a100-80gb").bf16_tflops == 312 and cat.gpu("a100-80gb").intranode_gbps == 2400
    for cluster in cat.clusters.values():
        assert cluster.gpu in cat.gpus
    assert cat.cluster("jean-zay-v100-32gb").gpus_per_node == 4
    assert cat.cluster("jean-zay-a100").gpus_per_node == 8


def test_mi250x_is_one_gcd_of_a_two_die_package() -> None:
    cat = load_catalog()
    gcd = cat.gpu("mi250x")
    assert gcd.devices_per_package == 2 and gcd.package and "MI250X" in gcd.package
    # package data sheet: 128 GB HBM2e, 3.2768 TB/s, 383 TFLOPS fp16/bf16 -> half each
    assert gcd.hbm_gib * gcd.devices_per_package == 128
    assert gcd.hbm_gbytes_per_s * gcd.devices_per_package == pytest.approx(3276.8)
    assert gcd.bf16_tflops * gcd.devices_per_package == pytest.approx(383, abs=0.5)
    assert gcd.tf32_tflops is None and gcd.fp8_tflops is None
    for cid in ("lumi-g", "adastra-mi250x", "frontier"):
        assert cat.cluster(cid).gpus_per_node == 8  # 4 packages = 8 GCDs


def test_lookup_errors_suggest_close_names() -> None:
    cat = load_catalog()
    with pytest.raises(CatalogError) as e:
        cat.gpu("h100")
    assert e.value.field == "gpu" and "h100-80gb" in str(e.value)
    with pytest.raises(CatalogError, match="lumi-g"):
        cat.cluster("lumi")
    assert cat.gpu("H100-80GB").id == "h100-80gb"


def test_extra_dir_overrides_and_adds(tmp_path: Path) -> None:
    write(tmp_path, "gpus", "h100-80gb", GOOD_GPU)
    write(tmp_path, "clusters", "my-box", 'name = "box"\ngpu = "h100-80gb"\ngpus_per_node = 4\n'
          'host_ram_gib = 512\nhost_to_gpu_gbps = 504\ninternode_gbps = 400\nsource = "test"\n')
    cat = load_catalog([tmp_path])
    assert cat.gpu("h100-80gb").hbm_gib == 94
    assert cat.paths["gpus/h100-80gb"] == str(tmp_path.resolve() / "gpus" / "h100-80gb.toml")
    assert cat.cluster("my-box").gpu == "h100-80gb" and "dgx-h100" in cat.clusters
    assert load_catalog().gpu("h100-80gb").hbm_gib == 80  # the built-in one is untouched


def test_env_var_dirs_and_argument_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env_dir, arg_dir = tmp_path / "env", tmp_path / "arg"
    write(env_dir, "gpus", "a100-80gb", GOOD_GPU)
    monkeypatch.setenv(ENV_VAR, f"{env_dir}{__import__('os').pathsep}")
    assert load_catalog().gpu("a100-80gb").hbm_gib == 94
    write(arg_dir, "gpus", "a100-80gb", GOOD_GPU.replace("hbm_gib = 94", "hbm_gib = 96"))
    assert load_catalog([arg_dir]).gpu("a100-80gb").hbm_gib == 96  # --catalog wins over env


def test_edited_file_is_reloaded(tmp_path: Path) -> None:
    path = write(tmp_path, "gpus", "x1", GOOD_GPU)
    assert load_catalog([tmp_path]).gpu("x1").hbm_gib == 94
    path.write_text(GOOD_GPU.replace("hbm_gib = 94", "hbm_gib = 95"))
    import os

    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10**9))
    assert load_catalog([tmp_path]).gpu("x1").hbm_gib == 95


@pytest.mark.parametrize(
    ("text", "field", "words"),
    [
        ("name = [", "toml", "not valid TOML"),
        (GOOD_GPU.replace("hbm_gib = 94\n", ""), "hbm_gib", "missing"),
        (GOOD_GPU + "hbm_gb = 3\n", "hbm_gb", "unknown field"),
        (GOOD_GPU.replace("hbm_gib = 94", 'hbm_gib = "lots"'), "hbm_gib", "lots"),
        (GOOD_GPU.replace("hbm_gib = 94", "hbm_gib = -1"), "hbm_gib", "greater than 0"),
        (GOOD_GPU + 'id = "other"\n', "id", "file name"),
    ],
)
def test_malformed_gpu_file_names_file_and_field(tmp_path: Path, text: str, field: str, words: str) -> None:
    path = write(tmp_path, "gpus", "bad", text)
    with pytest.raises(CatalogError) as e:
        load_catalog([tmp_path])
    assert e.value.field == field
    assert str(path.resolve()) in str(e.value) and field in str(e.value) and words in str(e.value)
    assert "\n" not in str(e.value)


def test_cluster_naming_unknown_gpu(tmp_path: Path) -> None:
    path = write(tmp_path, "clusters", "c", CLUSTER.replace('"h100-80gb"', '"h100-80"'))
    with pytest.raises(CatalogError) as e:
        load_catalog([tmp_path])
    assert e.value.field == "gpu" and str(path.resolve()) in str(e.value) and "h100-80gb" in str(e.value)


def test_bad_catalog_dirs(tmp_path: Path) -> None:
    with pytest.raises(CatalogError, match="not a directory"):
        load_catalog([tmp_path / "missing"])
    with pytest.raises(CatalogError, match="none of the subfolders"):
        load_catalog([tmp_path])


def test_hardware_does_not_import_planner() -> None:
    code = (
        "import sys; from hardware.catalog import load_catalog; load_catalog(); "
        "bad = [m for m in sys.modules if m.split('.')[0] in ('planner', 'torch', 'tuner', 'trainer')]; "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parents[2])


def test_generic_data_parallel_overlaps_are_the_measured_concurrency_slowdown():
    # hardware/stacks.py: compute beside a concurrent collective runs 18.9% slower on average, 40% at most
    # (arXiv 2507.03114): one share, 1/1.189, for every bucketed or prefetched DP collective of `generic`
    from hardware.catalog import load_catalog

    g = load_catalog().stacks["generic"]
    shares = [g.overlap_ddp, g.overlap_zero1, g.overlap_zero12, g.overlap_param_gather, g.overlap_fsdp]
    assert all(abs(v - 1 / 1.189) < 0.005 for v in shares), shares
    assert all(1 / 1.40 <= v <= 1.0 for v in shares)


def test_a_bad_catalog_dir_says_where_it_was_named(tmp_path: Path, monkeypatch) -> None:
    """A folder named by $PLAN_CATALOG that does not exist read '/x: catalog: not a directory' under a command
    that named no folder at all: the line says which of $PLAN_CATALOG and --catalog named it."""
    monkeypatch.setenv("PLAN_CATALOG", str(tmp_path / "gone"))
    with pytest.raises(CatalogError, match=r"not a directory \(named by \$PLAN_CATALOG\)"):
        load_catalog()
    monkeypatch.delenv("PLAN_CATALOG")
    with pytest.raises(CatalogError, match=r"none of the subfolders .* \(named by --catalog\)"):
        load_catalog([tmp_path])
