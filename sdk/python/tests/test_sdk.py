"""The SDK's pure parts, natively: schemas from type hints, values back into hinted types,
template matching, and what the decorators register."""
from __future__ import annotations

import enum
import types as pytypes
import unittest
from dataclasses import dataclass, field
from typing import Annotated, Literal, Optional, TypedDict

import capsule_sdk.context
from capsule_sdk import Context, Image, Link, complete, prompt, resource, tool
from capsule_sdk.context import InputNeeded, decode_answers, encode_answers
from capsule_sdk.registry import REGISTRY, _output
from capsule_sdk.schema import SchemaError, from_json, schema_for, to_json
from capsule_sdk.uri import match


class Color(enum.Enum):
    RED = "red"
    GREEN = "green"


@dataclass
class Point:
    """A point on the plane."""

    x: float
    y: float
    label: Optional[str] = None
    tags: list[str] = field(default_factory=list)


class Movie(TypedDict):
    title: str
    year: int


class Schemas(unittest.TestCase):
    def test_primitives_and_containers(self):
        self.assertEqual(schema_for(int), {"type": "integer"})
        self.assertEqual(schema_for(list[bool]), {"type": "array", "items": {"type": "boolean"}})
        self.assertEqual(schema_for(dict[str, float]), {"type": "object", "additionalProperties": {"type": "number"}})
        self.assertEqual(schema_for(Literal["a", "b"]), {"enum": ["a", "b"]})
        self.assertEqual(schema_for(Color), {"enum": ["red", "green"]})
        self.assertEqual(schema_for(Optional[int]), {"anyOf": [{"type": "integer"}, {"type": "null"}]})
        self.assertEqual(schema_for(Annotated[str, "a name"]), {"type": "string", "description": "a name"})

    def test_dataclass_fields_defaults_and_doc(self):
        self.assertEqual(schema_for(Point), {
            "type": "object",
            "properties": {
                "x": {"type": "number"}, "y": {"type": "number"},
                "label": {"anyOf": [{"type": "string"}, {"type": "null"}]},
                "tags": {"type": "array", "items": {"type": "string"}, "default": []},
            },
            "required": ["x", "y"],
            "description": "A point on the plane.",
        })

    def test_typed_dict(self):
        self.assertEqual(schema_for(Movie)["required"], ["title", "year"])

    def test_unsupported_types_are_refused(self):
        with self.assertRaises(SchemaError):
            schema_for(bytes)
        with self.assertRaises(SchemaError):
            schema_for(dict[int, str])

    def test_values_come_back_as_their_types(self):
        point = from_json({"x": 1, "y": 2.5, "tags": ["a"]}, Point)
        self.assertEqual(point, Point(1.0, 2.5, None, ["a"]))
        self.assertIsInstance(point.x, float)
        self.assertEqual(from_json(["red"], list[Color]), [Color.RED])
        self.assertEqual(from_json(None, Optional[Point]), None)
        self.assertEqual(to_json(Point(1, 2, "p")), {"x": 1, "y": 2, "label": "p", "tags": []})


class Templates(unittest.TestCase):
    def test_simple_reserved_and_fragment_expansions(self):
        self.assertEqual(match("notes://{id}", "notes://a%20b"), {"id": "a b"})
        self.assertIsNone(match("notes://{id}", "notes://a/b"))
        self.assertEqual(match("file://{+path}", "file:///etc/x"), {"path": "/etc/x"})
        self.assertEqual(match("doc://{id}{#part}", "doc://7#intro"), {"id": "7", "part": "intro"})
        self.assertIsNone(match("notes://{id}", "other://x"))

    def test_values_split_as_the_host_splits_them(self):
        # Each variable takes the shortest non-empty value that lets the rest match, as the
        # host and the Rust SDK do (sdk/template).
        self.assertEqual(match("x://{a}.{b}", "x://1.2.3"), {"a": "1", "b": "2.3"})
        self.assertEqual(match("f://{+dir}/{name}", "f:///srv/a/b.txt"), {"dir": "/srv/a", "name": "b.txt"})
        self.assertIsNone(match("x://{a}.{b}", "x://.2"))
        self.assertEqual(match("x://{file.name}", "x://n"), {"file.name": "n"})
        self.assertEqual(match("x://{v}", "x://%FF%41"), {"v": "\ufffdA"})


class Registration(unittest.TestCase):
    def test_a_tool_with_context_structured_output_and_annotations(self):
        @tool(name="sdk-test-move", read_only=True)
        def move(point: Point, by: Annotated[float, "how far"] = 1.0, ctx: Context = None) -> Point:
            """Move a point."""
            return point

        registered = REGISTRY.tools["sdk-test-move"]
        self.assertEqual(registered.description, "Move a point.")
        self.assertEqual(registered.handler.context_param, "ctx")
        self.assertEqual(registered.input_schema["required"], ["point"])
        self.assertEqual(registered.input_schema["properties"]["by"],
                         {"type": "number", "description": "how far", "default": 1.0})
        self.assertEqual(registered.output_schema["required"], ["x", "y"])
        self.assertFalse(registered.wrap_result)
        self.assertEqual(registered.annotations, {"read_only": True})

    def test_primitive_results_are_wrapped_and_text_is_not_structured(self):
        @tool
        def sdk_test_count(text: str) -> int:
            return len(text)

        @tool
        def sdk_test_echo(text: str) -> str:
            return text

        self.assertTrue(REGISTRY.tools["sdk_test_count"].wrap_result)
        self.assertEqual(REGISTRY.tools["sdk_test_count"].output_schema["properties"]["result"], {"type": "integer"})
        self.assertIsNone(REGISTRY.tools["sdk_test_echo"].output_schema)

    def test_templates_prompts_and_completions(self):
        @resource("sdk-test://{name}")
        def read(name: str) -> str:
            return name

        @prompt
        def sdk_test_prompt(topic: Annotated[str, "what about"], tone: str = "calm") -> str:
            """Write."""
            return topic

        @complete(prompt="sdk_test_prompt", argument="tone")
        def tones(value: str) -> list[str]:
            return ["calm", "curt"]

        self.assertEqual(REGISTRY.templates["sdk-test://{name}"].variables, ["name"])
        self.assertEqual(REGISTRY.prompts["sdk_test_prompt"].arguments,
                         [("topic", "what about", True), ("tone", None, False)])
        self.assertEqual(REGISTRY.completions[("prompt", "sdk_test_prompt", "tone")]("c", {}), ["calm", "curt"])

    def test_mistakes_are_caught_at_registration(self):
        with self.assertRaises(TypeError):
            resource("sdk-test://{missing}")(lambda name: name)
        def counted(count: int) -> str:
            return "x"

        with self.assertRaises(TypeError):
            prompt(counted)  # prompt arguments are text
        with self.assertRaises(ValueError):
            tool(name="sdk-test-move")(lambda: None)


class ContentResults(unittest.TestCase):
    def test_content_return_hints_are_content_not_structured_output(self):
        def link() -> Link: ...
        def images() -> list[Image]: ...
        def either() -> Image | Link: ...
        def text_or_link() -> list[str | Link]: ...
        for func in (link, images, either, text_or_link):
            self.assertEqual(_output(func), (None, False), func.__name__)

        def numbers() -> list[int]: ...
        self.assertEqual(_output(numbers)[1], True, "a list of numbers is still structured output")


# Stand-ins for the classes componentize-py generates from the WIT `types` interface, in
# their shape: dataclasses with a `value` per variant case, Python enums, bytes.
class Role(enum.Enum):
    USER = 0
    ASSISTANT = 1


class ElicitAction(enum.Enum):
    ACCEPT = 0
    DECLINE = 1


@dataclass
class Binary:
    data: bytes
    mime_type: str


@dataclass
class Content_Image:
    value: Binary


@dataclass
class SamplingResponse:
    role: Role
    content: Content_Image
    model: str
    stop_reason: Optional[str]


@dataclass
class InputResponse_Sampling:
    value: SamplingResponse


@dataclass
class ElicitResponse:
    action: ElicitAction
    content: Optional[str]


@dataclass
class InputResponse_Elicitation:
    value: ElicitResponse


@dataclass
class RootValue:
    uri: str
    name: Optional[str]


@dataclass
class InputResponse_Roots:
    value: list


GENERATED = pytypes.SimpleNamespace(**{c.__name__: c for c in (
    Role, ElicitAction, Binary, Content_Image, SamplingResponse, InputResponse_Sampling, ElicitResponse,
    InputResponse_Elicitation, RootValue, InputResponse_Roots)})


class Answers(unittest.TestCase):
    """The answers of earlier rounds travel in the round's state: the host hands back only
    the last round's."""

    def test_answers_read_back_as_themselves(self):
        answers = {
            "elicit-0": InputResponse_Elicitation(ElicitResponse(ElicitAction.ACCEPT, '{"sure":true}')),
            "sample-1": InputResponse_Sampling(SamplingResponse(
                Role.ASSISTANT, Content_Image(Binary(b"\x00\xffpng", "image/png")), "m", None)),
            "roots": InputResponse_Roots([RootValue("file:///w", None), RootValue("file:///v", "v")]),
        }
        self.assertEqual(decode_answers(encode_answers(answers), GENERATED), answers)
        # State that is not the SDK's, or names what is no generated class, carries nothing.
        for state in [b"the plugin's own", b"[]", b'{"capsule-answers":1,"answers":{"k":{"$":"os"}}}',
                      b'{"capsule-answers":1,"answers":{"k":{"$":"Nope"}}}', None]:
            self.assertEqual(decode_answers(state, GENERATED), {}, state)

    def test_a_later_round_still_has_the_earlier_answers(self):
        first = InputResponse_Elicitation(ElicitResponse(ElicitAction.ACCEPT, '{"sure":true}'))
        second = InputResponse_Elicitation(ElicitResponse(ElicitAction.DECLINE, None))
        wit = pytypes.SimpleNamespace(client=None, state=encode_answers({"elicit-0": first}),
                                      responses=[pytypes.SimpleNamespace(key="elicit-1", response=second)])
        saved, capsule_sdk.context.types = capsule_sdk.context.types, GENERATED
        try:
            ctx = Context(wit)
            self.assertEqual(ctx._answer(None, "elicit", "ask 0"), first)
            self.assertEqual(ctx._answer(None, "elicit", "ask 1"), second)
            with self.assertRaises(InputNeeded) as raised:
                ctx._answer(None, "elicit", "ask 2")
            self.assertEqual(raised.exception.requests, {"elicit-2": "ask 2"})
            self.assertEqual(decode_answers(raised.exception.state, GENERATED), {"elicit-0": first, "elicit-1": second})
        finally:
            capsule_sdk.context.types = saved

    def test_a_question_is_not_swallowed_by_a_broad_except(self):
        self.assertFalse(issubclass(InputNeeded, Exception))


if __name__ == "__main__":
    unittest.main()
