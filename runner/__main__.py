"""`python -m runner`: the `clore-run` command."""

try:  # Ctrl-C while the entry point itself loads: the same one line and 130 as later
    from runner.launch import main
except KeyboardInterrupt:
    from runner import interrupted  # stdlib only: loads in an instant

    interrupted.leave()

main()
