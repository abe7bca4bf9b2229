"""`clore-run cleanup --runners`: the cron reaper for runner rentals past their cap.

A stop job that never ran (the workflow cancelled, the runner job's machine dead) leaves its
server billed. The action uploads each start's record as an artifact named
`clore-runner-record-<label>`; the reaper (a scheduled workflow, GITHUB_TOKEN with
`actions: read`) lists the repository's artifacts, reads each record, and for every rental past
its cap (`max-minutes` from its create, plus a grace for a stop job still running) proves the
order ours and cancels it (release.py). A rental within its cap is left alone: its runner may
be running a job. The same order in two records is looked at once.
"""

from __future__ import annotations

import io
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from runner.backends.clore.api import CloreClient
from runner.clock import Clock
from runner.gh_runner.errors import RecordError
from runner.gh_runner.record import (
    ARTIFACT_PREFIX,
    RECORD_FILE,
    RunnerRecord,
    RunnerRental,
    parse_record,
)
from runner.gh_runner.release import Released, release
from runner.report.github_api import GitHubApi

GRACE_S = 300.0  # past the cap, a stop job may still be cancelling: leave it this long
_MAX_RECORD_BYTES = 256 * 1024
_MAX_ARTIFACTS = 1000  # newest first: far more than a week of starts


@dataclass(frozen=True)
class Reaped:
    rental: RunnerRental
    released: Released | None  # None: within its cap, left alone
    note: str = ""


def records_in_artifacts(
    api: GitHubApi, repo: str, say: Callable[[str], None]
) -> Iterator[RunnerRecord]:
    """Every readable record among the repository's unexpired runner-record artifacts."""
    for artifact in _artifacts(api, repo):
        name = str(artifact.get("name") or "")
        artifact_id = artifact.get("id")
        if not name.startswith(ARTIFACT_PREFIX) or artifact.get("expired"):
            continue
        if not isinstance(artifact_id, int):
            continue
        # The path, not the reply's URL: the token goes only to this API (its download
        # redirects to storage, and requests drops the token on the way).
        resp = api.request("GET", f"/repos/{repo}/actions/artifacts/{artifact_id}/zip")
        try:
            yield parse_record(_record_text(resp.content), f"artifact {name}")
        except RecordError as exc:
            say(f"skipped: {exc}")


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


def _record_text(data: bytes) -> str:
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            info = zf.getinfo(RECORD_FILE)
            if info.file_size > _MAX_RECORD_BYTES:
                raise RecordError(f"{RECORD_FILE} is {info.file_size} bytes: not a record")
            return zf.read(info).decode("utf-8", "replace")
    except (zipfile.BadZipFile, KeyError) as exc:
        raise RecordError(f"no {RECORD_FILE} in it ({type(exc).__name__})") from None


def reap(
    records: Iterator[RunnerRecord] | list[RunnerRecord],
    client: CloreClient,
    clock: Clock,
    *,
    dry_run: bool = False,
    grace_s: float = GRACE_S,
) -> list[Reaped]:
    """Cancel every rental of `records` past its cap (and grace); say what was done."""
    done: list[Reaped] = []
    orders: set[int] = set()
    for record in records:
        for rental in record.runners:
            if rental.order_id in orders:
                continue
            orders.add(rental.order_id)
            over_s = clock.time() - rental.cap_unix
            if over_s < grace_s:
                note = (
                    f"within its cap ({-over_s / 60:.0f} min left)"
                    if over_s < 0
                    else ("just past its cap: its stop job may still be running")
                )
                done.append(Reaped(rental, None, note))
            elif dry_run:
                done.append(
                    Reaped(rental, None, f"past its cap by {over_s / 60:.0f} min: would cancel")
                )
            else:
                done.append(Reaped(rental, release(client, rental, clock)))
    return done


def describe(reaped: Reaped) -> str:
    r = reaped.rental
    head = f"{r.label}  server {r.server_id}  order {r.order_id}"
    if reaped.released is None:
        return f"{head}  {reaped.note}"
    rel = reaped.released
    cost = f"; cost as billed ${rel.cost.total_usd:.4f}" if rel.cost is not None else ""
    detail = f": {rel.detail}" if rel.detail else ""
    return f"{head}  {rel.kind}{detail}{cost}"
