"""When a slow boot gets a second host: the hedging policy, pure.

On a marketplace most rentals that fail never come up at all (reference/clore-api.md §8), and
a boot that has run well past what a healthy one takes is more likely such a host than a slow
healthy one. Waiting out the whole boot bound on it, then on the next dead host, costs the
run minutes each; a second fitting host rented for the same job at that point costs seconds of
rental (the loser is cancelled inside the creation fee's grace). So:

- a boot is hedged once it runs `factor` times past the healthy boot expected of its host (its
  own history, else the market's, else the default), but no later than half the boot bound:
  a hedge after the bound would be a plain retry;
- a boot online, its container deploying (its image pulling), is alive: it is hedged only
  when this image's pulls elsewhere say this one runs `factor` times late (another host's
  cache holds it); an image never seen deployed is a pull every host shares, never hedged;
- a host whose boots fail at least `at_once_chance` of the time (the host's record, or the
  market's for a host never seen) is hedged from the start: both boots go out together;
- a boot has at most one hedge at a time (two boots of a job in flight; when one of them fails,
  the other's own timer may hedge it in turn), and a hedge is rented only under the cap and
  when the budget holds its worst case besides everything else;
- the first boot to answer SSH wins, the other is cancelled at once.

`benchmarks/bench_dead_hosts.py` measures these choices against a simulated market of dead
hosts, healthy boots of 35 s-3 min and sshds that never answer.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class HedgePolicy:
    """When and how much to hedge a boot (`enabled=False`: never)."""

    enabled: bool = True
    factor: float = 1.5  # hedge a boot running this many times past its expected healthy boot
    min_after_s: float = 30.0  # never sooner: an image pull alone takes that
    bound_share: float = 0.5  # and no later than this share of the boot bound
    at_once_chance: float = 0.5  # a host this likely to fail is hedged from the start

    def after_s(self, expected_boot_s: float, fail_chance: float, bound_s: float) -> float:
        """How long a boot runs before it is hedged (0: from the start)."""
        if fail_chance >= self.at_once_chance:
            return 0.0
        late = max(self.min_after_s, self.factor * expected_boot_s)
        return min(late, max(self.min_after_s, self.bound_share * bound_s))

    def deploy_after_s(self, expected_pull_s: float | None) -> float | None:
        """How long a boot may deploy (online, its image pulling) before it is hedged; None:
        never (nothing known of this image's pulls: every host must pull it alike)."""
        if expected_pull_s is None:
            return None
        return max(self.min_after_s, self.factor * expected_pull_s)

    def may_hedge(self, held: int, cap: int) -> str | None:
        """Why a hedge may not be rented now (None: it may)."""
        if not self.enabled:
            return "hedging is off"
        if held >= cap:
            return f"{held} of {cap} servers held (the cap)"
        return None


NO_HEDGE = HedgePolicy(enabled=False)
