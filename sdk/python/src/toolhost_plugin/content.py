"""What a tool answers: content blocks, structured content, errors.

A handler may return:

- a ``str``: one text block;
- a ``dict``: structured content (checked against the tool's output
  schema), with its JSON as the text;
- a :class:`Content` block, or a list of blocks and strings;
- a :class:`ToolResult` for full control.

Binary data stays ``bytes``: toolhost base64-encodes it for MCP. toolhost
checks every block (MIME types against the kind, URIs parsed) and refuses a
result that breaks a rule.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Iterable, Literal, Optional, Sequence, Union

from ._gen.toolhost.plugin.v2 import plugin_pb2 as v2

Audience = Literal["user", "assistant"]


@dataclass(frozen=True)
class Content:
    """One content block. Build it with the class methods."""

    _block: v2.Content

    @classmethod
    def text(cls, text: str) -> "Content":
        """Text for the model."""
        return cls(v2.Content(text=v2.Text(text=text)))

    @classmethod
    def image(cls, data: bytes, mime_type: str) -> "Content":
        """An image: raw bytes and an ``image/*`` MIME type."""
        return cls(v2.Content(image=v2.Image(data=bytes(data), mime_type=mime_type)))

    @classmethod
    def audio(cls, data: bytes, mime_type: str) -> "Content":
        """Audio: raw bytes and an ``audio/*`` MIME type."""
        return cls(v2.Content(audio=v2.Audio(data=bytes(data), mime_type=mime_type)))

    @classmethod
    def link(
        cls,
        uri: str,
        name: str,
        *,
        mime_type: str = "",
        description: str = "",
        title: str = "",
        size: Optional[int] = None,
    ) -> "Content":
        """A link to a resource the client may fetch (an absolute URI)."""
        link = v2.ResourceLink(uri=uri, name=name, mime_type=mime_type, description=description, title=title)
        if size is not None:
            link.size = size
        return cls(v2.Content(resource_link=link))

    @classmethod
    def resource_text(cls, uri: str, mime_type: str, text: str) -> "Content":
        """A text resource carried inline, such as a Markdown export."""
        return cls(v2.Content(resource=v2.EmbeddedResource(uri=uri, mime_type=mime_type, text=text)))

    @classmethod
    def resource_blob(cls, uri: str, mime_type: str, data: bytes) -> "Content":
        """A binary resource carried inline."""
        return cls(v2.Content(resource=v2.EmbeddedResource(uri=uri, mime_type=mime_type, blob=bytes(data))))

    def annotated(self, *, audience: Sequence[Audience] = (), priority: Optional[float] = None) -> "Content":
        """The block with annotations: who it is for, how much it matters (0 to 1)."""
        block = v2.Content()
        block.CopyFrom(self._block)
        roles = {"user": v2.Annotations.USER, "assistant": v2.Annotations.ASSISTANT}
        block.annotations.audience.extend(roles[a] for a in audience)
        if priority is not None:
            block.annotations.priority = priority
        return Content(block)

    def v1_text(self) -> str:
        """How a protocol-1 host, which carries only text, sees this block."""
        b = self._block
        kind = b.WhichOneof("block")
        if kind == "text":
            return b.text.text
        if kind == "image":
            return f"[image {b.image.mime_type}, {len(b.image.data)} bytes]"
        if kind == "audio":
            return f"[audio {b.audio.mime_type}, {len(b.audio.data)} bytes]"
        if kind == "resource_link":
            return f"[resource {b.resource_link.name} ({b.resource_link.uri})]"
        if kind == "resource":
            if b.resource.WhichOneof("contents") == "text":
                return b.resource.text
            return f"[resource {b.resource.uri}]"
        return ""


@dataclass
class ToolResult:
    """A full result: blocks, structured content, and whether the tool failed."""

    content: list[Content] = field(default_factory=list)
    structured: Optional[dict[str, Any]] = None
    is_error: bool = False


class ToolError(Exception):
    """A failure the model should read: raise it with a message that says
    what went wrong and what to try instead."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


Returned = Union[None, str, dict, Content, ToolResult, Iterable[Union[str, Content]]]


def to_result(value: Returned) -> ToolResult:
    """Normalizes whatever a handler returned."""
    if isinstance(value, ToolResult):
        return value
    if value is None:
        return ToolResult()
    if isinstance(value, str):
        return ToolResult([Content.text(value)])
    if isinstance(value, Content):
        return ToolResult([value])
    if isinstance(value, dict):
        return ToolResult([Content.text(json.dumps(value))], structured=value)
    blocks = [Content.text(v) if isinstance(v, str) else v for v in value]
    if not all(isinstance(b, Content) for b in blocks):
        raise TypeError("a tool returns str, dict, Content, ToolResult, or a list of str and Content")
    return ToolResult(blocks)
