"""The scenarios issue 24 names, written out instead of drawn: each is the shortest case of one
defect, so the suite can show that it catches that defect (the tests in test_chaos.py).

Seeds here are labels (negative, so they never collide with a drawn seed): `python -m
tests.chaos --example NAME` replays one.
"""

from __future__ import annotations

import dataclasses

from tests.chaos.scenario import ApiFault, Host, JobDraw, Scenario


def _job(
    name: str, ask: str, *, spot: bool = False, needs: tuple[str, ...] = (), sleep_s: float = 3.0
) -> JobDraw:
    return JobDraw(name, needs, ask, spot, sleep_s, "pass", 0, False)


def two_job_leak() -> Scenario:
    """One spot job on any RTX, one on-demand job on an RTX 4090, no needs, 3 s each: the spot
    job took the 4090 rented for the other, which rented again; a third order booted on after
    both had passed, never cancelled (3 of 3 runs in the issue)."""
    hosts = tuple(Host(99170 + i, "RTX 4090", 72.0 + 12 * i, 48.0 + 6 * i) for i in range(3))
    return Scenario(
        seed=-1,
        replay="--example two_job_leak",
        jobs=(_job("a", "RTX", spot=True), _job("b", "RTX 4090")),
        hosts=(*hosts, Host(99175, "RTX 3090", 240.0, 200.0)),
        api_faults=(),
        currency="USD-Blockchain",
        concurrency=3,
        budget_usd=None,
        boot_s=1.5,
        cancel_lag_s=0.5,
    )


def chain_of_three() -> Scenario:
    """one -> two -> three, 2 s each, estimated shorter than a boot (the issue: 0.1 min against
    the fake's 30 s boots; here 1.2 s against 2.5 s), concurrency 3, one GPU type: the whole
    chain runs on one server, so one order (the issue saw a second rented ahead for nothing)."""
    jobs = (
        _job("one", "RTX 4090", sleep_s=2.0),
        _job("two", "RTX 4090", needs=("one",), sleep_s=2.0),
        _job("three", "RTX 4090", needs=("two",), sleep_s=2.0),
    )
    return Scenario(
        seed=-2,
        replay="--example chain_of_three",
        jobs=jobs,
        hosts=tuple(Host(99170 + i, "RTX 4090", 96.0 + 24 * i, 72.0) for i in range(3)),
        api_faults=(),
        currency="USD-Blockchain",
        concurrency=3,
        budget_usd=None,
        boot_s=2.5,
        cancel_lag_s=0.5,
        estimate_minutes=0.02,
    )


def racing_cleanup() -> Scenario:
    """Two runs on one key race for the one host. The first run's create is refused (code 6,
    server-offline), the second's, 1.5 s later, rents it: the first ends (exit 3) and its
    always-run cleanup must leave the second's order alone while its job runs. A refused
    create made nothing; a time window after it (the issue: send - 1 s ... answer + 15 s)
    would claim the other run's order. (The issue's own case, refused as server-already-rented
    after the other's create, falls in that window only when the other's whole-second `ct`
    does: 1 in 4 tries here; `race` seeds play it.)"""
    return Scenario(
        seed=-3,
        replay="--example racing_cleanup",
        jobs=(_job("train", "RTX 4090", sleep_s=8.0),),
        hosts=(Host(99170, "RTX 4090", 96.0, 72.0),),
        api_faults=(ApiFault(0.0, "server_offline", "create_order"),),
        currency="USD-Blockchain",
        concurrency=1,
        budget_usd=None,
        boot_s=1.0,
        cancel_lag_s=0.5,
        race=True,
        second_run_delay_s=1.5,
    )


def signal_during_create(name: str = "SIGINT") -> Scenario:
    """SIGINT (or SIGTERM) 1 s into a `create_order` that answers 6 s late: the order exists
    once the answer comes; the run must cancel it before it exits (the issue: no cancel). The
    fake lists a new order 3 s late (its default), and the client looks for it and confirms
    cancels on the real schedules, as in the issue."""
    return Scenario(
        seed=-4,
        replay="--example signal_during_create",
        jobs=(_job("a", "RTX 4090"),),
        hosts=(Host(99170, "RTX 4090", 96.0, 72.0),),
        api_faults=(),
        currency="USD-Blockchain",
        concurrency=1,
        budget_usd=None,
        boot_s=1.0,
        cancel_lag_s=0.5,
        signal=(name, 1.0),
        signal_anchor="create_order",
        reply_delay_s=(("create_order", 6.0),),
        recover_delays_s=(2.0, 3.5, 5.0, 8.0, 12.0, 20.0),
        real_shutdown=True,
        appear_after_s=3.0,
    )


def cancels_failing_at_the_end() -> Scenario:
    """Every cancel fails (502) from the job's end on; SIGINT 1 s after the first cancel: the
    run must stop within GitHub's bound and exit 130, leaving the order to the always-run
    cleanup step (the issue: signals ignored for 37-39 s, exit 0)."""
    return Scenario(
        seed=-5,
        replay="--example cancels_failing_at_the_end",
        jobs=(_job("a", "RTX 4090", sleep_s=1.0),),
        hosts=(Host(99170, "RTX 4090", 96.0, 72.0),),
        api_faults=(ApiFault(0.0, "bad_gateway", "cancel_order", 200),),
        currency="USD-Blockchain",
        concurrency=1,
        budget_usd=None,
        boot_s=1.0,
        cancel_lag_s=0.5,
        signal=("SIGINT", 1.0),
        signal_anchor="cancel_order",
        faults_end_with_run=True,
        cleanup=True,
    )


def cost_under_faults() -> Scenario:
    """Spot preemption, a lagging cancel and a create answered HTTP 500 although it rented:
    the summary's cost must still be the bill within 1 % (the issue: 4-6 % off)."""
    jobs = (
        _job("a", "RTX 4090", spot=True, sleep_s=4.0),
        _job("b", "RTX 3090", sleep_s=2.0),
        _job("c", "RTX", needs=("b",), sleep_s=2.0),
    )
    jobs = (dataclasses.replace(jobs[0], retries=1), *jobs[1:])  # preempted: retried
    return Scenario(
        seed=-6,
        replay="--example cost_under_faults",
        jobs=jobs,
        hosts=(
            Host(99170, "RTX 4090", 96.0, 72.0, "preempt", 2.5),
            Host(99171, "RTX 4090", 120.0, 90.0),
            Host(99172, "RTX 3090", 72.0, 54.0),
        ),
        api_faults=(ApiFault(0.0, "db_error_but_created", "create_order"),),
        currency="USD-Blockchain",
        concurrency=3,
        budget_usd=None,
        boot_s=1.0,
        cancel_lag_s=1.5,
    )


def rerent_while_released() -> Scenario:
    """One 3090 for sale; a spot job, then an on-demand job that needs it: the second must wait
    for the first's order to be released, not have its create refused and fail with no offer
    (test_reuse_gives_an_on_demand_job_no_spot_server's race)."""
    return Scenario(
        seed=-7,
        replay="--example rerent_while_released",
        jobs=(_job("a", "RTX 3090", spot=True, sleep_s=1.0), _job("b", "RTX 3090", needs=("a",))),
        hosts=(Host(99170, "RTX 3090", 72.0, 54.0),),
        api_faults=(),
        currency="USD-Blockchain",
        concurrency=1,
        budget_usd=None,
        boot_s=1.0,
        cancel_lag_s=1.0,
    )


def ahead_takes_the_last_slot() -> Scenario:
    """Concurrency 1, j1 (3090) then j2 (4090, needs j1). j1's first create is refused
    (server-offline); while j1 waits to try again, j2 is rented ahead of its needs and takes
    the only slot: j1 can never rent, j2 never starts, the run hangs holding j2's server
    (seed 1076, a race, found it)."""
    return Scenario(
        seed=-8,
        replay="--example ahead_takes_the_last_slot",
        jobs=(_job("j1", "RTX 3090", sleep_s=1.0), _job("j2", "RTX 4090", needs=("j1",))),
        hosts=(Host(99170, "RTX 3090", 72.0, 54.0), Host(99171, "RTX 4090", 96.0, 72.0)),
        api_faults=(ApiFault(0.0, "server_offline", "create_order"),),
        currency="USD-Blockchain",
        concurrency=1,
        budget_usd=None,
        boot_s=1.0,
        cancel_lag_s=0.5,
        run_bound_s=40.0,
    )


def signal_at_start() -> Scenario:
    """Ctrl-C 0.3 s after `clore-run run` starts, before anything is rented: the run must end
    130 without a traceback (F7: the interpreter's KeyboardInterrupt, exit -2, while the
    modules load and the process guard starts the process again)."""
    return Scenario(
        seed=-9,
        replay="--example signal_at_start",
        jobs=(_job("a", "RTX 4090", sleep_s=1.0),),
        hosts=(Host(99170, "RTX 4090", 96.0, 72.0),),
        api_faults=(),
        currency="USD-Blockchain",
        concurrency=1,
        budget_usd=None,
        boot_s=1.0,
        cancel_lag_s=0.5,
        signal=("SIGINT", 0.3),
        signal_anchor="start",
        plain_cli=True,  # the CLI's own start-up, not entry.py's patching
    )


def echo_shape_case(
    shape: str, *, kill_after_s: float | None, listed_after_s: float | None, seed: int, replay: str
) -> Scenario:
    """One job on the cheapest of three hosts, the tag echoed in `shape` (tests/fakes/
    clore_api.py TAG_ECHOES); with `kill_after_s`, SIGKILL that long after the create, then
    the always-run cleanup; `listed_after_s`: my_orders lists a new order that late."""
    hosts = (
        Host(99170, "RTX 4090", 96.0, 72.0),
        Host(99171, "RTX 4090", 120.0, 90.0),
        Host(99172, "RTX 3090", 144.0, 100.0),
    )
    killed = kill_after_s is not None
    return Scenario(
        seed=seed,
        replay=replay,
        jobs=(_job("train", "RTX 4090", sleep_s=2.0),),
        hosts=hosts,
        api_faults=(),
        currency="USD-Blockchain",
        concurrency=1,
        budget_usd=None,
        boot_s=3.0,  # the kills land while the order deploys
        cancel_lag_s=0.5,
        signal=("SIGKILL", kill_after_s) if kill_after_s is not None else None,
        signal_anchor="create_order" if killed else "",
        cleanup=killed,
        tag_echo=shape,
        appear_after_s=listed_after_s,
    )


def port_http_killed_before_its_id() -> Scenario:
    """The tag echoed as "PORT/http"; the run killed 0.5 s after its create, before my_orders
    (2 s late) listed the order: its cleanup read the echo as another tag, said "no order was
    created; marked failed", exited 0, and the order billed on (issue 33)."""
    return echo_shape_case(
        "port/http", kill_after_s=0.5, listed_after_s=2.0, seed=-20,
        replay="--example port_http_killed_before_its_id",
    )  # fmt: skip


def untagged_until_deployed_killed_before_its_id() -> Scenario:
    """As above, the tag listed only once the order is deployed (3 s after the create): the
    cleanup finds an order with no tag yet, and looks again while it deploys."""
    return echo_shape_case(
        "absent-until-deployed", kill_after_s=0.5, listed_after_s=2.0, seed=-21,
        replay="--example untagged_until_deployed_killed_before_its_id",
    )  # fmt: skip


def rate_limited_create_stamped_late() -> Scenario:
    """The long run's seed 7016, shortest: the create refused once for the rate limit (it
    made nothing) and sent again; `ct` stamps the order a minute late, so the bill starts at
    the create's mark. The mark was the refused send's: the wait between was billed too, the
    summary over the bill (34 % there)."""
    return Scenario(
        seed=-22,
        replay="--example rate_limited_create_stamped_late",
        jobs=(_job("train", "RTX 4090", sleep_s=1.0),),
        hosts=(Host(99170, "RTX 4090", 240.0, 180.0), Host(99171, "RTX 4090", 240.0, 180.0)),
        api_faults=(ApiFault(0.0, "rate_limited", "create_order"),),
        currency="USD-Blockchain",
        concurrency=1,
        budget_usd=None,
        boot_s=1.0,
        cancel_lag_s=0.0,
        ct_late_s=60.0,
        order_end_echo=True,  # an on-demand order's end is billed from its start to it
    )


def untagged_stamped_late_killed() -> Scenario:
    """The long run's seed 7011, shortest: the create answered HTTP 500 yet made the order;
    the run killed right after; the order's tag is listed only once deployed (its image pulls
    20 s) and `ct` stamps it a minute late. Its cleanup read it as not ours ("no order was
    created; marked failed"), exit 0, the order billing on. It may be ours: named, exit 3."""
    return Scenario(
        seed=-23,
        replay="--example untagged_stamped_late_killed",
        jobs=(_job("train", "RTX 4090", sleep_s=1.0),),
        hosts=(Host(99170, "RTX 4090", 96.0, 72.0),),
        api_faults=(ApiFault(0.0, "db_error_but_created", "create_order"),),
        currency="USD-Blockchain",
        concurrency=1,
        budget_usd=None,
        boot_s=1.0,
        cancel_lag_s=0.5,
        signal=("SIGKILL", 0.3),
        signal_anchor="create_order",
        cleanup=True,
        pulls_s=((99170, 20.0),),
        tag_echo="absent-until-deployed",
        ct_late_s=60.0,
    )


def dirty_handover() -> Scenario:
    """chain_of_three, its first job leaving the GPU busy (an nvidia-smi lists a compute
    process): its server fails the clean handover, goes back and runs no other job; the
    second job rents a server of its own, which the third (clean after the second) reuses:
    two orders, none left, each billed as the summary says."""
    return dataclasses.replace(
        chain_of_three(), seed=-30, replay="--example dirty_handover", dirty_gpu=("one",)
    )


EXAMPLES = {
    "two_job_leak": two_job_leak,
    "chain_of_three": chain_of_three,
    "racing_cleanup": racing_cleanup,
    "signal_during_create": signal_during_create,
    "cancels_failing_at_the_end": cancels_failing_at_the_end,
    "cost_under_faults": cost_under_faults,
    "rerent_while_released": rerent_while_released,
    "ahead_takes_the_last_slot": ahead_takes_the_last_slot,
    "signal_at_start": signal_at_start,
    "port_http_killed_before_its_id": port_http_killed_before_its_id,
    "untagged_until_deployed_killed_before_its_id": untagged_until_deployed_killed_before_its_id,
    "rate_limited_create_stamped_late": rate_limited_create_stamped_late,
    "untagged_stamped_late_killed": untagged_stamped_late_killed,
    "dirty_handover": dirty_handover,
}
