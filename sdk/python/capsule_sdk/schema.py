"""JSON Schema from Python type hints, and JSON values back into the hinted types.

Pure Python: it runs inside the component (when the plugin's module is imported, which
componentize-py does once at build time) and natively in the SDK's own tests.
"""
from __future__ import annotations

import dataclasses
import enum
import inspect
import types
import typing
from typing import Any, Literal, Union, get_args, get_origin

_PRIMITIVES: dict[type, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}


class SchemaError(TypeError):
    """A type hint that has no JSON Schema (say, a function or a set of bytes)."""


def _is_optional(hint: Any) -> bool:
    return _union_members(hint) is not None and type(None) in _union_members(hint)


def _union_members(hint: Any) -> tuple | None:
    origin = get_origin(hint)
    if origin is Union or origin is types.UnionType:
        return get_args(hint)
    return None


def _annotated(hint: Any) -> tuple[Any, str | None]:
    """`Annotated[T, "description"]` gives T and the description."""
    if get_origin(hint) is typing.Annotated:
        base, *extra = get_args(hint)
        description = next((e for e in extra if isinstance(e, str)), None)
        return base, description
    return hint, None


def schema_for(hint: Any) -> dict:
    """The JSON Schema of values of type `hint`."""
    hint, description = _annotated(hint)
    schema = _schema(hint)
    if description:
        schema = {**schema, "description": description}
    return schema


def _schema(hint: Any) -> dict:
    if hint is Any or hint is inspect.Parameter.empty:
        return {}
    if hint is type(None):
        return {"type": "null"}
    if hint in _PRIMITIVES:
        return {"type": _PRIMITIVES[hint]}
    members = _union_members(hint)
    if members is not None:
        return {"anyOf": [schema_for(m) for m in members]}
    origin = get_origin(hint)
    if origin is Literal:
        values = list(get_args(hint))
        return {"enum": values}
    if origin in (list, tuple, set, frozenset) or hint in (list, tuple):
        args = get_args(hint)
        if origin is tuple and args and args[-1] is not Ellipsis:
            return {"type": "array", "prefixItems": [schema_for(a) for a in args], "minItems": len(args),
                    "maxItems": len(args)}
        items = schema_for(args[0]) if args else {}
        schema = {"type": "array", "items": items}
        if origin in (set, frozenset):
            schema["uniqueItems"] = True
        return schema
    if origin is dict or hint is dict:
        args = get_args(hint)
        if args and args[0] is not str:
            raise SchemaError(f"dictionary keys must be str, not {args[0]!r}")
        return {"type": "object", "additionalProperties": schema_for(args[1]) if args else {}}
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return {"enum": [m.value for m in hint]}
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        return _object_schema(hint, _fields(hint))
    if typing.is_typeddict(hint):
        hints = typing.get_type_hints(hint, include_extras=True)
        required = getattr(hint, "__required_keys__", set(hints))
        return _object_schema(hint, [(n, h, n in required, dataclasses.MISSING) for n, h in hints.items()])
    raise SchemaError(f"no JSON Schema for the type {hint!r}")


def _fields(cls: type) -> list[tuple[str, Any, bool, Any]]:
    hints = typing.get_type_hints(cls, include_extras=True)
    out = []
    for field in dataclasses.fields(cls):
        default = field.default
        if default is dataclasses.MISSING and field.default_factory is not dataclasses.MISSING:
            default = field.default_factory()
        out.append((field.name, hints[field.name], default is dataclasses.MISSING, default))
    return out


def object_schema(fields: list[tuple[str, Any, bool, Any]], doc: str | None = None) -> dict:
    """An object schema from (name, hint, required, default) tuples."""
    properties = {}
    required = []
    for name, hint, is_required, default in fields:
        prop = schema_for(hint)
        if not is_required and default is not dataclasses.MISSING and default is not None:
            prop = {**prop, "default": to_json(default)}
        properties[name] = prop
        if is_required and not _is_optional(_annotated(hint)[0]):
            required.append(name)
    schema: dict = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    if doc:
        schema["description"] = doc
    return schema


def _object_schema(cls: type, fields: list[tuple[str, Any, bool, Any]]) -> dict:
    doc = inspect.getdoc(cls)
    # A dataclass without a docstring gets a generated signature as its doc: leave it out.
    if doc and doc.startswith(f"{cls.__name__}("):
        doc = None
    return object_schema(fields, doc)


def to_json(value: Any) -> Any:
    """A Python value as JSON-compatible data: dataclasses and enums are taken apart."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_json(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return to_json(value.value)
    if isinstance(value, dict):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [to_json(v) for v in value]
    return value


def from_json(value: Any, hint: Any) -> Any:
    """A JSON value (already checked against `schema_for(hint)` by the host) as type `hint`."""
    hint, _ = _annotated(hint)
    if value is None or hint is Any or hint is inspect.Parameter.empty:
        return value
    members = _union_members(hint)
    if members is not None:
        for member in members:
            if member is type(None):
                continue
            try:
                return from_json(value, member)
            except (TypeError, ValueError, KeyError):
                continue
        return value
    origin = get_origin(hint)
    if hint is float and isinstance(value, int):
        return float(value)
    if origin in (list, set, frozenset, tuple):
        args = get_args(hint)
        if origin is tuple and args and args[-1] is not Ellipsis:
            return tuple(from_json(v, a) for v, a in zip(value, args))
        items = [from_json(v, args[0]) if args else v for v in value]
        return origin(items) if origin is not list else items
    if origin is dict:
        args = get_args(hint)
        return {k: from_json(v, args[1]) if args else v for k, v in value.items()}
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return hint(value)
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        if not isinstance(value, dict):
            raise TypeError(f"expected an object for {hint.__name__}")
        hints = typing.get_type_hints(hint, include_extras=True)
        known = {f.name for f in dataclasses.fields(hint)}
        return hint(**{k: from_json(v, hints[k]) for k, v in value.items() if k in known})
    return value
