"""The rental record: what `start` hands to `stop` (a job output) and to the reaper (an artifact).

Start and stop run on different machines, and the reaper on a third, so the record is all they
share. It holds what proves an order is ours and what its bill needs, and nothing secret: no
API key, no token, no JIT config (`test_the_config_never_appears` scans for them).

Proof: an order id is unique to the API key, and `stop` cancels an order only when `my_orders`
lists it with the record's server (`si`) and creation time (`ct`) too, so a stale or mistyped
record cannot cancel another run's order. The record is strict input (a person can paste it):
unknown keys and wrong types are refused with the key path.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from runner.errors import UsageError

RECORD_VERSION: Literal[1] = 1
GRACE_S = 300.0  # past the cap, a stop job may still be cancelling: the reaper leaves it so long
MAX_LIFE_S = 24 * 3600.0  # no runner lives longer than this from its create, whatever a record says
ARTIFACT_PREFIX = "clore-runner-record-"  # + the first label: the action's artifact
RECORD_FILE = "record.json"  # its one file


class RecordError(UsageError):
    """The rental record given to `stop` is not one `start` wrote."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class RunnerRental(_Strict):
    """One runner on one rented server."""

    # What the user's job puts in `runs-on` (it names an artifact and a folder on the server).
    label: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
    runner_id: int  # GitHub's id of the JIT registration
    # Where it is registered: part of the API paths stop calls with the runner token.
    scope: str = Field(pattern=r"^(repos/[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+|orgs/[A-Za-z0-9_.-]+)$")
    order_id: int
    server_id: int
    created_unix: int  # the order's `ct` (the API's clock, whole seconds)
    cap_unix: float  # created + max-minutes: past it the reaper cancels the order
    run_id: str
    currency: str
    spot: bool
    usd_per_unit: float  # USD for one unit of `currency`, by the server's own quotes
    fee_rate: float  # the renter's fee on top of `spend`
    creation_fee_native: float  # charged once the order lives 10 minutes
    usd_per_hour: float  # listed price with the renter's fee, for the report
    gpus: str = ""
    # Its worst case reserved in the start's budget pool (`pool`): stop settles it.
    reservation_id: int | None = None


class PoolClaim(_Strict):
    """The budget pool a start reserved in: its lease (holder and fencing token), which stop
    settles the runners' reservations under and then ends. Not secret: the coordinator's URL
    is not in it, stop has its own."""

    name: str
    holder: str
    token: int
    ttl_s: float


class RunnerRecord(_Strict):
    version: Literal[1] = RECORD_VERSION
    runners: tuple[RunnerRental, ...]
    pool: PoolClaim | None = None

    def to_json(self) -> str:
        """One line: it travels as a job output."""
        data = self.model_dump(mode="json", exclude_none=True)
        return json.dumps(data, separators=(",", ":"), sort_keys=True)

    @property
    def labels(self) -> list[str]:
        return [r.label for r in self.runners]


def parse_record(text: str, where: str = "the runner record") -> RunnerRecord:
    """The record `start` wrote, or RecordError naming the key that is wrong."""
    if not text.strip():
        raise RecordError(
            f"{where} is empty",
            "pass the start job's output: runner-record: ${{ needs.start.outputs.record }}",
        )
    try:
        json.loads(text)
    except json.JSONDecodeError as exc:
        raise RecordError(f"{where} is not JSON: line {exc.lineno} column {exc.colno}") from None
    try:  # JSON mode: an array is a tuple, an integer may be a float
        return RunnerRecord.model_validate_json(text)
    except ValidationError as exc:
        first = exc.errors()[0]
        path = ".".join(str(p) for p in first["loc"]) or "(top)"
        raise RecordError(
            f"{where}: {path}: {first['msg']}", "use the record `start` wrote"
        ) from None


# What became of a record's order when it was given back: cancelled (proven ours), ended by
# itself, not in the key's orders, not ours (the proof failed: left), still live after its
# cancel, or an API error (left for the reaper).
Kind = Literal["cancelled", "ended", "not-listed", "not-ours", "still-live", "error"]


class Bill(Protocol):
    """One order's cost in USD as the wallet loses it, in its parts (the backend's bill)."""

    @property
    def rental_usd(self) -> float: ...
    @property
    def renter_fee_usd(self) -> float: ...
    @property
    def creation_fee_usd(self) -> float: ...
    @property
    def total_usd(self) -> float: ...


@dataclass(frozen=True)
class Released:
    """A record's server given back (`runner stop`, the reaper): by the backend that hosted it."""

    rental: RunnerRental
    kind: Kind
    detail: str = ""
    cost: Bill | None = None
    estimated: bool = False  # the API gave no `spend`: our own figure
    lived_s: float = 0.0

    @property
    def settled(self) -> bool:
        """Nothing of this rental can be billed any more (or it was never ours to cancel)."""
        return self.kind in ("cancelled", "ended", "not-listed", "not-ours")


@dataclass(frozen=True)
class Reaped:
    rental: RunnerRental
    released: Released | None  # None: not cancelled (within its cap, not proven, a dry run)
    note: str = ""
    # A live order of this key that a record names but does not prove: it may be ours (the
    # record's) or another run's on the same key. Named and left, or cancelled on purpose.
    unproven: bool = False
