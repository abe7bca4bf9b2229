"""The core prices spot offers without waiting for the API: the spot books are read on the
rents' threads, and a bid that moved is priced again, the host not blamed."""

from __future__ import annotations

from runner.core.rentals import RentFailed, RentServer, ServerReady
from runner.spec.loader import parse_pipeline
from tests.backends.clore.test_clore_run import ByHand
from tests.fakes.clore_on_sshd import Setup
from tests.fakes.clore_on_sshd import setup as setup  # the fixture

SPOT = (
    "currency: USD-Blockchain\n"
    "jobs:\n  a: {run: echo a, gpu: {type: '3090', spot: true, max-price: 0.5}}\n"
)
SERVER = 88028  # the cheapest 3090 the core rents for a


def test_deciding_reads_no_spot_book_and_a_moved_bid_is_priced_again(setup: Setup) -> None:
    setup.fake.rival_bids[SERVER].append((1.8, "USD-Blockchain"))  # over the 1.5 minimum
    hand = ByHand(setup, parse_pipeline(SPOT, "p.yml", {}))  # the core decided its first rent
    assert setup.fake.calls("spot_marketplace") == []  # on the loop: no API call
    (first,) = [c for c in hand.todo if isinstance(c, RentServer)]
    assert first.quote.host == str(SERVER)
    # The rent's thread reads the book: the bid it needs is over what the core reserved.
    moved = hand.rent()
    assert isinstance(moved, RentFailed) and moved.requote, moved
    assert len(setup.fake.calls("spot_marketplace")) == 1
    assert setup.fake.calls("create_order") == []  # nothing ordered at a price not reserved
    # The core rents the same host again (not excluded), at the bid over the rival's.
    (again,) = [c for c in hand.todo if isinstance(c, RentServer)]
    assert again.quote.host == str(SERVER)
    assert again.quote.usd_per_hour > first.quote.usd_per_hour
    assert hand.rent() == ServerReady(again.server)
    hand.backend.shutdown()
