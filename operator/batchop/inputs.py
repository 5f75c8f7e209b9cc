"""Reading the files users hand to batchop (manifests, profiles, traces), strictly.

Every loader reads through here so that the same mistakes get the same one-line answer,
naming the file, the line where it is known, and the rule: a missing file, a directory, a
file too large to be what it claims, text that is not UTF-8 or holds NUL bytes, malformed
YAML, and YAML mappings that repeat a key (PyYAML would silently keep the last value, so a
typo'd duplicate could override a field the user believes is set).
"""

from __future__ import annotations

import io
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import yaml

# No manifest, profile or trace batchop reads is anywhere near this; a larger "file" is a
# mistake (a model file, a device like /dev/zero) and is refused before it is read whole.
MAX_INPUT_BYTES = 64 * 1024 * 1024


class InputError(ValueError):
    """Input batchop cannot use; the message names the file, line or field, and the rule."""


def read_text(
    path: str | Path, what: str, stdin: TextIO | None = None, max_bytes: int = MAX_INPUT_BYTES
) -> str:
    """The UTF-8 text of `path` (`-`: `stdin`), or InputError saying why not.

    `what` names the kind of file in messages ("profile", "trace", "manifest").
    """
    where = "<stdin>" if str(path) == "-" else str(path)
    if str(path) == "-":
        source = stdin if stdin is not None else io.StringIO("")
        buffer = getattr(source, "buffer", None)
        if buffer is not None:
            data = buffer.read(max_bytes + 1)
        else:
            data = source.read(max_bytes + 1).encode("utf-8", "surrogateescape")
    else:
        try:
            if os.path.isdir(path):
                raise InputError(f"{where}: cannot read {what}: is a directory, not a file")
            with open(path, "rb") as handle:
                data = handle.read(max_bytes + 1)
        except InputError:
            raise
        except OSError as exc:
            raise InputError(f"{where}: cannot read {what}: {exc.strerror or exc}") from None
    if len(data) > max_bytes:
        raise InputError(
            f"{where}: {what} larger than the limit of {max_bytes // (1024 * 1024)} MiB"
        )
    if data.startswith(b"\xef\xbb\xbf"):  # a UTF-8 byte order mark, as some editors write
        data = data[3:]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise InputError(
            f"{where}:{line}: {what} is not UTF-8 text (byte 0x{data[exc.start]:02x}); "
            "save it as UTF-8"
        ) from None
    if "\x00" in text:
        line = text[: text.index("\x00")].count("\n") + 1
        raise InputError(f"{where}:{line}: {what} holds a NUL byte: binary data, not text")
    return text


class _StrictLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing mappings that repeat a key."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.get(key)
            except TypeError:  # an unhashable key: let the base class say so
                break
            line = key_node.start_mark.line + 1
            if first is not None:
                raise InputError(f"{line}: duplicate key `{key}` (first at line {first})")
            seen[key] = line
        return super().construct_mapping(node, deep=deep)


@dataclass
class YamlDocument:
    """One YAML document: its data and the line of each field path (`spec.model.name`,
    `spec.model.latencyProfile[0]`), so errors found later can point at the line."""

    data: Any
    line: int = 1
    lines: dict[str, int] = field(default_factory=dict)

    def line_of(self, path: str) -> int:
        """Line of `path`, or of its nearest ancestor the document has."""
        while path:
            if path in self.lines:
                return self.lines[path]
            cut = max(path.rfind("."), path.rfind("["))
            path = path[:cut] if cut > 0 else ""
        return self.line


def _index_lines(node: yaml.Node, prefix: str, out: dict[str, int]) -> None:
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            if not isinstance(key, yaml.ScalarNode):
                continue
            path = f"{prefix}.{key.value}" if prefix else str(key.value)
            out.setdefault(path, key.start_mark.line + 1)
            _index_lines(value, path, out)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            path = f"{prefix}[{i}]"
            out.setdefault(path, item.start_mark.line + 1)
            _index_lines(item, path, out)


def parse_yaml(text: str, where: str) -> list[YamlDocument]:
    """Every document in `text`; InputError `where:line: ...` for malformed YAML or a
    repeated key."""
    loader = _StrictLoader(text)
    docs: list[YamlDocument] = []
    try:
        while loader.check_node():
            node = loader.get_node()
            lines: dict[str, int] = {}
            _index_lines(node, "", lines)
            data = loader.construct_document(node)
            docs.append(YamlDocument(data, node.start_mark.line + 1, lines))
    except InputError as exc:
        raise InputError(f"{where}:{exc}") from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = exc.problem or exc.context or "malformed"
        if exc.context_mark is not None and exc.context and exc.context_mark is not mark:
            # "while parsing a flow sequence" names where the unfinished thing began
            problem += f" ({exc.context} that began on line {exc.context_mark.line + 1})"
        at = f"{where}:{mark.line + 1}" if mark is not None else where
        raise InputError(f"{at}: not valid YAML: {problem}") from None
    except yaml.YAMLError as exc:
        raise InputError(f"{where}: not valid YAML: {exc}") from None
    except RecursionError:
        raise InputError(f"{where}: not valid YAML: nested too deeply") from None
    finally:
        loader.dispose()
    return docs
