"""Search spaces: which engine arguments the search may set, to which values, under which rules.

A space as its files declare it (the built-in ones in builtin/, with rules.yaml's common rules
and pins) is read by load.py into `SearchSpace` (space.py); deployment.py binds it to a
deployment, violations.py applies its rules to a config, accuracy.py says which of a config's
values change the model's numerics. The names below are the space as declared; the modules that
need a deployment are imported by name.
"""

from __future__ import annotations

from autotune.search.spaces.expressions import Expr, RuleError
from autotune.search.spaces.file_schema import SpaceError, SpaceFile, space_schema_text
from autotune.search.spaces.load import (
    builtin_space_path,
    load_pins_file,
    load_rules_file,
    load_space_file,
)
from autotune.search.spaces.roles import ParamRole
from autotune.search.spaces.rules import Pin, Rule, pinned_by
from autotune.search.spaces.space import Param, SearchSpace, is_ordinal

__all__ = [
    "Expr",
    "Param",
    "ParamRole",
    "Pin",
    "Rule",
    "RuleError",
    "SearchSpace",
    "SpaceError",
    "SpaceFile",
    "builtin_space_path",
    "is_ordinal",
    "load_pins_file",
    "load_rules_file",
    "load_space_file",
    "pinned_by",
    "space_schema_text",
]
