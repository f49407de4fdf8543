"""A user's own runs file (ids r1, r2 ... with no `origin_` prefix, one `source` text) is scored
per source as written, and `plan calibrate` says how it cross-validated one source."""

import json
from pathlib import Path

from typer.testing import CliRunner

from plan_cli.main import app
from planner.runs import source_of

runner = CliRunner()
HEADER = ("id,source,model_name,n_params_B,seq_len,gpu_type,n_gpus,gpus_per_node,framework,tp,pp,dp,sharding,"
          "offload,activation_checkpointing,precision,micro_batch,grad_accum,global_batch,measured_iter_time_s,outcome\n")
ROWS = ["r1,my cluster logs,Llama-2 7B,7,4096,A100 80GB,16,8,FSDP,1,1,16,full_shard,none,none,bf16,2,4,128,9.8,ok",
        "r2,my cluster logs,LLaMA-2 13B,13,4096,H100,32,8,FSDP,1,1,32,full_shard,none,full,bf16,1,4,128,5.1,ok",
        "r3,my cluster logs,Llama-2 7B,7,4096,A100 80GB,32,8,FSDP,1,1,32,full_shard,none,none,bf16,2,2,128,5.2,ok",
        "r4,vendor benchmark,Llama-2 7B,7,4096,H100,8,8,FSDP,1,1,8,full_shard,none,none,bf16,2,8,128,8.0,ok"]


def _file(tmp_path: Path, rows) -> Path:
    f = tmp_path / "runs.csv"
    f.write_text(HEADER + "\n".join(rows) + "\n")
    return f


def test_source_of_keeps_the_published_conventions_and_reads_a_user_source():
    assert source_of({"id": "r7", "source": " my cluster logs "}) == "my cluster logs"
    assert source_of({"id": "r7", "source": ""}) == "r7"
    assert source_of({"id": "llmfoundry_12", "source": "mosaicml/llm-foundry/scripts/train/benchmarking/README.md"}) \
        == "llmfoundry:README.md"
    assert source_of({"id": "s002-01", "source": "002_x.txt Max model size"}) == "seed002:Max model size"


def test_validate_groups_a_user_file_by_its_source_column(tmp_path):
    r = runner.invoke(app, ["validate", str(_file(tmp_path, ROWS)), "--json"])
    assert r.exit_code == 0, r.output
    sources = json.loads(r.output)["sources"]
    names = sorted(s["source"] if isinstance(s, dict) else s for s in sources)
    assert names == ["my cluster logs", "vendor benchmark"], sources


def test_calibrate_on_one_source_says_it_held_out_runs(tmp_path):
    out = tmp_path / "cat" / "stacks" / "fsdp.toml"
    r = runner.invoke(app, ["calibrate", str(_file(tmp_path, ROWS[:3])), "--stack", "fsdp", "--out", str(out)],
                      env={"COLUMNS": "300"})
    assert r.exit_code == 0, r.output
    assert "each of the 3 runs held out in turn" in r.output and "1 sources" not in r.output


def test_calibrate_warns_when_runs_are_fewer_than_the_factors_it_fits(tmp_path):
    """3 runs cannot identify 9 factors: the fit said nothing about it (a UX audit: 9 factors on 2 rows, no word);
    the runs of the seeds' hf log (41) get no warning."""
    from planner import profile_fit

    out = tmp_path / "cat" / "stacks" / "fsdp.toml"
    r = runner.invoke(app, ["calibrate", str(_file(tmp_path, ROWS[:3])), "--stack", "fsdp", "--out", str(out)],
                      env={"COLUMNS": "300"})
    assert r.exit_code == 0, r.output
    assert f"warning: 3 runs for {len(profile_fit.PARAMS)} fitted factors" in r.output, r.output
    seeds = Path(__file__).resolve().parents[2] / "validation" / "data" / "seed_runs.csv"
    out2 = tmp_path / "cat2" / "stacks" / "hf.toml"
    r = runner.invoke(app, ["calibrate", str(seeds), "--stack", "hf", "--out", str(out2)], env={"COLUMNS": "300"})
    assert r.exit_code == 0, r.output
    assert "warning:" not in r.output, r.output
