"""A fake GitHub REST API on pytest-httpserver: issue comments with real pagination."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

BOT = {"login": "github-actions[bot]", "type": "Bot"}
HUMAN = {"login": "octocat", "type": "User"}
COMMENT_LIMIT = 65_536


def reply(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(json.dumps(data), status, headers, content_type="application/json")


@dataclass
class FakeGitHub:
    """Comments of one repo's PRs; answers list (paginated), create and update like GitHub."""

    server: HTTPServer
    repo: str = "octo/gpu-lib"
    comments: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    pages_served: list[int] = field(default_factory=list)
    next_id: int = 1000
    post_status: int = 0  # non-zero: answer every POST/PATCH with this status
    user_status: int = 403  # GITHUB_TOKEN may not call GET /user
    routes: dict[str, Any] = field(default_factory=dict)  # more GET paths and their JSON
    seen: list[tuple[str, str, dict[str, str]]] = field(default_factory=list)  # method, path, args

    def __post_init__(self) -> None:
        self.server.expect_request(re.compile(r".*"), method="GET").respond_with_handler(self._get)
        self.server.expect_request(re.compile(r".*"), method="POST").respond_with_handler(
            self._post
        )
        self.server.expect_request(re.compile(r".*"), method="PATCH").respond_with_handler(
            self._patch
        )

    @property
    def api_url(self) -> str:
        return self.server.url_for("/api/v3")  # a GHES-like prefix: GITHUB_API_URL must be honoured

    def add(self, pr: int, body: str, user: dict[str, str] = BOT) -> dict[str, Any]:
        self.next_id += 1
        comment = {
            "id": self.next_id,
            "body": body,
            "user": user,
            "html_url": f"https://github.com/{self.repo}/pull/{pr}#issuecomment-{self.next_id}",
        }
        self.comments.setdefault(pr, []).append(comment)
        return comment

    def _get(self, request: Request) -> Response:
        path = request.path.removeprefix("/api/v3")
        self.seen.append(("GET", path, dict(request.args)))
        if path in self.routes:
            return reply(self.routes[path])
        if path == "/user":
            return reply({"message": "Resource not accessible by integration"}, self.user_status)
        match = re.fullmatch(rf"/repos/{self.repo}/issues/(\d+)/comments", path)
        if match:
            return self._list(request, int(match.group(1)))
        return reply({"message": "Not Found"}, 404)

    def _list(self, request: Request, pr: int) -> Response:
        per_page = int(request.args.get("per_page", 30))
        page = int(request.args.get("page", 1))
        self.pages_served.append(page)
        items = self.comments.get(pr, [])
        chunk = items[(page - 1) * per_page : page * per_page]
        headers = {}
        if page * per_page < len(items):
            base = request.base_url
            headers["Link"] = f'<{base}?per_page={per_page}&page={page + 1}>; rel="next"'
        return reply(chunk, headers=headers)

    def _post(self, request: Request) -> Response:
        if self.post_status:
            return reply({"message": "Resource not accessible by integration"}, self.post_status)
        match = re.fullmatch(rf"/api/v3/repos/{self.repo}/issues/(\d+)/comments", request.path)
        if not match:
            return reply({"message": "Not Found"}, 404)
        body = request.get_json()["body"]
        if len(body) > COMMENT_LIMIT:
            return reply({"message": "Validation Failed", "errors": ["Body is too long"]}, 422)
        return reply(self.add(int(match.group(1)), body), 201)

    def _patch(self, request: Request) -> Response:
        match = re.fullmatch(rf"/api/v3/repos/{self.repo}/issues/comments/(\d+)", request.path)
        if self.post_status or not match:
            return reply(
                {"message": "Resource not accessible by integration"}, self.post_status or 404
            )
        body = request.get_json()["body"]
        if len(body) > COMMENT_LIMIT:
            return reply({"message": "Validation Failed"}, 422)
        for comments in self.comments.values():
            for comment in comments:
                if comment["id"] == int(match.group(1)):
                    comment["body"] = body
                    return reply(comment)
        return reply({"message": "Not Found"}, 404)
