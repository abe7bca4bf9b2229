"""The reaper (`cleanup --runners`) against forged runner records.

Anyone whose workflow runs in the repository's Actions (a fork's pull request runs the fork's
own workflow) can upload an artifact named `clore-runner-record-*`. The reaper must believe
only the repository's own runs of the workflows that start runners, decide an order only by a
record that proves it (order id, server, creation time in the one `my_orders` listing), hold a
record's cap to bounds it cannot choose, read artifacts with a size bound and print a record's
text inert. Forged records: live runners cancelled 0, orphans spared 0.
"""

from __future__ import annotations

import json
import re

import pytest

from runner.backends.runner_record import RECORD_FILE, RunnerRecord, RunnerRental
from runner.errors import InfrastructureError
from runner.gh_runner.artifacts import MAX_ZIP_BYTES
from runner.gh_runner.reap_cmd import reap_from_github
from tests.fakes.clore_api import FakeClore
from tests.fakes.github_runners import ACTIONS_TOKEN, REPO, FakeRunnersGitHub
from tests.fakes.github_runners import fake_github as fake_github
from tests.fakes.github_runners import github_server as github_server

FORK = "mallory/gpu-lib"
HOUR = 3600.0


def _rental(fake: FakeClore, order_id: int, cap_after_s: float, **change: object) -> RunnerRental:
    order = fake.orders[order_id]
    fields: dict[str, object] = {
        "label": f"clore-9-1-1-{order_id}",
        "runner_id": 42,
        "scope": f"repos/{REPO}",
        "order_id": order_id,
        "server_id": order.server_id,
        "created_unix": int(order.created_unix),
        "cap_unix": int(order.created_unix) + cap_after_s,
        "run_id": "runner-9-1",
        "currency": "USD-Blockchain",
        "spot": False,
        "usd_per_unit": 1.0,
        "fee_rate": 0.05,
        "creation_fee_native": 0.1,
        "usd_per_hour": 0.1,
    }
    fields.update(change)
    return RunnerRental.model_validate(fields)


def _upload(github: FakeRunnersGitHub, rentals: list[RunnerRental], **where: str) -> None:
    text = RunnerRecord(runners=tuple(rentals)).to_json()
    github.add_artifact(f"clore-runner-record-{rentals[0].label}", {RECORD_FILE: text}, **where)


def _reap(fake: FakeClore, github: FakeRunnersGitHub, **kwargs: object) -> tuple[int, list[str]]:
    lines: list[str] = []
    env = {"GITHUB_TOKEN": ACTIONS_TOKEN, "GITHUB_REPOSITORY": REPO, "GITHUB_API_URL": github.url}
    left = reap_from_github(fake.client, False, lines.append, env, **kwargs)  # type: ignore[arg-type]
    return left, lines


def _live(fake: FakeClore, order_id: int) -> bool:
    return fake.orders[order_id].live


def test_a_forks_record_cancels_no_live_runner(
    fake_clore: FakeClore, fake_github: FakeRunnersGitHub
) -> None:
    """Minute 10 of a 60-minute runner; a fork's run uploads a copy with a cap at minute 1."""
    order_id = fake_clore.add_order(88028, age_s=600)
    real = _rental(fake_clore, order_id, HOUR)
    _upload(
        fake_github,
        [real.model_copy(update={"cap_unix": real.created_unix + 60.0})],
        head_repo=FORK,
    )
    _upload(fake_github, [real])
    left, lines = _reap(fake_clore, fake_github)
    assert _live(fake_clore, order_id), lines  # live runners cancelled: 0
    assert left == 0 and any("fork" in line for line in lines)


def test_an_earlier_cap_in_a_trusted_copy_does_not_cut_a_live_runner_short(
    fake_clore: FakeClore, fake_github: FakeRunnersGitHub
) -> None:
    order_id = fake_clore.add_order(88028, age_s=600)
    real = _rental(fake_clore, order_id, HOUR)
    _upload(fake_github, [real.model_copy(update={"cap_unix": real.created_unix + 60.0})])
    _upload(fake_github, [real])
    left, lines = _reap(fake_clore, fake_github)
    assert _live(fake_clore, order_id) and left == 0
    assert any("within its cap (50 min left)" in line for line in lines), lines


def test_a_far_cap_does_not_keep_an_orphan_billing(
    fake_clore: FakeClore, fake_github: FakeRunnersGitHub
) -> None:
    """A record whose cap is 30 h out: the reaper's own maximum (24 h) holds."""
    order_id = fake_clore.add_order(88028, age_s=25 * HOUR)
    _upload(fake_github, [_rental(fake_clore, order_id, 30 * HOUR)])
    left, lines = _reap(fake_clore, fake_github)
    assert not _live(fake_clore, order_id), lines  # orphans spared: 0
    assert left == 0
    order_id = fake_clore.add_order(88028, age_s=3 * HOUR)  # the operator's own bound: 2 h
    _upload(fake_github, [_rental(fake_clore, order_id, 30 * HOUR)])
    _reap(fake_clore, fake_github, max_life_s=2 * HOUR)
    assert not _live(fake_clore, order_id)


def test_a_record_failing_the_proof_settles_no_order_another_names(
    fake_clore: FakeClore, fake_github: FakeRunnersGitHub
) -> None:
    """Order ids are sequential: a record naming the orphan's id with a wrong server, read
    first, must not count the order settled and leave the real record unread."""
    order_id = fake_clore.add_order(88028, age_s=3 * HOUR)
    real = _rental(fake_clore, order_id, HOUR)
    _upload(fake_github, [real.model_copy(update={"server_id": 1, "cap_unix": 0.0})])
    _upload(fake_github, [real])
    left, lines = _reap(fake_clore, fake_github)
    assert not _live(fake_clore, order_id), lines  # orphans spared: 0
    assert left == 0


def test_a_record_proving_nothing_is_left_alone_and_said(
    fake_clore: FakeClore, fake_github: FakeRunnersGitHub
) -> None:
    """A live order of this key that a record names and does not prove may be ours: named,
    counted among what may bill (exit 3), never cancelled on the record's word. Before: "left
    alone", exit 0."""
    order_id = fake_clore.add_order(88028, age_s=3 * HOUR)
    wrong = _rental(fake_clore, order_id, HOUR, server_id=7)
    _upload(fake_github, [wrong])
    left, lines = _reap(fake_clore, fake_github)
    assert _live(fake_clore, order_id) and left == 1
    (said,) = [line for line in lines if f"order {order_id}" in line]
    assert "not provably ours: it may be ours, left running" in said
    assert "--cancel-unproven" in said


def test_cancel_unproven_holds_an_unproven_order_to_the_reapers_own_bound_not_the_records(
    fake_clore: FakeClore, fake_github: FakeRunnersGitHub
) -> None:
    """On a person's word an unproven order is cancelled, but only past the bound no record
    chooses (its own creation plus --max-hours): a forged record's early cap cuts no live
    runner short."""
    young = fake_clore.add_order(88028, age_s=600)  # a live runner, 10 minutes in
    _upload(fake_github, [_rental(fake_clore, young, 60.0, created_unix=1)])  # forged
    left, lines = _reap(fake_clore, fake_github, cancel_unproven=True)
    assert _live(fake_clore, young) and left == 0, lines
    old = fake_clore.add_order(100302, age_s=3 * HOUR)  # an orphan past the operator's 2 h
    _upload(fake_github, [_rental(fake_clore, old, HOUR, server_id=7)])
    left, lines = _reap(fake_clore, fake_github, cancel_unproven=True, max_life_s=2 * HOUR)
    assert not _live(fake_clore, old) and left == 0, lines
    assert _live(fake_clore, young)
    fake_clore.end_order(young)  # the fixture checks nothing is left billing


def test_records_from_a_workflow_not_named_are_not_believed_and_the_reaper_fails(
    fake_clore: FakeClore, fake_github: FakeRunnersGitHub
) -> None:
    order_id = fake_clore.add_order(88028, age_s=600)
    real = _rental(fake_clore, order_id, HOUR)
    early = real.model_copy(update={"cap_unix": real.created_unix + 60.0})
    _upload(fake_github, [early], workflow=".github/workflows/lint.yml")
    with pytest.raises(InfrastructureError, match="not named"):
        _reap(fake_clore, fake_github)
    assert _live(fake_clore, order_id)


@pytest.mark.slow
def test_one_my_orders_read_decides_a_600_rental_record(
    fake_clore: FakeClore, fake_github: FakeRunnersGitHub
) -> None:
    """600 rentals within their caps: one `my_orders` read (not one per rental)."""
    rentals = []
    for n in range(600):
        order_id = fake_clore.add_order(88028, age_s=600)
        rentals.append(_rental(fake_clore, order_id, HOUR, label=f"clore-9-1-{n}-x"))
    _upload(fake_github, rentals)
    before = len(fake_clore.requests)
    left, _ = _reap(fake_clore, fake_github)
    calls = fake_clore.requests[before:]
    print(f"\nreaper API calls for a 600-rental record within its caps: {len(calls)}")
    assert left == 0 and [c.endpoint for c in calls] == ["my_orders"]
    fake_clore.clock.advance(2 * HOUR)  # every one past its cap: one cancel each, shared reads
    before = len(fake_clore.requests)
    left, _ = _reap(fake_clore, fake_github)
    calls = [c.endpoint for c in fake_clore.requests[before:]]
    print(
        f"reaper API calls for a 600-rental record past its caps: {len(calls)} "
        f"({calls.count('cancel_order')} cancel_order, {calls.count('my_orders')} my_orders)"
    )
    assert left == 0 and fake_clore.live_orders() == []
    assert calls.count("cancel_order") == 600 and calls.count("my_orders") <= 3


def test_record_text_is_inert_in_the_log(
    fake_clore: FakeClore, fake_github: FakeRunnersGitHub
) -> None:
    forged = json.dumps({"version": 1, "runners": [], "\n::error title=x::pwned": 1})
    fake_github.add_artifact("clore-runner-record-x", {RECORD_FILE: forged})
    _left, lines = _reap(fake_clore, fake_github)
    text = "\n".join(lines)
    assert "pwned" in text and not re.search(r"^\s*::", text, re.M), text
    assert "::error" not in text


def test_an_artifact_is_read_with_a_size_bound(
    fake_clore: FakeClore, fake_github: FakeRunnersGitHub
) -> None:
    import os  # random bytes do not compress: a zip past the bound

    fake_github.add_artifact(
        "clore-runner-record-big", {RECORD_FILE: os.urandom(MAX_ZIP_BYTES).hex()}, size=100
    )
    fake_github.add_artifact("clore-runner-record-huge", {RECORD_FILE: "{}"}, size=10**10)
    _left, lines = _reap(fake_clore, fake_github)
    assert any("over" in line and "bytes" in line for line in lines), lines
    assert any("10000000000 bytes: not a record" in line for line in lines), lines
    downloads = [p for m, p in fake_github.seen if p.endswith("/zip")]
    assert len(downloads) == 1  # the one listed as huge was never fetched
