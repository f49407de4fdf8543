"""fp8, context parallelism, uneven pipelines, block-fraction checkpointing, stacks, the global
batch rule, `plan validate` and `plan calibrate` through the CLI."""

import csv
import json
from pathlib import Path

from typer.testing import CliRunner

from plan_cli.main import app

runner = CliRunner()
DATA = Path(__file__).resolve().parents[2] / "validation" / "data"


def plan(*args):
    return runner.invoke(app, list(args))


def _json(r):
    assert r.exit_code == 0, r.output
    return json.loads(r.output)


def test_top10_share_one_global_batch_and_show_distinct_layouts():
    rep = _json(plan("estimate", "--model", "7b", "--gpus", "48", "--json"))
    plans = [e["plan"] for e in rep["results"]]
    assert len(plans) == 10
    batches = {p["micro_batch"] * p["grad_accum"] * p["dp"] for p in plans}
    assert len(batches) == 1
    layouts = {(p["tp"], p["pp"], p["cp"], p["sharding"], p["offload"], p["activation_checkpointing"], p["micro_batch"])
               for p in plans}
    assert len(layouts) >= 5
    assert "GPT-3" in rep["global_batch_rule"]


def test_bad_input_names_the_field():
    cases = [
        (("--model", "7b", "--gpus", "8", "--precision", "fp8"), "precision"),  # A100: no fp8
        (("--model", "7b", "--gpus", "48", "--cp", "3", "--tp", "1", "--pp", "1"), "cp"),  # 3 does not divide 2048
        (("--model", "7b", "--gpus", "64", "--pp", "64"), "pp"),  # 34 layers
        (("--model", "7b", "--gpus", "8", "--stack", "nope"), "stack"),
    ]
    for args, field in cases:
        r = plan("estimate", *args)
        assert r.exit_code == 2, (args, r.output)
        assert field in r.output.splitlines()[-1] or field in r.output, (args, r.output)


def test_fp8_uneven_pipeline_and_context_parallel_are_planned():
    base = ("estimate", "--model", "llama3-70b", "--gpus", "72", "--cluster", "dgx-h100", "--json", "--top", "1")
    bf16 = _json(plan(*base, "--tp", "8", "--pp", "3", "--precision", "bf16", "--micro-batch", "1"))
    fp8 = _json(plan(*base, "--tp", "8", "--pp", "3", "--precision", "fp8", "--micro-batch", "1"))
    # 80 layers on 3 stages: uneven, accepted; fp8 GEMMs make the same plan faster
    assert bf16["results"][0]["plan"]["pp"] == 3
    assert fp8["results"][0]["performance"]["tokens_per_s"] > bf16["results"][0]["performance"]["tokens_per_s"]
    cp = _json(plan("estimate", "--model", "llama3-8b", "--gpus", "8", "--cluster", "dgx-h100", "--seq-len", "65536",
                    "--cp", "4", "--stack", "torchtitan", "--json", "--top", "1", "--global-batch", "2"))
    p = cp["results"][0]["plan"]
    assert p["cp"] == 4 and p["tp"] * p["pp"] * p["cp"] * p["dp"] == 8


def test_block_fraction_checkpointing_sits_between_none_and_full():
    def act(ckpt, *extra):
        r = _json(plan("estimate", "--model", "7b", "--gpus", "8", "--sharding", "fsdp_full_shard", "--tp", "1",
                       "--pp", "1", "--micro-batch", "2", "--global-batch", "64", "--activation-checkpointing", ckpt,
                       *extra, "--json", "--top", "1", "--stack", "fsdp"))
        return r["results"][0]["memory"]["activations_bytes"]
    assert act("full") < act("blocks", "--checkpoint-fraction", "0.5") < act("none")
    assert act("blocks", "--checkpoint-fraction", "0.25") > act("blocks", "--checkpoint-fraction", "0.75")


def test_validate_predicts_every_row():
    r = plan("validate", str(DATA / "published_dev.csv"))
    assert r.exit_code == 0, r.output
    assert "249 runs, 249 predicted (0 not predicted)" in r.output
    assert "Spearman" in r.output and "OOM runs flagged: 3/3" in r.output
    rep = _json(plan("validate", str(DATA / "published_dev.csv"), "--json"))
    assert len(rep["runs"]) == 249 and rep["overall_mape_pct"] < 15


def test_validate_rejects_a_file_without_the_columns(tmp_path):
    bad = tmp_path / "runs.csv"
    bad.write_text("a,b\n1,2\n")
    r = plan("validate", str(bad))
    assert r.exit_code == 2 and "runs" in r.output


def test_calibrate_writes_a_profile_that_estimate_uses(tmp_path):
    rows = list(csv.DictReader(open(DATA / "published_dev.csv")))
    mine = [r for r in rows if r["id"].startswith("llmfoundry")][:40]
    runs = tmp_path / "mine.csv"
    with open(runs, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(mine)
    out = tmp_path / "cat" / "stacks" / "bundled.toml"
    # llm-foundry's rows name their own framework: --all-rows fits the bundled profile on them anyway
    assert plan("calibrate", str(runs), "--stack", "bundled", "--out", str(out)).exit_code == 2
    r = plan("calibrate", str(runs), "--stack", "bundled", "--out", str(out), "--all-rows")
    assert r.exit_code == 0, r.output
    assert out.exists() and "cross-validated MAPE" in r.output
    args = ("estimate", "--model", "7b", "--gpus", "16", "--stack", "bundled", "--sharding", "fsdp_full_shard",
            "--json", "--top", "1")
    before = _json(plan(*args))["results"][0]["performance"]
    after = _json(plan(*args, "--catalog", str(tmp_path / "cat")))["results"][0]["performance"]
    assert after["tokens_per_s"] != before["tokens_per_s"]
    assert after["expected_error_pct"] is not None
    bad = plan("calibrate", str(runs), "--stack", "bundled", "--out", str(tmp_path / "x.toml"))
    assert bad.exit_code == 2 and "out" in bad.output
