"""Start-up of `clore-run` as a whole process, against the interpreter's own start.

    python -m benchmarks.bench_startup [--repeat 15]
    python -m benchmarks.bench_startup --quick    # 3 runs each

Each command is a new process, run the way a user runs it (the installed `clore-run` script
when there is one), best of N, interleaved with `python -c pass` on the same interpreter: the
lower bound no Python program can beat. CPU time (user + system) is shown beside the wall time:
on a shared machine it moves less with other people's load. Bytecode is compiled once into a
temporary cache before timing (as `pip install` does), whatever PYTHONDONTWRITEBYTECODE says.
Targets (design §8): `--version` <= 0.1 s, `validate` of a small file
<= 0.4 s. The "with a secret" rows hold CLORE_API_KEY in the environment, as CI does: a command
that runs jobs must then start itself again without it (runner.process_guard).

`--importtime` prints the slowest imports of `validate` (python -X importtime), to see where
the time goes.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from benchmarks.targets import verdict
from benchmarks.whole_process import clore_run, quiet_env, timed

REPO = Path(__file__).resolve().parents[1]
HELLO = REPO / "examples" / "hello.yml"
TARGETS = {"--version": 0.1, "validate": 0.4}


def slowest_imports(argv: Sequence[str], top: int) -> list[tuple[int, str]]:
    done = subprocess.run(
        [argv[0], "-X", "importtime", *argv[1:]], env=quiet_env(), cwd=REPO, capture_output=True
    )
    rows = []
    for line in done.stderr.decode().splitlines():
        parts = line.split("|")
        if len(parts) == 3 and parts[1].strip().isdigit():
            rows.append((int(parts[1]), parts[2].rstrip()))
    return sorted(rows, reverse=True)[:top]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--quick", action="store_true", help="3 runs each, for CI")
    parser.add_argument("--importtime", action="store_true", help="show the slowest imports")
    args = parser.parse_args()
    if args.quick:
        args.repeat = 3
    cli = clore_run()
    secret = quiet_env(CLORE_API_KEY="ck-bench-startup-not-a-real-key")
    cases: dict[str, tuple[list[str], dict[str, str]]] = {
        "python -c pass (lower bound)": ([sys.executable, "-c", "pass"], quiet_env()),
        "clore-run --version": ([*cli, "--version"], quiet_env()),
        "clore-run validate": ([*cli, "validate", str(HELLO)], quiet_env()),
        "clore-run --version, with a secret": ([*cli, "--version"], secret),
        "clore-run validate, with a secret": ([*cli, "validate", str(HELLO)], secret),
        "clore-run --help": ([*cli, "--help"], quiet_env()),
    }
    for argv, env in cases.values():
        timed(argv, env=env, cwd=REPO)  # fills the bytecode cache
    wall = dict.fromkeys(cases, float("inf"))
    cpu = dict.fromkeys(cases, float("inf"))
    for _ in range(args.repeat):  # interleaved: a burst of other load hits every case alike
        for name, (argv, env) in cases.items():
            took, used = timed(argv, env=env, cwd=REPO)
            wall[name], cpu[name] = min(wall[name], took), min(cpu[name], used)
    bound = "python -c pass (lower bound)"
    print(f"python {sys.version.split()[0]}, whole processes, best of {args.repeat}:")
    print(f"  {'':36} {'wall':>7}  {'÷ bound':>7}  {'CPU':>7}  {'÷ bound':>7}")
    for name in cases:
        target = next((t for key, t in TARGETS.items() if name.endswith(key)), None)
        goal = f"  (target <= {target:.1f} s wall)" if target else ""
        print(
            f"  {name:36} {wall[name]:6.3f}s  {wall[name] / wall[bound]:6.2f}x  "
            f"{cpu[name]:6.3f}s  {cpu[name] / cpu[bound]:6.2f}x{goal}"
        )
    missed = [
        f"{name} {wall[name]:.3f} s > {target} s"
        for name in cases
        for key, target in TARGETS.items()
        if name.endswith(key) and wall[name] > target
    ]
    if args.importtime:
        print(f"\nslowest imports of `clore-run validate {HELLO.name}` (cumulative):")
        for micros, name in slowest_imports([*cli, "validate", str(HELLO)], 25):
            print(f"  {micros / 1000:7.1f} ms {name}")
    verdict(missed, quick=args.quick)


if __name__ == "__main__":
    main()
