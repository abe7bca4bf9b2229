"""Ownership fails safe whatever shape `my_orders` echoes our tag in (reference §9: one capture
shows "8080"; the SDK types it an integer; "PORT/http", a list, a late listing, a late `ct` and
a missing `spot` key are all possible). A tag match is at worst unproven, never "not ours"; an
echo we cannot read is unproven too, and said once."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from runner.backends.clore import errors as e
from runner.backends.clore import ownership
from runner.backends.clore.cleanup import reconcile
from runner.backends.clore.models import Order
from runner.backends.clore.ownership import (
    Claim,
    ClockOffset,
    EchoReading,
    find_ours,
    is_a_tag,
    new_tag,
    read_echo,
)
from runner.stores.ledger.sqlite import SqliteLedger
from tests.backends.clore.killed_create import IMAGE, SERVER, killed_after_an_erring_create, request
from tests.fakes.clore_api import TAG_ECHOES, FakeClore, Faults

SHAPES = [s for s in TAG_ECHOES if s not in ("absent-until-deployed", "unknown")]


@pytest.fixture(autouse=True)
def _within_rate_limits(fake_clore: FakeClore) -> Iterator[None]:
    yield
    assert fake_clore.violations == []


def test_the_echo_is_read_in_every_shape_seen_or_typed() -> None:
    assert read_echo("54321") == EchoReading(frozenset({54321}))
    assert read_echo(Order(id=1, http_port=54321).http_port).ports == {54321}
    assert read_echo(Order(id=1, http_port="54321/http").http_port).ports == {54321}
    assert read_echo(Order(id=1, http_port=["54321", "8080"]).http_port).ports == {54321, 8080}
    assert read_echo(Order(id=1, http_port=54321.0).http_port).ports == {54321}
    assert read_echo("54321:31002").ports == {54321}  # container:public, as tcp_ports are
    assert read_echo(None).absent and read_echo(" ").absent
    assert Order(id=1, http_port=[]).http_port is None
    weird = read_echo(Order(id=1, http_port={"54321": "http"}).http_port)
    assert weird.unknown and not weird.absent


def test_tags_are_drawn_where_http_ports_were_seen_accepted() -> None:
    drawn = {new_tag() for _ in range(2000)}
    assert all(3002 <= t <= 9999 for t in drawn)
    assert not drawn & ownership.SERVICE_PORTS  # no job's server published by our proof
    assert all(is_a_tag(t) for t in drawn) and is_a_tag(50001)  # an older version's tag
    assert not is_a_tag(8080) and not is_a_tag(80)  # a default, not a create's tag


def claim(tag: int = 50001, spot: bool | None = None) -> Claim:
    return Claim(SERVER, 1000.0, ClockOffset(0, 1), 1001.0, tag, IMAGE, "USD-Blockchain", spot)


def test_a_tag_match_is_never_not_ours_whatever_ct_says() -> None:
    for ct in (100.0, 1000.0, 5000.0, None):
        order = Order(id=7, si=SERVER, ct=ct, image=IMAGE, http_port="50001/http")
        verdict = find_ours([order], claim())
        assert verdict.order is not None or verdict.ambiguous, ct
    late = Order(id=7, si=SERVER, ct=5000, image=IMAGE, http_port=50001)
    assert find_ours([late], claim()).ambiguous


def test_only_a_readable_tag_of_another_create_rules_an_order_out() -> None:
    def verdict(echo: object) -> tuple[bool, bool]:
        order = Order(id=7, si=SERVER, ct=1000, image=IMAGE, http_port=echo)
        found = find_ours([order], claim())
        return found.order is not None, found.ambiguous

    assert verdict("50002") == (False, False)  # another create's tag: not ours
    assert verdict("4123/http") == (False, False)
    assert verdict("8080") == (False, True)  # a default in its place: maybe ours
    assert verdict(None) == (False, True)
    assert verdict({"what": 1}) == (False, True)  # a shape we do not know: maybe ours


def test_an_unknown_shape_is_logged_once_and_redacted(caplog: pytest.LogCaptureFixture) -> None:
    ownership._shapes_logged.clear()
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            read_echo("port=5\x1b[31m1234")
        read_echo("port=6")  # the same shape, other digits: said already
    said = [r.getMessage() for r in caplog.records if "shape" in r.getMessage()]
    assert len(said) == 1 and "\x1b" not in said[0] and "unproven" in said[0]


@pytest.mark.parametrize("shape", SHAPES)
def test_a_run_finds_its_order_in_every_echo_shape(fake_clore: FakeClore, shape: str) -> None:
    fake_clore.tag_echo = shape
    order = fake_clore.client().create_order(request())
    assert [o.id for o in fake_clore.live_orders()] == [order.id]


def test_a_tag_listed_only_once_deployed_still_finds_the_order(fake_clore: FakeClore) -> None:
    fake_clore.tag_echo = "absent-until-deployed"
    order = fake_clore.client().create_order(request())
    assert order.http_port is None and [o.id for o in fake_clore.live_orders()] == [order.id]


def test_a_late_ct_does_not_orphan_the_order_of_an_accepted_create(
    fake_clore: FakeClore,
) -> None:
    """Before: a `ct` more than 15 s after the answer read our tagged order as not ours."""
    fake_clore.ct_late_s = 120.0
    order = fake_clore.client().create_order(request())
    assert order.id in fake_clore.orders


def test_a_spot_order_echoing_no_spot_key_is_found(fake_clore: FakeClore) -> None:
    """Before: an absent `spot` read as false, against our spot create: orphaned."""
    fake_clore.echo_spot = False
    order = fake_clore.client().create_order(request(bid=1.5))
    assert order.spot is None and fake_clore.orders[order.id].spot


@pytest.mark.parametrize("shape", SHAPES)
def test_cleanup_after_a_crash_cancels_the_order_in_every_echo_shape(
    fake_clore: FakeClore, tmp_path: Path, shape: str
) -> None:
    """Before: "PORT/http" read as another tag: "no order was created; marked failed", exit 0,
    the order billing on."""
    fake_clore.tag_echo = shape
    with SqliteLedger(tmp_path / "ledger.db", clock=fake_clore.clock) as ledger:
        killed_after_an_erring_create(fake_clore, ledger)  # the run died before it looked
        fake_clore.clock.advance(120)
        actions = reconcile(ledger, fake_clore.client(), dry_run=False)
    assert [a.kind for a in actions] == ["cancelled"]
    assert fake_clore.live_orders() == []


def test_cleanup_never_marks_failed_an_order_with_our_tag_and_a_late_ct(
    fake_clore: FakeClore, tmp_path: Path
) -> None:
    fake_clore.ct_late_s = 120.0
    with SqliteLedger(tmp_path / "ledger.db", clock=fake_clore.clock) as ledger:
        killed_after_an_erring_create(fake_clore, ledger)
        fake_clore.clock.advance(300)
        actions = reconcile(ledger, fake_clore.client(), dry_run=False)
        assert [a.kind for a in actions] == ["unproven"] and not actions[0].resolved
        assert [r.state for r in ledger.rentals("X")] == ["intent"]
    assert len(fake_clore.live_orders()) == 1


def test_a_failed_create_finds_its_tagged_order_stamped_late(fake_clore: FakeClore) -> None:
    """HTTP 500 that created the order, `ct` a minute after the answer: the run looking for
    it takes the order echoing its tag (before: outside the window, "most likely not created",
    and the order billed on; the fault suite's seed 102)."""
    fake_clore.ct_late_s = 60.0
    fake_clore.fail_next("create_order", Faults.DB_ERROR_BUT_CREATED)
    order = fake_clore.client().create_order(request())
    assert [o.id for o in fake_clore.live_orders()] == [order.id]


@pytest.mark.parametrize("shape", ["absent-until-deployed", "unknown"])
def test_cleanup_names_an_unlisted_or_unreadable_tag_stamped_late_never_failed(
    fake_clore: FakeClore, tmp_path: Path, shape: str
) -> None:
    """The long fault run's seed 7011: a create answered HTTP 500 made its order, the run was
    stopped before it looked, and the order, still deploying, lists no tag; `ct` stamps it a
    minute late. Before: outside the window, "no order was created; marked failed", exit 0,
    the order billing on. It may be ours: named, the row kept open."""
    fake_clore.tag_echo = shape
    fake_clore.ct_late_s = 60.0
    fake_clore.online_after_s = 3600.0  # its image still pulling through the cleanup
    with SqliteLedger(tmp_path / "ledger.db", clock=fake_clore.clock) as ledger:
        killed_after_an_erring_create(fake_clore, ledger)
        fake_clore.clock.advance(120)
        actions = reconcile(ledger, fake_clore.client(), dry_run=False)
        (made,) = [o.id for o in fake_clore.live_orders()]
        assert [a.kind for a in actions] == ["unproven"] and not actions[0].resolved
        assert f"order {made} may be ours" in actions[0].detail
        assert [r.state for r in ledger.rentals("X")] == ["intent"]
    assert fake_clore.calls("cancel_order") == []


def test_an_accepted_create_names_its_unreadable_order_stamped_late(fake_clore: FakeClore) -> None:
    """The long fault run's seed 7035: an accepted create whose order echoes the tag in a
    shape we cannot read, `ct` 20 s after the answer. Before: outside the window, no order
    "may be ours", and the run said "its order is not listed yet" about a listed, billing
    order it never named. Now the error names the order."""
    fake_clore.tag_echo = "unknown"
    fake_clore.ct_late_s = 20.0
    client = fake_clore.client(recover_delays_s=(1.0, 2.0), follow_up_delays_s=(5.0,))
    with pytest.raises(e.OrderOutcomeUnknownError) as raised:
        client.create_order(request())
    (made,) = [o.id for o in fake_clore.live_orders()]
    assert raised.value.accepted and raised.value.maybe_ours == (made,)
    assert f"order {made}" in str(raised.value)
