"""The peer's upstream: a FastMCP server holding the benchmark's echo tool."""

import sys

from fastmcp import FastMCP

mcp = FastMCP("upstream")


@mcp.tool
def echo(msg: str, n: int) -> dict:
    """Echoes its arguments."""
    return {"arguments": {"msg": msg, "n": n}}


if __name__ == "__main__":
    mcp.run(transport="http", host="127.0.0.1", port=int(sys.argv[1]), show_banner=False)
