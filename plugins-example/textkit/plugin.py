"""textkit: a toolhost plugin in Python.

It speaks the same handshake as any toolhost plugin (docs/PROTOCOL.md §3 and §4,
go-plugin's conventions), with nothing but grpcio:

1. refuse to run unless KANDEV_PLUGIN=kandev-plugin-v1 and protocol 1 is
   offered in PLUGIN_PROTOCOL_VERSIONS;
2. serve kandev.plugin.v1.Plugin and grpc.health.v1 (service "plugin" set to
   SERVING) on a Unix socket in a private temporary directory;
3. print exactly one line on stdout: 1|1|unix|<socket path>|grpc;
4. stop gracefully on SIGTERM.

Anything else goes to stderr, which toolhost turns into log events.
"""

import os
import shutil
import signal
import sys
import tempfile
import threading
from concurrent import futures

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "gen"))

import grpc  # noqa: E402
from google.protobuf import json_format  # noqa: E402
from grpc_health.v1 import health, health_pb2, health_pb2_grpc  # noqa: E402

from kandev.plugin.v1 import plugin_pb2, plugin_pb2_grpc  # noqa: E402


def word_count(args):
    text = args.get("text", "")
    result = {
        "words": len(text.split()),
        "lines": len(text.splitlines()),
        "characters": len(text),
    }
    summary = f"{result['words']} words, {result['lines']} lines, {result['characters']} characters"
    return summary, result


def title_case(args):
    return " ".join(w[:1].upper() + w[1:] for w in args.get("text", "").split(" ")), None


TOOLS = {"word_count": word_count, "title_case": title_case}


class TextKit(plugin_pb2_grpc.PluginServicer):
    def InvokeAgentTool(self, request, context):
        tool = TOOLS.get(request.name)
        if tool is None:
            context.abort(grpc.StatusCode.NOT_FOUND, f"no tool named {request.name!r}")
        args = json_format.MessageToDict(request.arguments)
        try:
            text, structured = tool(args)
        except Exception as e:  # a tool failure is a result the model reads
            return plugin_pb2.AgentToolResponse(text=f"{request.name} failed: {type(e).__name__}", is_error=True)
        response = plugin_pb2.AgentToolResponse(text=text)
        if structured is not None:
            response.structured_content.update(structured)
        return response


def main():
    if os.environ.get("KANDEV_PLUGIN") != "kandev-plugin-v1":
        print("this is a toolhost plugin, start it with toolhost", file=sys.stderr)
        return 1
    offered = [v.strip() for v in os.environ.get("PLUGIN_PROTOCOL_VERSIONS", "").split(",")]
    if "1" not in offered:
        print(f"toolhost offered protocol versions {offered}; this plugin speaks 1", file=sys.stderr)
        return 1

    # toolhost gives each plugin process a private socket directory (also
    # its TMPDIR); the handshake must name a socket inside it.
    sock_dir = tempfile.mkdtemp(prefix="textkit-", dir=os.environ.get("KANDEV_PLUGIN_SOCKET_DIR"))
    path = os.path.join(sock_dir, "plugin.sock")
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    plugin_pb2_grpc.add_PluginServicer_to_server(TextKit(), server)
    health_servicer = health.HealthServicer()
    health_servicer.set("plugin", health_pb2.HealthCheckResponse.SERVING)
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    server.add_insecure_port(f"unix:{path}")
    server.start()

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())

    print(f"1|1|unix|{path}|grpc", flush=True)
    print("textkit ready", file=sys.stderr, flush=True)
    stop.wait()
    server.stop(grace=2).wait()
    shutil.rmtree(sock_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
