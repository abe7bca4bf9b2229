"""What hedged boots did in a run, for the jobs' facts and the person watching.

The core decides hedges (runner/core/hedge.py); the backend tells this log each rent, each
give-back and each placement, and puts what it answers in the winning attempt's facts
(`boots_rented`, `boots_given_back`, `hedge`, `hedge_cost_usd`), which summary.json carries
(and sums in its `hedges`).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from runner.core.rentals import RentServer

HEDGE_REASON = "hedge:"  # how the core's reason for giving a hedged boot's loser back begins


@dataclass
class HedgeLog:
    """Per job, the boots rented for its current wait; per run, what the losers cost."""

    _boots: dict[str, list[tuple[int, str]]] = field(default_factory=dict)
    _job_of: dict[int, str] = field(default_factory=dict)
    _lost_usd: dict[str, float] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    hedges: int = 0  # rents that hedged a slow boot
    lost_usd: float = 0.0  # what the boots given back for a hedge's sake cost

    def rented(self, cmd: RentServer, label: str) -> None:
        """A rent went out; a plain one starts the job's list afresh, a hedge adds to it."""
        with self._lock:
            self._job_of[cmd.server] = cmd.for_job
            if cmd.hedge_of is None:
                self._boots[cmd.for_job] = [(cmd.server, label)]
                return
            self.hedges += 1
            self._boots.setdefault(cmd.for_job, []).append((cmd.server, label))

    def given_back(self, server: int, reason: str, cost_usd: float | None) -> None:
        """The core gave `server` back; a hedge's loser's cost is the job's hedging cost."""
        if not reason.startswith(HEDGE_REASON):
            return
        with self._lock:
            job_id = self._job_of.get(server)
            if job_id is None:
                return
            cost = cost_usd or 0.0
            self._lost_usd[job_id] = self._lost_usd.get(job_id, 0.0) + cost
            self.lost_usd += cost

    def facts(self, job_id: str, server: int) -> dict[str, str]:
        """The facts of a job placed on `server`: which boots raced for it, and who won."""
        with self._lock:
            boots = self._boots.pop(job_id, [])
        if len(boots) < 2:
            return {}
        labels = dict(boots)
        winner = labels.get(server, f"server {server}")
        others = ", ".join(label for s, label in boots if s != server)
        return {
            "boots_given_back": str(len(boots) - 1),
            "boots_rented": "; ".join(label for _, label in boots),
            "hedge": f"{len(boots) - 1} hedge(s): {winner} answered SSH first; {others} given back",
        }

    def cost_facts(self, job_id: str) -> dict[str, str]:
        """What the job's hedges' losers cost, once known (at its attempt's end)."""
        with self._lock:
            cost = self._lost_usd.pop(job_id, None)
        return {} if cost is None else {"hedge_cost_usd": f"{cost:.6f}"}
