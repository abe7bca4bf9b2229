"""The Clore.ai backend: the REST client (`api`), reply models, rate limiter and offer choice."""
