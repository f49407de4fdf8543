"""Runs from HPC machines: a row's gpu_type and machine text -> the catalog part and node
(planner/run_hardware.py), accelerators the planner has no model of refused with the allowed list, and
plans on 4- and 6-GPU nodes (tp divides the node and stays inside it)."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from hardware.catalog import load_catalog
from planner import api, search
from planner.errors import PlanError
from planner.resolve import resolve_model, resolve_system, seq_len_of
from planner.run_hardware import UnknownGpu, resolve
from planner.runs import load_runs
from planner.scenario import Scenario

CAT = load_catalog()
IDS = set(CAT.gpus)
DATA = Path(__file__).resolve().parents[2] / "validation" / "data"


@pytest.mark.parametrize("text,machine,gpu,cluster", [
    ("GH200", "", "gh200-96gb", "jupiter-booster"),
    ("NVIDIA GH200 480GB", "", "gh200-96gb", "jupiter-booster"),
    ("GH200 144GB HBM3e", "", "gh200-144gb", "jupiter-booster"),
    ("NVIDIA GH200 624GB", "", "gh200-144gb", "jupiter-booster"),
    ("GH200", "CSCS Alps (Clariden)", "gh200-96gb", "alps"),
    ("NVIDIA GH200 480GB", "4x Slingshot-11 per node, Alps", "gh200-96gb", "alps"),
    ("GH200", "JUPITER Booster", "gh200-96gb", "jupiter-booster"),
    ("A100 64GB", "", "a100-64gb", "leonardo-booster"),
    ("A100", "CINECA Leonardo Booster", "a100-64gb", "leonardo-booster"),
    ("A100", "NERSC Perlmutter", "a100-40gb", "perlmutter"),
    ("A100-80GB", "Perlmutter (large-memory nodes)", "a100-80gb", "perlmutter"),
    ("A100-SXM4-40GB", "ALCF Polaris", "a100-40gb", "polaris"),
    ("A100", "JUWELS Booster, 4x HDR200", "a100-40gb", "juwels-booster"),
    ("V100", "OLCF Summit", "v100-16gb", "summit"),
    ("V100-16GB", "Summit", "v100-16gb", "summit"),
    ("H100 NVL", "", "h100-nvl", "dgx-h100"),
    ("NVIDIA H100 NVL 94GB", "", "h100-nvl", "dgx-h100"),
    ("H100 SXM NVLink", "", "h100-80gb", "dgx-h100"),  # NVLink is not NVL
    ("L40S", "", "l40s", "dgx-a100"),
    ("MI300A", "", "mi300a", "el-capitan"),
    ("AMD Instinct MI300A", "LLNL El Capitan", "mi300a", "el-capitan"),
    ("H100", "NVIDIA Eos", "h100-80gb", "eos"),
    ("H100-80GB", "trained on Eos", "h100-80gb", "eos"),
    ("H100-80GB", "EOS token appended to every document", "h100-80gb", "dgx-h100"),  # not the machine
    ("A100-80GB", "Selene: 8x200Gbps HDR IB per node", "a100-80gb", "selene"),
    ("V100-32GB", "OCP Summit 2022 talk", "v100-32gb", "dgx-v100"),  # a year after it: not the machine
])
def test_every_spelling_names_its_part_and_node(text, machine, gpu, cluster):
    hw = resolve(text, machine, IDS)
    assert (hw.gpu_id, hw.cluster_id) == (gpu, cluster)


def test_superchip_memory_is_host_memory_and_unstated_memory_is_said():
    assert "host memory" in resolve("NVIDIA GH200 480GB", "", IDS).notes[0]
    assert "memory not stated" in resolve("GH200", "", IDS).notes[0]
    assert "the machine the row names" in resolve("A100", "Perlmutter", IDS).notes[0]
    assert "stand in" in resolve("L40S", "", IDS).notes[-1]


@pytest.mark.parametrize("text", ["Gaudi2", "Intel Gaudi 3", "Intel Data Center GPU Max 1550", "Intel PVC",
                                  "TPU v5p", "Google TPU v4", "Cerebras CS-2", "Gaudi2 (vs H100)", "Trainium2"])
def test_accelerators_without_a_model_are_refused_not_mistaken(text, tmp_path):
    with pytest.raises(UnknownGpu):
        resolve(text, "", IDS)
    f = tmp_path / "runs.csv"
    f.write_text(f"id,n_gpus,gpu_type,n_params_B\nx,8,{text},7\n")
    missed: list = []
    assert load_runs(f, not_predicted=missed) == [] and len(missed) == 1
    line = f"not predicted: {missed[0].id}: {missed[0].field}: {missed[0].reason}"
    assert line.startswith("not predicted: x: gpu_type: ") and text in line and "(allowed: " in line
    assert "GH200" in line and "MI300A" in line and "\n" not in line


def test_dev_rows_take_no_new_node_but_selene_whose_figures_are_dgx_a100s():
    seen = {}
    for name in ("published_dev.csv", "seed_runs.csv"):
        with open(DATA / name, newline="") as fh:
            for row in csv.DictReader(fh):
                machine = " ".join(row.get(k) or "" for k in ("internode_network", "notes", "source"))
                hw = resolve(row["gpu_type"], machine, IDS)
                seen[row["id"]] = hw.cluster_id
    assert {c for c in seen.values()} <= {"dgx-a100", "dgx-a100-40gb", "dgx-h100", "dgx-v100", "dgx2-v100", "selene",
                                          "grand-teton-h100-96gb", "jean-zay-a100", "jean-zay-v100-16gb",
                                          "jean-zay-v100-32gb", "adastra-mi250x"}
    assert sum(c == "selene" for c in seen.values()) == 10


@pytest.mark.parametrize("cluster", ["perlmutter", "alps"])
def test_70b_on_256_gpus_of_4_gpu_nodes_keeps_tp_in_the_node(cluster):
    r = api.estimate(Scenario(model="llama2-70b", gpus=256, cluster=cluster), top=5)
    assert r.system.gpus_per_node == 4 and r.system.internode_gbps == 800
    for e in r.results:
        assert e.fits and e.plan.tp in (1, 2, 4) and e.plan.tp * e.plan.pp * e.plan.dp * e.plan.cp == 256
        assert 0.3 < e.performance.mfu < 0.65, (cluster, e.performance.mfu)


def test_summit_six_gpu_nodes_search_tp_2_3_6_never_4_or_8():
    with pytest.raises(PlanError, match=r"multiple of gpus_per_node \(6\)"):
        api.estimate(Scenario(model="llama2-70b", gpus=256, cluster="summit"))
    s = Scenario(model="gpt3-175b", gpus=192, cluster="summit")  # 96 heads: 3 and 6 divide them
    spec, system = resolve_model(s), resolve_system(s)
    assert sorted(set(search.candidates(spec, system, s, seq_len_of(s, spec)).tp.tolist())) == [1, 2, 3, 6]
    r = api.estimate(Scenario(model="llama2-70b", gpus=192, cluster="summit"), top=5)  # 64 heads
    assert r.results and r.rejected["tp does not divide n_heads"] > 0
    for e in r.results:
        assert e.fits and e.plan.tp in (1, 2) and 192 % (e.plan.tp * e.plan.pp) == 0


def test_unified_memory_node_refuses_offload_with_the_reason():
    """El Capitan's MI300A: host RAM is the APUs' own HBM (catalog/clusters/el-capitan.toml unified_memory),
    so an offload plan frees nothing; the same plan on a discrete-GPU node is allowed by this rule."""
    from planner import rules
    from planner.resolve import resolve_model, resolve_system
    from planner.scenario import Scenario

    scenario = Scenario(model="7b", gpu="mi300a", gpus=16, cluster="el-capitan")
    spec, system = resolve_model(scenario), resolve_system(scenario)
    assert system.unified_memory
    knobs = {"tp": 1, "pp": 1, "cp": 1, "sharding": "zero3", "offload": "optimizer", "activation_offload": 0}
    broken = [rule.name for rule, _ in rules.violations(knobs, spec=spec, system=system)]
    assert "unified_memory_offload" in broken
    why = dict((r.name, text) for r, text in rules.violations(knobs, spec=spec, system=system))["unified_memory_offload"]
    assert "allowed: offload none" in why and "\n" not in why
    other = resolve_system(Scenario(model="7b", gpu="mi300x", gpus=16))
    assert not other.unified_memory
    assert "unified_memory_offload" not in [r.name for r, _ in rules.violations(knobs, spec=spec, system=other)]
    assert not [r.name for r, _ in rules.violations({**knobs, "offload": "none"}, spec=spec, system=system)
                if r.name == "unified_memory_offload"]
