"""The shared rank raise: a new dependent lengthens the remaining paths of what it needs, up
through their needs, without recursion, stopping where the ranks are already as high."""

from __future__ import annotations

from dataclasses import dataclass

from runner.core.model import Job
from runner.core.ranks import Key, Ranked, raise_ranks


@dataclass
class Rec:
    job: Job
    key: Key


def chain(n: int) -> dict[str, Rec]:
    recs = {}
    for i in range(n):
        needs = (f"j{i - 1}",) if i else ()
        job = Job(f"j{i}", f"j{i}", "true", i, needs, estimate_s=10.0)
        recs[job.id] = Rec(job, (0, -10.0 * (n - i), i))
    return recs


def test_a_new_dependent_raises_the_whole_chain_once() -> None:
    recs = chain(20_000)  # deep: a recursive walk would overflow the stack
    raised: list[str] = []

    def held(job_id: str) -> Ranked | None:
        return recs.get(job_id)

    raise_ranks([("j19999", 10.0)], held, lambda r: r.job.needs, lambda j, _r: raised.append(j))
    assert len(raised) == 20_000
    assert recs["j0"].key == (0, -10.0 * 20_001, 0)


def test_a_raise_stops_where_the_rank_is_already_as_high() -> None:
    recs = chain(3)
    raised: list[str] = []
    raise_ranks([("j2", 0.0)], recs.get, lambda r: r.job.needs, lambda j, _r: raised.append(j))
    assert raised == []  # 10 s + 0 below is no more than j2's rank


def test_a_job_the_queue_no_longer_holds_is_skipped() -> None:
    recs = chain(3)
    del recs["j1"]
    raise_ranks([("j1", 100.0)], recs.get, lambda r: r.job.needs, lambda j, _r: None)
    assert recs["j0"].key == (0, -30.0, 0)  # the walk did not go through j1
