"""The randomized fault suite's long run (issue 24 part 4; the quick set is tests/chaos/).

    python -m benchmarks.bench_chaos [--runs 200] [--first-seed 1000] [--jobs 4] [--quick]

Plays `--runs` scenarios drawn from consecutive seeds (3-10 jobs each; `--small`: 3-5), each
through the real CLI against the fake Clore on real sshds, and checks every invariant after
each. Prints the counts: scenarios, violations by invariant (with the first seeds of each),
exit codes, signals and races played, and the wall time per scenario. Each violation's seed
replays it: `python -m tests.chaos SEED`. `--quick`: 3 small scenarios (what CI runs).
Exits 1 when any scenario broke an invariant (the seeds are printed to replay it), 0 when
every invariant held: a long run that finds something must not look like one that found
nothing. Loopback only; no network.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

from tests.chaos.invariants import INVARIANTS
from tests.chaos.suite import Verdict, play_seeds

QUICK_SEEDS = (101, 106, 119)  # a plain run, a SIGINT, a SIGKILL and its cleanup (small)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=200, help="scenarios to play")
    parser.add_argument("--first-seed", type=int, default=1000)
    parser.add_argument("--jobs", type=int, default=4, help="scenarios played at once")
    parser.add_argument("--small", action="store_true", help="3-5 jobs, as the quick set")
    parser.add_argument("--quick", action="store_true", help="3 small scenarios")
    parser.add_argument("--keep", type=Path, help="keep every scenario's folder here")
    args = parser.parse_args()
    seeds = (
        list(QUICK_SEEDS)
        if args.quick
        else list(range(args.first_seed, args.first_seed + args.runs))
    )
    small = args.small or args.quick
    started = time.monotonic()
    verdicts: list[Verdict] = []
    with tempfile.TemporaryDirectory(prefix="bench-chaos-") as tmp:
        folder = args.keep or Path(tmp)
        for verdict in play_seeds(seeds, folder, small=small, jobs=args.jobs):
            verdicts.append(verdict)
            mark = ", ".join(sorted({v.invariant for v in verdict.violations})) or "ok"
            print(f"seed {verdict.scenario.seed}: {mark} ({verdict.seconds:.1f} s)", flush=True)
    failed = print_counts(verdicts, time.monotonic() - started, args.jobs)
    if failed:
        print(f"FAIL: {failed} scenario(s) broke an invariant", file=sys.stderr)
        sys.exit(1)


def print_counts(verdicts: list[Verdict], wall_s: float, jobs: int) -> int:
    """Print the run's counts; how many scenarios broke an invariant."""
    by_invariant: dict[str, list[int]] = defaultdict(list)
    for verdict in verdicts:
        for invariant in sorted({v.invariant for v in verdict.violations}):
            by_invariant[invariant].append(verdict.scenario.seed)
    codes = Counter(code for v in verdicts for code in v.exit_codes)
    signals = Counter(v.scenario.signal[0] for v in verdicts if v.scenario.signal)
    races = sum(v.scenario.race for v in verdicts)
    jobs_run = sum(len(v.scenario.jobs) * len(v.outcome.runs) for v in verdicts)
    failed = sum(bool(v.violations) for v in verdicts)
    per = sum(v.seconds for v in verdicts) / max(1, len(verdicts))
    print(f"\nscenarios: {len(verdicts)} ({jobs_run} jobs), {failed} with a violation")
    print(f"wall: {wall_s:.0f} s, {jobs} at a time; {per:.1f} s per scenario on average")
    print(f"signals: {dict(signals) or 'none'}; races: {races}")
    print("exit codes: " + ", ".join(f"{code}: {n}" for code, n in sorted(codes.items(), key=str)))
    print("violations by invariant (scenarios; first seeds):")
    for invariant in INVARIANTS:
        seeds = by_invariant.get(invariant, [])
        shown = ", ".join(map(str, seeds[:8])) + (" ..." if len(seeds) > 8 else "")
        print(f"  {invariant:15} {len(seeds):4}  {shown}")
    return failed


if __name__ == "__main__":
    main()
