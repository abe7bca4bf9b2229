"""Help and parse errors in a person's words, not Python's.

Typer 0.29 spells each option's type as Python does in help (`<bool>`, `<list[Path]>`, an argument
as `{pipeline}`) and passes pydantic's messages through as parse errors (`Input should be a valid
integer, unable to parse string as an integer`). The command tree gets plain metavars once it is
built, and a parse error's message is reworded from pydantic's error type before it is shown.
"""

from __future__ import annotations

import inspect
import types
from pathlib import Path
from typing import Any, Union, get_args, get_origin

_TYPE_WORDS: dict[object, str] = {int: "N", float: "NUMBER", str: "TEXT", Path: "PATH"}


def plain_metavars(root: Any) -> None:
    """Give every parameter of `root` and its subcommands without a metavar of its own a plain
    one: nothing for a flag, `PIPELINE` for an argument, `N`, `NUMBER`, `TEXT`, `PATH`."""
    names = (root.context_settings or {}).get("help_option_names", ["--help"])
    todo = [root]
    while todo:
        command = todo.pop()
        todo.extend(getattr(command, "commands", {}).values())
        # `--help` is made (and kept) on first use: make it now, to word it too.
        command.help = unwrapped(command.help)
        made = command.get_help_option(command.context_class(command, help_option_names=names))
        for param in [*getattr(command, "params", ()), *([made] if made else [])]:
            if type(param).__name__ == "TyperArgument":
                # Its name says what it is; Typer would add `<list[Path]>` in a column of its own.
                param.metavar = param.metavar or str(param.name).upper()
                param.display_type_rich = _no_type
                continue
            described = getattr(param, "type_descriptor", None)
            if param.metavar is not None or described is None or described.is_choice:
                continue
            param.metavar = _metavar(param, described)


def unwrapped(text: str | None) -> str | None:
    """A docstring's paragraphs without its hard line breaks: the help's table of commands cut
    a sentence where the source line ended (`...first; hosts` / `that failed...`), not where
    the terminal does. Blank lines (paragraphs) stay."""
    if not text:
        return text
    paragraphs = inspect.cleandoc(text).split("\n\n")
    return "\n\n".join(" ".join(p.split()) for p in paragraphs)


def _no_type(ctx: object = None) -> str:
    return ""


def _metavar(param: Any, described: Any) -> str:
    if getattr(param, "is_flag", False):
        return ""
    return _TYPE_WORDS.get(_bare(described.annotation), "VALUE")


def _bare(annotation: Any) -> Any:
    """`list[Path]` and `Path | None` -> Path."""
    origin = get_origin(annotation)
    if origin is list:
        return _bare(get_args(annotation)[0])
    if origin is Union or origin is types.UnionType:
        kept = [a for a in get_args(annotation) if a is not type(None)]
        return _bare(kept[0]) if len(kept) == 1 else annotation
    return annotation


def reword(exc: BaseException) -> None:
    """A parse error whose message is pydantic's (`unable to parse string as an integer`) gets
    words instead (`'abc' is not a whole number`). Anything else is left as it is."""
    cause = exc.__cause__
    errors = getattr(cause, "errors", None)
    if not callable(errors) or not hasattr(exc, "message"):
        return
    found = errors()
    if found:
        exc.message = _words(found[0])


def _words(error: dict[str, Any]) -> str:
    kind = str(error.get("type", ""))
    given = error.get("input")
    limits = error.get("ctx") or {}
    shown = repr(given) if isinstance(given, str) else str(given)
    if kind.startswith("int_"):
        return f"{shown} is not a whole number"
    if kind.startswith("float_") or kind == "finite_number":
        return f"{shown} is not a number"
    if kind.startswith("bool_"):
        return f"{shown} is not true or false"
    for key, words in (
        ("ge", "at least"),
        ("gt", "more than"),
        ("le", "at most"),
        ("lt", "less than"),
    ):
        if key in limits:
            return f"{shown}: must be {words} {limits[key]}"
    message = str(error.get("msg", "")).removeprefix("Value error, ")
    return message.replace("Input should be", "should be")
