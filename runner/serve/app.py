"""The REST API (FastAPI): routes over the Service and its Store, with an OpenAPI spec.

Every route but /healthz wants `Authorization: Bearer <CLORE_RUN_TOKEN>`, compared in constant
time. Errors are JSON naming what is wrong (`detail`); an unexpected exception is logged and
answered with a plain 500 JSON, never a traceback. Handlers that touch SQLite are plain `def`, so
FastAPI runs them in its thread pool and the event loop never blocks on the disk.

No `from __future__ import annotations` here: FastAPI reads the annotations of the route
functions at runtime, and some name values local to the functions that build the routes.
"""

import hmac
import logging
import re
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Annotated, Any, NamedTuple

import anyio
from fastapi import APIRouter, Depends, FastAPI, HTTPException, Query, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import (
    FileResponse,
    JSONResponse,
    PlainTextResponse,
    Response,
    StreamingResponse,
)
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp

from runner import __version__
from runner.serve import dashboard, metrics, views
from runner.serve.api_models import (
    Cancelled,
    ErrorReply,
    Health,
    IdleRow,
    JobDetail,
    JobPage,
    JobSubmission,
    Stats,
    Status,
    Submitted,
    unknown_key_hint,
)
from runner.serve.dashboard.routes import file_inside
from runner.serve.dashboard.session import COOKIE
from runner.serve.http_limits import BODY_TIMEOUT_S, TokenGate
from runner.serve.middleware import MAX_BODY_BYTES, BodyLimit, ErrorCounter, ErrorTally
from runner.serve.service import LoopNotRunning, Service
from runner.serve.submit import (
    Problem,
    SubmissionError,
    UnknownNeeds,
    prepare_job,
    prepare_pipeline,
)
from runner.spec import trust as trust_names
from runner.stores.queue import FINAL, QueueError

log = logging.getLogger("clore_run.serve")

LOG_POLL_S = 0.2  # how often a followed log looks for more output
# While a followed job has not started, a line saying why, at once and then this often: a person
# sees why nothing comes, and a client or proxy that drops an idle stream sees it alive.
WAITING_NOTE_S = 15.0
_METHODS = frozenset({"GET", "PUT", "POST", "DELETE", "OPTIONS", "HEAD", "PATCH", "TRACE"})
_UNPARSABLE = "There was an error parsing the body"  # FastAPI's 400 for a body it cannot decode
_ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorReply} for code in (401, 404, 409, 413, 422, 503)
}
_JSON_ERROR: dict[str, Any] = {
    "description": "Error",
    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorReply"}}},
}
# The pipeline file as the body: its YAML, described by the pipeline format's own schema (the
# one `clore-run schema` prints, without the `${{ env.X }}` forms: a submission is read with no
# environment). What JSON Schema cannot say (a need naming no job of the file, a cycle) is 422.
_YAML_BODY = {
    "requestBody": {
        "required": True,
        "content": {"application/yaml": {"schema": {"$ref": "#/components/schemas/Pipeline"}}},
    }
}


# What a client (or a fuzzer) may do with a submission's ids: their server ids, not the keys sent.
_FIRST_ID = {"job_id": "$response.body#/ids/0"}
_JOB_LINKS = {
    "GetJob": {"operationId": "get_job_jobs__job_id__get", "parameters": _FIRST_ID},
    "GetJobLog": {"operationId": "job_log_jobs__job_id__log_get", "parameters": _FIRST_ID},
    "CancelJob": {"operationId": "cancel_job_jobs__job_id__delete", "parameters": _FIRST_ID},
}


def create_app(
    service: Service,
    token: str,
    body_limit: int = MAX_BODY_BYTES,
    body_timeout_s: float = BODY_TIMEOUT_S,
    *,
    api_docs: bool = False,
) -> ASGIApp:
    """The API as an ASGI app; errors are counted, requests without the token refused before
    their body is read, and large or slow bodies refused, around it."""
    tally = ErrorTally()
    api = FastAPI(
        # Swagger UI and ReDoc load scripts from a CDN (no integrity, outside the dashboard's
        # CSP), to a browser holding the dashboard's cookie: off unless asked for.
        docs_url="/docs" if api_docs else None,
        redoc_url="/redoc" if api_docs else None,
        title="clore-run queue",
        version=__version__,
        description="A persistent GPU job queue. Auth: `Authorization: Bearer $CLORE_RUN_TOKEN`.",
    )
    _handlers(api)
    _document_pipelines(api)
    api.include_router(_routes(service, tally), dependencies=[Depends(_auth(token))])
    sessions = dashboard.mount(api, service, token)  # its pages log in, then keep a cookie

    @api.get("/healthz", response_model=Health, tags=["health"])
    def healthz() -> JSONResponse:
        """No auth: for load balancers and probes."""
        failure = service.store_failure
        ok = service.alive and failure is None
        body = {"status": "ok" if ok else "degraded"}
        if failure is not None:
            body["store"] = f"failing: {failure}"
        return JSONResponse(body, 200 if ok else 503)

    def session_ok(cookie: str | None) -> bool:
        # On the event loop: no store read here. The pages check the store themselves.
        return sessions.signed(cookie) is not None

    limited = BodyLimit(api, body_limit, body_timeout_s)
    return ErrorCounter(TokenGate(limited, token, session_ok, COOKIE), tally)


def _document_pipelines(api: FastAPI) -> None:
    """Put the pipeline format's schema among the document's components, for POST /pipelines."""
    make = api.openapi

    def openapi() -> dict[str, Any]:
        if api.openapi_schema is not None:
            return api.openapi_schema
        # the pipeline model's schema: only when the OpenAPI document is asked for
        from runner.spec.models import PipelineSchema

        document = make()
        schemas = document.setdefault("components", {}).setdefault("schemas", {})
        pipeline = PipelineSchema.model_json_schema(
            by_alias=True, ref_template="#/components/schemas/{model}"
        )
        for name, definition in pipeline.pop("$defs", {}).items():
            schemas.setdefault(name, definition)  # GpuSpec and Strategy are POST /jobs' too
        schemas["Pipeline"] = pipeline
        return document

    api.openapi = openapi  # type: ignore[method-assign]


def _auth(token: str) -> Callable[..., None]:
    expected = token.encode()
    bearer = HTTPBearer(auto_error=False, description="The server's CLORE_RUN_TOKEN.")

    def check(creds: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]) -> None:
        if creds is None:
            raise HTTPException(401, "a bearer token is required", {"WWW-Authenticate": "Bearer"})
        if not hmac.compare_digest(creds.credentials.encode(), expected):
            raise HTTPException(
                401, "the token is not valid", {"WWW-Authenticate": 'Bearer error="invalid_token"'}
            )

    return check


def _handlers(api: FastAPI) -> None:
    @api.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        if exc.status_code == 405:
            # Starlette names the methods of the first route of the path only (POST for
            # /jobs): a client is told every method the path takes.
            allow = ", ".join(_allowed_methods(api, request.url.path))
            allow = allow or (exc.headers or {}).get("Allow", "")  # the dashboard's pages
            return JSONResponse({"detail": "method not allowed"}, 405, {"Allow": allow})
        if exc.status_code == 400 and exc.detail == _UNPARSABLE:
            # A body that is not UTF-8 fails before JSON decoding: the same 422 as bad JSON.
            problem = {"loc": ["body"], "msg": "the body is not JSON text", "type": "json_invalid"}
            return JSONResponse({"detail": [{**problem, "hint": ""}]}, 422)
        return await http_exception_handler(request, exc)

    @api.exception_handler(RequestValidationError)
    async def invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        # Without the input it was given: a NaN or 1e999 there made the reply itself invalid
        # JSON, and the default handler's render failed into a 500.
        return JSONResponse({"detail": [_validation_problem(err) for err in exc.errors()]}, 422)

    @api.exception_handler(SubmissionError)
    async def bad_submission(_: Request, exc: SubmissionError) -> JSONResponse:
        return JSONResponse({"detail": [_problem(p) for p in exc.problems]}, 422)

    @api.exception_handler(UnknownNeeds)
    async def unknown_needs(_: Request, exc: UnknownNeeds) -> JSONResponse:
        return JSONResponse({"detail": [_problem(p) for p in exc.problems]}, 409)

    @api.exception_handler(QueueError)
    async def store_down(_: Request, exc: QueueError) -> JSONResponse:
        log.error("%s", exc)
        return JSONResponse({"detail": "the queue database is unavailable"}, 503)

    @api.exception_handler(LoopNotRunning)
    async def loop_down(_: Request, exc: LoopNotRunning) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, 503)

    @api.exception_handler(Exception)
    async def internal(_: Request, exc: Exception) -> JSONResponse:
        log.exception("internal error", exc_info=exc)
        return JSONResponse({"detail": "internal error; the server log has the details"}, 500)


def _allowed_methods(api: FastAPI, path: str) -> list[str]:
    """The methods the API document gives the request's path (included routers are not in
    the app's route list to ask)."""
    methods: set[str] = set()
    for template, operations in api.openapi().get("paths", {}).items():
        if re.fullmatch(re.sub(r"\\\{[^}]*\\\}", "[^/]+", re.escape(template)), path):
            methods |= {m.upper() for m in operations if m.upper() in _METHODS}
    if "GET" in methods:
        methods.add("HEAD")  # Starlette answers HEAD wherever GET is
    return sorted(methods)


def _validation_problem(err: Any) -> dict[str, Any]:
    loc = tuple(err.get("loc", ()))
    msg = str(err.get("msg", ""))
    problem = {"loc": list(loc), "msg": msg, "type": err.get("type"), "hint": ""}
    if err.get("type") == "extra_forbidden":
        problem["hint"] = unknown_key_hint(loc)
    elif loc[-1:] == ("trust",):
        # The rule in words, not the pattern that encodes it: a person fixes a name from words.
        problem["msg"], problem["hint"] = trust_names.RULE, trust_names.HINT
    return problem


def _problem(p: Problem) -> dict[str, Any]:
    return {"loc": list(p.loc), "msg": p.msg, "hint": p.hint, "line": p.line, "column": p.column}


def _routes(service: Service, tally: ErrorTally) -> APIRouter:
    router = APIRouter(responses=_ERRORS)
    store = service.store

    @router.post(
        "/pipelines",
        status_code=201,
        openapi_extra=_YAML_BODY,
        tags=["submit"],
        responses={201: {"links": _JOB_LINKS}},
    )
    async def submit_pipeline(
        request: Request,
        after: Annotated[
            list[str], Query(description="Server ids the pipeline's root jobs also need.")
        ] = [],  # noqa: B006 - FastAPI copies query defaults
        trust: Annotated[
            str | None,
            Query(
                # An empty value asks for the default domain, as leaving it out does.
                pattern=f"^$|{trust_names.PATTERN}",
                max_length=trust_names.MAX_LENGTH,
                description="The submission's trust domain: a server is reused only within "
                f"one (default: {trust_names.DEFAULT_TRUST}).",
            ),
        ] = None,
    ) -> Submitted:
        """Queue a pipeline (its YAML as the body). 422 lists located problems; 409: `after`
        names a job the queue does not hold."""
        raw = await request.body()
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise SubmissionError([Problem(("body",), "the body is not UTF-8 text")]) from None
        prepared = await run_in_threadpool(prepare_pipeline, text, after, "pipeline.yml", trust)
        done = await run_in_threadpool(service.submit, prepared, "pipeline")
        return Submitted(ids=list(done.ids), warnings=list(done.warnings))

    @router.post("/jobs", status_code=201, tags=["submit"], responses={201: {"links": _JOB_LINKS}})
    def submit_job(body: JobSubmission) -> Submitted:
        """Queue one job (a matrix gives several)."""
        prepared = prepare_job(body.model_dump(by_alias=True, exclude_unset=True, mode="json"))
        done = service.submit(prepared, "job")
        return Submitted(ids=list(done.ids), warnings=list(done.warnings))

    @router.get("/jobs", tags=["jobs"])
    def list_jobs(
        status: Status | None = None,
        after: Annotated[int, Query(ge=0, le=2**62, description="Last seen `next_after`.")] = 0,
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    ) -> JobPage:
        """Jobs in submission order, a page at a time."""
        rows = store.jobs(status, after, limit)
        more = len(rows) == limit
        waits = service.waiting_for_many([r.id for r in rows if r.status == "queued"])
        return JobPage(
            jobs=[views.summary(r, None, waits.get(r.id)) for r in rows],
            next_after=rows[-1].seq if more else None,
        )

    @router.get("/jobs/{job_id}", tags=["jobs"])
    def get_job(job_id: str) -> JobDetail:
        """Status, attempts, cost, server, and why it waits."""
        found = store.job(job_id)
        if found is None:
            raise HTTPException(404, f"no job '{job_id}'")
        row, spec = found
        waits = service.waiting_for(job_id) if row.status == "queued" else None
        return views.detail(store, row, spec, waits)

    @router.get(
        "/jobs/{job_id}/log",
        response_class=StreamingResponse,
        responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}}},
        tags=["jobs"],
    )
    def job_log(
        job_id: str,
        follow: Annotated[bool, Query(description="Keep streaming until the job settles.")] = False,
        offset: Annotated[
            int | None,
            Query(
                ge=0,
                description="Start this many bytes into the log: a follower picking it up "
                "again after a lost connection. With it the reply is the log's bytes only "
                "(no notes while the job waits), so the bytes received count the offset.",
            ),
        ] = None,
    ) -> StreamingResponse:
        """The job's log, every attempt; with follow=true, streamed as it is written."""
        if store.job(job_id) is None:
            raise HTTPException(404, f"no job '{job_id}'")
        path = service.options.data_dir / "logs" / f"{job_id}.log"
        if (elsewhere := service.log_elsewhere(job_id, path)) is not None:
            raise HTTPException(409, elsewhere)  # N servers: the one that runs it has it
        follow_up = _Follow(lambda: _settled(service, job_id), lambda: _waiting(service, job_id))
        tail = _tail(path, follow, follow_up, offset)
        return StreamingResponse(tail, media_type="text/plain")

    @router.get(
        "/jobs/{job_id}/artifacts/{name:path}",
        response_class=FileResponse,
        responses={200: {"content": {"application/octet-stream": {}}}},
        tags=["jobs"],
    )
    def job_artifact(job_id: str, name: str) -> FileResponse:
        """A file the job kept (its `artifacts:`, its `junit:`), as bytes: what `submit --wait`
        reads a job's own JUnit report from."""
        if store.job(job_id) is None:
            raise HTTPException(404, f"no job '{job_id}'")
        path = file_inside(service.options.data_dir / "artifacts" / job_id, name)
        if path is None:
            raise HTTPException(404, f"job '{job_id}' has no artifact '{name}'")
        # A download, never a page of ours: a file from a rented server must not run here.
        return FileResponse(path, media_type="application/octet-stream", filename=path.name)

    @router.delete("/jobs/{job_id}", tags=["jobs"], responses={202: {"model": Cancelled}})
    def cancel_job(job_id: str) -> JSONResponse:
        """Queued: cancelled (200). Running: killed, its server released (202)."""
        outcome = service.cancel(job_id)
        if outcome == "unknown":
            raise HTTPException(404, f"no job '{job_id}'")
        if outcome.startswith("final:"):
            raise HTTPException(409, f"job '{job_id}' already {outcome[6:]}")
        body = Cancelled(id=job_id, status="cancelled" if outcome == "cancelled" else "cancelling")
        return JSONResponse(body.model_dump(), 200 if outcome == "cancelled" else 202)

    @router.get("/stats", tags=["server"])
    def stats() -> Stats:
        """Counts by status, spend, servers held."""
        counts = store.counts()
        idle = service.idle_rows()
        today = views.api_day(service.clock.time())
        return Stats(
            counts=counts,
            running=counts["running"],
            capacity=service.options.capacity,
            servers_held=service.servers_held,
            spend_usd_total=store.timing()["spend"],
            spend_usd_today=service.spent_today(),
            daily_spend_limit_usd=service.options.daily_spend_limit_usd,
            held_until=views.api_time(held)
            if (held := service.held_until) and held > service.clock.time()
            else None,
            idle_usd_today=sum(usd for day, _, usd, _ in idle if day == today),
            idle_budget_usd=service.options.warmth.idle_budget_usd,
            idle_by_day=[IdleRow(day=d, gpu=g, usd=u, seconds=s) for d, g, u, s in idle],
        )

    @router.get(
        "/metrics",
        response_class=PlainTextResponse,
        tags=["server"],
        # The route's class would document its errors as text: they are JSON, as everywhere.
        responses={401: _JSON_ERROR, 503: _JSON_ERROR},
    )
    def prometheus() -> PlainTextResponse:
        """Prometheus text format."""
        text = metrics.render(
            store.counts(),
            store.timing(),
            service.spent_today(),
            service.servers_held,
            tally.snapshot(),
            metrics.Idle(
                views.api_day(service.clock.time()),
                service.idle_rows(),
                service.options.warmth.idle_budget_usd,
            ),
        )
        return PlainTextResponse(text, media_type=metrics.CONTENT_TYPE)

    return router


class _Follow(NamedTuple):
    """What a followed log asks about its job."""

    settled: Callable[[], bool]
    waiting: Callable[[], str | None]  # why it has not started; None once it has


def _settled(service: Service, job_id: str) -> bool:
    found = service.store.job(job_id)
    return found is None or found[0].status in FINAL


def _waiting(service: Service, job_id: str) -> str | None:
    found = service.store.job(job_id)
    if found is None or found[0].status != "queued":
        return None
    why = service.waiting_for(job_id) or "queued"
    return f"[clore-run] {job_id} has not started yet: {why}\n"


async def _tail(
    path: Path, follow: bool, job: _Follow, start: int | None = None
) -> AsyncIterator[bytes]:
    """The file from the start (or byte `start`, then no notes); when following, more as it
    grows, until the job settles. Each look is a short call in the thread pool: a follower
    waiting for a job that has not started holds no thread (40 of them would stop every other
    route)."""
    offset = start or 0
    notes = start is None
    noted_at: float | None = None
    while True:
        done = not follow or await run_in_threadpool(job.settled)  # first: the last bytes are sent
        while chunk := await run_in_threadpool(_read, path, offset):
            offset += len(chunk)
            yield chunk
        if done:
            return
        now = anyio.current_time()
        if notes and offset == 0 and (noted_at is None or now - noted_at >= WAITING_NOTE_S):
            note = await run_in_threadpool(job.waiting)
            if note is not None:
                noted_at = now
                yield note.encode("utf-8", "replace")
        await anyio.sleep(LOG_POLL_S)


def _read(path: Path, offset: int) -> bytes:
    try:
        with path.open("rb") as file:
            file.seek(offset)
            return file.read(1 << 16)
    except FileNotFoundError:
        return b""  # not started yet
