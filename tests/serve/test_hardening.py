"""What an unauthenticated or hostile client can do to `serve`: no 500 from any number, no body
read before the token, no socket held past a deadline, no docs without the token."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runner.serve.http_limits import uvicorn_limits
from tests.fakes.passing_backend import PassingBackend
from tests.serve.harness import TOKEN, ThreadServer, thread_server

NON_FINITE = ("NaN", "Infinity", "-Infinity", "1e999", "-1e999")


@pytest.fixture
def srv(tmp_path: Path) -> Iterator[ThreadServer]:
    with thread_server(
        tmp_path,
        backend=PassingBackend(),
        app_options={"body_timeout_s": 0.5},
        uvicorn_options=uvicorn_limits(header_timeout_s=0.5),
    ) as server:
        yield server


def _numbers(
    schema: dict[str, Any], spec: dict[str, Any], path: tuple[str, ...] = ()
) -> Iterator[tuple[str, ...]]:
    """Every key path under a JSON schema that takes a number (refs and unions followed)."""
    stack = [(schema, path, 0)]
    while stack:
        node, where, depth = stack.pop()
        if "$ref" in node:
            name = node["$ref"].rsplit("/", 1)[1]
            node = spec["components"]["schemas"][name]
        if depth > 6:
            continue
        if node.get("type") in ("number", "integer"):
            yield where
        for option in node.get("anyOf", []) + node.get("oneOf", []) + node.get("allOf", []):
            stack.append((option, where, depth + 1))
        for key, sub in node.get("properties", {}).items():
            stack.append((sub, (*where, key), depth + 1))


def _body_with(where: tuple[str, ...], literal: str) -> str:
    """A JSON text with `literal` (not valid JSON, as Python writes it) at `where`."""
    body: dict[str, Any] = {"run": "true"}
    node = body
    for key in where[:-1]:
        node = node.setdefault(key, {})
    node[where[-1]] = "@@"
    return json.dumps(body).replace('"@@"', literal)


@pytest.mark.slow
def test_no_non_finite_number_anywhere_in_a_job_gets_a_500(srv: ThreadServer) -> None:
    spec = srv.api.get("/openapi.json").json()
    schema = spec["paths"]["/jobs"]["post"]["requestBody"]["content"]["application/json"]
    paths = sorted(set(_numbers(schema["schema"], spec)))
    assert ("timeout-minutes",) in paths and ("gpu", "max-price") in paths
    for where in paths:
        for literal in NON_FINITE:
            reply = srv.api.request(
                "POST",
                "/jobs",
                data=_body_with(where, literal),
                headers={"Content-Type": "application/json"},
            )
            assert reply.status_code == 422, (where, literal, reply.text)
            assert reply.json()["detail"][0]["loc"][-1] == where[-1]


def _raw(srv: ThreadServer) -> socket.socket:
    host, port = srv.api.url.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=10)


def _read_all(sock: socket.socket) -> bytes:
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def test_a_body_is_not_read_before_the_token(srv: ThreadServer) -> None:
    with _raw(srv) as sock:
        sock.sendall(
            b"POST /jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: 1048576\r\n\r\n"
        )  # the 1 MiB body is never sent: the answer must not wait for it
        reply = _read_all(sock)
    assert reply.startswith(b"HTTP/1.1 401 ")
    assert b"connection: close" in reply.lower()


@pytest.mark.slow
def test_docs_and_the_openapi_spec_need_the_token(srv: ThreadServer) -> None:
    import requests

    for path in ("/docs", "/openapi.json", "/redoc"):  # /docs, /redoc: off unless asked for
        assert requests.get(srv.api.url + path, timeout=10).status_code == 401, path
    assert srv.api.get("/openapi.json").status_code == 200
    assert requests.get(srv.api.url + "/healthz", timeout=10).status_code == 200


@pytest.mark.slow
def test_a_client_trickling_its_headers_is_cut_off(srv: ThreadServer) -> None:
    with _raw(srv) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")  # and never the blank line
        assert _read_all(sock) == b""  # closed by the server at its header deadline


@pytest.mark.slow
def test_a_body_that_does_not_arrive_in_time_gets_408(srv: ThreadServer) -> None:
    with _raw(srv) as sock:
        sock.sendall(
            f"POST /jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
            'Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"run"'.encode()
        )
        reply = _read_all(sock)
    assert reply.startswith(b"HTTP/1.1 408 ")


@pytest.mark.slow
def test_an_idle_kept_alive_connection_after_a_reply_is_cut_off_too(srv: ThreadServer) -> None:
    with _raw(srv) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        first = b""
        while not first.endswith(b'{"status":"ok"}'):
            first += sock.recv(65536)
        assert first.startswith(b"HTTP/1.1 200 ")
        sock.sendall(b"GET /healthz HTTP/1.1\r\n")  # a second request, trickled
        assert _read_all(sock) == b""
