"""`clore-run plan --backend clore`: the offer each job would take today and what it may cost.

Pure: takes today's offers, gives data. Prices include the renter's fee. The ceiling is the
worst case the budget check commits (price x timeout, plus the creation fee when the job may
run 10 minutes or more); the estimate is price x `estimate-minutes` where the job gives one.
"""

from __future__ import annotations

from typing import Any

from runner.backends.clore import bill
from runner.backends.clore.fees import FeeSchedule
from runner.backends.clore.market import (
    Offer,
    best_offer,
    explain_no_fit,
    matching_offers,
    skipped_ids,
)
from runner.backends.clore.quotes import OfferMarket
from runner.backends.clore.settings import CloreSettings
from runner.core import money
from runner.core.hedge import HedgePolicy
from runner.core.hosts import HostMemory
from runner.core.model import GpuAsk, Job, Pipeline
from runner.core.predict import Prediction, predict
from runner.figures import format_duration

_ANY_GPU = GpuAsk()
# How long a Clore server takes from the create to answering SSH (image pull, boot, sshd):
# minutes, and it varies by host and image. The plan gives its figures over this range.
BOOT_RANGE_S = (120.0, 480.0)


def plan_offers(
    pipeline: Pipeline,
    offers: list[Offer],
    fees: FeeSchedule | None = None,
    memory: HostMemory | None = None,
) -> dict[str, Any]:
    """`fees`: the account's, as `renter_fees` gave them (the offers are priced with its rates);
    None: the documented rates and creation fee. `memory`: the host history (hosts that
    failed lately skipped, and said so; the rest ranked by expected cost)."""
    currency = CloreSettings.of(pipeline).currency
    fees = fees if fees is not None else FeeSchedule(currency)
    jobs: dict[str, Any] = {}
    ceiling = estimate = 0.0
    for job in pipeline.jobs:
        entry = _job_entry(job, offers, currency, fees, memory)
        jobs[job.id] = entry
        if entry["offer"] is not None:
            ceiling += entry["ceiling_usd"]
            estimate += entry["estimate_usd"]
    budget = pipeline.budget_usd
    prediction = predict_run(pipeline, offers, memory)
    makespan, cost = prediction.to_json()
    return {
        "currency": currency,
        "fees": {
            "source": fees.source,
            "on_demand_fee_rate": fees.rates.on_demand_fee_rate,
            "spot_fee_rate": fees.rates.spot_fee_rate,
            "said": fees.describe() + "".join(f"; {note}" for note in fees.notes),
        },
        "jobs": jobs,
        "total_ceiling_usd": round(ceiling, 6),
        "total_estimate_usd": round(estimate, 6),
        "budget_usd": budget,
        "within_budget": budget is None or ceiling <= budget,
        "unfit": [job_id for job_id, e in jobs.items() if e["offer"] is None],
        "makespan": makespan,
        "cost": cost | {"servers_rented": prediction.servers_rented, "fits": prediction.fits},
        "summary": render_prediction(prediction),
    }


def predict_run(
    pipeline: Pipeline, offers: list[Offer], memory: HostMemory | None = None
) -> Prediction:
    """The run simulated on these offers: the same core decides rents, reuse, give-backs and
    hedges. With a host history of some boots, that share of hosts never comes up."""
    market = OfferMarket(offers, CloreSettings.of(pipeline).currency)
    dead = 0.0
    if memory is not None:
        market.remember(memory, bill.DEFAULT_BOOT_BOUND_S)
        dead = memory.market.fail_rate if memory.market.boots else 0.0
    return predict(pipeline, market, BOOT_RANGE_S, hedge=HedgePolicy(), dead_fraction=dead)


def render_prediction(prediction: Prediction) -> str:
    low, mid, high = prediction.makespan_s
    c_low, c_mid, c_high = prediction.cost_usd
    b_low, _, b_high = prediction.boot_s
    how = "rented ahead" if prediction.provisioning.value == "ahead" else "rented on demand"
    verdict = "" if prediction.fits else " (some job finds no server within the budget)"
    dead = prediction.dead_fraction
    failing = (
        f", {dead * 100:.0f} % of boots failing as the host history says, hedged" if dead else ""
    )
    return (
        f"simulated run ({how}, boots {b_low:g}-{b_high:g} s{failing}, "
        f"{prediction.servers_rented} "
        f"rental(s)): makespan {format_duration(low)}-{format_duration(high)} "
        f"(expected {format_duration(mid)}), cost ${c_low:.2f}-${c_high:.2f} "
        f"(expected ${c_mid:.2f}){verdict}"
    )


def _job_entry(
    job: Job, offers: list[Offer], currency: str, fees: FeeSchedule, memory: HostMemory | None
) -> dict[str, Any]:
    ask = job.gpu or _ANY_GPU
    offer = best_offer(offers, ask, memory=memory)
    fitting = {o.server_id for o in matching_offers(offers, ask)}
    skipped = [f"#{i}: {why}" for i, why in sorted(skipped_ids(memory).items()) if i in fitting]
    if offer is None:
        return {"offer": None, "why": explain_no_fit(offers, ask, currency), "skipped": skipped}
    usd_per_hour = offer.usd_per_hour(ask.spot) or 0.0
    fee_usd = fees.creation_fee_usd(ask.spot, offer.usd_per_unit)
    return {
        "offer": {
            "server_id": offer.server_id,
            "gpus": offer.gpus,
            "usd_per_hour": round(usd_per_hour, 6),
            "spot": ask.spot,
            "reliability": offer.reliability,
            "location": offer.location,
        },
        "skipped": skipped,
        "ceiling_usd": round(_worst_case_usd(usd_per_hour, job.timeout_s, fee_usd), 6),
        "estimate_usd": round(_worst_case_usd(usd_per_hour, job.duration_hint_s, fee_usd), 6),
    }


def _worst_case_usd(usd_per_hour: float, held_s: float, fee_usd: float) -> float:
    return money.worst_case_usd(usd_per_hour, held_s, fee_usd, bill.CREATION_FEE_GRACE_S)


def render_offers(data: dict[str, Any]) -> str:
    lines = [f"offers today ({data['currency']}; {data['fees']['said']}):"]
    for job_id, entry in data["jobs"].items():
        offer = entry["offer"]
        lines += [f"  {job_id}: skipped: {said}" for said in entry.get("skipped", ())]
        if offer is None:
            lines.append(f"  {job_id}: {entry['why']}".replace("\n", "\n    "))
            continue
        lines.append(
            f"  {job_id}: #{offer['server_id']} {offer['gpus']} ${offer['usd_per_hour']:.3f}/h"
            f"{' spot' if offer['spot'] else ''}: estimate ${entry['estimate_usd']:.2f}, "
            f"at most ${entry['ceiling_usd']:.2f}"
        )
    budget = data["budget_usd"]
    verdict = (
        ""
        if budget is None
        else (f" against a budget of ${budget:.2f}" + ("" if data["within_budget"] else " (OVER)"))
    )
    lines.append(
        f"total: estimate ${data['total_estimate_usd']:.2f}, "
        f"at most ${data['total_ceiling_usd']:.2f}{verdict}"
    )
    lines.append(data["summary"])
    return "\n".join(lines)
