"""What the runners cost, in Markdown: the step summary and the PR comment's runner section.

Server names come from the marketplace (untrusted): escaped as every report escapes them.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timezone

from runner.backends.runner_record import RunnerRecord
from runner.core.money import usd_text
from runner.figures import duration, money, rate
from runner.gh_runner.stop import Stopped
from runner.report.markdown import cell, remote

TITLE = "GPU runners"

_KIND_WORDS = {
    "cancelled": "cancelled",
    "ended": "had already ended",
    "not-listed": "not listed (nothing to cancel)",
    "not-ours": "not provably ours: left alone",
    "still-live": "STILL LIVE: run `clore-run cleanup --runners`",
    "error": "ERROR: run `clore-run cleanup --runners`",
}


def total_usd(stopped: Sequence[Stopped]) -> float:
    return sum(s.released.cost.total_usd for s in stopped if s.released.cost is not None)


def runners_markdown(stopped: Sequence[Stopped], run_url: str | None = None) -> str:
    """A heading, one row per runner and the total as billed."""
    rows = [
        "| runner | server | order | held | cost as billed | registration |",
        "|---|---|---|---|---|---|",
    ]
    for s in stopped:
        r, done = s.rental, s.released
        server = f"#{r.server_id} {remote(r.gpus)} at {rate(r.usd_per_hour)}/h"
        order = f"{r.order_id} {_KIND_WORDS[done.kind]}"
        rows.append(
            f"| `{cell(r.label)}` | {server} | {cell(order)} | {duration(done.lived_s)} "
            f"| {_cost(s)} | {cell(s.registration)} |"
        )
    details = [f"- {cell(s.released.detail)}" for s in stopped if s.released.detail]
    where = f" · [run]({run_url})" if run_url else ""
    total = (
        f"**{usd_text(total_usd(stopped))}** for {len(stopped)} runner(s), as billed: "
        f"renter fee included, creation fee once an order lived 10 minutes{where}"
    )
    return "\n".join([f"### {TITLE}", "", *rows, "", total, *details, ""])


def _cost(s: Stopped) -> str:
    cost = s.released.cost
    if cost is None:
        return "–"
    parts = (
        f"{money(cost.total_usd)} (rental {money(cost.rental_usd)} + fee "
        f"{money(cost.renter_fee_usd)} + creation {money(cost.creation_fee_usd)})"
    )
    return parts + (" estimated: no spend from the API" if s.released.estimated else "")


def started_markdown(record: RunnerRecord) -> str:
    """What `start` rented: each runner's label, server, price and cap."""
    rows = ["| runner | server | price | capped at |", "|---|---|---|---|"]
    for r in record.runners:
        cap = datetime.fromtimestamp(r.cap_unix, tz=timezone.utc).strftime("%H:%M UTC")
        rows.append(
            f"| `{cell(r.label)}` | #{r.server_id} {remote(r.gpus)} | {rate(r.usd_per_hour)}/h "
            f"| {cap} |"
        )
    note = "Renter fee included. `runner-stop` gives the servers back and says what they cost."
    return "\n".join([f"### {TITLE}: started", "", *rows, "", note, ""])
