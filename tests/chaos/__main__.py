"""`python -m tests.chaos SEED [SEED...]`: replay chaos scenarios and print their verdicts.

Add `--small` for the quick set's sizes (the seeds in tests/chaos/test_chaos.py are drawn so),
`--keep DIR` to keep each scenario's folder (pipeline, outputs, ledgers, market.log),
`--jobs N` to play N scenarios at once (each with sshds of its own).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from tests.chaos.examples import EXAMPLES
from tests.chaos.market import SshdPool
from tests.chaos.suite import play_seeds, run_scenario


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.chaos")
    parser.add_argument("seeds", nargs="*", type=int)
    parser.add_argument("--example", choices=sorted(EXAMPLES), help="an issue's example instead")
    parser.add_argument("--small", action="store_true", help="3-5 jobs, as the quick set")
    parser.add_argument("--keep", type=Path, help="keep the scenarios' folders here")
    parser.add_argument("--jobs", type=int, default=1, help="scenarios played at once")
    args = parser.parse_args(argv)
    failed = 0
    with tempfile.TemporaryDirectory(prefix="chaos-") as tmp:
        folder = args.keep or Path(tmp)
        if args.example:
            sshds = SshdPool(Path(tmp) / "sshd")
            try:
                verdicts = [run_scenario(EXAMPLES[args.example](), sshds, folder)]
            finally:
                sshds.stop()
        else:
            verdicts = play_seeds(args.seeds, folder, small=args.small, jobs=args.jobs)
        for verdict in verdicts:
            print(verdict.report())
            print(f"{'FAIL' if verdict.violations else 'ok'} in {verdict.seconds:.1f} s\n")
            failed += bool(verdict.violations)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
