"""`clore-run plan`: the order in waves, each job's ask, and the critical path, as data.

The JSON form is a stable contract (documented in the README): keys are only ever added.
"""

from __future__ import annotations

from typing import Any

from runner.backends.registry import pipeline_key_values
from runner.core import graph
from runner.core.model import Job, Pipeline, gpu_json
from runner.figures import format_duration

PLAN_SCHEMA_VERSION = 1


def build_plan(pipeline: Pipeline) -> dict[str, Any]:
    needs = {j.id: j.needs for j in pipeline.jobs}
    by_id = {j.id: j for j in pipeline.jobs}
    order = graph.topological_order(needs)
    grouped = graph.waves(needs, order)
    wave_of = {job_id: n for n, wave in enumerate(grouped, start=1) for job_id in wave}
    path, length_s = graph.critical_path(needs, lambda i: by_id[i].duration_hint_s, order)
    return {
        "schema": PLAN_SCHEMA_VERSION,
        "pipeline": pipeline.name,
        "source": pipeline.source,
        "concurrency": pipeline.concurrency,
        "budget_usd": pipeline.budget_usd,
        "timeout_s": pipeline.timeout_s,
        **pipeline_key_values(pipeline),  # the backends' own keys, as the run uses them
        "waves": grouped,
        "jobs": [_job_dict(j, wave_of[j.id]) for j in pipeline.jobs],
        "critical_path": {"jobs": path, "duration_s": length_s},
        "provision": pipeline.provisioning.value,
    }


def _job_dict(job: Job, wave: int) -> dict[str, Any]:
    return {
        "id": job.id,
        "name": job.name,
        "wave": wave,
        "needs": list(job.needs),
        "priority": job.priority.name.lower(),
        "timeout_s": job.timeout_s,
        "estimate_s": job.estimate_s,
        "retries": job.retries,
        "if": job.condition.value,
        "not_before": job.not_before,
        "gpu": gpu_json(job.gpu),
        "image": job.image,
    }


def describe_gpu(gpu: dict[str, Any] | None) -> str:
    if gpu is None:
        return "no GPU"
    text = f"{gpu['count']}x {gpu['type'] or 'any GPU'}"
    if gpu["min_vram_gb"]:
        text += f" >={gpu['min_vram_gb']:g}GB"
    if gpu["max_usd_per_hour"] is not None:
        text += f" <=${gpu['max_usd_per_hour']:.2f}/h"
    if gpu["spot"]:
        text += " spot"
    return text


def render_plan(plan: dict[str, Any]) -> str:
    jobs = {j["id"]: j for j in plan["jobs"]}
    width = max((len(i) for i in jobs), default=4)
    budget = f", budget ${plan['budget_usd']:.2f}" if plan["budget_usd"] else ""
    ahead = plan["provision"] == "ahead"
    lines = [
        f"{plan['pipeline']} ({plan['source']}): {len(jobs)} job{'s' if len(jobs) != 1 else ''}, "
        f"concurrency {plan['concurrency']}{budget}",
    ]
    if any(j["gpu"] is not None for j in jobs.values()):  # nothing is rented for the others
        lines.append(
            f"provision: {plan['provision']} ("
            + (
                "a job's server is rented while its needs run, to be up when they end)"
                if ahead
                else "a job's server is rented once the job is ready)"
            )
        )
    for n, wave in enumerate(plan["waves"], start=1):
        lines.append(f"wave {n}")
        for job_id in wave:
            j = jobs[job_id]
            needs = ", ".join(j["needs"]) or "-"
            lines.append(
                f"  {job_id:<{width}}  {j['priority']:<7} {format_duration(j['timeout_s']):>7}"
                f"  {describe_gpu(j['gpu'])}  needs: {needs}"
            )
    path = plan["critical_path"]
    lines.append(
        f"critical path ({format_duration(path['duration_s'])}, by estimate or timeout): "
        + " -> ".join(path["jobs"])
    )
    return "\n".join(lines)
