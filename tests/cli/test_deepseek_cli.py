"""`plan estimate` on the DeepSeek family: the V3 preset on 2048 H100 with the report's expert and
pipeline parallelism (EP 64, PP 16) gives plans that fit, and a DeepSeek config.json written from the
published values reads through --model PATH."""

import json

from typer.testing import CliRunner

from plan_cli.main import app
from tests.planner.test_deepseek import V2_LITE_CONFIG

runner = CliRunner()


def _estimate(*args):
    r = runner.invoke(app, ["estimate", *args, "--json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.output)


def test_v3_on_2048_h100_with_ep64_pp16_fits():
    d = _estimate("--model", "deepseek-v3", "--gpus", "2048", "--gpu", "h100-80gb", "--seq-len", "4096",
                  "--global-batch", "15360", "--ep", "64", "--pp", "16", "--top", "3")
    assert d["model"]["kv_lora_rank"] == 512 and d["model"]["mtp_layers"] == 1
    assert d["results"], d["rejected"]
    for res in d["results"]:
        assert res["fits"] and res["plan"]["ep"] == 64 and res["plan"]["pp"] == 16
        assert res["memory"]["total_bytes"] <= res["memory"]["capacity_bytes"]
        assert 0.05 < res["performance"]["mfu"] < 0.6


def test_deepseek_config_json_reads_through_model_path(tmp_path):
    path = tmp_path / "DeepSeek-V2-Lite" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(V2_LITE_CONFIG))
    d = _estimate("--model", str(path), "--gpus", "8", "--gpu", "h100-80gb", "--seq-len", "4096", "--top", "1")
    m = d["model"]
    assert (m["q_lora_rank"], m["kv_lora_rank"], m["moe_experts"], m["moe_shared_experts"]) == (None, 512, 64, 2)
    assert d["results"] and d["results"][0]["fits"]


def test_a_bad_deepseek_config_is_one_line_exit_2(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**V2_LITE_CONFIG, "moe_layer_freq": 2}))
    r = runner.invoke(app, ["estimate", "--model", str(path), "--gpus", "8"])
    assert r.exit_code == 2 and "moe_layer_freq" in r.output and len(r.output.strip().splitlines()) == 1
