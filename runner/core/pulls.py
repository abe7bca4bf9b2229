"""Image pulls and the bounds of a boot, pure.

A rented server boots in phases: created, listed, online (the host is alive), deploying (its
container's image pulls: minutes for a large ML image on a first pull, seconds where the
host's cache holds it), deployed, SSH answering. A host that is never online within its bound
is dead; a container deploying is not: its pull is the image's time, shared by every host that
lacks it, so it is bounded by what this image took before (`Pulls`), never blamed on the host.

`BootBounds` says when a boot is given up, from the times the caller passes in; `Pulls` is
what the host history says of each image's pulls (per host: what it took, or at least how long
it ran before it was given up still pulling). Nothing here reads a clock.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

# An image never seen pulls for this long at most: large ML images take 5-20 minutes on a
# first pull (the commonest complaint of GPU CI users), and a pull is progress, not a fault.
DEFAULT_DEPLOY_BOUND_S = 1200.0
# The default image (a CUDA base of a few hundred MB) pulls inside the online bound, as every
# boot's pull always did: nothing on top.
DEFAULT_IMAGE_DEPLOY_S = 0.0
# A known image: this many times its slowest pull seen (a host without it in its cache, a slow
# registry day), and never less than `MIN_DEPLOY_BOUND_S`: a cache that held it may not now.
PULL_BOUND_FACTOR = 2.0
MIN_DEPLOY_BOUND_S = 300.0
# A pull this quick is a cache hit: the host had the image.
CACHED_PULL_S = 30.0

GiveUp = Literal["never_up", "pulling"]


@dataclass(frozen=True)
class BootBounds:
    """How long each phase of a boot may take before the rental is given up."""

    up_s: float  # create -> online: a host not online by then is dead
    deploy_s: float  # what its image's pull may add on top
    total_s: float | None = None  # the job's own `boot-timeout-minutes`: it wins

    @property
    def allowance_s(self) -> float:
        """The longest a boot may take, create -> deployed: what a budget reserves for it."""
        return self.total_s if self.total_s is not None else self.up_s + self.deploy_s

    @property
    def online_s(self) -> float:
        """A host not online this long after its create is dead."""
        return min(self.up_s, self.allowance_s)

    def give_up(self, since_create_s: float, online: bool) -> GiveUp | None:
        """Whether to give the boot up now, and as what: `never_up` (not online in time: the
        host's fault) or `pulling` (online, its container still deploying when the whole
        allowance is spent: the image's time, nobody's fault); None: wait on."""
        if not online:
            return "never_up" if since_create_s >= self.online_s else None
        return "pulling" if since_create_s >= self.allowance_s else None


@dataclass(frozen=True)
class Pulls:
    """Each image's pulls as the host history saw them: image -> host -> seconds."""

    done: Mapping[str, Mapping[str, tuple[float, ...]]] = field(default_factory=dict)
    # Given up (or given back) still pulling: it took at least this long there.
    at_least: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    default_image: str = ""  # what a job that names no image runs (its pulls are this one's)

    def _image(self, image: str) -> str:
        return image or self.default_image

    def known(self, image: str) -> bool:
        image = self._image(image)
        return image in self.done or image in self.at_least

    def on_host_s(self, image: str, host: str) -> float | None:
        """What `image` took to deploy on `host` the last time it deployed there."""
        seen = self.done.get(self._image(image), {}).get(host)
        return seen[-1] if seen else None

    def expected_s(self, image: str, host: str | None = None) -> float | None:
        """What a pull of `image` on `host` is expected to take: its own last pull there, else
        the median of the other hosts' (None: never seen deployed)."""
        if host is not None:
            own = self.on_host_s(image, host)
            if own is not None:
                return own
        others = [pulls[-1] for pulls in self.done.get(self._image(image), {}).values()]
        return statistics.median(others) if others else None

    def slowest_s(self, image: str) -> float | None:
        """The longest `image` was seen to pull anywhere (given-up pulls count at least)."""
        image = self._image(image)
        seen = [p for pulls in self.done.get(image, {}).values() for p in pulls]
        seen += self.at_least.get(image, {}).values()
        return max(seen) if seen else None

    def deploy_bound_s(self, image: str, default_s: float = DEFAULT_DEPLOY_BOUND_S) -> float:
        """What a deploy of `image` may add to the online bound: `PULL_BOUND_FACTOR` times its
        slowest pull seen (at least `MIN_DEPLOY_BOUND_S`), or `default_s` for an image never
        seen; the default image's pull fits inside the online bound."""
        if self._image(image) == self.default_image and self.default_image:
            return DEFAULT_IMAGE_DEPLOY_S
        slowest = self.slowest_s(image)
        if slowest is None:
            return default_s
        return max(MIN_DEPLOY_BOUND_S, PULL_BOUND_FACTOR * slowest)

    def cached(self, image: str, host: str) -> bool:
        """Did `host` deploy `image` in cache time the last time (its cache holds it)?"""
        own = self.on_host_s(image, host)
        return own is not None and own <= CACHED_PULL_S


def image_allowance_s(
    pulls: Pulls, image: str, online_s: float, deploy_s: float | None = None
) -> float:
    """The longest a boot of `image` may take, create -> deployed, a job's own bound aside:
    online within `online_s`, then what its own pull may add (`deploy_s` where the run sets
    one). What `run`'s book reserves for a rent for a job of `image`, what the adapter waits
    for it, and what `plan` prices: one figure. Per image, not per host: the adapter gives a
    boot up at its image's bound on any host, so a host whose cache holds the image is
    quicker, never bounded shorter. A server is only ever given to jobs of the image it was
    started with, so a job never pulls on a server of another image: its own rent does."""
    return online_s + (pulls.deploy_bound_s(image) if deploy_s is None else deploy_s)


def boot_bounds(
    pulls: Pulls, image: str, up_s: float, job_bound_s: float | None = None
) -> BootBounds:
    """The bounds of a boot of `image`: online within `up_s`, deployed within that and what
    its pulls add; a job's own boot bound (`boot-timeout-minutes`) wins over both."""
    return BootBounds(up_s, pulls.deploy_bound_s(image), job_bound_s)
