"""The planning page of `plan serve` (`/`): a form for the scenario, the ranked plans with their
memory and step-time breakdowns, the days/cost-vs-GPUs curve, export downloads and a tune job's
progress. Charts are plotly.js, served from the plotly Python package by this app."""

from plan_service.web.routes import web_router

__all__ = ["web_router"]
