"""One tool call as the handler sees it: arguments, context, cancellation,
and (plugin protocol 2) progress, log messages and questions to the user."""

from __future__ import annotations

import asyncio
import enum
import threading
from dataclasses import dataclass, field
from typing import Any, Optional

from google.protobuf import json_format, struct_pb2

from ._values import integers

from ._gen.toolhost.plugin.v2 import plugin_pb2 as v2


class LogLevel(enum.IntEnum):
    """MCP's log levels, lowest first."""

    DEBUG = v2.DEBUG
    INFO = v2.INFO
    NOTICE = v2.NOTICE
    WARNING = v2.WARNING
    ERROR = v2.ERROR
    CRITICAL = v2.CRITICAL
    ALERT = v2.ALERT
    EMERGENCY = v2.EMERGENCY


class AskError(Exception):
    """A question got no answer: the caller cannot answer questions (or the
    plugin runs under protocol 1), or the call ended while waiting."""


@dataclass
class Question:
    """A question for the user: a message and flat fields.

    ``Question("Delete 3 notes?").boolean("confirm", "Delete them").require("confirm")``
    """

    message: str
    properties: dict[str, dict[str, Any]] = field(default_factory=dict)
    required: list[str] = field(default_factory=list)

    def _field(self, name: str, schema: dict[str, Any]) -> "Question":
        self.properties[name] = schema
        return self

    def boolean(self, name: str, title: str) -> "Question":
        """A yes/no field."""
        return self._field(name, {"type": "boolean", "title": title})

    def string(self, name: str, title: str) -> "Question":
        """A text field."""
        return self._field(name, {"type": "string", "title": title})

    def integer(self, name: str, title: str) -> "Question":
        """A whole-number field."""
        return self._field(name, {"type": "integer", "title": title})

    def number(self, name: str, title: str) -> "Question":
        """A number field."""
        return self._field(name, {"type": "number", "title": title})

    def choice(self, name: str, title: str, options: list[str]) -> "Question":
        """A choice among ``options``."""
        return self._field(name, {"type": "string", "title": title, "enum": list(options)})

    def require(self, *names: str) -> "Question":
        """Marks fields as required."""
        self.required.extend(names)
        return self

    def schema(self) -> dict[str, Any]:
        s: dict[str, Any] = {"type": "object", "properties": self.properties}
        if self.required:
            s["required"] = self.required
        return s


@dataclass(frozen=True)
class Answer:
    """The user's answer, already checked by toolhost against the fields."""

    action: str  # "accept", "decline" or "cancel"
    values: dict[str, Any]

    @property
    def accepted(self) -> bool:
        return self.action == "accept"

    def flag(self, name: str) -> bool:
        """An accepted boolean field (False otherwise)."""
        return self.accepted and self.values.get(name) is True


class Link:
    """The protocol-2 side of a call: the queue of events to toolhost and
    the questions waiting for answers."""

    def __init__(self, start: v2.Start, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.events: asyncio.Queue[v2.PluginEvent] = asyncio.Queue(maxsize=64)
        self.wants_progress = start.wants_progress
        self.log_level = start.log_level or None
        self.can_ask = start.can_ask
        self.pending_progress: Optional[v2.Progress] = None
        self.answers: dict[int, asyncio.Future[v2.Answer]] = {}
        self.next_question = 1
        # Answers received: sent with each question, so toolhost can tell a
        # question asked while another is open, whatever the timing.
        self.answers_seen = 0

    def _put(self, event: v2.PluginEvent) -> bool:
        try:
            self.events.put_nowait(event)
            return True
        except asyncio.QueueFull:
            return False

    def send_now(self, event: v2.PluginEvent) -> None:
        """Queues without waiting (from any thread); a full queue drops it."""
        if threading.current_thread() is threading.main_thread() or _in_loop(self.loop):
            self._flush_pending()
            self._put(event)
        else:
            self.loop.call_soon_threadsafe(self.send_now, event)

    def progress(self, p: v2.Progress) -> None:
        """Queues progress; when the queue is full it waits as the pending
        update, so the last one is never lost."""
        if not _in_loop(self.loop):
            self.loop.call_soon_threadsafe(self.progress, p)
            return
        self._flush_pending()
        if self.pending_progress is not None or not self._put(v2.PluginEvent(progress=p)):
            self.pending_progress = p

    def _flush_pending(self) -> None:
        if self.pending_progress is not None and self._put(v2.PluginEvent(progress=self.pending_progress)):
            self.pending_progress = None

    async def flush(self) -> None:
        """Sends the pending progress update, waiting for room."""
        if self.pending_progress is not None:
            p, self.pending_progress = self.pending_progress, None
            await self.events.put(v2.PluginEvent(progress=p))

    def answered(self, answer: v2.Answer) -> None:
        waiting = self.answers.pop(answer.question_id, None)
        if waiting is not None and not waiting.done():
            self.answers_seen += 1
            waiting.set_result(answer)


def _in_loop(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False


class ToolCall:
    """One call: ``arguments`` (validated by toolhost against the tool's
    input schema), ``context`` (task, session, workspace, surface), and the
    way back to the caller."""

    def __init__(
        self,
        invocation_id: str,
        name: str,
        arguments: dict[str, Any],
        context: Any,
        link: Optional[Link] = None,
    ) -> None:
        self.invocation_id = invocation_id
        self.name = name
        self.arguments = arguments
        self.task_id: str = context.task_id
        self.session_id: str = context.session_id
        self.workspace_id: str = context.workspace_id
        self.surface: str = context.surface
        self._credentials: dict[str, str] = {
            c.audience: c.access_token for c in getattr(context, "credentials", [])
        }
        self._link = link
        self._cancelled = threading.Event()

    def token_for(self, audience: str) -> Optional[str]:
        """The token to call `audience` with on the caller's behalf: one the
        manifest declares under `[credentials]` and the operator granted,
        exchanged by toolhost from the caller's own (which a plugin never
        sees). None when the caller proved no identity (a static token,
        stdio) or the audience was not granted."""
        return self._credentials.get(audience)

    @property
    def cancelled(self) -> bool:
        """Whether the call was cancelled (for sync handlers, which cannot
        be interrupted: check it between steps)."""
        return self._cancelled.is_set()

    @property
    def wants_progress(self) -> bool:
        return self._link is not None and self._link.wants_progress

    @property
    def can_ask(self) -> bool:
        """Whether the caller can answer a question. When it cannot, asking
        ends the call with an error that says so."""
        return self._link is not None and self._link.can_ask

    def progress(self, progress: float, total: Optional[float] = None, message: str = "") -> None:
        """Reports progress (increasing). Never blocks; a no-op when nobody
        listens or under protocol 1."""
        if self._link is None or not self._link.wants_progress:
            return
        p = v2.Progress(progress=progress, message=message)
        if total is not None:
            p.total = total
        self._link.progress(p)

    def log(self, level: LogLevel, message: str, data: Any = None) -> None:
        """Sends a log message to the caller, if it wants this level. Never
        blocks; toolhost bounds the rate and size."""
        link = self._link
        if link is None or link.log_level is None or int(level) < link.log_level:
            return
        event = v2.Log(level=int(level), message=message)
        if data is not None:
            event.data.CopyFrom(json_format.ParseDict(data, struct_pb2.Value()))
        link.send_now(v2.PluginEvent(log=event))

    async def ask(self, question: Question) -> Answer:
        """Asks the user and waits (within the call's deadline) for the answer."""
        link = self._link
        if link is None:
            raise AskError("this caller cannot answer questions (plugin protocol 1)")
        qid = link.next_question
        link.next_question += 1
        waiting: asyncio.Future[v2.Answer] = link.loop.create_future()
        link.answers[qid] = waiting
        schema = struct_pb2.Struct()
        schema.update(question.schema())
        await link.flush()
        asked = v2.Question(id=qid, message=question.message, requested_schema=schema, answers_seen=link.answers_seen)
        await link.events.put(v2.PluginEvent(question=asked))
        if not link.can_ask:
            # toolhost ends the call; wait for that rather than race it.
            await asyncio.Event().wait()
        answer = await waiting
        action = {v2.Answer.ACCEPT: "accept", v2.Answer.DECLINE: "decline"}.get(answer.action, "cancel")
        values = integers(json_format.MessageToDict(answer.content)) if action == "accept" else {}
        return Answer(action, values)
