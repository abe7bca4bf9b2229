"""What a person reads when registering or removing a runner fails.

```
InfrastructureError (runner.errors, exit 3)
 └─ RunnerApiError             GitHub answered with an error we have no better words for
     ├─ RunnerTokenError       the token cannot administer runners (401, 403)
     ├─ RunnerGroupError       no runner group given (422), or one this scope cannot use
     └─ GitHubUnreachable      no answer at all (DNS, refused, timeout)
```
(A record that does not parse is runner.backends.runner_record.RecordError, exit 2.)
"""

from __future__ import annotations

from runner.errors import InfrastructureError

TOKEN_HINT = (
    "use a fine-grained token with the 'Administration: write' repository permission "
    "(for an organization's runners, 'Self-hosted runners: write' on the organization) or a "
    "GitHub App token; the workflow's GITHUB_TOKEN cannot"
)


class RunnerApiError(InfrastructureError):
    """The runners API refused a call (its status and GitHub's own message are kept)."""

    def __init__(self, message: str, hint: str = "", status: int | None = None) -> None:
        super().__init__(message, hint)
        self.status = status


class RunnerTokenError(RunnerApiError):
    """The token is not allowed to administer self-hosted runners."""


class RunnerGroupError(RunnerApiError):
    """The runner group is missing, or not one this repository or organization can use."""


class GitHubUnreachable(RunnerApiError):
    """No reply from the GitHub API."""
