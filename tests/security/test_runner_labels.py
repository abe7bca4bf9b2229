"""A rented runner is registered with its unique label only: a queued job that asks for
`self-hosted` (or `linux`, `x64`, `clore`) — a fork's pull request on a public repository —
must not be able to take the GPU server, root in its container until the cap."""

from __future__ import annotations

import pytest

from tests.fakes.github_runners import fake_github as fake_github
from tests.fakes.github_runners import github_server as github_server
from tests.gh_runner.harness import Host
from tests.gh_runner.harness import host as host


@pytest.mark.slow
def test_runners_carry_their_unique_label_only(host: Host) -> None:
    started = host.invoke(host.start_args())
    assert started.exit_code == 0, started.output
    record = host.record()
    registered = {r.runner_id: host.github.labels[r.runner_id] for r in record.runners}
    print(f"\nlabels registered: {sorted(registered.values())}")
    assert registered == {r.runner_id: [r.label] for r in record.runners}
    for rental in record.runners:
        host.github.wait_for("done", rental.runner_id)
    host.job_runs()
    stopped = host.invoke(["runner", "stop", "--record", str(host.tmp / "record.json")])
    assert stopped.exit_code == 0, stopped.output


@pytest.mark.slow
def test_there_is_no_option_to_add_a_shared_label(host: Host) -> None:
    result = host.invoke([*host.start_args(), "--label", "gpu"])
    assert result.exit_code == 2 and "--label" in result.output
    assert host.fake.requests == []


@pytest.mark.slow
def test_a_cap_past_the_reapers_maximum_is_refused(host: Host) -> None:
    """The reaper cancels any runner 24 h after its create, whatever its record says: a
    start may not ask for longer."""
    result = host.invoke(host.start_args("--max-minutes", "1441"))
    assert result.exit_code == 2 and "at most 1440" in result.output
    assert host.fake.requests == []
