"""`clore-run serve`: a persistent GPU job queue with a REST API, and its client commands."""

# Here rather than in client.py so that the CLI can show it as a default without importing
# requests for every command.
DEFAULT_SERVER = "http://127.0.0.1:8000"
