"""`plan serve`: the planner, catalog, tuner and exports over HTTP (FastAPI).

A face like the CLI: thin, imports the parts, nothing imports it. `create_app(ServiceConfig)`
builds the app; `plan serve` runs it under uvicorn.
"""

from plan_service.app import ServiceConfig, create_app

__all__ = ["ServiceConfig", "create_app"]
