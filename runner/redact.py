"""The one place secrets are taken out of text before it is written anywhere.

Every writer of text a person or CI may keep — job logs, the console, summary.json, junit.xml,
summary.md, the step summary, step outputs, the PR comment — passes its text through `text()`
(or, for raw job output, a `Stream`). The secrets are:
- the values of the variables in `SECRET_ENV_VARS`, read at every call, so a test's or a
  caller's environment counts as it is;
- every value `register()`ed: the process registers its secrets at start, before it takes them
  out of its environment (serve removes them, and the launcher re-executes without them), so
  they stay known after they are gone from `os.environ`;
- the password inside any of those that is a URL (`postgresql://user:PASSWORD@host/db`, the
  coordinator), as written and percent-decoded: a job may print it alone.
A value shorter than `MIN_SECRET_CHARS` is never treated as a secret: it would redact ordinary
words. Redact before cutting text short: a cut can leave a secret's head, which no longer
matches.
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable, Iterable, Mapping

SECRET_ENV_VARS = (
    "CLORE_API_KEY",
    "CLORE_RUN_TOKEN",
    "GITHUB_TOKEN",
    "CLORE_GITHUB_TOKEN",
    "CLORE_RUNNER_TOKEN",  # may administer a repository's runners (clore-run runner)
    "CLORE_RUN_COORDINATOR",  # the shared PostgreSQL's URL, its password in it
    "PGPASSWORD",  # libpq's: the coordinator's password when the URL leaves it out
)
MIN_SECRET_CHARS = 6
MASK = "***"

_lock = threading.Lock()
_registered: set[str] = set()
_generation = 0  # changes with every change to _registered: the key of the cached lists


def register(*values: str) -> None:
    """Remember secrets for the rest of the process (blank or short values are ignored)."""
    global _generation
    found = _with_passwords(v.strip() for v in values)
    with _lock:
        before = len(_registered)
        _registered.update(v for v in found if len(v) >= MIN_SECRET_CHARS)
        if len(_registered) != before:
            _generation += 1


def register_from(env: Mapping[str, str]) -> None:
    """Remember the values of `SECRET_ENV_VARS` found in `env`."""
    register(*(env.get(name, "") for name in SECRET_ENV_VARS))


def _with_passwords(values: Iterable[str]) -> set[str]:
    """`values`, and the password of each that is a URL with one (as written, and decoded)."""
    found = set()
    for value in values:
        found.add(value)
        if "://" in value and "@" in value:
            found.update(url_passwords(value))
    return found


def url_passwords(url: str) -> tuple[str, ...]:
    """The password in `url` as written and percent-decoded; () when it has none."""
    from urllib.parse import unquote, urlsplit  # only for a secret that is a URL

    try:
        written = urlsplit(url).netloc.rpartition("@")[0].partition(":")[2]
    except ValueError:
        return ()
    return (written, unquote(written)) if written else ()


def forget_all() -> None:
    """Tests only: drop every registered secret."""
    global _generation
    with _lock:
        _registered.clear()
        _generation += 1


def secrets(env: Mapping[str, str] | None = None) -> list[str]:
    """Every known secret, longest first (so a secret holding another is replaced whole)."""
    return list(_known(env))


def text(value: str, env: Mapping[str, str] | None = None) -> str:
    """`value` with every known secret replaced by `***`."""
    return _replace_text(value, _known(env))


def text_redactor(env: Mapping[str, str] | None = None) -> Callable[[str], str]:
    """`text` with the secrets read once, for one document: a report redacts thousands of
    values, and reading the environment again for each took a tenth of writing junit.xml."""
    known = _known(env)
    if not known:
        return _unchanged
    return functools.partial(_replace_text, known=known)


def _replace_text(value: str, known: tuple[str, ...]) -> str:
    for secret in known:
        if secret in value:
            value = value.replace(secret, MASK)
    return value


def _unchanged(value: str) -> str:
    return value


def data(value: bytes, env: Mapping[str, str] | None = None) -> bytes:
    """Raw bytes (job output need not be UTF-8) with every known secret replaced."""
    return _replace_all(value, _known_bytes(env))


def _replace_all(value: bytes, known: tuple[bytes, ...]) -> bytes:
    for secret in known:
        if secret in value:
            value = value.replace(secret, _MASK_BYTES)
    return value


_MASK_BYTES = MASK.encode()


# Every line written anywhere passes here, so the list is not rebuilt per call: the variables
# are still read at every call (a caller's or a test's environment counts as it is), once per
# call, and the sorted list is cached by what was read and by the registered set's generation.
def _known(env: Mapping[str, str] | None) -> tuple[str, ...]:
    return _sorted_secrets(_read(env), _generation)


def _known_bytes(env: Mapping[str, str] | None) -> tuple[bytes, ...]:
    return _encoded(_read(env), _generation)


_ENCODED_NAMES = tuple(os.fsencode(name) for name in SECRET_ENV_VARS)


def _read(env: Mapping[str, str] | None) -> tuple[str | bytes | None, ...]:
    """The secret variables' values in `env` (this process's environment when None). On POSIX
    os.environ keeps its variables in a dict of bytes: looking them up there costs a tenth of
    `os.environ.get`, which encodes the name and, for a variable not set, raises and catches a
    KeyError, and this is read for every line a run writes."""
    env = os.environ if env is None else env
    raw = getattr(env, "_data", None) if _POSIX else None
    if type(raw) is dict:
        return tuple(map(raw.get, _ENCODED_NAMES))  # None for a variable not set
    return tuple(env.get(name, "") for name in SECRET_ENV_VARS)


_POSIX = os.name == "posix"  # elsewhere os.environ's own dict is keyed by upper-case str


@functools.lru_cache(maxsize=32)
def _sorted_secrets(from_env: tuple[str | bytes | None, ...], generation: int) -> tuple[str, ...]:
    # Read after `generation` was: the registered set is at least that generation's.
    values = _with_passwords(os.fsdecode(v).strip() for v in from_env if v)  # as os.environ
    with _lock:
        found = values | _registered
    return tuple(sorted((s for s in found if len(s) >= MIN_SECRET_CHARS), key=len, reverse=True))


@functools.lru_cache(maxsize=32)
def _encoded(from_env: tuple[str | bytes | None, ...], generation: int) -> tuple[bytes, ...]:
    return tuple(
        v.encode("utf-8", "surrogateescape") for v in _sorted_secrets(from_env, generation)
    )


class Stream:
    """Redacts a byte stream that arrives in chunks: a secret split across two chunks is still
    found, because the last `len(longest secret) - 1` bytes are held back until the next chunk
    (or `flush`). Memory stays bounded by that length."""

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        self._env = env
        self._held = b""

    def feed(self, chunk: bytes) -> bytes:
        """The part of the stream so far that can be written safely."""
        known = _known_bytes(self._env)  # read once: `data` would read the environment again
        buffered = _replace_all(self._held + chunk, known)
        keep = max((len(s) for s in known), default=1) - 1
        cut = max(0, len(buffered) - keep)  # nothing before `cut` can begin an unseen secret
        # Hold back only what could still be the head of a secret: a newline ends that chance
        # when no secret holds one, and writing whole lines keeps the log readable live.
        if keep > 0 and not any(b"\n" in s for s in known):
            newline = buffered.rfind(b"\n", cut)
            cut = newline + 1 if newline >= 0 else cut
        self._held = buffered[cut:]
        return buffered[:cut]

    def flush(self) -> bytes:
        """Everything still held back."""
        rest, self._held = data(self._held, self._env), b""
        return rest
