"""The peer: a FastMCP gateway mounting a proxy of the upstream under a
namespace prefix, the way people aggregate MCP tools today."""

import sys

from fastmcp import FastMCP

upstream_url = sys.argv[1]
port = int(sys.argv[2])

gateway = FastMCP("gateway")
gateway.mount(FastMCP.as_proxy(upstream_url), prefix="up")

if __name__ == "__main__":
    gateway.run(transport="http", host="127.0.0.1", port=port, show_banner=False)
