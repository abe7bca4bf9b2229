"""The clean handover between two jobs on one server (a queue's servers are reused).

After a job's attempt, on the server it ran on, over the open SSH connection:

- its processes are killed: every process whose environment names both that job
  (`CLORE_RUN_JOB`) and this queue instance (its token): one the job left behind in the
  background, detached or daemonized, carries both. Nothing else is touched, so a host shared
  with other work (or other instances) loses nothing of theirs;
- its folder (workspace, script, artifacts, and the TMPDIR each job is given inside it) must
  be gone: the attempt removed it, this checks that, and removes what is left;
- the GPU must be free: `nvidia-smi`, where present, lists no compute process.

What is left after that is the handover's verdict: a server that fails it goes back, never
reused (runner/core/fleet.py excludes a lost server's host). Files a job wrote outside its
folder (/tmp by name, $HOME) are not removed: the trust domain rule keeps them from every
other domain, and docs/serve.md says so.
"""

from __future__ import annotations

import re
import shlex

from runner.backends.ssh.connection import SshConnection
from runner.errors import InfrastructureError

HANDOVER_TIMEOUT_S = 30.0
_NAME = re.compile(r"[^A-Za-z0-9_.-]")

# Fixed text; the two values are passed as positional arguments, quoted.
_SCRIPT = r"""set -u
job="$1"; mark="$2"; name="$3"; me=$$
ours() {
  # One grep over every environment (NUL-separated lines, whole-line match); per process
  # where grep has no -z.
  if printf 'z\0' | grep -qzx z 2>/dev/null; then
    found=$(grep -lzxF -- "CLORE_RUN_JOB=$job" /proc/[0-9]*/environ 2>/dev/null)
  else
    found=$(for e in /proc/[0-9]*/environ; do
      tr '\0' '\n' < "$e" 2>/dev/null | grep -qxF "CLORE_RUN_JOB=$job" && echo "$e"
    done)
  fi
  for e in $found; do
    p=${e#/proc/}; p=${p%/environ}
    [ "$p" = "$me" ] && continue
    tr '\0' '\n' < "$e" 2>/dev/null | grep -qxF -- "$mark" && echo "$p"
  done
}
for p in $(ours); do kill -KILL "$p" 2>/dev/null; done
i=0
while [ -n "$(ours)" ] && [ "$i" -lt 20 ]; do sleep 0.1; i=$((i+1)); done
for p in $(ours); do echo "process left: $p $(cat /proc/$p/comm 2>/dev/null)"; done
root="${HOME:-/tmp}/.clore-run/jobs"
for d in "$root/$name".*; do
  [ -e "$d" ] || continue
  rm -rf -- "$d" 2>/dev/null
  [ -e "$d" ] && echo "folder left: $d"
done
if command -v nvidia-smi >/dev/null 2>&1; then
  apps=$(nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader 2>&1) \
    || echo "nvidia-smi failed: $apps"
  [ -n "$apps" ] && printf 'GPU in use: %s\n' "$apps" | head -5
fi
exit 0
"""


def hand_over(conn: SshConnection, job_id: str, instance_mark: str) -> str:
    """Clean up after `job_id` and check the server is clean: "" when it is, else what is
    left, on one line (a server's words, shown escaped wherever they are shown)."""
    name = _NAME.sub("_", job_id)[:60] or "job"
    args = " ".join(shlex.quote(a) for a in (job_id, instance_mark, name))
    command = f"bash -c {shlex.quote(_SCRIPT)} handover {args}"
    try:
        done = conn.run(command, timeout_s=HANDOVER_TIMEOUT_S)
    except InfrastructureError as exc:
        return f"the handover check could not run: {exc}"
    left = done.stdout.decode("utf-8", "replace").strip()
    if done.exit_code != 0 and not left:
        left = f"the handover check exited {done.exit_code}"
    return "; ".join(line.strip() for line in left.splitlines() if line.strip())[:500]
