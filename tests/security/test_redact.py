"""runner/redact.py: the one redaction point."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runner import redact

KEY = "ck_live_0123456789abcdef"


@pytest.fixture(autouse=True)
def _clean() -> Iterator[None]:
    redact.forget_all()
    yield
    redact.forget_all()


def test_env_secrets_and_registered_ones_are_replaced() -> None:
    redact.register("registered-token-xyz")
    text = f"key={KEY} token=registered-token-xyz"
    assert redact.text(text, {"CLORE_API_KEY": KEY}) == "key=*** token=***"


def test_a_registered_secret_stays_known_after_it_left_the_environment() -> None:
    redact.register_from({"CLORE_RUN_TOKEN": "serve-token-abcdef\n"})
    assert redact.text("Bearer serve-token-abcdef", {}) == "Bearer ***"


def test_the_process_environment_counts_as_it_is_at_each_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The variables are read from os.environ's own dict: a change made after a first call
    (set, changed, removed) is seen by the next, for text, bytes and streams alike."""
    monkeypatch.delenv("CLORE_API_KEY", raising=False)
    assert redact.text(f"k={KEY}") == f"k={KEY}"
    monkeypatch.setenv("CLORE_API_KEY", KEY)
    assert redact.text(f"k={KEY}") == "k=***"
    assert redact.data(f"k={KEY}\n".encode()) == b"k=***\n"
    assert redact.Stream().feed(f"k={KEY}\n".encode()) == b"k=***\n"
    monkeypatch.setenv("CLORE_API_KEY", "another-key-9876")
    assert redact.text(f"k={KEY} another-key-9876") == f"k={KEY} ***"
    monkeypatch.delenv("CLORE_API_KEY")
    assert redact.text("another-key-9876") == "another-key-9876"


def test_short_values_are_not_secrets() -> None:
    redact.register("abc")
    assert redact.text("abc abc", {"CLORE_API_KEY": "x"}) == "abc abc"


def test_bytes_that_are_not_utf8_keep_their_bytes() -> None:
    assert redact.data(b"\xff" + KEY.encode() + b"\xfe", {"CLORE_API_KEY": KEY}) == b"\xff***\xfe"


@pytest.mark.slow
@given(st.lists(st.integers(min_value=0, max_value=60), max_size=8), st.text(max_size=40))
def test_a_stream_finds_a_secret_however_it_is_cut(cuts: list[int], filler: str) -> None:
    env = {"CLORE_API_KEY": KEY}
    whole = f"{filler}\nline {KEY} and {KEY[:5]}\n{KEY}".encode()
    stream = redact.Stream(env)
    out = b""
    start = 0
    for cut in sorted(cuts):
        out += stream.feed(whole[start:cut])
        start = max(start, cut)
    out += stream.feed(whole[start:]) + stream.flush()
    assert out == redact.data(whole, env)
    assert KEY.encode() not in out


def test_a_stream_writes_whole_lines_at_once() -> None:
    stream = redact.Stream({"CLORE_API_KEY": KEY})
    assert stream.feed(b"done\n") == b"done\n"  # nothing held back after a newline
    assert stream.feed(b"ck_live") == b""  # could be the head of the key
    assert stream.feed(b"_0123456789abcdef!\n") == b"***!\n"
