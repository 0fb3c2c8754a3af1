"""Values as they cross the wire: what protobuf's `Struct` does to JSON
numbers, undone. Used by the call's arguments (plugin) and a question's
answer (call) alike, so it lives below both."""

from __future__ import annotations

_EXACT_INT = 2**53


def integers(value):
    """JSON numbers as JSON gave them: protobuf carries every number as a
    double, so `1` arrives as `1.0`. A double with no fractional part, in
    the range doubles hold exactly, becomes an `int` again (as the Rust
    SDK does); any other stays a float."""
    if isinstance(value, float) and value.is_integer() and abs(value) <= _EXACT_INT:
        return int(value)
    if isinstance(value, dict):
        return {k: integers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [integers(v) for v in value]
    return value
