"""A fake GitHub for self-hosted JIT runners, on its own pytest-httpserver, plus the stand-in
runner package it serves.

The API side answers what `runner.gh_runner.github` calls, errors included:
- `POST /repos/{repo}/actions/runners/generate-jitconfig`: 201 `{runner, encoded_jit_config}`;
  401 for an unknown token, 403 for a token without the right (the workflow's GITHUB_TOKEN),
  422 without `runner_group_id`, 403 for a group the repository may not use, 404 for one that
  does not exist, 409 for a name taken;
- `GET /repos/{repo}/actions/runners[/{id}]`, `DELETE .../runners/{id}` (404 once gone);
- `GET /repos/{repo}/actions/artifacts` and the zip of each (the reaper's records).

The runner side is what the stand-in `run.sh` calls from the "server" (loopback):
`POST /_runner/connect` with the JIT config as its body (the runner comes online; the reply is
its job: `run:SECONDS` or `wait`, never a job), `POST /_runner/done` (the job ended: a JIT runner
then removes itself). Each moment is kept with `time.monotonic()` for the figures, and each
connect/done sets an event a test waits on (no sleeps).
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import re
import secrets
import tarfile
import threading
import time
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

REPO = "octo/gpu-lib"
ADMIN_TOKEN = "github_pat_admin_9c1f2e7b5d3a"  # fine-grained, Administration: write
ACTIONS_TOKEN = "ghs_workflow_token_4e8a2c6d"  # the workflow's GITHUB_TOKEN: no such right
USABLE_GROUPS = {1, 5}
FOREIGN_GROUP = 9  # exists, but this repository may not use it


@dataclass
class FakeRunner:
    id: int
    name: str
    labels: list[str]
    group: int
    config: str
    status: str = "offline"
    busy: bool = False


@dataclass
class Artifact:
    id: int
    name: str
    files: dict[str, str]
    expired: bool = False
    run_id: int = 0  # the workflow run that uploaded it (GitHub lists it with the artifact)
    size: int | None = None  # what the listing says (default: the zip's real size)


@dataclass
class FakeRun:
    """A workflow run as `GET /repos/{repo}/actions/runs/{id}` answers it: where its workflow
    file is and which repository its head came from (a fork's for a fork's pull request)."""

    id: int
    path: str = ".github/workflows/gpu-runner.yml"
    head_repo: str = REPO
    repo: str = REPO


STAND_IN_RUN_SH = """#!/usr/bin/env bash
# A stand-in for actions/runner's run.sh: it takes the JIT config the way the real runner does
# (ACTIONS_RUNNER_INPUT_JITCONFIG, which it removes from its environment), refuses one given
# on its command line, "runs one job" that the fake GitHub hands it, and exits.
set -euo pipefail
config=${ACTIONS_RUNNER_INPUT_JITCONFIG:-}
unset ACTIONS_RUNNER_INPUT_JITCONFIG
for arg in "$@"; do
    if [[ "$arg" == --jitconfig ]]; then echo "stand-in: config on the command line" >&2; exit 3; fi
done
if [[ -z "$config" ]]; then echo "stand-in: no JIT config in the environment" >&2; exit 3; fi
echo "stand-in runner: $(id -un) in $PWD"
job=$(printf '%s' "$config" | curl -fsS --data-binary @- "@URL@/_runner/connect")
case "$job" in
run:*) sleep "${job#run:}" ;;
*) exec sleep 3600 ;; # never given a job: waits to be stopped
esac
printf '%s' "$config" | curl -fsS --data-binary @- "@URL@/_runner/done" >/dev/null
echo "stand-in runner: job done"
"""


class FakeRunnersGitHub:
    def __init__(self, server: HTTPServer, repo: str = REPO) -> None:
        self.server = server
        self.repo = repo
        self.tokens = {ADMIN_TOKEN: "admin", ACTIONS_TOKEN: "actions"}
        self.runners: dict[int, FakeRunner] = {}
        self.removed: list[int] = []  # deleted through the API
        self.issued: dict[int, str] = {}  # runner id -> the JIT config it was given (kept)
        self.labels: dict[int, list[str]] = {}  # runner id -> the labels it was registered with
        self.job = "run:0"  # what a runner that connects is told to do
        self.events: list[tuple[float, str, int]] = []  # (monotonic, kind, runner id)
        self.artifacts: dict[int, Artifact] = {}
        self.runs: dict[int, FakeRun] = {}
        self.repo_id = 1296269
        self.fork_ids: dict[str, int] = {}  # a head repository's id, other than ours
        self.seen: list[tuple[str, str]] = []
        self._next_id = 41
        self._lock = threading.Lock()
        self._signals: dict[tuple[str, int], threading.Event] = {}
        self.package = b""
        self.on_download: Callable[[], None] | None = None  # a slow or failing download
        self.package_sha256 = ""
        server.expect_request(re.compile(r".*")).respond_with_handler(self._handle)

    # --- test side -------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return self.server.url_for("").rstrip("/")

    def build_package(self) -> None:
        """The stand-in runner tarball, pointing at this fake, served at /_runner/package."""
        script = STAND_IN_RUN_SH.replace("@URL@", self.url).encode()
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:gz") as tar:
            info = tarfile.TarInfo("run.sh")
            info.size, info.mode = len(script), 0o755
            tar.addfile(info, io.BytesIO(script))
        self.package = buf.getvalue()
        self.package_sha256 = hashlib.sha256(self.package).hexdigest()

    @property
    def package_url(self) -> str:
        return f"{self.url}/_runner/package.tar.gz"

    def wait_for(self, kind: str, runner_id: int, timeout_s: float = 20.0) -> float:
        """When (monotonic) runner `runner_id` did `kind` (connect, done, deleted)."""
        with self._lock:
            event = self._signals.setdefault((kind, runner_id), threading.Event())
        assert event.wait(timeout_s), f"runner {runner_id} never did {kind}"
        return next(t for t, k, r in self.events if k == kind and r == runner_id)

    def did(self, kind: str, runner_id: int) -> bool:
        return any(k == kind and r == runner_id for _, k, r in self.events)

    def add_artifact(
        self,
        name: str,
        files: dict[str, str],
        expired: bool = False,
        *,
        workflow: str = ".github/workflows/gpu-runner.yml",
        head_repo: str | None = None,
        size: int | None = None,
    ) -> int:
        """An artifact uploaded by a run of `workflow` whose head is `head_repo` (default this
        repository; a fork's pull request: the fork). Returns the run's id."""
        self._next_id += 1
        run = FakeRun(self._next_id, workflow, head_repo or self.repo, self.repo)
        self.runs[run.id] = run
        self._next_id += 1
        self.artifacts[self._next_id] = Artifact(self._next_id, name, files, expired, run.id, size)
        return run.id

    def _repo_id(self, full_name: str) -> int:
        if full_name == self.repo:
            return self.repo_id
        return self.fork_ids.setdefault(full_name, self.repo_id + 1 + len(self.fork_ids))

    # --- dispatch --------------------------------------------------------------------------

    def _note(self, kind: str, runner_id: int) -> None:
        self.events.append((time.monotonic(), kind, runner_id))
        self._signals.setdefault((kind, runner_id), threading.Event()).set()

    def _handle(self, request: Request) -> Response:
        if request.path == "/_runner/package.tar.gz":  # outside the lock: it may be slow
            self.seen.append((request.method, request.path))
            if self.on_download is not None:
                self.on_download()
            return Response(self.package, 200, content_type="application/gzip")
        with self._lock:
            self.seen.append((request.method, request.path))
            if request.path.startswith("/_runner/"):
                return self._runner_side(request)
            token = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
            role = self.tokens.get(token)
            if role is None:
                return _reply({"message": "Bad credentials"}, 401)
            return self._api(request, role)

    def _api(self, request: Request, role: str) -> Response:
        base = f"/repos/{self.repo}/actions"
        path, method = request.path, request.method
        if path == f"{base}/artifacts" and method == "GET":
            return self._list_artifacts(request)
        match = re.fullmatch(rf"{base}/artifacts/(\d+)/zip", path)
        if match and method == "GET":
            return self._artifact_zip(int(match.group(1)))
        match = re.fullmatch(rf"{base}/runs/(\d+)", path)
        if match and method == "GET":
            return self._run(int(match.group(1)))
        if not path.startswith(f"{base}/runners"):
            return _reply({"message": "Not Found"}, 404)
        if role != "admin":
            return _reply({"message": "Resource not accessible by integration"}, 403)
        if path == f"{base}/runners/generate-jitconfig" and method == "POST":
            return self._generate(request.get_json(silent=True))
        if path == f"{base}/runners" and method == "GET":
            listed = [_runner_json(r) for r in self.runners.values()]
            return _reply({"total_count": len(listed), "runners": listed})
        match = re.fullmatch(rf"{base}/runners/(\d+)", path)
        runner = self.runners.get(int(match.group(1))) if match else None
        if runner is None:
            return _reply({"message": "Not Found"}, 404)
        if method == "GET":
            return _reply(_runner_json(runner))
        if method == "DELETE":
            if runner.busy:
                return _reply({"message": "Bad request - Runner is still running a job"}, 422)
            del self.runners[runner.id]
            self.removed.append(runner.id)
            self._note("deleted", runner.id)
            return Response(status=204)
        return _reply({"message": "Not Found"}, 404)

    def _generate(self, body: Any) -> Response:
        if not isinstance(body, dict) or not body.get("name") or not body.get("labels"):
            return _reply({"message": "Invalid request."}, 422)
        group = body.get("runner_group_id")
        if not isinstance(group, int) or group < 1:
            return _reply(
                {"message": 'Invalid request.\n\n"runner_group_id" wasn\'t supplied.'}, 422
            )
        if group == FOREIGN_GROUP:
            return _reply({"message": "Resource not accessible by integration"}, 403)
        if group not in USABLE_GROUPS:
            return _reply({"message": "Not Found"}, 404)
        if any(r.name == body["name"] for r in self.runners.values()):
            return _reply(
                {"message": "Already exists - A runner with the name already exists."}, 409
            )
        self._next_id += 1
        secret = secrets.token_urlsafe(48)
        payload = {".runner": secret, "id": self._next_id, "work": body.get("work_folder")}
        config = base64.b64encode(json.dumps(payload).encode()).decode()
        runner = FakeRunner(self._next_id, body["name"], list(body["labels"]), group, config)
        self.runners[runner.id] = runner
        self.issued[runner.id] = config
        self.labels[runner.id] = list(runner.labels)
        self._note("registered", runner.id)
        return _reply({"runner": _runner_json(runner), "encoded_jit_config": config}, 201)

    def _runner_side(self, request: Request) -> Response:
        config = request.get_data(as_text=True).strip()
        runner = next((r for r in self.runners.values() if r.config == config), None)
        if runner is None:
            return Response("unknown or used JIT config", 403)
        if request.path == "/_runner/connect":
            if runner.status == "online":
                return Response("a JIT config is good for one connection", 409)
            runner.status = "online"
            runner.busy = self.job.startswith("run:")
            self._note("connect", runner.id)
            return Response(self.job, 200)
        if request.path == "/_runner/done":  # one job, then a JIT runner is gone
            del self.runners[runner.id]
            self._note("done", runner.id)
            return Response("bye", 200)
        return Response("no such runner endpoint", 404)

    def _list_artifacts(self, request: Request) -> Response:
        per_page = int(request.args.get("per_page", 30))
        page = int(request.args.get("page", 1))
        items = list(self.artifacts.values())
        chunk = items[(page - 1) * per_page : page * per_page]
        listed = [self._artifact_json(a) for a in chunk]
        headers = {}
        if page * per_page < len(items):
            nxt = f"{self.url}{request.path}?per_page={per_page}&page={page + 1}"
            headers["Link"] = f'<{nxt}>; rel="next"'
        return _reply({"total_count": len(items), "artifacts": listed}, 200, headers)

    def _artifact_json(self, a: Artifact) -> dict[str, Any]:
        """As GitHub lists an artifact: with the run it came from and that run's repository
        and head repository (ids)."""
        run = self.runs.get(a.run_id) or FakeRun(a.run_id)
        return {
            "id": a.id,
            "name": a.name,
            "expired": a.expired,
            "size_in_bytes": len(_zip(a.files)) if a.size is None else a.size,
            "archive_download_url": self.url + f"/repos/{self.repo}/actions/artifacts/{a.id}/zip",
            "workflow_run": {
                "id": run.id,
                "repository_id": self._repo_id(run.repo),
                "head_repository_id": self._repo_id(run.head_repo),
                "head_branch": "main",
                "head_sha": "0" * 40,
            },
        }

    def _run(self, run_id: int) -> Response:
        run = self.runs.get(run_id)
        if run is None:
            return _reply({"message": "Not Found"}, 404)
        return _reply(
            {
                "id": run.id,
                "path": run.path,
                "event": "push" if run.head_repo == run.repo else "pull_request",
                "repository": {"id": self._repo_id(run.repo), "full_name": run.repo},
                "head_repository": {"id": self._repo_id(run.head_repo), "full_name": run.head_repo},
            }
        )

    def _artifact_zip(self, artifact_id: int) -> Response:
        artifact = self.artifacts.get(artifact_id)
        if artifact is None or artifact.expired:
            return _reply({"message": "Not Found"}, 404 if artifact is None else 410)
        return Response(_zip(artifact.files), 200, content_type="application/zip")


def _zip(files: dict[str, str]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, text in files.items():
            zf.writestr(name, text)
    return buf.getvalue()


def _runner_json(runner: FakeRunner) -> dict[str, Any]:
    return {
        "id": runner.id,
        "name": runner.name,
        "os": "Linux",
        "status": runner.status,
        "busy": runner.busy,
        "labels": [{"name": n, "type": "custom"} for n in runner.labels],
        "runner_group_id": runner.group,
    }


def _reply(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(json.dumps(data), status, headers, content_type="application/json")


@pytest.fixture(scope="session")
def github_server() -> Iterator[HTTPServer]:
    """The fake's server, one per session: stopping one takes half a second (werkzeug)."""
    server = HTTPServer(host="127.0.0.1", port=0)
    server.start()
    yield server
    server.clear()
    server.stop()


@pytest.fixture
def fake_github(github_server: HTTPServer) -> Iterator[FakeRunnersGitHub]:
    """A fresh fake per test, on the session's server (the fake Clore has `httpserver`)."""
    github_server.clear()
    fake = FakeRunnersGitHub(github_server)
    fake.build_package()
    yield fake
    github_server.clear()


__all__ = ["ACTIONS_TOKEN", "ADMIN_TOKEN", "FakeRunnersGitHub", "fake_github", "github_server"]
