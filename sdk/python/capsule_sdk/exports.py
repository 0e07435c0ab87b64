"""The component's exports, implemented once on top of the registry, so plugin authors never
touch generated bindings. Imported only inside the component (`capsule-py build` makes the
entry module import these classes)."""
from __future__ import annotations

import json
import traceback
from typing import Any

from componentize_py_types import Err
from wit_world import exports
from wit_world.exports import completion, prompts, resources, tools
from wit_world.imports import types

from .content import Audio, Image, Link, ResourceContents
from .context import Context, InputError, InputNeeded, NotFound
from .registry import REGISTRY, Message
from .schema import from_json, to_json
from .uri import match


def _kwargs(handler, arguments: dict, context: Context) -> dict:
    hints = handler.hints()
    kwargs = {k: from_json(v, hints[k]) for k, v in arguments.items() if k in hints}
    if handler.context_param:
        kwargs[handler.context_param] = context
    return kwargs


def _input_required(needed: InputNeeded) -> types.InputRequired:
    requests = [types.KeyedInputRequest(key=k, request=r) for k, r in needed.requests.items()]
    return types.InputRequired(requests=requests, state=needed.state)


def _message(e: BaseException) -> str:
    text = str(e)
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


def _content(value: Any) -> types.Content:
    if isinstance(value, str):
        return types.Content_Text(value)
    if isinstance(value, Image):
        return types.Content_Image(types.Binary(data=value.data, mime_type=value.mime_type))
    if isinstance(value, Audio):
        return types.Content_Audio(types.Binary(data=value.data, mime_type=value.mime_type))
    if isinstance(value, Link):
        return types.Content_ResourceLink(types.ResourceLink(uri=value.uri, name=value.name,
                                                              description=value.description,
                                                              mime_type=value.mime_type))
    if isinstance(value, ResourceContents):
        return types.Content_Resource(_contents(value.uri, value.body, value.mime_type))
    return types.Content_Text(json.dumps(to_json(value)))


def _contents(uri: str, body: Any, mime_type: str | None) -> types.ResourceContents:
    if isinstance(body, ResourceContents):
        return _contents(body.uri, body.body, body.mime_type or mime_type)
    if isinstance(body, (bytes, bytearray)):
        return types.ResourceContents(uri=uri, mime_type=mime_type, body=types.ResourceBody_Blob(bytes(body)))
    if not isinstance(body, str):
        body = json.dumps(to_json(body))
        mime_type = mime_type or "application/json"
    return types.ResourceContents(uri=uri, mime_type=mime_type, body=types.ResourceBody_Text(body))


def _tool_result(tool, value: Any) -> tools.ToolResult:
    if tool.output_schema is not None:
        structured = {"result": to_json(value)} if tool.wrap_result else to_json(value)
        text = json.dumps(structured)
        return tools.ToolResult(content=[types.Content_Text(text)], structured_content=text, is_error=False)
    if value is None:
        items = []
    elif isinstance(value, (list, tuple)):
        items = [_content(v) for v in value]
    else:
        items = [_content(value)]
    return tools.ToolResult(content=items, structured_content=None, is_error=False)


class Tools(exports.Tools):
    def list(self) -> list[tools.Tool]:
        out = []
        for t in REGISTRY.tools.values():
            a = t.annotations
            annotations = tools.ToolAnnotations(
                title=t.title, read_only_hint=a.get("read_only"), destructive_hint=a.get("destructive"),
                idempotent_hint=a.get("idempotent"), open_world_hint=a.get("open_world")) if a else None
            out.append(tools.Tool(name=t.name, title=t.title, description=t.description,
                                  input_schema=json.dumps(t.input_schema),
                                  output_schema=json.dumps(t.output_schema) if t.output_schema else None,
                                  annotations=annotations))
        return out

    def call(self, name: str, arguments: str, context: types.RequestContext) -> tools.CallOutcome:
        tool = REGISTRY.tools.get(name)
        if tool is None:
            raise Err(types.Error_NotFound(f"no tool {name}"))
        try:
            value = tool.handler.func(**_kwargs(tool.handler, json.loads(arguments), Context(context)))
            return tools.CallOutcome_Complete(_tool_result(tool, value))
        except InputNeeded as needed:
            return tools.CallOutcome_InputRequired(_input_required(needed))
        except Exception as e:  # noqa: BLE001 - an uncaught exception is the tool's error
            traceback.print_exc()
            result = tools.ToolResult(content=[types.Content_Text(_message(e))], structured_content=None,
                                      is_error=True)
            return tools.CallOutcome_Complete(result)


def _failure(e: Exception) -> Err:
    if isinstance(e, NotFound):
        return Err(types.Error_NotFound(str(e)))
    if isinstance(e, (InputError, TypeError, ValueError)):
        return Err(types.Error_InvalidParams(_message(e)))
    traceback.print_exc()
    return Err(types.Error_Failed(_message(e)))


class Resources(exports.Resources):
    def list(self) -> list[resources.Resource]:
        return [resources.Resource(uri=r.uri, name=r.name, title=r.title, description=r.description,
                                   mime_type=r.mime_type, size=None) for r in REGISTRY.resources.values()]

    def templates(self) -> list[resources.ResourceTemplate]:
        return [resources.ResourceTemplate(uri_template=t.uri_template, name=t.name, title=t.title,
                                           description=t.description, mime_type=t.mime_type)
                for t in REGISTRY.templates.values()]

    def read(self, uri: str, context: types.RequestContext) -> resources.ReadOutcome:
        ctx = Context(context)
        try:
            if uri in REGISTRY.resources:
                r = REGISTRY.resources[uri]
                body = r.handler.func(**_kwargs(r.handler, {}, ctx))
                return resources.ReadOutcome_Complete([_contents(uri, body, r.mime_type)])
            for t in REGISTRY.templates.values():
                variables = match(t.uri_template, uri)
                if variables is not None:
                    body = t.handler.func(**_kwargs(t.handler, variables, ctx))
                    return resources.ReadOutcome_Complete([_contents(uri, body, t.mime_type)])
            raise NotFound(f"no resource {uri}")
        except InputNeeded as needed:
            return resources.ReadOutcome_InputRequired(_input_required(needed))
        except Exception as e:  # noqa: BLE001 - reported to the client as the read's error
            raise _failure(e) from e


def _prompt_message(m: Any) -> prompts.PromptMessage:
    if not isinstance(m, Message):
        m = Message("user", m)
    role = types.Role.USER if m.role == "user" else types.Role.ASSISTANT
    return prompts.PromptMessage(role=role, content=_content(m.content))


class Prompts(exports.Prompts):
    def list(self) -> list[prompts.Prompt]:
        return [prompts.Prompt(name=p.name, title=p.title, description=p.description,
                               arguments=[prompts.PromptArgument(name=n, title=None, description=d, required=r)
                                          for n, d, r in p.arguments])
                for p in REGISTRY.prompts.values()]

    def get(self, name: str, arguments: list[tuple[str, str]], context: types.RequestContext) -> prompts.GetOutcome:
        prompt = REGISTRY.prompts.get(name)
        if prompt is None:
            raise Err(types.Error_NotFound(f"no prompt {name}"))
        try:
            value = prompt.handler.func(**_kwargs(prompt.handler, dict(arguments), Context(context)))
            messages = value if isinstance(value, (list, tuple)) else [value]
            result = prompts.PromptResult(description=None, messages=[_prompt_message(m) for m in messages])
            return prompts.GetOutcome_Complete(result)
        except InputNeeded as needed:
            return prompts.GetOutcome_InputRequired(_input_required(needed))
        except Exception as e:  # noqa: BLE001 - reported to the client as the prompt's error
            raise _failure(e) from e


class Completion(exports.Completion):
    def complete(self, reference: completion.Reference, argument: str, value: str,
                 context: list[tuple[str, str]]) -> completion.Suggestions:
        kind = "prompt" if isinstance(reference, completion.Reference_Prompt) else "template"
        func = REGISTRY.completions.get((kind, reference.value, argument))
        if func is None:
            return completion.Suggestions(values=[], total=None, has_more=False)
        try:
            values = [str(v) for v in func(value, dict(context))]
        except Exception as e:  # noqa: BLE001 - reported to the client as the completion's error
            raise _failure(e) from e
        return completion.Suggestions(values=values[:100], total=len(values), has_more=len(values) > 100)
