"""runner/untrusted.py: remote text on a console line and in Markdown."""

from __future__ import annotations

import io
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runner.report.text import xml_safe
from runner.untrusted import console_line, markdown

# How the Actions runner finds commands: `::name` at a line's start after whitespace, `##[name`
# anywhere in the line.
_V2 = re.compile(r"^\s*::[A-Za-z-]+")
_V1 = re.compile(r"##\[[A-Za-z-]+")


def _runner_reads_a_command(line: str) -> bool:
    return any(_V2.match(part) or _V1.search(part) for part in re.split("\r\n|\r|\n", line))


def test_workflow_commands_anywhere_are_broken() -> None:
    for text in (
        "upload failed (1): ##[add-mask]passed",
        "::add-mask::passed",
        "  ::error file=x::boom",
        "refused: ##[group]x",
        "a\n::stop-commands::tok",
        "a\r::warning::x",
    ):
        line = console_line(text)
        assert not _runner_reads_a_command(line), (text, line)
        assert "\n" not in line and "\r" not in line


def test_terminal_sequences_are_dropped_or_shown() -> None:
    line = console_line("\x1b]52;c;aGk=\x07title\x1b[2J\x1b[31mred \x1b \x9b \u202eevil")
    assert "\x1b" not in line and "\x9b" not in line and "\u202e" not in line
    assert line == "titlered \\x1b \\x9b \\u202eevil"


@pytest.mark.slow
@given(st.text())
def test_no_text_yields_a_command_or_a_control(text: str) -> None:
    line = console_line(text)
    assert not _runner_reads_a_command(line)
    assert not re.search("[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029]", line)


def test_markdown_from_a_server_makes_no_link_image_html_or_mention() -> None:
    cell = markdown("![x](https://evil.example/a.png) [c](http://e) <img src=x> @octocat #1 |")
    assert "![" not in cell and "](" not in cell and "<img" not in cell
    assert "https://" not in cell and "@octocat" not in cell and "#1" not in cell
    assert "|" not in cell.replace("\\|", "")
    assert "\n" not in markdown("a\nb")


def test_markdown_is_cut_to_its_limit() -> None:
    assert markdown("x" * 500, limit=10) == "x" * 9 + "…"


def test_console_lines_with_remote_text_carry_no_command() -> None:
    from runner.core.model import Job, JobResult, JobStatus
    from runner.engine.console import Console

    out = io.StringIO()
    console = Console(out, total_jobs=1, live=False)
    job = Job(id="a", name="a", run="true")
    console.notice("upload failed (1): ##[add-mask]passed")
    console.output(job, "stdout", b"::error::from the server\n\x1b]0;title\x07x\n")
    result = JobResult(job_id="a", status=JobStatus.FAILED, reason="refused ##[add-mask]x\n::y::")
    console.job_done(job, result)
    for line in out.getvalue().splitlines():
        assert not _runner_reads_a_command(line), line
        assert "\x1b" not in line


_ASCII = st.text(alphabet=st.characters(max_codepoint=0x7F))


def _cleaned_alike(text: str) -> bool:
    """ASCII text takes a shorter way (classes of the ASCII characters only); a non-ASCII
    character in front, which no pattern can take part in, sends it the long way."""
    return "é" + console_line(text) == console_line("é" + text) and "é" + xml_safe(
        text
    ) == xml_safe("é" + text)


def test_every_ascii_character_is_cleaned_as_in_any_text() -> None:
    assert all(_cleaned_alike(text) for text in [*map(chr, range(128)), "\r\n", "a::b##[c"])


@given(_ASCII | st.text())
def test_ascii_text_is_cleaned_as_any_text_is(text: str) -> None:
    assert _cleaned_alike(text)
