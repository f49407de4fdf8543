"""`plan train`: run the bundled GPT trainer on N local ranks (or join torchrun / srun)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from plan_cli import options as opts
from plan_cli.common import console, err_console, handle_errors, print_json


def register(app: typer.Typer) -> None:
    app.command("train")(train)


@handle_errors
def train(
    model: Annotated[str, typer.Option(help="Preset id, bare size, config.json or ModelSpec JSON.")] = "tiny",
    nproc: opts.Nproc = 1,
    nnodes: opts.Nnodes = 1,
    node_rank: opts.NodeRank = 0,
    rdzv_endpoint: opts.RdzvEndpoint = None,
    sharding: Annotated[str, typer.Option(help="none, zero1, zero2, zero3, fsdp_full_shard, fsdp_shard_grad_op, fsdp_hybrid")] = "none",
    offload: Annotated[str, typer.Option(help="none, optimizer, optimizer+params")] = "none",
    activation_checkpointing: Annotated[str, typer.Option(help="none, selective, full")] = "none",
    precision: Annotated[str, typer.Option(help="fp32, fp16, bf16, bf16_pure")] = "fp32",
    optimizer: Annotated[str, typer.Option(help="adamw, adafactor, sgd")] = "adamw",
    attention: Annotated[str, typer.Option(help="flash (SDPA) or eager")] = "flash",
    micro_batch: Annotated[int, typer.Option(min=1)] = 1,
    grad_accum: Annotated[int, typer.Option(min=1)] = 1,
    tp: Annotated[int, typer.Option(min=1, help="Tensor-parallel ranks (DTensor; sequence-parallel norms).")] = 1,
    pp: Annotated[int, typer.Option(min=1, help="Pipeline stages (torch.distributed.pipelining).")] = 1,
    vpp: Annotated[int, typer.Option(min=1, help="Virtual pipeline stages per rank (interleaved 1F1B).")] = 1,
    pp_schedule: Annotated[Optional[str], typer.Option(help="gpipe, 1f1b, interleaved_1f1b (default: 1f1b; gpipe when grad_accum < pp; interleaved with vpp > 1).")] = None,
    seq_len: Annotated[int, typer.Option(min=1)] = 64,
    deepspeed_config: Annotated[Optional[Path], typer.Option(help="A DeepSpeed JSON config, run as is.")] = None,
    compile: Annotated[bool, typer.Option("--compile", help="torch.compile each block.")] = False,
    low_precision_norm: Annotated[bool, typer.Option("--low-precision-norm")] = False,
    steps: Annotated[int, typer.Option(min=1)] = 6,
    warmup_steps: Annotated[int, typer.Option(min=0, help="Steps excluded from the timings.")] = 2,
    lr: Annotated[float, typer.Option()] = 1e-3,
    seed: Annotated[int, typer.Option()] = 0,
    data: Annotated[str, typer.Option(help="'synthetic' or a local text file (byte-level tokens).")] = "synthetic",
    timeout_s: Annotated[float, typer.Option(help="Wall-clock limit per rank.")] = 1800.0,
    json_out: Annotated[Optional[Path], typer.Option("--json", help="Write the result JSON here.")] = None,
) -> None:
    """Train the bundled GPT with the given knobs and report speed, MFU and memory."""
    from trainer.config import TrainConfig
    from trainer.launch import launch, summary_line
    from trainer.result import EXIT_CODES

    cfg = TrainConfig(
        model=model, nproc=nproc, nnodes=nnodes, node_rank=node_rank, rdzv_endpoint=rdzv_endpoint,
        sharding=sharding, offload=offload, activation_checkpointing=activation_checkpointing,
        precision=precision, optimizer=optimizer, attention=attention, micro_batch=micro_batch,
        grad_accum=grad_accum, tp=tp, pp=pp, vpp=vpp, pp_schedule=pp_schedule, seq_len=seq_len,
        deepspeed_config=str(deepspeed_config) if deepspeed_config else None, compile=compile,
        low_precision_norm=low_precision_norm, steps=steps, warmup_steps=warmup_steps, lr=lr,
        seed=seed, data=data, timeout_s=timeout_s, json_out=str(json_out) if json_out else None)
    result = launch(cfg)
    if result.status == "bad_config":
        err_console.print(f"[bold red]error:[/] {result.error}", highlight=False, soft_wrap=True)
        raise typer.Exit(2)
    (console if result.status == "ok" else err_console).print(summary_line(result), highlight=False, soft_wrap=True)
    if result.status == "ok" and result.memory is not None:
        m = result.memory
        console.print(f"rank 0 holds: params {m.params_bytes:,} B, grads {m.grads_bytes:,} B, "
                      f"optimizer {m.optimizer_bytes:,} B; saved activations {m.saved_activations_bytes:,} B",
                      highlight=False)
    if result.status == "ok" and result.parallel is not None:
        par = result.parallel
        line = f"layout: tp {par.tp} x pp {par.pp} (vpp {par.vpp}) x dp {par.dp}"
        if par.pp > 1:
            line += f", {par.schedule}, micro batches {par.micro_batches}, layers per stage {par.stage_layers}"
            if par.bubble_ratio is not None:
                line += f", measured bubble {par.bubble_ratio:.2f} (planner (p-1)/(m*v) = {(par.pp - 1) / (par.micro_batches * par.vpp):.2f})"
        console.print(line, highlight=False, soft_wrap=True)
    if result.status != "ok":
        raise typer.Exit(EXIT_CODES[result.status])


__all__ = ["register", "print_json"]
