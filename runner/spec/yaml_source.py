"""Read a pipeline YAML keeping the line and column of every node.

PyYAML's composer gives us nodes with marks; we build plain Python values from them and a side
table from key path to position. Duplicate keys, which PyYAML accepts silently (the last one
wins), are reported here, because a repeated job name must not pass unnoticed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import yaml

from runner.spec.diagnostics import Diagnostic, KeyPath, SpecError


@dataclass
class Source:
    """A parsed file: its plain data and where each key and value sits (1-based)."""

    file: str
    data: Any
    value_at: dict[KeyPath, tuple[int, int]] = field(default_factory=dict)
    key_at: dict[KeyPath, tuple[int, int]] = field(default_factory=dict)
    # Plain scalars YAML 1.1 read as something else than their text (`3.10` -> 3.1, `yes` ->
    # True, `010` -> 8, `12:30` -> 750), by key path: the loader warns where a string was meant.
    retyped: dict[KeyPath, tuple[str, Any]] = field(default_factory=dict)
    # Problems found while reading that leave the data whole (a duplicate key: the first one
    # kept), reported with the rest of the file's problems rather than alone.
    problems: list[Diagnostic] = field(default_factory=list)

    def locate(self, path: KeyPath, *, key: bool = False) -> tuple[int, int]:
        """Position of the node at `path`, or of its nearest existing ancestor."""
        table = self.key_at if key else self.value_at
        probe = tuple(path)
        while probe:
            if probe in table:
                return table[probe]
            if not key and probe in self.key_at:
                return self.key_at[probe]
            probe = probe[:-1]
        return self.value_at.get((), (1, 1))

    def error(
        self, path: KeyPath, message: str, hint: str = "", *, key: bool = False
    ) -> Diagnostic:
        line, column = self.locate(path, key=key)
        return Diagnostic(self.file, line, column, path, message, hint)


def _mark(node: yaml.Node) -> tuple[int, int]:
    return node.start_mark.line + 1, node.start_mark.column + 1


# libyaml when PyYAML was built with it: the same nodes and marks, parsed faster.
_LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
MAX_NODES = 200_000
_MERGE_TAG = "tag:yaml.org,2002:merge"
_STR_TAG = "tag:yaml.org,2002:str"
_PLAIN = frozenset({"tag:yaml.org,2002:map", "tag:yaml.org,2002:seq"})  # other tags: not ignored
MAX_DEPTH = 64


class _Builder:
    """Turns a composed node tree into plain values, iteratively (deep files are fine)."""

    def __init__(self, source: Source, loader: yaml.SafeLoader) -> None:
        self.source = source
        self.loader = loader
        self.problems: list[Diagnostic] = []

    def build(self, root: yaml.Node) -> Any:
        holder: dict[str, Any] = {}
        stack: list[tuple[yaml.Node, KeyPath, Any, Any]] = [(root, (), holder, "root")]
        built = 0
        while stack:
            node, path, parent, slot = stack.pop()
            built += 1
            if built > MAX_NODES or len(path) > MAX_DEPTH:  # recursive aliases, alias bombs
                line, col = _mark(node)
                raise SpecError(
                    [
                        Diagnostic(
                            self.source.file,
                            line,
                            col,
                            path,
                            "the document is too large",
                            f"at most {MAX_NODES} nodes, {MAX_DEPTH} levels; no recursive aliases",
                        )
                    ]
                )
            self.source.value_at[path] = _mark(node)
            value = self._shell(node)
            parent[slot] = value
            if isinstance(node, yaml.ScalarNode) and not node.style and _retyped(node, value):
                self.source.retyped[path] = (str(node.value), value)
            if isinstance(node, yaml.MappingNode):
                stack.extend(self._mapping_children(node, path, value))
            elif isinstance(node, yaml.SequenceNode):
                stack.extend((child, (*path, i), value, i) for i, child in enumerate(node.value))
        return holder["root"]

    def _shell(self, node: yaml.Node) -> Any:
        if isinstance(node, (yaml.MappingNode, yaml.SequenceNode)) and node.tag not in _PLAIN:
            raise yaml.constructor.ConstructorError(
                None, None, f"unsupported tag '{node.tag}'", node.start_mark
            )
        if isinstance(node, yaml.MappingNode):
            return {}
        if isinstance(node, yaml.SequenceNode):
            return [None] * len(node.value)
        return self._scalar(node)

    def _scalar(self, node: yaml.Node) -> Any:
        # A string is its node's text: what the constructor would return, without the
        # constructor's bookkeeping, for most of a file's scalars (keys, scripts, names).
        if node.tag == _STR_TAG and type(node) is yaml.ScalarNode:
            return node.value
        return self.loader.construct_object(node, deep=True)

    def _mapping_children(
        self, node: yaml.MappingNode, path: KeyPath, value: dict[Any, Any]
    ) -> list[tuple[yaml.Node, KeyPath, Any, Any]]:
        children = []
        first_at: dict[Any, tuple[int, int]] = {}
        merged, own = self._merge_pairs(node, 0)
        for key_node, value_node in own:
            key = self._scalar(key_node)
            if not isinstance(key, (str, int, float, bool)) or key is None:
                line, col = _mark(key_node)
                self.problems.append(
                    Diagnostic(self.source.file, line, col, path, "keys must be plain strings")
                )
                continue
            key = key if isinstance(key, str) else str(key_node.value)  # `on`, not True
            child_path = (*path, key)
            if key in first_at:
                line, col = _mark(key_node)
                first = first_at[key][0]
                self.problems.append(
                    Diagnostic(
                        self.source.file,
                        line,
                        col,
                        child_path,
                        f"duplicate key '{key}': first defined on line {first}",
                        "remove or rename one of them",
                    )
                )
                continue
            first_at[key] = _mark(key_node)
            self.source.key_at[child_path] = _mark(key_node)
            value[key] = None
            children.append((value_node, child_path, value, key))
        # `<<` merges: the mapping's own keys win, then the first source; a merged key goes
        # first, like PyYAML's flatten_mapping does it.
        taken = set(first_at)
        for key_node, value_node in reversed(merged):
            key = self._scalar(key_node)
            if not isinstance(key, (str, int, float, bool)) or key is None:
                continue  # reported where the merged mapping itself is built
            key = key if isinstance(key, str) else str(key_node.value)  # `on`, not True
            if key in taken:
                continue
            taken.add(key)
            child_path = (*path, key)
            self.source.key_at[child_path] = _mark(key_node)
            children.append((value_node, child_path, value, key))
        if merged:
            order = [slot for _, _, _, slot in reversed(children[len(first_at) :])]
            rebuilt = {k: None for k in (*order, *value)}
            value.clear()
            value.update(rebuilt)
        return children

    def _merge_pairs(self, node: yaml.MappingNode, depth: int) -> tuple[list[Any], list[Any]]:
        """(pairs merged in with `<<`, later ones win; the mapping's own pairs)."""
        merged: list[Any] = []
        own: list[Any] = []
        for key_node, value_node in node.value:
            if key_node.tag != _MERGE_TAG:
                own.append((key_node, value_node))
                continue
            sources = (
                value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
            )
            for source in reversed(sources):  # the first source wins: it goes last
                if not isinstance(source, yaml.MappingNode):
                    raise yaml.constructor.ConstructorError(
                        "while building a merge",
                        node.start_mark,
                        "`<<` takes a mapping or a list of mappings",
                        source.start_mark,
                    )
                if depth >= MAX_DEPTH:
                    raise yaml.constructor.ConstructorError(
                        None, None, "merges nested too deeply", source.start_mark
                    )
                inner_merged, inner_own = self._merge_pairs(source, depth + 1)
                merged.extend(inner_merged)
                merged.extend(inner_own)
                if len(merged) > MAX_NODES:
                    raise yaml.constructor.ConstructorError(
                        None, None, "too many merged keys", source.start_mark
                    )
        return merged, own


def _retyped(node: yaml.ScalarNode, value: Any) -> bool:
    """True when YAML 1.1 made the plain scalar `node` into a value that reads differently."""
    text = str(node.value)
    if isinstance(value, bool):
        return text.lower() not in ("true", "false")
    if isinstance(value, (int, float)):
        return str(value) != text.removeprefix("+")
    return False


def parse_yaml(text: str, file: str) -> Source:
    """Parse `text`; raise SpecError with located problems (syntax, empty). Duplicate keys and
    the like are in `problems`, for the loader to report with everything else it finds."""
    source = Source(file=file, data=None)
    loader = _LOADER(text)
    try:
        root = loader.get_single_node()
        if root is None:
            raise SpecError([Diagnostic(file, 1, 1, (), "the file is empty", "add a `jobs:` map")])
        builder = _Builder(source, loader)
        source.data = builder.build(root)
    except yaml.MarkedYAMLError as exc:
        raise SpecError([_syntax_diagnostic(exc, file, text)]) from None
    except yaml.YAMLError as exc:
        raise SpecError([Diagnostic(file, 1, 1, (), f"not valid YAML: {exc}")]) from None
    finally:
        loader.dispose()
    source.problems = builder.problems
    return source


def _syntax_diagnostic(exc: yaml.MarkedYAMLError, file: str, text: str) -> Diagnostic:
    problem = exc.problem or "syntax error"
    # At the end of the stream the problem mark is useless; the context (an opening quote or
    # bracket) is where the user has to look. libyaml words it differently from PyYAML and,
    # without a final newline, puts the mark on a line past the end: compare positions too.
    last_line = text.count("\n")
    end = (last_line, len(text) - text.rfind("\n") - 1)
    past_end = exc.problem_mark is not None and (
        (exc.problem_mark.line, exc.problem_mark.column) >= end
    )
    at_end = past_end or "end of stream" in problem or "<stream end>" in problem
    mark = (
        (exc.context_mark or exc.problem_mark) if at_end else (exc.problem_mark or exc.context_mark)
    )
    line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
    if line > last_line + 1:  # never point past the file
        line, col = last_line + 1, end[1] + 1
    hint = ""
    if _char_at(text, line, col) == "\t" or "\\t" in problem or "\t" in problem:
        hint = "indent with spaces, not tabs"
    elif exc.context and "quoted" in exc.context:
        hint = "close the quote"
    elif "mapping values are not allowed" in problem:
        hint = _colon_hint(text, line)
    elif "expected ','" in problem:
        hint = _unclosed_hint(exc, text, line, col)
    what = f"{exc.context}, {problem}" if exc.context else problem
    return Diagnostic(file, line, col, (), f"not valid YAML: {what}", hint)


def _unclosed_hint(exc: yaml.MarkedYAMLError, text: str, line: int, col: int) -> str:
    """A flow collection (`[...]`, `{...}`) that found no `,` or closing bracket. Opened on an
    earlier line, it was never closed: say where it opened, not a hint about ': ', which only
    applies where `{run: a: b}` put a colon inside a value on the line it opened on."""
    opened = exc.context_mark
    bracket = _char_at(text, opened.line + 1, opened.column + 1) if opened else ""
    closing = {"[": "]", "{": "}"}.get(bracket, "")
    at_opening = opened is not None and (opened.line + 1, opened.column + 1) == (line, col)
    if opened is not None and closing and (opened.line + 1 < line or at_opening):
        # the file ended, or went on to other lines, before the bracket closed
        return f"close the `{bracket}` opened on line {opened.line + 1} with `{closing}`"
    if _char_at(text, line, col) == ":":  # {run: a: b}
        return "a value holding ': ' must be quoted; a script is best a block, `run: |`"
    return ""


_KEY_AND_VALUE = r"^\s*(?:-\s+)?([A-Za-z_][\w-]*):\s+\S"  # compiled (by re) only for a hint


def _colon_hint(text: str, line: int) -> str:
    """`run: echo time: now`: a plain value may not hold ': '. Say how to write it."""
    lines = text.splitlines()
    match = re.match(_KEY_AND_VALUE, lines[line - 1]) if 1 <= line <= len(lines) else None
    if match is None:
        return "a value holding ': ' must be quoted"
    key = match.group(1)
    if key == "run":
        return (
            "the script holds ': ': quote it, or write it as a block, `run: |` with the "
            "script on the next lines, indented"
        )
    return f"the value of `{key}` holds ': ': quote it"


def _char_at(text: str, line: int, col: int) -> str:
    lines = text.splitlines()
    if 1 <= line <= len(lines) and 1 <= col <= len(lines[line - 1]):
        return lines[line - 1][col - 1]
    return ""
