"""The FastAPI app: estimate, catalog, tune (background workers) and exports.

Errors: a PlanError or catalog error is a 422 naming the field (FastAPI's own validation
errors have the same shape); an unknown catalog id or study is a 404. Mutating endpoints
(POST /tune, DELETE /tune/STUDY) and the list of studies (GET /tune) need `Authorization: Bearer $PLAN_API_TOKEN`;
with no token configured they answer 503 unless the server was started with --insecure. Bodies
over `max_body_bytes` get 413. Models are never read from the server's disk (guards.py); /tune
has limits (ranks, budget, concurrent jobs) whose 4xx answers name the limit. Storage URLs are
only ever shown with the password masked.
"""

from __future__ import annotations

import hmac
import json
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Literal

from fastapi import Depends, FastAPI, Header, HTTPException, Path as PathParam, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError

from hardware.errors import CatalogError
from hardware.models import GPU, Cluster
from hardware.stacks import StackProfile
from plan_service.guards import (LimitError, TuneLimits, check_model_ref, check_scenario, check_tune, request_settings,
                                 service_model)
from plan_service.limits import BodySizeLimit
from plan_service.models import (
    NAME_PATTERN, CatalogSummary, ErrorBody, EstimateRequest, StudyExportQuery, StudyList, TuneRequest, TuneStarted,
    TuneStatus, TuneStopping,
)
from plan_service.tune_jobs import TuneJobs, log_tail
from plan_service.web import web_router
from planner.api import EstimateReport
from planner.errors import PlanError
from planner.scenario import Scenario

Objective = Literal["tokens_per_s", "days", "cost", "memory-headroom"]
Name = Annotated[str, PathParam(pattern=NAME_PATTERN)]
ERRORS = {422: {"model": ErrorBody, "description": "invalid input, naming the field"}}


@dataclass
class ServiceConfig:
    storage: str = "sqlite:///plan-tune.db"
    workdir: Path = Path("plan-serve")
    api_token: str | None = None  # PLAN_API_TOKEN
    insecure: bool = False  # allow POST /tune without a token
    max_body_bytes: int = 64 * 1024
    catalog_dirs: list[Path] = field(default_factory=list)
    tune_limits: TuneLimits = field(default_factory=TuneLimits)
    # the planning page's days/cost curve: planner seconds one POST /ui/curve may spend (points nearest the
    # form's GPU count first; the rest come back `skipped`): a MoE model's search is ~20 s per count
    curve_budget_s: float = 30.0


def create_app(config: ServiceConfig | None = None) -> FastAPI:
    config = config or ServiceConfig()
    jobs = TuneJobs(config.storage, Path(config.workdir))

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        yield
        jobs.stop_all()  # SIGINT: each study keeps its trials and resumes on the next POST

    app = FastAPI(title="plan", version="0.1.0", lifespan=lifespan,
                  description="Capacity planner and auto-tuner for distributed LLM training.")
    app.state.config = config
    app.state.jobs = jobs
    app.add_middleware(BodySizeLimit, max_bytes=config.max_body_bytes)
    _error_handlers(app)
    app.include_router(web_router())  # the planning page at / (plan_service/web)

    def require_token(authorization: Annotated[str | None, Header()] = None) -> None:
        if config.api_token is None:
            if config.insecure:
                return
            raise HTTPException(503, "tuning over HTTP is disabled: set PLAN_API_TOKEN (or start with --insecure)")
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(token.encode(), config.api_token.encode()):
            raise HTTPException(401, "missing or wrong bearer token", headers={"WWW-Authenticate": "Bearer"})

    @app.post("/estimate", response_model=EstimateReport, responses=ERRORS)
    def estimate(req: EstimateRequest, objective: Objective = "tokens_per_s",
                 top: Annotated[int, Query(ge=1, le=100)] = 10) -> EstimateReport:
        """Rank the plans of a scenario (blank knobs = the planner chooses), best first.

        `model` is a preset id or a size, or give the architecture columns, or the config.json
        body as `hf_config` (no paths); sizes are bounded (422 past a bound). The `moe_*` fields are
        `plan estimate`'s MoE flags, and `recompute_norms_mla_up` / `fp8_activation_cache` /
        `optimizer_moments_bf16` its memory-saving switches, refused (422 naming the field) where the CLI refuses them."""
        from planner import api

        from planner import memory_recipe
        from planner.moe_options import FIELDS
        from planner.stack_pins import pinned_dead_end

        recipe_fields = set(memory_recipe.FIELDS)
        scenario = Scenario(**req.model_dump(exclude={"hf_config", *FIELDS, *recipe_fields}, exclude_unset=True))
        settings = request_settings(req)
        check_scenario(scenario)
        cat = _catalog(config)
        spec = service_model(scenario, req.hf_config, cat, config.catalog_dirs)
        report = api.estimate(scenario, catalog=cat, settings=settings, objective=objective, top=top,
                              include_rejected=True, spec=spec)
        if (why := pinned_dead_end(report, cat.stacks)) is not None:
            raise why  # the pinned knobs rule out every plan: 422 with `plan estimate`'s exit-2 line
        return report

    @app.get("/catalog", response_model=CatalogSummary)
    def catalog() -> CatalogSummary:
        cat = _catalog(config)
        return CatalogSummary(gpus=cat.gpus, clusters=cat.clusters, models=sorted(cat.models), stacks=cat.stacks)

    @app.get("/catalog/gpus/{gpu_id}", response_model=GPU, responses={404: {"model": ErrorBody}})
    def catalog_gpu(gpu_id: Name) -> GPU:
        return _entry(_catalog(config).gpus, "gpu", gpu_id)

    @app.get("/catalog/clusters/{cluster_id}", response_model=Cluster, responses={404: {"model": ErrorBody}})
    def catalog_cluster(cluster_id: Name) -> Cluster:
        return _entry(_catalog(config).clusters, "cluster", cluster_id)

    @app.get("/catalog/stacks/{stack_id}", response_model=StackProfile, responses={404: {"model": ErrorBody}})
    def catalog_stack(stack_id: Name) -> StackProfile:
        return _entry(_catalog(config).stacks, "stack", stack_id)

    @app.post("/tune", status_code=202, response_model=TuneStarted, dependencies=[Depends(require_token)],
              responses={**ERRORS, 401: {"model": ErrorBody}, 409: {"model": ErrorBody},
                         429: {"model": ErrorBody}, 503: {"model": ErrorBody}})
    def tune(req: TuneRequest) -> TuneStarted:
        """Start a tuning study in a background worker; returns its name at once.

        Limits (422/429 naming the limit): ranks <= the server's devices (max_tune_ranks),
        budget_s <= max_tune_budget_s, at most max_tune_jobs studies running at once."""
        from planner.resolve import resolve_model

        check_model_ref(req.model, _catalog(config))  # a preset or a size, never a path
        # a bad model, or a seq_len past its learned positions, is a 422 now, not a worker that fails at once
        resolve_model(Scenario(model=req.model, seq_len=req.seq_len))
        check_tune(req.gpus, req.budget_s, app.state.jobs.running(), config.tune_limits)
        try:
            name = app.state.jobs.start(req)
        except PlanError as e:
            if e.field == "study":
                raise HTTPException(409, str(e)) from None
            raise
        # a DeepSpeed study's winner is always a DeepSpeed config (none: ZeRO stage 0); an FSDP (or any) study's may be
        # plain data parallel (sharding none) or a ZeRO plan, which no FSDP settings file writes: /best picks the format
        fmt = "deepspeed" if req.backend == "deepspeed" else "best"
        return TuneStarted(study=name, status_url=f"/tune/{name}", export_url=f"/export/{name}/{fmt}")

    @app.get("/tune", response_model=StudyList, dependencies=[Depends(require_token)],
             responses={401: {"model": ErrorBody}, 503: {"model": ErrorBody}})
    def tune_list() -> StudyList:
        """The studies of the server's storage (authenticated callers only)."""
        from tuner.storage import masked_url
        from tuner.study_store import list_studies

        return StudyList(storage=masked_url(config.storage), studies=list_studies(config.storage))

    @app.get("/tune/{study}", response_model=TuneStatus, responses={404: {"model": ErrorBody}})
    def tune_status(study: Name) -> TuneStatus:
        """A study's state: its worker's (running; finished: it stopped by its own rule; interrupted: stopped by
        a signal or the server stopping, resumable; failed), the one line why, trials and best so far."""
        job = app.state.jobs.get(study)
        report = _report(study, config.storage, job=job)
        if job is None and report is None:
            raise HTTPException(404, f"no study {study!r} on this server or in its storage")
        if job is None:
            return TuneStatus(study=study, status="stored", report=report)
        from tuner.storage import scrub

        status, code, why, stopped_by, stop_reason = job.ended()
        now = job.phase() if status == "running" else None  # what the worker says it is doing (tune_jobs.PHASE)
        return TuneStatus(study=study, status=status, exit_code=code, report=report,
                          phase=now["phase"] if now else None, doing=now["doing"] if now else None,
                          phase_s=round(now["for_s"], 1) if now else None,
                          why=scrub(why, config.storage) if why else None, stopped_by=stopped_by,
                          stop_reason=stop_reason,
                          resume=f"POST /tune with study {study!r}" if status == "interrupted" else None,
                          log_tail=scrub(log_tail(job.log_path), config.storage) if status in ("failed", "interrupted")
                          else None)

    @app.delete("/tune/{study}", status_code=202, response_model=TuneStopping, dependencies=[Depends(require_token)],
                responses={401: {"model": ErrorBody}, 404: {"model": ErrorBody}, 409: {"model": ErrorBody},
                           503: {"model": ErrorBody}})
    def tune_stop(study: Name, request: Request) -> TuneStopping:
        """Stop a running study's worker (this server's, or one an earlier server of this workdir left running, e.g.
        after a `kill -9` of the server, when its pid is still that worker): SIGTERM, as `kill` does. The running
        trial is killed and queued again; GET /tune/STUDY reads interrupted once the worker has stopped, and
        POST /tune with the same study resumes it. 409 when it is not running, 404 when this server has no job."""
        job = app.state.jobs.get(study)
        if job is None:
            stored = _report(study, config.storage) is not None
            raise HTTPException(409 if stored else 404, f"study {study!r} has no worker of this server's workdir: "
                                "nothing to stop" if stored else f"no study {study!r} on this server or in its storage")
        from plan_service.tune_jobs import NotRunning

        # who asks, for the study's line once it has stopped: the page says it is the page (X-Plan-Client: page)
        by = "the page's Stop" if request.headers.get("x-plan-client") == "page" else f"DELETE /tune/{study}"
        try:
            job.stop(by + (f" from {request.client.host}" if request.client else ""))
        except NotRunning as e:
            state, _, why = job.state()
            raise HTTPException(409, f"{e.message} (it is {state}{': ' + why if why else ''})") from None
        return TuneStopping(study=study, pid=job.pid, status_url=f"/tune/{study}",
                            why=f"SIGTERM sent to its worker (pid {job.pid}): it kills the running trial and keeps the "
                                f"study; GET /tune/{study} reads interrupted once it has stopped; POST /tune with the "
                                "same study resumes it")

    @app.get("/export/{study}/deepspeed", responses={**ERRORS, 404: {"model": ErrorBody}})
    def export_deepspeed(study: Name, query: Annotated[StudyExportQuery, Query()]) -> dict:
        """The DeepSpeed JSON config of a study's best trial.

        `recompute_norms_mla_up` / `fp8_activation_cache` / `optimizer_moments_bf16` are `plan export
        --from-study`'s memory-saving switches: refused (422 naming the switch) as the CLI refuses them."""
        return _study_export("deepspeed", study, query, config.storage)

    @app.get("/export/{study}/fsdp", responses={**ERRORS, 404: {"model": ErrorBody}})
    def export_fsdp(study: Name, query: Annotated[StudyExportQuery, Query()]) -> dict:
        """The FSDP2 settings JSON of a study's best trial (`plan export fsdp --from-study`: the file an FSDP
        trial ran from; a DeepSpeed winner is refused as the CLI refuses it). Same switches as /deepspeed."""
        return _study_export("fsdp", study, query, config.storage)

    @app.get("/export/{study}/best", responses={**ERRORS, 404: {"model": ErrorBody}})
    def export_best(study: Name, query: Annotated[StudyExportQuery, Query()], response: Response) -> dict:
        """The best trial's JSON in the format that writes it (tuner/report.py export_format_of): FSDP settings for an
        FSDP winner, else a DeepSpeed config (a plain data-parallel winner as ZeRO stage 0); the format in the
        X-Plan-Export-Format header and its own URL in Content-Location. Same switches as /deepspeed."""
        from tuner.report import chosen_from_study, export_format_of
        from tuner.study_store import UnknownStudy

        try:
            fmt = export_format_of(chosen_from_study(study, config.storage, list_studies=False).plan)
        except UnknownStudy as e:
            raise HTTPException(404, str(e)) from None
        response.headers["X-Plan-Export-Format"] = fmt
        response.headers["Content-Location"] = f"/export/{study}/{fmt}"
        return _study_export(fmt, study, query, config.storage)

    @app.get("/export/{study}/{fmt}", responses={404: {"model": ErrorBody}}, include_in_schema=False)
    def export_other(study: Name, fmt: str) -> dict:
        """A format the service does not serve: a 404 saying which it serves (it was a bare 'Not Found')."""
        raise HTTPException(404, f"no export format {fmt!r} over HTTP: /export/STUDY/deepspeed, "
                            f"/export/STUDY/fsdp or /export/STUDY/best (the winner's, JSON); the other formats are files: plan export FORMAT --from-study "
                            "STUDY")

    return app


def _error_handlers(app: FastAPI) -> None:
    def body(loc: list, msg: str, kind: str) -> dict:
        return {"detail": [{"loc": loc, "msg": msg, "type": kind}]}

    @app.exception_handler(PlanError)
    async def plan_error(request: Request, e: PlanError):
        if isinstance(e, LimitError):
            return JSONResponse(body(["body", e.field], e.message, "limit_error"), status_code=e.status)
        return JSONResponse(body(["body", e.field], e.message, "plan_error"), status_code=422)

    @app.exception_handler(CatalogError)
    async def catalog_error(request: Request, e: CatalogError):
        return JSONResponse(body(["body", e.field], e.message, "catalog_error"), status_code=422)

    @app.exception_handler(ValidationError)
    async def validation_error(request: Request, e: ValidationError):
        first = e.errors()[0]
        return JSONResponse(body(["body", *first.get("loc", ())], first["msg"], first["type"]), status_code=422)

    @app.exception_handler(RequestValidationError)
    async def request_error(request: Request, e: RequestValidationError):
        # FastAPI's shape, minus the echoed input (which may be large or not JSON-safe)
        detail = [{"loc": list(err.get("loc", ())), "msg": _hinted(request, err), "type": err["type"]}
                  for err in e.errors()]
        if (not_json := _not_a_json_object(request, e.errors())) is not None:
            return JSONResponse(body(["body"], *not_json[:2]), status_code=not_json[2])
        return JSONResponse({"detail": detail}, status_code=422)


def _not_a_json_object(request: Request, errors: list[dict]) -> tuple[str, str, int] | None:
    """A body that is not a JSON object as a whole (`curl -d 'a=b'` sends a form without a JSON content type):
    what the endpoint takes (was pydantic's "Input should be a valid dictionary or object to extract fields
    from"); 415 for another content type, 422 for JSON that is not an object. None: field-level errors."""
    whole = [err for err in errors if list(err.get("loc", ())) == ["body"]]
    if not whole or whole[0]["type"] not in ("model_attributes_type", "dict_type", "missing"):
        return None
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    takes = "this endpoint takes a JSON object (Content-Type: application/json; curl: -H 'Content-Type: " \
            "application/json' -d '{...}', or --json '{...}')"
    if whole[0]["type"] == "missing":
        return f"no body: {takes}", "body_missing", 422
    if kind != "application/json" and not kind.endswith("+json"):
        return f"{takes}; got Content-Type: {kind or 'none'}", "unsupported_media_type", 415
    return f"{takes}; got JSON that is not an object", "not_an_object", 422


def _hinted(request: Request, err: dict) -> str:
    """pydantic's message; for a field the body's model does not have ("budget" for POST /tune's budget_s),
    the closest fields it has."""
    from planner.errors import closest

    loc = list(err.get("loc", ()))
    if err["type"] != "extra_forbidden" or len(loc) != 2 or loc[0] != "body":
        return err["msg"]
    field = getattr(request.scope.get("route"), "body_field", None)
    model = getattr(field, "type_", None) or getattr(getattr(field, "field_info", None), "annotation", None)
    names = list(getattr(model, "model_fields", {}))
    close = closest(str(loc[1]), names) if names else []
    return err["msg"] + (f"; did you mean {', '.join(close)}?" if close else "")


def _study_export(fmt: str, study: str, query: StudyExportQuery, storage: str) -> dict:
    """A study's best trial in a JSON format, by `plan export FORMAT --from-study`'s own functions."""
    from planner.exports.bundle import ExportOptions, export
    from planner.memory_recipe import FIELDS as RECIPE_FIELDS, MemoryRecipe

    from tuner.report import chosen_from_study
    from tuner.study_store import UnknownStudy

    try:  # no completed trial yet: a PlanError, 422
        chosen = chosen_from_study(study, storage, list_studies=False)
    except UnknownStudy as e:
        raise HTTPException(404, str(e)) from None
    memory = MemoryRecipe(**query.model_dump(include=set(RECIPE_FIELDS)))
    result = export(fmt, chosen.model_copy(update={"memory": memory}), ExportOptions(target=query.target))
    return json.loads(result.files[0].content)


def _catalog(config: ServiceConfig):
    from hardware.catalog import load_catalog

    return load_catalog(config.catalog_dirs)


def _entry(table: dict, kind: str, entry_id: str):
    if entry_id not in table:
        from hardware.errors import unknown_id

        raise HTTPException(404, unknown_id(kind, entry_id, table).message)
    return table[entry_id]


def _report(study: str, storage: str, job=None) -> dict | None:
    """The study's report; with its `job`, `this_run`: the job's worker's trials (by the worker id it was started
    with) apart from the study's totals (a resumed study's counts include every earlier run's). A job an older
    server started has no worker id: no `this_run` (the study's totals only)."""
    from tuner import build_report, load
    from tuner.report import run_summary, worker_trials

    try:
        st = load(study, storage, list_studies=False)
        this_run = None
        if job is not None and job.worker_id:  # re-measurements are not trials: only the worker's report counts them
            this_run = run_summary(st, worker_trials(st, job.worker_id))
            this_run.pop("remeasurements")
        return build_report(st, storage, this_run=this_run).model_dump(mode="json")
    except PlanError:
        return None
