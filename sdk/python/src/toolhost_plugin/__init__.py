"""Write toolhost plugins in Python.

The manifest (``plugin.toml``) declares every tool and its schema; the code
implements them, one function each::

    from toolhost_plugin import Plugin

    plugin = Plugin()

    @plugin.tool("word_count")
    async def word_count(call):
        return f"{len(call.arguments['text'].split())} words"

    plugin.run()

The handshake, the magic cookie, the health service, keeping stdout clean,
graceful stop and cancellation are handled here. Arguments arrive already
validated against the tool's schema. With ``protocol = 2`` under
``[runtime]`` in the manifest, a tool can also report progress
(``call.progress``), log to the caller (``call.log``), ask the user
(``await call.ask(Question(...))``) and answer any :class:`Content`.

Values and secrets the operator supplies for the manifest's ``[[config]]``
items are in :data:`config`: ``config.get("api_url")``,
``config.secret("token").expose()``.
"""

from .call import Answer, AskError, LogLevel, Question, ToolCall
from .config import Config, Secret, config
from .content import Content, ToolError, ToolResult
from .plugin import Plugin
from .shapes import Length, Range

__all__ = [
    "Answer",
    "AskError",
    "Config",
    "Secret",
    "config",
    "Content",
    "Length",
    "LogLevel",
    "Plugin",
    "Range",
    "Question",
    "ToolCall",
    "ToolError",
    "ToolResult",
]
