"""The validators the loader checks a file's parts with: compiled ahead of time, or the models'.

Both are pydantic's: `CompiledChecks` runs pydantic_core over the core schemas pydantic made of
runner.spec.models (runner/spec/compiled_models.py, written by runner.spec.schema_compiler), so
`clore-run validate` and `run` load neither pydantic nor the models, which took more than half of
`validate`. They are used only while their stamp says they were made from the models, the
conversions and the pydantic installed now; otherwise (a model edited and not compiled again,
another pydantic) `ModelChecks` validates with the models themselves, slower and the same.

Either raises pydantic_core's ValidationError (pydantic's is the same class), `invalid`, and
gives the key table that "did you mean" reads.

The compiled path loads pydantic_core's compiled module alone (`core()`), without the package's
`__init__`, whose typing half (core_schema: a TypedDict for every kind of schema, used only by
type checkers and by pydantic's schema generation) took a quarter of `validate`. It is loaded under
its own name, so a pydantic imported later in the process finds it and uses the same module.
"""

from __future__ import annotations

import binascii
import functools
import importlib.machinery
import importlib.util
import re
import sys
import types
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

if TYPE_CHECKING:
    from pydantic_core import SchemaValidator, ValidationError

ModelName = Literal["PipelineHeader", "Strategy", "JobSpec", "Defaults"]
LOADER_MODELS: tuple[ModelName, ...] = ("PipelineHeader", "Strategy", "JobSpec", "Defaults")
# model name -> (its keys as written in YAML, {key: the model name of the mapping it holds})
KeyTable = dict[str, tuple[list[str], dict[str, str]]]

HERE = Path(__file__).parent
COMPILED = HERE / "compiled_models.py"
_SOURCES = ("models.py", "coercions.py")
_PYDANTIC_VERSION = re.compile(r"^VERSION = ['\"]([^'\"]+)['\"]", re.M)
_CORE = "pydantic_core._pydantic_core"


class Checks(Protocol):
    keys: KeyTable
    invalid: type[ValidationError]

    def validate(self, model: ModelName, data: Any) -> Any:
        """The model's validated value (its fields as attributes), or ValidationError."""
        ...


class CompiledChecks:
    """pydantic_core over the shipped core schemas; each validator built on first use."""

    def __init__(self, schemas: dict[str, tuple[Any, Any]], keys: KeyTable) -> None:
        self._schemas = schemas
        self._validators: dict[str, SchemaValidator] = {}
        self.keys = keys
        self.invalid = core().ValidationError

    def validate(self, model: ModelName, data: Any) -> Any:
        validator = self._validators.get(model)
        if validator is None:
            schema, config = self._schemas[model]
            validator = self._validators[model] = core().SchemaValidator(schema, config)
        return validator.validate_python(data)


class ModelChecks:
    """The pydantic models themselves (pydantic loads with the first use)."""

    def __init__(self) -> None:
        from pydantic_core import ValidationError

        from runner.spec import models
        from runner.spec.schema_compiler import key_table

        self._models = models
        self.keys = key_table()
        self.invalid = ValidationError

    def validate(self, model: ModelName, data: Any) -> Any:
        return getattr(self._models, model).model_validate(data)


@functools.cache
def default_checks() -> Checks:
    """The compiled validators when they are current, else the models'."""
    return compiled_checks() or ModelChecks()


def compiled_checks() -> CompiledChecks | None:
    """The shipped validators, or None when they were not made from what is installed now."""
    try:
        from runner.spec import compiled_models as shipped
    except (ImportError, AttributeError):  # a name it uses is gone: made from other sources
        return None
    if getattr(shipped, "STAMP", None) != stamp():
        return None
    return CompiledChecks(shipped.SCHEMAS, shipped.KEYS)


def stamp() -> str:
    """What the compiled validators depend on: the models' sources and both pydantics.

    A CRC-32 and the length of the sources: the stamp only catches a file edited and not
    compiled again (whoever could forge a match could edit compiled_models.py itself), and
    hashlib's OpenSSL module took as long to load as the rest of the check."""
    sources = b"".join((HERE / name).read_bytes() for name in _SOURCES)
    digest = f"crc32 {binascii.crc32(sources):08x} length {len(sources)}"
    return f"{digest} pydantic {_pydantic_version()} core {_core_version()}"


def _pydantic_version() -> str:
    """pydantic's version, read from its version.py: importing pydantic is what is saved."""
    spec = importlib.util.find_spec("pydantic")
    if spec is None or not spec.submodule_search_locations:
        return "none"
    try:
        text = (Path(spec.submodule_search_locations[0]) / "version.py").read_text("utf-8")
    except OSError:
        return "unknown"
    found = _PYDANTIC_VERSION.search(text)
    return found.group(1) if found else "unknown"


def _core_version() -> str:
    return str(core().__version__)


def core() -> types.ModuleType:
    """pydantic_core's compiled module (SchemaValidator, ValidationError): the one pydantic uses
    when it is loaded already, else loaded alone from beside the package (see the docstring)."""
    loaded = sys.modules.get(_CORE)
    if loaded is not None:
        return loaded
    spec = _core_spec()
    if spec is None or spec.loader is None:  # not where it is expected: the package finds it
        import pydantic_core._pydantic_core as compiled

        return compiled
    module = importlib.util.module_from_spec(spec)  # initialised now: it must not be loaded again
    sys.modules[_CORE] = module
    spec.loader.exec_module(module)
    return module


def _core_spec() -> importlib.machinery.ModuleSpec | None:
    package = importlib.util.find_spec("pydantic_core")  # finds the folder, runs nothing
    if package is None or not package.submodule_search_locations:
        return None
    folder = Path(package.submodule_search_locations[0])
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = folder / f"_pydantic_core{suffix}"
        if path.is_file():
            return importlib.util.spec_from_file_location(_CORE, path)
    return None
