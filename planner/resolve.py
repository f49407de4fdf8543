"""From a `Scenario` to the model and the system it names (catalog look-ups and overrides)."""

from __future__ import annotations

from pydantic import ValidationError

from hardware.catalog import load_catalog
from hardware.models import Catalog, Cluster
from planner import parallel_block
from planner.errors import PlanError, unknown
from planner.model import LLAMA_BLOCK, ModelSpec
from planner.scenario import Scenario
from planner.system import System

# A scenario that names neither a cluster nor a GPU runs on this catalog entry.
DEFAULT_CLUSTER = "dgx-a100"

_ARCH_COLUMNS = ("n_layers", "hidden", "n_heads", "n_kv_heads", "ffn_hidden", "vocab", "mlp", "parallel_block",
                 "attn_window", "attn_local_layers",
                 "moe_experts", "moe_top_k", "moe_ffn_hidden", "moe_shared_experts", "moe_shared_ffn_hidden",
                 "moe_layer_freq", "moe_first_dense_layers")


def resolve_model(scenario: Scenario, extra_dirs=None, base: ModelSpec | None = None) -> ModelSpec:
    """The model of a scenario: `model` (preset, size or config.json), then architecture columns.

    `base`: a model already built (an inline config.json body) that the columns override."""
    overrides = {k: getattr(scenario, k) for k in _ARCH_COLUMNS if getattr(scenario, k) is not None}
    if overrides.get("attn_window") == 0:  # 0: full causal attention on every layer
        overrides.update(attn_window=None, attn_local_layers=None, attn_chunked=False)
    if base is not None:
        spec = _rebuild(base, overrides) if overrides else base
    elif scenario.model:
        from planner.presets import resolve_model as from_ref

        spec = from_ref(scenario.model, extra_dirs=extra_dirs)
        if overrides:
            spec = _rebuild(spec, overrides)
    else:
        missing = [k for k in ("n_layers", "hidden", "n_heads", "vocab") if k not in overrides]
        if missing:
            raise PlanError("model", "give a preset, a size such as 7b, a config.json path, "
                            f"or the architecture columns (missing: {', '.join(missing)})")
        base = ModelSpec(name="custom", n_layers=1, hidden=64, n_heads=1, vocab=1,
                         vocab_multiple=128, max_positions=scenario.seq_len or 2048)
        block = LLAMA_BLOCK if scenario.mlp == "swiglu" else {}
        spec = _rebuild(base, {**block, **overrides})
    if scenario.seq_len and scenario.seq_len > spec.max_positions and spec.position == "learned":
        raise PlanError("seq_len", f"{scenario.seq_len} exceeds the model's {spec.max_positions} "
                        f"learned positions (allowed: <= {spec.max_positions}; longer sequences need rotary "
                        "positions: a preset such as llama2-7b or a config.json)")
    return spec


def _rebuild(spec: ModelSpec, overrides: dict) -> ModelSpec:
    fields = {**spec.model_dump(), **overrides, "published_params": None}
    fields.update(parallel_block.switched(fields, overrides.get("parallel_block")))
    try:
        return ModelSpec(**fields)
    except ValidationError as e:  # pydantic validation of the combined shape
        first = e.errors()[0]
        msg = first["msg"].removeprefix("Value error, ")
        # a check across fields ("moe_top_k (20) must be between ...") names the override it starts with
        named = next((k for k in overrides if msg.startswith(f"{k} ")), "model")
        field = ".".join(str(p) for p in first.get("loc", ())) or named
        raise PlanError(field, msg) from None


def seq_len_of(scenario: Scenario, spec: ModelSpec) -> int:
    """The scenario's seq_len, else the context the model was pretrained at, else its maximum positions."""
    return scenario.seq_len or spec.train_seq_len or spec.max_positions


def seq_len_rule(scenario: Scenario, spec: ModelSpec) -> str:
    """Where `seq_len_of` took the sequence length from (said in the report)."""
    if scenario.seq_len:
        return "pinned (seq_len)"
    if spec.train_seq_len:
        return (f"the context the model was pretrained at (train_seq_len {spec.train_seq_len:,}; its maximum is "
                f"{spec.max_positions:,})")
    return f"the model's maximum positions (max_positions {spec.max_positions:,})"


def resolve_system(scenario: Scenario, catalog: Catalog | None = None) -> System:
    """The GPUs, nodes and network of a scenario: a cluster entry, a GPU entry, overrides."""
    catalog = catalog or load_catalog()
    cluster = _pick_cluster(scenario, catalog)
    if scenario.gpu is not None and scenario.gpu not in catalog.gpus:
        raise unknown("gpu", scenario.gpu, catalog.gpus)
    gpu = catalog.gpus[scenario.gpu or cluster.gpu]
    per_node = scenario.gpus_per_node or cluster.gpus_per_node
    gpus = scenario.gpus or per_node
    if gpus < per_node:
        per_node = gpus
    elif gpus % per_node:
        raise PlanError("gpus", f"{gpus} is not a multiple of gpus_per_node ({per_node}); "
                        "use whole nodes or set gpus_per_node")
    return System(
        gpu=gpu,
        cluster_id=cluster.id if cluster.gpu == gpu.id else None,
        gpus=gpus,
        gpus_per_node=per_node,
        host_ram_gib=cluster.host_ram_gib,
        host_to_gpu_gbps=cluster.host_to_gpu_gbps,
        intranode_gbps=cluster.intranode_gbps or gpu.intranode_gbps,
        internode_gbps=scenario.internode_gbps or cluster.internode_gbps,
        # a bandwidth given by hand describes another network: the default NCCL efficiency then
        internode_efficiency=None if scenario.internode_gbps else cluster.internode_collective_efficiency,
        intranode_link=catalog.links[gpu.intranode_link],
        nvls_link=catalog.links[gpu.nvls_link] if gpu.nvls_link else None,
        internode_link=catalog.links[cluster.internode_link],
        unified_memory=cluster.unified_memory,
    )


def _pick_cluster(scenario: Scenario, catalog: Catalog) -> Cluster:
    if scenario.cluster is not None:
        if scenario.cluster not in catalog.clusters:
            raise unknown("cluster", scenario.cluster, catalog.clusters)
        cluster = catalog.clusters[scenario.cluster]
        if scenario.gpu is not None and scenario.gpu != cluster.gpu:
            raise PlanError("gpu", f"cluster {cluster.id} has {cluster.gpu} GPUs, not {scenario.gpu}")
        return cluster
    if scenario.gpu is None:
        return catalog.clusters[DEFAULT_CLUSTER]
    # A bare GPU: borrow the node and network of the first catalog cluster with that GPU
    # (DGX-style entries first), else the default cluster's.
    same = sorted((c for c in catalog.clusters.values() if c.gpu == scenario.gpu),
                  key=lambda c: (not c.id.startswith("dgx"), c.id))
    return same[0] if same else catalog.clusters[DEFAULT_CLUSTER]
