"""The web dashboard `clore-run serve` shows at `/`: the queue, a job and its log, a
submission's DAG and timeline, and spend. Server-rendered HTML (jinja2) with one small plain
script that keeps parts of a page live; behind a login with the API's token."""

from __future__ import annotations

from typing import TYPE_CHECKING

from runner.serve.dashboard.reads import Queue, Settings
from runner.serve.dashboard.session import Sessions

if TYPE_CHECKING:
    from fastapi import FastAPI

    from runner.serve.service import Service


def mount(api: FastAPI, service: Service, token: str) -> Sessions:
    """Add the dashboard's routes to the API app, for the service it serves. Returns its
    sessions, so the API's token gate can let a logged-in browser through."""
    # jinja2 and the dashboard's routes: only a serve with the dashboard on loads them
    from runner.serve.dashboard import routes
    from runner.serve.dashboard.throttle import LoginThrottle

    options = service.options
    settings = Settings(
        options.data_dir,
        options.capacity,
        options.daily_spend_limit_usd,
        options.warmth.idle_budget_usd,
    )
    sessions = Sessions(token, service.clock, service.store)
    routes.mount(api, service, settings, sessions, LoginThrottle(service.clock))
    return sessions


__all__ = ["Queue", "Settings", "mount"]
