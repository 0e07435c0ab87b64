"""What a running call can do: log, report progress, see its mounts and caller, and ask the
client for input (elicitation, sampling, roots).

Asking works by replay: `ctx.elicit(...)` returns the answer when the host has it and
otherwise stops the call, which the SDK turns into an input-required result. When the client
has answered, the host calls the function again from the top with the answers, and this time
`ctx.elicit(...)` returns. So a function that asks must do nothing irreversible before its
last question. The host hands back only the last round's answers: the earlier ones travel in
the round's state (sealed by the host), so a function may ask one question after another.
"""
from __future__ import annotations

import base64
import dataclasses
import enum
import json
from dataclasses import dataclass
from typing import Any

from .schema import from_json, schema_for

try:
    from wit_world.imports import host, types
except ImportError:  # outside a component, as in the SDK's own tests: nothing to call
    host = types = None

_LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")


class NotFound(Exception):
    """Raise from a resource, template or prompt for something that does not exist."""


class InputError(Exception):
    """The client answered a question in a way the plugin cannot use (or with an error)."""


class InputNeeded(BaseException):
    """Raised by `Context` to stop a call until the client has answered `requests`; `state`
    carries the answers given so far. A `BaseException`, so that a function's own
    `except Exception` does not swallow the question."""

    def __init__(self, requests: dict[str, Any], state: bytes | None = None):
        super().__init__("input needed")
        self.requests = requests
        self.state = state


@dataclass
class Elicited:
    """The user's answer to `Context.elicit`."""

    action: str
    """`accept`, `decline` or `cancel`."""
    content: Any
    """The submitted values when accepted (an instance of the schema's dataclass if one was
    given, else a dict), otherwise None."""

    @property
    def accepted(self) -> bool:
        return self.action == "accept"


@dataclass
class Root:
    """A root the client exposes."""

    uri: str
    name: str | None


@dataclass
class Mount:
    """A directory this call may use, at `path`, with Python's own `open` and `os`."""

    path: str
    name: str | None
    writable: bool


@dataclass
class Caller:
    """Who the request comes from."""

    tenant: str
    subject: str | None
    client: str | None
    scopes: list[str]


class Context:
    """Passed to any tool, resource or prompt function with a parameter annotated `Context`."""

    def __init__(self, wit_context: Any = None):
        self._responses = decode_answers(wit_context.state, types) if wit_context else {}
        self._responses.update({r.key: r.response for r in wit_context.responses} if wit_context else {})
        caps = wit_context.client if wit_context else None
        self.can_elicit = bool(caps and caps.elicitation_form)
        self.can_elicit_url = bool(caps and caps.elicitation_url)
        self.can_sample = bool(caps and caps.sampling)
        self.can_list_roots = bool(caps and caps.roots)
        self._asked = 0

    # Messages to the client.

    def log(self, level: str, message: str, logger: str | None = None) -> None:
        """Log at one of the MCP levels (`debug` … `emergency`)."""
        if level not in _LEVELS:
            raise ValueError(f"unknown log level {level!r}; one of {', '.join(_LEVELS)}")
        host.log(host.LogLevel[level.upper()], logger, message)

    def debug(self, message: str) -> None:
        self.log("debug", message)

    def info(self, message: str) -> None:
        self.log("info", message)

    def warning(self, message: str) -> None:
        self.log("warning", message)

    def error(self, message: str) -> None:
        self.log("error", message)

    def progress(self, progress: float, total: float | None = None, message: str | None = None) -> None:
        """Report progress; sent when the client gave a progress token."""
        host.progress(float(progress), None if total is None else float(total), message)

    def cancelled(self) -> bool:
        """True once the client has cancelled this request."""
        return host.cancelled()

    def list_changed(self, kind: str) -> None:
        """Say the plugin's `tools`, `resources` or `prompts` list may have changed."""
        host.list_changed(host.ListKind[kind.upper()])

    def resource_updated(self, uri: str) -> None:
        """Say the contents of a resource this plugin serves changed."""
        host.resource_updated(uri)

    # What the call may use.

    def mounts(self) -> list[Mount]:
        """The directories this call may open, in the host's order."""
        return [Mount(m.path, m.name, m.writable) for m in host.mounts()]

    def caller(self) -> Caller:
        who = host.caller()
        p = who.principal
        return Caller(who.tenant, p.subject if p else None, p.client if p else None, list(p.scopes) if p else [])

    # Questions to the client.

    def _answer(self, key: str | None, kind: str, request: Any) -> Any:
        key = key or f"{kind}-{self._asked}"
        self._asked += 1
        if key in self._responses:
            return self._responses[key]
        raise InputNeeded({key: request}, encode_answers(self._responses) if self._responses else None)

    def elicit(self, message: str, schema: Any, key: str | None = None) -> Elicited:
        """Ask the user to fill a form. `schema` is a dataclass (its fields become the form) or
        a JSON Schema dict with flat, primitive properties."""
        cls = schema if dataclasses.is_dataclass(schema) and isinstance(schema, type) else None
        json_schema = schema_for(cls) if cls else schema
        request = types.InputRequest_ElicitForm(types.ElicitForm(message=message,
                                                                 requested_schema=_dumps(json_schema)))
        answer = self._answer(key, "elicit", request)
        if isinstance(answer, types.InputResponse_Invalid):
            raise InputError(answer.value)
        if not isinstance(answer, types.InputResponse_Elicitation):
            raise InputError("the client answered a form with something else")
        action = answer.value.action.name.lower()
        content = _loads(answer.value.content) if answer.value.content else None
        if cls is not None and content is not None and action == "accept":
            content = from_json(content, cls)
        return Elicited(action, content if action == "accept" else None)

    def sample(self, prompt: str, max_tokens: int = 1000, system_prompt: str | None = None,
               temperature: float | None = None, key: str | None = None) -> str:
        """Ask the client's model to answer `prompt`; returns the text it sampled."""
        request = types.InputRequest_Sample(types.SamplingRequest(
            messages=[types.SamplingMessage(role=types.Role.USER, content=types.Content_Text(prompt))],
            system_prompt=system_prompt, max_tokens=max_tokens, temperature=temperature, stop_sequences=[]))
        answer = self._answer(key, "sample", request)
        if isinstance(answer, types.InputResponse_Invalid):
            raise InputError(answer.value)
        if not isinstance(answer, types.InputResponse_Sampling):
            raise InputError("the client answered a sampling request with something else")
        content = answer.value.content
        if not isinstance(content, types.Content_Text):
            raise InputError("the client's model answered with something other than text")
        return content.value

    def roots(self, key: str | None = None) -> list[Root]:
        """The client's roots."""
        answer = self._answer(key, "roots", types.InputRequest_ListRoots())
        if isinstance(answer, types.InputResponse_Invalid):
            raise InputError(answer.value)
        if not isinstance(answer, types.InputResponse_Roots):
            raise InputError("the client answered a roots request with something else")
        return [Root(r.uri, r.name) for r in answer.value]


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def _loads(text: str) -> Any:
    return json.loads(text)


def encode_answers(answers: dict[str, Any]) -> bytes:
    """The answers given so far, as a round's state: JSON, each generated binding value
    tagged with its class name so that it reads back as itself."""
    def encode(value: Any) -> Any:
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            fields = {f.name: encode(getattr(value, f.name)) for f in dataclasses.fields(value)}
            return {"$": type(value).__name__, **fields}
        if isinstance(value, enum.Enum):
            return {"$enum": type(value).__name__, "name": value.name}
        if isinstance(value, bytes):
            return {"$bytes": base64.b64encode(value).decode("ascii")}
        if isinstance(value, (list, tuple)):
            return [encode(v) for v in value]
        return value

    return _dumps({"capsule-answers": 1, "answers": {k: encode(v) for k, v in answers.items()}}).encode()


def decode_answers(state: bytes | None, module: Any) -> dict[str, Any]:
    """The answers a round's state carries, as values of `module`'s generated classes; none
    for state that is not the SDK's (say, from a plugin version that kept its own)."""
    def decode(value: Any) -> Any:
        if isinstance(value, list):
            return [decode(v) for v in value]
        if not isinstance(value, dict):
            return value
        if "$bytes" in value:
            return base64.b64decode(value["$bytes"])
        if "$enum" in value:
            return getattr(module, value["$enum"])[value["name"]]
        cls = getattr(module, value["$"])
        if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
            raise ValueError(f"{value['$']} is not a generated type")
        return cls(**{k: decode(v) for k, v in value.items() if k != "$"})

    if not state or module is None:
        return {}
    try:
        carried = json.loads(state)
        if not isinstance(carried, dict) or carried.get("capsule-answers") != 1:
            return {}
        return {str(k): decode(v) for k, v in carried["answers"].items()}
    except (ValueError, KeyError, TypeError, AttributeError):
        return {}
