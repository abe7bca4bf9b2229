"""`python -m tests.chaos.entry ARGS...`: the real `clore-run ARGS...` (runner.launch.main: the
process guard, the CLI, the driver and its threads, exit codes) with the market's pace shortened
for a fake whose orders boot in about a second of real time.

What is shortened, and only that (nothing here changes a decision the run makes):
- the API client's pacing (1.1 s between calls, 5.5 s before a create): the fake does not enforce
  it here, and a ten-job run would spend a minute in gaps. 429s still come, as injected faults;
- its retry back-off (2 s doubling up to 30 s, 90 s in all): 0.2 s doubling up to 1 s, 10 s;
  and its wait after a 429 on create (6 s, 12 s, ...: it holds every call of the process),
  0.6 s, 1.2 s, ..., or it would starve the shortened look-ups below;
- how long it gives `my_orders` to show a new order (2 s ... 20 s, 50 s in all; `cleanup` waits
  as long for a refused create's order): 2.8 s in all, the fake showing one within 0.3 s; and
  how much longer it looks for an accepted create's order (about 6 minutes): 1.5 s;
- the provisioner's polling (first poll after 3 s, then up to 30 s apart), its SSH connect
  back-off (2 s, then up to 20 s), its cancel-confirmation pauses and its boot bound (15 min by
  default; the pipelines set `boot-timeout-minutes` as a user would, this is the fallback).

The same knobs a test in process passes as `ProvisionOptions` (tests/fakes/clore_on_sshd.py):
there is no environment variable for them, so they are patched in here, as
tests/serve/test_fleet_clore.py patches the client's limiter for its `serve` processes.
"""

from __future__ import annotations

import dataclasses
import faulthandler
import functools
import os
import signal
from typing import Any

RECOVER_ENV = "CHAOS_RECOVER_DELAYS_S"  # a scenario that needs the real schedule sets it
REAL_SHUTDOWN_ENV = "CHAOS_REAL_SHUTDOWN"  # set: the cancel confirmations keep their defaults
# Set: each server is checked between jobs as `serve` checks it (a scenario with a job that
# leaves the GPU busy); a run alone does not check, since no other submission reuses its
# servers. The mark is one no process carries: only the folder and the GPU are checked.
HANDOVER_ENV = "CHAOS_HANDOVER"
HANDOVER_MARK = "CLORE_RUN_CHAOS_HANDOVER=1"


def recover_delays_s() -> tuple[float, ...]:
    """How long the client gives `my_orders` to show a new order: short, for a fake that shows
    one within 0.3 s, unless the scenario asks for another schedule (the real one, say)."""
    given = os.environ.get(RECOVER_ENV, "")
    return tuple(float(x) for x in given.split(",")) if given else (0.3, 0.5, 0.8, 1.2)


def shorten_pace() -> None:
    from runner.backends.clore import api, factory, provision, ratelimit
    from runner.backends.ssh.connection import ConnectOptions

    from_env = api.CloreClient.from_env.__func__  # type: ignore[attr-defined]

    def fast_client(cls: type[api.CloreClient], environ: Any = None, **kw: Any) -> Any:
        kw.setdefault("limiter", ratelimit.RateLimiter(min_interval_s=0.02, create_interval_s=0.1))
        kw.setdefault("retry", api.RetryPolicy(base_s=0.2, cap_s=1.0, max_total_s=10.0))
        kw.setdefault("recover_delays_s", recover_delays_s())
        # An accepted create's order not proven ours is looked for longer (about 6 min): 1.5 s.
        kw.setdefault("follow_up_delays_s", (0.5, 1.0))
        return from_env(cls, environ, **kw)

    if hasattr(api, "CREATE_RATE_LIMIT_WAIT_S"):  # a 429 on create: 6 s, then 12 s, ...
        api.CREATE_RATE_LIMIT_WAIT_S = 0.6
    api.CloreClient.from_env = classmethod(fast_client)  # type: ignore[assignment,method-assign]
    wanted = {
        "online_timeout_s": 8.0,
        "first_poll_s": 0.2,
        "max_poll_s": 0.5,
        "ssh": ConnectOptions(tries=10, backoff_s=0.2, max_backoff_s=1.0, timeout_s=3.0),
        "confirm_within_s": 4.0,
        "shutdown_confirm_within_s": 2.0,
        "first_confirm_pause_s": 0.2,
    }
    if os.environ.get(REAL_SHUTDOWN_ENV):
        for name in ("confirm_within_s", "shutdown_confirm_within_s", "first_confirm_pause_s"):
            del wanted[name]
    known = {f.name for f in dataclasses.fields(provision.ProvisionOptions)}
    options = provision.ProvisionOptions(**{k: v for k, v in wanted.items() if k in known})
    factory.Provisioner = functools.partial(  # type: ignore[misc]
        provision.Provisioner, options=options
    )


def check_handovers() -> None:
    from runner.backends.clore.backend import CloreBackend

    init = CloreBackend.__init__

    def with_mark(self: CloreBackend, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        self.handover_mark = HANDOVER_MARK

    CloreBackend.__init__ = with_mark  # type: ignore[method-assign]


def main() -> None:
    # A hung run is asked for its threads' stacks (SIGUSR2, on its stderr) before it is killed.
    faulthandler.register(signal.SIGUSR2, all_threads=True)
    shorten_pace()
    if os.environ.get(HANDOVER_ENV):
        check_handovers()
    from runner.launch import main as launch

    launch()


if __name__ == "__main__":
    main()
