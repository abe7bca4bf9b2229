"""clore-run: run pipelines of GPU jobs on rented Clore.ai servers."""

__version__ = "0.1.0"
