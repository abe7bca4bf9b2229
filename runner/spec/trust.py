"""A submission's trust domain: a name, checked the same way by the client and the server.

Servers are reused only within one domain, so the name is a key people read in a CLI, a log
and the dashboard. It is held to letters, digits and `._-`, starting with a letter or digit,
at most MAX_LENGTH characters, and never `..`: nothing in it can be a path, markup, a control
sequence or a workflow command, wherever it is shown or written.
"""

from __future__ import annotations

import re

from runner.core.model import DEFAULT_TRUST

MAX_LENGTH = 200  # `fork-pr-` + a 39-character owner + `.` + a 100-character repository + a number
# A dot is followed by a letter, digit, '_' or '-' (or ends the name), so '..' cannot occur: the
# rule is in the pattern itself, which the API document publishes, and a client that checks
# names by the document refuses what the server refuses (no lookahead: JSON Schema's regex
# dialects do not all have it). The length is MAX_LENGTH, checked beside the pattern.
PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_-]*(\.[A-Za-z0-9_-]+)*\.?$"
_NAME = re.compile(PATTERN)
HINT = "e.g. repo-acme.models or team-ml; leave it out for the default domain"
RULE = (
    f"a trust domain is a name: 1 to {MAX_LENGTH} letters, digits, '.', '_' or '-', "
    "starting with a letter or digit, without '..'"
)

__all__ = [
    "DEFAULT_TRUST", "HINT", "MAX_LENGTH", "PATTERN", "RULE",
    "fork_domain", "is_name", "repo_domain",
]  # fmt: skip


def is_name(value: str) -> bool:
    """Whether `value` may name a trust domain."""
    return len(value) <= MAX_LENGTH and _NAME.fullmatch(value) is not None


def repo_domain(repository: str) -> str:
    """The domain of a repository's own runs (`owner/name` -> `repo-owner.name`): an owner has
    no '.', so the '/' becomes one without two repositories meeting in one name."""
    return "repo-" + repository.replace("/", ".")


def fork_domain(repository: str, number: int) -> str:
    """The domain of one pull request from a fork: that PR's alone, never shared."""
    return f"fork-pr-{repository.replace('/', '.')}-{number}"
