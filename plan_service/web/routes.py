"""The planning page's routes: `/` (the page), `/ui/static/*` (its JS and CSS, plotly.js from the
plotly package itself: nothing fetched from a CDN), and the JSON and download endpoints the page
calls. Tuning starts through the service's own `POST /tune` (same bearer token) and its progress
comes from `GET /tune/{study}`; this adds only the per-trial rows the page plots.
"""

from __future__ import annotations

import json
import logging
import tempfile
import time
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, Literal

from fastapi import APIRouter, HTTPException, Path as PathParam, Request
from fastapi.responses import FileResponse, HTMLResponse, Response
from pydantic import ConfigDict, Field

from plan_service.guards import request_settings
from plan_service.models import NAME_PATTERN
from plan_service.web import views
from planner.errors import PlanError
from planner.memory_recipe import FIELDS as RECIPE_FIELDS, MemoryRecipe
from planner.moe_options import FIELDS as MOE_FIELDS, MoeOptions
from planner.scenario import Scenario

STATIC = Path(__file__).resolve().parent / "static"
DEFAULT_DASHBOARD_URL = "http://127.0.0.1:8080"
EXPORT_MEDIA = {"deepspeed": "application/json", "accelerate": "application/yaml",
                "slurm": "text/x-shellscript", "torchrun": "text/x-shellscript"}


class PageScenario(MoeOptions, MemoryRecipe):
    """The page's form: a model (preset or size, or an uploaded config.json's content), the
    system, the batch and what to train. Quantities may be written as on the CLI (100B, 4M). The MoE
    settings and memory-saving switches are POST /estimate's fields, checked by the same code."""

    model_config = ConfigDict(extra="forbid", frozen=False)

    model: str | None = Field(default=None, description="preset id or size; ignored when `config` is given")
    config: dict[str, Any] | None = Field(default=None, description="a Hugging Face config.json's content")
    config_name: str = Field(default="config.json", pattern=NAME_PATTERN)
    cluster: str | None = None
    gpu: str | None = None
    gpus: int | None = Field(default=None, ge=1)
    seq_len: int | None = Field(default=None, ge=1)
    global_batch: int | None = Field(default=None, ge=1)
    global_batch_tokens: str | None = None
    tokens: str | None = None
    price_per_gpu_hour: float | None = Field(default=None, ge=0)
    objective: Literal["tokens_per_s", "days", "cost", "memory-headroom"] = "tokens_per_s"
    top: int = Field(default=10, ge=1, le=50)


class ExportRequest(PageScenario):
    rank: int = Field(default=1, ge=1, le=50, description="which ranked plan to export")


def web_router() -> APIRouter:
    router = APIRouter(include_in_schema=False)

    @router.get("/", response_class=HTMLResponse)
    def page() -> HTMLResponse:
        return HTMLResponse(_static_text("index.html"))

    @router.get("/ui/static/plotly.min.js")
    def plotly_js() -> FileResponse:
        return FileResponse(_plotly_js_path(), media_type="text/javascript",
                            headers={"Cache-Control": "public, max-age=86400"})

    @router.get("/ui/static/{name}")
    def static(name: Annotated[str, PathParam(pattern=r"^[a-z]+\.(js|css)$")]) -> Response:
        path = STATIC / name
        if not path.is_file():
            raise HTTPException(404, f"no static file {name!r}")
        return FileResponse(path, media_type="text/javascript" if name.endswith(".js") else "text/css")

    @router.get("/ui/moe-models", response_model=list[str])
    def moe_models(request: Request) -> list[str]:
        """The presets with experts: the page shows its MoE settings for these (and for uploaded configs)."""
        return _moe_presets(tuple(request.app.state.config.catalog_dirs or ()))

    @router.post("/ui/estimate", response_model=views.PageReport)
    def estimate(req: PageScenario, request: Request) -> views.PageReport:
        from planner import api

        from planner.stack_pins import pinned_dead_end

        with _FormScenario(req, request) as scenario:
            catalog = _catalog(request)
            report = api.estimate(scenario, catalog=catalog, objective=req.objective,
                                  top=req.top, include_rejected=True, settings=request_settings(req))
        if (why := pinned_dead_end(report, catalog.stacks)) is not None:
            raise why  # 422 with `plan estimate`'s exit-2 line, as POST /estimate
        return views.page_report(report)

    @router.post("/ui/curve", response_model=list[views.CurvePoint])
    async def curve(req: PageScenario, request: Request) -> list[views.CurvePoint]:
        """The best plan's days, cost and tokens/s at whole-node GPU counts around the form's. Each count is
        planned in the thread pool; the counts left are skipped once the page has gone (a newer plan aborts
        this request, or the tab closed): a MoE model's count is seconds of CPU nobody would see."""
        from starlette.concurrency import run_in_threadpool

        from planner import api
        from planner.resolve import resolve_system

        def best_at(scenario: Scenario, n: int, catalog, settings):
            try:
                return api.estimate(scenario.model_copy(update={"gpus": n}), catalog=catalog,
                                    objective=req.objective, top=1, settings=settings)
            except PlanError:  # e.g. a pinned batch that this count cannot divide
                return None

        catalog = await run_in_threadpool(_catalog, request)
        settings = request_settings(req)
        budget_s = request.app.state.config.curve_budget_s
        points, started, gone = [], time.monotonic(), False
        form = await run_in_threadpool(_FormScenario, req, request)
        with form as scenario:
            system = await run_in_threadpool(resolve_system, scenario, catalog)
            counts = views.curve_gpu_counts(system.gpus, system.gpus_per_node)
            for n in views.curve_order(counts, system.gpus):
                gone = gone or (bool(points) and await request.is_disconnected())
                if points and (gone or time.monotonic() - started > budget_s):  # the form's own count: always
                    points.append(views.CurvePoint(gpus=n, fits=False, skipped=True))
                    continue
                points.append(views.curve_point(n, await run_in_threadpool(best_at, scenario, n, catalog, settings)))
        if gone:
            logging.getLogger("uvicorn.error").info(
                "POST /ui/curve: the page has gone; %d of %d GPU counts planned", sum(not p.skipped for p in points),
                len(points))
        return sorted(points, key=lambda p: p.gpus)

    @router.post("/ui/export/{fmt}")
    def export(fmt: Literal["deepspeed", "accelerate", "slurm", "torchrun"], req: ExportRequest,
               request: Request) -> Response:
        """One file of `plan export` for the plan at `rank`, as a download."""
        from planner import api
        from planner.exports.bundle import Chosen, export as render, refusal_of

        with _FormScenario(req, request) as scenario:
            report = api.estimate(scenario, catalog=_catalog(request), objective=req.objective, top=req.rank,
                                  settings=request_settings(req))
        if len(report.results) < req.rank or not report.results[req.rank - 1].fits:
            raise PlanError("rank", f"there is no fitting plan at rank {req.rank} ({report.fitting} fit)")
        est = report.results[req.rank - 1]
        pinned_mp = est.plan.tp > 1 or est.plan.pp > 1  # the page asks for this plan, as pinned
        refusal = refusal_of(fmt, est.plan, report.system, allow_model_parallel=pinned_mp)
        if refusal is not None:
            raise PlanError(refusal.field, f"plan #{req.rank} cannot be written as {fmt}: {refusal.message}")
        model_ref = req.config_name if req.config is not None else (req.model or report.model.name)
        chosen = Chosen(plan=est.plan, model_ref=model_ref, model=report.model, system=report.system,
                        step_time_s=est.time.step_time_s if est.time else None, tokens=scenario.tokens,
                        source=f"plan serve page, rank {req.rank} of {report.fitting} fitting",
                        moe=MoeOptions(**req.model_dump(include=set(MOE_FIELDS))),
                        memory=MemoryRecipe(**req.model_dump(include=set(RECIPE_FIELDS))),
                        stack_profile=_catalog(request).stacks.get(est.plan.stack))
        first = render(fmt, chosen).files[0]
        return Response(first.content, media_type=EXPORT_MEDIA[fmt],
                        headers={"Content-Disposition": f'attachment; filename="{first.name}"'})

    @router.get("/ui/tune/{study}/trials")
    def tune_trials(study: Annotated[str, PathParam(pattern=NAME_PATTERN)], request: Request) -> dict:
        """A study's trials (predicted vs measured tokens/s) and where optuna-dashboard shows it."""
        import math

        from tuner import load
        from tuner.report import trials_frame
        from tuner.storage import masked_url
        from tuner.study_store import study_id

        storage = request.app.state.config.storage
        try:
            st = load(study, storage, list_studies=False)  # study names: authenticated callers only
        except PlanError as e:
            raise HTTPException(404, str(e)) from None
        rows = trials_frame(st).to_dict(orient="records")
        clean = [{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()} for r in rows]
        base = getattr(request.app.state, "dashboard_url", None) or DEFAULT_DASHBOARD_URL
        return {"study": study, "trials": clean,
                "dashboard_url": f"{base.rstrip('/')}/dashboard/studies/{study_id(storage, study)}",
                "dashboard_command": f"optuna-dashboard {masked_url(storage)}"}

    return router


@lru_cache(maxsize=None)
def _static_text(name: str) -> str:
    return (STATIC / name).read_text(encoding="utf-8")


@lru_cache(maxsize=1)
def _plotly_js_path() -> Path:
    """plotly.js as the plotly Python package ships it (package_data/plotly.min.js)."""
    import plotly

    path = Path(plotly.__file__).resolve().parent / "package_data" / "plotly.min.js"
    if not path.is_file():
        raise HTTPException(500, f"the plotly package has no bundled plotly.min.js at {path}")
    return path


@lru_cache(maxsize=8)
def _moe_presets(catalog_dirs: tuple) -> list[str]:
    from planner import moe
    from planner.presets import list_presets

    return sorted(name for name, spec in list_presets(list(catalog_dirs) or None).items() if moe.is_moe(spec))


def _catalog(request: Request):
    from plan_service.app import _catalog as service_catalog

    return service_catalog(request.app.state.config)


class _FormScenario:
    """The form as a `Scenario`, checked as `POST /estimate` checks one; an uploaded config is
    written to a private temporary folder for the time of the request (the server's own files
    are never named by a client)."""

    def __init__(self, req: PageScenario, request: Request):
        from plan_service.guards import check_model_ref, check_scenario
        fields = {k: getattr(req, k) for k in ("cluster", "gpu", "gpus", "seq_len", "global_batch",
                                               "global_batch_tokens", "tokens", "price_per_gpu_hour")}
        fields = {k: v for k, v in fields.items() if v not in (None, "")}
        self.config, self.name = req.config, req.config_name
        self.scenario = Scenario(model=None if req.config is not None else req.model, **fields)
        check_scenario(self.scenario)
        if self.config is None and not req.model:
            raise PlanError("model", "choose a preset or a size, or upload a config.json")
        if self.config is None:
            check_model_ref(req.model, _catalog(request))  # never a path on the server
        self.tmp: tempfile.TemporaryDirectory | None = None

    def __enter__(self) -> Scenario:
        if self.config is None:
            return self.scenario
        self.tmp = tempfile.TemporaryDirectory(prefix="plan-page-")
        folder = Path(self.tmp.name) / self.name.removesuffix(".json")  # the model's name
        folder.mkdir()
        self.path = folder / "config.json"
        self.path.write_text(json.dumps(self.config), encoding="utf-8")
        return self.scenario.model_copy(update={"model": str(self.path)})

    def __exit__(self, kind, error, tb) -> None:
        if self.tmp is not None:
            self.tmp.cleanup()
        if isinstance(error, PlanError) and self.tmp is not None:  # name the upload, not the temp file
            raise PlanError(error.field, error.message.replace(str(self.path), self.name)) from None
