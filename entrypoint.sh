#!/usr/bin/env bash
# The action's run step: the inputs (as environment variables, set in action.yml) become one
# `clore-run` call. An empty variable means "not given": clore-run's own default applies.
#
#   INPUT_MODE         run (default) | submit | runner-start | runner-stop: which command
#   mode run:
#   INPUT_PIPELINE     the pipeline file (required)
#   INPUT_BACKEND      --backend NAME (runner/backends/registry.py)
#   INPUT_CONCURRENCY  --concurrency N
#   INPUT_BUDGET       --budget USD (runner-start too)
#   INPUT_JOBS         --job NAME for each name (separated by spaces, commas or newlines)
#   INPUT_OUT          --out DIR
#   INPUT_BASELINE     --baseline SUMMARY.json
#   INPUT_POOL         --pool NAME (runner-start too)
#   CLORE_RUN_LEDGER   --ledger FILE (the always-run cleanup step reads the same file); not
#                      with a coordinator, which holds the ledger itself (runner-start too)
#   mode submit (`clore-run submit --wait --logs`):
#   INPUT_PIPELINE     the pipeline file (required)
#   INPUT_SERVER       --server URL (required)
#   INPUT_TRUST        --trust NAME
#   INPUT_OUT          --out DIR
#   CLORE_RUN_TOKEN    read by clore-run itself (the server's token); masked here
#   mode runner-start (`clore-run runner start`):
#   INPUT_GPU, INPUT_GPU_COUNT, INPUT_MAX_PRICE, INPUT_IMAGE, INPUT_MAX_MINUTES, INPUT_RUNNERS,
#   INPUT_CURRENCY, INPUT_RUNNER_GROUP   --gpu, --gpu-count, --max-price, --image,
#                      --max-minutes, --runners, --currency, --runner-group
#   INPUT_SPOT         true: --spot
#   CLORE_RUNNER_RECORD_FILE  --record-file (the record the next step uploads)
#   mode runner-stop (`clore-run runner stop`):
#   INPUT_RUNNER_RECORD       --record-json (the start job's output `record`)
#   INPUT_COMMENT, INPUT_COMMENT_HEADER  --comment, --comment-header (the runners' section)
#   CLORE_RUNNER_TOKEN   read by clore-run itself (registers and removes runners); masked here
#   CLORE_GITHUB_TOKEN   read by clore-run itself (the PR comment's section); masked here
#   CLORE_RUN_COORDINATOR  read by clore-run itself (the shared PostgreSQL); masked here
#   CLORE_API_KEY      read by clore-run itself; masked here before anything can print it
#   CLORE_RUN_VENV     where action.yml installed clore-run (default $RUNNER_TEMP/clore-run-venv);
#                      without one there, the clore-run on PATH
#
# No other logic. `exec` makes clore-run the step's process (action.yml execs this script), so
# the SIGINT the runner sends on cancel reaches Python, which cancels the jobs (or the runner
# rentals being set up) and releases every rented server within the runner's 7.5 s grace.
set -euo pipefail

if [[ -n "${CLORE_API_KEY:-}" ]]; then
    echo "::add-mask::$CLORE_API_KEY"
fi

for secret in "${CLORE_RUN_COORDINATOR:-}" "${CLORE_RUNNER_TOKEN:-}" "${CLORE_GITHUB_TOKEN:-}" \
    "${CLORE_RUN_TOKEN:-}"; do
    [[ -z "$secret" ]] || echo "::add-mask::$secret"
done

ledger=()
if [[ -z "${CLORE_RUN_COORDINATOR:-}" && -n "${CLORE_RUN_LEDGER:-}" ]]; then
    ledger=(--ledger "$CLORE_RUN_LEDGER")
fi

case "${INPUT_MODE:-run}" in
run)
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
    args+=(${ledger[@]+"${ledger[@]}"}) # `+`: bash 3.2 (macOS) calls an empty array unset
    names="${INPUT_JOBS:-}"
    names="${names//,/ }"
    read -r -a jobs <<<"${names//$'\n'/ }"
    for name in "${jobs[@]:-}"; do # `:-`: bash 3.2 (macOS) calls an empty array unset
        [[ -z "$name" ]] || args+=(--job "$name")
    done
    ;;
submit)
    if [[ -z "${INPUT_PIPELINE:-}" ]]; then
        echo "::error title=clore-run::the input 'pipeline' is required: the pipeline file to submit"
        exit 2
    fi
    if [[ -z "${INPUT_SERVER:-}" ]]; then
        echo "::error title=clore-run::the input 'server' is required with mode submit: the URL of your clore-run serve"
        exit 2
    fi
    args=(submit "$INPUT_PIPELINE" --wait --logs --server "$INPUT_SERVER")
    [[ -z "${INPUT_TRUST:-}" ]] || args+=(--trust "$INPUT_TRUST")
    [[ -z "${INPUT_OUT:-}" ]] || args+=(--out "$INPUT_OUT")
    ;;
runner-start)
    args=(runner start)
    [[ -z "${INPUT_GPU:-}" ]] || args+=(--gpu "$INPUT_GPU")
    [[ -z "${INPUT_GPU_COUNT:-}" ]] || args+=(--gpu-count "$INPUT_GPU_COUNT")
    [[ -z "${INPUT_MAX_PRICE:-}" ]] || args+=(--max-price "$INPUT_MAX_PRICE")
    [[ "${INPUT_SPOT:-}" != true ]] || args+=(--spot)
    [[ -z "${INPUT_IMAGE:-}" ]] || args+=(--image "$INPUT_IMAGE")
    [[ -z "${INPUT_MAX_MINUTES:-}" ]] || args+=(--max-minutes "$INPUT_MAX_MINUTES")
    [[ -z "${INPUT_RUNNERS:-}" ]] || args+=(--runners "$INPUT_RUNNERS")
    [[ -z "${INPUT_CURRENCY:-}" ]] || args+=(--currency "$INPUT_CURRENCY")
    [[ -z "${INPUT_BUDGET:-}" ]] || args+=(--budget "$INPUT_BUDGET")
    [[ -z "${INPUT_POOL:-}" ]] || args+=(--pool "$INPUT_POOL")
    [[ -z "${INPUT_RUNNER_GROUP:-}" ]] || args+=(--runner-group "$INPUT_RUNNER_GROUP")
    [[ -z "${CLORE_RUNNER_RECORD_FILE:-}" ]] || args+=(--record-file "$CLORE_RUNNER_RECORD_FILE")
    args+=(${ledger[@]+"${ledger[@]}"})
    ;;
runner-stop)
    args=(runner stop --record-json "${INPUT_RUNNER_RECORD:-}")
    [[ -z "${INPUT_COMMENT:-}" ]] || args+=(--comment "$INPUT_COMMENT")
    [[ -z "${INPUT_COMMENT_HEADER:-}" ]] || args+=(--comment-header "$INPUT_COMMENT_HEADER")
    ;;
*)
    echo "::error title=clore-run::the input 'mode' must be run, submit, runner-start or runner-stop"
    exit 2
    ;;
esac

venv="${CLORE_RUN_VENV:-${RUNNER_TEMP:-/nonexistent}/clore-run-venv}"
if [[ -x "$venv/bin/clore-run" ]]; then
    exec "$venv/bin/clore-run" "${args[@]}"
fi
exec clore-run "${args[@]}"
