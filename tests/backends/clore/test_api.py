"""The Clore client against the stateful fake API (loopback only, fake clock)."""

from __future__ import annotations

import itertools
import logging
import threading
from typing import Any

import pytest
import requests
from requests.adapters import HTTPAdapter

from runner.backends.clore import errors as e
from runner.backends.clore.api import (
    FOLLOW_UP_DELAYS_S,
    RECOVER_DELAYS_S,
    CloreClient,
    OrderRequest,
    RetryPolicy,
)
from runner.backends.clore.market import offers_from_servers, spot_bid_per_day
from runner.backends.clore.ownership import SERVICE_PORTS
from runner.errors import InfrastructureError
from tests.fakes.clore_api import API_KEY, FakeClore, Fault, Faults

SSH_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFakeKeyForTests clore-run"


def on_demand(server_id: int = 88028, currency: str = "USD-Blockchain") -> OrderRequest:
    return OrderRequest(server_id, "nvidia/cuda:12.8.0-base-ubuntu22.04", currency, ssh_key=SSH_KEY)


def assert_spacing(fake: FakeClore) -> None:
    """The client's own targets, stricter than the API's: 1.1 s apart, 5.5 s before a create."""
    assert fake.violations == []
    times = [(r.t, r.endpoint) for r in fake.requests]
    for (before, _), (after, endpoint) in itertools.pairwise(times):
        gap = 5.5 if endpoint == "create_order" else 1.1
        assert after - before >= gap - 1e-9, f"{endpoint} only {after - before:.3f} s after"


# --- reads -------------------------------------------------------------------------------------


def test_marketplace_parses_every_sample_server_and_prices_it_per_hour(
    fake_clore: FakeClore,
) -> None:
    market = fake_clore.client().marketplace()
    assert {s.id for s in market.servers} == set(fake_clore.servers)
    assert market.skipped == 0
    prices = {
        o.server_id: o.on_demand_usd_per_hour
        for o in offers_from_servers(market.servers, "bitcoin")
    }
    # 3 USD/day is 0.125 $/h listed; the renter's 5 % on-demand fee comes on top.
    assert prices[99173] == pytest.approx(0.125 * 1.05)
    assert prices[100302] == pytest.approx(2.0 * 1.05)
    assert fake_clore.requests[0].auth == API_KEY  # the `auth` header, not Authorization


def test_a_malformed_marketplace_entry_is_skipped_not_fatal(fake_clore: FakeClore) -> None:
    fake_clore.servers[1] = {"id": "not-a-number", "price": {}}
    market = fake_clore.client().marketplace()
    assert market.skipped == 1 and len(market.servers) == len(fake_clore.servers) - 1


def test_wallets(fake_clore: FakeClore) -> None:
    wallets = {w.name: w.balance for w in fake_clore.client().wallets()}
    assert wallets == fake_clore.balances


def test_reads_retry_rate_limits_with_backoff(fake_clore: FakeClore) -> None:
    fake_clore.fail_next("wallets", Faults.RATE_LIMITED, times=2)
    assert fake_clore.client().wallets()
    calls = fake_clore.calls("wallets")
    assert [c.status for c in calls] == [429, 429, 200]
    assert calls[1].t - calls[0].t >= 2.0  # the backoff, longer than the 1.1 s spacing
    assert calls[2].t - calls[1].t >= 4.0  # and growing
    assert_spacing(fake_clore)


def test_retry_after_is_honoured(fake_clore: FakeClore) -> None:
    fake_clore.fail_next("my_orders", Fault(429, {"code": 5}, headers=(("Retry-After", "17"),)))
    fake_clore.client().my_orders()
    first, second = fake_clore.calls("my_orders")
    assert second.t - first.t >= 17


@pytest.mark.parametrize("fault", [Faults.BAD_GATEWAY, Faults.DB_ERROR])
def test_reads_retry_transient_errors(fake_clore: FakeClore, fault: Fault) -> None:
    fake_clore.fail_next("my_orders", fault)
    assert fake_clore.client().my_orders() == []
    assert len(fake_clore.calls("my_orders")) == 2


def test_read_retries_are_bounded_in_count(fake_clore: FakeClore) -> None:
    fake_clore.fail_next("wallets", Faults.BAD_GATEWAY, times=50)
    with pytest.raises(e.NonJsonReplyError):
        fake_clore.client(retry=RetryPolicy(max_attempts=4, max_total_s=1e9)).wallets()
    assert len(fake_clore.calls("wallets")) == 4


def test_read_retries_are_bounded_in_time(fake_clore: FakeClore) -> None:
    fake_clore.fail_next("wallets", Faults.RATE_LIMITED, times=50)
    with pytest.raises(e.RateLimitedError):
        fake_clore.client(retry=RetryPolicy(max_attempts=50, max_total_s=20)).wallets()
    calls = fake_clore.calls("wallets")
    assert 2 <= len(calls) < 50
    assert calls[-1].t - calls[0].t <= 20


def test_definite_errors_are_not_retried(fake_clore: FakeClore) -> None:
    fake_clore.fail_next("wallets", Faults.INVALID_INPUT)
    with pytest.raises(e.InvalidInputError):
        fake_clore.client().wallets()
    assert len(fake_clore.calls("wallets")) == 1


# --- error mapping -----------------------------------------------------------------------------

ERROR_CASES = [
    (Faults.RATE_LIMITED, e.RateLimitedError, "rate limit exceeded (code 5, HTTP 429)"),
    (Faults.CURRENCY_NOT_ALLOWED, e.CurrencyNotAllowedError, "currency-not-allowed (code 6)"),
    (Faults.SERVER_ALREADY_RENTED, e.ServerAlreadyRentedError, "server-already-rented (code 6)"),
    (Faults.NOT_ENOUGH_BALANCE, e.NotEnoughBalanceError, "not_enough_balance (code 6)"),
    (Faults.TOO_LOW_PRICE, e.TooLowPriceError, "too_low_price (code 6)"),
    (Faults.SERVER_OFFLINE, e.ServerOfflineError, "server-offline (code 6)"),
    (Faults.EXCEEDED_MAX_STEP, e.ExceededMaxStepError, "exceeded_max_step (code 6)"),
    (Faults.CANNOT_LOWER_YET, e.CannotLowerYetError, "can_lower_every_600_seconds (code 6)"),
    (Faults.UNKNOWN_APP_ERROR, e.ApplicationError, "gpu-on-fire (code 6)"),
    (Faults.DB_ERROR, e.DatabaseError, "database error (code 1)"),
    (Faults.INVALID_INPUT, e.InvalidInputError, "invalid input data (code 2)"),
    (Faults.INVALID_TOKEN, e.InvalidTokenError, "code 3: invalid API token"),
    (Faults.INVALID_ENDPOINT, e.InvalidEndpointError, "invalid endpoint (code 4)"),
    (Faults.UNKNOWN_CODE, e.UnknownCodeError, "unexpected reply (code 42, HTTP 200)"),
    (Faults.BAD_GATEWAY, e.NonJsonReplyError, "HTTP 502 with a non-JSON reply: '<html>"),
    (Fault(200, {"code": 0}), None, ""),
    (Fault(500, {"code": 0}), None, ""),  # code 0 wins over HTTP 500
]


@pytest.mark.parametrize(("fault", "expected", "message"), ERROR_CASES)
def test_every_code_maps_to_its_typed_error(
    fake_clore: FakeClore, fault: Fault, expected: type[e.CloreApiError] | None, message: str
) -> None:
    fake_clore.fail_next("wallets", fault)
    client = fake_clore.client(retry=RetryPolicy(max_attempts=1))
    if expected is None:
        client.wallets()
        return
    with pytest.raises(expected) as caught:
        client.wallets()
    exc = caught.value
    assert type(exc) is expected  # not just a parent class
    assert isinstance(exc, InfrastructureError) and exc.exit_code == 3
    # What the call was doing, in words (never the endpoint's name); a refused key is the one
    # refusal whichever call met it.
    start = e.REFUSED_KEY + " (" if expected is e.InvalidTokenError else "Clore API (reading "
    assert exc.message.startswith(start) and message in exc.message
    assert "wallets:" not in exc.message
    assert exc.http_status == fault.status
    assert API_KEY not in str(exc) and API_KEY not in repr(exc)


def test_code6_extras_are_exposed(fake_clore: FakeClore) -> None:
    client = fake_clore.client()
    fake_clore.fail_next("set_spot_price", Faults.EXCEEDED_MAX_STEP)
    with pytest.raises(e.ExceededMaxStepError) as step:
        client.set_spot_price(1, 10.0)
    fake_clore.fail_next("set_spot_price", Faults.CANNOT_LOWER_YET)
    with pytest.raises(e.CannotLowerYetError) as wait:
        client.set_spot_price(1, 10.0)
    assert (step.value.max_step, wait.value.time_to_lowering_s) == (0.5, 412)


def test_a_refused_key_is_an_invalid_token_error_with_a_hint(fake_clore: FakeClore) -> None:
    client = fake_clore.client(api_key="wrong-key-0123456789")
    with pytest.raises(e.InvalidTokenError) as caught:
        client.marketplace()
    assert "CLORE_API_KEY" in str(caught.value)
    assert "wrong-key-0123456789" not in str(caught.value) + repr(caught.value)
    assert len(fake_clore.requests) == 1  # never retried


def test_from_env(fake_clore: FakeClore) -> None:
    with pytest.raises(e.MissingApiKeyError) as caught:
        CloreClient.from_env({"CLORE_API_KEY": "  "})
    assert "CLORE_API_KEY is not set" in str(caught.value) and "export" in str(caught.value)
    client = CloreClient.from_env({"CLORE_API_KEY": API_KEY, "CLORE_API_URL": fake_clore.url})
    assert client.base_url == fake_clore.url
    assert CloreClient.from_env({"CLORE_API_KEY": "k"}).base_url == "https://api.clore.ai/v1"


# --- create, recover, cancel -------------------------------------------------------------------


def test_create_recovers_the_id_then_cancel(fake_clore: FakeClore) -> None:
    client = fake_clore.client()
    client.marketplace()
    order = client.create_order(on_demand())
    assert [o.id for o in fake_clore.live_orders()] == [order.id]
    made = fake_clore.orders[order.id]
    tag = fake_clore.calls("create_order")[0].body["ports"]
    assert (order.si, made.ssh_key, made.ports) == (88028, SSH_KEY, tag)
    assert order.http_port is not None and tag[order.http_port] == "http"  # echoed: the proof
    assert order.price == 2 and order.currency == "USD-Blockchain"
    assert not order.ready and order.ssh_endpoint is None  # listed, not yet online
    assert len(fake_clore.calls("create_order")) == 1

    fake_clore.clock.advance(fake_clore.online_after_s)
    (live,) = client.my_orders()
    assert live.ready and live.ssh_endpoint == ("n1.us.clorecloud.net", 1000 + order.id % 50000)
    assert live.spend == pytest.approx(fake_clore.spend(order.id))
    assert live.spend is not None and live.spend > 0

    client.cancel_order(order.id)
    assert fake_clore.live_orders() == []
    assert client.my_orders() == []
    (ended,) = client.my_orders(return_completed=True)
    assert ended.id == order.id and ended.expired
    assert_spacing(fake_clore)


def test_ssh_endpoint_is_configurable(fake_clore: FakeClore) -> None:
    fake_clore.ssh_host, fake_clore.ssh_port = "127.0.0.1", 2222
    fake_clore.online_after_s = 0
    order = fake_clore.client().create_order(on_demand())
    assert order.ready and order.ssh_endpoint == ("127.0.0.1", 2222)


def test_create_waits_with_backoff_for_a_slow_my_orders(fake_clore: FakeClore) -> None:
    fake_clore.appear_after_s = 15
    order = fake_clore.client().create_order(on_demand())
    polls = fake_clore.calls("my_orders")
    assert len(polls) == 4  # after 2, 5.5, 10.5 and 18.5 s
    assert polls[-1].t - fake_clore.calls("create_order")[0].t >= 15
    assert order.id in fake_clore.orders


def test_create_that_never_shows_up_is_an_outcome_unknown_error(fake_clore: FakeClore) -> None:
    fake_clore.appear_after_s = 10_000
    with pytest.raises(e.OrderOutcomeUnknownError) as caught:
        fake_clore.client().create_order(on_demand())
    assert caught.value.server_id == 88028 and "cleanup" in str(caught.value)
    assert caught.value.accepted and "was accepted" in str(caught.value)
    assert len(fake_clore.calls("create_order")) == 1
    # An accepted create's order is not given up after 50 s: looked for ~6 minutes longer.
    looks = fake_clore.calls("my_orders")
    assert len(looks) == len(RECOVER_DELAYS_S) + len(FOLLOW_UP_DELAYS_S)
    waited = looks[-1].t - fake_clore.calls("create_order")[0].t
    assert waited >= sum(RECOVER_DELAYS_S) + sum(FOLLOW_UP_DELAYS_S)


@pytest.mark.parametrize(
    "fault",
    [Faults.DB_ERROR_BUT_CREATED, Fault(502, "<html>Bad gateway</html>", creates_order=True)],
)
def test_failed_create_that_rented_anyway_is_found_not_repeated(
    fake_clore: FakeClore, fault: Fault
) -> None:
    fake_clore.fail_next("create_order", fault)
    order = fake_clore.client().create_order(on_demand())
    assert [o.id for o in fake_clore.live_orders()] == [order.id]
    assert len(fake_clore.calls("create_order")) == 1
    assert fake_clore.calls("my_orders")  # it looked before giving any answer


def test_failed_create_that_did_not_rent_raises_after_looking(fake_clore: FakeClore) -> None:
    fake_clore.fail_next("create_order", Faults.DB_ERROR)
    with pytest.raises(e.DatabaseError) as caught:
        fake_clore.client().create_order(on_demand())
    assert "no order for server 88028 appeared" in str(caught.value)
    assert len(fake_clore.calls("create_order")) == 1
    assert len(fake_clore.calls("my_orders")) == len(RECOVER_DELAYS_S)
    assert fake_clore.orders == {}


class _ReplyLost(HTTPAdapter):
    """Delivers the request, then loses the reply: the worst case for a create."""

    def __init__(self, error: type[requests.RequestException], text: str) -> None:
        super().__init__()
        self.error, self.text = error, text

    def send(self, request: requests.PreparedRequest, *args: Any, **kwargs: Any) -> Any:
        response = super().send(request, *args, **kwargs)
        if (request.url or "").endswith("/create_order"):
            raise self.error(self.text)
        return response


@pytest.mark.parametrize(
    "error", [requests.ConnectionError, requests.ReadTimeout], ids=["dropped", "timeout"]
)
def test_create_whose_reply_is_lost_is_found_in_my_orders(
    fake_clore: FakeClore, error: type[requests.RequestException]
) -> None:
    session = requests.Session()
    session.mount("http://", _ReplyLost(error, f"connection reset (key {API_KEY})"))
    order = fake_clore.client(session=session).create_order(on_demand())
    assert [o.id for o in fake_clore.live_orders()] == [order.id]
    assert len(fake_clore.calls("create_order")) == 1


@pytest.mark.parametrize(
    ("request_", "setup", "expected", "status"),
    [
        (on_demand(100504), None, e.CurrencyNotAllowedError, 500),  # listed, yet refused
        (on_demand(100201), None, e.CurrencyNotAllowedError, 500),  # not listed
        (on_demand(100403), None, e.ServerAlreadyRentedError, 200),
        (on_demand(88028), "poor", e.NotEnoughBalanceError, 200),
        (OrderRequest(99173, "img", "CLORE-Blockchain", 100.0), None, e.TooLowPriceError, 200),
    ],
)
def test_refused_creates_raise_at_once_without_retry_or_lookup(
    fake_clore: FakeClore,
    request_: OrderRequest,
    setup: str | None,
    expected: type[e.CloreApiError],
    status: int,
) -> None:
    if setup == "poor":
        fake_clore.balances["USD-Blockchain"] = 0.05
    with pytest.raises(expected) as caught:
        fake_clore.client().create_order(request_)
    assert caught.value.http_status == status
    assert len(fake_clore.calls("create_order")) == 1
    assert fake_clore.calls("my_orders") == []
    assert fake_clore.live_orders() == []


def test_a_create_refused_by_the_rate_limit_is_sent_again_to_the_same_server(
    fake_clore: FakeClore,
) -> None:
    # HTTP 429 / code 5 on a create rented nothing: the same create goes again, later.
    fake_clore.fail_next("create_order", Faults.RATE_LIMITED, times=2)
    order = fake_clore.client().create_order(on_demand(88028))
    creates = fake_clore.calls("create_order")
    assert [c.status for c in creates] == [429, 429, 200]
    assert {c.body["renting_server"] for c in creates} == {88028}
    assert [o.id for o in fake_clore.live_orders()] == [order.id]
    assert creates[1].t - creates[0].t >= 6.0  # the refusal pushed the shared limiter back
    assert_spacing(fake_clore)


def test_a_create_refused_by_the_rate_limit_too_often_gives_up(fake_clore: FakeClore) -> None:
    fake_clore.fail_next("create_order", Faults.RATE_LIMITED, times=10)
    with pytest.raises(e.RateLimitedError):
        fake_clore.client().create_order(on_demand(88028))
    assert len(fake_clore.calls("create_order")) == 4  # bounded
    assert fake_clore.calls("my_orders") == [] and fake_clore.live_orders() == []


def test_two_creates_in_a_row_respect_the_create_gap(fake_clore: FakeClore) -> None:
    client = fake_clore.client()
    first = client.create_order(on_demand(88028))
    second = client.create_order(on_demand(99173))
    assert first.id != second.id and len(fake_clore.live_orders()) == 2
    assert_spacing(fake_clore)


def test_spot_order_bid_and_price_changes(fake_clore: FakeClore) -> None:
    client = fake_clore.client()
    (offer,) = [
        o
        for o in offers_from_servers(client.marketplace().servers, "CLORE-Blockchain")
        if o.server_id == 99173
    ]
    bid = spot_bid_per_day(offer, max_usd_per_hour=0.2)
    assert bid is not None
    order = client.create_order(OrderRequest(99173, "img", "CLORE-Blockchain", bid))
    assert order.spot and order.price == pytest.approx(bid)
    book = client.spot_marketplace(99173)
    assert book.exists and book.server.min_pricing["CLORE-Blockchain"] == 1108.85
    assert [o.bid for o in book.offers] == [pytest.approx(bid)]
    assert book.currency_rates_in_usd["USD-Blockchain"] == 1
    with pytest.raises(e.ExceededMaxStepError):
        client.set_spot_price(order.id, 1108.85)
    client.set_spot_price(order.id, bid * 0.98)
    with pytest.raises(e.CannotLowerYetError) as wait:
        client.set_spot_price(order.id, bid * 0.96)
    assert wait.value.time_to_lowering_s is not None and wait.value.time_to_lowering_s > 500
    assert not client.spot_marketplace(424242).exists


def test_order_request_body() -> None:
    request = on_demand()
    # Where HTTP ports were seen accepted (3000-8888), never a well-known service's port.
    assert 3002 <= request.tag <= 9999 and request.tag not in SERVICE_PORTS
    assert request.body() == {
        "renting_server": 88028,
        "type": "on-demand",
        "currency": "USD-Blockchain",
        "image": "nvidia/cuda:12.8.0-base-ubuntu22.04",
        "ports": {"22": "tcp", str(request.tag): "http"},  # the tag my_orders echoes
        "ssh_key": SSH_KEY,
        "autossh_entrypoint": True,  # Clore runs sshd: any image answers SSH
    }
    own_sshd = OrderRequest(
        1, "my/sshd-image", "bitcoin", ssh_key=SSH_KEY, autossh_entrypoint=False
    )
    assert "autossh_entrypoint" not in own_sshd.body()
    spot = OrderRequest(1, "img", "bitcoin", 0.0001, env={"A": "b"}).body()
    assert (spot["type"], spot["spotprice"], spot["env"]) == ("spot", 0.0001, {"A": "b"})
    with pytest.raises(ValueError, match="TOKEN"):
        OrderRequest(1, "img", "bitcoin", env={"TOKEN": "a&b"})


# --- rate limits and secrecy -------------------------------------------------------------------


def test_a_busy_session_never_exceeds_the_rate_limits(fake_clore: FakeClore) -> None:
    client = fake_clore.client()
    client.wallets()
    client.marketplace()
    order = client.create_order(on_demand())
    client.my_orders()
    client.cancel_order(order.id)
    client.create_order(on_demand(99173))
    assert len(fake_clore.requests) >= 8
    assert_spacing(fake_clore)
    assert sum(fake_clore.clock.slept) > 10  # it did wait, on the fake clock


def test_the_fake_would_catch_a_client_without_limits(fake_clore: FakeClore) -> None:
    from runner.backends.clore.ratelimit import RateLimiter

    reckless = fake_clore.client(
        limiter=RateLimiter(fake_clore.clock, min_interval_s=0, create_interval_s=0),
        retry=RetryPolicy(max_attempts=1),
    )
    reckless.wallets()
    with pytest.raises(e.RateLimitedError):
        reckless.wallets()
    assert len(fake_clore.violations) == 1


def test_threads_share_the_limiter(fake_clore: FakeClore) -> None:
    client = fake_clore.client()
    failures: list[BaseException] = []

    def work() -> None:
        try:
            for _ in range(3):
                client.my_orders()
        except BaseException as exc:  # pragma: no cover - reported below
            failures.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    assert len(fake_clore.requests) == 12
    assert_spacing(fake_clore)


def test_the_key_never_leaks(fake_clore: FakeClore, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    seen: list[BaseException] = []
    client = fake_clore.client(retry=RetryPolicy(max_attempts=1))
    fake_clore.fail_next("wallets", Fault(502, f"<html>upstream said auth={API_KEY}</html>"))
    fake_clore.fail_next("my_orders", Fault(200, {"code": 6, "error": f"bad {API_KEY}"}))
    for call in (client.wallets, client.my_orders):
        with pytest.raises(e.CloreApiError) as caught:
            call()
        seen.append(caught.value)
    session = requests.Session()
    session.mount("http://", _ReplyLost(requests.ConnectionError, f"reset, key {API_KEY}"))
    fake_clore.fail_next("my_orders", Faults.INVALID_TOKEN, times=10)
    with pytest.raises(e.OrderOutcomeUnknownError) as lost:
        fake_clore.client(session=session).create_order(on_demand())
    seen += [lost.value, lost.value.__cause__]  # type: ignore[list-item]
    assert "***" in str(seen[0]) and "***" in str(seen[1])
    # requests' own text (where the key was) reaches the debug log only, redacted there too.
    assert str(seen[3]).endswith(": the connection failed (check the network, or CLORE_API_URL)")
    assert "reset, key ***" in caplog.text
    texts = [str(x) for x in seen] + [repr(x) for x in seen] + [repr(client), caplog.text]
    assert not [t for t in texts if API_KEY in t]
