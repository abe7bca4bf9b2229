"""`python -m runner`: the `clore-run` command."""

import sys

try:  # Ctrl-C while the entry point itself loads: the same one line and 130 as later
    from runner.launch import main
except KeyboardInterrupt:
    print("clore-run: interrupted", file=sys.stderr)
    sys.exit(130)

main()
