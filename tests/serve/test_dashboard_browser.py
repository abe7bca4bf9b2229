"""The dashboard in a real headless chromium, against a queue server on loopback running jobs
on the local backend. Waits are Selenium's: they poll the page for what must appear."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.browser import chromium, find_browser, screenshot_dir
from tests.serve.harness import TOKEN, ThreadServer, thread_server

pytestmark = [
    pytest.mark.slow,  # a real chromium per module
    pytest.mark.skipif(isinstance(find_browser(), str), reason=str(find_browser())),
]

WAIT_S = 20.0


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ThreadServer]:
    with thread_server(tmp_path_factory.mktemp("dash"), capacity=4) as srv:
        yield srv


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = screenshot_dir(tmp_path_factory.getbasetemp())
    print(f"dashboard screenshots: {folder}")
    return folder


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as driver:
        yield driver


@pytest.fixture
def page(browser: Any, server: ThreadServer) -> Iterator[Any]:
    """The browser, logged in, with no console messages left from an earlier test."""
    log_in(browser, server.api.url)
    browser.get_log("browser")
    yield browser
    problems = [m for m in browser.get_log("browser") if m["level"] == "SEVERE"]
    assert problems == [], problems  # a CSP violation or a script error shows up here


def log_in(driver: Any, url: str, next_path: str = "/") -> None:
    from selenium.webdriver.common.by import By

    driver.get(f"{url}/login?next={next_path}")
    if "/login" not in driver.current_url:
        return  # the session cookie is still good
    field = driver.find_element(By.NAME, "token")
    field.send_keys(TOKEN)
    field.submit()
    until(driver, lambda d: "/login" not in d.current_url, "the login to go through")


def until(driver: Any, check: Callable[[Any], Any], what: str, timeout: float = WAIT_S) -> Any:
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(
        driver, timeout, poll_frequency=0.05, ignored_exceptions=(StaleElementReferenceException,)
    )
    return wait.until(check, f"waiting for {what}")


def gated(name: str, gate: Path, before: str = "", after: str = "") -> str:
    lines = [f"  {name}:", "    run: |"]
    if before:
        lines.append(f"      {before}")
    lines.append(f"      while [ ! -e {gate} ]; do sleep 0.02; done")
    if after:
        lines.append(f"      {after}")
    return "\n".join(lines) + "\n"


def mark_page(driver: Any) -> None:
    """A flag in the page's window: it is gone if the page reloads."""
    driver.execute_script("window.__stayed = true;")


def page_stayed(driver: Any) -> bool:
    return bool(driver.execute_script("return window.__stayed === true;"))


def row_css(job_id: str) -> str:
    """The queue table's row of a job (a dot in an id is a class selector in CSS)."""
    return "#job-" + job_id.replace(".", "\\.")


def text_of(driver: Any, css: str) -> str:
    """An element's text read in one step in the page: a live part may be swapped between
    finding an element and reading it."""
    script = "const e = document.querySelector(arguments[0]); return e ? e.textContent : null;"
    text = driver.execute_script(script, css)
    assert text is not None, f"no {css} on the page"
    return " ".join(str(text).split()) if css != "#log" else str(text)


def test_without_the_cookie_every_page_redirects_to_the_login(
    browser: Any, server: ThreadServer, shots: Path
) -> None:
    from selenium.webdriver.common.by import By

    (job,) = server.api.submit("jobs:\n  quick:\n    run: echo quick\n")
    browser.delete_all_cookies()
    url = server.api.url
    for path in ("/", f"/ui/jobs/{job}", "/ui/submissions/1", "/ui/spend", "/?status=queued"):
        browser.get(url + path)
        until(browser, lambda d: d.current_url.startswith(url + "/login"), f"{path} → login")
        assert browser.find_element(By.NAME, "token").get_attribute("type") == "password"
    browser.save_screenshot(str(shots / "login.png"))

    field = browser.find_element(By.NAME, "token")
    field.send_keys("not-the-token-at-all")
    field.submit()
    assert "not the server's" in text_of(browser, "[role=alert]")

    browser.get(f"{url}/ui/spend")  # the login brings the visitor back where they were going
    field = browser.find_element(By.NAME, "token")
    field.send_keys(TOKEN)
    field.submit()
    until(browser, lambda d: d.current_url == f"{url}/ui/spend", "the spend page")
    assert TOKEN not in browser.current_url
    cookie = browser.get_cookie("clore_run_session")
    assert cookie["httpOnly"] is True and cookie["sameSite"] == "Strict"
    assert browser.execute_script("return document.cookie;") == ""  # scripts cannot read it


def test_a_pipelines_dag_and_jobs_change_state_live(
    page: Any, server: ThreadServer, shots: Path, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By

    gate_a, gate_b = tmp_path / "a", tmp_path / "b"
    pipeline = (
        "name: dag-demo\njobs:\n"
        + gated("prepare", gate_a)
        + gated("train", gate_b, after="echo trained")
        + "    needs: prepare\n"
        + "  evaluate:\n    needs: prepare\n    run: echo evaluated\n"
        + "  report:\n    needs: [train, evaluate]\n    run: echo reported\n"
    )
    ids = server.api.submit(pipeline)
    number = ids[0].split(".")[0][1:]
    server.api.wait_status(ids[0], {"running"})
    page.get(f"{server.api.url}/ui/submissions/{number}")
    mark_page(page)

    def node_status(job_id: str) -> str:
        script = "return document.querySelector(arguments[0]).dataset.status;"
        return str(page.execute_script(script, f'#dag a[data-job="{job_id}"]'))

    assert node_status(ids[0]) == "running" and node_status(ids[3]) == "queued"
    assert len(page.find_elements(By.CSS_SELECTOR, "#dag path.edge")) == 4  # one per need
    colour = page.find_element(By.CSS_SELECTOR, f'#dag a[data-job="{ids[0]}"] rect')
    assert colour.value_of_css_property("fill") == "rgb(147, 197, 253)"  # running is blue
    page.save_screenshot(str(shots / "submission-running.png"))

    gate_a.touch()
    until(page, lambda _: node_status(ids[2]) == "passed", "evaluate to pass on the page")
    until(page, lambda _: node_status(ids[1]) == "running", "train to run on the page")
    gate_b.touch()
    until(page, lambda _: node_status(ids[3]) == "passed", "report to pass on the page")
    assert page_stayed(page), "the page reloaded: it should update in place"
    assert page.find_elements(By.CSS_SELECTOR, "#timeline rect.bar")  # the timeline is drawn
    page.save_screenshot(str(shots / "submission.png"))


def test_the_queue_page_updates_live(
    page: Any, server: ThreadServer, shots: Path, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    (job,) = server.api.submit("name: live-queue\njobs:\n" + gated("slow", gate))
    server.api.wait_status(job, {"running"})
    page.get(server.api.url + "/")
    mark_page(page)

    def row_status() -> str:
        script = "return document.getElementById(arguments[0]).dataset.status;"
        return str(page.execute_script(script, f"job-{job}"))

    assert row_status() == "running"
    # Where it runs appears as soon as the backend placed it, the job still running.
    until(page, lambda _: "localhost" in text_of(page, row_css(job)), "its server")
    assert "$0.0000/h" in text_of(page, row_css(job))
    page.save_screenshot(str(shots / "queue.png"))
    gate.touch()
    until(page, lambda _: row_status() == "passed", "the row to show passed")
    assert page_stayed(page)


def test_following_a_log_and_a_10_mb_one(
    page: Any, server: ThreadServer, shots: Path, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    (job,) = server.api.submit(
        "jobs:\n" + gated("talk", gate, before="echo first line", after="echo second line")
    )
    page.get(f"{server.api.url}/ui/jobs/{job}")
    until(page, lambda _: "first line" in text_of(page, "#log"), "the first line")
    assert "second line" not in text_of(page, "#log")
    mark_page(page)
    gate.touch()
    until(page, lambda _: "second line" in text_of(page, "#log"), "the line written later")
    until(page, lambda _: text_of(page, "#job-status") == "passed", "the status to follow")
    assert page_stayed(page)
    page.save_screenshot(str(shots / "job.png"))

    writer = tmp_path / "write_10mb.py"
    writer.write_text(
        "import sys\n"
        "for i in range(95_000):\n"
        "    sys.stdout.write(f'line {i:07d} ' + 'x' * 100 + '\\n')\n"
        "print('LAST LINE')\n"
    )
    (big,) = server.api.submit(f"jobs:\n  big:\n    run: python3 {writer}\n")
    server.api.wait_status(big, {"passed"}, timeout=60)
    size = (server.service.options.data_dir / "logs" / f"{big}.log").stat().st_size
    assert size > 10_000_000
    page.get(f"{server.api.url}/ui/jobs/{big}")
    until(page, lambda _: "LAST LINE" in text_of(page, "#log"), "the tail of the big log")
    shown = len(page.execute_script("return document.getElementById('log').textContent;"))
    assert shown < 70_000  # the tail, not 10 MB
    first = page.execute_script("return document.getElementById('log').textContent;")[:12]
    assert first.startswith("line ")  # whole lines: the tail starts at one

    from selenium.webdriver.common.by import By

    page.find_element(By.ID, "log-earlier").click()
    until(
        page,
        lambda _: (
            len(page.execute_script("return document.getElementById('log').textContent;"))
            > shown + 50_000
        ),
        "an earlier chunk",
    )
    page.save_screenshot(str(shots / "job-big-log.png"))


def test_cancelling_a_running_job(
    page: Any, server: ThreadServer, shots: Path, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By

    (job,) = server.api.submit("jobs:\n" + gated("doomed", tmp_path / "never"))
    server.api.wait_status(job, {"running"})
    page.get(f"{server.api.url}/ui/jobs/{job}")
    assert text_of(page, "#job-status") == "running"
    page.find_element(By.ID, "cancel").click()
    alert = until(page, lambda d: d.switch_to.alert, "the confirm dialog")
    alert.accept()
    until(page, lambda _: text_of(page, "#job-status") == "cancelled", "cancelled on the page")
    assert not page.find_elements(By.ID, "cancel")  # nothing left to cancel
    assert server.api.status(job) == "cancelled"
    page.save_screenshot(str(shots / "job-cancelled.png"))


def test_a_script_in_a_job_name_or_log_shows_as_text(
    page: Any, server: ThreadServer, shots: Path
) -> None:
    from selenium.common.exceptions import NoAlertPresentException
    from selenium.webdriver.common.by import By

    name = "<script>alert(1)</script>"
    (job,) = server.api.submit(
        f"jobs:\n  xss:\n    name: '{name}'\n    run: echo '<img src=x onerror=alert(2)>'\n"
    )
    server.api.wait_status(job, {"passed"})
    number = job.split(".")[0][1:]
    for path in ("/", f"/ui/jobs/{job}", f"/ui/submissions/{number}"):
        page.get(server.api.url + path)
        if path == "/":
            assert page.find_element(By.CSS_SELECTOR, f"{row_css(job)} .name").text == name
        elif path.startswith("/ui/jobs"):
            assert page.find_element(By.TAG_NAME, "h1").text.startswith(name)
            until(page, lambda _: "onerror" in text_of(page, "#log"), "the log line as text")
            assert not page.find_elements(By.CSS_SELECTOR, "#log img")
        else:
            assert page.find_element(By.CSS_SELECTOR, f'tr[data-job="{job}"] a').text == name
            assert f"{name}: {job} (passed)" in text_of(page, f'#dag a[data-job="{job}"] title')
        with pytest.raises(NoAlertPresentException):
            _ = page.switch_to.alert.text
    page.get(server.api.url + "/ui/spend")
    page.save_screenshot(str(shots / "spend.png"))
