"""`plan catalog list|show` through typer's CliRunner, and once as a real subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hardware.catalog import ENV_VAR
from plan_cli.main import app

runner = CliRunner()

GPU = """name = "My GPU"\nvendor = "x"\nhbm_gib = 48\nhbm_gbytes_per_s = 1000\nfp32_tflops = 10
fp16_tflops = 100\nintranode_gbps = 100\nsource = "test"\n"""


@pytest.fixture(autouse=True)
def _no_env_catalog(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_VAR, raising=False)


def user_catalog(tmp_path: Path, text: str = GPU, entry_id: str = "my-gpu") -> Path:
    (tmp_path / "gpus").mkdir()
    (tmp_path / "gpus" / f"{entry_id}.toml").write_text(text)
    return tmp_path


def test_list_json_has_all_kinds() -> None:
    result = runner.invoke(app, ["catalog", "list", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert set(data) == {"gpus", "clusters", "models", "stacks"}
    gpus = {g["id"]: g for g in data["gpus"]}
    assert gpus["mi250x"]["devices_per_package"] == 2
    models = {m["id"]: m for m in data["models"]}
    assert models["llama2-7b"]["n_params"] == 6_738_415_616


def test_list_table_one_kind() -> None:
    result = runner.invoke(app, ["catalog", "list", "--kind", "clusters"])
    assert result.exit_code == 0, result.output
    assert "jean-zay-v100-32gb" in result.stdout and "h100-80gb" in result.stdout
    assert "GPUs" not in result.stdout.split("Clusters")[0]


def test_new_entries_listed_with_nvlink_domain_and_fp8() -> None:
    result = runner.invoke(app, ["catalog", "list", "--json"])
    data = json.loads(result.stdout)
    gpus = {g["id"]: g for g in data["gpus"]}
    assert gpus["a100-pcie-40gb"]["fp8_tflops"] is None and gpus["b200"]["fp8_tflops"] == 4500
    clusters = {c["id"]: c for c in data["clusters"]}
    assert clusters["gb200-nvl72"]["nvlink_domain_gpus"] == 72 and clusters["dgx-h100"]["nvlink_domain_gpus"] is None
    result = runner.invoke(app, ["catalog", "list", "--kind", "clusters"], env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    row = next(line for line in result.stdout.splitlines() if "gb200-nvl72" in line)
    assert "NVLink domain" in result.stdout and " 72 " in row
    result = runner.invoke(app, ["catalog", "show", "gb200-nvl72"])
    assert result.exit_code == 0 and "nvlink_domain_gpus" in result.stdout


def test_catalog_option_and_env_var(tmp_path: Path) -> None:
    folder = user_catalog(tmp_path)
    result = runner.invoke(app, ["catalog", "list", "--kind", "gpus", "--json", "--catalog", str(folder)])
    assert result.exit_code == 0, result.output
    assert "my-gpu" in {g["id"] for g in json.loads(result.stdout)["gpus"]}
    result = runner.invoke(app, ["catalog", "show", "my-gpu", "--json"], env={ENV_VAR: str(folder)})
    assert result.exit_code == 0, result.output
    shown = json.loads(result.stdout)
    assert shown["kind"] == "gpu" and shown["entry"]["hbm_gib"] == 48
    assert shown["path"].endswith("my-gpu.toml")


def test_show_table_and_model_and_size() -> None:
    result = runner.invoke(app, ["catalog", "show", "lumi-g"])
    assert result.exit_code == 0 and "mi250x" in result.stdout and "lumi-g.toml" in result.stdout
    result = runner.invoke(app, ["catalog", "show", "gpt2", "--json"])
    assert json.loads(result.stdout)["entry"]["n_params"] == 124_439_808
    result = runner.invoke(app, ["catalog", "show", "7b", "--json"])
    assert abs(json.loads(result.stdout)["entry"]["n_params"] / 7e9 - 1) < 0.05


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["catalog", "list", "--kind", "gpu"], "kind: unknown value 'gpu'"),
        (["catalog", "show", "h100"], "did you mean"),
        (["catalog", "list", "--catalog", "/nonexistent/dir"], "not a directory"),
    ],
)
def test_bad_input_is_one_line_exit_2(args: list[str], words: str) -> None:
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert words in result.output and "Traceback" not in result.output


def test_malformed_user_file_exit_2_names_file_and_field(tmp_path: Path) -> None:
    folder = user_catalog(tmp_path, GPU.replace("fp16_tflops = 100\n", ""), "broken")
    result = runner.invoke(app, ["catalog", "list", "--catalog", str(folder)])
    assert result.exit_code == 2
    assert "broken.toml" in result.output and "fp16_tflops" in result.output


def test_real_subprocess_list_json() -> None:
    plan = Path(sys.executable).parent / "plan"
    out = subprocess.run([str(plan), "catalog", "list", "--json"], capture_output=True, text=True, check=True)
    data = json.loads(out.stdout)
    assert {"h100-80gb", "mi300x"} <= {g["id"] for g in data["gpus"]}
    assert "dgx-h200" in {c["id"] for c in data["clusters"]}


def test_show_a_mixture_of_experts_gives_its_active_parameters():
    """gpt-oss-120b: 116.83B total (the model card's Table 1); active 5.13B on the card without the input embedding,
    + 201088 x 2880 with it (planner/moe.py counts both embeddings); a dense preset has no active_params key."""
    result = runner.invoke(app, ["catalog", "show", "gpt-oss-120b", "--json"])
    assert result.exit_code == 0, result.output
    entry = json.loads(result.output)["entry"]
    assert round(entry["n_params"] / 1e7) == 11683 and round((entry["active_params"] - 201088 * 2880) / 1e7) == 513
    dense = json.loads(runner.invoke(app, ["catalog", "show", "llama3-8b", "--json"]).output)["entry"]
    assert "active_params" not in dense
