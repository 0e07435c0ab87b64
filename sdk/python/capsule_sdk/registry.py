"""What a plugin provides: tools, resources, templates, prompts and completions, registered by
the decorators in `capsule_sdk` when the plugin's module is imported. Pure Python."""
from __future__ import annotations

import dataclasses
import inspect
import re
import typing
from dataclasses import dataclass, field
from typing import Any, Callable

from .content import Audio, Image, Link, ResourceContents
from .schema import object_schema, schema_for

_TEMPLATE_VAR = re.compile(r"\{[+#]?([A-Za-z0-9_]+)\}")


@dataclass
class Message:
    """One message of a rendered prompt."""

    role: str
    content: Any


def user(content: Any) -> Message:
    """A prompt message from the user: text, or any content `capsule_sdk` can send."""
    return Message("user", content)


def assistant(content: Any) -> Message:
    """A prompt message from the model."""
    return Message("assistant", content)


@dataclass
class Handler:
    """A registered function and how to call it."""

    func: Callable
    # (name, hint, required, default) of each argument the client gives.
    params: list[tuple[str, Any, bool, Any]]
    # The name of the parameter that receives the `Context`, if any.
    context_param: str | None

    @staticmethod
    def of(func: Callable) -> "Handler":
        hints = typing.get_type_hints(func, include_extras=True)
        params = []
        context_param = None
        for p in inspect.signature(func).parameters.values():
            hint = hints.get(p.name, p.annotation)
            if getattr(hint, "__name__", None) == "Context" or (hint is inspect.Parameter.empty and p.name == "ctx"):
                context_param = p.name
                continue
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                raise TypeError(f"{func.__name__}: *args and **kwargs cannot be described to a client")
            default = dataclasses.MISSING if p.default is p.empty else p.default
            params.append((p.name, hint, p.default is p.empty, default))
        return Handler(func, params, context_param)

    def hints(self) -> dict[str, Any]:
        return {name: hint for name, hint, _, _ in self.params}


@dataclass
class Tool:
    name: str
    description: str
    handler: Handler
    input_schema: dict
    output_schema: dict | None
    # Primitive results are wrapped as {"result": value}, as FastMCP does.
    wrap_result: bool
    title: str | None = None
    annotations: dict = field(default_factory=dict)


@dataclass
class Resource:
    uri: str
    name: str
    handler: Handler
    description: str | None
    mime_type: str | None
    title: str | None = None


@dataclass
class Template:
    uri_template: str
    name: str
    handler: Handler
    description: str | None
    mime_type: str | None
    title: str | None = None
    variables: list[str] = field(default_factory=list)


@dataclass
class Prompt:
    name: str
    description: str
    handler: Handler
    # (name, description, required) of each argument.
    arguments: list[tuple[str, str | None, bool]]
    title: str | None = None


@dataclass
class Registry:
    """Everything one plugin provides."""

    tools: dict[str, Tool] = field(default_factory=dict)
    resources: dict[str, Resource] = field(default_factory=dict)
    templates: dict[str, Template] = field(default_factory=dict)
    prompts: dict[str, Prompt] = field(default_factory=dict)
    # (kind, target, argument) -> the completion function; kind is "prompt" or "template".
    completions: dict[tuple[str, str, str], Callable] = field(default_factory=dict)


REGISTRY = Registry()


def _doc(func: Callable) -> str:
    return inspect.getdoc(func) or ""


def _output(func: Callable) -> tuple[dict | None, bool]:
    """The output schema of a tool's result, and whether the result must be wrapped."""
    hint = typing.get_type_hints(func, include_extras=True).get("return", inspect.Parameter.empty)
    if hint in (inspect.Parameter.empty, str, type(None), None, typing.Any) or _is_content(hint):
        return None, False
    schema = schema_for(hint)
    if schema.get("type") == "object":
        return schema, False
    return {"type": "object", "properties": {"result": schema}, "required": ["result"]}, True


def _is_content(hint: Any) -> bool:
    """Whether a return hint is content (text, images, audio, links, resources, or a list or
    union of them) rather than structured output."""
    if hint in (str, Image, Audio, Link, ResourceContents):
        return True
    origin = typing.get_origin(hint)
    if origin in (list, tuple, typing.Union) or (origin is not None and origin.__name__ == "UnionType"):
        args = [a for a in typing.get_args(hint) if a is not Ellipsis]
        return bool(args) and all(_is_content(a) for a in args)
    return False


def add_tool(func: Callable, name: str | None, description: str | None, title: str | None,
             annotations: dict) -> None:
    handler = Handler.of(func)
    name = name or func.__name__
    if name in REGISTRY.tools:
        raise ValueError(f"tool {name!r} is registered twice")
    output_schema, wrap = _output(func)
    REGISTRY.tools[name] = Tool(name, description or _doc(func), handler, object_schema(handler.params),
                                output_schema, wrap, title, annotations)


def add_resource(func: Callable, uri: str, name: str | None, description: str | None,
                 mime_type: str | None, title: str | None) -> None:
    handler = Handler.of(func)
    name = name or func.__name__
    description = description or _doc(func) or None
    variables = _TEMPLATE_VAR.findall(uri)
    if "{" in uri:
        missing = [v for v in variables if v not in handler.hints()]
        if missing:
            raise TypeError(f"{func.__name__}: template variables {missing} are not parameters")
        REGISTRY.templates[uri] = Template(uri, name, handler, description, mime_type, title, variables)
    else:
        REGISTRY.resources[uri] = Resource(uri, name, handler, description, mime_type, title)


def add_prompt(func: Callable, name: str | None, description: str | None, title: str | None) -> None:
    handler = Handler.of(func)
    name = name or func.__name__
    arguments = []
    for arg, hint, required, _ in handler.params:
        base, described = (typing.get_args(hint)[0], typing.get_args(hint)[1]) \
            if typing.get_origin(hint) is typing.Annotated else (hint, None)
        if base not in (str, inspect.Parameter.empty) and not (typing.get_args(base) and str in typing.get_args(base)):
            raise TypeError(f"prompt {name!r}: argument {arg!r} must be a str (prompt arguments are text)")
        arguments.append((arg, described if isinstance(described, str) else None, required))
    REGISTRY.prompts[name] = Prompt(name, description or _doc(func), handler, arguments, title)


def add_completion(func: Callable, prompt: str | None, template: str | None, argument: str) -> None:
    if (prompt is None) == (template is None):
        raise TypeError("complete() takes exactly one of prompt= or template=")
    key = ("prompt", prompt, argument) if prompt is not None else ("template", template, argument)
    REGISTRY.completions[key] = func
