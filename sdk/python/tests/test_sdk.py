"""The SDK against a real gRPC client, in process: both protocols, every
v2 event, cancellation and the error path. (The end-to-end tests in the
repository's tests/ run it under the real daemon.)"""

import asyncio
import os
import tempfile

import grpc
import pytest
from google.protobuf import json_format

from toolhost_plugin import Content, LogLevel, Plugin, Question, ToolError
from toolhost_plugin._gen.kandev.plugin.v1 import plugin_pb2 as v1
from toolhost_plugin._gen.kandev.plugin.v1 import plugin_pb2_grpc as v1_grpc
from toolhost_plugin._gen.toolhost.plugin.v2 import plugin_pb2 as v2
from toolhost_plugin._gen.toolhost.plugin.v2 import plugin_pb2_grpc as v2_grpc
from toolhost_plugin.content import to_result
from toolhost_plugin.plugin import _Streaming, _Unary

plugin = Plugin()
seen: dict[str, object] = {}


@plugin.tool("hello")
async def hello(call):
    return f"hello, {call.arguments.get('who', 'world')} ({call.task_id})"


@plugin.tool("sync_count")
def sync_count(call):
    return {"words": len(call.arguments["text"].split())}


@plugin.tool("fails")
async def fails(call):
    raise ToolError("the thing is missing; create it first")


@plugin.tool("breaks")
async def breaks(call):
    raise KeyError("SECRET-IN-AN-EXCEPTION")


@plugin.tool("rich")
async def rich(call):
    for i in range(1, 4):
        call.progress(i, 3, f"step {i}")
    call.log(LogLevel.WARNING, "careful", {"n": 1})
    call.log(LogLevel.DEBUG, "too quiet to send")
    answer = await call.ask(Question("Proceed?").boolean("ok", "OK").require("ok"))
    return [
        "done" if answer.flag("ok") else "stopped",
        Content.image(b"\x89PNG", "image/png").annotated(audience=["user"], priority=0.5),
        Content.resource_text("notes://a.md", "text/markdown", "# A"),
    ]


@plugin.tool("types")
async def types(call):
    return {"types": {k: type(v).__name__ for k, v in call.arguments.items()}, "ids": call.arguments.get("ids")}


@plugin.tool("sleepy")
async def sleepy(call):
    try:
        await asyncio.sleep(30)
    except asyncio.CancelledError:
        seen["cancelled"] = True
        raise
    return "woke"


@plugin.tool("spins")
def spins(call):
    # A plain handler that never looks at call.cancelled: a busy loop.
    n = 0
    while True:
        n += 1


@pytest.fixture
async def channel():
    path = os.path.join(tempfile.mkdtemp(), "p.sock")
    server = grpc.aio.server()
    v1_grpc.add_PluginServicer_to_server(_Unary(plugin), server)
    v2_grpc.add_PluginServicer_to_server(_Streaming(plugin), server)
    server.add_insecure_port(f"unix:{path}")
    await server.start()
    async with grpc.aio.insecure_channel(f"unix:{path}") as ch:
        yield ch
    await server.stop(0)


def request(name, **args):
    r = v1.AgentToolRequest(invocation_id="i1", name=name, context=v1.AgentToolContext(task_id="t1"))
    r.arguments.update(args)
    return r


async def test_protocol_1_calls_answer_text_structured_and_errors(channel):
    stub = v1_grpc.PluginStub(channel)
    r = await stub.InvokeAgentTool(request("hello", who="ada"))
    assert (r.text, r.is_error) == ("hello, ada (t1)", False)
    r = await stub.InvokeAgentTool(request("sync_count", text="a b c"))
    assert json_format.MessageToDict(r.structured_content) == {"words": 3}
    r = await stub.InvokeAgentTool(request("fails"))
    assert (r.text, r.is_error) == ("the thing is missing; create it first", True)
    r = await stub.InvokeAgentTool(request("breaks"))
    assert r.is_error and "KeyError" in r.text and "SECRET" not in r.text
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await stub.InvokeAgentTool(request("nope"))
    assert e.value.code() == grpc.StatusCode.NOT_FOUND


async def test_json_integers_arrive_as_int_and_fractions_as_float(channel):
    stub = v1_grpc.PluginStub(channel)
    r = await stub.InvokeAgentTool(request("types", n=1, x=2.5, big=2.0**60, ids=[1, 2], flag=True))
    out = json_format.MessageToDict(r.structured_content)
    assert out["types"] == {"n": "int", "x": "float", "big": "float", "ids": "list", "flag": "bool"}


async def test_protocol_2_carries_progress_logs_a_question_and_blocks(channel):
    stub = v2_grpc.PluginStub(channel)
    call = stub.Invoke()
    await call.write(v2.HostEvent(start=v2.Start(request=request("rich"), can_ask=True, wants_progress=True, log_level=v2.INFO)))
    kinds = []
    while True:
        event = await call.read()
        kind = event.WhichOneof("event")
        kinds.append(kind)
        if kind == "log":
            assert (event.log.level, event.log.message) == (v2.WARNING, "careful")
        if kind == "question":
            assert event.question.message == "Proceed?"
            schema = json_format.MessageToDict(event.question.requested_schema)
            assert schema["properties"]["ok"]["type"] == "boolean"
            answer = v2.Answer(question_id=event.question.id, action=v2.Answer.ACCEPT)
            answer.content.update({"ok": True})
            await call.write(v2.HostEvent(answer=answer))
        if kind == "result":
            result = event.result
            break
    assert kinds.count("progress") == 3 and kinds.count("log") == 1, kinds
    assert result.content[0].text.text == "done"
    assert result.content[1].image.mime_type == "image/png"
    assert list(result.content[1].annotations.audience) == [v2.Annotations.USER]
    assert result.content[2].resource.text == "# A"


async def test_nothing_is_sent_to_a_caller_that_did_not_ask(channel):
    stub = v2_grpc.PluginStub(channel)
    call = stub.Invoke()
    await call.write(v2.HostEvent(start=v2.Start(request=request("rich"), can_ask=True)))
    kinds = []
    while True:
        event = await call.read()
        kinds.append(event.WhichOneof("event"))
        if kinds[-1] == "question":
            await call.write(v2.HostEvent(answer=v2.Answer(question_id=event.question.id, action=v2.Answer.DECLINE)))
        if kinds[-1] == "result":
            assert event.result.content[0].text.text == "stopped"
            break
    assert kinds == ["question", "result"]


async def test_cancellation_reaches_the_handler(channel):
    seen.clear()
    stub = v2_grpc.PluginStub(channel)
    call = stub.Invoke()
    await call.write(v2.HostEvent(start=v2.Start(request=request("sleepy"))))
    await asyncio.sleep(0.2)
    call.cancel()
    for _ in range(100):
        if seen.get("cancelled"):
            break
        await asyncio.sleep(0.02)
    assert seen.get("cancelled") is True


async def test_a_deadline_cancels_the_handler(channel):
    seen.clear()
    stub = v1_grpc.PluginStub(channel)
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await stub.InvokeAgentTool(request("sleepy"), timeout=0.3)
    assert e.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    for _ in range(100):
        if seen.get("cancelled"):
            break
        await asyncio.sleep(0.02)
    assert seen.get("cancelled") is True


async def test_a_hung_plain_handler_holds_no_thread_past_its_deadline(channel):
    import threading

    def handler_threads():
        return [t for t in threading.enumerate() if t.name.startswith("toolhost-tool-")]

    stub = v1_grpc.PluginStub(channel)
    for _ in range(5):
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await stub.InvokeAgentTool(request("spins"), timeout=0.2)
        assert e.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    for _ in range(200):
        if not handler_threads() and plugin.hung_handlers() == 0:
            break
        await asyncio.sleep(0.02)
    assert not handler_threads(), threading.enumerate()
    assert plugin.hung_handlers() == 0


def test_results_normalize():
    assert to_result("x").content[0].v1_text() == "x"
    r = to_result({"a": 1})
    assert r.structured == {"a": 1} and r.content[0].v1_text() == '{"a": 1}'
    r = to_result(["a", Content.link("https://x.test/r", "r", size=3)])
    assert [c.v1_text() for c in r.content] == ["a", "[resource r (https://x.test/r)]"]
    with pytest.raises(TypeError):
        to_result([1])


def test_questions_build_flat_schemas():
    q = Question("Pick").choice("color", "Color", ["red", "blue"]).integer("n", "How many").require("color")
    assert q.schema() == {
        "type": "object",
        "properties": {
            "color": {"type": "string", "title": "Color", "enum": ["red", "blue"]},
            "n": {"type": "integer", "title": "How many"},
        },
        "required": ["color"],
    }


def test_run_by_hand_refuses(monkeypatch, capsys):
    monkeypatch.delenv("KANDEV_PLUGIN", raising=False)
    assert asyncio.run(Plugin().serve()) == 1
    assert "start it with toolhost" in capsys.readouterr().err


def test_config_is_read_once_deleted_and_secrets_never_print(tmp_path, monkeypatch):
    from toolhost_plugin import Secret
    from toolhost_plugin import config as config_module

    f = tmp_path / "config.json"
    f.write_text('{"config": {"api_url": "https://x", "page": 3, "on": true}, "secrets": {"token": "s3cr3t"}}')
    monkeypatch.setenv("TOOLHOST_PLUGIN_CONFIG", str(f))
    import importlib

    mod = importlib.import_module("toolhost_plugin.config")
    cfg = mod.load()
    assert not f.exists()
    assert cfg.get("api_url") == "https://x"
    assert cfg.get("page") == 3
    assert cfg.get("on") is True
    assert cfg.get("token") is None
    assert cfg.get("absent", "fallback") == "fallback"
    token = cfg.secret("token")
    assert isinstance(token, Secret) and token.expose() == "s3cr3t"
    assert "s3cr3t" not in repr(cfg) + repr(token) + str(token) + f"{token}"
    assert mod.Config.from_json("not json").get("api_url") is None
    assert config_module is not None


async def test_describe_names_the_tools_with_handlers(channel):
    answer = await v2_grpc.PluginStub(channel).Describe(v2.DescribeRequest())
    assert list(answer.tools) == sorted(plugin.tools)
    assert answer.sdk.startswith("toolhost-plugin ")


async def test_a_call_without_the_call_token_is_refused(channel, tmp_path, monkeypatch):
    token_file = tmp_path / "call-token"
    token_file.write_text("0123456789abcdef0123456789abcdef\n")
    monkeypatch.setenv("TOOLHOST_PLUGIN_CALL_TOKEN", str(token_file))
    from toolhost_plugin.plugin import _read_call_token

    plugin._call_token = _read_call_token()
    try:
        assert plugin._call_token == "0123456789abcdef0123456789abcdef"
        assert not token_file.exists(), "the token file is deleted once read"
        stub = v1_grpc.PluginStub(channel)
        for metadata in [(), (("toolhost-call-token", "0" * 32),)]:
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await stub.InvokeAgentTool(request("hello"), metadata=metadata)
            assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
        ok = await stub.InvokeAgentTool(
            request("hello"), metadata=(("toolhost-call-token", "0123456789abcdef0123456789abcdef"),)
        )
        assert ok.text.startswith("hello")
        v2_stub = v2_grpc.PluginStub(channel)
        # The plugin refuses on the call's metadata alone, before any
        # message: a first write could race its answer (and grpc's client
        # then reports its own INTERNAL in place of the plugin's status).
        stream = v2_stub.Invoke()
        assert await asyncio.wait_for(stream.code(), 30) == grpc.StatusCode.UNAUTHENTICATED
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await v2_stub.Describe(v2.DescribeRequest())
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
    finally:
        plugin._call_token = None

