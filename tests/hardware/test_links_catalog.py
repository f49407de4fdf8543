"""catalog/links: collective busbw sweeps by message size (hardware/links.py) and who names them."""

from __future__ import annotations

from pathlib import Path

import pytest

from hardware.catalog import ENV_VAR, load_catalog, read_table
from hardware.errors import CatalogError

BUILTIN = Path(__file__).resolve().parents[2] / "catalog" / "links"


@pytest.fixture(autouse=True)
def _no_env_catalog(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_VAR, raising=False)


def _write(folder: Path, kind: str, entry_id: str, text: str) -> Path:
    (folder / kind).mkdir(parents=True, exist_ok=True)
    path = folder / kind / f"{entry_id}.toml"
    path.write_text(text)
    return path


def _link_text(entry_id: str, **changes: str) -> str:
    """A built-in link file with some `key = value` lines replaced (or dropped with an empty value)."""
    lines = (BUILTIN / f"{entry_id}.toml").read_text().splitlines()
    out = []
    for line in lines:
        key = line.split("=")[0].strip()
        if key in changes:
            if changes[key]:
                out.append(f"{key} = {changes[key]}")
            continue
        out.append(line)
    return "\n".join(out) + "\n"


def test_builtin_sweeps_rise_to_their_plateau_with_a_source_per_point() -> None:
    cat = load_catalog()
    assert {"nvlink", "infiniband"} <= set(cat.links)
    for link in cat.links.values():
        shares = [p.fraction for p in link.busbw_efficiency]
        assert shares[-1] == pytest.approx(1.0, abs=1e-3)
        assert shares[0] < 0.05  # the smallest sizes are latency-bound
        assert all(p.source.strip() for p in link.busbw_efficiency)
    assert cat.links["nvlink"].scope == "intranode"
    assert cat.links["infiniband"].scope == "internode"
    assert cat.links["infiniband"].tree_internode_step_us > 0


def test_every_gpu_and_cluster_names_a_link_of_its_scope() -> None:
    cat = load_catalog()
    for gpu in cat.gpus.values():
        assert cat.links[gpu.intranode_link].scope == "intranode"
    for cluster in cat.clusters.values():
        assert cat.links[cluster.internode_link].scope == "internode"


@pytest.mark.parametrize(("changes", "field"), [
    ({"plateau_busbw_gbytes_per_s": "-1"}, "plateau_busbw_gbytes_per_s"),
    ({"ranks": "1"}, "ranks"),
    ({"tree_internode_step_us": ""}, "tree_internode_step_us"),
    ({"bogus": ""}, None),
])
def test_a_malformed_link_names_its_file_and_field(tmp_path: Path, changes: dict, field: str | None) -> None:
    text = _link_text("infiniband", **{k: v for k, v in changes.items() if k != "bogus"})
    if "bogus" in changes:
        text += "bogus = 1\n"
        field = "bogus"
    path = _write(tmp_path, "links", "infiniband", text)
    with pytest.raises(CatalogError) as e:
        load_catalog([tmp_path])
    assert e.value.path == str(path)
    assert e.value.field == field


def test_points_out_of_order_or_above_the_plateau_are_refused(tmp_path: Path) -> None:
    base = _link_text("nvlink")
    swapped = base.replace("message_bytes = 32768,", "message_bytes = 99999999999,", 1)
    _write(tmp_path, "links", "nvlink", swapped)
    with pytest.raises(CatalogError) as e:
        load_catalog([tmp_path])
    assert e.value.field == "busbw_efficiency" and "increase" in e.value.message
    over = base.replace("fraction = 1.0,", "fraction = 1.2,", 1)
    _write(tmp_path, "links", "nvlink", over)
    with pytest.raises(CatalogError) as e:
        load_catalog([tmp_path])
    assert e.value.field.startswith("busbw_efficiency.") and e.value.field.endswith(".fraction")
    # busbw tripling when the size doubles: the bigger call would take less time
    faster = base.replace("fraction = 0.01302,", "fraction = 0.02,", 1)
    assert faster != base
    _write(tmp_path, "links", "nvlink", faster)
    with pytest.raises(CatalogError) as e:
        load_catalog([tmp_path])
    assert e.value.field == "busbw_efficiency" and "less time" in e.value.message


def test_a_gpu_or_cluster_naming_a_missing_or_wrong_link(tmp_path: Path) -> None:
    gpu = read_table(Path(load_catalog().paths["gpus/h100-80gb"]))
    text = "".join(f"{k} = {v!r}\n".replace("'", '"') for k, v in gpu.items() if not isinstance(v, list))
    path = _write(tmp_path, "gpus", "h100-80gb", text + 'intranode_link = "nvlink4"\n')
    with pytest.raises(CatalogError) as e:
        load_catalog([tmp_path])
    assert (e.value.path, e.value.field) == (str(path), "intranode_link") and "nvlink" in e.value.message
    path.unlink()
    cluster = ('name = "c"\ngpu = "h100-80gb"\ngpus_per_node = 4\nhost_ram_gib = 1\nhost_to_gpu_gbps = 1\n'
               'internode_gbps = 1\nsource = "t"\ninternode_link = "nvlink"\n')
    path = _write(tmp_path, "clusters", "c", cluster)
    with pytest.raises(CatalogError) as e:
        load_catalog([tmp_path])
    assert (e.value.path, e.value.field) == (str(path), "internode_link") and "intranode" in e.value.message


def test_a_user_sweep_overrides_the_builtin_and_reaches_the_planner(tmp_path: Path) -> None:
    """A measured sweep of one's own network (same id) replaces the catalog's in every plan."""
    import numpy as np

    from planner import comm
    from planner.resolve import resolve_system
    from planner.scenario import Scenario
    from planner.settings import Settings

    flat = _link_text("infiniband")
    lines = [ln for ln in flat.splitlines() if "message_bytes" not in ln]
    at = lines.index("busbw_efficiency = [")
    lines[at + 1:at + 1] = ['  { message_bytes = 1, fraction = 0.999, source = "t" },',
                            '  { message_bytes = 1e12, fraction = 1.0, source = "t" },']
    _write(tmp_path, "links", "infiniband", "\n".join(lines) + "\n")
    cat = load_catalog([tmp_path])
    system = resolve_system(Scenario(cluster="dgx-h100", gpus=64), cat)
    links = comm.Links.of(system, Settings())
    g = comm.Group.of(links, np.array(64), np.array(8))
    wire = 63 / 64 * 2**24 * float(g.inv_bw)
    assert float(g.allgather_s(2**24)) == pytest.approx(wire / 0.999, rel=1e-3)


def test_the_nvls_link_and_who_names_it() -> None:
    """NVLS (NVLink SHARP) on NVSwitch-3 GPUs only; its plateau table rises with the group (NVIDIA/nccl#1455)."""
    cat = load_catalog()
    nvls = cat.links["nvls"]
    assert nvls.algorithm == "nvls" and nvls.scope == "intranode"
    shares = [p.share for p in nvls.nvls_busbw_share]
    assert shares == sorted(shares) and shares[-1] > 1.0  # 8 GPUs: 480 of 450 GB/s
    assert all(p.source.strip() for p in nvls.nvls_busbw_share)
    assert {g for g, v in cat.gpus.items() if v.nvls_link} >= {"h100-80gb", "h200-141gb"}
    for gid in ("a100-80gb", "v100-32gb", "h100-nvl", "h100-pcie-80gb", "mi300x"):
        assert cat.gpus[gid].nvls_link is None
    assert cat.links["nvlink"].algorithm == "ring" and not cat.links["nvlink"].nvls_busbw_share


@pytest.mark.parametrize(("old", "new", "field"), [
    ("share = 0.9333,", "share = 3.0,", "nvls_busbw_share.0.share"),
    ("{ ranks = 6,", "{ ranks = 4,", "nvls_busbw_share"),
    ('algorithm = "nvls"', 'algorithm = "ring"', "nvls_busbw_share"),
    ('algorithm = "nvls"', 'algorithm = "sharp"', "algorithm"),
])
def test_a_malformed_nvls_link_names_its_file_and_field(tmp_path: Path, old: str, new: str, field: str) -> None:
    text = (BUILTIN / "nvls.toml").read_text()
    assert old in text
    path = _write(tmp_path, "links", "nvls", text.replace(old, new, 1))
    with pytest.raises(CatalogError) as e:
        load_catalog([tmp_path])
    assert (e.value.path, e.value.field) == (str(path), field)


def test_a_gpu_naming_a_ring_link_as_its_nvls_link(tmp_path: Path) -> None:
    gpu = read_table(Path(load_catalog().paths["gpus/h100-80gb"]))
    text = "".join(f"{k} = {v!r}\n".replace("'", '"') for k, v in gpu.items()
                   if not isinstance(v, list) and k != "nvls_link")
    path = _write(tmp_path, "gpus", "h100-80gb", text + 'nvls_link = "nvlink"\n')
    with pytest.raises(CatalogError) as e:
        load_catalog([tmp_path])
    assert (e.value.path, e.value.field) == (str(path), "nvls_link") and "not an nvls one" in e.value.message
    path.write_text(text + 'nvls_link = "nvls5"\n')
    with pytest.raises(CatalogError) as e:
        load_catalog([tmp_path])
    assert (e.value.path, e.value.field) == (str(path), "nvls_link")
