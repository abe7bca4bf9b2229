"""The memory of hosts, pure: what each marketplace host did when we rented it, and what follows.

On a marketplace most failures are a host's own: real orders never came online (8 of 13 in the
one public log, reference/clore-api.md §8), or came up with an sshd that never answered. So each
rental leaves an event per host: `up` (with create -> SSH seconds, and the image's pull),
`never_up`, `ssh_failed`, `preempted`, `slow` (a hedge's loser that was not up when the winner
was), `pulling` (given up while its image still pulled: the image's time, never the host's
fault). From them:

- a host whose last boots failed is skipped for a while, longer after each failure in a row
  (`skip_reason`: "never booted 2 h ago"), and forgiven later: a host may be fixed;
- its chance of a failed boot: its own record weighed against the market's (a host with one
  failure is not condemned for ever, a host never seen takes the market's rate);
- its expected healthy boot, its image's pull left out: its own mean, else the market's, else
  the default. Hedging a slow boot and renting ahead read it;
- the expected cost of renting it: the price with fees, plus the chance of a failed boot times
  what one costs (the wait at its price, the creation fee if that wait passes the grace).

Times are unix seconds passed in; nothing here reads a clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal, get_args

from runner.core import money
from runner.core.pulls import Pulls

# `slow`: given back still not online when another host of its job answered SSH (a hedge's
# loser); `pulling`: given back while its container still deployed (its image pulling). A pull
# is the image's doing, not the host's: `pulling` is never a failed boot.
EventKind = Literal["up", "never_up", "ssh_failed", "preempted", "slow", "pulling"]
EVENT_KINDS: tuple[EventKind, ...] = get_args(EventKind)
BOOT_FAILURES: tuple[EventKind, ...] = ("never_up", "ssh_failed", "slow")

# A host that failed a boot is skipped this long, doubled for each failure in a row, up to
# the cap. Six hours: a host that was down at 9 is likely down at 11 (a real support log saw
# the same hosts fail all day), and a nightly run tries it again the next night.
SKIP_FIRST_S = 6 * 3600.0
SKIP_MAX_S = 7 * 86400.0
# A hedge's loser given back before it came online is `slow` only if it had this long to come
# up: one rented seconds before the winner answered says nothing of its host.
SLOW_EVIDENCE_S = 30.0
# A healthy Clore boot, create -> SSH answering: 35 s seen at best, minutes with a big image.
DEFAULT_BOOT_S = 180.0
# What the market's failed-boot rate is taken to be before any boot is seen, and how many
# boots of evidence that guess is worth: weak, so the first few real boots move it.
PRIOR_FAIL_RATE = 0.3
PRIOR_WEIGHT = 2.0
MAX_CHANCE = 0.95  # a chance of failure is never taken as certain: a host may be fixed
_WORDS: dict[EventKind, str] = {
    "up": "booted",
    "never_up": "never booted",
    "ssh_failed": "booted but SSH never answered",
    "preempted": "preempted",
    "slow": "not up when another host was",
    "pulling": "still pulling its image",
}


@dataclass(frozen=True)
class HostEvent:
    """One thing a host did for one of our rentals."""

    host: str
    kind: EventKind
    at: float  # unix seconds
    boot_s: float | None = None  # `up`: create -> SSH answering
    run_id: str = ""
    image: str = ""  # the image the order ran ("": not recorded)
    # Online -> deployed (`mon_container` 2): the image's pull on this host. On `pulling` (and
    # a `slow` loser that was deploying) how long it had pulled when given up: at least that.
    pull_s: float | None = None


@dataclass(frozen=True)
class HostRecord:
    """What the history says of one host."""

    host: str
    ups: int = 0
    boot_s_total: float = 0.0  # over `ups`
    never_up: int = 0
    ssh_failed: int = 0
    preempted: int = 0
    slow: int = 0  # given back not online yet when another host of its job answered SSH
    failures_in_a_row: int = 0  # boot failures since its last `up`
    last_kind: EventKind | None = None
    last_at: float = 0.0
    last_failure_at: float | None = None
    last_failure_kind: EventKind | None = None

    @property
    def boots(self) -> int:
        return self.ups + self.boot_failures

    @property
    def boot_failures(self) -> int:
        return self.never_up + self.ssh_failed + self.slow

    @property
    def mean_boot_s(self) -> float | None:
        return self.boot_s_total / self.ups if self.ups else None


def records(events: Iterable[HostEvent]) -> dict[str, HostRecord]:
    """Each host's record from its events (in any order)."""
    by_host: dict[str, list[HostEvent]] = {}
    for event in events:
        by_host.setdefault(event.host, []).append(event)
    return {host: _record(host, sorted(evs, key=_at)) for host, evs in by_host.items()}


def pulls_of(events: Iterable[HostEvent]) -> Pulls:
    """Each image's pulls, per host, from the events that kept one."""
    done: dict[str, dict[str, tuple[float, ...]]] = {}
    at_least: dict[str, dict[str, float]] = {}
    for e in sorted(events, key=_at):
        if not e.image or e.pull_s is None:
            continue
        if e.kind == "up":
            by_host = done.setdefault(e.image, {})
            by_host[e.host] = (*by_host.get(e.host, ()), e.pull_s)
        else:  # `pulling`, or a `slow` loser given back while deploying: at least this long
            longest = at_least.setdefault(e.image, {})
            longest[e.host] = max(longest.get(e.host, 0.0), e.pull_s)
    return Pulls(done, at_least)


def loser_kind(waited_s: float, online: bool) -> EventKind | None:
    """What a hedge's loser (given back still booting when another host of its job answered
    SSH) leaves in the history: `pulling` if it was online, its image pulling (a pull, never
    the host's fault), `slow` if it was not online yet, nothing if rented too recently."""
    if online:
        return "pulling"
    return "slow" if waited_s >= SLOW_EVIDENCE_S else None


def _at(event: HostEvent) -> float:
    return event.at


def _record(host: str, events: list[HostEvent]) -> HostRecord:
    ups = never = ssh = pre = slow = in_a_row = 0
    boot_total = 0.0
    fail_at: float | None = None
    fail_kind: EventKind | None = None
    for e in events:
        if e.kind == "up":
            ups += 1
            # The host's own part of the boot: its image's pull is the image's (`pulls_of`).
            boot_total += max(0.0, (e.boot_s or 0.0) - (e.pull_s or 0.0))
            in_a_row = 0
        elif e.kind == "preempted":
            pre += 1
        elif e.kind in BOOT_FAILURES:
            never += e.kind == "never_up"
            ssh += e.kind == "ssh_failed"
            slow += e.kind == "slow"
            in_a_row += 1
            fail_at, fail_kind = e.at, e.kind
        # `pulling`: the image's time, not a verdict on the host (the pulls read it).
    last = events[-1]
    return HostRecord(
        host,
        ups,
        boot_total,
        never,
        ssh,
        pre,
        slow,
        in_a_row,
        last.kind,
        last.at,
        fail_at,
        fail_kind,
    )


@dataclass(frozen=True)
class MarketVerdict:
    """The whole history's verdict on the market: how often a boot fails, how long one takes."""

    boots: int = 0
    failures: int = 0
    ups: int = 0
    boot_s_total: float = 0.0

    @property
    def fail_rate(self) -> float:
        """Failed boots over boots, pulled towards the prior while boots are few."""
        weight = PRIOR_WEIGHT
        return (self.failures + PRIOR_FAIL_RATE * weight) / (self.boots + weight)

    @property
    def mean_boot_s(self) -> float | None:
        return self.boot_s_total / self.ups if self.ups else None


def market_of(recs: Iterable[HostRecord]) -> MarketVerdict:
    boots = failures = ups = 0
    total = 0.0
    for r in recs:
        boots += r.boots
        failures += r.boot_failures
        ups += r.ups
        total += r.boot_s_total
    return MarketVerdict(boots, failures, ups, total)


def skip_for_s(failures_in_a_row: int) -> float:
    """How long a host is skipped after that many failed boots in a row (0: not skipped)."""
    if failures_in_a_row <= 0:
        return 0.0
    return min(SKIP_MAX_S, SKIP_FIRST_S * 2.0 ** (failures_in_a_row - 1))


def ago_text(seconds: float) -> str:
    """`40 s`, `12 min`, `2 h`, `3 d`: how long ago, for a person."""
    seconds = max(0.0, seconds)
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.0f} h"
    return f"{seconds / 86400:.0f} d"


def kind_words(kind: EventKind) -> str:
    return _WORDS[kind]


@dataclass(frozen=True)
class HostMemory:
    """The history as of `now`: which hosts to skip, and what to expect of each."""

    hosts: Mapping[str, HostRecord] = field(default_factory=dict)
    now: float = 0.0
    default_boot_s: float = DEFAULT_BOOT_S
    pulls: Pulls = field(default_factory=Pulls)  # each image's pulls, per host

    @classmethod
    def of(cls, events: Iterable[HostEvent], now: float) -> HostMemory:
        events = list(events)
        return cls(records(events), now, pulls=pulls_of(events))

    @property
    def market(self) -> MarketVerdict:
        return market_of(self.hosts.values())

    def skip_reason(self, host: str) -> str | None:
        """Why `host` is skipped now ("never booted 2 h ago"), or None."""
        rec = self.hosts.get(host)
        if rec is None or rec.failures_in_a_row == 0 or rec.last_failure_kind is None:
            return None
        assert rec.last_failure_at is not None
        since = self.now - rec.last_failure_at
        if since >= skip_for_s(rec.failures_in_a_row):
            return None
        times = f" ({rec.failures_in_a_row} in a row)" if rec.failures_in_a_row > 1 else ""
        return f"{kind_words(rec.last_failure_kind)} {ago_text(since)} ago{times}"

    def skipped(self) -> dict[str, str]:
        """Every host skipped now, with why."""
        out = {}
        for host in self.hosts:
            why = self.skip_reason(host)
            if why is not None:
                out[host] = why
        return out

    def fail_chance(self, host: str) -> float:
        """The chance that a boot of `host` fails: its own failures and boots, with the
        market's rate worth `PRIOR_WEIGHT` boots besides."""
        market = self.market.fail_rate
        rec = self.hosts.get(host)
        if rec is None:
            return market
        return (rec.boot_failures + market * PRIOR_WEIGHT) / (rec.boots + PRIOR_WEIGHT)

    def expected_pull_s(self, images: Iterable[str], host: str) -> float:
        """How long `images` are expected to pull on `host`, on average: its own last pull of
        each, else the other hosts' median, else nothing known (0: every host alike). A host
        whose cache held an image pulls it in seconds: it ranks first (`with_pull_usd_per_hour`)."""
        seen = [self.pulls.expected_s(image, host) for image in images]
        known = [s for s in seen if s is not None]
        return sum(known) / len(seen) if known else 0.0

    def expected_boot_s(self, host: str | None = None) -> float:
        """A healthy boot of `host`: its own mean, else the market's, else the default."""
        rec = self.hosts.get(host) if host is not None else None
        if rec is not None and rec.mean_boot_s is not None:
            return rec.mean_boot_s
        market = self.market.mean_boot_s
        return market if market is not None else self.default_boot_s


def failed_boot_usd(
    usd_per_hour: float, creation_fee_usd: float, waited_s: float, fee_after_s: float = 0.0
) -> float:
    """What a boot that never comes up costs when it is given up after `waited_s`: the time
    at its price, and the creation fee if that passed its grace (`fee_after_s`)."""
    return money.worst_case_usd(usd_per_hour, waited_s, creation_fee_usd, fee_after_s)


def with_pull_usd_per_hour(
    expected_usd_per_hour: float, usd_per_hour: float, pull_s: float, per_hours: float = 1.0
) -> float:
    """An hour of work's expected cost on a host, with its image's expected pull counted as
    time (the job starts that much later, valued at the host's own price, as a failed boot's
    wait is): a host that deployed the image fast before (its cache holds it) ranks first
    among hosts priced alike."""
    wait_usd = usd_per_hour * pull_s / money.SECONDS_PER_HOUR
    return expected_usd_per_hour + wait_usd / max(per_hours, 1e-9)


def expected_usd_per_hour(
    usd_per_hour: float,
    creation_fee_usd: float,
    fail_chance: float,
    given_up_after_s: float,
    fee_after_s: float = 0.0,
    per_hours: float = 1.0,
) -> float:
    """What an hour of work on a host is expected to cost: its price (fees in), plus what its
    failed boots are expected to cost, spread over `per_hours` of work. A host failing with
    chance p fails p / (1 - p) boots on average before one comes up (each try taken alike);
    each costs the wait at its price and the creation fee past the grace, and the wait again
    as time: the job starts that much later, valued at the host's own price."""
    chance = min(max(fail_chance, 0.0), MAX_CHANCE)
    failed_boots = chance / (1.0 - chance)
    waste = failed_boot_usd(usd_per_hour, creation_fee_usd, given_up_after_s, fee_after_s)
    delay = usd_per_hour * given_up_after_s / money.SECONDS_PER_HOUR
    return usd_per_hour + failed_boots * (waste + delay) / max(per_hours, 1e-9)
