"""A runner start's budget pool (`--pool`, as `run` has it: runner/stores/pools/__init__.py).

A pipeline run's reservations end with the run; a runner's server outlives its start, so its
reservation must too. The order:

1. `start` joins the pool with a lease that lasts the runners' whole life (`max-minutes` from
   the create, the boot before it, and the runner reaper's grace after it). Each rent, a
   hedge's included, reserves its worst case before its ledger row and its create; a loser, a
   host that failed and everything of a start that failed are settled at what they were billed
   as they are given back.
2. A start that succeeded stops heartbeating without leaving: the runners' reservations stay
   held under the lease, whose holder and fencing token go into the record (not secret: the
   coordinator's URL is not in it).
3. `stop` settles each runner's reservation at what its order was billed, then leaves the pool
   (the lease ends when nothing is left unsettled). An order it could not confirm cancelled is
   not settled: leaving expires the lease at once, so that a pool reaper (`clore-run cleanup
   --coordinator`) cancels it through the shared ledger and settles it.
4. A stop that never ran: the lease runs out past the cap and a pool reaper does the same.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from runner.backends.runner_record import GRACE_S, RunnerRecord
from runner.errors import InfrastructureError, UsageError

_GONE = ("cancelled", "ended", "not-listed")  # nothing of the order can bill any more

if TYPE_CHECKING:  # psycopg is an extra: imported only when a pool is used
    from runner.gh_runner.stop import Stopped
    from runner.stores.pools import Lease
    from runner.stores.pools.postgres import PostgresPools
    from runner.stores.pools.seat import PoolSeat


def join(
    pool: str, coordinator: str | None, run_id: str, max_minutes: float, boot_bound_s: float
) -> PoolSeat:
    """This start's seat in `pool`, its lease as long as the runners may live."""
    # the pools' store: only a start or stop with --pool
    from runner.stores.pools import check_name
    from runner.stores.target import require_psycopg

    if coordinator is None:
        raise UsageError(
            f"--pool {pool}: a pool lives in the shared database",
            hint="pass --coordinator postgresql://USER@HOST/DB or set CLORE_RUN_COORDINATOR",
        )
    require_psycopg()
    # the PostgreSQL extra, checked just above
    from runner.stores.pools.postgres import PostgresPools
    from runner.stores.pools.seat import PoolSeat

    # The holder is the start's run id, the ledger's too (unique per start: `_run_id`), so a
    # pool reaper that takes the lease reconciles exactly this start's rentals. Not owned:
    # the runners outlive the start's process, and a lease naming that process would be
    # "provably dead" (and taken, and its live runners cancelled) once the start ended.
    ttl_s = boot_bound_s + max_minutes * 60.0 + GRACE_S
    return PoolSeat(PostgresPools(coordinator), check_name(pool), run_id, ttl_s=ttl_s, owned=False)


def settle(record: RunnerRecord, stopped: list[Stopped], coordinator: str | None) -> str:
    """Settle what `stop` gave back in the record's pool and leave it; what happened, in
    words ("" without a pool). Never raises: the orders are cancelled already, and what is
    not settled here a pool reaper settles once the lease runs out."""
    claim = record.pool
    if claim is None:
        return ""
    if coordinator is None:
        return (
            f"pool {claim.name}: not settled (no coordinator given): its reservations are "
            "settled by `clore-run cleanup --coordinator` once the start's lease runs out"
        )
    # the pools' store: only a start or stop with --pool
    from runner.stores.pools import Lease, LeaseLost
    from runner.stores.pools.postgres import PostgresPools

    lease = Lease(claim.holder, claim.name, claim.token, claim.ttl_s)
    try:
        with PostgresPools(coordinator) as pools:
            try:
                settled = _settle_each(pools, lease, stopped)
            except LeaseLost:
                # A reaper took the lease first (it ran out, or was judged dead). The orders
                # settled here are proven gone, so take the lease back (fencing the reaper:
                # its own settles are refused from now, and it finds nothing left to do) and
                # settle them; what may still bill stays for the next reaper.
                taken = pools.take_holder(claim.holder, f"runner-stop:{claim.holder}", claim.ttl_s)
                if taken is None:
                    return f"pool {claim.name}: a pool reaper had settled it already"
                lease = taken
                settled = _settle_each(pools, lease, stopped)
            pools.leave(lease)
    except InfrastructureError as exc:  # PoolError, or a lease lost twice
        return f"pool {claim.name}: {exc}: a pool reaper settles what is left"
    return f"pool {claim.name}: {settled} reservation(s) settled at what was billed"


def _settle_each(pools: PostgresPools, lease: Lease, stopped: list[Stopped]) -> int:
    settled = 0
    for s in stopped:
        rid, cost = s.rental.reservation_id, s.released.cost
        if rid is None or s.released.kind not in _GONE:
            continue  # may still bill, or not provably ours: the reaper's to settle
        pools.settle(lease, rid, cost.total_usd if cost is not None else 0.0)
        settled += 1
    return settled
