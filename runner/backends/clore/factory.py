"""Builds the clore backend for a run from the environment (CLORE_API_KEY, CLORE_API_URL)."""

from __future__ import annotations

from pathlib import Path

from runner.backends.clore.api import CloreClient
from runner.backends.clore.backend import Budget, CloreBackend
from runner.backends.clore.provision import Provisioner
from runner.backends.ssh.keys import ClientKey, HostKeyStore
from runner.clock import SystemClock
from runner.core.model import Pipeline
from runner.ledger import Ledger


def clore_backend(pipeline: Pipeline, ledger_path: Path, run_id: str) -> CloreBackend:
    """A backend renting on Clore with a fresh ed25519 key for this run only."""
    client = CloreClient.from_env()
    clock = SystemClock()
    provisioner = Provisioner(
        client=client,
        ledger=Ledger(ledger_path),
        run_id=run_id,
        key=ClientKey.generate(),
        host_keys=HostKeyStore(),
        clock=clock,
        currency=pipeline.currency,
    )
    return CloreBackend(
        client=client,
        provisioner=provisioner,
        clock=clock,
        concurrency=pipeline.concurrency,
        budget=Budget(pipeline.budget_usd),
        currency=pipeline.currency,
    )
