"""pydantic without third-party plugins: clore-run's input checks are its own.

The first time pydantic builds a validator it looks for plugins, the `pydantic` entry points of
every installed distribution. Importing importlib.metadata for that and reading every
distribution's metadata took a sixth of `clore-run validate`, and no plugin has any business
watching (or changing) how a pipeline file or a command line is checked. `install()` puts a
module in place of pydantic's plugin loader (pydantic.plugin._loader) that finds none.

Its only name of its own is `get_plugins`, which is how pydantic asks; any other name pydantic
may want from that module in a later version is looked up in the real module, loaded then, so a
change there costs the speed-up, never a failure. Call `install()` before pydantic builds its
first validator; once the real loader is imported it does nothing.
"""

from __future__ import annotations

import importlib.util
import sys
import types
from collections.abc import Iterable
from typing import Any

LOADER = "pydantic.plugin._loader"


class _NoPlugins(types.ModuleType):
    def get_plugins(self) -> Iterable[Any]:
        return ()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):  # the import system asking (`__path__`): a plain module
            raise AttributeError(name)
        return getattr(_real_loader(), name)


def install() -> bool:
    """Take the place of pydantic's plugin loader. False when it was already imported."""
    if LOADER in sys.modules:
        return isinstance(sys.modules[LOADER], _NoPlugins)
    sys.modules[LOADER] = _NoPlugins(LOADER, __doc__)
    return True


def _real_loader() -> types.ModuleType:
    real = sys.modules.get(f"{LOADER}.__real__")
    if real is None:
        plugin = importlib.import_module("pydantic.plugin")
        spec = importlib.util.spec_from_file_location(
            f"{LOADER}.__real__", f"{plugin.__path__[0]}/_loader.py"
        )
        assert spec is not None and spec.loader is not None
        real = importlib.util.module_from_spec(spec)
        real.__package__ = "pydantic.plugin"
        sys.modules[f"{LOADER}.__real__"] = real
        spec.loader.exec_module(real)
    return real
