"""The self-hosted runners REST API, for one repository or organization.

`POST {scope}/actions/runners/generate-jitconfig` with `{name, runner_group_id, labels,
work_folder}` answers `201 {runner: {id, ...}, encoded_jit_config}`. `runner_group_id` is
mandatory (1 is a repository's default group). The encoded config is a credential: it lives in
a `JitConfig` whose repr hides it, and is registered with `runner.redact` the moment it arrives,
so that no report, log line or output can carry it.

Every error becomes words from `errors` (the status kept), never the library's text.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import requests

from runner import redact
from runner.errors import UsageError
from runner.gh_runner import errors as e
from runner.report.github_api import GitHubApi, GitHubError, RateLimited
from runner.transport_words import cause_in_words

DEFAULT_GROUP_ID = 1  # a repository's (and an organization's) "Default" runner group
WORK_FOLDER = "_work"


class JitConfig:
    """The encoded JIT configuration: a credential. `reveal()` only where it is sent on."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value
        redact.register(value)  # from now on no text we write can carry it

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "JitConfig(***)"

    __str__ = __repr__


@dataclass(frozen=True)
class Scope:
    """Where runners are registered: `repos/OWNER/NAME` or `orgs/ORG`."""

    path: str

    @classmethod
    def repo(cls, full_name: str) -> Scope:
        owner, _, name = full_name.strip().partition("/")
        if not owner or not name or "/" in name:
            raise UsageError(
                f"not a repository: {full_name!r}", "give OWNER/NAME, e.g. octo/gpu-lib"
            )
        return cls(f"repos/{owner}/{name}")

    @classmethod
    def org(cls, name: str) -> Scope:
        if not name.strip() or "/" in name:
            raise UsageError(f"not an organization: {name!r}", "give its login, e.g. octo")
        return cls(f"orgs/{name.strip()}")

    @property
    def words(self) -> str:
        kind, _, name = self.path.partition("/")
        return f"{'repository' if kind == 'repos' else 'organization'} {name}"


@dataclass(frozen=True)
class Registration:
    runner_id: int
    name: str
    jit_config: JitConfig


@dataclass(frozen=True)
class RunnerState:
    """A registered runner as the API lists it: `online`/`offline`, and whether it is busy."""

    runner_id: int
    name: str
    status: str
    busy: bool


class RunnerApi:
    """The runners endpoints of one scope, through the shared GitHub client."""

    def __init__(self, api: GitHubApi, scope: Scope) -> None:
        self.api = api
        self.scope = scope

    def generate_jitconfig(
        self, name: str, labels: list[str], group_id: int = DEFAULT_GROUP_ID
    ) -> Registration:
        body = {
            "name": name,
            "runner_group_id": group_id,
            "labels": labels,
            "work_folder": WORK_FOLDER,
        }
        reply = self._call("POST", "/actions/runners/generate-jitconfig", json=body, group=group_id)
        runner = reply.get("runner") if isinstance(reply, dict) else None
        encoded = reply.get("encoded_jit_config") if isinstance(reply, dict) else None
        if not isinstance(runner, dict) or not isinstance(encoded, str) or not encoded:
            raise e.RunnerApiError("GitHub's generate-jitconfig reply has no runner or config")
        config = JitConfig(encoded)
        runner_id = runner.get("id")
        if not isinstance(runner_id, int):
            raise e.RunnerApiError("GitHub's generate-jitconfig reply has no runner id")
        return Registration(runner_id, str(runner.get("name") or name), config)

    def get_runner(self, runner_id: int) -> RunnerState | None:
        """The runner, or None when it is not registered (a JIT runner removes itself after
        its one job)."""
        try:
            data = self._call("GET", f"/actions/runners/{runner_id}")
        except e.RunnerApiError as exc:
            if exc.status == 404:
                return None
            raise
        return RunnerState(
            runner_id,
            str(data.get("name") or ""),
            str(data.get("status") or ""),
            bool(data.get("busy")),
        )

    def delete_runner(self, runner_id: int) -> bool:
        """Remove the registration; False when it was already gone."""
        try:
            self._call("DELETE", f"/actions/runners/{runner_id}")
        except e.RunnerApiError as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def _call(self, method: str, path: str, group: int | None = None, **kwargs: Any) -> Any:
        try:
            resp = self.api.request(method, f"/{self.scope.path}{path}", **kwargs)
        except RateLimited as exc:
            raise e.RunnerApiError(
                f"GitHub rate limit on {self.scope.words}: {exc.message}", status=exc.status
            ) from None
        except GitHubError as exc:
            raise self._mapped(exc, group) from None
        except requests.RequestException as exc:
            raise e.GitHubUnreachable(  # in our words, never the exception's class name
                f"cannot reach the GitHub API at {self.api.base_url}: {cause_in_words(exc)}",
                "check the network, or GITHUB_API_URL",
            ) from None
        if resp.status_code == 204 or not resp.content:
            return {}
        try:
            return resp.json()
        except ValueError:
            raise e.RunnerApiError(f"GitHub answered {resp.status_code} with no JSON") from None

    def _mapped(self, exc: GitHubError, group: int | None) -> e.RunnerApiError:
        status, said = exc.status, _short(exc.message)
        where = self.scope.words
        if status == 422 and group is not None:
            return e.RunnerGroupError(
                f"GitHub refused the runner registration on {where} (422: {said})",
                "runner_group_id is required: 1 is the default group "
                "(--runner-group, or the action's `runner-group`)",
                status,
            )
        if group is not None and group != DEFAULT_GROUP_ID and status in (403, 404):
            return e.RunnerGroupError(
                f"runner group {group} is not one {where} can use ({status}: {said})",
                "give a group this repository may use (Settings > Actions > Runner groups), "
                "or 1 for the default group",
                status,
            )
        if status in (401, 403) or (status == 404 and self._is_whole_scope_missing(said)):
            return e.RunnerTokenError(
                f"this token cannot administer runners on {where} ({status}: {said})",
                e.TOKEN_HINT,
                status,
            )
        return e.RunnerApiError(f"GitHub API {status} on {where}: {said}", status=status)

    @staticmethod
    def _is_whole_scope_missing(message: str) -> bool:
        # GitHub hides what a token may not see behind 404 "Not Found"; on a runner id we
        # look up, 404 is just "gone", which callers handle before this is asked.
        return message.strip().lower() == "not found"


def _short(message: str) -> str:
    """GitHub's message, one line, bounded and without secrets (it is ours to print)."""
    line = " ".join(redact.text(message).split())
    return line[:200] or "no message"
