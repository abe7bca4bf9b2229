"""Money a person types: every flag, action input and API field that is an amount of US dollars
(a budget, a max price, a spend limit) is a `Usd`, so each is refused the same way.

A budget of nan compares false with every cost, so a run under it would rent with no limit at
all; inf is no limit said as a number; 0 or less can hold nothing, so it is a typo. Each is
refused where it is parsed, before anything is rented or asked of the API, in words that name
the flag (a flag parses its text with `usd_from_text`, runner/cli/options.py's `usd_option`, and
Typer shows the flag with the message; a pydantic field is a `Usd` and shows its key path).
"""

from __future__ import annotations

import math
from typing import Annotated

from pydantic import AfterValidator

EXAMPLE = "2.50"


def positive_usd(amount: float) -> float:
    """`amount` if it is a positive, finite number of US dollars, else ValueError saying so."""
    if not math.isfinite(amount) or amount <= 0:
        raise ValueError(f"{amount:g} is not a positive amount of USD (for example {EXAMPLE})")
    return amount


def usd_from_text(text: str | float) -> float:
    """A flag's or an action input's text as an amount of USD, or ValueError in words."""
    try:
        amount = float(text)
    except ValueError:
        raise ValueError(f"{text!r} is not an amount of USD (for example {EXAMPLE})") from None
    return positive_usd(amount)


# What a pydantic model (serve's API, the pipeline file) declares for an amount of USD.
Usd = Annotated[float, AfterValidator(positive_usd)]
