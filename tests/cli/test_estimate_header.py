"""What `plan estimate` says above and under its table: the precision every plan runs in (fp8 with its
recipe), where an unpinned sequence length came from, why a slower plan can rank above a faster one
(2% tiers), the same header over a sweep, and no MoE rows in a dense plan's --explain."""

import json
import re

from typer.testing import CliRunner

from plan_cli.main import app

runner = CliRunner()
WIDE = {"COLUMNS": "250"}


def _run(*args: str) -> str:
    r = runner.invoke(app, ["estimate", *args], env=WIDE)
    assert r.exit_code == 0, r.output
    return r.output


def test_header_names_precision_and_where_seq_len_came_from():
    out = _run("--model", "7b", "--gpus", "8", "--top", "2")
    assert "seq_len 2048 (the model's maximum; --seq-len to plan another), bf16\n" in out
    fp8 = _run("--model", "llama2-13b", "--gpus", "8", "--cluster", "dgx-h100", "--precision", "fp8",
               "--fp8-recipe", "rowwise", "--seq-len", "4096", "--top", "2")
    # MFU of an fp8 plan is quoted against the 16-bit peak (planner/throughput.py _peak16): said, not left to guess
    assert "seq_len 4096, fp8 (rowwise recipe; MFU against the bf16 peak)\n" in fp8 and "maximum" not in fp8
    v100 = _run("--model", "1.3b", "--cluster", "dgx-v100", "--gpus", "8", "--top", "1")
    assert re.search(r"seq_len 2048 \(.*\), fp16\n", v100), v100  # V100 has no bf16


def _speeds(out: str) -> list[float]:
    return [float(m.group(1).replace(",", "")) for m in re.finditer(r"\s([\d,]{5,}) \+-\d+%", out)]


def test_tier_note_only_where_a_slower_plan_ranks_above_a_faster_one():
    args = ("--model", "7b", "--gpus", "48")
    report = json.loads(runner.invoke(app, ["estimate", *args, "--json"]).output)
    speeds = [e["performance"]["tokens_per_s"] for e in report["results"] if e["fits"]][:7]
    assert any(b > a for a, b in zip(speeds, speeds[1:])), speeds  # the case the note is for
    out = _run(*args, "--top", "7")
    assert _speeds(out) == [round(x) for x in speeds]
    assert "Ranked in 2% tiers of tokens_per_s" in out and "the simpler plan first" in out
    assert "a plan with memory headroom comes before a tight one" in out
    assert "offload plans" not in out
    top2 = _run(*args, "--top", "2")
    assert _speeds(top2) == sorted(_speeds(top2), reverse=True) and "Ranked in 2% tiers" not in top2


def test_sweep_prints_the_model_gpu_and_training_header():
    out = _run("--model", "125m", "--gpus", "8:16", "--tokens", "10B")
    lines = out.splitlines()
    assert lines[0].startswith("125m: 125M params")
    assert lines[1] == "NVIDIA A100-SXM4-80GB (dgx-a100, 8/node, 1600 Gbps between nodes)"
    assert lines[2].startswith("seq_len 2048 (the model's maximum") and lines[2].endswith(", bf16")


def test_explain_of_a_dense_model_has_no_moe_rows():
    out = _run("--model", "7b", "--gpus", "8", "--explain")
    assert "step_time_s" in out and "moe_" not in out and "None" not in out
    moe = _run("--model", "mixtral-8x7b", "--gpus", "64", "--gpu", "h100-80gb", "--seq-len", "4096", "--explain")
    assert "moe_a2a_s" in moe


def test_measured_network_is_in_the_header(tmp_path):
    """`--network-from` replaces the catalog's link rates: the header says by what (it showed only the
    catalog's 1600 Gbps while the plans used a 5 Gbps CPU measurement)."""
    net = tmp_path / "net.json"
    net.write_text(json.dumps({"busbw_gbps": {"intranode": 5.18, "internode": None}}))
    out = _run("--model", "1.3b", "--gpus", "16", "--network-from", str(net), "--top", "1")
    assert "\nmeasured all-reduce busbw (--network-from): 5.18 Gbps within a node\n" in out
    net.write_text(json.dumps({"busbw_gbps": {"intranode": 900.0, "internode": 180.0}}))
    out = _run("--model", "1.3b", "--gpus", "8:16", "--network-from", str(net))
    assert "measured all-reduce busbw (--network-from): 900 Gbps within a node, 180 Gbps between nodes\n" in out
    assert "measured" not in _run("--model", "1.3b", "--gpus", "16", "--top", "1")


def test_error_note_names_each_listed_stack_with_its_cross_validated_error():
    """The +-N% after tokens/s is the row's stack profile's CV error; the compact table names no stack, so the
    note under it does, one entry per stack listed, with the error the JSON gives that stack's plans."""
    args = ("--model", "7b", "--gpus", "48", "--top", "6")
    report = json.loads(runner.invoke(app, ["estimate", *args, "--json"]).output)
    listed = {}
    for e in [e for e in report["results"] if e["fits"]][:6]:
        listed.setdefault(e["plan"]["stack"], e["performance"]["expected_error_pct"])
    assert len(listed) >= 2, listed  # the case the note is for: more than one stack in the table
    note = next(line for line in _run(*args).splitlines() if line.startswith("tokens/s +-:"))
    for stack, pct in listed.items():
        assert f"{stack} {pct:.0f}%" in note, note
    assert "--wide names" in note
    wide = next(line for line in _run(*args, "--wide").splitlines() if line.startswith("tokens/s +-:"))
    assert "--wide names" not in wide


def test_a_rope_seq_len_past_the_maximum_is_said_and_cross_field_refusals_name_the_knob():
    """gpt-oss-20b's config.json: max_position_embeddings 131,072; a RoPE model is planned past it as asked, and the
    header says so. --moe-top-k 20 of Llama 4 Scout's 16 experts is refused naming moe_top_k, not `model`."""
    out = _run("--model", "gpt-oss-20b", "--gpu", "h100-80gb", "--gpus", "8", "--ep", "8", "--tp", "1", "--pp", "1",
               "--seq-len", "262144", "--top", "1")
    assert "seq_len 262144 (beyond the model's maximum of 131,072 positions)" in out
    for flag, value, field in (("--moe-top-k", "20", "moe_top_k"), ("--attn-local-layers", "60", "attn_local_layers")):
        r = runner.invoke(app, ["estimate", "--model", "llama4-scout", flag, value, "--gpus", "64"], env=WIDE)
        assert r.exit_code == 2 and f"error: {field}: {field} (" in r.output and r.output.count("\n") == 1, r.output
