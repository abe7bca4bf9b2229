"""What a job's place says of the rented server it runs on: the facts its reports keep (the
order, the GPUs, the price and the fee) and the notes its log starts with."""

from __future__ import annotations

from runner.backends.base import Place
from runner.backends.clore.fees import FeeSchedule
from runner.backends.clore.market import Offer
from runner.backends.clore.rental import Rental


def place_on(rental: Rental, fees: FeeSchedule, with_fee_notes: bool) -> Place:
    """The place of the next job on `rental`. The hosts skipped before it are said by the
    first job on it only (they leave the rental); `with_fee_notes`: the fee rates assumed
    are said too (once per run)."""
    offer = rental.offer
    facts = {
        "rental_id": str(rental.rental_id),
        "server_id": str(offer.server_id),
        "order_id": str(rental.order_id),
        "gpu": offer.gpu_model,
        "gpu_count": str(offer.gpu_count),
        "usd_per_hour": f"{rental.usd_per_hour:.4f}",
        "order_currency": rental.currency,
        "price_per_day": f"{rental.price_per_day:g}",
        "renter_fee_rate": f"{rental.fee_rate:g}",
        "renter_fee_source": fees.source,
    }
    if offer.cuda_version:
        facts["cuda"] = offer.cuda_version
    notes = list(rental.skipped)
    for timing in ("online_after_s", "ssh_ready_after_s"):  # from the create
        if timing in rental.facts:
            facts[timing] = rental.facts[timing]
    if rental.skipped:
        facts["skipped_hosts"] = "; ".join(rental.skipped)
        rental.skipped = []
    if with_fee_notes:
        notes += fees.notes
    return Place(f"clore-{offer.server_id}", facts, rental.usd_per_hour, notes)


def offer_label(offer: Offer) -> str:
    """`RTX 4090 #88028`, `2x RTX 4090 #88028`: what the live view says is being rented."""
    gpus = offer.gpu_model if offer.gpu_count == 1 else offer.gpus
    return f"{gpus} #{offer.server_id}"
