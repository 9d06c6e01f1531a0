"""Reading the YAML a user writes (experiment configs, ``--set`` values, label descriptions): PyYAML's
safe loader, refusing a key given twice in one mapping.

PyYAML keeps the last of two equal keys silently (``methods: [linear-probe]`` and, further down,
``methods: [ce]`` run only ``ce``). :class:`UniqueKeyLoader` raises :class:`DuplicateKeyError` instead,
with the key and the lines of both; the callers turn it into their one-line error naming the file.
A merge key (``<<: *defaults``) may still be overridden by a key of the mapping itself: that is what
it is for. Standard library and PyYAML only.
"""

from __future__ import annotations

from typing import Any

import yaml

__all__ = ["DuplicateKeyError", "UniqueKeyLoader", "load_yaml"]


class DuplicateKeyError(yaml.YAMLError):
    """A key given twice in one YAML mapping: ``key``, and the 1-based lines of its first and second use."""

    def __init__(self, key: Any, first_line: int, second_line: int):
        self.key, self.first_line, self.second_line = key, first_line, second_line
        super().__init__(f"key {key!r} is given twice (lines {first_line} and {second_line})")

    def describe(self) -> str:
        """The words for a one-line message: ``key 'methods' is given twice (lines 3 and 9); keep one``."""
        return f"{self}; keep one"


class UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` whose mappings refuse a key given twice (:class:`DuplicateKeyError`)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    if key in seen:
                        raise DuplicateKeyError(key, seen[key] + 1, key_node.start_mark.line + 1)
                    seen[key] = key_node.start_mark.line
                except TypeError:  # an unhashable key: PyYAML's own error below says so
                    continue
        return super().construct_mapping(node, deep=deep)


def load_yaml(text: str, loader: type[yaml.SafeLoader] = UniqueKeyLoader) -> Any:
    """One YAML document read with ``loader`` (a :class:`UniqueKeyLoader` subclass)."""
    return yaml.load(text, Loader=loader)  # noqa: S506 - a SafeLoader subclass
