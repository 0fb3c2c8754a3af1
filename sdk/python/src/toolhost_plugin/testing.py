"""Test a tool with no daemon, and get exactly what an agent would.

::

    from toolhost_plugin.testing import Harness
    from plugin import plugin

    def test_create_ticket():
        with Harness(plugin, config={"api_token": "test"}) as h:
            out = h.call("create_ticket", {"title": "Login fails"})
            assert out.structured["id"] == 1
            bad = h.call("create_ticket", {"title": 5})
            assert bad.error_code == "invalid_arguments"
            assert "`/title` must be of type string" in bad.text

The handler runs here, in the test's own process (fixtures, mocks and
breakpoints work), and everything around it is toolhost's own: the
harness starts ``toolhost harness DIR``, which checks each call against
the manifest as a daemon does (bounds, the schema with the root closed,
the deadline, questions and answers, the output schema, the result's
size) and words every refusal as an agent reads it. ``toolhost`` must be
on ``PATH`` (or named by ``TOOLHOST_BIN``).

A question the tool asks is answered from ``answers`` (an object accepts
with those values; ``"decline"`` and ``"cancel"`` say no), and checked
against the question first, as a client's answer is. Progress and log
messages are recorded. ``config`` gives the values and secrets the
manifest's ``[[config]]`` items declare (their defaults otherwise), and
the data directory is a fresh temporary one unless ``data_dir`` names one.
"""

from __future__ import annotations

import asyncio
import base64
import contextvars
import errno
import sys
import json
import os
import shutil
import subprocess
import tempfile
import threading
from dataclasses import dataclass, field
from typing import Any, Optional

import grpc

from ._gen.kandev.plugin.v1 import plugin_pb2 as v1
from ._gen.toolhost.plugin.v2 import plugin_pb2 as v2
from .config import Secret
from .config import config as _config
from .plugin import DATA_DIR_KEY, Plugin, _Streaming, _Unary, describe

__all__ = ["Drift", "Harness", "Outcome"]


@dataclass
class Outcome:
    """What an agent's client received for one call, and what the tool sent
    its caller on the way."""

    #: The MCP ``CallToolResult``, as JSON.
    result: dict
    #: Progress updates, in order: ``{"progress", "total", "message"}``.
    progress: list = field(default_factory=list)
    #: Log messages: ``{"level", "logger", "message", "data"}``.
    logs: list = field(default_factory=list)
    #: The questions asked: ``{"message", "requested_schema"}``.
    questions: list = field(default_factory=list)

    @property
    def is_error(self) -> bool:
        return bool(self.result.get("isError"))

    @property
    def text(self) -> str:
        """The text blocks, joined by newlines: what a text-only agent reads."""
        return "\n".join(b.get("text", "") for b in self.result.get("content", []) if b.get("type") == "text")

    @property
    def structured(self) -> Any:
        return self.result.get("structuredContent")

    @property
    def error_code(self) -> Optional[str]:
        """toolhost's code when the call failed around the tool
        (``invalid_arguments``, ``timeout``, ``plugin_error``, ...);
        ``None`` when the tool ran and answered, even with an error."""
        return ((self.result.get("_meta") or {}).get("error") or {}).get("code")


class UnknownTool(Exception):
    """The name is no tool of the manifest on the call's surface: MCP's
    protocol error, as an agent gets it."""


class _Aborted(Exception):
    pass


class _Context:
    """The part of a gRPC servicer context the SDK's servicers use, wired
    to the harness process instead of a socket."""

    def __init__(self, deadline_ms: int, send) -> None:
        self._events: asyncio.Queue = asyncio.Queue()
        self._send = send
        self._until = asyncio.get_running_loop().time() + deadline_ms / 1000

    def invocation_metadata(self):
        return ()

    def time_remaining(self) -> float:
        return max(0.0, self._until - asyncio.get_running_loop().time())

    async def read(self):
        return await self._events.get()

    async def write(self, event) -> None:
        self._send({"event": _b64(event)})

    async def abort(self, code: grpc.StatusCode, message: str):
        self._send({"abort": {"code": code.value[0], "message": message}})
        raise _Aborted(message)


# The directories a handler may write in while the harness runs it: the
# data directory, as under the daemon's sandbox. None outside a handler.
_WRITABLE: contextvars.ContextVar[Optional[tuple[str, ...]]] = contextvars.ContextVar(
    "toolhost_harness_writable", default=None
)
_HOOKED = False
_TWO_PATHS = {"os.rename", "os.replace", "os.link", "os.symlink"}
_ONE_PATH = {"os.mkdir", "os.remove", "os.rmdir", "os.truncate", "os.chmod", "os.chown", "os.utime", "shutil.rmtree"}
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


def _sandbox_audit(event: str, args: tuple) -> None:
    """Refuses, in a handler the harness runs, a write the daemon's sandbox
    would refuse: anywhere but the plugin's data directory. The error names
    the path, where under the daemon only its log would."""
    writable = _WRITABLE.get()
    if writable is None:
        return
    if event == "open":
        path, mode, flags = (tuple(args) + (None, None, None))[:3]
        writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
            isinstance(flags, int) and flags & _WRITE_FLAGS
        )
        paths = [path] if writing else []
    elif event in _TWO_PATHS:
        paths = list(args[:2])
    elif event in _ONE_PATH:
        paths = list(args[:1])
    else:
        return
    for p in paths:
        if p is None or isinstance(p, int):
            continue
        shown = os.fsdecode(p)
        real = os.path.realpath(shown)
        if not any(real == w or real.startswith(w + os.sep) for w in writable):
            raise PermissionError(
                errno.EACCES,
                f"under toolhost's sandbox a plugin writes only in its data directory ({writable[0]}, "
                "Plugin.data_dir()); this write would fail there too",
                shown,
            )


def _install_sandbox_rule() -> None:
    global _HOOKED
    if not _HOOKED:
        sys.addaudithook(_sandbox_audit)
        _HOOKED = True


def _b64(message) -> str:
    return base64.b64encode(message.SerializeToString()).decode()


class Drift(AssertionError):
    """The code and plugin.toml disagree: each line names a tool, where,
    and the command that writes the code's shapes into the manifest."""


class Harness:
    """A plugin's tools, called through toolhost's rules in this process.

    ``directory`` holds the plugin's ``plugin.toml`` (by default the
    directory of the module that made ``plugin``, else the current one).
    Use it as a context manager, or call :meth:`close`."""

    def __init__(
        self,
        plugin: Plugin,
        directory: Optional[str] = None,
        *,
        config: Optional[dict[str, Any]] = None,
        data_dir: Optional[str] = None,
    ) -> None:
        self.plugin = plugin
        self.directory = os.path.abspath(directory or _plugin_dir(plugin))
        manifest_path = os.path.join(self.directory, "plugin.toml")
        if not os.path.isfile(manifest_path):
            raise FileNotFoundError(f"no plugin.toml in {self.directory}; pass the plugin's directory")
        self._give_config(manifest_path, config or {})
        self._scratch = None
        if data_dir is None:
            self._scratch = tempfile.TemporaryDirectory(prefix="toolhost-harness-")
            data_dir = self._scratch.name
        self.data_dir = data_dir
        os.environ[DATA_DIR_KEY] = data_dir
        _install_sandbox_rule()
        exe = os.environ.get("TOOLHOST_BIN") or shutil.which("toolhost")
        if not exe:
            raise FileNotFoundError(
                "the harness runs `toolhost harness`: put toolhost on PATH or name it in TOOLHOST_BIN"
            )
        self._proc = subprocess.Popen(
            [exe, "harness", self.directory],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        self._lock = threading.Lock()
        self._check_shapes()

    def _check_shapes(self) -> None:
        """Compares what the code states with the manifest, as `toolhost
        check --start` and the daemon do: a drifted type, a forgotten
        `schema sync` or a hand-edited schema fails here, naming the tool,
        the places and the command to run."""
        first = asyncio.run(self._line())
        if not first.get("manifest", {}).get("checks_shapes"):
            return
        self._send({"shapes": _b64(describe(self.plugin))})
        answer = asyncio.run(self._line())
        problems = answer.get("drift") or []
        if problems:
            self.close()
            raise Drift("\n".join(problems))

    def _give_config(self, manifest_path: str, given: dict[str, Any]) -> None:
        import tomllib

        with open(manifest_path, "rb") as f:
            items = tomllib.load(f).get("config", [])
        declared = {i.get("name"): i for i in items if isinstance(i, dict)}
        unknown = sorted(set(given) - set(declared))
        if unknown:
            raise KeyError(f"plugin.toml declares no config item {', '.join(unknown)}")
        values: dict[str, Any] = {}
        secrets: dict[str, Secret] = {}
        for name, item in declared.items():
            value = given.get(name, item.get("default"))
            if value is None:
                continue
            if item.get("secret"):
                secrets[name] = Secret(str(value))
            else:
                values[name] = value
        _config._values = values
        _config._secrets = secrets

    def __enter__(self) -> "Harness":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Stops the harness process and removes the scratch data directory."""
        if self._proc.poll() is None:
            if self._proc.stdin:
                self._proc.stdin.close()
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
        if self._scratch is not None:
            self._scratch.cleanup()
            self._scratch = None

    def call(self, tool: str, arguments: Optional[dict] = None, **options: Any) -> Outcome:
        """:meth:`acall` from synchronous code (not from a running event loop)."""
        return asyncio.run(self.acall(tool, arguments, **options))

    async def acall(
        self,
        tool: str,
        arguments: Optional[dict] = None,
        *,
        answers: Optional[list] = None,
        can_ask: bool = True,
        progress: bool = True,
        surface: Optional[str] = None,
    ) -> Outcome:
        """Calls ``tool`` (its local name) with ``arguments`` as an agent
        would. Raises :class:`UnknownTool` for a name the call's surface
        cannot see."""
        request = {
            "tool": tool,
            "arguments": arguments,
            "answers": list(answers or []),
            "can_ask": can_ask,
            "progress": progress,
        }
        if surface is not None:
            request["surface"] = surface
        with self._lock:
            return await self._run(request)

    def _send(self, line: dict) -> None:
        assert self._proc.stdin is not None
        self._proc.stdin.write(json.dumps(line) + "\n")
        self._proc.stdin.flush()

    async def _line(self) -> dict:
        assert self._proc.stdout is not None
        text = await asyncio.to_thread(self._proc.stdout.readline)
        if not text:
            err = self._proc.stderr.read() if self._proc.stderr else ""
            raise RuntimeError(f"toolhost harness ended: {err.strip() or 'no output'}")
        return json.loads(text)

    async def _run(self, request: dict) -> Outcome:
        # The handler's tasks (and its thread) inherit the rule from here.
        # Under the daemon $TMPDIR is inside the data directory, so `tempfile`
        # works there; so it does here, while the handler runs (the test's
        # own code does not run meanwhile: it waits for this call).
        temporary = os.path.join(self.data_dir, ".tmp")
        os.makedirs(temporary, exist_ok=True)
        rule = _WRITABLE.set((os.path.realpath(self.data_dir),))
        before, tempfile.tempdir = tempfile.tempdir, temporary
        try:
            return await self._run_under_rule(request)
        finally:
            tempfile.tempdir = before
            _WRITABLE.reset(rule)

    async def _run_under_rule(self, request: dict) -> Outcome:
        self._send({"call": request})
        context: Optional[_Context] = None
        handler: Optional[asyncio.Task] = None
        try:
            while True:
                line = await self._line()
                if "manifest" in line:
                    continue
                if "result" in line:
                    return Outcome(line["result"], line["progress"], line["logs"], line["questions"])
                if "unknown_tool" in line:
                    raise UnknownTool(line["unknown_tool"])
                if "error" in line:
                    raise RuntimeError(f"toolhost harness: {line['error']}")
                if "start" in line:
                    context = _Context(line["deadline_ms"], self._send)
                    context._events.put_nowait(v2.HostEvent.FromString(base64.b64decode(line["start"])))
                    handler = asyncio.create_task(self._stream(context))
                elif "invoke" in line:
                    invoke = v1.AgentToolRequest.FromString(base64.b64decode(line["invoke"]))
                    context = _Context(line["deadline_ms"], self._send)
                    handler = asyncio.create_task(self._unary(invoke, context))
                elif "answer" in line and context is not None:
                    context._events.put_nowait(v2.HostEvent.FromString(base64.b64decode(line["answer"])))
                elif "cancel" in line and handler is not None:
                    handler.cancel()
        finally:
            if handler is not None and not handler.done():
                handler.cancel()

    async def _stream(self, context: _Context) -> None:
        try:
            await _Streaming(self.plugin).Invoke(None, context)
        except (_Aborted, asyncio.CancelledError):
            pass

    async def _unary(self, request, context: _Context) -> None:
        try:
            response = await _Unary(self.plugin).InvokeAgentTool(request, context)
            self._send({"response": _b64(response)})
        except (_Aborted, asyncio.CancelledError):
            pass


def _plugin_dir(plugin: Plugin) -> str:
    import inspect

    for fn in plugin.tools.values():
        module = inspect.getmodule(getattr(fn, "_toolhost_fn", fn))
        path = getattr(module, "__file__", None)
        if path:
            return os.path.dirname(os.path.abspath(path))
    return os.getcwd()
