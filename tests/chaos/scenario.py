"""One chaos scenario, drawn from a seed: a pipeline, a market, its faults, a signal, a race.

Everything is a pure function of the seed (`draw(seed)`), so a seed printed by a failure is the
whole reproduction: `python -m tests.chaos SEED`. Times are real seconds after the run starts;
the fake's boots and lags are about a second, as the runs are real processes on real time.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

GPU_TYPES = ("RTX 4090", "RTX 3090", "A100")
# What a job may ask for: an exact model, or a family ("RTX" fits both RTX models).
ASKS = ("RTX 4090", "RTX 3090", "A100", "RTX")
HOST_FAULTS = ("never_online", "sshd_late", "preempt", "outbid")
API_FAULTS = (
    # (name, endpoint): what the fake answers the next call(s) to that endpoint.
    ("bad_gateway", "my_orders"),
    ("bad_gateway", "marketplace"),
    ("bad_gateway", "cancel_order"),
    ("rate_limited", "create_order"),
    ("db_error_but_created", "create_order"),
    ("cancel_refused_once", "cancel_order"),
)
SIGNALS = ("SIGINT", "SIGTERM", "SIGKILL")
# How my_orders echoes the tag (tests/fakes/clore_api.py TAG_ECHOES), weighted: the captured
# shape most often, every other one a client must survive in about one scenario in eleven.
ECHO_SHAPES = (
    ("as-sent", 6),
    ("integer", 1),
    ("port/http", 1),
    ("list", 1),
    ("absent-until-deployed", 1),
    ("unknown", 1),
)


@dataclass(frozen=True)
class Host:
    """A server on the market: its GPU, its price (USD per day) and what goes wrong with it."""

    server_id: int
    gpu: str
    usd_per_day: float
    spot_usd_per_day: float
    fault: str | None = None  # one of HOST_FAULTS
    fault_s: float = 0.0  # sshd_late: seconds late; preempt/outbid: seconds after the create


@dataclass(frozen=True)
class ApiFault:
    at_s: float  # armed this long after the run starts
    name: str
    endpoint: str
    times: int = 1


@dataclass(frozen=True)
class JobDraw:
    name: str
    needs: tuple[str, ...]
    ask: str
    spot: bool
    sleep_s: float
    outcome: str  # "pass" | "fail" | "flaky" (fails its first attempt only)
    retries: int
    always: bool  # if: always()


@dataclass(frozen=True)
class Scenario:
    seed: int
    jobs: tuple[JobDraw, ...]
    hosts: tuple[Host, ...]
    api_faults: tuple[ApiFault, ...]
    currency: str
    concurrency: int
    budget_usd: float | None
    boot_s: float  # create -> online on the fake
    cancel_lag_s: float
    signal: tuple[str, float] | None = None  # (name, seconds after the run's first API call)
    race: bool = False  # a second run of the same pipeline on the same key and market
    # The signal's moment counts from the run's first call to this endpoint ("": any call).
    signal_anchor: str = ""
    reply_delay_s: tuple[tuple[str, float], ...] = ()  # a slow API: (endpoint, seconds)
    estimate_minutes: float = 0.02  # every job's `estimate-minutes` (what rent-ahead plans on)
    market_lag_s: float = 2.0  # the marketplace shows a rental this late (runs race in it)
    faults_end_with_run: bool = False  # the API heals when the run ends (before its cleanup)
    cleanup: bool = False  # run the always-run `cleanup` step after the run (see harness.py)
    second_run_delay_s: float = 0.0  # a race's second run starts this much later
    # The client's wait for a new order in my_orders (None: the suite's short one; see entry.py)
    recover_delays_s: tuple[float, ...] | None = None
    real_shutdown: bool = False  # the cancel confirmations' default bounds (entry.py)
    plain_cli: bool = False  # `python -m runner` itself, without entry.py's shortened pace
    replay: str = ""  # the arguments of `python -m tests.chaos` that play it again
    run_bound_s: float = 90.0  # a run not ended by then is hung: a finding, and killed
    appear_after_s: float | None = None  # my_orders lists a new order this late (None: 0.3 s)
    # Orders that end by themselves (drawn apart from the rest, so that every other draw of a
    # seed stays what it was): hosts' maximum rental lengths in hours (Clore's `mrl`), hosts
    # that end any order that many seconds after its create (gone), and what a completed
    # order lists: its `order_end`, and its `spend` or not.
    host_lengths: tuple[tuple[int, float], ...] = ()
    host_ends: tuple[tuple[int, float], ...] = ()
    order_end_echo: bool = False
    completed_spend: bool = True
    # Slow image pulls: (server id, seconds its container deploys once online). Some outlast
    # the jobs' boot bound: given up as a pull, never blamed on the host.
    pulls_s: tuple[tuple[int, float], ...] = ()
    # The echo shapes of the evidence's thin rows (reference §9): how the tag is echoed, a
    # `spot` key left out, `ct` stamped late. Drawn apart from the rest (`_echoes`), so a
    # seed's market, jobs and faults stay what they were before these were drawn.
    tag_echo: str = "as-sent"
    echo_spot: bool = True
    ct_late_s: float = 0.0
    # Jobs that leave their server's GPU busy (an nvidia-smi listing a compute process, once):
    # the run checks each server between jobs as `serve` does (entry.py), so that server must
    # fail its clean handover, go back, and run no other job. Drawn apart (`_dirty`).
    dirty_gpu: tuple[str, ...] = ()

    def pipeline(self, marker_dir: str) -> str:
        """The pipeline file; a flaky job's first attempt leaves a marker in `marker_dir`."""
        lines = [
            f"name: chaos-{self.seed}",
            f"concurrency: {self.concurrency}",
            f"currency: {self.currency}",
        ]
        if self.budget_usd is not None:
            lines.append(f"budget: {self.budget_usd}")
        lines += [
            "defaults:",
            "  workspace: false",
            "  timeout-minutes: 1",
            "  boot-timeout-minutes: 0.1",
            "  retries: 0",
            "jobs:",
        ]
        for job in self.jobs:
            lines.append(f"  {job.name}:")
            if job.needs:
                lines.append(f"    needs: [{', '.join(job.needs)}]")
            lines.append(f'    gpu: {{type: "{job.ask}", spot: {str(job.spot).lower()}}}')
            lines.append(f"    retries: {job.retries}")
            lines.append(f"    estimate-minutes: {self.estimate_minutes}")
            if job.always:
                lines.append("    if: always()")
            script = _script(job, marker_dir)
            if job.name in self.dirty_gpu:
                script = f'"{BUSY_GPU}; {script[1:]}'
            lines.append(f"    run: {script}")
        return "\n".join(lines) + "\n"

    def describe(self) -> str:
        jobs = ", ".join(
            f"{j.name}({j.ask}{' spot' if j.spot else ''}, {j.outcome}"
            f"{', needs ' + '+'.join(j.needs) if j.needs else ''}"
            f"{', always' if j.always else ''}{f', retries {j.retries}' if j.retries else ''})"
            for j in self.jobs
        )
        hosts = ", ".join(
            f"{h.server_id}:{h.gpu}{'/' + h.fault if h.fault else ''}" for h in self.hosts
        )
        faults = ", ".join(f"{f.name}@{f.endpoint}+{f.at_s:.1f}s" for f in self.api_faults)
        signal = f"{self.signal[0]}@{self.signal[1]:.1f}s" if self.signal else "none"
        if self.signal and self.signal_anchor:
            signal += f" after the first {self.signal_anchor}"
        slow = "".join(f"; {e} answers {s:.0f} s late" for e, s in self.reply_delay_s)
        slow += "".join(f"; {h} mrl {hours:g} h" for h, hours in self.host_lengths)
        slow += "".join(f"; {h} ends orders after {t:.1f} s" for h, t in self.host_ends)
        if self.order_end_echo or not self.completed_spend:
            slow += f"; order_end {self.order_end_echo}, completed spend {self.completed_spend}"
        slow += "".join(f"; {h} pulls {s:.1f} s" for h, s in self.pulls_s)
        slow += "".join(f"; {j} leaves the GPU busy" for j in self.dirty_gpu)
        if (self.tag_echo, self.echo_spot, self.ct_late_s) != ("as-sent", True, 0.0):
            slow += f"; tag echoed {self.tag_echo}"
            slow += "" if self.echo_spot else ", no spot key"
            slow += f", ct {self.ct_late_s:g} s late" if self.ct_late_s else ""
        return (
            f"seed {self.seed}: jobs [{jobs}]; hosts [{hosts}]; api faults [{faults or 'none'}]; "
            f"signal {signal}; race {self.race}; cap {self.concurrency}; budget "
            f"{self.budget_usd}; {self.currency}; boot {self.boot_s:.1f}s; "
            f"cancel lag {self.cancel_lag_s:.1f}s{slow}"
        )


# What a job that leaves the GPU busy runs last: an nvidia-smi in its host's own bin
# (tests/chaos/market.py) that lists a compute process once, to the handover's query only,
# then is gone (the next order on the host is a new container).
BUSY_GPU = (
    "mkdir -p $HOME/../bin && printf '%s\\\\n' '#!/bin/sh' 'case $* in *query-compute-apps*)"
    " echo 4242, python3, 1530 MiB; rm -f -- $0;; esac' > $HOME/../bin/nvidia-smi"
    " && chmod +x $HOME/../bin/nvidia-smi"
)


def _script(job: JobDraw, marker_dir: str) -> str:
    sleep = f"sleep {job.sleep_s:.1f}"
    if job.outcome == "fail":
        return f'"{sleep}; exit 1"'
    if job.outcome == "flaky":
        marker = f"{marker_dir}/{job.name}.tried"
        return f'"{sleep}; if [ ! -e {marker} ]; then touch {marker}; exit 1; fi"'
    return f'"{sleep}"'


def draw(seed: int, *, small: bool = False) -> Scenario:
    """The scenario of `seed`. `small`: 3-5 jobs (the quick set), else 3-10."""
    rng = random.Random(seed)
    # The echo shapes from a generator of their own: the seed's other draws stay as they were.
    echoes = random.Random(f"echoes-{seed}")
    hosts = _hosts(rng)
    kinds = sorted({h.gpu for h in hosts})
    jobs = _jobs(rng, kinds, 5 if small else 10)
    faults = tuple(
        ApiFault(round(rng.uniform(0.0, 4.0), 1), name, endpoint, rng.choice((1, 1, 2)))
        for name, endpoint in rng.sample(API_FAULTS, rng.choice((0, 1, 1, 2, 3)))
    )
    roll = rng.random()
    signal = None
    if roll < 0.3:
        signal = (rng.choice(SIGNALS), round(rng.uniform(0.2, 5.0), 1))
    budget = rng.choice((None, None, None, 0.6, 1.5, 3.0))
    lengths, ends, order_end, completed_spend = _self_ending(seed, hosts)
    return Scenario(
        seed=seed,
        replay=f"{seed} --small" if small else str(seed),
        jobs=jobs,
        hosts=hosts,
        api_faults=faults,
        currency=rng.choice(("USD-Blockchain", "USD-Blockchain", "CLORE-Blockchain")),
        concurrency=rng.choice((1, 2, 3, 3, 4)),
        budget_usd=budget,
        boot_s=round(rng.uniform(0.5, 1.5), 1),
        cancel_lag_s=round(rng.choice((0.0, 0.5, 1.0, 1.5)), 1),
        signal=signal,
        race=rng.random() < 0.2,
        # A generator of its own: the draws above stay what every seed drew before.
        pulls_s=_pulls(random.Random(f"pulls-{seed}"), hosts),
        tag_echo=echoes.choices([n for n, _ in ECHO_SHAPES], [w for _, w in ECHO_SHAPES])[0],
        echo_spot=echoes.random() >= 0.3,
        ct_late_s=echoes.choice((0.0,) * 8 + (20.0, 60.0)),
        host_lengths=lengths,
        host_ends=ends,
        order_end_echo=order_end,
        completed_spend=completed_spend,
        dirty_gpu=_dirty(random.Random(f"handover-{seed}"), jobs),
    )


def _dirty(rng: random.Random, jobs: tuple[JobDraw, ...]) -> tuple[str, ...]:
    """In about one scenario in six, one job leaves its server's GPU busy."""
    return (rng.choice(jobs).name,) if rng.random() < 0.16 else ()


def _pulls(rng: random.Random, hosts: tuple[Host, ...]) -> tuple[tuple[int, float], ...]:
    """Slow image pulls on about a third of the hosts: most inside the jobs' boot bound of
    6 s, some past it."""
    return tuple(
        (h.server_id, round(rng.uniform(0.5, 8.0), 1)) for h in hosts if rng.random() < 0.35
    )


# A job's worst case in the suite: the runs' boot bound (entry.py: 8 s; the pipelines' own
# 0.1 minute is shorter), the 1-minute timeout and 2 minutes of fetching files after it.
WORST_HOLD_S = 8.0 + 60.0 + 120.0
SHORT_MRL_HOURS = 0.02  # 72 s: a host no job of the suite fits (never to be rented)
TIGHT_MRL_HOURS = 0.06  # 216 s: holds one job's worst case, not a second job's after it


def _self_ending(
    seed: int, hosts: tuple[Host, ...]
) -> tuple[tuple[tuple[int, float], ...], tuple[tuple[int, float], ...], bool, bool]:
    """The draws of orders that end by themselves, from a generator of their own (the seed's
    other draws stay as they were): on hosts with no other fault, a maximum rental length too
    short for any job or just long enough for one, or orders ended by the host (gone)."""
    rng = random.Random(f"{seed}/self-ending")
    lengths: list[tuple[int, float]] = []
    ends: list[tuple[int, float]] = []
    for host in hosts:
        roll = rng.random()
        if host.fault is not None:
            continue
        if roll < 0.08:
            lengths.append((host.server_id, SHORT_MRL_HOURS))
        elif roll < 0.14:
            lengths.append((host.server_id, TIGHT_MRL_HOURS))
        elif roll < 0.22:
            ends.append((host.server_id, round(rng.uniform(1.5, 5.0), 1)))
    # A completed order lists `order_end` (the evidence's one completed order does); whether
    # it lists `spend` is not known. Without either, what an order that ended by itself
    # billed cannot be known to the second: a shape the evidence does not suggest.
    order_end = rng.random() < 0.5
    completed_spend = rng.random() >= 0.4 or not order_end
    return tuple(lengths), tuple(ends), order_end, completed_spend


def _hosts(rng: random.Random) -> tuple[Host, ...]:
    count = rng.randint(3, 6)
    hosts = []
    for i in range(count):
        gpu = GPU_TYPES[i] if i < len(GPU_TYPES) else rng.choice(GPU_TYPES)
        usd = rng.choice((48.0, 96.0, 144.0, 240.0))  # 2-10 $/h: bills that round well
        fault = rng.choice(HOST_FAULTS) if rng.random() < 0.35 else None
        fault_s = 0.0
        if fault == "sshd_late":
            fault_s = round(rng.uniform(0.5, 2.0), 1)
        elif fault in ("preempt", "outbid"):
            fault_s = round(rng.uniform(1.0, 5.0), 1)
        hosts.append(Host(99170 + i, gpu, usd, round(usd * 0.75, 2), fault, fault_s))
    return tuple(hosts)


def _jobs(rng: random.Random, kinds: list[str], most: int) -> tuple[JobDraw, ...]:
    count = rng.randint(3, most)
    jobs: list[JobDraw] = []
    asks = [k for k in ASKS if k in kinds or (k == "RTX" and any("RTX" in g for g in kinds))]
    for i in range(count):
        earlier = [j.name for j in jobs]
        needs = tuple(sorted(rng.sample(earlier, min(len(earlier), rng.choice((0, 0, 1, 1, 2))))))
        outcome = rng.choices(("pass", "fail", "flaky"), (0.75, 0.1, 0.15))[0]
        jobs.append(
            JobDraw(
                name=f"j{i + 1}",
                needs=needs,
                ask=rng.choice(asks),
                spot=rng.random() < 0.4,
                sleep_s=round(rng.uniform(0.2, 1.5), 1),
                outcome=outcome,
                retries=rng.choice((0, 1, 1)) if outcome != "pass" else rng.choice((0, 0, 1)),
                always=bool(needs) and rng.random() < 0.2,
            )
        )
    return tuple(jobs)
