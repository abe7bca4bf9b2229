"""What the compiled validators make (runner.spec.checks): a checked mapping's fields as
attributes, under the names of the pydantic models they stand for.

pydantic_core builds these as it builds a model: it fills `__dict__` with the fields by their
Python names and records which were given. They are read as the models are (`spec.needs`,
`gpu.model_fields_set`), and nothing else: no pydantic is loaded to make them.
"""

from __future__ import annotations

from typing import Any


class Record:
    __slots__ = (
        "__dict__",
        "__pydantic_extra__",
        "__pydantic_fields_set__",
        "__pydantic_private__",
    )
    __pydantic_fields_set__: set[str]

    @property
    def model_fields_set(self) -> set[str]:
        """The fields the file gave (the others hold their defaults), as on a model."""
        return self.__pydantic_fields_set__

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({fields})"

    def __eq__(self, other: Any) -> bool:
        return type(other) is type(self) and vars(other) == vars(self)

    __hash__ = None  # type: ignore[assignment]


class GpuSpec(Record):
    __slots__ = ()


class Strategy(Record):
    __slots__ = ()


class Defaults(Record):
    __slots__ = ()


class JobSpec(Record):
    __slots__ = ()


class PipelineHeader(Record):
    __slots__ = ()
