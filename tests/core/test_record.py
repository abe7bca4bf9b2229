"""Record's equality, hash and text are those dataclass would have generated."""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import pytest

from runner.core.events import AttemptEnded, CancelAll, StopCause
from runner.core.model import Attempt, FailureKind, Job, Location
from runner.core.record import Record


@dataclass(frozen=True)
class Generated:
    name: str
    count: int = 0
    tags: tuple[str, ...] = ()
    facts: Any = None


@dataclass(frozen=True, eq=False, repr=False)
class Shared(Record):
    name: str
    count: int = 0
    tags: tuple[str, ...] = ()
    facts: Any = None


@dataclass(frozen=True, eq=False, repr=False)
class Other(Record):
    name: str
    count: int = 0
    tags: tuple[str, ...] = ()
    facts: Any = None


CASES = [("a",), ("a", 2), ("b", 2, ("x", "y")), ("c", 0, (), {"k": "v"})]


@pytest.mark.parametrize("args", CASES)
def test_the_text_is_the_generated_one(args: tuple[Any, ...]) -> None:
    assert repr(Shared(*args)) == repr(Generated(*args)).replace("Generated(", "Shared(")


@pytest.mark.parametrize("args", CASES[:3])
def test_equality_and_hash_follow_the_fields(args: tuple[Any, ...]) -> None:
    assert Shared(*args) == Shared(*args)
    assert hash(Shared(*args)) == hash(Generated(*args))
    assert Shared(*args) != Shared("z", *args[1:])
    assert Shared(*args) != Other(*args)  # another class is never equal, as generated
    assert Shared(*args).__eq__(args) is NotImplemented
    assert {Shared(*args): 1}[Shared(*args)] == 1


def test_a_record_holding_a_mapping_is_unhashable_and_a_loop_is_shown_as_dots() -> None:
    with pytest.raises(TypeError):
        hash(Shared("a", facts={}))
    facts: dict[str, Any] = {}
    looped = Shared("a", facts=facts)
    facts["me"] = looped
    assert repr(looped) == "Shared(name='a', count=0, tags=(), facts={'me': ...})"


def test_the_core_records_compare_hash_and_print_by_their_fields() -> None:
    attempt = Attempt(1, 0.0, 1.0, 0, None, facts=MappingProxyType({}))
    assert AttemptEnded("j", attempt) == AttemptEnded("j", Attempt(1, 0.0, 1.0, 0))
    assert CancelAll("x", StopCause.INTERRUPTED) != CancelAll("x", StopCause.TIMED_OUT)
    assert hash(Location("p.yml", 1, 2)) == hash(("p.yml", 1, 2))
    assert repr(CancelAll("x", StopCause.INTERRUPTED)) == (
        "CancelAll(reason='x', cause=<StopCause.INTERRUPTED: 'interrupted'>)"
    )
    assert str(Location("p.yml", 1, 2)) == "p.yml:1:2"  # a __str__ of its own still wins
    job = Job("a", "a", "true")
    assert repr(job).startswith("Job(id='a', name='a', run='true', index=0, needs=()")
    assert FailureKind.TIMEOUT.value == "timeout"
