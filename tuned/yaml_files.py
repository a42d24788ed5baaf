"""Reading the YAML files a user writes (the daemon config, registry ``kernel.yaml``) safely.

Bad input ends quickly, in bounded memory, with an error naming the file and the place:

* only a **regular file** is read: it is opened with ``O_NONBLOCK`` and checked with
  ``fstat`` on the open descriptor, so a FIFO, a socket or a device is refused at once
  (never a hang waiting for a writer, never an endless ``/dev/zero``);
* at most :data:`MAX_YAML_BYTES` (1 MiB) are read; a larger file is refused;
* the text must be UTF-8 (a BOM is allowed); a bad byte is named by offset and line;
* a **syntax error** reads ``file:line:col: problem`` (the context on a second line);
* a **duplicate key** is an error naming the key and both lines (YAML says keys are
  unique; PyYAML would silently keep the last value);
* **nesting** deeper than :data:`MAX_DEPTH` is refused (a 20,000-deep document gives this
  error, not a ``RecursionError``);
* **aliases** (``*name``) are allowed, since they are plain YAML that people use for shared
  tolerances, but bounded: at most :data:`MAX_ALIASES` per file, no alias of a node that
  contains itself, and the document expanded as if every alias were a copy must stay below
  :data:`MAX_EXPANDED_NODES` nodes. A "billion laughs" alias bomb is refused after composing
  its few hundred nodes, in milliseconds, before any value is built.

Only PyYAML's safe constructors are used: plain YAML types, never Python objects.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Hashable
from pathlib import Path
from typing import Any

import yaml
from yaml.composer import Composer
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from yaml.reader import ReaderError

from tuned.errors import BadInputError

__all__ = [
    "MAX_ALIASES",
    "MAX_DEPTH",
    "MAX_EXPANDED_NODES",
    "MAX_YAML_BYTES",
    "YamlFileError",
    "decode_utf8",
    "load_yaml_file",
    "parse_yaml",
    "read_regular_file",
]

MAX_YAML_BYTES = 1 << 20
MAX_DEPTH = 64
MAX_ALIASES = 256
MAX_EXPANDED_NODES = 100_000


class YamlFileError(BadInputError):
    """A YAML file cannot be used: ``path``, 1-based ``line``/``column`` when known, and
    ``problem`` (what is wrong and what to do). ``str()`` is ``path:line:col: problem``."""

    def __init__(
        self, path: Path | str, problem: str, *, line: int | None = None, column: int | None = None
    ) -> None:
        self.path = Path(path)
        self.problem = problem
        self.line = line
        self.column = column
        where = str(path)
        if line is not None:
            where += f":{line}" + (f":{column}" if column is not None else "")
        super().__init__(f"{where}: {problem}")

    @property
    def where(self) -> str:
        """``line L, column C`` (or ``""``): the place without the file name."""
        if self.line is None:
            return ""
        return f"line {self.line}" + (f", column {self.column}" if self.column else "")


def read_regular_file(path: Path, *, cap: int = MAX_YAML_BYTES, what: str = "file") -> bytes:
    """The bytes of the regular file ``path`` (at most ``cap``), else :class:`YamlFileError`.

    Opened non-blocking and checked on the descriptor, so a FIFO or device never blocks."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(path, flags | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise YamlFileError(path, f"cannot open the {what}: {exc.strerror or exc}") from exc
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = _kind(mode)
            raise YamlFileError(path, f"is {kind}, not a regular file; point to the {what} itself")
        os.set_blocking(fd, True)
        chunks: list[bytes] = []
        size = 0
        while size <= cap:
            chunk = os.read(fd, min(1 << 16, cap + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise YamlFileError(path, f"cannot read the {what}: {exc.strerror or exc}") from exc
    finally:
        os.close(fd)
    if size > cap:
        raise YamlFileError(
            path, f"larger than {_size(cap)}; a {what} must stay below it (is it the right file?)"
        )
    return b"".join(chunks)


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def _size(cap: int) -> str:
    return f"{cap >> 20} MiB" if cap >= 1 << 20 else f"{cap} bytes"


def decode_utf8(data: bytes, path: Path) -> str:
    """``data`` as UTF-8 text (a leading BOM dropped), else :class:`YamlFileError` naming
    the byte offset and line of the first bad byte."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise YamlFileError(
            path,
            f"not valid UTF-8 (byte 0x{data[exc.start]:02x} at offset {exc.start}); save "
            "the file as UTF-8",
            line=line,
            column=column,
        ) from exc


class _BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader with bounded nesting and aliases, and unique keys."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._aliases = 0

    def compose_node(self, parent: Node | None, index: object) -> Node | None:  # type: ignore[override]
        if self.check_event(yaml.AliasEvent):
            self._aliases += 1
            if self._aliases > MAX_ALIASES:
                mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
                raise _Refused(f"more than {MAX_ALIASES} aliases (*name)", mark)
        self._depth += 1
        if self._depth > MAX_DEPTH:
            mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
            raise _Refused(f"nested more than {MAX_DEPTH} levels deep", mark)
        try:
            node: Node | None = Composer.compose_node(self, parent, index)  # type: ignore[arg-type]
        finally:
            self._depth -= 1
        return node

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Hashable, Any]:
        first: dict[object, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # explicit keys may override << merges
            key = self.construct_object(key_node, deep=True)  # type: ignore[no-untyped-call]
            if not isinstance(key, Hashable):
                continue  # the base class reports unhashable keys
            line = key_node.start_mark.line + 1
            if key in first:
                raise ConstructorError(
                    None,
                    None,
                    f"duplicate key {_show(key)} (first at line {first[key]}); YAML keys must "
                    "be unique, a second value would silently replace the first",
                    key_node.start_mark,
                )
            first[key] = line
        return super().construct_mapping(node, deep=deep)

    def construct_object(self, node: Node, deep: bool = False) -> Any:
        # A scalar's constructor can fail outside PyYAML's own errors (a ValueError from
        # ``2001-13-45``, ``!!float abc`` or an integer of more than 4300 digits): name the
        # value and its place like any other YAML error.
        try:
            return super().construct_object(node, deep=deep)  # type: ignore[no-untyped-call]
        except (ValueError, OverflowError, TypeError) as exc:
            tag = str(node.tag).rpartition(":")[2]
            kind = _TAG_KINDS.get(tag, f"!!{tag}")
            shown = _show(node.value) if isinstance(node, ScalarNode) else "the value"
            reason = str(exc).split("; use sys.set_int_max_str_digits", 1)[0]
            raise ConstructorError(
                None, None, f"cannot read {shown} as {kind}: {reason}", node.start_mark
            ) from None


#: How a constructor error names what the value was read as (``!!TAG`` otherwise).
_TAG_KINDS = {"int": "an integer", "float": "a number", "timestamp": "a date (YYYY-MM-DD)"}


class _Refused(yaml.MarkedYAMLError):
    def __init__(self, problem: str, mark: yaml.Mark) -> None:
        super().__init__(problem=problem, problem_mark=mark)


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _expanded_size(root: Node) -> int:
    """Nodes of the document with every alias counted as a copy (memoised on the shared
    node); :class:`_Refused` for a node that contains itself or a too large expansion."""
    sizes: dict[int, int] = {}
    stack: list[tuple[Node, bool]] = [(root, False)]
    open_: set[int] = set()
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            children = _children(node)
            size = 1 + sum(sizes[id(c)] for c in children)
            open_.discard(key)
            if size > MAX_EXPANDED_NODES:
                raise _Refused(
                    f"aliases expand to more than {MAX_EXPANDED_NODES} values (an alias bomb?)",
                    node.start_mark,
                )
            sizes[key] = size
            continue
        if key in sizes:
            continue
        if key in open_:
            raise _Refused("an alias of a node that contains itself", node.start_mark)
        open_.add(key)
        stack.append((node, True))
        stack.extend((c, False) for c in _children(node) if id(c) not in sizes)
    return sizes[id(root)]


def _children(node: Node) -> list[Node]:
    if isinstance(node, SequenceNode):
        return list(node.value)
    if isinstance(node, MappingNode):
        return [n for pair in node.value for n in pair]
    assert isinstance(node, ScalarNode)
    return []


def parse_yaml(text: str, path: Path) -> object:
    """The one document of ``text`` (``None`` when empty), else :class:`YamlFileError` with
    the line and column of the problem."""
    try:  # the reader checks every character while the loader is built (a NUL byte)
        loader = _BoundedLoader(text)
    except ReaderError as exc:
        raise _reader_error(exc, text, path) from None
    try:
        node = loader.get_single_node()  # type: ignore[no-untyped-call]
        if node is None:
            return None
        _expanded_size(node)
        return loader.construct_document(node)  # type: ignore[no-untyped-call]
    except ReaderError as exc:
        raise _reader_error(exc, text, path) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = exc.problem or exc.context or "invalid YAML"
        if exc.context and exc.problem and exc.context_mark is not None:
            problem += f" ({exc.context} at line {exc.context_mark.line + 1})"
        raise YamlFileError(
            path,
            f"invalid YAML: {problem}",
            line=None if mark is None else mark.line + 1,
            column=None if mark is None else mark.column + 1,
        ) from None
    except yaml.YAMLError as exc:
        raise YamlFileError(path, f"invalid YAML: {exc}") from None
    except RecursionError:
        raise YamlFileError(
            path, f"invalid YAML: nested more than {MAX_DEPTH} levels deep"
        ) from None
    except (ValueError, OverflowError, TypeError) as exc:  # a constructor's, without a place
        raise YamlFileError(path, f"invalid YAML: {exc}") from None
    finally:
        loader.dispose()  # type: ignore[no-untyped-call]


def _reader_error(exc: ReaderError, text: str, path: Path) -> YamlFileError:
    """A character YAML does not allow (a NUL byte, a control character), by line and column."""
    position = max(0, min(int(exc.position), len(text)))
    line = text.count("\n", 0, position) + 1
    column = position - (text.rfind("\n", 0, position) + 1) + 1
    character = exc.character if isinstance(exc.character, str) else chr(exc.character)
    return YamlFileError(
        path,
        f"invalid YAML: the character U+{ord(character):04X} is not allowed in YAML; "
        "remove it (is this a binary file?)",
        line=line,
        column=column,
    )


def load_yaml_file(path: Path, *, cap: int = MAX_YAML_BYTES, what: str = "file") -> object:
    """Read, decode and parse the YAML file ``path`` with every bound of this module."""
    return parse_yaml(decode_utf8(read_regular_file(path, cap=cap, what=what), path), path)
