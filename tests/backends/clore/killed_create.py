"""A run killed right after its create: the ledger's row, the create answered HTTP 500 having
made the order, and nothing looked for it since. What cleanup's ownership tests start from."""

from __future__ import annotations

import pytest

from runner.backends.clore import errors as e
from runner.backends.clore.api import OrderRequest
from runner.backends.clore.ownership import LedgerMarks
from runner.stores.ledger import RentalLedger
from tests.fakes.clore_api import FakeClore, Faults

IMAGE = "nvidia/cuda:12.8.0-base-ubuntu22.04"
SERVER = 88028


def request(bid: float | None = None) -> OrderRequest:
    return OrderRequest(SERVER, IMAGE, "USD-Blockchain", bid, ssh_key="ssh-ed25519 AAAA k")


def killed_after_an_erring_create(fake: FakeClore, ledger: RentalLedger) -> int:
    """Run "X" records its rental, sends the create, gets HTTP 500 (the order made all the
    same) and dies before it looks: the row's id."""
    rid = ledger.record_intent("X", "job", SERVER, 2.0, "USD-Blockchain", 0.1, image=IMAGE)
    fake.fail_next("create_order", Faults.DB_ERROR_BUT_CREATED)
    with pytest.raises(e.DatabaseError):
        died = fake.client(recover_delays_s=())
        died.create_order(request(), journal=LedgerMarks(ledger, rid))
    return rid
