"""Bounds of the pipeline format that code outside the models checks as well (`--concurrency`)."""

from __future__ import annotations

MAX_MINUTES = 10_000_000  # about 19 years: any real duration, and finite once in seconds
MAX_CONCURRENCY = 1000  # servers (or jobs) at once; --concurrency is held to it as well
MAX_JOB_ID = 100  # characters: an id names files (logs/<id>.log, artifacts/<id>/)
MIN_MINUTES = 0.001  # 60 ms: the shortest timeout; 1e-320 minutes is no duration to wait for
