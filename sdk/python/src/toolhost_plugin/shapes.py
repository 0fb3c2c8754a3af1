"""Tools from types: a handler's annotations, as the JSON Schemas toolhost
checks, and the arguments toolhost checked, as those types again.

A typed tool states its shape once, in Python::

    @dataclass
    class Label:
        name: str
        color: str = "grey"

    @plugin.tool()
    def create_ticket(title: str, labels: list[Label] = [], call: ToolCall = None) -> Ticket:
        \"\"\"Creates a ticket.

        Args:
            title: What the ticket is about, in a line.
        \"\"\"

``toolhost schema sync`` writes the shape into the manifest's schema files,
and ``toolhost check --start`` fails when the two drift apart: the manifest
stays the contract toolhost checks and serves, and the code never repeats
it by hand.

What maps to what:

- ``str``, ``int``, ``float``, ``bool``, ``None``; ``list[T]``, ``set[T]``,
  ``tuple[T, ...]``, ``dict[str, T]``; ``Optional[T]`` and ``T | None``;
  ``Literal[...]`` and ``enum.Enum`` (their values); ``Any``.
- A dataclass, a ``TypedDict`` or a pydantic model is an object, closed to
  unknown keys; its fields' defaults make them optional.
- ``Annotated[T, "text"]`` (or pydantic's ``Field(description=...)``, or a
  dataclass field's ``metadata={"description": ...}``) describes a value;
  a docstring's first paragraph describes the tool, and its ``Args:``
  section the parameters.
- Parameters are the tool's arguments, except one annotated
  :class:`ToolCall`, which receives the call (progress, questions, the
  caller's context). A handler whose only parameter is a dataclass,
  ``TypedDict`` or pydantic model takes the whole argument object as it.
- The return annotation, when it is an object type (dataclass,
  ``TypedDict``, pydantic model), is the output schema; the value returned
  becomes the structured content.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import enum
import inspect
import json
import re
import types
import typing
from typing import Any, Callable, Optional

__all__ = ["Shape", "schema_of", "shape_of", "build", "dump"]

_NONE = type(None)


class Shape:
    """One typed tool: its schemas, and how its arguments become the
    handler's parameters."""

    def __init__(
        self,
        description: str,
        input_schema: dict,
        output_schema: Optional[dict],
        params: list[tuple[str, Any]],
        call_param: Optional[str],
        whole: Optional[tuple[str, Any]],
    ) -> None:
        self.description = description
        self.input_schema = input_schema
        self.output_schema = output_schema
        self._params = params
        self._call_param = call_param
        self._whole = whole

    def arguments(self, arguments: dict, call: Any) -> dict:
        """The handler's keyword arguments, built from checked arguments."""
        if self._whole is not None:
            name, tp = self._whole
            kwargs = {name: build(tp, arguments)}
        else:
            kwargs = {name: build(tp, arguments[name]) for name, tp in self._params if name in arguments}
        if self._call_param is not None:
            kwargs[self._call_param] = call
        return kwargs


def _is_call(tp: Any) -> bool:
    from .call import ToolCall

    return tp is ToolCall or (isinstance(tp, str) and tp.split(".")[-1] == "ToolCall")


def _is_model(tp: Any) -> bool:
    return hasattr(tp, "model_json_schema") and hasattr(tp, "model_validate")


def _is_typeddict(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, dict) and hasattr(tp, "__required_keys__")


def _is_object_type(tp: Any) -> bool:
    tp = _strip(tp)[0]
    return (isinstance(tp, type) and dataclasses.is_dataclass(tp)) or _is_typeddict(tp) or _is_model(tp)


def _strip(tp: Any) -> tuple[Any, Optional[str]]:
    """``Annotated[T, ...]`` as ``T`` and the description it carries."""
    base, description, _ = _annotated(tp)
    return base, description


# What a constraint's attribute states, by the kind of value it bounds.
_BOUNDS = {
    "number": {"gt": "exclusiveMinimum", "ge": "minimum", "lt": "exclusiveMaximum", "le": "maximum", "multiple_of": "multipleOf"},
    "string": {"min_length": "minLength", "max_length": "maxLength", "pattern": "pattern"},
    "array": {"min_length": "minItems", "max_length": "maxItems"},
}
_CONSTRAINTS = {"gt", "ge", "lt", "le", "multiple_of", "min_length", "max_length", "pattern"}


def _constraint_items(e: Any) -> Optional[dict]:
    """The constraints one ``Annotated`` extra states, or None if it is not
    a constraint: annotated_types' ``Ge``, ``Le``, ``Len``, ``Interval``...,
    pydantic's own metadata (``pattern``), or :class:`Range`/``Length``."""
    fields = getattr(e, "__dict__", None)
    if fields is None and hasattr(e, "__slots__"):
        fields = {k: getattr(e, k, None) for k in e.__slots__}
    if not isinstance(fields, dict):
        return None
    found = {k: v for k, v in fields.items() if k in _CONSTRAINTS and v is not None}
    if not found and not any(k in _CONSTRAINTS for k in fields):
        return None
    return found


def _annotated(tp: Any) -> tuple[Any, Optional[str], dict]:
    """``Annotated[T, ...]`` as ``T``, its description and its constraints.
    An extra the SDK cannot state in a schema is refused, never dropped."""
    if typing.get_origin(tp) is not typing.Annotated:
        return tp, None, {}
    base, *extras = typing.get_args(tp)
    description, constraints = None, {}
    for e in extras:
        if isinstance(e, str):
            description = e
            continue
        if hasattr(e, "metadata") and hasattr(e, "is_required"):  # pydantic's FieldInfo
            if isinstance(getattr(e, "description", None), str):
                description = e.description
            for m in e.metadata:
                found = _constraint_items(m)
                if found is None:
                    raise TypeError(f"{tp}: {m!r} in Field(...) cannot be stated in a tool's schema")
                constraints.update(found)
            continue
        found = _constraint_items(e)
        if found is not None:
            constraints.update(found)
        elif isinstance(getattr(e, "description", None), str):
            description = e.description
        else:
            raise TypeError(
                f"{tp}: {e!r} cannot be stated in a tool's schema (use a description string, "
                "pydantic's Field(ge=, le=, min_length=, max_length=, pattern=), annotated_types, "
                "or toolhost_plugin.Range / Length)"
            )
    return base, description, constraints


def _constrain(schema: dict, constraints: dict, tp: Any) -> dict:
    kind = schema.get("type")
    kind = "number" if kind in ("integer", "number") else kind
    names = _BOUNDS.get(kind, {})
    out = dict(schema)
    for k, v in constraints.items():
        if k not in names:
            raise TypeError(f"{tp}: {k} does not apply to a value of type {schema.get('type', 'any')}")
        out[names[k]] = v
    return out


class Range:
    """Bounds of a number, for authors without pydantic:
    ``Annotated[int, Range(ge=1, le=100)]``."""

    def __init__(self, *, ge: Any = None, le: Any = None, gt: Any = None, lt: Any = None, multiple_of: Any = None):
        self.ge, self.le, self.gt, self.lt, self.multiple_of = ge, le, gt, lt, multiple_of

    def __repr__(self) -> str:
        return f"Range({', '.join(f'{k}={v}' for k, v in self.__dict__.items() if v is not None)})"


class Length:
    """Bounds of a string's or a list's length, and a string's pattern:
    ``Annotated[str, Length(max_length=80)]``."""

    def __init__(self, *, min_length: Any = None, max_length: Any = None, pattern: Any = None):
        self.min_length, self.max_length, self.pattern = min_length, max_length, pattern

    def __repr__(self) -> str:
        return f"Length({', '.join(f'{k}={v!r}' for k, v in self.__dict__.items() if v is not None)})"


def schema_of(tp: Any, _seen: tuple = ()) -> dict:
    """The JSON Schema of a type. Raises ``TypeError`` for a type with no
    JSON form (a class that is not a dataclass, ``TypedDict`` or pydantic
    model; a recursive type; a ``dict`` keyed by anything but ``str``; a
    constraint that does not apply or cannot be stated)."""
    tp, description, constraints = _annotated(tp)
    schema = _schema(tp, _seen)
    if constraints:
        schema = _constrain(schema, constraints, tp)
    if description:
        schema = {**schema, "description": description}
    return schema


def _schema(tp: Any, seen: tuple) -> dict:
    if tp is Any or tp is object:
        return {}
    if tp is _NONE or tp is None:
        return {"type": "null"}
    if tp is bool:
        return {"type": "boolean"}
    if tp is int:
        return {"type": "integer"}
    if tp is float:
        return {"type": "number"}
    if tp is str:
        return {"type": "string"}
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Literal:
        values = list(args)
        schema: dict = {"enum": values}
        kinds = {_json_type(v) for v in values}
        if len(kinds) == 1:
            schema = {"type": kinds.pop(), "enum": values}
        return schema
    if origin is typing.Union or origin is types.UnionType:
        rest = [a for a in args if a is not _NONE]
        if len(rest) < len(args):  # Optional
            inner = schema_of(rest[0], seen) if len(rest) == 1 else {"anyOf": [schema_of(a, seen) for a in rest]}
            if set(inner) <= {"type", "description"} and isinstance(inner.get("type"), str):
                return {**inner, "type": [inner["type"], "null"]}
            return {"anyOf": [inner, {"type": "null"}]}
        return {"anyOf": [schema_of(a, seen) for a in args]}
    if origin in (list, set, frozenset, tuple, collections.abc.Sequence):
        if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
            return {
                "type": "array",
                "prefixItems": [schema_of(a, seen) for a in args],
                "items": False,
                "minItems": len(args),
            }
        schema = {"type": "array"}
        if args:
            schema["items"] = schema_of(args[0], seen)
        if origin in (set, frozenset):
            schema["uniqueItems"] = True
        return schema
    if tp in (list, set, tuple):
        return {"type": "array"}
    if origin is dict or tp is dict:
        if args and args[0] is not str:
            raise TypeError(f"{tp}: a JSON object's keys are strings; use dict[str, ...]")
        schema = {"type": "object"}
        if args:
            schema["additionalProperties"] = schema_of(args[1], seen)
        return schema
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        values = [m.value for m in tp]
        kinds = {_json_type(v) for v in values}
        schema = {"enum": values}
        if len(kinds) == 1:
            schema = {"type": kinds.pop(), "enum": values}
        return schema
    if isinstance(tp, type) and (dataclasses.is_dataclass(tp) or _is_typeddict(tp) or _is_model(tp)):
        if tp in seen:
            raise TypeError(f"{tp.__name__} refers to itself; a tool's schema cannot be recursive")
        if _is_model(tp):
            return _inline(tp.model_json_schema())
        return _object(tp, seen + (tp,))
    raise TypeError(
        f"{tp!r} has no JSON Schema form: use str, int, float, bool, list, dict[str, ...], Literal, "
        "an Enum, a dataclass, a TypedDict or a pydantic model"
    )


def _json_type(v: Any) -> str:
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        return "integer"
    if isinstance(v, float):
        return "number"
    if v is None:
        return "null"
    return "string"


def _object(tp: type, seen: tuple) -> dict:
    hints = typing.get_type_hints(tp, include_extras=True)
    properties: dict = {}
    required: list[str] = []
    doc = _arg_docs(inspect.getdoc(tp) or "")
    if dataclasses.is_dataclass(tp):
        for f in dataclasses.fields(tp):
            schema = schema_of(hints[f.name], seen)
            described = f.metadata.get("description") or doc.get(f.name)
            if described and "description" not in schema:
                schema["description"] = described
            if f.default is not dataclasses.MISSING and _jsonable(f.default):
                schema["default"] = f.default
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                required.append(f.name)
            properties[f.name] = schema
    else:
        for name, hint in hints.items():
            schema = schema_of(_unrequired(hint), seen)
            if doc.get(name) and "description" not in schema:
                schema["description"] = doc[name]
            properties[name] = schema
        required = [k for k in hints if k in tp.__required_keys__]
    schema = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    schema["additionalProperties"] = False
    description = _summary(inspect.getdoc(tp) or "") if tp.__doc__ and not _generated_doc(tp) else ""
    if description:
        schema["description"] = description
    return schema


def _unrequired(hint: Any) -> Any:
    """``NotRequired[T]`` / ``Required[T]`` as ``T``."""
    origin = typing.get_origin(hint)
    if origin is not None and getattr(origin, "_name", "") in ("NotRequired", "Required"):
        return typing.get_args(hint)[0]
    return hint


def _generated_doc(tp: type) -> bool:
    """A dataclass without a docstring gets its signature as one."""
    return dataclasses.is_dataclass(tp) and (tp.__doc__ or "").startswith(tp.__name__ + "(")


def _jsonable(v: Any) -> bool:
    try:
        json.dumps(v)
        return True
    except (TypeError, ValueError):
        return False


def _inline(schema: dict) -> dict:
    """A pydantic schema with its ``$defs`` references inlined: one
    self-contained schema, as a manifest's schema file holds."""
    defs = schema.pop("$defs", {})

    def resolve(node: Any, depth: int = 0) -> Any:
        if depth > 32:
            raise TypeError("the model refers to itself; a tool's schema cannot be recursive")
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                target = dict(defs[ref[len("#/$defs/") :]])
                rest = {k: v for k, v in node.items() if k != "$ref"}
                return resolve({**target, **rest}, depth + 1)
            return {k: resolve(v, depth) for k, v in node.items()}
        if isinstance(node, list):
            return [resolve(v, depth) for v in node]
        return node

    out = resolve(schema)
    out.setdefault("additionalProperties", False)
    return out


_ARGS = re.compile(r"^\s*(Args|Arguments|Parameters|Attributes|Fields):\s*$")
_ENTRY = re.compile(r"^\s+(\*{0,2}\w+)(?:\s*\([^)]*\))?\s*:\s*(.*)$")


def _summary(doc: str) -> str:
    """A docstring's first paragraph, on one line."""
    first = doc.strip().split("\n\n", 1)[0]
    return " ".join(line.strip() for line in first.splitlines()).strip()


def _arg_docs(doc: str) -> dict[str, str]:
    """A Google-style docstring's ``Args:`` entries."""
    out: dict[str, str] = {}
    lines = doc.splitlines()
    inside = False
    current = None
    for line in lines:
        if _ARGS.match(line):
            inside, current = True, None
            continue
        if not inside:
            continue
        if not line.strip():
            current = None
            continue
        if not line.startswith((" ", "\t")):
            inside = False
            continue
        m = _ENTRY.match(line)
        if m and (current is None or len(line) - len(line.lstrip()) <= current[1]):
            current = (m.group(1), len(line) - len(line.lstrip()))
            out[current[0]] = m.group(2).strip()
        elif current is not None:
            out[current[0]] = (out[current[0]] + " " + line.strip()).strip()
    return out


def shape_of(fn: Callable) -> Optional[Shape]:
    """The shape of a typed handler; ``None`` for a handler of one
    unannotated parameter (or one annotated :class:`ToolCall`), which reads
    ``call.arguments`` itself and whose schema the manifest alone states."""
    sig = inspect.signature(fn)
    hints = typing.get_type_hints(fn, include_extras=True)
    params = [p for p in sig.parameters.values() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    if len(params) == 1 and (params[0].name not in hints or _is_call(hints[params[0].name])):
        return None
    doc = inspect.getdoc(fn) or ""
    described = _arg_docs(doc)
    call_param = None
    typed: list[tuple[str, Any]] = []
    for p in params:
        if p.name not in hints:
            raise TypeError(f"{fn.__name__}: parameter {p.name} has no type annotation; a typed tool needs one on each")
        if _is_call(hints[p.name]) or _is_call(_strip(_optional_inner(hints[p.name]))[0]):
            call_param = p.name
            continue
        typed.append((p.name, hints[p.name]))
    whole = None
    if len(typed) == 1 and _is_object_type(typed[0][1]):
        whole = typed[0]
        input_schema = schema_of(whole[1])
        input_schema.pop("description", None)
    else:
        properties: dict = {}
        required: list[str] = []
        for p in params:
            if p.name == call_param:
                continue
            schema = schema_of(hints[p.name])
            if described.get(p.name) and "description" not in schema:
                schema["description"] = described[p.name]
            if p.default is inspect.Parameter.empty:
                required.append(p.name)
            elif p.default is not None and _jsonable(p.default):
                schema["default"] = p.default
            properties[p.name] = schema
        input_schema = {"type": "object", "properties": properties}
        if required:
            input_schema["required"] = required
        input_schema["additionalProperties"] = False
    output_schema = None
    returned = hints.get("return")
    if returned is not None and _is_object_type(returned):
        output_schema = schema_of(returned)
        output_schema.pop("description", None)
    return Shape(_summary(doc), input_schema, output_schema, typed, call_param, whole)


def _optional_inner(tp: Any) -> Any:
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        rest = [a for a in typing.get_args(tp) if a is not _NONE]
        if len(rest) == 1:
            return rest[0]
    return tp


def build(tp: Any, value: Any) -> Any:
    """A checked JSON value as the type ``tp`` says: dataclasses and
    pydantic models constructed, enums looked up, lists and dicts built
    item by item; anything else as it is."""
    tp = _strip(tp)[0]
    if value is None:
        return None
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Union or origin is types.UnionType:
        rest = [a for a in args if a is not _NONE]
        return build(rest[0], value) if len(rest) == 1 else value
    if origin in (list, set, frozenset, collections.abc.Sequence) and args and isinstance(value, list):
        items = [build(args[0], v) for v in value]
        return origin(items) if origin in (set, frozenset) else items
    if origin is tuple and isinstance(value, list):
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(build(args[0], v) for v in value)
        return tuple(build(a, v) for a, v in zip(args, value))
    if origin is dict and len(args) == 2 and isinstance(value, dict):
        return {k: build(args[1], v) for k, v in value.items()}
    if isinstance(tp, type):
        if issubclass(tp, enum.Enum):
            return tp(value)
        if _is_model(tp):
            return tp.model_validate(value)
        if dataclasses.is_dataclass(tp) and isinstance(value, dict):
            hints = typing.get_type_hints(tp, include_extras=True)
            return tp(**{k: build(hints[k], v) for k, v in value.items() if k in hints})
        if tp is float and isinstance(value, int) and not isinstance(value, bool):
            return float(value)
    return value


def dump(value: Any) -> Any:
    """A returned value as JSON: dataclasses and models as objects, enums
    as their values, containers item by item."""
    if _is_model(type(value)) and hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: dump(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, dict):
        return {k: dump(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [dump(v) for v in value]
    return value
