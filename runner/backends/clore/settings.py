"""What a pipeline file says to Clore alone: its keys, declared here for the registry (the
file's models accept them from there), and the settings object that carries them from the
loaded pipeline to the backend.

Light (stdlib and the spec's types): the registry, loaded by every command, imports it.
"""

from __future__ import annotations

from dataclasses import dataclass

from runner.backends.spec import PipelineKey
from runner.core.model import Job, Pipeline

CURRENCIES = ("bitcoin", "CLORE-Blockchain", "USD-Blockchain")

CURRENCY = PipelineKey(
    name="currency",
    level="pipeline",
    choices=CURRENCIES,
    description="What orders are paid in.",
    default="CLORE-Blockchain",
    hint="bitcoin, CLORE-Blockchain or USD-Blockchain",
)
# Images: Clore's entrypoint starts sshd with our key (`autossh_entrypoint`), so that any image
# answers SSH; only an image that runs its own sshd may turn it off.
SSH = PipelineKey(
    name="ssh",
    level="job",
    choices=("clore", "image"),
    description="Who runs sshd on a rented server: `clore` (default: Clore's entrypoint "
    "starts it, so any image works) or `image` (the image runs its own).",
)
KEYS = (CURRENCY, SSH)
# A plain CUDA image: with `autossh_entrypoint` Clore runs sshd in any image, so the default
# need not be one of Clore's own.
DEFAULT_IMAGE = "nvidia/cuda:12.8.0-base-ubuntu22.04"


@dataclass(frozen=True)
class CloreSettings:
    """The run's Clore keys, read once from the loaded pipeline (defaults applied)."""

    currency: str = "CLORE-Blockchain"

    @classmethod
    def of(cls, pipeline: Pipeline) -> CloreSettings:
        return cls(currency=pipeline.backend_keys.get(CURRENCY.name, cls.currency))


def image_runs_sshd(job: Job) -> bool:
    """`ssh: image`: the job's image runs its own sshd, so no Clore entrypoint around it."""
    return job.backend_keys.get(SSH.name) == "image"
