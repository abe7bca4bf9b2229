"""`clore-run serve`: a persistent GPU job queue with a REST API, and its client commands."""
