"""After a Clore run that exits 3, the hint under its last line fits the cause its jobs' lines
said (the reasons below are as the run words them)."""

from __future__ import annotations

import pytest

from runner.backends.clore import exit_hints
from runner.backends.clore.spec import SPEC

REFUSED = "the Clore API refused the key in CLORE_API_KEY (code 3: invalid API token)"
UNREACHABLE = (
    "Clore API (reading your fees): cannot reach http://127.0.0.1:9/v1: connection refused"
)
NO_FIT = "no offer fits 1x H100, on-demand, paid in CLORE-Blockchain; closest: #88028 ..."
BUDGET = "budget $0.10 would be exceeded by $0.1487: committed $0.00 + this rental's worst ..."
WALLET = "the USD-Blockchain wallet holds 0.5, and the first rental may cost up to 2 ..."


@pytest.mark.parametrize(
    ("reasons", "starts"),
    [
        ([REFUSED], "check CLORE_API_KEY: "),
        ([UNREACHABLE], "check the network, or CLORE_API_URL"),
        ([NO_FIT], "`clore-run offers` lists what fits"),
        ([BUDGET], "raise `budget:`"),
        ([WALLET], "top up that wallet"),
        (["server 7 stopped answering", NO_FIT], "`clore-run offers` lists what fits"),
        (["server 7 stopped answering"], "`clore-run doctor` checks"),
        ([], "`clore-run doctor` checks"),
    ],
)
def test_the_hint_fits_the_first_cause_it_knows(reasons: list[str], starts: str) -> None:
    assert exit_hints.exit_hint(reasons).startswith(starts)
    assert SPEC.exit_hint is not None and SPEC.exit_hint(reasons) == exit_hints.exit_hint(reasons)
