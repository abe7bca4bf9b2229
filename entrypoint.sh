#!/usr/bin/env bash
# The action's run step: the inputs (as environment variables, set in action.yml) become one
# `clore-run run` call. An empty variable means "not given": clore-run's own default applies.
#
#   INPUT_PIPELINE     the pipeline file (required)
#   INPUT_BACKEND      --backend NAME (runner/backends/registry.py)
#   INPUT_CONCURRENCY  --concurrency N
#   INPUT_BUDGET       --budget USD
#   INPUT_JOBS         --job NAME for each name (separated by spaces, commas or newlines)
#   INPUT_OUT          --out DIR
#   INPUT_BASELINE     --baseline SUMMARY.json
#   INPUT_POOL         --pool NAME
#   CLORE_RUN_LEDGER   --ledger FILE (the always-run cleanup step reads the same file); not
#                      with a coordinator, which holds the ledger itself
#   CLORE_RUN_COORDINATOR  read by clore-run itself (the shared PostgreSQL); masked here
#   CLORE_API_KEY      read by clore-run itself; masked here before anything can print it
#   CLORE_RUN_VENV     where action.yml installed clore-run (default $RUNNER_TEMP/clore-run-venv);
#                      without one there, the clore-run on PATH
#
# No other logic. `exec` makes clore-run the step's process (action.yml execs this script), so
# the SIGINT the runner sends on cancel reaches Python, which cancels the jobs and releases
# every rented server within the runner's 7.5 s grace.
set -euo pipefail

if [[ -n "${CLORE_API_KEY:-}" ]]; then
    echo "::add-mask::$CLORE_API_KEY"
fi

if [[ -n "${CLORE_RUN_COORDINATOR:-}" ]]; then
    echo "::add-mask::$CLORE_RUN_COORDINATOR"
fi

if [[ -z "${INPUT_PIPELINE:-}" ]]; then
    echo "::error title=clore-run::the input 'pipeline' is required: the pipeline file to run"
    exit 2
fi
args=(run "$INPUT_PIPELINE")
[[ -z "${INPUT_BACKEND:-}" ]] || args+=(--backend "$INPUT_BACKEND")
[[ -z "${INPUT_CONCURRENCY:-}" ]] || args+=(--concurrency "$INPUT_CONCURRENCY")
[[ -z "${INPUT_BUDGET:-}" ]] || args+=(--budget "$INPUT_BUDGET")
[[ -z "${INPUT_OUT:-}" ]] || args+=(--out "$INPUT_OUT")
[[ -z "${INPUT_BASELINE:-}" ]] || args+=(--baseline "$INPUT_BASELINE")
[[ -z "${INPUT_POOL:-}" ]] || args+=(--pool "$INPUT_POOL")
if [[ -z "${CLORE_RUN_COORDINATOR:-}" && -n "${CLORE_RUN_LEDGER:-}" ]]; then
    args+=(--ledger "$CLORE_RUN_LEDGER")
fi

names="${INPUT_JOBS:-}"
names="${names//,/ }"
read -r -a jobs <<<"${names//$'\n'/ }"
for name in "${jobs[@]:-}"; do # `:-`: bash 3.2 (macOS) calls an empty array unset
    [[ -z "$name" ]] || args+=(--job "$name")
done

venv="${CLORE_RUN_VENV:-${RUNNER_TEMP:-/nonexistent}/clore-run-venv}"
if [[ -x "$venv/bin/clore-run" ]]; then
    exec "$venv/bin/clore-run" "${args[@]}"
fi
exec clore-run "${args[@]}"
