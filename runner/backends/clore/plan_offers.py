"""`clore-run plan --backend clore`: the offer each job would take today and what it may cost.

Pure: takes today's offers, gives data. Prices include the renter's fee. Each job's offer is
the one `run`'s core would rent: the best that fits, priced as run prices it (a spot order at
its bid), passed over when its maximum rental length cannot hold the job (and said so). The
ceiling ("at most") is the very worst case run's budget reserves for that rental: the boot
bound, the timeout and fetching the files at the price with fee, plus the creation fee when
that could pass the fee's grace; a job whose ceiling alone is over the budget is one run will
refuse, and the plan says so. The estimate is price x `estimate-minutes` where the job gives one.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from runner.backends.clore import bill
from runner.backends.clore.fees import FeeSchedule
from runner.backends.clore.market import (
    Offer,
    explain_no_fit,
    matching_offers,
    skipped_ids,
)
from runner.backends.clore.quotes import OfferMarket
from runner.backends.clore.settings import DEFAULT_IMAGE, CloreSettings
from runner.core import money
from runner.core.hedge import HedgePolicy
from runner.core.hosts import HostMemory
from runner.core.model import GpuAsk, Job, Pipeline
from runner.core.predict import Prediction, predict
from runner.core.pulls import Pulls, image_allowance_s
from runner.core.rental_length import best_that_holds, hours_text, passed_over_text, worst_hold_s
from runner.core.rentals import Quote
from runner.core.simulate_market import SimulationStuck
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
        "refusals": _refusals(jobs, budget),
        "unfit": [job_id for job_id, e in jobs.items() if e["offer"] is None],
        **_predicted(pipeline, offers, memory),
    }


def _predicted(
    pipeline: Pipeline, offers: list[Offer], memory: HostMemory | None
) -> dict[str, Any]:
    """The plan's `makespan`, `cost`, `prediction_unavailable` and `summary`. A simulation
    that does not end (the core caught in a loop: `SimulationStuck`) takes nothing from the
    prices, which stand on their own: `makespan` and `cost` are null, and
    `prediction_unavailable` says why in one line (null when the prediction is there)."""
    try:
        prediction = predict_run(pipeline, offers, memory)
    except SimulationStuck as exc:
        why = f"the simulated run did not end: {exc}"
        summary = f"makespan prediction unavailable: {why}"
        return {"makespan": None, "cost": None, "prediction_unavailable": why, "summary": summary}
    makespan, cost = prediction.to_json()
    return {
        "makespan": makespan,
        "cost": cost | {"servers_rented": prediction.servers_rented, "fits": prediction.fits},
        "prediction_unavailable": None,
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


class _PlanMarket(OfferMarket):
    """Today's offers quoted as `run` quotes them: the creation fee of the account's schedule
    in each offer's own USD rate, and the renter's fee rate named."""

    def __init__(self, offers: list[Offer], fees: FeeSchedule) -> None:
        super().__init__(offers, fees.currency)
        self._fees = fees

    def quote(self, offer: Offer, ask: GpuAsk) -> Quote | None:
        quote = super().quote(offer, ask)
        if quote is None:
            return None
        fee_usd = self._fees.creation_fee_usd(ask.spot, offer.usd_per_unit)
        return replace(quote, creation_fee_usd=fee_usd, fee_rate=offer.fee_rate(ask.spot))


def _job_entry(
    job: Job, offers: list[Offer], currency: str, fees: FeeSchedule, memory: HostMemory | None
) -> dict[str, Any]:
    ask = job.gpu or _ANY_GPU
    market = _PlanMarket(offers, replace(fees, currency=currency))
    if memory is not None:
        market.remember(memory, bill.DEFAULT_BOOT_BOUND_S)
    hold_s = run_hold_s(job, memory)
    quote, passed = best_that_holds(market, ask, set(), hold_s)
    fitting = {o.server_id for o in matching_offers(offers, ask)}
    skipped = [f"#{i}: {why}" for i, why in sorted(skipped_ids(memory).items()) if i in fitting]
    passed_over = [_passed_over(q, hold_s) for q in passed]
    if quote is None:
        why = passed_over_text(passed, hold_s) or explain_no_fit(offers, ask, currency)
        return {"offer": None, "why": why, "skipped": skipped, "passed_over": passed_over}
    offer = market.offer(quote)
    return {
        "offer": {
            "server_id": offer.server_id,
            "gpus": offer.gpus,
            "usd_per_hour": round(quote.usd_per_hour, 6),
            "spot": ask.spot,
            "reliability": offer.reliability,
            "location": offer.location,
            "max_rental_s": offer.max_rental_s,
        },
        "skipped": skipped,
        "passed_over": passed_over,
        "worst_hold_s": hold_s,
        "ceiling_usd": round(quote.cost_usd(hold_s), 6),
        "estimate_usd": round(quote.cost_usd(job.duration_hint_s), 6),
    }


def run_hold_s(job: Job, memory: HostMemory | None = None) -> float:
    """The longest `run` holds a server rented for `job`: its book allows every boot the
    default bound (no per-run flag changes it) and what the job's image's pull may add (the
    host history's pulls of it), a job's `boot-timeout-minutes` where longer."""
    pulls = memory.pulls if memory is not None else Pulls()
    pulls = replace(pulls, default_image=DEFAULT_IMAGE)
    allowance_s = image_allowance_s(pulls, job.image or DEFAULT_IMAGE, bill.DEFAULT_BOOT_BOUND_S)
    return worst_hold_s(allowance_s, job)


def _passed_over(quote: Quote, hold_s: float) -> str:
    length = hours_text(quote.max_rental_s or 0.0)
    return (
        f"#{quote.host}: passed over: maximum rental length {length} cannot hold the job's "
        f"worst case {hours_text(hold_s)} (boot bound, timeout, fetching files)"
    )


def _refusals(jobs: dict[str, Any], budget_usd: float | None) -> list[str]:
    """The jobs `run` will refuse: the worst case of one rental alone is over the budget."""
    if budget_usd is None:
        return []
    return [
        f"run will refuse {job_id}: worst case {money.usd_text(entry['ceiling_usd'])} > "
        f"budget {money.usd_text(budget_usd)}"
        for job_id, entry in jobs.items()
        if entry["offer"] is not None and entry["ceiling_usd"] > budget_usd + 1e-9
    ]


def render_offers(data: dict[str, Any]) -> str:
    lines = [f"offers today ({data['currency']}; {data['fees']['said']}):"]
    for job_id, entry in data["jobs"].items():
        offer = entry["offer"]
        lines += [f"  {job_id}: skipped: {said}" for said in entry.get("skipped", ())]
        lines += [f"  {job_id}: {said}" for said in entry.get("passed_over", ())]
        if offer is None:
            lines.append(f"  {job_id}: {entry['why']}".replace("\n", "\n    "))
            continue
        lines.append(
            f"  {job_id}: #{offer['server_id']} {offer['gpus']} ${offer['usd_per_hour']:.3f}/h"
            f"{' spot' if offer['spot'] else ''}: estimate {money.usd_text(entry['estimate_usd'])}"
            f", at most {money.usd_text(entry['ceiling_usd'])} (worst case: "
            f"{hours_text(entry['worst_hold_s'])} held{_length(offer)})"
        )
    budget = data["budget_usd"]
    verdict = (
        ""
        if budget is None
        else (f" against a budget of ${budget:.2f}" + ("" if data["within_budget"] else " (OVER)"))
    )
    lines.append(
        f"total: estimate {money.usd_text(data['total_estimate_usd'])}, "
        f"at most {money.usd_text(data['total_ceiling_usd'])}{verdict}"
    )
    lines += data.get("refusals", [])
    lines.append(data["summary"])
    return "\n".join(lines)


def _length(offer: dict[str, Any]) -> str:
    longest = offer.get("max_rental_s")
    return f", host's maximum {hours_text(longest)}" if longest else ""
