"""Pipeline parallelism with `torch.distributed.pipelining`, composed with DP (FSDP2, or a gradient
all-reduce after the schedule for sharding none) and TP.

The GPT's blocks are split into pp x vpp stages by layer (uneven splits allowed: the earlier
stages take one more block); the first stage also runs the embeddings, the last the final norm,
the output layer and the loss. Rank r of the pipeline holds stages r, r + pp, ... (looped
placement, as interleaved 1F1B expects). Schedules: GPipe, 1F1B (Narayanan et al. 2021) and
interleaved 1F1B with `vpp` virtual stages per rank.

Tied embeddings: the last stage keeps its own copy of the embedding for the output layer (as
Megatron-LM does); the two copies start equal (same seed) and their gradients are summed over
a {first, last} process group before each optimizer step, so they stay equal.

Measured per rank: state bytes, the peak bytes saved for backward during a step (all micro
batches in flight), and the stage compute time vs the schedule's wall time (the bubble).
"""

from __future__ import annotations

import contextlib
import itertools
import statistics
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.tensor import DTensor, Replicate, Shard
from torch.distributed.tensor.parallel import loss_parallel
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe, ScheduleInterleaved1F1B
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

from trainer.backends.base import DTYPES, Engine, make_optimizer
from trainer.backends.fsdp import fully_shard_model
from trainer.backends.loss_scale import ModelParallelScaler
from trainer.backends.mesh import ParallelMesh, gather_on_rank0, rank_memory
from trainer.backends.tensor_parallel import align_grad_placements, apply_tensor_parallel
from trainer.checkpointing import apply_checkpointing
from trainer.memory import live_saved_tensor_meter, local_tensor
from trainer.model import GPT, loss_fn

SCHEDULES = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B, "interleaved_1f1b": ScheduleInterleaved1F1B}


def split_layers(n_layers: int, n_stages: int) -> list[int]:
    """Blocks per stage; when they do not divide evenly the earlier stages take one more."""
    base, extra = divmod(n_layers, n_stages)
    return [base + (i < extra) for i in range(n_stages)]


class StageModule(nn.Module):
    """Blocks [lo, hi) of a GPT; the first stage adds the embeddings, the last the output layer."""

    def __init__(self, model: GPT, lo: int, hi: int, first: bool, last: bool):
        super().__init__()
        self.first, self.last = first, last
        self.autocast_dtype: torch.dtype | None = None
        self.blocks = nn.ModuleList(model.blocks[lo:hi])
        tied_head = last and model.head is None
        self.embed = model.embed if first or tied_head else None
        self.pos = model.pos if first else None
        self.embed_norm = model.embed_norm if first else None
        self.norm = model.norm if last else None
        self.head = model.head if last else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ctx = torch.autocast(x.device.type, dtype=self.autocast_dtype) if self.autocast_dtype else contextlib.nullcontext()
        with ctx:
            if self.first:
                x = GPT.embed_tokens(self, x)  # the GPT's own input and output code, on these parts
            for block in self.blocks:
                x = block(x)
            if not self.last:
                return x
            logits = GPT.output_logits(self, x)
            # a stage hands plain tensors to the schedule: this rank's vocab shard under TP
            return logits.to_local() if isinstance(logits, DTensor) else logits


class PipelineEngine(Engine):
    name = "pipeline"

    def __init__(self, cfg, model, device):
        super().__init__(cfg, model, device)
        self.mesh = m = ParallelMesh.build(cfg, device.type)
        self.dp, self.dp_rank = m.dp, m.dp_rank
        self.schedule_name = cfg.schedule
        n_stages = cfg.plan.pp * cfg.plan.vpp
        self.stage_layers = split_layers(model.spec.n_layers, n_stages)
        starts = [0, *itertools.accumulate(self.stage_layers)]
        if cfg.plan.precision == "bf16_pure":
            model.to(DTYPES["bf16_pure"])
        self.fsdp = cfg.plan.sharding.startswith("fsdp")
        self.stage_ids = [m.pp_rank + k * cfg.plan.pp for k in range(cfg.plan.vpp)]
        parts, self.tied_weight = [], None
        for i in self.stage_ids:
            part = StageModule(model, starts[i], starts[i + 1], first=i == 0, last=i == n_stages - 1).to(device)
            if cfg.plan.tp > 1:
                apply_tensor_parallel(part, m.tp_mesh)
            # after tp (as tensor_parallel.py): the tp plans name the blocks' own modules, which a full-checkpointing
            # wrapper hides (tp x pp with full checkpointing: "'Checkpointed' object has no attribute 'mlp'")
            apply_checkpointing(part, cfg.plan.activation_checkpointing)
            if self.fsdp:
                fully_shard_model(cfg, part, part.blocks, m.dp_mesh())
            elif cfg.plan.precision in ("bf16", "fp16"):
                part.autocast_dtype = DTYPES[cfg.plan.precision]
            if part.embed is not None and model.head is None and part.first != part.last:
                self.tied_weight = part.embed.weight
            parts.append(part)
        self.tied_group = self._tied_group() if model.head is None else None
        self.module = nn.ModuleList(parts)
        self.stages = [PipelineStage(p, i, n_stages, device, group=m.pp_group) for p, i in zip(parts, self.stage_ids)]
        cls = SCHEDULES[self.schedule_name]
        # each micro batch's loss divided by their count before its backward (scale_grads=False: the schedule adds
        # the gradients as they are), as DDP's backward (trainer/backends/base.py) and Megatron-LM do: under fp16 the
        # scaled gradients stay as large as DDP's (dividing after the sum overflowed at a scale DDP ran with)
        self.schedule = cls(self.stages if cls is ScheduleInterleaved1F1B else self.stages[0],
                            n_microbatches=cfg.plan.grad_accum, loss_fn=self._loss, scale_grads=False)
        self.optimizer = make_optimizer(cfg, self.module.parameters())
        # fp16: the last stage's loss is scaled (so is every gradient sent back through the stages); one overflow
        # decision for every rank (a stage holds some layers' gradients only)
        self.scaler = ModelParallelScaler(cfg.run.loss_scale) if cfg.plan.precision == "fp16" else None
        self.has_first = any(s.is_first for s in self.stages)
        self.has_last = any(s.is_last for s in self.stages)
        self.busy_s, self.schedule_s, self._busy_now = [], [], 0.0
        for stage in self.stages:
            for name in ("forward_one_chunk", "backward_one_chunk", "backward_weight_one_chunk"):
                setattr(stage, name, self._timed(getattr(stage, name)))

    def _loss(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        if self.mesh.tp > 1:  # the local vocab shard back into a DTensor for loss_parallel
            logits = DTensor.from_local(logits, self.mesh.tp_mesh, [Shard(-1)], run_check=False)
            targets = DTensor.from_local(targets, self.mesh.tp_mesh, [Replicate()], run_check=False)
        loss = loss_fn(logits, targets) / self.grad_accum  # under train_step's loss_parallel() when tp > 1
        return loss if self.scaler is None else self.scaler.scale(loss)

    def _tied_group(self):
        """The {first stage, last stage} group of this rank's (dp, tp) coordinates, or None."""
        ranks = self.mesh.mesh.mesh  # (pp, dp_replicate, dp_shard, tp) global ranks
        mine = None
        for idx in itertools.product(*(range(n) for n in ranks.shape[1:])):
            pair = [int(ranks[(0, *idx)]), int(ranks[(self.mesh.pp - 1, *idx)])]
            group = dist.new_group(pair)  # every rank creates every group, in the same order
            if dist.get_rank() in pair:
                mine = group
        return mine

    def _timed(self, fn):
        def run(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                if self.device.type == "cuda":
                    torch.cuda.synchronize(self.device)
                self._busy_now += time.perf_counter() - t0
        return run

    def train_step(self, batches, device, measure):
        xs, ys = zip(*(batches.next() for _ in range(self.grad_accum)))
        x, y = torch.cat(xs).to(device), torch.cat(ys).to(device)
        losses: list | None = [] if self.has_last else None
        meter = live_saved_tensor_meter() if measure else contextlib.nullcontext({"peak_bytes": 0})
        self._busy_now = 0.0
        t0 = time.perf_counter()
        # the loss of vocab-sharded logits runs its backward inside the schedule: same context
        loss_ctx = loss_parallel() if self.mesh.tp > 1 else contextlib.nullcontext()
        with meter as saved, loss_ctx:
            self.schedule.step(*((x,) if self.has_first else ()), target=y if self.has_last else None,
                               losses=losses, return_outputs=False)
        self.schedule_s.append(time.perf_counter() - t0)
        self.busy_s.append(self._busy_now)
        if self.mesh.tp > 1:
            align_grad_placements(self.module.parameters())
        state = self.state_bytes() if measure else {}
        if self.tied_group is not None and self.tied_weight.grad is not None:
            dist.all_reduce(local_tensor(self.tied_weight.grad), group=self.tied_group)
        if not self.fsdp and self.dp > 1:
            self._average_dp_grads()
        # the losses' factor: 1 / grad_accum, and the scale before update()
        scale = (1.0 if self.scaler is None else self.scaler.get_scale()) / self.grad_accum
        self.optimizer_step()
        self.optimizer.zero_grad(set_to_none=True)
        loss = torch.stack([local_tensor(v).detach().float() for v in losses]).mean() if losses else torch.zeros(())
        loss = loss.to(device) / scale
        dist.all_reduce(loss, group=self.mesh.pp_group)  # only the last stage has it: share with rank 0
        return float(loss), state, int(saved["peak_bytes"])

    def _average_dp_grads(self) -> None:
        """sharding none: average the gradients over the data-parallel replicas in one bucket
        per dtype, after the schedule (torch's DDP reducer rejects the schedule's several
        backwards per forward pass when it rebuilds its buckets)."""
        grads = [p.grad for p in self.module.parameters() if p.grad is not None]
        for dtype in {g.dtype for g in grads}:
            same = [g for g in grads if g.dtype == dtype]
            flat = _flatten_dense_tensors(same)
            dist.all_reduce(flat, group=self.mesh.dp_group)
            flat /= self.dp
            for g, reduced in zip(same, _unflatten_dense_tensors(flat, same)):
                g.copy_(reduced)

    def gather_rank_stats(self, state, saved_bytes, warmup_steps):
        busy, sched = self.busy_s[warmup_steps:], self.schedule_s[warmup_steps:]
        ratios = [(s - b) / b for s, b in zip(sched, busy) if b > 0]
        mine = rank_memory(state, saved_bytes) | self.mesh.coords() | {
            "stages": self.stage_ids, "layers": [self.stage_layers[i] for i in self.stage_ids],
            "busy_s": statistics.median(busy) if busy else None,
            "schedule_s": statistics.median(sched) if sched else None,
            "bubble_ratio": statistics.median(ratios) if ratios else None} | self.scaling_stats()
        return gather_on_rank0(mine)

    def parallel_stats(self, per_rank):
        from trainer.result import ParallelStats, RankStats

        ranks = [RankStats(**r) for r in per_rank or []]
        ratios = [r.bubble_ratio for r in ranks if r.bubble_ratio is not None]
        return ParallelStats(
            tp=self.mesh.tp, pp=self.mesh.pp, vpp=self.cfg.plan.vpp, dp=self.mesh.dp,
            dp_replicate=self.mesh.hybrid_replicate, sequence_parallel=self.mesh.tp > 1,
            schedule=self.schedule_name, micro_batches=self.grad_accum, stage_layers=self.stage_layers,
            ranks=ranks, bubble_ratio=statistics.fmean(ratios) if ratios else None)
