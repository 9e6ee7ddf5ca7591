"""Declarative search spaces and interaction rules (data), and the schema that reads them.

This package is data plus a small schema: it never imports autotune.
"""

from __future__ import annotations

from autotune.search_spaces._file_schema import SpaceFile, space_schema_text
from autotune.search_spaces._rules import Pin, Rule, RuleError, pinned_values
from autotune.search_spaces._schema import (
    Param,
    SearchSpace,
    SpaceError,
    builtin_space_path,
    load_pins_file,
    load_rules_file,
    load_space_file,
)

__all__ = [
    "Param",
    "Pin",
    "Rule",
    "RuleError",
    "SearchSpace",
    "SpaceError",
    "SpaceFile",
    "builtin_space_path",
    "load_pins_file",
    "load_rules_file",
    "load_space_file",
    "pinned_values",
    "space_schema_text",
]
