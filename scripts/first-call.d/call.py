"""The first call, as an agent's client makes it: the official MCP Python
SDK (`mcp`) over streamable HTTP, the newest era it and the server share.

Usage: call.py URL TOKEN|- TOOL JSON_ARGUMENTS

Prints the call's text. Exits 1 if the answer is an error.
"""

import asyncio
import json
import sys

import httpx2
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client


async def main() -> int:
    url, token, tool, arguments = sys.argv[1:5]
    headers = {} if token == "-" else {"Authorization": f"Bearer {token}"}
    http = httpx2.AsyncClient(headers=headers, timeout=60)
    async with Client(streamable_http_client(url, http_client=http)) as client:
        r = await client.call_tool(tool, json.loads(arguments))
        print("".join(c.text for c in r.content if getattr(c, "type", "") == "text"))
        return 1 if r.is_error else 0


sys.exit(asyncio.run(main()))
