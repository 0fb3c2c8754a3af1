"""The peer: a FastMCP gateway mounting a proxy of the upstream under a
namespace prefix, the way people aggregate MCP tools today (FastMCP 4:
`create_proxy` and `mount(server, namespace=...)`)."""

import sys

from fastmcp import FastMCP
from fastmcp.server import create_proxy

upstream_url = sys.argv[1]
port = int(sys.argv[2])

gateway = FastMCP("gateway")
gateway.mount(create_proxy(upstream_url), namespace="up")

if __name__ == "__main__":
    gateway.run(transport="http", host="127.0.0.1", port=port, show_banner=False)
