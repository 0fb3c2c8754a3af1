"""Tools from types: the schemas a handler's annotations state, and the
arguments built back into those types."""

import dataclasses
import enum
import json
from types import SimpleNamespace
from dataclasses import dataclass, field
from typing import Annotated, Literal, Optional, TypedDict

import pytest

from toolhost_plugin import Plugin, ToolCall
from toolhost_plugin.shapes import build, dump, schema_of, shape_of


@dataclass
class Label:
    """A label on a ticket."""

    name: str
    color: Annotated[str, "A CSS colour name."] = "grey"


class Priority(enum.Enum):
    LOW = "low"
    HIGH = "high"


@dataclass
class Ticket:
    id: int
    title: str
    labels: list[Label] = field(default_factory=list)
    priority: Priority = Priority.LOW


class Page(TypedDict, total=False):
    cursor: str
    limit: int


def create_ticket(title: str, labels: list[Label], priority: Priority = Priority.LOW, call: ToolCall = None) -> Ticket:
    """Creates a ticket.

    Longer words for people.

    Args:
        title: What the ticket is about,
            in one line.
        labels: Labels to attach.
    """
    return Ticket(1, title, labels, priority)


def test_parameters_become_a_closed_object_with_their_docs():
    shape = shape_of(create_ticket)
    assert shape is not None
    assert shape.description == "Creates a ticket."
    assert shape.input_schema == {
        "type": "object",
        "properties": {
            "title": {"type": "string", "description": "What the ticket is about, in one line."},
            "labels": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "name": {"type": "string"},
                        "color": {"type": "string", "description": "A CSS colour name.", "default": "grey"},
                    },
                    "required": ["name"],
                    "additionalProperties": False,
                    "description": "A label on a ticket.",
                },
                "description": "Labels to attach.",
            },
            "priority": {"type": "string", "enum": ["low", "high"]},
        },
        "required": ["title", "labels"],
        "additionalProperties": False,
    }
    assert shape.output_schema["required"] == ["id", "title"]


def test_arguments_arrive_as_their_types_and_results_leave_as_json():
    shape = shape_of(create_ticket)
    kwargs = shape.arguments({"title": "t", "labels": [{"name": "bug"}], "priority": "high"}, "CALL")
    assert kwargs["labels"] == [Label("bug")]
    assert kwargs["priority"] is Priority.HIGH
    assert kwargs["call"] == "CALL"
    assert dump(create_ticket(**kwargs)) == {
        "id": 1,
        "title": "t",
        "labels": [{"name": "bug", "color": "grey"}],
        "priority": "high",
    }


def test_optionals_literals_typeddicts_and_maps():
    assert schema_of(Optional[int]) == {"type": ["integer", "null"]}
    assert schema_of(Literal["a", "b"]) == {"type": "string", "enum": ["a", "b"]}
    assert schema_of(dict[str, float]) == {"type": "object", "additionalProperties": {"type": "number"}}
    page = schema_of(Page)
    assert page["additionalProperties"] is False and "required" not in page
    assert build(float, 3) == 3.0 and isinstance(build(float, 3), float)


def test_a_whole_object_parameter_is_the_argument_object():
    def search(args: Page) -> None:
        """Searches."""

    shape = shape_of(search)
    assert set(shape.input_schema["properties"]) == {"cursor", "limit"}
    assert shape.arguments({"limit": 3}, None) == {"args": {"limit": 3}}


def test_untyped_handlers_keep_the_manifest_alone():
    assert shape_of(lambda call: None) is None

    def typed_call(call: ToolCall):
        return None

    assert shape_of(typed_call) is None


def test_what_has_no_json_form_is_refused_by_name():
    class Opaque:
        pass

    with pytest.raises(TypeError, match="no JSON Schema form"):
        schema_of(Opaque)
    with pytest.raises(TypeError, match="keys are strings"):
        schema_of(dict[int, str])

    def half_typed(a: int, b):
        """Half."""

    with pytest.raises(TypeError, match="parameter b has no type annotation"):
        shape_of(half_typed)


def test_pydantic_models_are_inlined_when_pydantic_is_there():
    pydantic = pytest.importorskip("pydantic")

    class Item(pydantic.BaseModel):
        name: str = pydantic.Field(description="The item's name.")

    class Order(pydantic.BaseModel):
        items: list[Item]

    schema = schema_of(Order)
    assert "$defs" not in json.dumps(schema)
    assert schema["properties"]["items"]["items"]["properties"]["name"]["description"] == "The item's name."
    assert build(Order, {"items": [{"name": "x"}]}) == Order(items=[Item(name="x")])


async def test_a_typed_tool_is_registered_with_its_shape_and_called_with_types():
    plugin = Plugin()
    plugin.tool()(create_ticket)

    @plugin.tool
    async def count(words: list[str]) -> None:
        """Counts words."""
        return str(len(words))

    assert set(plugin.shapes) == {"create_ticket", "count"}
    context = SimpleNamespace(task_id="", session_id="", workspace_id="", surface="chat")
    call = ToolCall("i1", "create_ticket", {"title": "t", "labels": [{"name": "bug", "color": "red"}]}, context)
    result = await plugin.call(call)
    assert not result.is_error
    assert result.structured["labels"] == [{"name": "bug", "color": "red"}]
    counted = await plugin.call(ToolCall("i2", "count", {"words": ["a", "b"]}, context))
    assert counted.content[0]._block.text.text == "2"


def test_a_handler_reads_the_token_toolhost_exchanged_for_an_audience():
    credential = SimpleNamespace(audience="https://api.test", access_token="tok-1", expires_at_unix_s=9)
    context = SimpleNamespace(task_id="", session_id="", workspace_id="", surface="chat", credentials=[credential])
    call = ToolCall("i1", "t", {}, context)
    assert call.token_for("https://api.test") == "tok-1"
    assert call.token_for("https://other.test") is None
    bare = ToolCall("i2", "t", {}, SimpleNamespace(task_id="", session_id="", workspace_id="", surface="chat"))
    assert bare.token_for("https://api.test") is None


def test_ranges_lengths_and_patterns_are_stated_the_way_python_authors_write_them():
    import annotated_types as at
    from pydantic import Field
    from typing import Annotated

    from toolhost_plugin import Length, Range

    assert schema_of(Annotated[int, Field(ge=1, le=100)]) == {"type": "integer", "minimum": 1, "maximum": 100}
    assert schema_of(Annotated[int, Field(ge=1, le=100, description="how many")]) == {
        "type": "integer", "minimum": 1, "maximum": 100, "description": "how many"}
    assert schema_of(Annotated[int, at.Ge(1), at.Le(100)]) == {"type": "integer", "minimum": 1, "maximum": 100}
    assert schema_of(Annotated[float, at.Interval(gt=0, lt=1)]) == {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1}
    assert schema_of(Annotated[int, Range(ge=1, le=100)]) == {"type": "integer", "minimum": 1, "maximum": 100}
    assert schema_of(Annotated[str, Field(min_length=1, max_length=80, pattern="^[a-z]+$")]) == {
        "type": "string", "minLength": 1, "maxLength": 80, "pattern": "^[a-z]+$"}
    assert schema_of(Annotated[str, at.MaxLen(5)]) == {"type": "string", "maxLength": 5}
    assert schema_of(Annotated[list[str], Length(max_length=3)]) == {"type": "array", "items": {"type": "string"}, "maxItems": 3}
    assert schema_of(Annotated[list[int], at.Len(1, 4)]) == {"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 4}
    assert schema_of(Optional[Annotated[int, Field(ge=0)]]) == {"anyOf": [{"type": "integer", "minimum": 0}, {"type": "null"}]}


def test_a_constraint_that_cannot_be_stated_is_refused_never_dropped():
    import annotated_types as at
    import pytest
    from pydantic import Field
    from typing import Annotated

    for bad in (
        Annotated[int, at.Predicate(lambda x: x > 0)],
        Annotated[int, Field(strict=True)],
        Annotated[str, at.Ge(1)],
        Annotated[bool, Field(max_length=3)],
        Annotated[int, object()],
    ):
        with pytest.raises(TypeError):
            schema_of(bad)


def _rules(schema):
    """A schema without `format` (an annotation, not a rule; the SDKs may
    differ in it) and with `required` in order."""
    if isinstance(schema, list):
        return [_rules(v) for v in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _rules(v) for k, v in schema.items() if k != "format"}
    if isinstance(out.get("required"), list):
        out["required"] = sorted(out["required"])
    return out


def test_the_same_constraints_give_the_same_schema_in_every_sdk():
    """sdk/constraints.schema.json: the TypeScript (zod) and Rust (schemars)
    SDKs' tests compare their schemas for the same bounds with it too."""
    import annotated_types as at
    from pathlib import Path
    from pydantic import Field

    from toolhost_plugin import Length, Range

    shared = json.loads((Path(__file__).parents[2] / "constraints.schema.json").read_text())

    @dataclass
    class WithPydantic:
        limit: Annotated[int, Field(ge=1, le=100)]
        ratio: Annotated[float, Field(gt=0, lt=1)]
        title: Annotated[str, Field(min_length=1, max_length=80)]
        slug: Annotated[str, Field(pattern="^[a-z]+$")]
        tags: Annotated[list[str], Field(min_length=1, max_length=5)]

    @dataclass
    class WithAnnotatedTypes:
        limit: Annotated[int, at.Ge(1), at.Le(100)]
        ratio: Annotated[float, at.Gt(0), at.Lt(1)]
        title: Annotated[str, at.Len(1, 80)]
        slug: Annotated[str, Length(pattern="^[a-z]+$")]
        tags: Annotated[list[str], at.MinLen(1), at.MaxLen(5)]

    @dataclass
    class WithToolhostOnly:
        limit: Annotated[int, Range(ge=1, le=100)]
        ratio: Annotated[float, Range(gt=0, lt=1)]
        title: Annotated[str, Length(min_length=1, max_length=80)]
        slug: Annotated[str, Length(pattern="^[a-z]+$")]
        tags: Annotated[list[str], Length(min_length=1, max_length=5)]

    for form in (WithPydantic, WithAnnotatedTypes, WithToolhostOnly):
        assert _rules(schema_of(form)) == _rules(shared), form.__name__
