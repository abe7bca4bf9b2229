"""The serve dashboard in headless chromium, against `clore-run serve` (local backend).

    python benchmarks/bench_dashboard.py [--quick] [--queued 10000] [--pages 5] [--window 20]

Reports, each against a baseline measured in the same run:

- time to first paint (first-contentful-paint) of the queue page with --queued jobs queued,
  against the same page on the same server with one page (50) of jobs queued;
- bytes sent per page (the HTML, and each live refresh: changed, or 304 unchanged);
- the server process's CPU (its own threads; the jobs are other processes) while --pages
  pages watch a running queue, against the same queue with no page open.

Needs chromium and chromedriver (Debian: apt-get install chromium chromium-driver).
--quick: 1,000 queued, 2 pages, a 5 s window. Figures are printed, not asserted.
"""

from __future__ import annotations

import argparse
import os
import re
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import requests

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for tests.browser

from tests.browser import chromium, find_browser

PAGE = 50  # jobs on one queue page
ENTRY = (
    "import sys; from runner.cli import app, main; from runner.cli.serve import register; "
    "register(app); main(sys.argv[1:])"
)
# First contentful paint, and when the first byte of the page arrived (the server's part).
FCP = (
    "const p = performance.getEntriesByName('first-contentful-paint')[0];"
    "const n = performance.getEntriesByType('navigation')[0];"
    "return p ? [p.startTime, n.responseStart] : null;"
)


@contextmanager
def serve(db: Path, token: str) -> Iterator[tuple[subprocess.Popen[str], str]]:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            ENTRY,
            "serve",
            "--port",
            "0",
            "--db",
            str(db),
            "--concurrency",
            "3",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "CLORE_RUN_TOKEN": token},
    )
    assert proc.stdout is not None
    match = re.search(r"listening on (http://\S+)", proc.stdout.readline())
    try:
        if match is None:
            sys.exit("the server did not start")
        yield proc, match.group(1)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def cpu_s(pid: int) -> float:
    """utime + stime of the process itself, in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def submit(http: requests.Session, url: str, yaml_text: str) -> list[str]:
    reply = http.post(
        f"{url}/pipelines",
        data=yaml_text.encode(),
        headers={"Content-Type": "application/yaml"},
        timeout=120,
    )
    assert reply.status_code == 201, reply.text[:500]
    ids: list[str] = reply.json()["ids"]
    return ids


def fill(http: requests.Session, url: str, total: int) -> None:
    per = max(1, min(total, 1000))
    for batch in range(0, total, per):
        jobs = "".join(
            f"  j{i}:\n    not-before: 2099-01-01T00:00:00Z\n    run: 'true'\n"
            for i in range(batch, min(total, batch + per))
        )
        submit(http, url, f"jobs:\n{jobs}")


def log_in(driver: Any, url: str, token: str) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get(f"{url}/login")
    field = driver.find_element(By.NAME, "token")
    field.send_keys(token)
    field.submit()
    WebDriverWait(driver, 20).until(lambda d: "/login" not in d.current_url)


def first_paint_ms(driver: Any, url: str, n: int) -> tuple[float, float]:
    """Medians over `n` loads: (first contentful paint, first byte), ms from navigation."""
    paints, firsts = [], []
    for _ in range(n):
        driver.get(url)
        value = None
        deadline = time.monotonic() + 10
        while value is None and time.monotonic() < deadline:
            value = driver.execute_script(FCP)
        paint, first = value or (float("nan"), float("nan"))
        paints.append(float(paint))
        firsts.append(float(first))
    return statistics.median(paints), statistics.median(firsts)


def show_paint(label: str, got: tuple[float, float], base: tuple[float, float] | None) -> None:
    ratio = "(baseline)" if base is None else f"({got[0] / base[0]:.2f}x the baseline)"
    print(f"  first paint, {label:<34} {got[0]:7.1f} ms {ratio}; first byte {got[1]:.1f} ms")


def page_bytes(http: requests.Session, url: str, paths: list[str]) -> None:
    """Bytes of each page's body (uncompressed), and of a live refresh of it."""
    for path in paths:
        reply = http.get(url + path, timeout=30)
        line = f"    {path:<34} {len(reply.content):>8} B"
        tag = reply.headers.get("etag")
        if tag:
            again = http.get(url + path, headers={"If-None-Match": tag}, timeout=30)
            line += f"   unchanged refresh: {again.status_code}, {len(again.content)} B"
        print(line)


def cpu_while(pid: int, seconds: float) -> float:
    """The server's CPU share (1.0 = one core) over `seconds` of wall time."""
    began_cpu, began = cpu_s(pid), time.monotonic()
    time.sleep(seconds)  # a benchmark's measuring window, not a wait for an event
    return (cpu_s(pid) - began_cpu) / (time.monotonic() - began)


def running_queue(http: requests.Session, url: str, jobs: int) -> list[str]:
    """A stream of short jobs, so states keep changing while pages watch."""
    body = "".join(
        f"  w{i}:\n    run: echo step {i}; sleep 0.4\n"
        + (f"    needs: w{i - 3}\n" if i >= 3 else "")
        for i in range(jobs)
    )
    return submit(http, url, f"name: watched\njobs:\n{body}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--queued", type=int, default=10_000)
    parser.add_argument("--pages", type=int, default=5)
    parser.add_argument("--window", type=float, default=20.0)
    parser.add_argument("--paints", type=int, default=7)
    args = parser.parse_args()
    if args.quick:
        args.queued, args.pages, args.window, args.paints = 1000, 2, 5.0, 3
    found = find_browser()
    if isinstance(found, str):
        sys.exit(found)
    token = secrets.token_urlsafe(24)
    with tempfile.TemporaryDirectory() as tmp, serve(Path(tmp) / "q.db", token) as (proc, url):
        http = requests.Session()
        http.headers["Authorization"] = f"Bearer {token}"
        with chromium() as driver:
            log_in(driver, url, token)
            fill(http, url, PAGE)  # the baseline: one full page of jobs, nothing beyond it
            empty = first_paint_ms(driver, url + "/", args.paints)
            fill(http, url, args.queued - PAGE)
            full = first_paint_ms(driver, url + "/", args.paints)
            deep = first_paint_ms(driver, url + "/?status=queued&q=j9", args.paints)
        print(f"clore-run serve dashboard, local backend, chromium headless, {url}")
        show_paint(f"queue page, {PAGE} queued (one page):", empty, None)
        show_paint(f"queue page, {args.queued} queued:", full, empty)
        show_paint("filtered (status + name):", deep, empty)

        ids = running_queue(http, url, 3000)
        submission = ids[0].split(".")[0][1:]
        pages = ["/", "/?status=running", f"/ui/submissions/{submission}"]
        pages += [f"/ui/jobs/{ids[0]}", "/ui/spend"]
        browser = requests.Session()
        browser.post(f"{url}/login", data={"token": token}, timeout=30)
        print("  bytes per page (uncompressed body):")
        page_bytes(requests.Session(), url, ["/login"])
        page_bytes(browser, url, [*pages, "/ui/queue/rows", "/ui/static/app.js"])

        alone = cpu_while(proc.pid, args.window)
        with ExitStack() as stack:
            watchers = [stack.enter_context(chromium()) for _ in range(args.pages)]
            for i, watcher in enumerate(watchers):
                log_in(watcher, url, token)
                watcher.get(url + pages[i % 5])
            watched = cpu_while(proc.pid, args.window)
        print(f"  server CPU, running queue, no page open:      {alone * 100:6.1f} % of a core")
        print(
            f"  server CPU, {args.pages} pages watching it:           {watched * 100:6.1f} % "
            f"({watched / max(alone, 1e-9):.2f}x; {(watched - alone) * 100 / args.pages:.1f} "
            "points per page)"
        )


if __name__ == "__main__":
    main()
