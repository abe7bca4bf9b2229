"""Bounds of the pipeline format that code outside the models checks as well (`--concurrency`)."""

from __future__ import annotations

MAX_MINUTES = 10_000_000  # about 19 years: any real duration, and finite once in seconds
MAX_CONCURRENCY = 1000  # servers (or jobs) at once; --concurrency is held to it as well
