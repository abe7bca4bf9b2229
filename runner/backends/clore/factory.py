"""Builds the clore backend for a run from the environment (CLORE_API_KEY, CLORE_API_URL)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from runner.backends.clore.api import CloreClient
from runner.backends.clore.backend import CloreBackend
from runner.backends.clore.host_memory import HostRecorder
from runner.backends.clore.provision import Provisioner
from runner.backends.clore.ratelimit import SHARED_FILE
from runner.backends.clore.settings import CloreSettings
from runner.backends.ssh.keys import ClientKey, HostKeyStore
from runner.clock import Clock, SystemClock
from runner.core.model import Pipeline
from runner.errors import UsageError
from runner.stores.hosts import HostHistoryError, hosts_target, open_hosts
from runner.stores.ledger import open_ledger
from runner.stores.pools import check_name
from runner.stores.target import is_postgres_url, require_psycopg

if TYPE_CHECKING:
    from runner.stores.pools.seat import PoolSeat


def clore_backend(
    pipeline: Pipeline,
    ledger_path: Path | str,
    run_id: str,
    *,
    pool: str | None = None,
    coordinator: str | None = None,
) -> CloreBackend:
    """A backend renting on Clore with a fresh ed25519 key for this run only. With `pool`,
    every rental also reserves from that budget pool on the `coordinator` database."""
    client = CloreClient.from_env()
    share_limits(client, ledger_path)
    clock = SystemClock()
    settings = CloreSettings.of(pipeline)  # the file's Clore keys, from here on
    provisioner = Provisioner(
        client=client,
        ledger=open_ledger(ledger_path),
        run_id=run_id,
        key=ClientKey.generate(),
        host_keys=HostKeyStore(),
        clock=clock,
        currency=settings.currency,
    )
    if pool is not None:
        provisioner.seat = _seat(pool, coordinator, run_id)
    return CloreBackend(
        client=client,
        provisioner=provisioner,
        clock=clock,
        settings=settings,
        hosts=host_recorder(ledger_path, run_id, clock),
    )


def host_recorder(ledger_path: Path | str, run_id: str, clock: Clock) -> HostRecorder:
    """The host history beside the ledger (its file, or its database). One that cannot be
    opened is no history this run, said once: it is advice, and the run goes on."""
    try:
        history = open_hosts(hosts_target(ledger_path), clock=clock)
    except HostHistoryError as exc:
        _warn(f"warning: the host history is not kept this run: {exc}")
        return HostRecorder(None, run_id, clock)
    return HostRecorder(history, run_id, clock, say=_warn)


def _warn(text: str) -> None:
    print(text, file=sys.stderr)


def share_limits(client: CloreClient, ledger_path: Path | str) -> None:
    """Space this process's API calls with every other one using the same ledger file (a
    run step and the cleanup step after it, back to back, went over the key's limit)."""
    if not is_postgres_url(ledger_path):
        client.limiter.share_through(Path(ledger_path).parent / SHARED_FILE)


def _seat(pool: str, coordinator: str | None, run_id: str) -> PoolSeat:
    if coordinator is None:
        raise UsageError(
            f"--pool {pool}: a pool lives in the shared database",
            hint="pass --coordinator postgresql://USER@HOST/DB or set CLORE_RUN_COORDINATOR",
        )
    require_psycopg()
    # psycopg (the postgres extra): only a run that joins a pool loads it
    from runner.stores.pools.postgres import PostgresPools
    from runner.stores.pools.seat import PoolSeat

    return PoolSeat(PostgresPools(coordinator), check_name(pool), run_id)
