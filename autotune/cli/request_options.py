"""A command's options from its request model (autotune.campaign.requests), so that a setting's
type, default and checks are written once, in the model.

Each option is one setting: its value type and default are the model field's, its flag the one
cli/flags.py names the setting by (so an error about it names the same flag), and its help and
place in `--help` come from the command's table of Settings. The help is the command's, not the
field's, because commands that share a setting describe it differently (tune's --trace and
quarterly's), and a table, because `--help` interleaves the shared settings with each command's
own, an order the model's fields (the shared ones first) cannot keep.
"""

from __future__ import annotations

import inspect
import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import reduce
from types import UnionType
from typing import Annotated, Any, TypeVar, Union, get_args, get_origin

import typer
from pydantic import BaseModel

from autotune.cli.flags import flag_of
from autotune.domain.slo import SLO

Command = TypeVar("Command", bound=Callable[..., Any])


@dataclass(frozen=True)
class Setting:
    """A setting's option: its help, and flags besides the setting's own: `aliases`, or `off`,
    the flag that turns a bool setting off (without it a bool setting is a bare switch)."""

    name: str  # the model's field
    help: str
    aliases: tuple[str, ...] = ()
    off: str | None = None


def request_options(model: type[BaseModel], settings: Sequence[Setting],
                    flags: Mapping[str, str] | None = None) -> Callable[[Command], Command]:
    """Give the command the settings' options, in the table's order and before its own
    parameters; typer reads them from its signature, and the command receives them as
    keyword arguments. `flags`: the command's own flags for some settings (flags.TUNE_FLAGS)."""

    def decorate(command: Command) -> Command:
        own = [p.replace(kind=p.KEYWORD_ONLY)
               for p in inspect.signature(command, eval_str=True).parameters.values()
               if p.kind is not p.VAR_KEYWORD]
        options = [_option(model, setting, flags) for setting in settings]
        command.__signature__ = inspect.Signature([*options, *own])  # type: ignore[attr-defined]
        return command

    return decorate


def given(settings: Mapping[str, Any]) -> dict[str, Any]:
    """The settings the command line gave: an option left out (None) keeps the model's
    default."""
    return {name: value for name, value in settings.items() if value is not None}


def _option(model: type[BaseModel], setting: Setting,
            flags: Mapping[str, str] | None) -> inspect.Parameter:
    field = model.model_fields[setting.name]
    flag = flag_of(setting.name, flags)
    declarations = (flag + (f"/{setting.off}" if setting.off else ""), *setting.aliases)
    kind, default = _value_type(field.annotation), field.get_default()
    if field.is_required():
        default = inspect.Parameter.empty
    elif default == []:  # repeatable: left out it is None, and --help shows no default
        kind, default = kind | None, None
    return inspect.Parameter(setting.name, inspect.Parameter.KEYWORD_ONLY, default=default,
                             annotation=Annotated[kind, typer.Option(*declarations,
                                                                     help=setting.help)])


def _value_type(annotation: Any) -> Any:
    """The field's type, but an SLO setting's option takes its text (the request reads it)."""
    if get_origin(annotation) is Annotated:
        return _value_type(get_args(annotation)[0])
    if get_origin(annotation) in (Union, UnionType):
        return reduce(operator.or_, map(_value_type, get_args(annotation)))
    return str if annotation is SLO else annotation
