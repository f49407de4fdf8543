"""`plan catalog list|show`: the GPUs, clusters, model presets and stack profiles the planner knows.

User folders (`--catalog DIR`, repeatable, or the env var PLAN_CATALOG) add or override entries.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from plan_cli import catalog_stacks
from plan_cli.common import console, handle_errors, print_json
from planner.units import format_params

KINDS = ("gpus", "clusters", "models", "stacks")

CatalogOpt = Annotated[
    list[Path] | None,
    typer.Option("--catalog", help="Extra catalog folder (gpus/, clusters/, models/, stacks/); repeatable."),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]


def register(app: typer.Typer) -> None:
    sub = typer.Typer(help="Hardware and model catalog: GPUs, clusters, model presets, stack profiles.", no_args_is_help=True)
    sub.command("list")(list_cmd)
    sub.command("show")(show_cmd)
    app.add_typer(sub, name="catalog")


@handle_errors
def list_cmd(
    kind: Annotated[str | None, typer.Option("--kind", help="gpus, clusters, models or stacks (default: all).")] = None,
    catalog: CatalogOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """List catalog entries."""
    from planner.errors import unknown

    if kind is not None and kind not in KINDS:
        raise unknown("kind", kind, tuple(KINDS))
    rows = _rows(catalog)
    kinds = (kind,) if kind else KINDS
    if json_out:
        print_json({k: rows[k] for k in kinds})
        return
    for k in kinds:
        console.print(_TABLES[k](rows[k]))


@handle_errors
def show_cmd(
    entry_id: Annotated[str, typer.Argument(metavar="ID", help="A GPU, cluster, model or stack id; or a size like 7b; or a config.json.")],
    catalog: CatalogOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Show one entry (every field, and the file it came from)."""
    shown = _find(entry_id, catalog)
    if json_out:
        print_json(shown)
        return
    if isinstance(shown, catalog_stacks.StackShown):
        for table in catalog_stacks.show_tables(shown):
            console.print(table)
        return
    table = Table(title=f"{shown['kind']} {shown['id']}", show_header=False)
    table.add_column("field", style="bold")
    table.add_column("value")
    for key, value in shown["entry"].items():
        if value is not None and value != []:
            table.add_row(key, str(value))
    table.add_row("file", str(shown["path"]))
    console.print(table)


def _rows(dirs: list[Path] | None) -> dict[str, list[dict[str, Any]]]:
    from hardware.catalog import load_catalog
    from planner.presets import list_presets

    cat = load_catalog(dirs)
    return {
        "gpus": [g.model_dump(mode="json") for g in cat.gpus.values()],
        "clusters": [c.model_dump(mode="json") for c in cat.clusters.values()],
        "models": [{"id": i, **_model_json(m)} for i, m in list_presets(dirs).items()],
        "stacks": [r.model_dump(mode="json") for r in catalog_stacks.rows(cat.stacks, cat.paths)],
    }


def _model_json(spec: Any) -> dict[str, Any]:
    from planner import moe

    # a mixture of experts: the parameters one token runs through, embeddings included (planner/moe.py)
    active = {"active_params": moe.active_params(spec)} if spec.moe_experts else {}
    return {**spec.model_dump(mode="json"), "n_params": spec.n_params, **active, "vocab_padded": spec.vocab_padded}


def _find(entry_id: str, dirs: list[Path] | None) -> dict[str, Any] | catalog_stacks.StackShown:
    from hardware.catalog import load_catalog
    from hardware.errors import CatalogError, unknown_id
    from planner.presets import resolve_model
    from planner.sizes import parse_size

    cat = load_catalog(dirs)
    for kind, entries in (("gpu", cat.gpus), ("cluster", cat.clusters)):
        if entry_id in entries:
            return {"kind": kind, "id": entry_id, "path": cat.paths[f"{kind}s/{entry_id}"],
                    "entry": entries[entry_id].model_dump(mode="json")}
    if entry_id in cat.stacks:
        return catalog_stacks.shown(entry_id, cat.stacks[entry_id], cat.paths[f"stacks/{entry_id}"])
    if entry_id in cat.models or parse_size(entry_id) is not None or entry_id.endswith(".json") or "/" in entry_id:
        spec = resolve_model(entry_id, dirs)
        path = cat.paths.get(f"models/{entry_id}", spec.source)
        return {"kind": "model", "id": entry_id, "path": path, "entry": _model_json(spec)}
    err = unknown_id("id", entry_id, [*cat.gpus, *cat.clusters, *cat.models, *cat.stacks])
    raise CatalogError(None, "id", f"{err.message}; ids of one kind: plan catalog list --kind {'|'.join(KINDS)}")


def _gpu_table(rows: list[dict[str, Any]]) -> Table:
    t = _table("GPUs", "id", "name", "HBM GiB", "HBM GB/s", "fp32", "tf32", "bf16", "fp16", "fp8", "intranode Gbps")
    for g in rows:
        t.add_row(g["id"], g["name"], _n(g["hbm_gib"]), _n(g["hbm_gbytes_per_s"]), _n(g["fp32_tflops"]),
                  _n(g["tf32_tflops"]), _n(g["bf16_tflops"]), _n(g["fp16_tflops"]), _n(g["fp8_tflops"]),
                  _n(g["intranode_gbps"]))
    t.caption = "dense peak TFLOPS (no sparsity); bandwidths per GPU, one direction"
    return t


def _cluster_table(rows: list[dict[str, Any]]) -> Table:
    t = _table("Clusters", "id", "name", "gpu", "GPUs/node", "NVLink domain", "host RAM GiB", "host-GPU Gbps",
               "internode Gbps", "cores")
    for c in rows:
        t.add_row(c["id"], c["name"], c["gpu"], str(c["gpus_per_node"]), str(c["nvlink_domain_gpus"] or c["gpus_per_node"]),
                  _n(c["host_ram_gib"]), _n(c["host_to_gpu_gbps"]), _n(c["internode_gbps"]), _n(c["cpu_cores_per_node"]))
    t.caption = "NVLink domain: GPUs sharing the fast GPU fabric (one node unless the entry says more)"
    return t


def _model_table(rows: list[dict[str, Any]]) -> Table:
    t = _table("Models", "id", "family", "params", "layers", "hidden", "heads", "kv", "ffn", "vocab", "mlp", "pos")
    for m in rows:
        t.add_row(m["id"], m["family"], format_params(m["n_params"]), str(m["n_layers"]), str(m["hidden"]),
                  str(m["n_heads"]), str(m["n_kv_heads"] or m["n_heads"]), str(m["ffn_hidden"] or 4 * m["hidden"]),
                  str(m["vocab_padded"]), m["mlp"], m["position"])
    return t


def _table(title: str, *columns: str) -> Table:
    t = Table(title=title)
    for i, col in enumerate(columns):
        t.add_column(col, justify="left" if i < 2 or col in ("gpu", "family", "mlp", "pos") else "right")
    return t


def _n(value: Any) -> str:
    return "-" if value is None else f"{value:g}"


_TABLES = {"gpus": _gpu_table, "clusters": _cluster_table, "models": _model_table, "stacks": catalog_stacks.list_table}
