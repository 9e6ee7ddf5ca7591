"""The generated parts of the documentation site, built from the code each time the site is.

mkdocs.yml names this file as a hook: in every page, a marker line `<!-- reference:NAME -->` is
replaced by the markdown of NAME (see PARTS), so the CLI, settings, search-space, catalogue and
REST API reference pages cannot drift from the code. Something the code has but the pages cannot
describe (a setting without a comment, a space-file key without a description) is logged
as a warning, which fails `mkdocs build --strict`.

Alone, it prints one part: `python scripts/docs_reference.py cli` (or settings, openapi, ...).
"""

from __future__ import annotations

import ast
import inspect
import json
import logging
import re
import sys
import tempfile
import textwrap
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# The checkout being built is documented, not whichever autotune the environment installed.
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

log = logging.getLogger("mkdocs.plugins.autotune_reference")
MARKER = re.compile(r"^<!-- reference:([a-z-]+) -->$", re.MULTILINE)


# -- markdown helpers ---------------------------------------------------------------------------
def _outside_code(text: str, fix: Callable[[str], str]) -> str:
    """Apply `fix` to the parts of `text` outside `code spans`."""
    parts = text.split("`")
    return "`".join(fix(p) if i % 2 == 0 else p for i, p in enumerate(parts))


def _prose(text: str) -> str:
    """Help or comment text as markdown: `<` would start HTML, `*` emphasis."""
    return _outside_code(text, lambda s: s.replace("<", "&lt;").replace("*", r"\*"))


def _cell(text: str) -> str:
    """One table cell: one line, pipes escaped."""
    return _prose(" ".join(text.split())).replace("|", r"\|")


def _code(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    return f"`{text}`".replace("|", r"\|") if text != "" else '`""`'


def _paragraphs(text: str | None) -> str:
    """A docstring as markdown paragraphs (its line breaks are only wrapping)."""
    if not text:
        return ""
    paragraphs = inspect.cleandoc(text).split("\n\n")
    return "\n\n".join(_prose(" ".join(p.split())) for p in paragraphs if p.strip())


def _type_words(annotation: Any) -> str:
    """A Python annotation in words, None left out (the default column says "unset")."""
    import types
    import typing

    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_words(a) for a in args)
    if origin is typing.Literal:
        return "one of " + ", ".join(f"`{a}`" for a in args)
    if origin is list:
        return f"list of {_type_words(args[0])} (JSON)"
    if origin is dict:
        return f"mapping of {_type_words(args[0])} to {_type_words(args[1])} (JSON)"
    return {"str": "text", "int": "integer", "float": "number", "bool": "boolean"}.get(
        getattr(annotation, "__name__", ""), getattr(annotation, "__name__", str(annotation)))


def _table(header: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


# -- CLI ------------------------------------------------------------------------------------------
# Commands in the order a user meets them; any command not named here follows, alphabetically.
CLI_ORDER = ("db", "tune", "campaigns", "report", "publish", "api", "dashboard", "quarterly",
             "check-config", "space", "traffic", "capture", "simulate", "sim", "models")


def _type_name(param: Any) -> str:
    """A parameter's value type in words; typer >= 0.29 keeps its own click, hence both paths."""
    descriptor = getattr(param, "type_descriptor", None)
    annotation = getattr(descriptor, "annotation", None)
    if annotation is not None:
        name = getattr(annotation, "__name__", str(annotation))
        name = re.sub(r"\b(typing|pathlib)\.", "", name)
    else:
        name = getattr(getattr(param, "type", None), "name", "text")
    name = {"str": "text", "int": "integer", "float": "number", "Path": "path",
            "bool": "boolean", "list": "text"}.get(name, name)
    return name + (", repeatable" if getattr(param, "multiple", False) else "")


def _option_row(param: Any) -> tuple[str, ...]:
    flags = " / ".join(f"`{o}`" for o in [*param.opts, *param.secondary_opts])
    if getattr(param, "is_flag", False) and not param.secondary_opts:
        kind, default = "flag", "off" if not param.default else "on"
    else:
        kind = _type_name(param)
        default = ("required" if param.required else
                   "-" if param.default is None or param.default == [] else _code(str(param.default)))
    return flags, kind, default, _cell(param.help or "")


def _commands(group: Any, path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], Any]]:
    names = list(group.commands)
    ordered = [n for n in CLI_ORDER if n in names] + sorted(n for n in names if n not in CLI_ORDER)
    for name in ordered if not path else sorted(names):
        command = group.commands[name]
        if getattr(command, "hidden", False):
            continue
        yield (*path, name), command
        if hasattr(command, "commands"):
            yield from _commands(command, (*path, name))


def cli_markdown() -> str:
    import typer

    from autotune.cli.main import app

    root = typer.main.get_command(app)
    out = [_paragraphs(root.help), "", "Every command takes `--help`. Bad input prints one line "
           "on stderr and exits with 2.", ""]
    top = [p for p in root.params if p.opts[0] != "--help" and not getattr(p, "hidden", False)]
    if top:  # --version, the shell completion flags: `autotune --version`
        out += ["Options of `autotune` itself:", "",
                _table(("option", "type", "default", "description"),
                       [_option_row(p) for p in top]), ""]
    for path, command in _commands(root, ()):
        name = " ".join(("autotune", *path))
        level = "##" if len(path) == 1 else "###"
        out += [f"{level} `{name}`", "", _paragraphs(command.help), ""]
        if hasattr(command, "commands"):
            out += [f"Subcommands: {', '.join(f'`{c}`' for c in sorted(command.commands))}.", ""]
            continue
        params = [p for p in command.params if not getattr(p, "hidden", False)]
        arguments = [p for p in params if not p.opts[0].startswith("-")]
        options = [p for p in params if p.opts[0].startswith("-")]
        usage = " ".join([name, "[OPTIONS]" if options else "",
                          *(p.name.upper() for p in arguments)]).replace("  ", " ").strip()
        out += [f"```\n{usage}\n```", ""]
        if arguments:
            out += [_table(("argument", "description"),
                           [(f"`{p.name.upper()}`", _cell(p.help or "")) for p in arguments]), ""]
        if options:
            out += [_table(("option", "type", "default", "description"),
                           [_option_row(p) for p in options]), ""]
    return "\n".join(out)


# -- settings -------------------------------------------------------------------------------------
def _field_comments(cls: type) -> dict[str, str]:
    """The comment lines just above each field of a class, and a comment after it on its line:
    the settings are documented where they are defined."""
    lines, _ = inspect.getsourcelines(cls)
    tree = ast.parse(textwrap.dedent("".join(lines)))
    found: dict[str, str] = {}
    for node in tree.body[0].body:  # type: ignore[attr-defined]
        if not isinstance(node, ast.AnnAssign) or not isinstance(node.target, ast.Name):
            continue
        above: list[str] = []
        i = node.lineno - 2
        while i >= 0 and lines[i].strip().startswith("#"):
            above.insert(0, lines[i].strip().lstrip("#").strip())
            i -= 1
        after = lines[node.end_lineno - 1].split("  # ", 1)  # type: ignore[operator]
        if len(after) == 2:
            above.append(after[1].strip())
        found[node.target.id] = " ".join(above)
    return found


def _bounds(info: Any) -> str:
    words = {"ge": ">=", "gt": ">", "le": "<=", "lt": "<"}
    found = [f"{words[k]} {getattr(m, k)}" for m in info.metadata for k in words if hasattr(m, k)]
    return f" ({', '.join(found)})" if found else ""


def _settings_rows(cls: type, env: str, key: str) -> Iterator[tuple[str, ...]]:
    from pydantic import BaseModel

    comments = _field_comments(cls)
    for name, info in cls.model_fields.items():  # type: ignore[attr-defined]
        annotation = info.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            yield from _settings_rows(annotation, f"{env}{name.upper()}__", f"{key}{name}.")
            continue
        description = info.description or comments.get(name, "")
        if not description:
            log.warning("setting %s%s has no comment to document it (autotune/settings.py)",
                        key, name)
        default = "unset" if info.default is None else _code(info.default)
        yield (f"`{env}{name.upper()}`", f"`{key}{name}`", _type_words(annotation) + _bounds(info),
               default,
               _cell(description))


def settings_markdown() -> str:
    from autotune.settings import Settings

    config = Settings.model_config
    prefix, delimiter = config.get("env_prefix", ""), config.get("env_nested_delimiter")
    assert prefix == "AUTOTUNE_" and delimiter == "__", "the settings page explains these"
    return _table(("environment variable", "setting", "type", "default", "description"),
                  list(_settings_rows(Settings, prefix, "")))


# -- search spaces --------------------------------------------------------------------------------
FACTS = {
    "device": '`"gpu"` or `"cpu"` (the vLLM CPU build)',
    "gpu_memory_gib": "memory of one GPU, GiB, as the driver reports it",
    "gpu_count": "GPUs of one engine replica (`--gpus`)",
    "compute_capability": "CUDA compute capability, as vLLM writes it (90 for 9.0; 0 on a CPU)",
    "max_model_len": "the deployment's context length (`--max-model-len`)",
    "model_max_len": "the model's own context limit",
    "model_is_moe": "whether the model has routed experts",
    "model_weight_gib": "the model's weights, GiB, all GPUs together",
    "model_has_mtp": "whether the checkpoint ships multi-token-prediction layers",
    "attention_kind": '`"gqa"`, `"mla"` or `"dsv4"` (DeepSeek-V4\'s compressed attention)',
    "num_attention_heads": "attention heads",
    "num_kv_heads": "KV heads (1 for the latent caches of MLA and DeepSeek-V4)",
    "num_experts": "routed experts per MoE layer (0: dense)",
    "moe_intermediate_size": "the width of one expert",
    "intermediate_size": "the dense MLP width",
    "dense_quant": 'weight format of attention, shared experts and embeddings: `"bf16"`, '
                   '`"fp8_block"` or `"fp4"`',
    "expert_quant": 'weight format of the routed experts: `"bf16"`, `"fp8_block"` or `"fp4"`',
    "quant_block": "the block of a block-wise quantisation (128; 0: none)",
    "model_is_hybrid": "whether some layers keep a state per sequence rather than a KV cache "
                       "(gated delta nets in Qwen3.5, KDA in Kimi-K3, Mamba2 in Nemotron-H)",
    "linear_num_key_heads": "key heads of a gated-delta-net layer, or a KDA layer's heads "
                            "(0: none)",
    "linear_num_value_heads": "value heads of a gated-delta-net layer, or a KDA layer's heads "
                              "(0: none)",
    "mamba_num_heads": "heads of a Mamba2 layer (0: none)",
    "mamba_n_groups": "B/C groups of a Mamba2 layer (0: none)",
}


def _check_documented(what: str, documented: dict[str, str], actual: set[str]) -> None:
    for key in sorted(actual - set(documented)):
        log.warning("%s %r is read by the code but not described in scripts/docs_reference.py",
                    what, key)
    for key in sorted(set(documented) - actual):
        log.warning("%s %r is described in scripts/docs_reference.py but the code no longer "
                    "reads it", what, key)


def _keys_table(model: Any) -> str:
    """A file model's keys and their field descriptions (autotune/search/spaces/file_schema.py)."""
    rows = []
    for key, info in model.model_fields.items():
        if not info.description:
            log.warning("%s key %r has no description in autotune/search/spaces/file_schema.py",
                        model.__name__, key)
        rows.append((f"`{key}`", _cell(info.description or "")))
    return _table(("key", "meaning"), rows)


def space_keys_markdown() -> str:
    from autotune.search.spaces.file_schema import ParamSpec, PinSpec, RuleSpec, SpaceFile

    return "\n".join(["### Top-level keys", "", _keys_table(SpaceFile), "",
                      "### Parameter keys", "", _keys_table(ParamSpec), "",
                      "### Rule keys", "", _keys_table(RuleSpec), "",
                      "### Pin keys (`rules.yaml` only)", "", _keys_table(PinSpec)])


def space_names_markdown() -> str:
    from autotune.domain import parallelism
    from autotune.domain.deployment import RULE_CONTEXT_NAMES
    from autotune.domain.engine_config import EngineConfig

    _check_documented("deployment fact", FACTS, set(RULE_CONTEXT_NAMES))
    rows = [(f"`{parallelism.PARAM}`", "categorical of " + ", ".join(
        f"`{f}`" for f in parallelism.FAMILIES), "the parallel layout (stands for "
        "`--tensor-parallel-size`, `--data-parallel-size` and `--enable-expert-parallel`)")]
    for name, info in EngineConfig.model_fields.items():
        kind = _type_words(info.annotation)
        if name == "speculative_config":  # a nested config, given as vLLM's JSON text
            kind = "JSON object (`method`, `num_speculative_tokens`, ...) as text"
        rows.append((f"`{name}`", kind, f"`--{name.replace('_', '-')}`"))
    facts = [(f"`{n}`", FACTS.get(n, "")) for n in sorted(RULE_CONTEXT_NAMES)]
    return "\n".join(["### Parameters a space may search", "",
                      "vLLM's engine arguments under vLLM's names, and the parallel layout:", "",
                      _table(("parameter", "type", "vLLM flag"), rows), "",
                      "### Deployment facts", "",
                      "Names that `when`, `min`, `max`, rules and pins may use besides the "
                      "parameters:", "", _table(("fact", "meaning"), facts)])


def _param_summary(p: Any) -> str:
    if p.type == "categorical":
        values = ", ".join("null" if c is None else str(c) for c in p.choices)
        text = f"one of {values}"
    elif p.type == "bool":
        text = "true or false"
    else:
        text = f"{p.low} to {p.high}" + (f", step {p.step}" if p.step else "")
        text += ", log scale" if p.log else ""
    for label, expr in (("at least", p.min_expr), ("at most", p.max_expr)):
        if expr is not None:
            text += f"; {label} `{expr.source}`"
    changing = [c for c in p.grid() if p.changes_numerics(c)] if p.type in (
        "categorical", "bool") else []
    if changing:
        # Nested configs (JSON text) are long: say "every drafting choice" rather than list them.
        nested = all(isinstance(c, str) and c.startswith("{") for c in changing)
        text += "; changes numerics: " + ("every non-null choice" if nested
                                          else ", ".join(map(str, changing)))
    return _cell(text)


def builtin_spaces_markdown() -> str:
    from autotune.search.spaces import load

    out = []
    for name in load.builtin_names():
        path = load.builtin_space_path(name)
        space = load.load_space_file(path, common_rules=())
        data = load._read_yaml(path)
        extra = [f"profile `{space.profile}`" if space.profile else "",
                 f"extends `{data['extends']}`" if data.get("extends") else ""]
        head = "; ".join(e for e in extra if e)
        out += [f"### `{name}`", "", (f"*{head}.* " if head else "") + _paragraphs(space.description),
                "", _table(("parameter", "type", "values", "when"),
                           [(f"`{p.name}`", p.type, _param_summary(p),
                             f"`{p.when.source}`" if p.when else "always") for p in space.params]),
                ""]
    return "\n".join(out)


def rules_markdown() -> str:
    from autotune.search.spaces import load_pins_file, load_rules_file

    # A list, not a table: each rule carries an expression, a message and a source.
    out = ["### Rules", ""]
    for r in load_rules_file():
        where = f" where `{r.when}`" if r.when else ""
        out.append(f"- `{r.name}` ({r.severity}): requires `{r.require}`{where}. "
                   f"Message: {_prose(r.message)}." + (f" Source: {_prose(r.source)}." if r.source else ""))
    out += ["", "### Pins", ""]
    for p in load_pins_file():
        values = ", ".join(f"`{k}={v}`" for k, v in p.values.items())
        out.append(f"- `{p.name}`: sets {values} where `{p.when}`. Why: {_prose(p.message)}."
                   + (f" Source: {_prose(p.source)}." if p.source else ""))
    return "\n".join(out)


# -- catalogue ------------------------------------------------------------------------------------
def catalogue_markdown() -> str:
    from autotune.domain import catalogue

    gpus = [(f"`{g.name}`", g.device, f"{g.memory_gib:g}", f"{g.hbm_tb_s:g}",
             f"{g.bf16_tflops:g} / {g.fp8_tflops:g}", f"{g.link_gb_s:g}",
             str(g.compute_capability)) for g in catalogue.GPUS.values()]
    models = [(f"`{m.name}`", f"{m.total_params_b:g}B / {m.active_params_b:g}B", m.attention,
               f"{m.num_experts} x {m.experts_per_token}" if m.num_experts else "dense",
               f"{m.max_context:,}", f"{m.dense_quant} / {m.expert_quant}",
               "yes" if m.mtp else "no", f"`{m.hf_id}`" if m.hf_id else "none",
               _cell(m.source)) for m in catalogue.MODELS.values()]
    from autotune.domain.model_config import read_model_config
    from autotune.domain.model_sources import QUANT_SUFFIX, SUFFIX, VENDORED

    vendored = []  # the configs shipped in the package (not the aiconfigurator extra's)
    for path in sorted(VENDORED.glob(f"*{SUFFIX}")):
        if path.name.endswith(QUANT_SUFFIX):
            continue
        hf_id = path.name.removesuffix(SUFFIX).replace("--", "/", 1)
        quant = path.with_name(path.name.removesuffix(SUFFIX) + QUANT_SUFFIX)
        m = read_model_config(path, hf_id.split("/")[-1], hf_id,
                              quant if quant.is_file() else None)
        vendored.append((f"`{hf_id}`", f"{m.total_params_b:.1f}B / {m.active_params_b:.1f}B",
                         m.attention, f"{m.num_experts} x {m.experts_per_token}"
                         if m.num_experts else "dense", f"{m.max_context:,}",
                         f"{m.dense_quant} / {m.expert_quant}"))
    return "\n".join([
        "### GPUs", "", _table(("name", "device", "memory GiB", "HBM TB/s",
                                "TFLOPS bf16 / fp8", "link GB/s", "compute capability"), gpus),
        "", "### Models", "",
        _table(("name", "params total / active", "attention", "experts (routed x per token)",
                "context", "weights dense / experts", "MTP", "Hugging Face id (published `model`)",
                "source"), models),
        "", "### Models from bundled config.json files", "",
        "Vendored in `autotune/data/model_configs/` (sources and licences in its README); "
        "parameters derived from the architecture.", "",
        _table(("Hugging Face id", "params total / active", "attention",
                "experts (routed x per token)", "context", "weights dense / experts"), vendored)])


# -- REST API -------------------------------------------------------------------------------------
def _schema_type(schema: dict[str, Any]) -> str:
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[1]
        return f"[{name}](#schema-{name.lower()})"
    if "anyOf" in schema:
        return " or ".join(_schema_type(s) for s in schema["anyOf"])
    if "enum" in schema:
        return "one of " + ", ".join(f"`{v}`" for v in schema["enum"])
    kind = schema.get("type", "any")
    if kind == "array":
        return "list of " + _schema_type(schema.get("items", {}))
    if kind == "object" and isinstance(schema.get("additionalProperties"), dict):
        return "map of " + _schema_type(schema["additionalProperties"])
    return f"`{kind}`"


def _constraints(schema: dict[str, Any]) -> str:
    words = {"minimum": ">=", "maximum": "<=", "minLength": "length >=",
             "maxLength": "length <=", "pattern": "matches"}
    found = [f"{w} `{schema[k]}`" for k, w in words.items() if k in schema]
    return f" ({', '.join(found)})" if found else ""


def _response_rows(responses: dict[str, Any]) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = []
    for status in sorted(responses):
        body = responses[status]
        content = body.get("content", {})
        kinds = [f"{media}: {_schema_type(c['schema'])}" if c.get("schema") else media
                 for media, c in content.items()]
        rows.append((status, _cell(body.get("description", "")), "<br>".join(kinds) or "-"))
    return rows


def openapi_document() -> dict[str, Any]:
    from autotune.api.app import create_app
    from autotune.settings import ApiSettings, Settings

    # Making the app touches no database; the file is never created. Reads open, as by default.
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(database_url=f"sqlite:///{tmp}/docs.db", api=ApiSettings(token=None))
        return create_app(settings).openapi()


def openapi_markdown() -> str:
    spec = openapi_document()
    out: list[str] = []
    for path, methods in spec["paths"].items():
        for method, op in methods.items():
            out += [f"### `{method.upper()} {path}`", "", _prose(op.get("description", "")), ""]
            if op.get("security"):
                out += ["Needs `Authorization: Bearer <AUTOTUNE_API__TOKEN>`.", ""]
            params = op.get("parameters", [])
            if params:
                out += [_table(("parameter", "in", "type", "required", "default", "description"),
                               [(f"`{p['name']}`", p["in"],
                                 _schema_type(p["schema"]) + _constraints(p["schema"]),
                                 "yes" if p.get("required") else "no",
                                 _code(p["schema"]["default"]) if "default" in p["schema"] else "-",
                                 _cell(p.get("description", ""))) for p in params]), ""]
            body = op.get("requestBody")
            if body:
                kinds = ", ".join(f"{m}: {_schema_type(c['schema'])}"
                                  for m, c in body["content"].items())
                out += [f"Request body ({'required' if body.get('required') else 'optional'}): "
                        f"{kinds}.", ""]
            out += [_table(("status", "meaning", "body"), _response_rows(op["responses"])), ""]
    out += ["## Schemas", ""]
    for name, schema in spec["components"]["schemas"].items():
        out += [f"### {name} {{#schema-{name.lower()}}}", "", _prose(schema.get("description", "")),
                ""]
        required = set(schema.get("required", []))
        rows = [(f"`{field}`", _schema_type(s) + _constraints(s),
                 "yes" if field in required else "no",
                 _code(s["default"]) if "default" in s else "-", _cell(s.get("description", "")))
                for field, s in schema.get("properties", {}).items()]
        out += [_table(("field", "type", "required", "default", "description"), rows), ""]
    return "\n".join(out)


# -- the hook -------------------------------------------------------------------------------------
PARTS: dict[str, Callable[[], str]] = {
    "cli": cli_markdown,
    "settings": settings_markdown,
    "space-keys": space_keys_markdown,
    "space-names": space_names_markdown,
    "builtin-spaces": builtin_spaces_markdown,
    "rules": rules_markdown,
    "catalogue": catalogue_markdown,
    "openapi": openapi_markdown,
}


def _replace(match: re.Match[str]) -> str:
    name = match.group(1)
    if name not in PARTS:
        log.warning("unknown reference marker %r; known: %s", name, ", ".join(PARTS))
        return match.group(0)
    return re.sub(r"\n{3,}", "\n\n", PARTS[name]())  # empty descriptions leave blank runs


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    """MkDocs hook: replace each reference marker with its generated markdown."""
    return MARKER.sub(_replace, markdown)


if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in PARTS:
        sys.exit(f"usage: {sys.argv[0]} {{{','.join(PARTS)}}}")
    logging.basicConfig(format="%(levelname)s: %(message)s")
    print(PARTS[sys.argv[1]]())
