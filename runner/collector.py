"""The cyclic garbage collector, held off while a command starts up.

Start-up makes what lives as long as the command: modules, classes, the pipeline. The
collector's passes over it free nothing, and for a big pipeline they are most of the start:
`validate` of a 3,000-job chain took 80-400 ms longer with the collector on (issue 27's note).
runner.launch holds it; the work, once it begins, releases it (`startup_over`).
"""

from __future__ import annotations

import gc

_held = False


def hold() -> None:
    """The collector off until `startup_over()`."""
    global _held
    gc.disable()
    _held = True


def startup_over() -> None:
    """The work begins: what start-up made is kept out of the collector's passes for good
    (gc.freeze) and the collector is on again, if `hold()` switched it off; else nothing."""
    global _held
    if _held:
        _held = False
        gc.freeze()
        gc.enable()
