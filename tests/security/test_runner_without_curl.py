"""The runner installs on an image with neither `curl` nor `wget` (`nvidia/cuda:*-base` may
have neither): the package is fetched once on the machine running the action, cached, and sent
over the SSH connection. Here a real sshd whose sessions' PATH holds only the basic tools."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from runner.backends.ssh.connection import Endpoint, SshConnection, connect
from runner.backends.ssh.keys import ClientKey, HostKeyStore
from runner.gh_runner.github import JitConfig
from runner.gh_runner.package import fetch_package
from runner.gh_runner.remote import RunnerPackage, install_runner
from tests import sshd_fixture
from tests.fakes.github_runners import FakeRunnersGitHub
from tests.fakes.github_runners import fake_github as fake_github
from tests.fakes.github_runners import github_server as github_server

# What install.sh (as root) and the stand-in run.sh use: no curl, no wget.
TOOLS = ("bash", "env", "cat", "mkdir", "chmod", "rm", "mv", "id", "sha256sum", "tar", "gzip",
         "setsid", "timeout", "sleep")  # fmt: skip


@pytest.fixture
def bare_sshd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[SshConnection]:
    bare = tmp_path / "bin"
    bare.mkdir()
    for tool in TOOLS:
        found = shutil.which(tool)
        assert found, tool
        os.symlink(found, bare / tool)
    monkeypatch.setattr(sshd_fixture, "_session_path", lambda: str(bare))
    server = sshd_fixture.start_sshd(tmp_path / "sshd")
    conn = connect(
        Endpoint("127.0.0.1", server.port), ClientKey.from_file(server.client_key), HostKeyStore()
    )
    try:
        yield conn
    finally:
        conn.close()
        server.stop()


@pytest.mark.slow
def test_the_runner_installs_where_there_is_no_curl_or_wget(
    bare_sshd: SshConnection, fake_github: FakeRunnersGitHub, tmp_path: Path
) -> None:
    none = bare_sshd.run("command -v curl || command -v wget")
    assert none.exit_code != 0, none.stdout  # the image really has neither
    package = RunnerPackage(
        url=fake_github.package_url, sha256=fake_github.package_sha256, user="root"
    )
    local = fetch_package(package, tmp_path / "cache")
    again = fetch_package(package, tmp_path / "cache")  # the next start: from the cache
    assert again.local == local.local
    assert [p for _, p in fake_github.seen if p.endswith(".tar.gz")] == ["/_runner/package.tar.gz"]
    said = install_runner(bare_sshd, "clore-9-1-1-abc", JitConfig("eyJ4Ijoi-no-curl"), local, 60.0)
    assert "runner started as root" in said
    assert (
        bare_sshd.run('test -x "$HOME"/clore-runner/clore-9-1-1-abc/runner/run.sh').exit_code == 0
    )


@pytest.mark.slow
def test_a_package_with_the_wrong_checksum_is_refused_before_anything(
    fake_github: FakeRunnersGitHub, tmp_path: Path
) -> None:
    from runner.errors import InfrastructureError  # only this test needs it

    package = RunnerPackage(url=fake_github.package_url, sha256="0" * 64, user="root")
    with pytest.raises(InfrastructureError, match="SHA-256"):
        fetch_package(package, tmp_path / "cache")
    assert list((tmp_path / "cache").iterdir()) == []
