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
- a boot late for the first time gets `fan_out` hedges at once: one late boot says the market
  has hosts that never come up, and each hedge that turns out dead costs another wait of the
  same length; later, a late boot gets one more, up to `max_racing` boots racing for one job
  (when one of them fails, the others' own timers may hedge them in turn); a hedge not online
  `racing_after_s` after its rent is late itself, and with as many racing as allowed the
  oldest racer still not online gives way to a fresh host (when one fits, and never before it
  has run `min_after_s`); the host it was on is not rented again in the run, so a run among
  dead hosts always ends: each host is tried once, and the last racers run out their bound;
  a hedge is rented only under the cap and when the budget holds its worst case besides
  everything else;
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
    fan_out: int = 2  # hedges rented at once for a boot late the first time
    max_racing: int = 3  # boots racing for one job at most (the first and its hedges)
    # A hedge (its job's boot was late: the market has hosts that never come up) is late
    # itself once it runs this long not online; with as many racing as allowed, the oldest
    # one not online this long past its own lateness makes room for a fresh host.
    racing_after_s: float = 30.0

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

    def hedges_now(self, racing: int, fan: bool = True) -> int:
        """How many hedges a late boot gets now, with `racing` boots racing for its job.
        `fan`: its lateness says the market has hosts that never come up (it is not online
        late); a boot hedged from the start (its host likely fails) or a pull running late
        (another host's cache holds the image) gets one."""
        if not self.enabled or racing >= self.max_racing:
            return 0
        fan_out = self.fan_out if fan else 1
        return min(fan_out if racing == 1 else 1, self.max_racing - racing)

    def may_hedge(self, held: int, cap: int) -> str | None:
        """Why a hedge may not be rented now (None: it may)."""
        if not self.enabled:
            return "hedging is off"
        if held >= cap:
            return f"{held} of {cap} servers held (the cap)"
        return None


NO_HEDGE = HedgePolicy(enabled=False)
