#!/usr/bin/env bash
# Installs and starts one just-in-time GitHub Actions runner on a rented server.
# Sent over SSH as a file and run as `bash install.sh DIR`; everything it needs is in DIR:
#   DIR/params     KEY=VALUE lines: url, sha256, limit_s, user (no secret in it)
#   DIR/.jitconfig the encoded JIT config (mode 0600): a credential, never an argument
#   DIR/runner.tar.gz the runner package, sent over SSH (downloaded here only when absent)
# It checks the package's SHA-256, starts `run.sh` in the background
# (detached from the SSH session) and returns. The JIT config reaches the runner through
# ACTIONS_RUNNER_INPUT_JITCONFIG, which the runner reads and removes from its environment:
# never through `--jitconfig`, which any process on the server could read in /proc.
# `timeout` ends the runner at the rental's cap (max-minutes) even if nobody stops it.
set -euo pipefail
umask 077

dir=$1
cd "$dir"
url='' sha256='' limit_s='' user='root'
while IFS='=' read -r key value; do
    case "$key" in
    url) url=$value ;;
    sha256) sha256=$value ;;
    limit_s) limit_s=$value ;;
    user) user=$value ;;
    esac
done <params

fail() {
    echo "install: $*" >&2
    exit 4
}
[[ -s .jitconfig ]] || fail "no JIT config in $dir"
[[ "$limit_s" =~ ^[0-9]+$ && "$limit_s" -gt 0 ]] || fail "the rental's cap has passed"

# The package normally comes over the SSH connection (runner.tar.gz beside this script): the
# image then needs no download tool. Only a caller that sent none makes the server fetch it.
if [[ -s runner.tar.gz ]]; then
    :
elif command -v curl >/dev/null 2>&1; then
    curl -fsSL --retry 3 -o runner.tar.gz "$url" || fail "download failed: $url"
elif command -v wget >/dev/null 2>&1; then
    wget -q -O runner.tar.gz "$url" || fail "download failed: $url"
else
    fail "the image has neither curl nor wget to fetch the runner"
fi
if [[ -n "$sha256" ]]; then
    echo "$sha256  runner.tar.gz" | sha256sum -c --status || fail "SHA-256 mismatch for $url"
fi
mkdir -p runner
tar -xzf runner.tar.gz -C runner || fail "cannot unpack $url"
rm -f runner.tar.gz

# A non-root user when the image can make one and has sudo (jobs expect passwordless sudo, as on
# GitHub's runners: without it `apt-get` in a job would fail); otherwise root, which the runner
# refuses without RUNNER_ALLOW_RUNASROOT. A non-root runner lives in its own home: root's
# (where this folder is) is not open to it.
sudoers=${CLORE_RUNNER_SUDOERS_DIR:-/etc/sudoers.d} # a test seam; the server's own otherwise
if [[ "$user" == auto ]]; then
    if [[ "$(id -u)" != 0 ]]; then
        user=$(id -un)
    elif command -v useradd >/dev/null 2>&1 && command -v sudo >/dev/null 2>&1; then
        user=runner
    else
        user=root
    fi
fi
run_as=()
runner_dir="$dir/runner"
if [[ "$user" == root || "$(id -u)" != 0 ]]; then
    export RUNNER_ALLOW_RUNASROOT=1
else
    id -u "$user" >/dev/null 2>&1 || useradd --create-home --shell /bin/bash "$user"
    if [[ -d "$sudoers" ]]; then
        echo "$user ALL=(ALL) NOPASSWD:ALL" >"$sudoers/clore-runner"
        chmod 0440 "$sudoers/clore-runner"
    fi
    home=$(getent passwd "$user" | cut -d: -f6)
    [[ -n "$home" && -d "$home" ]] || fail "user $user has no home folder"
    runner_dir="$home/clore-runner/${dir##*/}"
    mkdir -p "$runner_dir"
    rm -rf "$runner_dir/runner"
    mv runner "$runner_dir/"
    runner_dir="$runner_dir/runner"
    chown -R "$user" "$home/clore-runner"
    run_as=(runuser -u "$user" --)
fi
if [[ "$(id -u)" == 0 && -x "$runner_dir/bin/installdependencies.sh" ]]; then
    "$runner_dir/bin/installdependencies.sh" >install-deps.log 2>&1 ||
        echo "install: dependencies: see $dir/install-deps.log" >&2
fi

# The config goes beside the runner (0600, the runner user's) and is read there by the last
# shell before run.sh, which then execs run.sh: setsid, runuser and timeout, which live as long
# as the runner, never have it in their environment (/proc/PID/environ keeps a process's
# first environment for its life, readable by its user: a job's steps). The runner itself must
# get it through its environment (its only other way is an argument, readable by anyone); it
# is spent at the runner's first connection (a JIT config is good for one session).
mv .jitconfig "$runner_dir/.jitconfig"
if ((${#run_as[@]})); then chown "$user" "$runner_dir/.jitconfig"; fi
cd "$runner_dir"
# shellcheck disable=SC2016 # expanded by the inner shell, not this one
start='IFS= read -r ACTIONS_RUNNER_INPUT_JITCONFIG <.jitconfig || true
rm -f .jitconfig
export ACTIONS_RUNNER_INPUT_JITCONFIG
exec ./run.sh'
setsid "${run_as[@]}" timeout -k 30 "$limit_s" bash -c "$start" >"$dir/runner.log" 2>&1 </dev/null &
echo "$!" >"$dir/runner.pid"
echo "install: runner started as $user, stopped after $limit_s s at the latest"
