"""The files' schema: a search-space file and rules.yaml as pydantic models, the JSON Schema
published from them (docs/reference/search-space.schema.json, `autotune space schema`), and
validation failures as one line naming the file and what is wrong.

The models check shape and types; load.py turns a validated file into the `Param`s and `Rule`s
the search uses, parsing the expressions (expressions.py) on the way. The field descriptions are
the reference page's key tables and an editor's hover text.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    WithJsonSchema,
    model_validator,
)

from autotune.search.spaces.numerics import same_value

TYPES = ("int", "float", "categorical", "bool")
JSON_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"


class SpaceError(ValueError):
    """A malformed search-space or rules file."""


def _number(value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError("must be a number")
    return value  # an int stays an int: an int parameter's bounds are whole numbers


def _expression(value: Any) -> Any:
    # A bare number or boolean is an expression too (`max: 1024`), read as its text.
    if isinstance(value, bool | int | float):
        return str(value)
    return value


def _marking(value: Any) -> Any:
    if not isinstance(value, bool | list):
        raise ValueError("must be a list of the parameter's values, true or false")
    return value


Number = Annotated[int | float, BeforeValidator(_number), WithJsonSchema({"type": "number"})]
Expression = Annotated[str, BeforeValidator(_expression), WithJsonSchema(
    {"type": ["string", "number", "boolean"]})]
Marking = Annotated[bool | list[Any], BeforeValidator(_marking)]


class _FileModel(BaseModel):
    # Unknown keys are refused (a typo would otherwise be ignored silently); names, messages
    # and descriptions that YAML reads as numbers are their text.
    model_config = ConfigDict(extra="forbid", frozen=True, coerce_numbers_to_str=True)


def _needs(data: Any, keys: tuple[str, ...]) -> Any:
    if not isinstance(data, dict) or not set(keys) <= set(data):
        quoted = [f"'{k}'" for k in keys]
        raise ValueError(f"needs {', '.join(quoted[:-1])} and {quoted[-1]}")
    return data


class ParamSpec(_FileModel):
    """One parameter of a space: an engine argument and the values the search may give it."""

    # What each type needs, for editors (the validators below say it for autotune).
    model_config = ConfigDict(title="Parameter", json_schema_extra={"allOf": [
        {"if": {"properties": {"type": {"enum": ["int", "float"]}}},
         "then": {"required": ["low", "high"]}},
        {"if": {"properties": {"type": {"const": "categorical"}}},
         "then": {"required": ["choices"]}},
    ]})

    type: Literal["int", "float", "categorical", "bool"] = Field(
        description="Required: `int`, `float`, `categorical` or `bool`.")
    low: Number | None = Field(None, description="`int` and `float`: the lowest value "
                                                 "(required).")
    high: Number | None = Field(None, description="`int` and `float`: the highest value "
                                                  "(required, at least `low`).")
    step: Number | None = Field(None, json_schema_extra={"exclusiveMinimum": 0}, description=(
        "`int` and `float`: the step between values (positive). Not with `log`. A grid search "
        "needs it for floats and for ints wider than 64 values."))
    log: bool = Field(False, description="`int` and `float`: sample on a log scale "
                                         "(`true`/`false`). Not with `step`.")
    choices: list[Any] | None = Field(None, json_schema_extra={"minItems": 1}, description=(
        "`categorical`: the non-empty list of values, in order (numbers are treated as ordered "
        "by the samplers)."))
    when: Expression | None = Field(None, description=(
        "An expression over deployment facts and the parameters before this one: the parameter "
        "exists only where it holds; elsewhere the engine uses its default."))
    min: Expression | None = Field(None, description=(
        "An expression over deployment facts: a lower bound that clamps `low` or filters "
        "`choices`. Not for `bool`."))
    max: Expression | None = Field(None, description=(
        "An expression over deployment facts: an upper bound that clamps `high` or filters "
        "`choices`. Not for `bool`."))
    affects_accuracy: Marking | None = Field(None, description=(
        "`categorical` and `bool`: the values that change the model's numerics, as a list "
        "(`[fp8]`), `true` (every value but `null` or `false`) or `false` (none). Without it, "
        "autotune's own judgement applies (`kv_cache_dtype` other than `auto`/`bfloat16`, any "
        "`speculative_config`)."))

    @model_validator(mode="before")
    @classmethod
    def _has_type(cls, data: Any) -> Any:
        if not isinstance(data, dict) or data.get("type") not in TYPES:
            raise ValueError(f"needs 'type' set to one of {', '.join(TYPES)}")
        return data

    @model_validator(mode="after")
    def _fits_type(self) -> ParamSpec:
        if self.type in ("int", "float"):
            if self.low is None or self.high is None or self.low > self.high:
                raise ValueError("needs numeric 'low' <= 'high'")
            if self.log and self.step is not None:
                raise ValueError("'log' and 'step' cannot be combined (Optuna refuses it)")
            if self.step is not None and self.step <= 0:
                raise ValueError(f"'step' must be positive, not {self.step}")
        elif self.type == "categorical" and not self.choices:
            raise ValueError("needs a non-empty 'choices' list")
        elif self.type == "bool" and (self.min is not None or self.max is not None):
            raise ValueError("a bool has no 'min' or 'max'")
        self._check_marking()
        return self

    def values(self) -> tuple[Any, ...]:
        """A categorical's choices, a bool's two values (what an accuracy marking may name)."""
        return (True, False) if self.type == "bool" else tuple(self.choices or ())

    def _check_marking(self) -> None:
        marking = self.affects_accuracy
        if marking is None:
            return
        if self.type not in ("categorical", "bool"):
            raise ValueError("'affects_accuracy' is for categorical and bool parameters")
        if isinstance(marking, list):
            values = self.values()
            unknown = [m for m in marking if not any(same_value(m, v) for v in values)]
            if unknown:
                raise ValueError(f"'affects_accuracy' names {', '.join(map(repr, unknown))}, "
                                 f"which is not among its values ({', '.join(map(repr, values))})")


class RuleSpec(_FileModel):
    """An interaction rule: an expression every config must satisfy."""

    model_config = ConfigDict(title="Rule")

    name: str = Field(description="Required. The rule's name, shown when a config breaks it.")
    require: Expression = Field(description="Required. An expression that must hold for a "
                                            "config to be allowed.")
    message: str = Field(description="Required. What is wrong; `{name}` placeholders are filled "
                                     "with the values.")
    severity: Literal["error", "slow"] = Field("error", description=(
        "`error` (default: vLLM refuses the config or fails to start it) or `slow` (known to "
        "perform badly)."))
    when: Expression | None = Field(None, description="An expression: the rule applies only "
                                                      "where it holds.")
    source: str | None = Field(None, description="Where vLLM does it (`file::function`) or the "
                                                 "guide that says so.")

    @model_validator(mode="before")
    @classmethod
    def _required(cls, data: Any) -> Any:
        return _needs(data, ("name", "require", "message"))


class PinSpec(_FileModel):
    """Values a model or GPU requires (rules.yaml only)."""

    model_config = ConfigDict(title="Pin")

    name: str = Field(description="Required. The pin's name.")
    when: Expression = Field(description="Required. An expression over deployment facts: where "
                                         "the pin applies.")
    set: dict[str, Any] = Field(description="Required. A mapping of engine argument to the value "
                                            "the model or GPU requires.")
    message: str = Field(description="Required. Why the value is required.")
    source: str | None = Field(None, description="Where vLLM does it.")

    @model_validator(mode="before")
    @classmethod
    def _required(cls, data: Any) -> Any:
        return _needs(data, ("name", "when", "set", "message"))


class SpaceFile(_FileModel):
    """A search-space file: `autotune tune --space FILE`."""

    model_config = ConfigDict(title="autotune search space", json_schema_extra={
        "$schema": JSON_SCHEMA_DIALECT})

    name: str | None = Field(None, description="The space's name (default: the file's name "
                                               "without `.yaml`).")
    description: str | None = Field(None, description="What the space is for; printed by "
                                                       "`autotune tune`.")
    profile: str | None = Field(None, description=(
        "The deployment traffic profile (`chat` or `batch`) this space is the default for. Not "
        "inherited through `extends`."))
    extends: str | None = Field(None, description=(
        "A built-in space's name or a YAML file (relative to this one) whose parameters and "
        "rules come first; a parameter named again replaces the base's definition in place."))
    parameters: dict[str, ParamSpec] = Field(description=(
        "Required. A mapping of parameter name (a vLLM engine argument, or `parallelism`) to its "
        "definition, in the order the sampler suggests them."))
    rules: list[RuleSpec] | None = Field(None, description="Rules added to the common ones of "
                                                           "`rules.yaml`.")

    @model_validator(mode="before")
    @classmethod
    def _has_parameters(cls, data: Any) -> Any:
        if not isinstance(data, dict) or not isinstance(data.get("parameters"), dict):
            raise ValueError("expected a mapping with a 'parameters' mapping")
        return data


class RulesFile(_FileModel):
    """rules.yaml: the rules every space gets, and the pins."""

    rules: list[RuleSpec] | None = None
    pins: list[PinSpec] | None = None

    @model_validator(mode="before")
    @classmethod
    def _is_mapping(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            raise ValueError("expected a mapping with a 'rules' list")
        return data


def space_schema_text() -> str:
    """The JSON Schema of a space file, as committed in docs/reference/search-space.schema.json."""
    return json.dumps(SpaceFile.model_json_schema(), indent=2) + "\n"


FileModel = TypeVar("FileModel", bound=_FileModel)


def validated(model: type[FileModel], data: Any, path: Path) -> FileModel:
    """The file's data as the model, or a SpaceError of one line: the file, the parameter or
    rule, and the first thing wrong with it."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise SpaceError(_one_line(path, exc, data)) from None


_LISTS = {"rules": "rule", "pins": "pin"}


def _one_line(path: Path, exc: ValidationError, data: Any) -> str:
    errors = exc.errors(include_url=False)
    first = errors[0]
    loc = first["loc"]
    # The subject: a parameter ('parameters', name) or a rule or pin ('rules', index).
    subject = 2 if len(loc) >= 2 and loc[0] in ("parameters", *_LISTS) else 0
    where = [str(path)] + ([_subject(loc, data)] if subject else [])
    if first["type"] == "extra_forbidden":
        parent = loc[:-1]
        keys = sorted(str(e["loc"][-1]) for e in errors
                      if e["type"] == "extra_forbidden" and e["loc"][:-1] == parent)
        problem = f"unknown key(s) {', '.join(keys)}"
    else:
        message = str(first["msg"]).removeprefix("Value error, ")
        message = message[:1].lower() + message[1:]  # pydantic's own: "Input should be ..."
        key = loc[subject] if len(loc) > subject else None  # a key's value, not a whole part
        problem = message if key is None else f"'{key}': {message}{_got(first.get('input'))}"
    return ": ".join([*where, problem])


def _subject(loc: tuple[int | str, ...], data: Any) -> str:
    if loc[0] == "parameters":
        return f"parameter {loc[1]!r}"
    kind, index = _LISTS[str(loc[0])], loc[1]
    item = data[loc[0]][index] if isinstance(index, int) else None
    name = item.get("name") if isinstance(item, dict) else None
    return f"{kind} {name!r}" if name is not None else f"{kind} #{int(index) + 1}"


def _got(value: Any) -> str:
    if isinstance(value, dict | list):
        return ""
    text = repr(value)
    return f" (got {text if len(text) <= 60 else text[:57] + '...'})"
