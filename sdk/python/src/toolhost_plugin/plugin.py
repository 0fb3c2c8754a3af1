"""The plugin: tools by name, and everything the wire protocol asks for.

``Plugin.run()`` checks the magic cookie, picks the protocol version
toolhost offers, serves ``kandev.plugin.v1.Plugin``,
``toolhost.plugin.v2.Plugin`` and ``grpc.health.v1`` (service ``plugin``
SERVING) on a Unix socket in the private directory toolhost names, prints
the one handshake line, and stops gracefully on SIGTERM. Everything else a
plugin prints goes to stderr, which toolhost turns into log events: stdout
is kept for the handshake.
"""

from __future__ import annotations

import asyncio
import contextvars
import ctypes
import hmac
import inspect
import json
import os
import shutil
import signal
import sys
import tempfile
import threading
import traceback
from typing import Any, Awaitable, Callable, Optional, Union

import grpc
from google.protobuf import json_format
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from . import _trace
from .config import Config
from .config import config as _loaded_config
from ._gen.kandev.plugin.v1 import plugin_pb2 as v1
from ._gen.kandev.plugin.v1 import plugin_pb2_grpc as v1_grpc
from ._gen.toolhost.plugin.v2 import plugin_pb2 as v2
from ._gen.toolhost.plugin.v2 import plugin_pb2_grpc as v2_grpc
from . import shapes
from ._values import integers
from .call import Link, ToolCall
from .content import Content, Returned, ToolError, ToolResult, to_result

COOKIE_KEY = "KANDEV_PLUGIN"
COOKIE_VALUE = "kandev-plugin-v1"
VERSIONS_KEY = "PLUGIN_PROTOCOL_VERSIONS"
SOCKET_DIR_KEY = "KANDEV_PLUGIN_SOCKET_DIR"
DATA_DIR_KEY = "KANDEV_PLUGIN_DATA_DIR"
CALL_TOKEN_KEY = "TOOLHOST_PLUGIN_CALL_TOKEN"
CALL_TOKEN_METADATA = "toolhost-call-token"

Handler = Callable[[ToolCall], Union[Returned, Awaitable[Returned]]]


def _sdk_version() -> str:
    try:
        from importlib.metadata import version

        return version("toolhost-plugin")
    except Exception:  # not installed as a package (a vendored copy)
        return "unknown"


SDK_VERSION = _sdk_version()


class Plugin:
    """A set of tools, each a function of one :class:`ToolCall`.

    ``async`` functions run on the event loop (cancellation arrives as
    ``asyncio.CancelledError``); plain functions run in a thread of their
    own (check ``call.cancelled`` between steps). A plain function still
    running when its call is cancelled or its deadline passes is
    interrupted (:class:`HandlerCancelled` is raised in its thread at its
    next Python instruction); one that does not end within
    :data:`HUNG_GRACE` seconds (stuck in a C call) makes the plugin report
    itself unhealthy, so toolhost restarts it rather than let threads pile
    up.
    """

    def __init__(self) -> None:
        self.tools: dict[str, Handler] = {}
        # The shapes typed tools state (for Describe, and so `schema sync`).
        self.shapes: dict[str, shapes.Shape] = {}
        # The token toolhost presents on every call (None under a toolhost
        # that sends none, when nothing is checked).
        self._call_token: Optional[str] = None
        self._handshake_out = None
        self._health = None
        # Threads of plain handlers still running after their call ended.
        self._hung: set[threading.Thread] = set()
        if os.environ.get(COOKIE_KEY) == COOKIE_VALUE:
            # Under toolhost, stdout is the handshake's alone: anything
            # printed from here on goes to stderr (and becomes a log event).
            self._handshake_out = os.fdopen(os.dup(sys.stdout.fileno()), "w")
            sys.stdout.flush()
            os.dup2(sys.stderr.fileno(), sys.stdout.fileno())

    def tool(self, name: Union[str, Callable, None] = None) -> Any:
        """Registers the decorated function as the tool ``name`` (the
        function's own name when not given): ``@plugin.tool``,
        ``@plugin.tool()`` or ``@plugin.tool("name")``.

        A function of one unannotated parameter (or one annotated
        :class:`ToolCall`) reads ``call.arguments`` itself; the manifest
        alone states its schema. A function with typed parameters states
        its shape in them (see :mod:`toolhost_plugin.shapes`): it receives
        its arguments as those types, and ``toolhost schema sync`` writes
        the shape into the manifest."""

        def register(fn: Callable) -> Callable:
            local = name if isinstance(name, str) else fn.__name__
            shape = shapes.shape_of(fn)
            if shape is None:
                self.tools[local] = fn
            else:
                self.shapes[local] = shape
                self.tools[local] = _typed_handler(fn, shape)
            return fn

        if callable(name):
            return register(name)
        return register

    @property
    def config(self) -> "Config":
        """The operator's values and secrets (see :mod:`toolhost_plugin.config`)."""
        return _loaded_config

    @staticmethod
    def data_dir() -> Optional[str]:
        """The plugin's data directory (from toolhost), if set."""
        return os.environ.get(DATA_DIR_KEY)

    def run(self) -> None:
        """Serves until SIGTERM or SIGINT; exits with status 1 when not
        started by toolhost."""
        try:
            code = asyncio.run(self.serve())
        except KeyboardInterrupt:
            code = 0
        sys.exit(code)

    async def serve(self) -> int:
        if os.environ.get(COOKIE_KEY) != COOKIE_VALUE:
            print("this is a toolhost plugin, start it with toolhost", file=sys.stderr)
            return 1
        offered = [v.strip() for v in os.environ.get(VERSIONS_KEY, "").split(",")]
        version = "2" if "2" in offered else "1" if "1" in offered else None
        if version is None:
            print(f"toolhost offered plugin protocol versions {offered}; this plugin speaks 1 and 2", file=sys.stderr)
            return 1
        self._call_token = _read_call_token()
        _trace.install_from_env()
        # toolhost names a private folder, fresh for this process, where a
        # plugin may make its socket and nothing else: the socket goes
        # straight in. An older host names none.
        given = os.environ.get(SOCKET_DIR_KEY)
        sock_dir = given or tempfile.mkdtemp(prefix="plugin-")
        path = os.path.join(sock_dir, "plugin.sock")
        server = grpc.aio.server()
        v1_grpc.add_PluginServicer_to_server(_Unary(self), server)
        v2_grpc.add_PluginServicer_to_server(_Streaming(self), server)
        health_servicer = health.aio.HealthServicer()
        await health_servicer.set("plugin", health_pb2.HealthCheckResponse.SERVING)
        self._health = health_servicer
        health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
        server.add_insecure_port(f"unix:{path}")
        await server.start()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        out = self._handshake_out or sys.stdout
        out.write(f"1|{version}|unix|{path}|grpc\n")
        out.flush()
        try:
            await stop.wait()
        finally:
            await server.stop(grace=2)
            if not given:
                shutil.rmtree(sock_dir, ignore_errors=True)
            # The last spans go out before the process ends.
            await asyncio.to_thread(_trace.shutdown)
        return 0

    async def _in_thread(self, fn: Handler, call: ToolCall) -> Any:
        """Runs a plain handler in a thread of its own; on cancellation the
        thread is interrupted, and watched until it ends."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[Any] = loop.create_future()

        def run() -> None:
            try:
                value = fn(call)
            except HandlerCancelled:
                return
            except BaseException as e:  # handed to the event loop as it is
                loop.call_soon_threadsafe(_settle, done, None, e)
                return
            loop.call_soon_threadsafe(_settle, done, value)

        # The caller's context goes with the handler into its thread (the
        # test harness's sandbox rule, a trace's context).
        context = contextvars.copy_context()
        thread = threading.Thread(target=context.run, args=(run,), name=f"toolhost-tool-{call.name}", daemon=True)
        thread.start()
        try:
            return await asyncio.shield(done)
        except asyncio.CancelledError:
            _interrupt(thread)
            asyncio.ensure_future(self._watch(thread))
            raise

    async def _watch(self, thread: threading.Thread) -> None:
        """Waits for an interrupted handler's thread to end; past
        :data:`HUNG_GRACE` the plugin says it is unhealthy."""
        self._hung.add(thread)
        await asyncio.to_thread(thread.join, HUNG_GRACE)
        if not thread.is_alive():
            self._hung.discard(thread)
            return
        print(
            f"a handler ({thread.name}) is still running {HUNG_GRACE:.0f} s after its call ended, stuck where it cannot be interrupted; reporting unhealthy so toolhost restarts this plugin",
            file=sys.stderr,
        )
        if self._health is not None:
            await self._health.set("plugin", health_pb2.HealthCheckResponse.NOT_SERVING)

    def hung_handlers(self) -> int:
        """Plain handlers still running after their call ended."""
        self._hung = {t for t in self._hung if t.is_alive()}
        return len(self._hung)

    async def call(self, call: ToolCall) -> ToolResult:
        """Runs one handler and turns its outcome into a result."""
        fn = self.tools[call.name]
        try:
            if inspect.iscoroutinefunction(fn):
                value = await fn(call)
            else:
                value = await self._in_thread(fn, call)
                if inspect.isawaitable(value):
                    value = await value
            return to_result(value)
        except asyncio.CancelledError:
            call._cancelled.set()
            raise
        except ToolError as e:
            return ToolResult([_text(e.message)], is_error=True)
        except Exception as e:  # a tool failure is a result the model reads
            traceback.print_exc(file=sys.stderr)
            return ToolResult([_text(f"{call.name} failed: {type(e).__name__}")], is_error=True)


def _typed_handler(fn: Callable, shape: "shapes.Shape") -> Handler:
    """A typed function as a handler of one call: the checked arguments
    built into its parameters' types, its return value made JSON (the
    structured content, when the function declares an output type)."""

    def result(value: Any) -> Any:
        if isinstance(value, (ToolResult, Content, str)) or value is None:
            return value
        dumped = shapes.dump(value)
        return dumped if isinstance(dumped, dict) else json.dumps(dumped)

    if inspect.iscoroutinefunction(fn):

        async def typed_async(call: ToolCall) -> Any:
            return result(await fn(**shape.arguments(dict(call.arguments), call)))

        typed_async._toolhost_fn = fn  # type: ignore[attr-defined]
        return typed_async

    def typed(call: ToolCall) -> Any:
        return result(fn(**shape.arguments(dict(call.arguments), call)))

    typed._toolhost_fn = fn  # type: ignore[attr-defined]
    return typed


class HandlerCancelled(BaseException):
    """Raised in a plain handler's thread when its call is cancelled or its
    deadline passes. A ``BaseException``, so ``except Exception`` does not
    swallow it."""


# How long an interrupted plain handler may take to end before the plugin
# reports itself unhealthy (and toolhost restarts it).
HUNG_GRACE = 5.0


def _interrupt(thread: threading.Thread) -> None:
    """Raises :class:`HandlerCancelled` in ``thread`` at its next Python
    instruction (a thread blocked in a C call sees it when that returns)."""
    if thread.ident is None:
        return
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident), ctypes.py_object(HandlerCancelled))


def _settle(future: "asyncio.Future[Any]", value: Any = None, error: Optional[BaseException] = None) -> None:
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(value)


def _text(s: str):
    return Content.text(s)


def _call_of(request: v1.AgentToolRequest, link: Optional[Link]) -> ToolCall:
    return ToolCall(
        request.invocation_id,
        request.name,
        integers(json_format.MessageToDict(request.arguments)),
        request.context,
        link,
    )


def _read_call_token() -> Optional[str]:
    """Reads (and deletes) the call token toolhost left for this process."""
    path = os.environ.get(CALL_TOKEN_KEY)
    if not path:
        return None
    with open(path, encoding="utf-8") as f:
        token = f.read().strip()
    try:
        os.remove(path)
    except OSError:
        pass
    return token


async def _from_toolhost(plugin: "Plugin", context: grpc.aio.ServicerContext) -> None:
    """Refuses a call without this process's call token: another process
    of the same user (another plugin among them) can reach the socket, and
    only toolhost has the token."""
    expected = plugin._call_token
    if expected is None:
        return
    given = ""
    for key, value in context.invocation_metadata() or ():
        if key == CALL_TOKEN_METADATA:
            given = value if isinstance(value, str) else ""
    if not hmac.compare_digest(given.encode(), expected.encode()):
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, "this plugin answers only the toolhost that started it")


def _deadline(context: grpc.aio.ServicerContext) -> Optional[float]:
    remaining = context.time_remaining()
    return remaining if remaining is not None and remaining < 1e9 else None


class _Unary(v1_grpc.PluginServicer):
    def __init__(self, plugin: Plugin) -> None:
        self.plugin = plugin

    async def InvokeAgentTool(self, request, context):
        await _from_toolhost(self.plugin, context)
        if request.name not in self.plugin.tools:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"this plugin has no tool named {request.name!r}")
        call = _call_of(request, None)
        span = _trace.start(context.invocation_metadata(), request.name, request.invocation_id)
        error: Optional[str] = "cancelled"
        try:
            with _trace.current(span):
                result = await asyncio.wait_for(self.plugin.call(call), _deadline(context))
            error = "tool_error" if result.is_error else None
        except asyncio.TimeoutError:
            error = "timeout"
            # The deadline passed here first (the caller's clock may not
            # have fired yet): say so, not "unexpected TimeoutError".
            await context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, "the call's deadline passed")
        finally:
            _trace.end(span, error)
        response = v1.AgentToolResponse(
            text="\n".join(c.v1_text() for c in result.content),
            is_error=result.is_error,
        )
        if result.structured is not None:
            response.structured_content.update(result.structured)
        return response


def describe(plugin: Plugin) -> "v2.DescribeResponse":
    """What the code implements and the shapes it states: `Describe`'s
    answer, which the test harness sends toolhost too."""
    return v2.DescribeResponse(
        tools=sorted(plugin.tools),
        sdk=f"toolhost-plugin {SDK_VERSION}",
        shapes=[
            v2.ToolShape(
                name=name,
                input_schema_json=json.dumps(shape.input_schema),
                output_schema_json=json.dumps(shape.output_schema) if shape.output_schema is not None else "",
                description=shape.description,
            )
            for name, shape in sorted(plugin.shapes.items())
        ],
    )


class _Streaming(v2_grpc.PluginServicer):
    def __init__(self, plugin: Plugin) -> None:
        self.plugin = plugin

    async def Describe(self, request, context):
        """The tools this code implements, for toolhost to compare with the
        manifest."""
        await _from_toolhost(self.plugin, context)
        return describe(self.plugin)

    async def Invoke(self, request_iterator, context):
        await _from_toolhost(self.plugin, context)
        first = await context.read()
        if first is grpc.aio.EOF or first.WhichOneof("event") != "start":
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "the first event of a call must be `start`")
        start = first.start
        if start.request.name not in self.plugin.tools:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"this plugin has no tool named {start.request.name!r}")
        link = Link(start, asyncio.get_running_loop())
        call = _call_of(start.request, link)
        span = _trace.start(context.invocation_metadata(), start.request.name, start.request.invocation_id)
        outcome = {"error": "cancelled"}

        async def answers() -> None:
            while True:
                event = await context.read()
                if event is grpc.aio.EOF:
                    return
                if event.WhichOneof("event") == "answer":
                    link.answered(event.answer)

        async def handle() -> None:
            with _trace.current(span):
                result = await asyncio.wait_for(self.plugin.call(call), _deadline(context))
            outcome["error"] = "tool_error" if result.is_error else None
            await link.flush()
            await link.events.put(v2.PluginEvent(result=_wire(result)))

        reader = asyncio.create_task(answers())
        handler = asyncio.create_task(handle())
        try:
            while True:
                event = await link.events.get()
                await context.write(event)
                if event.WhichOneof("event") == "result":
                    break
            await handler
        finally:
            # The call ended, was cancelled, or passed its deadline: the
            # handler learns through asyncio.CancelledError.
            call._cancelled.set()
            for task in (handler, reader):
                task.cancel()
            _trace.end(span, outcome["error"])


def _wire(result: ToolResult) -> v2.ToolResult:
    out = v2.ToolResult(content=[c._block for c in result.content], is_error=result.is_error)
    if result.structured is not None:
        out.structured_content.update(result.structured)
    return out


def _json(value: Any) -> str:
    return json.dumps(value)
