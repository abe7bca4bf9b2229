"""`runner start`'s other ends: a host that fails is skipped, an install that fails and a budget
that cannot cover the worst case give everything back, and the options that are wrong say so."""

from __future__ import annotations

import threading

import pytest
from typer.testing import Result

from tests.fakes.clore_api import Faults
from tests.fakes.github_runners import fake_github as fake_github
from tests.fakes.github_runners import github_server as github_server
from tests.gh_runner.harness import Host, scan_for
from tests.gh_runner.harness import host as host


def test_a_host_that_fails_is_skipped_for_the_next_offer(host: Host) -> None:
    host.fake.fail_next("create_order", Faults.SERVER_ALREADY_RENTED)
    args = host.start_args("--gpu", "RTX")
    args[args.index("USD-Blockchain")] = "CLORE-Blockchain"
    started = host.invoke(args)
    assert started.exit_code == 0, started.output
    assert "not rented: server" in started.output  # the pipeline's words for a host skipped
    (rental,) = host.record().runners
    creates = [c.body["renting_server"] for c in host.fake.calls("create_order")]
    assert len(creates) == 2 and creates[1] == rental.server_id != creates[0]
    host.github.wait_for("done", rental.runner_id)
    host.job_runs()
    assert host.invoke(["runner", "stop", "--record", str(host.tmp / "record.json")]).exit_code == 0


def test_an_install_that_fails_gives_back_the_server_and_the_registration(host: Host) -> None:
    import hashlib  # only this test makes a package of its own

    host.github.package = b"not a tarball"  # its checksum is right: the server cannot unpack it
    host.github.package_sha256 = hashlib.sha256(host.github.package).hexdigest()
    started = host.invoke(host.start_args())
    assert started.exit_code == 3, started.output
    assert "cannot unpack" in started.output and "installing the runner on" in started.output
    (order,) = host.fake.orders.values()
    assert not order.live
    assert len(host.github.removed) == 1
    assert host.github.runners == {}
    folder = next(host.home.glob("clore-*"))
    assert not (folder / ".jitconfig").exists()  # never left on the server
    assert not (host.tmp / "record.json").exists()


def test_a_package_that_does_not_match_its_checksum_rents_nothing(host: Host) -> None:
    """The package is fetched (and checked) on this machine before anything is rented."""
    args = host.start_args()
    args[args.index(host.github.package_sha256)] = "0" * 64
    started = host.invoke(args)
    assert started.exit_code == 3, started.output
    assert "SHA-256" in started.output and host.fake.calls("create_order") == []
    assert host.github.runners == {} and len(host.github.removed) == 1


def test_a_budget_that_cannot_cover_the_worst_case_rents_nothing(host: Host) -> None:
    # 3090 at 2 USD/day with the 5 % fee, over 15 min boot + 60 min: about 0.13 USD + 0.1 fee.
    started = host.invoke(host.start_args("--budget", "0.05", "--max-minutes", "60"))
    assert started.exit_code == 3, started.output
    assert "no offer left within the budget" in started.output
    assert host.fake.calls("create_order") == []
    assert host.github.runners == {} and len(host.github.removed) == 1


def test_nothing_fits_rents_and_registers_nothing(host: Host) -> None:
    started = host.invoke(host.start_args("--gpu", "H100"))
    assert started.exit_code == 3, started.output
    assert "no offer fits 1x H100" in " ".join(started.output.split())
    assert host.github.seen == [] and host.fake.calls("create_order") == []


def test_more_runners_than_fitting_servers_is_refused_up_front(host: Host) -> None:
    started = host.invoke(host.start_args("--runners", "2"))  # one 3090 takes USD-Blockchain
    assert started.exit_code == 3, started.output
    assert "1 servers fit" in started.output and "2 runners were asked for" in started.output
    assert host.github.seen == []


@pytest.mark.parametrize(
    ("extra", "env_change", "words"),
    [
        (["--currency", "dogecoin"], {}, "--currency must be one of"),
        (["--max-minutes", "0"], {}, "must be positive"),
        (["--org", "octo", "--repo", "octo/x"], {}, "not both"),
        (["--repo", "not-a-repo"], {}, "not a repository"),
        (["--org", "a/b"], {}, "not an organization"),
        ([], {"GITHUB_REPOSITORY": ""}, "which repository"),
        ([], {"CLORE_RUNNER_TOKEN": ""}, "CLORE_RUNNER_TOKEN is not set"),
    ],
)
def test_wrong_options_are_usage_errors(
    host: Host, extra: list[str], env_change: dict[str, str], words: str
) -> None:
    args = host.start_args(*extra)
    if extra[:2] == ["--currency", "dogecoin"]:
        args.remove("--currency")
        args.remove("USD-Blockchain")
    result = host.invoke(args, {**host.env, **env_change})
    assert result.exit_code == 2, result.output
    assert words in result.output
    assert host.fake.requests == [] and host.github.seen == []


def test_an_org_runner_is_registered_on_the_organization(host: Host) -> None:
    result = host.invoke(host.start_args("--org", "octo"))
    assert result.exit_code == 3  # the fake serves one repository: the org is not found
    assert ("POST", "/orgs/octo/actions/runners/generate-jitconfig") in host.github.seen
    assert "this token cannot administer runners on organization octo (404" in " ".join(
        result.output.split()
    )
    assert host.fake.calls("create_order") == []


def test_the_config_is_in_no_output_or_file_of_a_whole_start_and_stop(host: Host) -> None:
    from tests.gh_runner.harness import actions_env

    env = actions_env(host)
    started = host.invoke(host.start_args(), env)
    assert started.exit_code == 0, started.output
    (rental,) = host.record().runners
    host.github.wait_for("done", rental.runner_id)
    config = host.github.issued[rental.runner_id]
    host.job_runs()
    stopped = host.invoke(["runner", "stop", "--record", str(host.tmp / "record.json")], env)
    assert stopped.exit_code == 0, stopped.output
    folder = host.home / rental.label
    assert (folder / "runner.log").read_text().startswith("stand-in runner: root")
    assert scan_for(config, [host.tmp, folder], host.outputs) == []
    # ...and the scan finds it where it is: the test would fail if the code leaked it.
    (host.tmp / "leak.txt").write_text(f"x {config} y")
    assert scan_for(config, [host.tmp], []) == [str(host.tmp / "leak.txt")]


def test_a_host_the_history_says_failed_lately_is_not_rented(host: Host) -> None:
    from runner.core.hosts import HostEvent
    from runner.stores.hosts import hosts_target, open_hosts

    # The host history beside the ledger (what runs write): 88028 never booted a minute ago
    # (on the run's clock: a time in its future would be ignored as tampered with).
    with open_hosts(hosts_target(host.tmp / "ledger.db")) as history:
        history.record(HostEvent("88028", "never_up", host.clock.time() - 60))
    args = host.start_args("--gpu", "RTX")  # 88028 ranks first among the RTX offers
    args[args.index("USD-Blockchain")] = "CLORE-Blockchain"
    started = host.invoke(args)
    assert started.exit_code == 0, started.output
    rented = {c.body["renting_server"] for c in host.fake.calls("create_order")}
    assert rented and 88028 not in rented
    (rental,) = host.record().runners
    host.github.wait_for("done", rental.runner_id)
    host.job_runs()
    assert host.invoke(["runner", "stop", "--record", str(host.tmp / "record.json")]).exit_code == 0


def test_a_runner_whose_next_host_the_budget_cannot_hold_ends_the_start(host: Host) -> None:
    """Two runners, a budget for the two best offers' worst cases ($0.20 + $0.16): the best
    host's sshd never answers, and the next fitting one costs more than what is left beside
    the other runner's server, which lives on past the start. The start ends (exit 3, all
    given back), where the core alone would wait for that money for ever."""
    host.fake.no_sshd.add(88028)
    args = host.start_args("--gpu", "RTX", "--runners", "2", "--budget", "0.37")
    args[args.index("USD-Blockchain")] = "CLORE-Blockchain"
    results: list[Result] = []
    # Without the check, the start would wait for that money for ever: bounded, it fails.
    worker = threading.Thread(target=lambda: results.append(host.invoke(args)), daemon=True)
    worker.start()
    worker.join(120.0)
    assert results, "the start never ended: a runner waits for money that never comes free"
    (started,) = results
    assert started.exit_code == 3, started.output
    words = " ".join(started.output.split())
    assert "no offer left within the budget for clore-" in words
    assert "beside the other runners' servers" in words
    assert host.fake.live_orders() == [] and len(host.fake.orders) == 2
    # The runner installed had taken its job (the stand-in's at once) and removed itself.
    assert host.github.runners == {} and "could not remove" not in words
    assert not (host.tmp / "record.json").exists()


def test_a_host_too_short_for_the_runners_cap_is_no_fit_and_says_why(host: Host) -> None:
    """The only 3090 taking USD-Blockchain may hold an order 1 hour (`mrl`); a runner capped at
    60 minutes is held longer at worst (the boot bound and fetching files on top). The pre-check
    counted it as fitting, registered the runner, and the core then would not rent it."""
    host.fake.mrl_hours_by_server[88028] = 1.0
    host.fake.servers[88028]["mrl"] = 1
    started = host.invoke(host.start_args("--max-minutes", "60"))
    assert started.exit_code == 3, started.output
    said = " ".join(started.output.split())
    assert "0 servers fit" in said and "maximum rental length 1 h or less cannot hold" in said
    assert host.github.seen == [] and host.fake.calls("create_order") == []
