"""What to do after a Clore run that exits 3, by why its errored jobs could not run.

Each job's line has said the cause; the run's last line (`clore-run: exit 3: ...`) is followed
by one hint, the first that fits a cause here, else a pointer to `doctor` and `offers`. The
exception that carried a cause had its hint, but a job's result keeps only the reason.
"""

from __future__ import annotations

from collections.abc import Sequence

from runner.backends.clore import errors as e

DOCTOR = (
    "`clore-run doctor` checks the key, the wallet and the API; `clore-run offers` lists what fits"
)
# (a piece of the reason that names the cause, what to do about it)
BY_CAUSE = (
    (e.REFUSED_KEY, e.HINTS[e.InvalidTokenError]),
    (": cannot reach ", "check the network, or CLORE_API_URL"),
    ("no offer fits ", "`clore-run offers` lists what fits: widen the job's `gpu:` or its price"),
    (" wallet holds ", "top up that wallet on clore.ai, or pay in another `currency:`"),
    (
        " would be exceeded by ",
        "raise `budget:` (or --budget), or lower the jobs' `timeout-minutes`: the budget "
        "holds each rental's worst case",
    ),
)


def exit_hint(reasons: Sequence[str]) -> str:
    """The hint for the first errored job's cause this knows, in the jobs' order."""
    for reason in reasons:
        for said, hint in BY_CAUSE:
            if said in reason:
                return hint
    return DOCTOR
