"""`plan estimate` through typer's CliRunner and as a real subprocess."""

import csv
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from plan_cli.main import app

runner = CliRunner()
PLAN = [sys.executable, "-m", "plan_cli.main"]


def run(*args):
    return runner.invoke(app, ["estimate", *args])


def test_table_default():
    r = run("--model", "7b", "--gpus", "48", "--top", "3")
    assert r.exit_code == 0, r.output
    assert "fitting" in r.output and "Rejected" in r.output and "zero" in r.output


def test_json_and_csv():
    r = run("--model", "7b", "--gpus", "16", "--top", "2", "--json")
    data = json.loads(r.output)
    assert len(data["results"]) == 2 and data["system"]["gpus"] == 16
    assert data["results"][0]["memory"]["total_bytes"] <= data["results"][0]["memory"]["capacity_bytes"]
    r = run("--model", "7b", "--gpus", "16", "--top", "2", "--csv")
    rows = list(csv.DictReader(io.StringIO(r.output)))
    assert len(rows) == 2 and "mem_gpu_gib" in rows[0] and rows[0]["fits"] == "True"


def test_explain():
    r = run("--model", "7b", "--gpus", "8", "--explain")
    assert r.exit_code == 0, r.output
    for word in ("weights", "optimizer", "activations", "fragmentation", "capacity", "host RAM"):
        assert word in r.output


@pytest.mark.parametrize("args, field", [
    (["--model", "llama9-7b", "--gpus", "8"], "model"),
    (["--model", "7b", "--gpus", "8", "--gpu", "a100-81gb"], "gpu"),
    (["--model", "7b", "--gpus", "48", "--tp", "4", "--pp", "5"], "gpus"),
    (["--model", "7b", "--gpus", "0"], "gpus"),
    (["--model", "7b", "--gpus", "8", "--sharding", "zero4"], "sharding"),
    (["--model", "7b", "--gpus", "8", "--micro-batch", "-1"], "micro_batch"),
    (["--model", "/nonexistent/config.json", "--gpus", "8"], "model"),
])
def test_bad_input_is_one_line_exit_2(args, field):
    r = run(*args)
    assert r.exit_code == 2, r.output
    text = r.output.strip()
    assert "Traceback" not in text
    assert field in text


def test_unknown_gpu_suggests_close_names():
    r = run("--model", "7b", "--gpus", "8", "--gpu", "a100-81gb")
    assert "a100-80gb" in r.output


def test_subprocess_end_to_end(tmp_path: Path):
    p = subprocess.run([*PLAN, "estimate", "--model", "7b", "--gpus", "48", "--json", "--top", "1"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["fitting"] > 0
    p = subprocess.run([*PLAN, "estimate", "--model", "7b", "--gpus", "48", "--sharding", "zero9"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2
    assert "Traceback" not in p.stderr and "sharding" in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1


def test_scenarios_file_csv_and_jsonl(tmp_path: Path):
    src = tmp_path / "in.csv"
    src.write_text(
        "id,model,gpus,gpu,cluster,sharding,activation_checkpointing,micro_batch,global_batch\n"
        "a,7b,48,,,,,,\n"
        "b,7b,16,a100-40gb,,zero3,full,1,64\n"
        "c,7b,16,nope-gpu,,,,,\n"
        "d,7b,16,,,zero5,,,\n"
        "e,llama2-70b,1,,dgx-v100,,,,\n"
    )
    out = tmp_path / "out.csv"
    r = runner.invoke(app, ["estimate", "--scenarios", str(src), "--out", str(out)])
    assert r.exit_code == 0, r.output
    rows = {row["id"]: row for row in csv.DictReader(out.open())}
    assert rows["a"]["fits"] == "True" and float(rows["a"]["mem_gpu_gib"]) > 0
    assert rows["b"]["sharding"] == "zero3" and rows["b"]["global_batch"] == "64"
    assert "gpu" in rows["c"]["error"]
    assert "sharding" in rows["d"]["error"]
    assert rows["e"]["fits"] == "False" and rows["e"]["reason"]
    for col in ("mem_weights_gib", "mem_grads_gib", "mem_optimizer_gib", "mem_activations_gib", "mem_host_gib_per_node"):
        assert col in rows["a"]
    jl = tmp_path / "in.jsonl"
    jl.write_text(json.dumps({"model": "gpt2", "gpus": 2}) + "\n{broken\n")
    out2 = tmp_path / "out.jsonl"
    r = runner.invoke(app, ["estimate", "--scenarios", str(jl), "--out", str(out2)])
    assert r.exit_code == 0, r.output
    lines = [json.loads(x) for x in out2.read_text().splitlines()]
    assert lines[0]["fits"] is True and lines[1]["error"]


def test_user_catalog_dir_adds_gpu_and_model(tmp_path: Path):
    (tmp_path / "gpus").mkdir()
    (tmp_path / "models").mkdir()
    (tmp_path / "gpus" / "my-gpu.toml").write_text(
        'name = "My GPU"\nvendor = "acme"\nhbm_gib = 24\nhbm_gbytes_per_s = 900\nfp32_tflops = 20\n'
        'fp16_tflops = 160\nbf16_tflops = 160\nintranode_gbps = 400\nsource = "test"\n')
    (tmp_path / "models" / "my-model.toml").write_text(
        'name = "my-model"\nn_layers = 4\nhidden = 256\nn_heads = 4\nvocab = 1000\n'
        'vocab_multiple = 128\nmax_positions = 512\n')
    r = runner.invoke(app, ["estimate", "--catalog", str(tmp_path), "--model", "my-model",
                            "--gpu", "my-gpu", "--gpus", "2", "--json", "--top", "1"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert data["system"]["gpu"]["id"] == "my-gpu"
    assert data["model"]["n_layers"] == 4
    assert data["results"][0]["memory"]["capacity_bytes"] == 24 * 2**30
