"""What a server tells about itself for the report: GPU model, driver and CUDA version.

All optional: a CPU-only box or an image without `nvidia-smi` just yields fewer facts.
"""

from __future__ import annotations

import re
from collections import Counter

from runner.backends.ssh.connection import SshConnection

_QUERY = """command -v nvidia-smi >/dev/null 2>&1 || exit 0
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null
nvidia-smi 2>/dev/null | grep -o 'CUDA Version: *[0-9.]*'
exit 0
"""
_CUDA = re.compile(r"CUDA Version: *([0-9.]+)")


def gpu_facts(conn: SshConnection, timeout_s: float = 20.0) -> dict[str, str]:
    """GPU facts of the server behind `conn` (empty when it has no NVIDIA tooling)."""
    result = conn.run(_QUERY, timeout_s=timeout_s)
    return parse_gpu_facts(result.stdout.decode("utf-8", "replace"))


def parse_gpu_facts(text: str) -> dict[str, str]:
    """Facts from the output of `_QUERY`: one `name, driver` line per GPU, then the CUDA line."""
    names: Counter[str] = Counter()
    facts: dict[str, str] = {}
    for line in text.splitlines():
        cuda = _CUDA.search(line)
        if cuda:
            facts["cuda"] = cuda.group(1)
        elif "," in line:
            name, driver = (part.strip() for part in line.rsplit(",", 1))
            names[name] += 1
            facts["driver"] = driver
    if names:
        facts["gpu"] = ", ".join(f"{n} x {name}" if n > 1 else name for name, n in names.items())
        facts["gpu_count"] = str(sum(names.values()))
    return facts
