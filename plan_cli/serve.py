"""`plan serve`: the HTTP API (FastAPI under uvicorn). OpenAPI at /openapi.json, docs at /docs."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Optional

import typer

from plan_cli.common import err_console, handle_errors

Opt = typer.Option


def register(app: typer.Typer) -> None:
    app.command("serve")(serve)


@handle_errors
def serve(
    host: Annotated[str, Opt(help="Interface to bind (keep 127.0.0.1 unless behind a proxy)")] = "127.0.0.1",
    port: Annotated[int, Opt(min=0, max=65535)] = 8000,
    storage: Annotated[str, Opt(help="Optuna storage URL for POST /tune studies")] = "sqlite:///plan-tune.db",
    workdir: Annotated[Path, Opt(help="Where tuning workers keep configs, logs and trial files")] = Path("plan-serve"),
    max_body_kib: Annotated[int, Opt(min=1, help="Request bodies above this get 413")] = 64,
    insecure: Annotated[bool, Opt(help="Allow POST /tune without PLAN_API_TOKEN (local use only)")] = False,
    catalog: Annotated[Optional[list[Path]], Opt(help="Extra catalog folder(s)")] = None,
    dashboard_url: Annotated[str, Opt(help="Where optuna-dashboard serves --storage (the page links studies there)")]
    = "http://127.0.0.1:8080",
    max_tune_ranks: Annotated[Optional[int], Opt(min=1, help="POST /tune: most ranks (default: this machine's devices)")] = None,
    max_tune_budget: Annotated[str, Opt(help="POST /tune: longest budget (e.g. 24h; at most 7d, plan tune's)")] = "24h",
    max_tune_jobs: Annotated[int, Opt(min=1, help="POST /tune: studies running at once")] = 2,
    curve_budget_s: Annotated[float, Opt(min=0, help="The page's days/cost curve: planner seconds per request "
                                         "(counts nearest the form's first; the rest are skipped)")] = 30.0,
) -> None:
    """Serve the planner over HTTP: the planning page at /, POST /estimate, GET /catalog, POST /tune, GET /export/..."""
    import uvicorn

    from plan_service import ServiceConfig, create_app
    from plan_service.guards import TuneLimits

    limits = TuneLimits(max_ranks=max_tune_ranks, max_budget_s=tune_budget_cap(max_tune_budget), max_jobs=max_tune_jobs)
    token = os.environ.get("PLAN_API_TOKEN") or None
    if token is None and not insecure:
        err_console.print("note: PLAN_API_TOKEN is not set: POST /tune answers 503 (use --insecure to allow it)",
                          highlight=False)
    config = ServiceConfig(storage=storage, workdir=workdir, api_token=token, insecure=insecure,
                           max_body_bytes=max_body_kib * 1024, catalog_dirs=list(catalog or []),
                           tune_limits=limits, curve_budget_s=curve_budget_s)
    sock = listening_socket(host, port)  # before the app starts: a port in use is a one-line error
    app = create_app(config)
    app.state.dashboard_url = dashboard_url
    bound = sock.getsockname()[1]  # --port 0: the port the OS picked
    where = f"[{host}]" if ":" in host else host
    err_console.print(f"serving on http://{where}:{bound}/ (the planning page; OpenAPI at /openapi.json, docs at "
                      "/docs; Ctrl-C stops it)", highlight=False, soft_wrap=True)
    uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="info")).run(sockets=[sock])


def tune_budget_cap(text: str) -> float:
    """--max-tune-budget in seconds; above `plan tune`'s 7d a one-line error (POST /tune's budget_s stops at 7d
    whatever the option says: --max-tune-budget 30d was taken and a 10d request then got pydantic's bound)."""
    from planner.errors import PlanError
    from planner.units import parse_duration_s
    from tuner.config import WEEK_S

    cap = parse_duration_s("max_tune_budget", text)
    if cap > WEEK_S:
        raise PlanError("max_tune_budget", f"at most 7d (604,800 s), got {text} ({cap:,.0f} s): POST /tune's budget_s "
                        "is plan tune's, at most 7d (a study is saved after every trial; POST it again to go on)")
    return cap


def listening_socket(host: str, port: int):
    """A socket bound to host:port, handed to uvicorn (which then binds nothing itself): a port in use or a
    host with no address here is a one-line error naming the option, exit 2 (uvicorn logged its own
    'ERROR: [Errno 98] ...' after 'Application startup complete' and exited 3, the code of 'no plan fits')."""
    import socket

    from planner.errors import PlanError

    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except (socket.gaierror, UnicodeError):
        raise PlanError("host", f"{host}: no address found for it on this machine (e.g. 127.0.0.1, 0.0.0.0)") from None
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does: a restart reuses its port
    try:
        sock.bind(address)
    except OSError as e:
        sock.close()
        raise PlanError("port", f"{host}:{port}: {e.strerror.lower()} (another server holds it? pick another "
                        "--port)") from None
    sock.set_inheritable(True)
    return sock
