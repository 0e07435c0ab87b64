"""Capsule plugins in Python.

Decorate plain functions; their JSON Schemas come from the type hints (str, int, float,
bool, lists, dicts, `Optional`, `Literal`, enums, dataclasses and TypedDicts; `Annotated[T,
"text"]` adds a description) and their descriptions from the docstrings:

    from capsule_sdk import tool

    @tool
    def add(a: int, b: int) -> int:
        "Add two integers."
        return a + b

Build the component with `capsule-py build app.py -o app.wasm`. A function may take a
`Context` parameter to log, report progress, see its mounts and ask the client for input.
An uncaught exception becomes a tool error carrying its message.
"""
from __future__ import annotations

from typing import Any, Callable

from . import registry as _registry
from .content import Audio, Image, Link, ResourceContents
from .context import Caller, Context, Elicited, InputError, Mount, NotFound, Root
from .registry import Message, assistant, user

__all__ = [
    "Audio", "Caller", "Context", "Elicited", "Image", "InputError", "Link", "Message", "Mount", "NotFound",
    "ResourceContents", "Root", "assistant", "complete", "prompt", "resource", "tool", "user",
]


def tool(func: Callable | None = None, *, name: str | None = None, description: str | None = None,
         title: str | None = None, read_only: bool | None = None, destructive: bool | None = None,
         idempotent: bool | None = None, open_world: bool | None = None) -> Any:
    """Register a tool: `@tool` or `@tool(name=..., read_only=True, ...)`. Its arguments are
    the function's parameters; its result is text (a `str`), content (`Image`, a list…) or
    structured output (a dataclass, dict or any other hinted type, with an output schema)."""
    hints = {"read_only": read_only, "destructive": destructive, "idempotent": idempotent,
             "open_world": open_world}
    annotations = {k: v for k, v in hints.items() if v is not None}

    def register(f: Callable) -> Callable:
        _registry.add_tool(f, name, description, title, annotations)
        return f

    return register(func) if func is not None else register


def resource(uri: str, *, name: str | None = None, description: str | None = None,
             mime_type: str | None = None, title: str | None = None) -> Callable:
    """Register a resource at `uri`, or a template when `uri` has `{variables}` (each one a
    parameter of the function). The function returns `str` (text), `bytes` (a blob) or
    JSON-compatible data; raise `NotFound` for a URI that does not exist."""

    def register(f: Callable) -> Callable:
        _registry.add_resource(f, uri, name, description, mime_type, title)
        return f

    return register


def prompt(func: Callable | None = None, *, name: str | None = None, description: str | None = None,
           title: str | None = None) -> Any:
    """Register a prompt. Its `str` parameters are the prompt's arguments (required unless they
    have a default); it returns a `str` (one user message), a `Message`, or a list of them."""

    def register(f: Callable) -> Callable:
        _registry.add_prompt(f, name, description, title)
        return f

    return register(func) if func is not None else register


def complete(*, argument: str, prompt: str | None = None, template: str | None = None) -> Callable:
    """Register completion for `argument` of a prompt or resource template. The function takes
    the partial value (and optionally a dict of the arguments already chosen) and returns the
    suggestions, best first."""

    def register(f: Callable) -> Callable:
        import inspect

        takes_context = len(inspect.signature(f).parameters) >= 2
        _registry.add_completion((lambda v, c: f(v, c)) if takes_context else (lambda v, c: f(v)),
                                 prompt, template, argument)
        return f

    return register
