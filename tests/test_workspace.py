"""What travels to a job: git's tracked files; outside git only on `workspace: all`, and never
a secret."""

from __future__ import annotations

import io
import subprocess
import textwrap
from pathlib import Path

import pytest

from runner.backends.local import LocalBackend
from runner.core.model import JobStatus
from runner.engine.run_command import RunOptions, execute
from runner.errors import UsageError
from runner.spec.diagnostics import SpecError
from runner.spec.loader import parse_pipeline
from runner.workspace import is_secret_name, workspace_files

SECRETS = (
    ".env",
    ".env.local",
    "sub/.env.production",
    ".ssh/id_ed25519",
    ".ssh/config",
    ".aws/credentials",
    ".gnupg/pubring.kbx",
    ".git/config",
    "id_rsa",
    "deploy/id_ed25519.pub",
    "certs/server.pem",
    "certs/tls.KEY",
    ".netrc",
    "harmless-name.txt",  # holds a private key: caught by its first line
)
# The common credential stores, each as a home folder holds it (issue 25: `workspace: all`
# shipped the first five).
CREDENTIAL_STORES = (
    ".git-credentials",
    ".npmrc",
    ".docker/config.json",
    ".kube/config",
    ".config/gh/hosts.yml",
    ".config/hub",
    ".config/gcloud/credentials.db",
    ".azure/msal_token_cache.json",
    ".cargo/credentials.toml",
    ".cargo/credentials",
    ".gem/credentials",
    ".terraform.d/credentials.tfrc.json",
    "terraform/credentials.tfrc.json",
    ".password-store/web.gpg",
    ".dockercfg",
    ".vault-token",
    ".s3cfg",
    ".boto",
    "_netrc",
    "clusters/kubeconfig",
    "android/release.keystore",
    "vault.kdbx",
)
PLAIN = (
    "main.py",
    "data/train.csv",
    "id_map.py",
    "docs/keys.md",
    "environment.yml",
    "gh/hosts.yml",  # `gh` is a credential store under .config only
    "config/credentials.md",
    ".cargo/config.toml",
)


def _folder(root: Path) -> None:
    for rel in SECRETS + PLAIN:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("x\n")
    (root / "harmless-name.txt").write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nabc\n")


def test_a_walk_outside_git_never_lists_a_secret(tmp_path: Path) -> None:
    _folder(tmp_path)
    ws = workspace_files(tmp_path)
    assert not ws.in_git
    assert sorted(ws.files) == sorted(PLAIN)
    assert ".ssh/" in ws.withheld and ".env" in ws.withheld and "id_rsa" in ws.withheld
    assert ".git/" not in ws.withheld  # VCS data is skipped, not a secret to report


@pytest.mark.parametrize("store", CREDENTIAL_STORES)
def test_a_walk_outside_git_withholds_each_common_credential_store(
    tmp_path: Path, store: str
) -> None:
    for rel in (store, *PLAIN):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("token = x\n")
    ws = workspace_files(tmp_path)
    assert sorted(ws.files) == sorted(PLAIN), store
    assert any(store == w or store.startswith(w) for w in ws.withheld), ws.withheld


@pytest.mark.parametrize("name", ["id_map.py", "keys.md", "environment.yml", "env.py", "a.keys"])
def test_ordinary_names_are_not_secrets(name: str) -> None:
    assert not is_secret_name(name)


def _run(root: Path, text: str) -> tuple[int, dict[str, JobStatus], str]:
    pipeline = parse_pipeline(textwrap.dedent(text), "p.yml", {})
    out = io.StringIO()
    options = RunOptions(out_dir=root / "out", workspace_root=root, backoff=lambda n: 0.01)
    record, code = execute(pipeline, LocalBackend(), options, out)
    return code, {r.job_id: r.status for r in record.results}, out.getvalue()


def test_outside_git_a_default_workspace_is_refused_with_its_place(tmp_path: Path) -> None:
    _folder(tmp_path)
    with pytest.raises(SpecError) as err:
        _run(tmp_path, "jobs:\n  a: {run: 'true'}\n  b: {run: 'true', workspace: all}\n")
    text = str(err.value)
    assert text.startswith("p.yml:2:3: jobs.a.workspace: ") and "not in a git work tree" in text
    assert "workspace: all" in text and "jobs.b" not in text
    assert not (tmp_path / "out").exists()  # refused before anything ran


def test_workspace_all_copies_the_folder_but_never_its_secrets(tmp_path: Path) -> None:
    _folder(tmp_path)
    code, status, console = _run(
        tmp_path,
        """\
        jobs:
          a:
            workspace: all
            run: find . -type f | sort > ../listing.txt; cp ../listing.txt listing.txt
            artifacts: [listing.txt]
        """,
    )
    assert (code, status) == (0, {"a": JobStatus.PASSED})
    listing = (tmp_path / "out/artifacts/a/listing.txt").read_text().split()
    assert sorted(p.removeprefix("./") for p in listing if p != "./listing.txt") == sorted(PLAIN)
    assert "never copied, as they look like secrets: .aws/, .env," in console


def test_an_empty_folder_outside_git_needs_no_permission(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    pipeline = parse_pipeline("jobs:\n  a: {run: 'true'}\n", "p.yml", {})
    options = RunOptions(out_dir=tmp_path / "out", workspace_root=tmp_path / "ws")
    _, code = execute(pipeline, LocalBackend(), options, io.StringIO())
    assert code == 0


def test_inside_git_the_tracked_files_travel_as_before(tmp_path: Path) -> None:
    (tmp_path / "main.py").write_text("print(1)\n")
    (tmp_path / "untracked.txt").write_text("no\n")
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    subprocess.run(["git", "-C", str(tmp_path), "add", "main.py"], check=True)
    ws = workspace_files(tmp_path)
    assert ws.in_git and ws.files == ("main.py",)
    code, status, _ = _run(
        tmp_path, "jobs:\n  a: {run: 'test -f main.py && test ! -e untracked.txt'}\n"
    )
    assert (code, status) == (0, {"a": JobStatus.PASSED})


def test_a_job_built_without_a_file_gets_a_plain_usage_error(tmp_path: Path) -> None:
    from runner.core.model import Job, Pipeline

    (tmp_path / "f.txt").write_text("x")
    pipeline = Pipeline(name="p", jobs=(Job(id="a", name="a", run="true"),))
    options = RunOptions(out_dir=tmp_path / "out", workspace_root=tmp_path)
    with pytest.raises(UsageError, match="not in a git work tree"):
        execute(pipeline, LocalBackend(), options, io.StringIO())


@pytest.mark.slow
def test_a_first_pipeline_alone_in_a_fresh_folder_runs_and_runs_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from runner.spec.loader import load_pipeline

    folder = tmp_path / "p"  # mkdir p && cd p, one pipeline.yml, clore-run run pipeline.yml
    folder.mkdir()
    monkeypatch.chdir(folder)
    (folder / "pipeline.yml").write_text("jobs:\n  a: {run: 'test -f pipeline.yml'}\n")
    for _ in range(2):  # the second time beside the first run's clore-run-results/
        pipeline = load_pipeline(Path("pipeline.yml"))
        options = RunOptions(out_dir=Path("clore-run-results"), workspace_root=folder)
        screen = io.StringIO()
        _, code = execute(pipeline, LocalBackend(), options, screen)
        assert code == 0
        # what the stage says in words (was "uploading copying the workspace")
        assert "[a] uploading the workspace (1 file, a local copy)" in screen.getvalue()
    (folder / "train.py").write_text("print(1)\n")  # a real folder: the protection holds
    with pytest.raises(SpecError, match="not in a git work tree"):
        execute(load_pipeline(Path("pipeline.yml")), LocalBackend(), options, io.StringIO())
