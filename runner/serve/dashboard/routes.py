"""The dashboard's HTTP routes: pages rendered on the server, fragments the page script swaps
in to stay live, the log in byte ranges, and the two actions (log in/out, cancel).

No `from __future__ import annotations`: FastAPI reads the route functions' annotations.
Handlers are plain `def`: they read SQLite, so FastAPI runs them in its thread pool.
"""

import hashlib
import math
import urllib.parse
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Query, Request
from fastapi.responses import FileResponse, Response
from starlette.concurrency import run_in_threadpool

from runner.serve.dashboard import reads
from runner.serve.dashboard.render import Renderer
from runner.serve.dashboard.session import COOKIE, SESSION_S, Session, Sessions
from runner.serve.dashboard.throttle import LoginThrottle
from runner.serve.http_limits import address_of
from runner.stores.queue import FINAL, STATUSES, JobMatch
from runner.untrusted import log_bytes

LOG_CHUNK = 64 << 10  # the tail a job page opens with, and each "earlier" step
LOG_FOLLOW_MAX = 256 << 10  # the most one follow read sends
STATIC = Path(__file__).with_name("static")
STATIC_FILES = {"app.js": "text/javascript", "style.css": "text/css", "icon.svg": "image/svg+xml"}

# Strict: scripts and styles from our own files only (none inline, no eval), nothing framed,
# forms post to us only. A log line or job name that got past escaping still could not run.
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
        "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cross-Origin-Opener-Policy": "same-origin",
}


class LoginNeeded(Exception):
    """A page asked for without a valid session: go to the login form."""

    def __init__(self, fragment: bool) -> None:
        self.fragment = fragment


class NotFound(Exception):
    def __init__(self, what: str) -> None:
        self.what = what


class BadRequest(Exception):
    def __init__(self, what: str, status: int = 400) -> None:
        self.what = what
        self.status = status


def mount(
    api: FastAPI,
    queue: reads.Queue,
    settings: reads.Settings,
    sessions: Sessions,
    throttle: LoginThrottle,
) -> None:
    """Add the dashboard to `api`: `/` and `/login`, the rest under `/ui/`."""
    render = Renderer()

    @api.exception_handler(LoginNeeded)
    async def to_login(request: Request, exc: LoginNeeded) -> Response:
        if exc.fragment:  # a page script's fetch: it sends the browser to the form itself
            return _with_headers(Response("log in again", 401, media_type="text/plain"))
        # Quoted: the path arrives decoded, and `_safe_next` sends a space or non-ASCII home.
        path = urllib.parse.quote(request.url.path)
        target = path + (f"?{request.url.query}" if request.url.query else "")
        return _redirect("/login?" + urllib.parse.urlencode({"next": target}))

    @api.exception_handler(NotFound)
    async def not_found(_: Request, exc: NotFound) -> Response:
        return _html(render.page("missing.j2", None, what=exc.what), 404)

    @api.exception_handler(BadRequest)
    async def bad_request(_: Request, exc: BadRequest) -> Response:
        return _html(render.page("missing.j2", None, what=exc.what), exc.status)

    api.include_router(_login_routes(render, sessions, throttle))
    api.include_router(_page_routes(render, queue, settings, sessions))
    api.include_router(_static_routes())


def _session(request: Request, sessions: Sessions, fragment: bool = False) -> Session:
    session = sessions.check(request.cookies.get(COOKIE))
    if session is None:
        raise LoginNeeded(fragment)
    return session


def _login_routes(render: Renderer, sessions: Sessions, throttle: LoginThrottle) -> APIRouter:
    router = APIRouter(include_in_schema=False)

    @router.get("/login")
    def login_form(request: Request, next: str = "/") -> Response:
        if sessions.check(request.cookies.get(COOKIE)) is not None:
            return _redirect(_safe_next(next))
        return _html(render.page("login.j2", None, next=_safe_next(next), wrong=False))

    @router.post("/login")
    async def login(request: Request) -> Response:
        form = await _form(request)
        target = _safe_next(form.get("next", "/"))
        client = request.client
        address = address_of((client.host, client.port) if client else None)
        wait_s = throttle.wait_s(address)
        if wait_s > 0:  # not even checked: a guesser learns nothing while it waits
            return _too_soon(render, target, wait_s)
        if not sessions.token_is_right(form.get("token", "")):
            throttle.wrong(address)
            page = render.page("login.j2", None, next=target, wrong=True)
            return _html(page, 401)
        throttle.right(address)
        cookie, _ = sessions.issue()
        reply = _redirect(target)
        reply.set_cookie(
            COOKIE,
            cookie,
            max_age=int(SESSION_S),
            path="/",
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
        )
        return reply

    @router.post("/logout")
    async def logout(request: Request) -> Response:
        session = await run_in_threadpool(_session, request, sessions)  # reads the store
        form = await _form(request)
        if not sessions.csrf_is_right(session, form.get("csrf", "")):
            raise BadRequest("the form was stale or not ours: reload the page and try again", 403)
        await run_in_threadpool(sessions.end, session)
        reply = _redirect("/login")
        reply.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict")
        return reply

    return router


def _page_routes(
    render: Renderer, queue: reads.Queue, settings: reads.Settings, sessions: Sessions
) -> APIRouter:
    router = APIRouter(include_in_schema=False)

    def base(request: Request, session: Session) -> dict[str, Any]:
        return {"csrf": sessions.csrf(session), "path": request.url.path}

    @router.get("/")
    def queue_page(
        request: Request, listing: Annotated[tuple[JobMatch, int], Depends(_listing)]
    ) -> Response:
        session = _session(request, sessions)
        match, limit = listing
        data = reads.queue_page(queue, match, limit)
        live = "/ui/queue/rows?" + request.url.query if request.url.query else "/ui/queue/rows"
        page = render.page(
            "queue.j2", base(request, session), data=data, live=live, limit=limit,
            statuses=STATUSES,
        )  # fmt: skip
        return _html(page)

    @router.get("/ui/queue/rows")
    def queue_rows(
        request: Request, listing: Annotated[tuple[JobMatch, int], Depends(_listing)]
    ) -> Response:
        _session(request, sessions, fragment=True)
        match, limit = listing
        data = reads.queue_page(queue, match, limit)
        return _fragment(request, render.fragment("queue_rows.j2", data=data, limit=limit))

    @router.get("/ui/jobs/{job_id}")
    def job_page(request: Request, job_id: str) -> Response:
        session = _session(request, sessions)
        data = _job(queue, settings, job_id)
        page = render.page("job.j2", base(request, session), data=data, log_chunk=LOG_CHUNK)
        return _html(page)

    @router.get("/ui/jobs/{job_id}/panel")
    def job_panel(request: Request, job_id: str) -> Response:
        session = _session(request, sessions, fragment=True)
        data = _job(queue, settings, job_id)
        html = render.fragment("job_panel.j2", data=data, csrf=sessions.csrf(session))
        return _fragment(request, html)

    @router.get("/ui/jobs/{job_id}/log")
    def job_log(
        request: Request,
        job_id: str,
        tail: Annotated[int | None, Query(ge=1, le=LOG_FOLLOW_MAX)] = None,
        start: Annotated[int | None, Query(ge=0, le=2**62)] = None,
        end: Annotated[int | None, Query(ge=0, le=2**62)] = None,
    ) -> Response:
        _session(request, sessions, fragment=True)
        found = queue.store.job(job_id)
        if found is None:
            raise NotFound(f"no job '{job_id}'")
        final = found[0].status in FINAL  # read before the file: its last bytes count
        begin, stop, chunk, size = _log_range(reads.log_path(settings, job_id), tail, start, end)
        if not final:
            stop, chunk = _whole_lines(begin, stop, chunk)
        chunk = log_bytes(chunk)  # offsets stay the file's: the page reads on from `stop`
        headers = {
            "X-Log-Start": str(begin),
            "X-Log-End": str(stop),
            "X-Log-Size": str(size),
            "X-Log-Final": "1" if final else "0",
            "Cache-Control": "no-store",
        }
        return _with_headers(
            Response(chunk, media_type="text/plain; charset=utf-8", headers=headers)
        )

    @router.get("/ui/jobs/{job_id}/artifacts/{name:path}")
    def artifact(request: Request, job_id: str, name: str) -> Response:
        _session(request, sessions)
        if queue.store.job(job_id) is None:
            raise NotFound(f"no job '{job_id}'")
        path = file_inside(settings.data_dir / "artifacts" / job_id, name)
        if path is None:
            raise NotFound(f"job '{job_id}' has no artifact '{name}'")
        # A download, never a page of ours: an HTML file from a server must not run here.
        reply = FileResponse(path, media_type="application/octet-stream", filename=path.name)
        return _with_headers(reply)

    @router.post("/ui/jobs/{job_id}/cancel")
    async def cancel(request: Request, job_id: str) -> Response:
        session = await run_in_threadpool(_session, request, sessions)  # reads the store
        form = await _form(request)
        if not sessions.csrf_is_right(session, form.get("csrf", "")):
            raise BadRequest("the form was stale or not ours: reload the page and try again", 403)
        outcome = await run_in_threadpool(queue.cancel, job_id)
        if outcome == "unknown":
            raise NotFound(f"no job '{job_id}'")
        return _redirect(f"/ui/jobs/{urllib.parse.quote(job_id)}")

    @router.get("/ui/submissions/{number}")
    def submission_page(request: Request, number: int) -> Response:
        session = _session(request, sessions)
        data = _submission(queue, number)
        page = render.page("submission.j2", base(request, session), data=data, now=queue.now())
        return _html(page)

    @router.get("/ui/submissions/{number}/pictures")
    def submission_pictures(request: Request, number: int) -> Response:
        _session(request, sessions, fragment=True)
        data = _submission(queue, number)
        html = render.fragment("submission_pictures.j2", data=data, now=queue.now())
        return _fragment(request, html)

    @router.get("/ui/spend")
    def spend_page(request: Request) -> Response:
        session = _session(request, sessions)
        data = reads.spend(queue, settings)
        return _html(render.page("spend.j2", base(request, session), data=data))

    @router.get("/ui/spend/panel")
    def spend_panel(request: Request) -> Response:
        _session(request, sessions, fragment=True)
        html = render.fragment("spend_panel.j2", data=reads.spend(queue, settings))
        return _fragment(request, html)

    return router


def _static_routes() -> APIRouter:
    router = APIRouter(include_in_schema=False)

    @router.get("/ui/static/{name}")
    def static(name: str) -> Response:
        kind = STATIC_FILES.get(name)
        if kind is None:
            raise NotFound(f"no file '{name}'")
        body = (STATIC / name).read_bytes()
        headers = {"Cache-Control": "public, max-age=300"}
        return _with_headers(Response(body, media_type=kind, headers=headers))

    return router


# -- helpers --------------------------------------------------------------------------------


def _listing(
    status: str = "",
    q: Annotated[str, Query(max_length=200)] = "",
    submission: str = "",
    after: Annotated[int | None, Query(ge=0, le=2**62)] = None,
    before: Annotated[int | None, Query(ge=0, le=2**62)] = None,
    limit: Annotated[int, Query(ge=1, le=reads.MAX_PAGE_SIZE)] = reads.PAGE_SIZE,
) -> tuple[JobMatch, int]:
    """The queue page's query: which jobs, and how many a page."""
    if status and status not in STATUSES:
        raise BadRequest(f"no status '{status}': one of {', '.join(STATUSES)}")
    number = submission.strip().lstrip("s")
    if number and not number.isdigit():
        raise BadRequest(f"submission '{submission}' is not a number")
    match = JobMatch(
        status=status or None,
        name=q.strip() or None,
        submission=int(number) if number else None,
        after=after if before is None else None,
        before=before,
    )
    return match, limit


def _job(queue: reads.Queue, settings: reads.Settings, job_id: str) -> reads.JobPageData:
    data = reads.job_page(queue, settings, job_id)
    if data is None:
        raise NotFound(f"no job '{job_id}'")
    return data


def _submission(queue: reads.Queue, number: int) -> reads.SubmissionData:
    data = reads.submission(queue, number)
    if data is None:
        raise NotFound(f"no submission {number}")
    return data


def _log_range(
    path: Path, tail: int | None, start: int | None, end: int | None
) -> tuple[int, int, bytes, int]:
    """(start, end, bytes, size). `tail`: the last bytes, from a line's start; `end`: the
    chunk before it (earlier lines, also from a line's start); `start`: what follows."""
    try:
        with path.open("rb") as file:
            size = file.seek(0, 2)
            if start is not None and end is None:
                begin = min(start, size)
                stop = min(size, begin + LOG_FOLLOW_MAX)
                file.seek(begin)
                return begin, stop, file.read(stop - begin), size
            stop = min(size, end if end is not None else size)
            begin = max(0, stop - (tail or LOG_CHUNK))
            file.seek(begin)
            chunk = file.read(stop - begin)
    except FileNotFoundError:
        return 0, 0, b"", 0
    if begin > 0:  # start at a line: a half line (or half a UTF-8 character) reads as noise
        cut = chunk.find(b"\n")
        if 0 <= cut < len(chunk) - 1:
            begin, chunk = begin + cut + 1, chunk[cut + 1 :]
    return begin, stop, chunk, size


def _whole_lines(begin: int, stop: int, chunk: bytes) -> tuple[int, bytes]:
    """A running job's log up to its last complete line: an escape sequence cut between two
    reads would be cleaned as two halves, and show. A chunk that is one unfinished line as
    long as a read goes as it is (its rest follows)."""
    cut = chunk.rfind(b"\n")
    if cut == -1:
        return (stop, chunk) if len(chunk) >= LOG_FOLLOW_MAX else (begin, b"")
    return begin + cut + 1, chunk[: cut + 1]


def file_inside(folder: Path, name: str) -> Path | None:
    """`name` under `folder` as a regular file, or None: no `..`, no symlink out."""
    try:
        root = folder.resolve(strict=True)
        path = (root / name).resolve(strict=True)
    except (OSError, RuntimeError, ValueError):  # ValueError: a NUL in the name
        return None
    if not path.is_relative_to(root) or not path.is_file():
        return None
    return path


async def _form(request: Request) -> dict[str, str]:
    """An urlencoded form, as a browser posts it (the last value of a repeated field)."""
    body = await request.body()
    if not body:
        return {}
    if request.headers.get("content-type", "").split(";")[0].strip() != (
        "application/x-www-form-urlencoded"
    ):
        raise BadRequest("expected a form (application/x-www-form-urlencoded)", 415)
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise BadRequest("the form is not UTF-8") from None
    return dict(urllib.parse.parse_qsl(text, keep_blank_values=True))


def _safe_next(target: str) -> str:
    """Only a path on this server: `//evil.example` or `https://...` would send a fresh
    login elsewhere. Browsers read a URL more loosely than it is written: they drop tabs and
    newlines anywhere (`/%09/evil.example` decoded is `//evil.example` to them), read a
    backslash as `/` and trim spaces and controls; so any of those, or anything not ASCII,
    sends home instead."""
    if not target.isascii() or any(c <= " " or c in "\\\x7f" for c in target):
        return "/"
    parts = urllib.parse.urlsplit(target)
    if parts.scheme or parts.netloc or not parts.path.startswith("/") or target.startswith("//"):
        return "/"
    return target


def _too_soon(render: Renderer, target: str, wait_s: float) -> Response:
    seconds = math.ceil(wait_s)
    reply = _html(render.page("login.j2", None, next=target, wrong=False, wait_s=seconds), 429)
    reply.headers["Retry-After"] = str(seconds)
    return reply


def _with_headers(reply: Response) -> Response:
    for name, value in SECURITY_HEADERS.items():
        reply.headers.setdefault(name, value)
    return reply


def _html(text: str, status: int = 200) -> Response:
    reply = Response(text, status, media_type="text/html; charset=utf-8")
    reply.headers["Cache-Control"] = "no-store"
    return _with_headers(reply)


def _fragment(request: Request, text: str) -> Response:
    """A live part of a page. Its ETag lets an unchanged one come back as an empty 304."""
    tag = '"' + hashlib.blake2b(text.encode(), digest_size=12).hexdigest() + '"'
    headers = {"ETag": tag, "Cache-Control": "private, no-cache"}
    if request.headers.get("if-none-match") == tag:
        return _with_headers(Response(status_code=304, headers=headers))
    return _with_headers(Response(text, media_type="text/html; charset=utf-8", headers=headers))


def _redirect(target: str) -> Response:
    return _with_headers(Response(status_code=303, headers={"Location": target}))
