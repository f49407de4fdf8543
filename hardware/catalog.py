"""Load the hardware catalog: catalog/{gpus,clusters,models}/<id>.toml -> `Catalog`.

Directories, later ones overriding earlier ones entry by entry (same id = same file stem):
  1. the built-in `catalog` package folder,
  2. the folders in the env var PLAN_CATALOG (os.pathsep-separated),
  3. the folders passed as `extra_dirs` (the CLI's --catalog).
Each may hold gpus/, clusters/, models/, stacks/, fp8_recipes/ and links/ subfolders. A malformed file raises CatalogError
naming the file and the field. Results are cached per (dirs, file mtimes).
"""

from __future__ import annotations

import functools
import os
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from hardware.errors import CatalogError, unknown_id
from hardware.fp8 import FP8Recipe
from hardware.links import CollectiveLink
from hardware.models import GPU, Catalog, Cluster, ModelTable
from hardware.stacks import StackProfile

ENV_VAR = "PLAN_CATALOG"
KINDS = ("gpus", "clusters", "models", "stacks", "fp8_recipes", "links")


def builtin_dir() -> Path:
    import catalog  # the data package shipped with plan

    return Path(catalog.__file__).resolve().parent


def catalog_dirs(extra_dirs: Sequence[str | Path] | None = None) -> tuple[Path, ...]:
    """The catalog folders in override order (built-in first, --catalog last)."""
    if isinstance(extra_dirs, str | Path):  # one folder given bare
        extra_dirs = [extra_dirs]
    env = [p for p in os.environ.get(ENV_VAR, "").split(os.pathsep) if p.strip()]
    named = [*((Path(p).expanduser(), f"${ENV_VAR}") for p in env),
             *((Path(p).expanduser(), "--catalog") for p in (extra_dirs or ()))]
    user = [d for d, _ in named]
    for d, given in named:  # the line says where the folder was named: $PLAN_CATALOG is easily forgotten
        if not d.is_dir():
            raise CatalogError(d, "catalog", f"not a directory (named by {given})")
        if not any((d / kind).is_dir() for kind in KINDS):
            raise CatalogError(d, "catalog", f"has none of the subfolders {', '.join(KINDS)} (named by {given})")
    return (builtin_dir(), *(d.resolve() for d in user))


def load_catalog(extra_dirs: Sequence[str | Path] | None = None) -> Catalog:
    """The merged catalog of the built-in folder, PLAN_CATALOG and `extra_dirs`."""
    return _load(_stamp(catalog_dirs(extra_dirs)))


def _stamp(dirs: tuple[Path, ...]) -> tuple[tuple[str, str, int], ...]:
    """(kind, path, mtime) of every catalog file, in override order: the cache key of `_load`. Called on
    every load (the planner asks for the catalog thousands of times in a fit), so os.scandir, not pathlib."""
    stamp = []
    for d in dirs:
        for kind in KINDS:
            try:
                with os.scandir(d / kind) as it:
                    entries = sorted((e for e in it if e.name.endswith(".toml")), key=lambda e: e.name)
            except (FileNotFoundError, NotADirectoryError):
                continue
            stamp += [(kind, e.path, e.stat().st_mtime_ns) for e in entries]
    return tuple(stamp)


@functools.lru_cache(maxsize=32)
def _load(stamp: tuple[tuple[str, str, int], ...]) -> Catalog:
    tables: dict[str, dict[str, tuple[Path, dict[str, Any]]]] = {k: {} for k in KINDS}
    for kind, path_str, _ in stamp:
        path = Path(path_str)
        tables[kind][path.stem] = (path, read_table(path))  # later dirs override
    gpus = {i: _validate(GPU, p, i, t) for i, (p, t) in tables["gpus"].items()}
    clusters = {i: _validate(Cluster, p, i, t) for i, (p, t) in tables["clusters"].items()}
    for cid, cluster in clusters.items():
        if cluster.gpu not in gpus:
            err = unknown_id("gpu", cluster.gpu, gpus)
            raise CatalogError(tables["clusters"][cid][0], "gpu", err.message)
    links = {i: _validate(CollectiveLink, p, i, t) for i, (p, t) in tables["links"].items()}
    for kind, field, scope in (("gpus", "intranode_link", "intranode"), ("clusters", "internode_link", "internode")):
        for eid, entry in (gpus if kind == "gpus" else clusters).items():
            _check_link(tables[kind][eid][0], field, getattr(entry, field), scope, links)
    for gid, gpu in gpus.items():
        if gpu.nvls_link is not None:
            _check_link(tables["gpus"][gid][0], "nvls_link", gpu.nvls_link, "intranode", links)
            if links[gpu.nvls_link].algorithm != "nvls":
                raise CatalogError(tables["gpus"][gid][0], "nvls_link",
                                   f"links/{gpu.nvls_link} is a {links[gpu.nvls_link].algorithm} link, not an nvls one")
    models = {i: ModelTable(path=str(p), data=t) for i, (p, t) in tables["models"].items()}
    stacks = {i: _validate(StackProfile, p, i, t) for i, (p, t) in tables["stacks"].items()}
    recipes = {i: _validate(FP8Recipe, p, i, t) for i, (p, t) in tables["fp8_recipes"].items()}
    paths = {f"{k}/{i}": str(p) for k in KINDS for i, (p, _) in tables[k].items()}
    return Catalog(gpus=gpus, clusters=clusters, models=models, stacks=stacks, fp8_recipes=recipes, links=links,
                   paths=paths)


def _check_link(path: Path, field: str, link_id: str, scope: str, links: dict[str, CollectiveLink]) -> None:
    """A GPU's intranode_link / a cluster's internode_link must name a links/ entry of that scope."""
    if link_id not in links:
        raise CatalogError(path, field, unknown_id("link", link_id, links).message)
    if links[link_id].scope != scope:
        raise CatalogError(path, field, f"links/{link_id} is an {links[link_id].scope} link, not an {scope} one")


def read_table(path: Path) -> dict[str, Any]:
    """Parse one TOML file; its `id` key, if any, must equal the file stem (and is dropped)."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as e:
        raise CatalogError(path, "toml", f"not valid TOML ({e})") from None
    except (OSError, UnicodeDecodeError) as e:
        raise CatalogError(path, "file", f"cannot be read ({e})") from None
    given = data.pop("id", path.stem)
    if given != path.stem:
        raise CatalogError(path, "id", f"{given!r} must equal the file name {path.stem!r}")
    return data


def _validate(cls: type[BaseModel], path: Path, entry_id: str, table: dict[str, Any]) -> Any:
    try:
        return cls.model_validate({**table, "id": entry_id})
    except ValidationError as e:
        raise validation_error(path, e, cls) from None


def validation_error(path: Path | str, exc: ValidationError, cls: type[BaseModel]) -> CatalogError:
    """The first pydantic error as a one-line CatalogError naming the file and the field."""
    first = exc.errors()[0]
    field = ".".join(str(p) for p in first.get("loc", ())) or "entry"
    kind = first.get("type", "")
    if kind == "missing":
        msg = "missing required field"
    elif kind == "extra_forbidden":
        allowed = ", ".join(f for f in cls.model_fields if f != "id")
        msg = f"unknown field (allowed: {allowed})"
    else:
        msg = f"{first['msg'].removeprefix('Value error, ')} (got {first.get('input')!r})"
    return CatalogError(path, field, msg)
