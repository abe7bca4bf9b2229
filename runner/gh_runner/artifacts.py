"""The runner records the reaper may believe: artifacts of this repository's own runs of the
workflows that start runners, read with a size bound.

An artifact's name is chosen by whoever uploads it, and a fork's pull request runs the fork's
own workflow in this repository's Actions: its artifacts are listed beside ours. So a record is
read only from an artifact whose run (GitHub lists it with the artifact) is of this repository,
with this repository as its head (not a fork's), of a workflow file the operator names. The
download is streamed and cut at `MAX_ZIP_BYTES`; the record inside at `MAX_RECORD_BYTES`.
"""

from __future__ import annotations

import io
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from runner.backends.runner_record import (
    ARTIFACT_PREFIX,
    RECORD_FILE,
    RecordError,
    RunnerRecord,
    parse_record,
)
from runner.report.github_api import GitHubApi

MAX_RECORD_BYTES = 256 * 1024
MAX_ZIP_BYTES = 1024 * 1024  # a record zipped is a few kB: anything far past it is not one
_MAX_ARTIFACTS = 1000  # newest first: far more than a week of starts
# The shipped workflows that start runners: the files a copied reaper trusts by default.
DEFAULT_WORKFLOWS = ("gpu-runner.yml", "gpu-runner-matrix.yml")


@dataclass
class Sources:
    """What the artifacts gave: the records believed, and what was left out (counted, so the
    reaper can fail loudly when records came from a workflow it was not told of)."""

    records: list[RunnerRecord] = field(default_factory=list)
    foreign: int = 0  # a fork's run: expected on a public repository, ignored
    unnamed: list[str] = field(default_factory=list)  # workflows the operator did not name


def trusted_records(
    api: GitHubApi, repo: str, workflows: tuple[str, ...], say: Callable[[str], None]
) -> Sources:
    """Every readable record among `repo`'s unexpired runner-record artifacts that its own
    runs of `workflows` (file names under .github/workflows/) uploaded."""
    out = Sources()
    runs: dict[int, str] = {}  # run id -> why it is not trusted ("" when it is)
    for artifact in _artifacts(api, repo):
        name = str(artifact.get("name") or "")
        artifact_id = artifact.get("id")
        if not name.startswith(ARTIFACT_PREFIX) or artifact.get("expired"):
            continue
        if not isinstance(artifact_id, int):
            continue
        why = _untrusted(api, repo, workflows, artifact, runs)
        if why.startswith("fork"):
            out.foreign += 1
            say(f"skipped: artifact {name}: {why}")
            continue
        if why:
            out.unnamed.append(name)
            say(f"skipped: artifact {name}: {why}")
            continue
        size = artifact.get("size_in_bytes")
        if isinstance(size, int) and size > MAX_ZIP_BYTES:
            say(f"skipped: artifact {name} is {size} bytes: not a record")
            continue
        try:
            data = _download(api, f"/repos/{repo}/actions/artifacts/{artifact_id}/zip")
            out.records.append(parse_record(_record_text(data), f"artifact {name}"))
        except RecordError as exc:
            say(f"skipped: {exc}")
    return out


def _untrusted(
    api: GitHubApi,
    repo: str,
    workflows: tuple[str, ...],
    artifact: dict[str, Any],
    runs: dict[int, str],
) -> str:
    """Why the artifact's run is not one whose records we believe, or "" when it is."""
    run = artifact.get("workflow_run")
    run = run if isinstance(run, dict) else {}
    run_id = run.get("id")
    if not isinstance(run_id, int):
        return "GitHub names no run for it"
    head_id, repo_id = run.get("head_repository_id"), run.get("repository_id")
    if not isinstance(head_id, int) or head_id != repo_id:
        return "fork: its run's head is another repository"
    if run_id not in runs:
        runs[run_id] = _run_verdict(
            api.call("GET", f"/repos/{repo}/actions/runs/{run_id}"), repo, workflows
        )
    return runs[run_id]


def _run_verdict(run: Any, repo: str, workflows: tuple[str, ...]) -> str:
    run = run if isinstance(run, dict) else {}
    head = run.get("head_repository")
    home = run.get("repository")
    head_name = str(head.get("full_name", "")) if isinstance(head, dict) else ""
    home_name = str(home.get("full_name", "")) if isinstance(home, dict) else ""
    if head_name.lower() != repo.lower() or home_name.lower() != repo.lower():
        return "fork: its run's head is another repository"
    path = str(run.get("path") or "")
    folder, _, file_name = path.rpartition("/")
    if folder != ".github/workflows" or file_name not in workflows:
        named = ", ".join(workflows)
        return (
            f"its run is of the workflow {path or '(none)'}, not one named ({named}): "
            "name the workflows that start runners with --workflows"
        )
    return ""


def _artifacts(api: GitHubApi, repo: str) -> Iterator[dict[str, Any]]:
    """The artifacts list, page by page (`Link: rel="next"` within this API only), newest
    first as GitHub lists them, at most `_MAX_ARTIFACTS`."""
    resp = api.request("GET", f"/repos/{repo}/actions/artifacts", params={"per_page": 100})
    seen = 0
    while True:
        data = resp.json() if resp.content else {}
        items = data.get("artifacts") if isinstance(data, dict) else None
        for item in items if isinstance(items, list) else []:
            seen += 1
            if seen > _MAX_ARTIFACTS:
                return
            if isinstance(item, dict):
                yield item
        next_url = resp.links.get("next", {}).get("url", "")
        if not next_url.startswith(api.base_url + "/"):
            return
        resp = api.request("GET", next_url)


def _download(api: GitHubApi, path: str) -> bytes:
    """The artifact's zip, streamed and cut at MAX_ZIP_BYTES: the listing's size is the
    uploader's word, the bytes that come are not bounded by it."""
    # The path, not the reply's URL: the token goes only to this API (its download redirects
    # to storage, and requests drops the token on the way).
    resp = api.request("GET", path, stream=True)
    buf = bytearray()
    try:
        for chunk in resp.iter_content(64 * 1024):
            buf += chunk
            if len(buf) > MAX_ZIP_BYTES:
                raise RecordError(f"its zip is over {MAX_ZIP_BYTES} bytes: not a record")
    finally:
        resp.close()
    return bytes(buf)


def _record_text(data: bytes) -> str:
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            info = zf.getinfo(RECORD_FILE)
            if info.file_size > MAX_RECORD_BYTES:
                raise RecordError(f"{RECORD_FILE} is {info.file_size} bytes: not a record")
            with zf.open(info) as member:  # the header's size is the uploader's word too
                raw = member.read(MAX_RECORD_BYTES + 1)
            if len(raw) > MAX_RECORD_BYTES:
                raise RecordError(f"{RECORD_FILE} is over {MAX_RECORD_BYTES} bytes")
            return raw.decode("utf-8", "replace")
    except (zipfile.BadZipFile, KeyError, EOFError, OSError, ValueError) as exc:
        raise RecordError(f"no readable {RECORD_FILE} in it ({type(exc).__name__})") from None
