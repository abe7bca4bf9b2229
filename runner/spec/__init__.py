"""Pipeline YAML → a validated, expanded Pipeline (pydantic at this edge only)."""
