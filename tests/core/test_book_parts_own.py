"""The parts of the server book own their collections: one part's module touches another
part's kept data (what it assigns on self, not what it shows typed read-only) only where this
list says, each for its reason. A new reach-in fails here: give the owner a method, or show
the collection read-only (mypy --strict then refuses writes to it)."""

from __future__ import annotations

from tests.core.book_figures import CORE, PARTS, data_of, reached

ALLOWED = {
    # The fleet's Exclusions is a small class of its own: its methods do the changing.
    ("hedging.py", "fleet", "excluded"),  # a racer given way to is not rented again
    ("renting.py", "fleet", "excluded"),  # which hosts failed a job: said when none is left
    ("servers.py", "fleet", "excluded"),  # a queue forgives a host after a while (a setting)
    # The book wires the fleet's two callbacks once, when it makes its parts.
    ("servers.py", "fleet", "on_free"),
    ("servers.py", "fleet", "on_idle_end"),
    ("servers.py", "fleet", "look"),  # a decision is due again while a server waits a look
}


def test_no_part_reaches_into_another_parts_data_beyond_the_list() -> None:
    found = set(reached(data_of, PARTS))
    assert found - ALLOWED == set()


def test_the_fleets_own_dicts_are_its_data_and_what_it_shows_read_only_is_not() -> None:
    file, cls = PARTS["fleet"]
    fleet_data = data_of(CORE / file, cls)
    assert {"_servers", "_claims", "look"} <= fleet_data and "servers" not in fleet_data
