"""`clore-run doctor`: is this key ready for a real run, and does renting still work?

`check_account` reads what a first run depends on (the key, the balances, the fee rates, the
marketplace) and says what is wrong. `run_canary` rents the cheapest fitting server for a few
minutes, the way a run does (ledger first, the default image, SSH with a fresh key), runs
`nvidia-smi -L`, gives the server back, confirms it is gone and says what it cost as billed:
a user running it weekly learns when Clore changes under us.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from runner.backends.clore import canary_capture as capture
from runner.backends.clore import errors as e
from runner.backends.clore.api import CloreClient
from runner.backends.clore.fees import FeeSchedule, read_fee_schedule
from runner.backends.clore.market import Offer, describe_ask, matching_offers, offers_from_servers
from runner.backends.clore.provision import DEFAULT_IMAGE, Provisioner
from runner.backends.clore.rental import ProvisionOptions, Rental
from runner.backends.ssh.keys import ClientKey, HostKeyStore
from runner.clock import Clock
from runner.core.model import GpuAsk, Job
from runner.errors import InfrastructureError
from runner.stores.ledger.sqlite import SqliteLedger
from runner.untrusted import console_line

CANARY_LIMIT_S = 300.0  # the canary holds its server at most this long
CANARY_RUN_ID_PREFIX = "canary"
_GPU_LIST = "nvidia-smi -L"


@dataclass
class Checkup:
    """What doctor found: the checks that passed, said as each is done (`out`: a check reads
    the API for a second or more, and a person watching should see it move), and the problems
    with what to do about each (none: exit 0), said once, by the command, at the end."""

    out: Callable[[str], None] | None = None
    lines: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    hints: list[str] = field(default_factory=list)
    offers: list[Offer] = field(default_factory=list)  # those fitting the ask, best first
    fees: FeeSchedule | None = None

    def say(self, line: str) -> None:
        self.lines.append(line)
        if self.out is not None:
            self.out(line)

    def problem(self, line: str, hint: str = "") -> None:
        self.problems.append(line)
        if hint and hint not in self.hints:
            self.hints.append(hint)


def check_account(
    client: CloreClient, currency: str, ask: GpuAsk, out: Callable[[str], None] | None = None
) -> Checkup:
    """Key, balances, fee rates, marketplace. A refused key stops the checks: nothing else
    can be read with it. Never prints the key."""
    found = Checkup(out)
    try:
        wallets = client.wallets()
    except (e.InvalidTokenError, e.TransportError) as exc:
        # A refused key reads nothing else; an unreachable API would make every other check
        # wait as long to fail alike.
        found.problem(exc.message, exc.hint)
        return found
    except e.CloreApiError as exc:
        found.problem(f"could not read the wallets: {exc.message}", exc.hint)
        wallets = []
    else:
        found.say("key: accepted by the Clore API")
    balances = {w.name: w.balance for w in wallets}
    if wallets:
        listed = ", ".join(f"{name} {_amount(bal)}" for name, bal in sorted(balances.items()))
        found.say(f"balances: {listed}")
        if not balances.get(currency):
            found.problem(f"nothing to pay with in {currency}", "top up that wallet on clore.ai")
    found.fees = read_fee_schedule(client, currency)
    found.say(f"fees: {found.fees.describe()}{_creation_fees(found.fees)}")
    for note in found.fees.notes:
        found.say(f"note: {note}")
    _check_market(client, currency, ask, found)
    return found


def _check_market(client: CloreClient, currency: str, ask: GpuAsk, found: Checkup) -> None:
    try:
        servers = client.marketplace().servers
    except e.CloreApiError as exc:
        found.problem(f"the marketplace could not be read: {exc.message}", exc.hint)
        return
    rates = found.fees.rates if found.fees else None
    offers = offers_from_servers(servers, currency, fees=rates) if rates else []
    found.offers = matching_offers(offers, ask)
    wanted = describe_ask(ask, currency)
    if not found.offers:
        found.problem(f"marketplace: {len(servers)} servers listed, none fits {wanted}")
        return
    best = found.offers[0]
    price = best.usd_per_hour(ask.spot) or 0.0
    found.say(
        f"marketplace: {len(servers)} servers listed, {len(found.offers)} fit {wanted}; "
        f"cheapest per reliable hour #{best.server_id} {best.gpus} at {price:.3f} $/h "
        "(renter fee included)"
    )


@dataclass
class CanaryTools:
    """What the canary rents with: injected, so tests use a fake API, clock and sshd."""

    client: CloreClient
    clock: Clock
    ledger: SqliteLedger
    key: ClientKey
    host_keys: HostKeyStore
    options: ProvisionOptions
    poll_s: float = capture.POLL_S  # the watcher's beat (real seconds)
    after_cancel_s: tuple[float, ...] = (5.0, 10.0, 15.0)  # looks for the ended order


def canary_options() -> ProvisionOptions:
    """Start-up bounded so that the whole canary stays within its five minutes."""
    return ProvisionOptions(online_timeout_s=CANARY_LIMIT_S - 60.0)


class CanaryInterrupted(InfrastructureError):
    """`cancel` was set (SIGINT, SIGTERM): the canary stopped and gave its order back."""


def run_canary(
    tools: CanaryTools,
    currency: str,
    ask: GpuAsk,
    offer: Offer,
    cancel: threading.Event | None = None,
    say: Callable[[str], None] | None = None,
    capture_to: Path | None = None,
) -> list[str]:
    """Rent `offer` briefly, prove SSH works, give it back, and judge every assumption about
    `my_orders` against what it answered meanwhile (read every few seconds, from before the
    create until after the cancel; written to `capture_to` as JSON lines). Its lines, each
    also said to `say` as it comes (progress every few seconds among them); always one saying
    whether the server was given back. Raises InfrastructureError (after the order is given
    back) when any step fails or an assumption is contradicted, and CanaryInterrupted when
    `cancel` is set (a signal): the rent stops where it is, and an order it made is cancelled
    the moment its id is known, as a run's are."""
    cancel = cancel or threading.Event()
    lines: list[str] = []

    def emit(line: str) -> None:
        lines.append(line)
        if say is not None:
            say(line)

    run_id = f"{CANARY_RUN_ID_PREFIX}-{int(tools.clock.time())}"
    provisioner = Provisioner(
        tools.client,
        tools.ledger,
        run_id,
        tools.key,
        tools.host_keys,
        tools.clock,
        currency,
        tools.options,
    )
    job = Job(id="canary", name="canary", run=_GPU_LIST, timeout_s=CANARY_LIMIT_S, gpu=ask)
    price = offer.usd_per_hour(ask.spot) or 0.0
    kind = "spot" if ask.spot else "on-demand"
    emit(
        f"canary: renting #{offer.server_id} {offer.gpus} ({kind}) at {price:.3f} $/h with "
        f"{DEFAULT_IMAGE}, for at most {CANARY_LIMIT_S / 60:g} minutes"
    )
    facts = capture.CreateFacts(offer.server_id, DEFAULT_IMAGE, ask.spot)
    out = capture.open_capture(capture_to) if capture_to is not None else None
    seen = capture.Capture(facts, tools.clock, emit, out, t0=tools.clock.time())
    watcher = capture.Watcher(tools.client, tools.poll_s)
    tools.client.hooks.on_reply = seen.on_reply
    watcher.start()
    try:
        rental = _rent(tools, provisioner, job, offer, cancel, seen, run_id, emit)
        _know(facts, tools.ledger, run_id, rental, tools.clock.time())
        try:
            emit(
                f"canary: order {rental.order_id} online after "
                f"{rental.facts['online_after_s']} s, SSH ready after "
                f"{rental.facts['ssh_ready_after_s']} s"
            )
            if not cancel.is_set():
                seen.enter("running nvidia-smi")
                emit(f"canary: {_gpus(rental)}")
        finally:
            seen.enter("cancelling")
            facts.cancel_at = tools.clock.time()
            final_usd = provisioner.release(rental)
        seen.enter("after the cancel")
        _look_after_cancel(tools, facts, seen)
    finally:
        watcher.stop()
        tools.client.hooks.on_reply = None
        if out is not None:
            out.write(json.dumps({"create": dataclasses.asdict(facts)}, sort_keys=True) + "\n")
            out.close()
    if cancel.is_set():
        raise CanaryInterrupted(_left(tools, run_id, f"order {rental.order_id} cancelled"))
    if tools.ledger.unreleased(run_id):
        emit(f"canary: the server was NOT confirmed given back: order {rental.order_id}")
        raise InfrastructureError(
            f"canary: order {rental.order_id} was cancelled but is still listed",
            f"run `clore-run cleanup --run {run_id}`, or cancel it on clore.ai",
        )
    emit(f"canary: order {rental.order_id} cancelled and gone; {_cost(rental, final_usd)}")
    emit("canary: the server was given back")
    _judge(seen, capture_to, emit)
    return lines


def _rent(
    tools: CanaryTools,
    provisioner: Provisioner,
    job: Job,
    offer: Offer,
    cancel: threading.Event,
    seen: capture.Capture,
    run_id: str,
    emit: Callable[[str], None],
) -> Rental:
    """The canary's rent; on a failure, it says whether anything is left rented, then raises."""
    try:
        return provisioner.rent(job, offer, cancel, stages=seen)
    except InfrastructureError as exc:
        left = _left(tools, run_id, "the canary stopped")
        given = "was given back" if "nothing of it is left" in left else "was NOT given back"
        emit(f"canary: the server {given}: {left}")
        if cancel.is_set():  # rent gave back what it had made before raising
            raise CanaryInterrupted(left) from None
        raise exc


def _know(
    facts: capture.CreateFacts, ledger: SqliteLedger, run_id: str, rental: Rental, now: float
) -> None:
    """What the ledger's marks say of the create, now that it is answered and SSH is up."""
    row = next(r for r in ledger.rentals(run_id) if r.id == rental.rental_id)
    facts.tag, facts.order_id, facts.ssh_at = rental.tag, rental.order_id, now
    facts.sent_at, facts.answered_at = row.create_sent_at, row.create_answered_at


def _look_after_cancel(
    tools: CanaryTools, facts: capture.CreateFacts, seen: capture.Capture
) -> None:
    """Looks with `return_completed=true` after the cancel, until the order shows as ended."""
    for pause in tools.after_cancel_s:
        tools.clock.sleep(pause)
        capture.look(tools.client)
        ended = [o for o in seen.looks[-1].orders if o.get("id") == facts.order_id]
        if ended and all(o.get("expired") for o in ended):
            return


def _judge(seen: capture.Capture, capture_to: Path | None, emit: Callable[[str], None]) -> None:
    """The assumptions' table; an InfrastructureError when one is contradicted."""
    findings = capture.judge(seen)
    emit(f"canary: what my_orders showed in {len(seen.looks)} replies:")
    for line in capture.table(findings):
        emit(f"  {line}")
    if capture_to is not None:
        emit(f"canary: every reply (redacted) written to {capture_to}")
    wrong = [f.assumption for f in findings if f.state == "contradicted"]
    if wrong:
        raise InfrastructureError(
            f"canary: {len(wrong)} assumption(s) contradicted by the market: {'; '.join(wrong)}",
            "clore-run's reading of my_orders may be wrong: open an issue with the capture",
        )


def _left(tools: CanaryTools, run_id: str, done: str) -> str:
    """What an interrupted canary left: nothing, or orders whose cancel is not confirmed."""
    open_orders = [str(r.order_id) for r in tools.ledger.unreleased(run_id) if r.order_id]
    if not open_orders:
        return f"{done}; nothing of it is left rented"
    return (
        f"{done}, but order(s) {', '.join(open_orders)} are not confirmed gone: run "
        f"`clore-run cleanup --run {run_id}`, or cancel them on clore.ai"
    )


def _gpus(rental: Rental) -> str:
    assert rental.conn is not None  # rent() returns a connected rental
    result = rental.conn.run(_GPU_LIST, timeout_s=30.0)
    text = result.stdout.decode("utf-8", "replace")
    gpus = [console_line(line).strip() for line in text.splitlines()[:16] if line.strip()]
    if result.exit_code == 0 and gpus:
        return f"{_GPU_LIST}: " + "; ".join(gpus)
    return f"{_GPU_LIST}: no nvidia-smi on the server (exit {result.exit_code})"


def _cost(rental: Rental, final_usd: float | None) -> str:
    parts = rental.order_cost
    if final_usd is None or parts is None:
        return "the API reported no spend, so the cost is not known"
    return (
        f"cost as billed ${final_usd:.6f} (rental ${parts.rental_usd:.6f}, "
        f"renter fee ${parts.renter_fee_usd:.6f}, creation fee ${parts.creation_fee_usd:.6f})"
    )


def _amount(balance: float | None) -> str:
    return "unknown" if balance is None else f"{balance:g}"


def _creation_fees(fees: FeeSchedule) -> str:
    on_demand, spot = fees.creation_fee_native(False), fees.creation_fee_native(True)
    if on_demand is None and spot is None:
        return ""
    return (
        f"; creation fee {_amount(on_demand)} on-demand, {_amount(spot)} spot {fees.currency}"
        ", charged for orders that live 10 minutes or more"
    )
