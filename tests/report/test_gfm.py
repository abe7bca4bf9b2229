"""summary.md and the PR comment as a GFM renderer reads them (markdown-it-py with GFM's tables
and strikethrough): names read as written and cannot change the table's shape."""

from __future__ import annotations

import dataclasses
from html.parser import HTMLParser
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from runner.report import write_reports
from runner.report.comment import comment_body
from tests.report.records import mixed_record, write_outputs

# Inline elements a job name must never make: code spans, emphasis, links, images, strikethrough.
_MADE_BY_MARKUP = {"code", "em", "strong", "a", "img", "s", "del"}


def render(markdown: str) -> str:
    return MarkdownIt("commonmark").enable(["table", "strikethrough"]).render(markdown)


class _Tables(HTMLParser):
    """Rows of every table as [(text, tags inside)] per cell; list items' text, and every tag."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[list[tuple[str, set[str]]]] = []
        self.items: list[str] = []
        self.tags: list[str] = []
        self._cell: list[str] | None = None
        self._inside: set[str] = set()
        self._item: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        if tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            self._cell, self._inside = [], set()
        elif tag == "li":
            self._item = []
        elif self._cell is not None:
            self._inside.add(tag)

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None:
            self.rows[-1].append(("".join(self._cell), self._inside))
            self._cell = None
        elif tag == "li" and self._item is not None:
            self.items.append("".join(self._item))
            self._item = None

    def handle_data(self, data: str) -> None:
        for sink in (self._cell, self._item):
            if sink is not None:
                sink.append(data)


def read(markdown: str) -> _Tables:
    parsed = _Tables()
    parsed.feed(render(markdown))
    return parsed


NAMES = [
    "`code` span",
    "a | b",
    "[x](https://example.com)",
    "![img](https://example.com/i.png)",
    "*bold* and _under_ and __x__",
    "~~gone~~",
    "<b>html</b> &amp; &lt;",
    "back\\slash\\|",
    "@octocat #12",
    "unit | fast",
]


@pytest.mark.parametrize("name", NAMES)
def test_a_job_name_reads_as_written_and_keeps_the_table(tmp_path: Path, name: str) -> None:
    record = mixed_record()
    jobs = tuple(
        dataclasses.replace(j, name=name) if j.id == "build" else j for j in record.pipeline.jobs
    )
    record = dataclasses.replace(record, pipeline=dataclasses.replace(record.pipeline, jobs=jobs))
    write_outputs(tmp_path)
    md = write_reports(tmp_path, record).summary_md.read_text(encoding="utf-8")
    for markdown in (md, comment_body(md, "gpu", None)):
        parsed = read(markdown)
        header, *rows = parsed.rows
        assert len(rows) == len(record.results)
        assert {len(row) for row in rows} == {len(header)}  # no cell split or lost
        names = [row[0] for row in rows]
        shown = [text.replace("\u200b", "") for text, _ in names]
        assert name in shown  # the text as written (mentions only broken invisibly)
        assert not any(tags & _MADE_BY_MARKUP for _, tags in names)
        assert "img" not in parsed.tags


def test_the_report_renders_its_sections(tmp_path: Path) -> None:
    write_outputs(tmp_path)
    md = write_reports(tmp_path, mixed_record()).summary_md.read_text(encoding="utf-8")
    html = render(md)
    assert html.count("<table>") == 1
    assert '<pre><code class="language-mermaid">gantt' in html  # the chart stays a fenced block
    assert '<code class="language-text">' in html  # the failed jobs' logs
    parsed = read(md)
    assert "❌ test (RTX 4090) · tests.test_model.test_backward: AssertionError: grad is NaN" in (
        parsed.items
    )
