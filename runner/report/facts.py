"""Names of the host facts a backend may record on an `Attempt` (`Attempt.facts`).

Backends fill what they know and leave the rest out: a missing key simply means "unknown", never an
empty string to be shown. All values are strings, as `Attempt.facts` is `Mapping[str, str]`.

    gpu               GPU model as nvidia-smi (or the marketplace) names it    RTX 4090
    gpu_count         number of GPUs on the server                             2
    driver            NVIDIA driver version from nvidia-smi                    550.54.15
    cuda              CUDA version from nvidia-smi                             12.4
    host_fingerprint  SHA256 fingerprint of the SSH host key we connected to   SHA256:abc...
    server_id         the marketplace's server id                              12345
    usd_per_hour      what the whole server costs per hour, in USD             0.35
    order_currency    what the order was paid in                               CLORE-Blockchain
    cost_native       the attempt's cost in order_currency                     12.5
"""

from __future__ import annotations

from collections.abc import Mapping

from runner.core.model import Attempt, JobResult

GPU = "gpu"
GPU_COUNT = "gpu_count"
DRIVER = "driver"
CUDA = "cuda"
HOST_FINGERPRINT = "host_fingerprint"
SERVER_ID = "server_id"
USD_PER_HOUR = "usd_per_hour"
ORDER_CURRENCY = "order_currency"
COST_NATIVE = "cost_native"

# The facts that describe the machine (as opposed to the money), in display order.
# Set by `serve` on an attempt placed on a server it kept warm ("true"), and the seconds the
# job waited for its server; the summary's warm_server and server_wait_s are read from them.
WARM_SERVER = "warm_server"
SERVER_WAIT_S = "server_wait_s"
HOST_KEYS = (GPU, GPU_COUNT, DRIVER, CUDA, HOST_FINGERPRINT, SERVER_ID)


def last_facts(result: JobResult) -> Mapping[str, str]:
    """Facts of the attempt that decided the job's status (the last one), or none."""
    return result.attempts[-1].facts if result.attempts else {}


def usd_per_hour(attempt: Attempt) -> float | None:
    """The attempt's hourly price, or None when unknown or not a number."""
    return to_float(attempt.facts.get(USD_PER_HOUR))


def to_float(value: str | None) -> float | None:
    """Parse a fact as a finite float; facts come from remote servers, so be lenient."""
    if value is None:
        return None
    try:
        number = float(value)
    except ValueError:
        return None
    return number if number == number and abs(number) != float("inf") else None


def gpu_label(facts: Mapping[str, str]) -> str:
    """`RTX 4090 x2` style label, or "" when the GPU is unknown."""
    gpu = facts.get(GPU, "")
    count = facts.get(GPU_COUNT, "")
    if gpu and count and count != "1":
        return f"{gpu} x{count}"
    return gpu
