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
PATTERN = rf"^[A-Za-z0-9][A-Za-z0-9._-]{{0,{MAX_LENGTH - 1}}}$"
_NAME = re.compile(PATTERN)
RULE = (
    f"a trust domain is a name: 1 to {MAX_LENGTH} letters, digits, '.', '_' or '-', "
    "starting with a letter or digit, without '..'"
)

__all__ = [
    "DEFAULT_TRUST", "MAX_LENGTH", "PATTERN", "RULE", "fork_domain", "is_name", "repo_domain",
]  # fmt: skip


def is_name(value: str) -> bool:
    """Whether `value` may name a trust domain."""
    return _NAME.fullmatch(value) is not None and ".." not in value


def repo_domain(repository: str) -> str:
    """The domain of a repository's own runs (`owner/name` -> `repo-owner.name`): an owner has
    no '.', so the '/' becomes one without two repositories meeting in one name."""
    return "repo-" + repository.replace("/", ".")


def fork_domain(repository: str, number: int) -> str:
    """The domain of one pull request from a fork: that PR's alone, never shared."""
    return f"fork-pr-{repository.replace('/', '.')}-{number}"
