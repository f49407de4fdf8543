"""`TrainConfig`: one trainer run = {model, plan: ExecutionPlan, run: RunSettings, launch:
LaunchSettings}, in the planner's knob vocabulary. Imports no torch.

The plan is the planner's `ExecutionPlan` itself (its fields, bounds and descriptions): the
trainer's flags are generated from these models (trainer/cli.py, plan_cli/train.py), so a knob
is declared once. A flat dict (`TrainConfig(tp=2, steps=4)`, the result files and tuner
configs written before the split) is sorted into the three parts by field name.
`validate_config` turns what the bundled trainer cannot run into a `PlanError` naming the field
(the launcher reports those as status `bad_config`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from planner import rules
from planner.errors import PlanError
from planner.fields import Flag
from planner.model import ModelSpec
from planner.scenario import NOT_PINNED, ExecutionPlan
from planner.stage_split import SPLIT_KNOBS
from planner.units import Seconds

PipelineSchedule = Literal["1f1b", "gpipe", "interleaved_1f1b"]
PP_SCHEDULES: tuple[str, ...] = PipelineSchedule.__args__  # type: ignore[attr-defined]

# The bundled trainer's plan where a flag is not given: fp32 and short sequences run on a CPU.
TRAINER_PLAN_DEFAULTS: dict[str, Any] = {"stack": "bundled", "precision": "fp32", "seq_len": 64}
# ExecutionPlan fields the trainer does not take as flags: dp (and sequence_parallel) follow
# from the launch and tp, the communication buckets from the DeepSpeed config builder.
NOT_FLAGS: tuple[str, ...] = NOT_PINNED


class LaunchSettings(BaseModel):
    """Where the ranks run."""

    model_config = ConfigDict(extra="forbid")

    # at most the planner's own bounds (planner/scenario.py: 1024 GPUs per node, a million GPUs)
    nproc: int = Field(default=1, gt=0, le=1024, description="Ranks on this node")
    nnodes: int = Field(default=1, gt=0, le=1_000_000, description="Nodes")
    node_rank: int = Field(default=0, ge=0, description="This node's rank (multi-node)")
    rdzv_endpoint: str | None = Field(default=None, description="host:port of the rendezvous (multi-node)")

    @property
    def world_size(self) -> int:
        return self.nproc * self.nnodes


class RunSettings(BaseModel):
    """How long, on what data, and the trainer's own choices that no plan models."""

    model_config = ConfigDict(extra="forbid")

    steps: int = Field(default=6, gt=0, le=1_000_000_000, description="Optimizer steps to run (warm-up included)")
    warmup_steps: int = Field(default=2, ge=0, description="Steps excluded from the timings")
    lr: float = Field(default=1e-3, gt=0, allow_inf_nan=False, description="Learning rate")
    # numpy's and Optuna's seed range (numpy.random.seed: 0 to 2**32 - 1)
    seed: int = Field(default=0, ge=0, le=2**32 - 1, description="Random seed")
    data: str = Field(default="synthetic", description="'synthetic' or a local text file (byte-level tokens)")
    timeout_s: Seconds = Field(default=1800.0, gt=0, description="Wall-clock limit per rank (seconds, or 30m, 2h)")
    measure_memory: bool = Field(default=True, description="Measure the bytes rank 0 holds (saved-tensor hooks)")
    json_out: Annotated[str | None, Flag("--json")] = Field(default=None, description="Write the result JSON here")
    pp_schedule: PipelineSchedule | None = Field(
        default=None, description="Pipeline schedule (default: 1f1b; gpipe when grad_accum < pp; "
        "interleaved_1f1b when vpp > 1)")
    deepspeed_config: str | None = Field(default=None, description="A DeepSpeed JSON config, run as is")
    fsdp_config: str | None = Field(default=None, description="An FSDP settings JSON (plan export fsdp), run as is")
    low_precision_norm: bool = Field(default=False, description="Norms in the low precision (no fp32 upcast)")
    # MixtralConfig / Qwen2MoeConfig router_aux_loss_coef 0.001 (trainer/moe.py)
    moe_aux_loss_coef: float = Field(default=0.001, ge=0, allow_inf_nan=False,
                                     description="MoE load-balancing loss weight (0: none)")
    # torch.amp.GradScaler's init_scale (2**16); DeepSpeed reads fp16.initial_scale_power from its own config
    loss_scale: float = Field(default=2.0**16, ge=1, le=2.0**64, allow_inf_nan=False,
                              description="fp16: the initial dynamic loss scale (halved on an overflow, the step "
                              "skipped; doubled after 2000 clean steps)")


_PARTS: dict[str, type[BaseModel]] = {"plan": ExecutionPlan, "run": RunSettings, "launch": LaunchSettings}


class TrainConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str = Field(default="tiny", description="Preset id, bare size, config.json or ModelSpec JSON")
    spec: ModelSpec | None = None  # resolved from `model` when None
    plan: ExecutionPlan = Field(default_factory=lambda: ExecutionPlan(**TRAINER_PLAN_DEFAULTS))
    run: RunSettings = Field(default_factory=RunSettings)
    launch: LaunchSettings = Field(default_factory=LaunchSettings)

    @model_validator(mode="before")
    @classmethod
    def _sort_flat_fields(cls, data: Any) -> Any:
        """Flat fields (flags, older JSON) go to the part that declares them; the plan gets the
        trainer's defaults, and dp and sequence_parallel from the launch and tp when not given."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        parts: dict[str, dict] = {}
        for name, model in _PARTS.items():
            given = data.pop(name, None)
            given = given.model_dump() if isinstance(given, BaseModel) else dict(given or {})
            parts[name] = {k: data.pop(k) for k in list(data) if k in model.model_fields} | given
        plan = TRAINER_PLAN_DEFAULTS | parts["plan"]
        launch = LaunchSettings(**parts["launch"])
        tp, pp, cp = (int(plan.get(k, 1)) for k in ("tp", "pp", "cp"))
        plan.setdefault("dp", max(1, launch.world_size // max(1, tp * pp * cp)))
        plan.setdefault("sequence_parallel", tp > 1)
        return {**data, "plan": plan, "run": parts["run"], "launch": launch}

    def on_ranks(self, *, nproc: int, nnodes: int) -> TrainConfig:
        """This run on the ranks a launcher (torchrun, srun) decided: dp follows them."""
        launch = self.launch.model_dump() | {"nproc": nproc, "nnodes": nnodes}
        return TrainConfig(model=self.model, spec=self.spec, plan=self.plan.model_dump(exclude={"dp"}),
                           run=self.run, launch=launch)

    @property
    def schedule(self) -> str:
        """The pipeline schedule run: the one asked for, else interleaved 1F1B with virtual stages,
        else 1F1B, or GPipe with fewer micro batches than stages (torch's 1F1B needs m >= pp;
        with m < pp both run all forwards, then all backwards)."""
        p = self.plan
        if self.run.pp_schedule:
            return self.run.pp_schedule
        if p.vpp > 1:
            return "interleaved_1f1b"
        return "1f1b" if p.grad_accum >= p.pp else "gpipe"

    @property
    def backend_name(self) -> str:
        p = self.plan
        if p.pp > 1:
            return "pipeline"
        if p.tp > 1:
            return "tensor_parallel"
        if self.run.deepspeed_config or p.sharding.startswith("zero"):
            return "deepspeed"
        if self.run.fsdp_config or p.sharding.startswith("fsdp"):
            return "fsdp2"
        return "ddp"

    def knobs(self) -> dict:
        """The plan as the result file and the DeepSpeed builder read it: the communication
        buckets are the builder's to size, and the stack is always the bundled one (left out, so
        that a run's DeepSpeed config is the tuner's and the export's for the same knobs)."""
        exclude = (set(NOT_FLAGS) - {"dp"}) | {"stack"}
        return self.plan.model_dump(exclude=exclude) | {"global_batch": self.plan.global_batch}


def check_launcher_ranks(asked_nproc: int | None, local_ranks: int, default: int | None = 1) -> None:
    """Under torchrun / srun the launcher decides this node's ranks; an --nproc that differs was dropped without a
    word (`srun --ntasks-per-node=1 plan train --nproc 8` ran ONE rank per node, on its first GPU). `default`: the
    value that means "not given" (the trainer's 1; None for an option that has no value when left out)."""
    if asked_nproc is not None and asked_nproc != default and asked_nproc != local_ranks:
        raise PlanError("nproc", f"--nproc {asked_nproc}, but the launcher (srun / torchrun) started {local_ranks} "
                        "rank(s) on this node: leave --nproc out, start one srun task per GPU "
                        f"(--ntasks-per-node={asked_nproc}), or run torchrun --nproc-per-node {asked_nproc} in the srun")


def check_launcher_nodes(asked_nnodes: int, nodes: int, default: int = 1) -> None:
    """Under torchrun / srun the launcher decides the nodes too (WORLD_SIZE / LOCAL_WORLD_SIZE): an --nnodes that
    differs was dropped without a word (`srun -N 2 plan allreduce-bench --nnodes 4` measured 2 nodes and said so only
    in its table's title). Refused, not honoured: the ranks already run on `nodes` nodes and a collective over fewer
    or more is not the measurement asked for. `default` (1) means "not given", as check_launcher_ranks' --nproc."""
    if asked_nnodes != default and asked_nnodes != nodes:
        raise PlanError("nnodes", f"--nnodes {asked_nnodes}, but the launcher (srun / torchrun) started ranks on {nodes} "
                        f"node(s): leave --nnodes out, or start the step on {asked_nnodes} nodes (srun -N {asked_nnodes}, "
                        f"torchrun --nnodes {asked_nnodes})")


def check_launch(nnodes: int, node_rank: int, rdzv_endpoint: str | None) -> None:
    """node_rank below nnodes; a rendezvous the ranks can meet at (trainer/ranks.check_endpoint: several nodes
    need an agreed host:port, unless torchrun / srun launched this process; a port 0-65535, a host that resolves)."""
    from trainer.dist import launched_externally
    from trainer.ranks import check_endpoint

    if node_rank >= nnodes:
        raise PlanError("node_rank", f"{node_rank}: must be below --nnodes {nnodes} (nodes count from 0)")
    if nnodes > 1 and rdzv_endpoint is None and launched_externally():
        return
    check_endpoint(rdzv_endpoint, nnodes)


def validate_config(cfg: TrainConfig) -> None:
    """Reject what the bundled trainer cannot run, with a one-line reason."""
    p, r = cfg.plan, cfg.run
    if r.warmup_steps >= r.steps:
        raise PlanError("warmup_steps", f"--warmup-steps {r.warmup_steps} (default 2: the steps left out of the timings) "
                        f"must be below --steps {r.steps} so that some steps are timed: give --steps "
                        f"{r.warmup_steps + 1} or more, or --warmup-steps {r.steps - 1}")
    check_launch(cfg.launch.nnodes, cfg.launch.node_rank, cfg.launch.rdzv_endpoint)
    if r.data != "synthetic" and not Path(r.data).is_file():
        raise PlanError("data", f"{r.data!r}: no such file (allowed: synthetic, or a local text file)")
    validate_plan(cfg)
    validate_parallel(cfg)
    # the planner's ZeRO++ rules (planner/zeropp_rules.py): each feature needs DeepSpeed ZeRO-3
    rules.check({k: getattr(p, k) for k in ("sharding", "stack", "tp", "cp", "dp", "offload", "zeropp_qwz",
                                            "zeropp_hpz_partition_size", "zeropp_qgz")})
    if cfg.backend_name == "deepspeed" and r.loss_scale != RunSettings.model_fields["loss_scale"].default:
        raise PlanError("loss_scale", "DeepSpeed scales fp16 losses by its config's fp16.initial_scale_power (allowed "
                        "with zero* / --deepspeed-config: the default, 65536)")
    for field in ("deepspeed_config", "fsdp_config"):
        path = getattr(r, field)
        if not path:
            continue
        if not Path(path).is_file():
            raise PlanError(field, f"{path}: file not found")
        try:
            json.loads(Path(path).read_text())
        except json.JSONDecodeError as e:
            raise PlanError(field, f"not valid JSON: {e}") from None
        if r.deepspeed_config and r.fsdp_config:
            raise PlanError("fsdp_config", "give a DeepSpeed config or an FSDP config, not both")
        return
    rules.check({"sharding": p.sharding, "offload": p.offload})  # the planner's offload rules
    b = cfg.backend_name
    if b == "deepspeed" and p.precision == "bf16_pure":
        raise PlanError("precision", "bf16_pure is not supported with DeepSpeed here (use bf16, fp16 or fp32)")
    check_optimizer(p)
    if p.grad_reduce_dtype != "default" and b in ("ddp", "pipeline", "tensor_parallel"):
        # torch DDP and the model-parallel backends reduce the gradients in the parameters' own dtype: fp32
        # under AMP (fp16/bf16 autocast over fp32 parameters), bf16 for bf16_pure
        runs = "bf16" if p.precision == "bf16_pure" else "fp32"
        if p.grad_reduce_dtype != runs:
            raise PlanError("grad_reduce_dtype", f"{p.grad_reduce_dtype}: the bundled trainer's {b} backend reduces "
                            f"the parameters' own dtype, {runs} here (allowed: default, {runs})")
    if p.sharding == "fsdp_hybrid" and (p.dp < 2 or p.dp % 2):
        raise PlanError("sharding", f"fsdp_hybrid needs an even data-parallel size >= 2 (got {p.dp})")


def check_optimizer(p: ExecutionPlan) -> None:
    """The optimizers the backends can step, as the planner's rules say (planner/bundled_rules.py OPTIMIZER_RULES):
    adafactor not on DTensor shards (tp, FSDP2), DeepSpeed's offload with adamw only."""
    from planner.bundled_rules import OPTIMIZER_RULES

    values = {k: getattr(p, k) for k in ("stack", "optimizer", "tp", "sharding", "offload")}
    for rule, message in rules.violations(values):
        if rule.name in OPTIMIZER_RULES:
            raise PlanError(rule.field, message)


def validate_plan(cfg: TrainConfig) -> None:
    """Plan knobs the bundled trainer has no implementation of (the planner models them)."""
    p = cfg.plan
    if p.stack != "bundled":
        raise PlanError("stack", f"the bundled trainer runs its own stack (allowed: bundled; got {p.stack})")
    if p.cp != 1:
        raise PlanError("cp", "the bundled trainer has no context parallelism (allowed: 1)")
    if p.cp_impl != ExecutionPlan.model_fields["cp_impl"].default:
        raise PlanError("cp_impl", f"{p.cp_impl} needs context parallelism, which the bundled trainer has not "
                        "(allowed: ring, the default, unused with cp 1)")
    for knob in ("ep", "etp"):
        if getattr(p, knob) != 1:
            raise PlanError(knob, f"{getattr(p, knob)}: the bundled trainer keeps every expert on every rank, no "
                            f"expert{' tensor' if knob == 'etp' else ''} parallelism (allowed: 1; data parallelism "
                            "and FSDP/ZeRO sharding split MoE models)")
    if p.async_tp:
        raise PlanError("async_tp", "the bundled trainer does not overlap TP collectives (allowed: false)")
    if p.activation_offload:
        raise PlanError("activation_offload", "the bundled trainer keeps checkpointed activations on the GPU "
                        "(allowed: false)")
    if p.activation_checkpointing not in ("none", "selective", "full"):
        raise PlanError("activation_checkpointing", f"{p.activation_checkpointing} is not implemented by the "
                        "bundled trainer (allowed: none, selective, full)")
    if p.precision == "fp8":
        raise PlanError("precision", "the bundled trainer has no fp8 GEMMs (allowed: fp32, fp16, bf16, bf16_pure)")
    for knob in SPLIT_KNOBS:
        if getattr(p, knob):
            raise PlanError(knob, "the bundled trainer splits the blocks evenly over the pipeline stages "
                            "(allowed: 0 / false)")
    if p.fp8_recipe != ExecutionPlan.model_fields["fp8_recipe"].default:
        raise PlanError("fp8_recipe", f"{p.fp8_recipe} needs fp8 GEMMs, which the bundled trainer has not "
                        "(allowed: tensorwise, the default, unused without fp8)")


def validate_parallel(cfg: TrainConfig) -> None:
    """tp/pp/vpp combinations the tensor- and pipeline-parallel backends run (model-free checks)."""
    p, r = cfg.plan, cfg.run
    if cfg.launch.world_size % (p.tp * p.pp):
        raise PlanError("tp" if p.tp > 1 else "pp",
                        f"tp x pp ({p.tp} x {p.pp}) must divide the world size ({cfg.launch.world_size})")
    rules.check({"tp": p.tp, "pp": p.pp, "vpp": p.vpp})  # the planner's rules: vpp needs pp
    if r.pp_schedule and p.pp == 1:
        raise PlanError("pp_schedule", "needs pp > 1")
    if r.pp_schedule in ("1f1b", "gpipe") and p.vpp > 1:
        raise PlanError("pp_schedule", f"{r.pp_schedule} runs one stage per rank: use interleaved_1f1b with vpp > 1")
    if r.pp_schedule == "interleaved_1f1b" and p.vpp == 1:
        raise PlanError("pp_schedule", "interleaved_1f1b needs vpp > 1 virtual stages per rank")
    if r.pp_schedule == "1f1b" and p.grad_accum < p.pp:
        raise PlanError("grad_accum", f"1f1b needs at least pp ({p.pp}) micro batches per step (got {p.grad_accum})")
    if p.dp * p.tp * p.pp != cfg.launch.world_size:
        raise PlanError("dp", f"dp x tp x pp ({p.dp} x {p.tp} x {p.pp}) must equal the world size "
                        f"({cfg.launch.world_size}); leave dp out to take the ranks left")
    if p.sequence_parallel != (p.tp > 1):
        raise PlanError("sequence_parallel", "the bundled trainer splits the norms exactly when tp > 1 "
                        f"(allowed: {str(p.tp > 1).lower()} with tp={p.tp})")
    if p.tp == 1 and p.pp == 1:
        return
    what = f"tp={p.tp}, pp={p.pp}"
    if r.deepspeed_config or p.sharding.startswith("zero"):
        raise PlanError("sharding", f"{what} composes with FSDP2 or none, not DeepSpeed ZeRO (use fsdp_* or none)")
    if p.tp > 1 and p.sharding == "none" and p.dp > 1:
        raise PlanError("sharding", f"{what} with dp={p.dp} needs fsdp_* (DDP cannot replicate tensor-parallel DTensors)")
    if p.offload != "none":
        raise PlanError("offload", f"not supported with {what} (allowed: none)")
    if p.compile:
        raise PlanError("compile", f"not supported with {what}")


def validate_layout(cfg: TrainConfig, spec: ModelSpec) -> None:
    """tp/pp/vpp against the model's shapes: tp must split heads and matrices, pp the layers."""
    p = cfg.plan
    if spec.moe_experts and (p.tp > 1 or p.pp > 1):
        raise PlanError("tp" if p.tp > 1 else "pp", f"tp={p.tp}, pp={p.pp}: {spec.name} is a mixture-of-experts "
                        "model, which the bundled trainer runs with data parallelism only (allowed: tp 1, pp 1 with "
                        "none, fsdp_* or zero*)")
    if spec.kv_lora_rank is not None:
        raise PlanError("model", f"{spec.name} uses multi-head latent attention (kv_lora_rank): the bundled trainer "
                        "builds standard attention only (the planner models it)")
    if spec.layer_pattern is not None:
        raise PlanError("model", f"{spec.name} has Mamba / hybrid layers (layer_pattern): the bundled trainer builds "
                        "transformer blocks only (the planner models it)")
    check_positions(p.seq_len, spec)
    # the planner's rules: tp divides the heads, pp at most the layers, pp x vpp divides them
    rules.check({"tp": p.tp, "pp": p.pp, "vpp": p.vpp}, spec=spec)
    t = p.tp
    if t > 1 and spec.qk_norm == "full":  # OLMo 2: one RMSNorm over all heads' width, which tp splits
        raise PlanError("tp", f"tp={t}: {spec.name} normalizes q and k over the full width (qk_norm full), which the "
                        "bundled trainer does not split over tensor-parallel ranks (allowed: tp 1)")
    if t > 1 and spec.parallel_block and spec.norms_per_layer == 4:
        raise PlanError("tp", f"tp={t}: a parallel block with post-norms is not implemented by the bundled trainer "
                        "(allowed: tp 1)")
    if t > 1:
        sizes = {"kv_heads": spec.kv_heads, "hidden": spec.hidden, "ffn": spec.ffn,
                 "vocab_padded": spec.vocab_padded, "seq_len": p.seq_len}
        if spec.position == "learned":
            sizes["max_positions"] = spec.max_positions
        for name, n in sizes.items():
            if n % t:
                raise PlanError("tp", f"{t} does not divide the model's {name} ({n})")


def check_positions(seq_len: int, spec: ModelSpec) -> None:
    """A learned position table has max_positions rows (trainer/model.py: nn.Embedding(max_positions, hidden)): a
    longer sequence indexes past it. Refused before any rank starts (each rank found it after the launch)."""
    if spec.position == "learned" and seq_len > spec.max_positions:
        raise PlanError("seq_len", f"--seq-len {seq_len} is longer than {spec.name}'s learned position table: "
                        f"give --seq-len at most {spec.max_positions} (its max_positions)")
