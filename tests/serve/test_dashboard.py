"""The dashboard over HTTP, without a browser: the login and its cookie, CSRF on the actions,
the security headers, escaping, server-side paging and filtering, the log in ranges."""

from __future__ import annotations

import dataclasses
import http.client
import re
import urllib.parse
from http.cookies import SimpleCookie
from pathlib import Path
from typing import Any

import pytest
import requests

from runner.backends.base import Place
from runner.backends.local import LocalBackend
from runner.core.model import Job
from runner.serve.dashboard.pictures import dag, timeline
from runner.serve.dashboard.session import COOKIE, SESSION_S, Sessions
from runner.serve.dashboard.throttle import FREE_TRIES
from runner.stores.queue import JobMatch
from runner.stores.queue.sqlite import SqliteQueue
from tests.fakes.fake_clock import FakeClock
from tests.serve.harness import FINAL, TOKEN, thread_server, wait_until

PAGES = ("/", "/ui/jobs/s1.a", "/ui/submissions/1", "/ui/spend")
FRAGMENTS = ("/ui/queue/rows", "/ui/jobs/s1.a/panel", "/ui/jobs/s1.a/log?tail=10")


def logged_in(url: str) -> requests.Session:
    browser = requests.Session()
    reply = browser.post(f"{url}/login", data={"token": TOKEN}, allow_redirects=False)
    assert reply.status_code == 303, reply.text
    return browser


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf" value="([0-9a-f]+)"', html)
    assert found, "no CSRF field on the page"
    return found.group(1)


def gated(name: str, gate: Path) -> str:
    return f"  {name}:\n    run: while [ ! -e {gate} ]; do sleep 0.02; done\n"


@pytest.mark.slow
def test_login_sets_a_strict_httponly_cookie_and_pages_need_it(tmp_path: Path) -> None:
    with thread_server(tmp_path) as srv:
        srv.api.submit("jobs:\n  a:\n    run: echo a\n")
        url = srv.api.url
        anonymous = requests.Session()
        for path in PAGES:
            reply = anonymous.get(url + path, allow_redirects=False)
            assert reply.status_code == 303, path
            assert reply.headers["location"].startswith("/login?next=")
        for path in FRAGMENTS:  # a page script's fetch is told, and sends the browser itself
            assert anonymous.get(url + path, allow_redirects=False).status_code == 401, path

        wrong = anonymous.post(f"{url}/login", data={"token": "x" * 40}, allow_redirects=False)
        assert wrong.status_code == 401 and COOKIE not in wrong.cookies
        # The token is a form field only: on the URL it is ignored, never a way in.
        assert anonymous.get(f"{url}/login?token={TOKEN}", allow_redirects=False).status_code == 200
        assert anonymous.get(f"{url}/?token={TOKEN}", allow_redirects=False).status_code == 303

        reply = anonymous.post(
            f"{url}/login", data={"token": TOKEN, "next": "/ui/spend"}, allow_redirects=False
        )
        assert reply.status_code == 303 and reply.headers["location"] == "/ui/spend"
        cookie = SimpleCookie(reply.headers["set-cookie"])[COOKIE]
        assert cookie["httponly"] and cookie["samesite"].lower() == "strict"
        assert cookie["path"] == "/" and TOKEN not in cookie.value
        assert TOKEN not in reply.headers["location"]
        for path in (*PAGES, *FRAGMENTS):
            assert anonymous.get(url + path, allow_redirects=False).status_code == 200, path

        # The API still wants its bearer token: the cookie does not open it.
        assert anonymous.get(f"{url}/jobs").status_code == 401


# Each sends a browser to another origin if taken as it is: browsers drop tabs and newlines
# inside a URL, read a backslash as a slash and trim leading spaces and controls.
OFF_ORIGIN = [
    "//evil.example/",
    "https://evil.example/",
    "/\\evil",
    "x",
    "/\t/127.0.0.2:18200/x",
    "/\n/evil.example/",
    "/\r\n/evil.example/",
    " //evil.example/",
    "/\x00/evil.example/",
    "\t//evil.example/",
    "/\u3000/evil.example/",
    "javascript:alert(1)",
]


@pytest.mark.slow
@pytest.mark.parametrize("target", OFF_ORIGIN)
def test_the_login_sends_back_only_to_a_path_here(tmp_path: Path, target: str) -> None:
    with thread_server(tmp_path) as srv:
        reply = requests.post(
            f"{srv.api.url}/login", data={"token": TOKEN, "next": target}, allow_redirects=False
        )
        assert reply.headers["location"] == "/"


@pytest.mark.slow
def test_a_logged_in_login_link_redirects_only_to_a_path_here(tmp_path: Path) -> None:
    """The attack found: a logged-in browser following `/login?next=/%09/HOST/x` (issue 25)."""
    with thread_server(tmp_path) as srv:
        browser = logged_in(srv.api.url)
        for target in OFF_ORIGIN:
            query = requests.compat.urlencode({"next": target})
            reply = browser.get(f"{srv.api.url}/login?{query}", allow_redirects=False)
            assert (reply.status_code, reply.headers["location"]) == (303, "/"), target
        # A page asked for before logging in is where the login sends back, even one whose
        # path needs quoting.
        anonymous = requests.get(f"{srv.api.url}/ui/jobs/s9.a%20b%C3%A9", allow_redirects=False)
        back = urllib.parse.parse_qs(anonymous.headers["location"].split("?", 1)[1])["next"][0]
        after = requests.post(
            f"{srv.api.url}/login", data={"token": TOKEN, "next": back}, allow_redirects=False
        )
        assert after.headers["location"] == "/ui/jobs/s9.a%20b%C3%A9"
        raw = browser.get(f"{srv.api.url}/login?next=/%09/127.0.0.2:18200/x", allow_redirects=False)
        assert raw.headers["location"] == "/"
        here = browser.get(f"{srv.api.url}/login?next=/ui/spend%3Fx%3D1", allow_redirects=False)
        assert here.headers["location"] == "/ui/spend?x=1"


def test_a_forged_expired_or_logged_out_cookie_is_refused() -> None:
    clock = FakeClock()
    sessions = Sessions("a-token-of-sixteen+", clock)
    cookie, session = sessions.issue()
    assert sessions.check(cookie) == session
    expires, nonce, mac = cookie.split(".")
    assert sessions.check(f"{int(expires) + 3600}.{nonce}.{mac}") is None  # extended by hand
    assert sessions.check(f"{expires}.{nonce}.{'0' * len(mac)}") is None
    assert Sessions("another-token-of-16", clock).check(cookie) is None  # the token changed
    assert sessions.check("garbage") is None and sessions.check(None) is None
    clock.unix += SESSION_S + 1
    assert sessions.check(cookie) is None
    fresh, fresh_session = sessions.issue()
    sessions.end(fresh_session)
    assert sessions.check(fresh) is None  # a copy kept after logging out no longer works


def _login_from(url: str, source: str, token: str) -> int:
    """POST /login from the loopback address `source`; its status."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=10, source_address=(source, 0))
    try:
        body = urllib.parse.urlencode({"token": token})
        headers = {"Content-Type": "application/x-www-form-urlencoded"}
        conn.request("POST", "/login", body, headers)
        return conn.getresponse().status
    finally:
        conn.close()


@pytest.mark.slow
def test_wrong_logins_are_slowed_per_address(tmp_path: Path) -> None:
    """Issue 25: 300 wrong logins at ~85/s were all checked. Now, after a few, an address
    waits (doubling) before its next try is even looked at; other addresses do not."""
    clock = FakeClock()
    with thread_server(tmp_path, clock=clock) as srv:
        url = srv.api.url
        statuses = [_login_from(url, "127.0.0.1", "x" * 40) for _ in range(300)]
        checked = statuses.count(401)
        assert checked == FREE_TRIES and statuses.count(429) == 300 - checked, statuses
        assert _login_from(url, "127.0.0.1", TOKEN) == 429  # even the right one waits
        assert _login_from(url, "127.0.0.2", TOKEN) == 303  # another address is not slowed
        reply = requests.post(f"{url}/login", data={"token": "y" * 40}, allow_redirects=False)
        assert reply.status_code == 429 and int(reply.headers["retry-after"]) >= 1
        assert "try again in" in reply.text
        clock.unix += 1.5  # the wait after the last free try is one second
        assert _login_from(url, "127.0.0.1", "x" * 40) == 401  # checked again, and longer now
        assert _login_from(url, "127.0.0.1", TOKEN) == 429  # two seconds now
        clock.unix += 2.5
        assert _login_from(url, "127.0.0.1", TOKEN) == 303  # the right token clears it
        assert _login_from(url, "127.0.0.1", "x" * 40) == 401


def test_the_login_throttle_caps_its_wait_forgets_and_stays_bounded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from runner.serve.dashboard import throttle

    clock = FakeClock()
    slow = throttle.LoginThrottle(clock, free=1, max_wait_s=8.0)
    waits = [slow.wrong("a") for _ in range(6)]
    assert waits == [1.0, 2.0, 4.0, 8.0, 8.0, 8.0]
    assert slow.wait_s("a") == 8.0 and slow.wait_s("b") == 0.0
    clock.advance(throttle.FORGET_AFTER_S + 1)
    assert slow.wait_s("a") == 0.0 and slow.wrong("a") == 1.0  # started afresh
    monkeypatch.setattr(throttle, "MAX_ADDRESSES", 3)
    for name in ("b", "c", "d"):
        slow.wrong(name)
    assert slow.wait_s("a") == 0.0  # the address idle longest was dropped
    assert slow.wait_s("d") == 1.0


@pytest.mark.slow
def test_a_logged_out_cookie_stays_dead_after_a_restart(tmp_path: Path) -> None:
    """Issue 25: logouts were kept in memory; the queue's store keeps them now."""
    with thread_server(tmp_path) as srv:
        browser = logged_in(srv.api.url)
        page = browser.get(f"{srv.api.url}/ui/spend")
        kept = browser.cookies[COOKIE]
        reply = browser.post(f"{srv.api.url}/logout", data={"csrf": csrf_of(page.text)})
        assert reply.status_code == 200 and COOKIE not in browser.cookies
    with thread_server(tmp_path) as srv:  # the same queue database, a new process state
        copy = requests.get(
            f"{srv.api.url}/ui/spend", cookies={COOKIE: kept}, allow_redirects=False
        )
        assert copy.status_code == 303 and copy.headers["location"].startswith("/login")
        fresh = logged_in(srv.api.url)
        assert fresh.get(f"{srv.api.url}/ui/spend", allow_redirects=False).status_code == 200


@pytest.mark.slow
def test_cancel_needs_the_pages_csrf_token(tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    with thread_server(tmp_path) as srv:
        (job,) = srv.api.submit("jobs:\n" + gated("a", gate))
        srv.api.wait_status(job, {"running"})
        url, browser = srv.api.url, logged_in(srv.api.url)
        page = browser.get(f"{url}/ui/jobs/{job}").text
        action = f"{url}/ui/jobs/{job}/cancel"
        for form in ({}, {"csrf": ""}, {"csrf": "0" * 64}):
            reply = browser.post(action, data=form, allow_redirects=False)
            assert reply.status_code == 403, form
        other = logged_in(url)  # another session's token is not this one's
        assert other.post(action, data={"csrf": csrf_of(page)}).status_code == 403
        assert browser.post(action, json={"csrf": csrf_of(page)}).status_code == 415
        assert requests.post(action, data={"csrf": csrf_of(page)}, allow_redirects=False)\
            .headers["location"].startswith("/login")  # fmt: skip
        assert srv.api.status(job) == "running"

        reply = browser.post(action, data={"csrf": csrf_of(page)}, allow_redirects=False)
        assert reply.status_code == 303 and reply.headers["location"] == f"/ui/jobs/{job}"
        assert srv.api.wait_status(job, FINAL)["status"] == "cancelled"

        logout = browser.post(f"{url}/logout", data={"csrf": csrf_of(page)}, allow_redirects=False)
        assert logout.status_code == 303
        assert browser.get(f"{url}/", allow_redirects=False).status_code == 303


@pytest.mark.slow
def test_every_page_has_a_strict_csp_and_no_inline_script_or_style(tmp_path: Path) -> None:
    with thread_server(tmp_path) as srv:
        srv.api.submit("jobs:\n  a:\n    run: echo a\n")
        srv.api.wait_status("s1.a", FINAL)
        browser = logged_in(srv.api.url)
        for path in ("/login", *PAGES, *FRAGMENTS, "/ui/jobs/nope"):
            reply = (browser if path != "/login" else requests).get(srv.api.url + path)
            csp = reply.headers["content-security-policy"]
            assert "script-src 'self'" in csp and "default-src 'none'" in csp, path
            assert "unsafe-inline" not in csp and "unsafe-eval" not in csp
            assert reply.headers["x-content-type-options"] == "nosniff"
            assert "frame-ancestors 'none'" in csp
            # Under that policy an inline script or style attribute would silently not work.
            assert not re.search(r"<script(?![^>]*\bsrc=)", reply.text), path
            assert not re.search(r"\sstyle=|\son[a-z]+=", reply.text), path


@pytest.mark.slow
def test_text_from_jobs_and_servers_is_escaped(tmp_path: Path) -> None:
    evil = "<script>alert(1)</script>"
    with thread_server(tmp_path) as srv:
        (job,) = srv.api.submit(
            f"jobs:\n  x:\n    name: '{evil}'\n    run: echo '<b>bold</b>'; exit 3\n"
        )
        srv.api.wait_status(job, FINAL)
        browser = logged_in(srv.api.url)
        for path in ("/", f"/ui/jobs/{job}", "/ui/submissions/1", "/?q=<script>"):
            html = browser.get(srv.api.url + path).text
            assert evil not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html, path
        log = browser.get(f"{srv.api.url}/ui/jobs/{job}/log?tail=1000")
        assert (
            log.headers["content-type"].startswith("text/plain") and b"<b>bold</b>" in log.content
        )


def test_the_queue_is_paged_and_filtered_by_the_server(tmp_path: Path) -> None:
    store = SqliteQueue(tmp_path / "q.db")
    ids = fill(store, 260)
    try:
        seen: list[str] = []
        after: int | None = None
        while True:
            page = store.job_page(JobMatch(after=after), 50)
            seen += [row.id for row, _ in page]
            if len(page) < 50:
                break
            after = page[-1][0].seq
        assert seen == ids
        back = store.job_page(JobMatch(before=store.job_page(JobMatch(), 300)[-1][0].seq), 50)
        assert [r.id for r, _ in back] == ids[-51:-1]  # the page before the last job, in order
        named = store.job_page(JobMatch(name="JOB_1"), 500)  # case-insensitive, _ literal
        assert {r.name for r, _ in named} == {f"job_{i}" for i in range(260) if str(i)[0] == "1"}
        assert store.job_page(JobMatch(name="%"), 10) == []  # no LIKE wildcards
        assert store.match_counts(JobMatch(submission=2))["queued"] == 130
        assert store.job_page(JobMatch(status="passed"), 10) == []
    finally:
        store.close()


@pytest.mark.slow
def test_queue_pages_link_forward_and_back(tmp_path: Path) -> None:
    clock = FakeClock()
    with thread_server(tmp_path, clock=clock) as srv:
        jobs = "".join(
            f"  j{i}:\n    not-before: 2030-01-01T00:00:00Z\n    run: echo\n" for i in range(7)
        )
        srv.api.submit("jobs:\n" + jobs)
        browser = logged_in(srv.api.url)
        first = browser.get(srv.api.url + "/?limit=3").text
        assert re.findall(r'id="job-(s1\.j\d)"', first) == ["s1.j0", "s1.j1", "s1.j2"]
        assert "waits for not before 2030-01-01T00:00:00Z" in first
        assert 'rel="prev"' not in first
        older = re.search(r'href="([^"]+)" rel="next"', first)
        assert older
        second = browser.get(srv.api.url + older.group(1).replace("&amp;", "&")).text
        assert re.findall(r'id="job-(s1\.j\d)"', second) == ["s1.j3", "s1.j4", "s1.j5"]
        newer = re.search(r'href="([^"]+)" rel="prev"', second)
        assert newer
        again = browser.get(srv.api.url + newer.group(1).replace("&amp;", "&")).text
        assert re.findall(r'id="job-(s1\.j\d)"', again) == ["s1.j0", "s1.j1", "s1.j2"]
        assert browser.get(srv.api.url + "/?status=nonsense").status_code == 400
        assert browser.get(srv.api.url + "/?submission=abc").status_code == 400
        assert browser.get(srv.api.url + "/?limit=100000").status_code == 422


@pytest.mark.slow
def test_a_fragment_that_did_not_change_comes_back_empty(tmp_path: Path) -> None:
    with thread_server(tmp_path) as srv:
        browser = logged_in(srv.api.url)
        first = browser.get(srv.api.url + "/ui/queue/rows")
        again = browser.get(
            srv.api.url + "/ui/queue/rows", headers={"If-None-Match": first.headers["etag"]}
        )
        assert again.status_code == 304 and again.content == b""
        srv.api.submit("jobs:\n  a:\n    run: echo a\n")
        changed = browser.get(
            srv.api.url + "/ui/queue/rows", headers={"If-None-Match": first.headers["etag"]}
        )
        assert changed.status_code == 200 and "s1.a" in changed.text


@pytest.mark.slow
def test_the_log_opens_at_its_tail_on_a_line_and_reads_on_in_ranges(tmp_path: Path) -> None:
    with thread_server(tmp_path) as srv:
        (job,) = srv.api.submit("jobs:\n  a:\n    run: echo a\n")
        srv.api.wait_status(job, FINAL)
        log = srv.service.options.data_dir / "logs" / f"{job}.log"
        lines = [f"line {i:06d} {'é' * 20}\n".encode() for i in range(200_000)]  # ~9 MB
        log.write_bytes(b"".join(lines))
        size = log.stat().st_size
        browser = logged_in(srv.api.url)
        base = f"{srv.api.url}/ui/jobs/{job}/log"
        tail = browser.get(base, params={"tail": 65536})
        start, end = int(tail.headers["x-log-start"]), int(tail.headers["x-log-end"])
        assert end == size == int(tail.headers["x-log-size"]) and len(tail.content) <= 65536
        assert tail.content.startswith(b"line ") and tail.content.endswith(lines[-1])
        assert tail.headers["x-log-final"] == "1"
        earlier = browser.get(base, params={"end": start, "tail": 65536})
        assert int(earlier.headers["x-log-end"]) == start and earlier.content.startswith(b"line ")
        assert (earlier.content + tail.content).decode()  # whole characters on both sides
        on = browser.get(base, params={"start": 0})
        assert int(on.headers["x-log-end"]) == 256 << 10 and len(on.content) == 256 << 10
        past = browser.get(base, params={"start": size + 10})
        assert past.content == b"" and int(past.headers["x-log-start"]) == size
        assert browser.get(f"{srv.api.url}/ui/jobs/s9.none/log").status_code == 404


def test_artifacts_download_as_files_and_stay_in_their_folder(tmp_path: Path) -> None:
    with thread_server(tmp_path) as srv:
        (job,) = srv.api.submit(
            "jobs:\n  a:\n    artifacts: ['out/*']\n"
            "    run: mkdir out; echo '<h1>x</h1>' > out/r.html\n"
        )
        srv.api.wait_status(job, FINAL)
        (srv.service.options.data_dir / "secret.txt").write_text("not an artifact")
        browser = logged_in(srv.api.url)
        page = browser.get(f"{srv.api.url}/ui/jobs/{job}").text
        assert f"/ui/jobs/{job}/artifacts/out/r.html" in page
        got = browser.get(f"{srv.api.url}/ui/jobs/{job}/artifacts/out/r.html")
        assert got.content == b"<h1>x</h1>\n"
        assert got.headers["content-type"] == "application/octet-stream"
        assert got.headers["content-disposition"].startswith("attachment")
        for sneaky in ("../../secret.txt", "..%2F..%2Fsecret.txt", "out", "/etc/passwd"):
            reply = browser.get(f"{srv.api.url}/ui/jobs/{job}/artifacts/{sneaky}")
            assert reply.status_code == 404 and b"not an artifact" not in reply.content, sneaky


@pytest.mark.slow
def test_spend_shows_today_against_the_limit(tmp_path: Path) -> None:
    with thread_server(tmp_path, daily_spend_limit=5.0) as srv:
        html = logged_in(srv.api.url).get(srv.api.url + "/ui/spend").text
        assert "of $5.0000 a day" in html and 'id="servers-held">0<' in html
        assert html.count('class="day"') == 30


def test_the_dag_layers_by_longest_path_without_recursion() -> None:
    jobs = [("a", "a", "passed", []), ("b", "b", "running", ["a"]), ("c", "c", "queued", ["a"])]
    jobs += [("d", "d", "queued", ["b", "c", "s0.outside"])]
    picture = dag(jobs)
    x = {n.id: n.x for n in picture.nodes}
    assert x["a"] < x["b"] == x["c"] < x["d"]
    assert len(picture.edges) == 4 and picture.outside == [("d", "s0.outside")]
    chain = [(f"j{i}", f"j{i}", "queued", [f"j{i - 1}"] if i else []) for i in range(5000)]
    assert len(dag(chain).nodes) == 5000  # a deep chain: no recursion limit
    cycle = [("a", "a", "queued", ["b"]), ("b", "b", "queued", ["a"])]
    assert len(dag(cycle).nodes) == 2  # never in the store, but it must not hang


def test_the_timeline_spans_the_attempts() -> None:
    attempts = [
        {"job_id": "a", "number": 1, "started_at": 100.0, "finished_at": 160.0, "failure": None},
        {"job_id": "b", "number": 1, "started_at": 160.0, "finished_at": None, "failure": None},
    ]
    picture = timeline(attempts, {"a": "first"}, now=220.0)
    assert picture is not None
    (a, b) = picture.bars
    assert (a.status, b.status) == ("passed", "running")
    assert a.w == pytest.approx(b.w) and b.x == pytest.approx(a.x + a.w)
    assert [label for _, label, _ in picture.rows] == ["first", "b"]
    assert timeline([], {}, now=0.0) is None
    retried = [
        {"job_id": "c", "number": 1, "started_at": 0.0, "finished_at": 5.0, "failure": "timeout"},
        {"job_id": "c", "number": 2, "started_at": 6.0, "finished_at": 9.0, "failure": "timeout"},
    ]
    again = timeline(retried, {}, now=10.0)
    assert again is not None
    assert [b.status for b in again.bars] == ["retried", "timed_out"]  # as the reports draw it
    assert len(again.rows) == 1  # one lane per job


def fill(store: SqliteQueue, total: int) -> list[str]:
    """`total` queued jobs named job_<i>, in two submissions; their ids in order."""
    half = total // 2
    ids: list[str] = []
    for first, count in ((0, half), (half, total - half)):
        made = store.submit(
            "pipeline",
            "filled",
            lambda n, first=first, count=count: [
                Job(id=f"s{n}.j{i}", name=f"job_{i}", run="true")
                for i in range(first, first + count)
            ],
            now=1_800_000_000.0,
        )
        ids += [job.id for _, job in made]
    return ids


class PricedLocal(LocalBackend):
    """The local backend, as if each place were a rented server at $2/h."""

    def place(self, *args: Any, **kwargs: Any) -> Place:
        place = super().place(*args, **kwargs)
        place.facts["gpu"] = "RTX 4090 <b>x1</b>"  # a server's text: escaped on the page
        return dataclasses.replace(place, name="clore-42", usd_per_hour=2.0)


@pytest.mark.slow
def test_a_running_job_shows_its_server_price_and_cost_so_far(tmp_path: Path) -> None:
    clock = FakeClock()
    gate = tmp_path / "gate"
    with thread_server(tmp_path, clock=clock, backend=PricedLocal(tmp_path)) as srv:
        (job,) = srv.api.submit("jobs:\n" + gated("a", gate))
        srv.api.wait_status(job, {"running"})
        browser = logged_in(srv.api.url)

        def row() -> str:
            html = browser.get(srv.api.url + "/").text
            found = re.search(rf'<tr id="job-{re.escape(job)}".*?</tr>', html, re.S)
            assert found
            return found.group(0)

        wait_until(lambda: "clore-42" in row(), what="the server of the running job")
        clock.unix += 1800  # half an hour at $2/h
        assert "$2.0000/h" in row() and "$1.0000" in row()
        page = browser.get(f"{srv.api.url}/ui/jobs/{job}").text
        assert "RTX 4090 &lt;b&gt;x1&lt;/b&gt;" in page and "workdir" not in page
        gate.touch()
        srv.api.wait_status(job, FINAL)


def test_the_log_view_gets_no_escape_sequences_and_a_bar_at_its_last_state(
    tmp_path: Path,
) -> None:
    """As `clore-run logs` shows it: a browser would draw ESC and friends as tofu."""
    with thread_server(tmp_path) as srv:
        (job,) = srv.api.submit(
            "jobs:\n  a:\n    run: printf '\\033[31mred\\033[0m\\n 50%%\\r100%%\\nbell\\007\\n'\n"
        )
        srv.api.wait_status(job, FINAL)
        browser = logged_in(srv.api.url)
        log = browser.get(f"{srv.api.url}/ui/jobs/{job}/log?tail=1000")
        assert b"red\n100%\nbell\n" in log.content
        assert not [b for b in log.content if b < 0x20 and b not in (0x0A, 0x09)]
        raw = (srv.service.options.data_dir / "logs" / f"{job}.log").read_bytes()
        assert int(log.headers["x-log-end"]) == len(raw)  # offsets are the file's


def test_a_running_jobs_log_is_read_to_its_last_whole_line() -> None:
    from runner.serve.dashboard.routes import _whole_lines

    assert _whole_lines(100, 120, b"one\ntwo\n\x1b[3") == (108, b"one\ntwo\n")
    assert _whole_lines(100, 103, b"\x1b[3") == (100, b"")
