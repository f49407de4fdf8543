"""`plan export megatron`: a plan as Megatron-LM / Megatron-Core pretrain_gpt.py arguments, every
flag one that Megatron-LM's megatron/training/arguments.py defines, the plans it cannot run
refused with a one-line error naming the field."""

from __future__ import annotations

import json
import subprocess

import pytest
from typer.testing import CliRunner

from plan_cli.main import app
from planner.errors import PlanError
from planner.exports.bundle import Chosen, export
from planner.exports.megatron_args import flag_lines, megatron_args, model_refusal
from planner.model import LLAMA_BLOCK, ModelSpec
from planner.presets import resolve_model
from planner.resolve import resolve_system
from planner.scenario import ExecutionPlan, Scenario

WINDOW = ("a 2025 Megatron-LM megatron/training/arguments.py, _add_network_size_args (stored index file id 253976787): "
          "add_argument('--window-size', type=tuple_type) and add_argument('--window-attn-skip-freq', type=moe_freq_type)")
ROPE = ("the same 2025 arguments.py (stored index file id 253976787): add_argument('--softmax-type', choices "
        "learnable|vanilla|off-by-one) and '--use-rope-scaling' / '--rope-scaling-factor' in _add_network_size_args, "
        "'--rope-type' (choices rope|yarn) in _add_training_args, '--rotary-scaling-factor' / '--mscale' / "
        "'--mscale-all-dim' in _add_mla_args; add_argument('--rotary-base', type=int, default=10000) in "
        "_add_network_size_args; add_argument('--attention-backend', type=AttnBackend[...], default auto, help "
        "'flash,fused,unfused,local,auto') in _add_network_size_args")
# Each flag the export may write, with where it was checked (megatron/training/arguments.py):
OLD = "NVIDIA/Megatron-LM@307dcf37f03d44da131ba21999278abe4112d2ad megatron/training/arguments.py"
NEW = "Anai-Guo/Megatron-LM@38d7226546e40591cf82c23f41d38796978f5129 megatron/training/arguments.py"
CORE = (NEW + " (TransformerConfig / ModelParallelConfig field through ArgumentGroupFactory; an explicit "
        "add_argument in the 2025 _add_distributed_args)")
MEGATRON_FLAG_SOURCES = {
    **{f: OLD for f in (
        "--num-layers", "--hidden-size", "--num-attention-heads", "--ffn-hidden-size", "--kv-channels",
        "--group-query-attention", "--num-query-groups", "--seq-length", "--max-position-embeddings",
        "--make-vocab-size-divisible-by", "--position-embedding-type", "--normalization", "--swiglu",
        "--untie-embeddings-and-output-weights", "--disable-bias-linear", "--add-qkv-bias",
        "--tensor-model-parallel-size", "--pipeline-model-parallel-size", "--context-parallel-size",
        "--sequence-parallel", "--tp-comm-overlap", "--overlap-grad-reduce", "--use-distributed-optimizer",
        "--overlap-param-gather", "--micro-batch-size", "--global-batch-size", "--recompute-granularity",
        "--recompute-method", "--recompute-num-layers", "--bf16", "--fp16", "--fp8-format", "--optimizer",
        "--use-flash-attn", "--train-iters")},
    **{f: NEW for f in ("--num-virtual-stages-per-pipeline-rank", "--decoder-first-pipeline-num-layers",
                        "--decoder-last-pipeline-num-layers", "--cp-comm-type")},
    **{f: WINDOW for f in ("--window-size", "--window-attn-skip-freq")},
    # the gradient reduction dtype (tests/exports/test_export_grad_reduce.py): store_true switches of validate_args'
    # arguments, --accumulate-allreduce-grads-in-fp32 also in 307dcf37
    **{f: "NVIDIA/Megatron-LM@000c4ac24f61159c138b0975def722c65245983c megatron/training/arguments.py"
       for f in ("--grad-reduce-in-bf16", "--accumulate-allreduce-grads-in-fp32")},
    **{f: ROPE for f in ("--rotary-base", "--attention-backend", "--softmax-type", "--use-rope-scaling", "--rope-scaling-factor", "--rope-type",
                         "--rotary-scaling-factor", "--mscale", "--mscale-all-dim")},
    **{f: CORE for f in ("--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split",
                         "--hierarchical-context-parallel-sizes")},
}
# choices Megatron's argparse enforces on the values written
CHOICES = {"--normalization": {"LayerNorm", "RMSNorm"}, "--position-embedding-type": {"learned_absolute", "rope"},
           "--fp8-format": {"e4m3", "hybrid"}, "--recompute-granularity": {"full", "selective"},
           "--recompute-method": {"uniform", "block"}, "--cp-comm-type": {"p2p", "a2a", "allgather", "a2a+p2p"},
           "--optimizer": {"adam", "sgd"}, "--softmax-type": {"vanilla", "off-by-one", "learnable"},
           "--rope-type": {"rope", "yarn"}, "--attention-backend": {"flash", "fused", "unfused", "local", "auto"}}

# Llama 3 405B (Llama 3 paper, Table 3): 126 layers, 16384 wide, 128 heads, 8 KV heads, FFN 53248
LLAMA3_405B = ModelSpec(name="llama3-405b-like", family="llama", n_layers=126, hidden=16384, n_heads=128,
                        n_kv_heads=8, ffn_hidden=53248, vocab=128256, max_positions=8192, **LLAMA_BLOCK)


def values(args: list[str], flag: str) -> list[str]:
    """The values after `flag` (up to the next flag); [] for a switch; KeyError when absent."""
    i = args.index(flag)
    out = []
    for a in args[i + 1:]:
        if a.startswith("--"):
            break
        out.append(a)
    return out


def check_flags(args: list[str]) -> None:
    flags = [a for a in args if a.startswith("--")]
    assert len(flags) == len(set(flags)), f"a flag written twice: {flags}"
    unknown = [f for f in flags if f not in MEGATRON_FLAG_SOURCES]
    assert not unknown, f"flags not checked against arguments.py: {unknown}"
    for flag, allowed in CHOICES.items():
        if flag in flags:
            assert set(values(args, flag)) <= allowed, (flag, values(args, flag))


def test_dense_gpt_with_the_distributed_optimizer():
    model = resolve_model("gpt2-xl")
    plan = ExecutionPlan(tp=2, dp=4, sharding="zero1", activation_checkpointing="selective", micro_batch=4,
                         grad_accum=8, seq_len=1024)
    args = megatron_args(plan, model)
    check_flags(args)
    assert values(args, "--num-layers") == ["48"] and values(args, "--hidden-size") == ["1600"]
    assert values(args, "--num-attention-heads") == ["25"] and values(args, "--ffn-hidden-size") == ["6400"]
    assert values(args, "--global-batch-size") == ["128"] and values(args, "--micro-batch-size") == ["4"]
    assert values(args, "--recompute-granularity") == ["selective"] and "--recompute-method" not in args
    for switch in ("--use-distributed-optimizer", "--overlap-grad-reduce", "--overlap-param-gather", "--bf16"):
        assert values(args, switch) == []
    # no GPU given: Transformer Engine picks the kernel (planner/exports/attention_backend.py)
    assert values(args, "--attention-backend") == ["auto"] and "--use-flash-attn" not in args
    # a GPT-2 block: no LLaMA flags, no GQA, no pipeline or cp flags
    for absent in ("--swiglu", "--normalization", "--untie-embeddings-and-output-weights", "--disable-bias-linear",
                   "--group-query-attention", "--position-embedding-type", "--num-virtual-stages-per-pipeline-rank",
                   "--context-parallel-size", "--sequence-parallel"):
        assert absent not in args


def test_llama_70b_tp8_pp4_interleaved_with_sequence_parallel():
    model = resolve_model("llama2-70b")
    plan = ExecutionPlan(tp=8, pp=4, vpp=5, dp=2, sequence_parallel=True, async_tp=True, micro_batch=1,
                         grad_accum=64, seq_len=4096, activation_checkpointing="full", precision="fp8")
    args = megatron_args(plan, model)
    check_flags(args)
    assert values(args, "--tensor-model-parallel-size") == ["8"]
    assert values(args, "--pipeline-model-parallel-size") == ["4"]
    assert values(args, "--num-virtual-stages-per-pipeline-rank") == ["5"]
    assert values(args, "--num-query-groups") == ["8"] and "--group-query-attention" in args
    assert values(args, "--normalization") == ["RMSNorm"] and values(args, "--position-embedding-type") == ["rope"]
    for switch in ("--swiglu", "--untie-embeddings-and-output-weights", "--disable-bias-linear",
                   "--sequence-parallel", "--tp-comm-overlap", "--overlap-grad-reduce"):
        assert values(args, switch) == []
    assert values(args, "--recompute-method") == ["uniform"] and values(args, "--recompute-num-layers") == ["1"]
    assert values(args, "--fp8-format") == ["hybrid"] and "--bf16" in args
    assert values(args, "--global-batch-size") == ["128"]
    assert "--use-distributed-optimizer" not in args and "--overlap-param-gather" not in args


def test_llama3_405b_like_uneven_split_with_context_parallelism():
    """Llama 3 405B's layout (tp 8, pp 16, cp): 126 layers, the first and last stage one block short."""
    plan = ExecutionPlan(tp=8, pp=16, cp=2, dp=4, first_stage_layers=7, last_stage_layers=7, sequence_parallel=True,
                         sharding="zero1", seq_len=8192, micro_batch=1, grad_accum=16)
    args = megatron_args(plan, LLAMA3_405B, gpus_per_node=8)
    check_flags(args)
    assert values(args, "--decoder-first-pipeline-num-layers") == ["7"]
    assert values(args, "--decoder-last-pipeline-num-layers") == ["7"]
    assert values(args, "--context-parallel-size") == ["2"] and values(args, "--cp-comm-type") == ["p2p"]
    assert values(args, "--ffn-hidden-size") == ["53248"] and values(args, "--num-query-groups") == ["8"]
    assert values(args, "--max-position-embeddings") == ["8192"]
    split = megatron_args(plan.model_copy(update={"first_stage_layers": 0, "last_stage_layers": 0, "vpp": 2,
                                                  "embedding_in_split": True, "loss_in_split": True}), LLAMA3_405B)
    check_flags(split)
    assert "--account-for-embedding-in-pipeline-split" in split and "--account-for-loss-in-pipeline-split" in split
    assert "--decoder-first-pipeline-num-layers" not in split
    hier = megatron_args(plan.model_copy(update={"tp": 1, "cp": 16, "dp": 2, "cp_impl": "a2a+p2p",
                                                 "sequence_parallel": False}), LLAMA3_405B, gpus_per_node=8)
    check_flags(hier)
    assert values(hier, "--cp-comm-type") == ["a2a+p2p"]
    inner, outer = map(int, values(hier, "--hierarchical-context-parallel-sizes"))
    assert inner * outer == 16 and inner <= 8


@pytest.mark.parametrize("update, field", [
    ({"stack": "fsdp"}, "stack"),
    ({"stack": "megatron_deepspeed"}, "stack"),
    ({"sharding": "zero3"}, "sharding"),
    ({"sharding": "fsdp_full_shard"}, "sharding"),
    ({"sharding": "zero1", "offload": "optimizer"}, "offload"),
    ({"activation_offload": True, "activation_checkpointing": "full"}, "activation_offload"),
    ({"activation_checkpointing": "op"}, "activation_checkpointing"),
    ({"activation_checkpointing": "blocks", "checkpoint_fraction": 0.5}, "activation_checkpointing"),
    ({"precision": "bf16_pure"}, "precision"),
    ({"optimizer": "adafactor"}, "optimizer"),
    ({"compile": True}, "compile"),
    ({"tp": 2, "async_tp": True}, "async_tp"),
])
def test_plans_megatron_cannot_run_are_refused(update, field):
    plan = ExecutionPlan(dp=4).model_copy(update=update)
    with pytest.raises(PlanError) as e:
        megatron_args(plan, resolve_model("llama2-7b"))
    assert e.value.field == field and "\n" not in str(e.value)


@pytest.mark.parametrize("preset, field", [("gpt-j-6b", "parallel_block"), ("falcon-7b", "parallel_block"),
                                           ("bloom-7b1", "norm")])
def test_models_megatron_gpt_cannot_build_are_refused(preset, field):
    why = model_refusal(resolve_model(preset))
    assert why is not None and why.field == field


def test_bundle_writes_a_bash_array_that_sources_to_the_same_args(tmp_path):
    model, system = resolve_model("llama2-70b"), resolve_system(Scenario(gpus=64, cluster="dgx-h100"))
    plan = ExecutionPlan(tp=8, pp=4, vpp=5, cp=2, dp=1, sequence_parallel=True, seq_len=4096, grad_accum=32)
    result = export("megatron", Chosen(plan=plan, model_ref="llama2-70b", model=model, system=system))
    assert [f.name for f in result.files] == ["megatron_args.sh"]
    assert not any("context parallelism" in n for n in result.notes)  # the flags are in the file, not a note
    script = tmp_path / "megatron_args.sh"
    script.write_text(result.files[0].content)
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    out = subprocess.run(["bash", "-c", f'source "{script}"; printf "%s\\n" "${{MEGATRON_ARGS[@]}}"'],
                         capture_output=True, text=True, check=True).stdout.splitlines()
    # the GPU the plan was timed on picks the kernel: the megatron profile's cuDNN attention on an H100
    assert out == megatron_args(plan, model, system.gpus_per_node, gpu=system.gpu)
    assert values(out, "--attention-backend") == ["fused"]
    body = result.files[0].content.split("MEGATRON_ARGS=(\n")[1].split("\n)")[0].splitlines()
    assert [ln.strip() for ln in body] == flag_lines(out)  # one flag (with its values) per line
    assert "--nnodes 8" in result.files[0].content and "--nproc-per-node 8" in result.files[0].content


runner = CliRunner()


def test_cli_writes_the_args_file_and_json(tmp_path):
    out = tmp_path / "args.sh"
    pinned = ["--model", "llama2-70b", "--gpus", "64", "--stack", "megatron", "--tp", "8", "--pp", "4", "--vpp", "5",
              "--sequence-parallel", "--seq-len", "4096", "--sharding", "zero1"]
    res = runner.invoke(app, ["export", "megatron", *pinned, "--out", str(out)])
    assert res.exit_code == 0, res.output
    text = out.read_text()
    assert out.stat().st_mode & 0o111 and "    --num-virtual-stages-per-pipeline-rank 5\n" in text
    assert "    --use-distributed-optimizer" in text and "    --overlap-param-gather" in text
    res = runner.invoke(app, ["export", "megatron", *pinned, "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["format"] == "megatron" and doc["plan"]["tp"] == 8 and doc["plan"]["vpp"] == 5
    assert doc["files"][0]["name"] == "megatron_args.sh" and "--tensor-model-parallel-size 8" in doc["files"][0]["content"]


@pytest.mark.parametrize("args, field", [
    (["--sharding", "zero3", "--gpus", "8", "--stack", "generic"], "sharding"),
    (["--sharding", "zero1", "--offload", "optimizer", "--gpus", "8", "--stack", "generic"], "offload"),
    (["--stack", "fsdp", "--gpus", "8"], "stack"),
    (["--model", "gpt-j-6b", "--gpus", "8", "--stack", "megatron", "--sharding", "none"], "parallel_block"),
])
def test_cli_refusals_are_one_line_exit_2(args, field):
    res = runner.invoke(app, ["export", "megatron", *args])
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"error: {field}:"), res.stderr


def test_steps_or_tokens_are_written_as_train_iters():
    """--steps, or --tokens over the global batch's tokens (the steps the torchrun/SLURM exports train), is Megatron-LM's
    --train-iters (_add_training_args of arguments.py@307dcf37); without either none is written."""
    base = ["export", "megatron", "--model", "125m", "--gpus", "8", "--stack", "megatron", "--json"]
    for extra, steps in ((["--steps", "100"], 100), (["--tokens", "1B"], None), ([], None)):
        res = runner.invoke(app, [*base, *extra])
        assert res.exit_code == 0, res.output
        doc = json.loads(res.stdout)
        content = doc["files"][0]["content"]
        args = [a for line in content.split("MEGATRON_ARGS=(\n")[1].split("\n)")[0].splitlines() for a in line.split()]
        check_flags(args)
        if not extra:
            assert "--train-iters" not in args and doc["steps"] is None
            continue
        p = doc["plan"]
        expected = steps or -(-10**9 // (p["micro_batch"] * p["grad_accum"] * p["dp"] * p["seq_len"]))
        assert doc["steps"] == expected and values(args, "--train-iters") == [str(expected)], content
