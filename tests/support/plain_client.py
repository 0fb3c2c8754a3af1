"""An agent on the official MCP Python SDK (`mcp`) that makes plain calls
on a 2025-11-25 session, for tests/session_calls.rs.

Usage: plain_client.py URL TOKEN N

The client opens a session (no elicitation callback, no progress callback,
no log level: it is owed nothing but results), lists the tools, calls
`kandev_tp_echo` N times with good arguments and once with a missing one,
then prints one JSON line: the texts of the good calls, and the error code
of the bad one.
"""

import asyncio
import json
import sys

import httpx2
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client


async def main():
    url, token, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60)
    client = Client(streamable_http_client(url, http_client=http), mode="legacy")
    async with client:
        listed = await client.list_tools()
        names = sorted(t.name for t in listed.tools)
        texts = []
        for i in range(n):
            r = await client.call_tool("kandev_tp_echo", {"msg": f"m{i}", "n": i})
            texts.append("".join(c.text for c in r.content if getattr(c, "type", "") == "text"))
        bad = await client.call_tool("kandev_tp_echo", {"msg": "x"})
        error = (bad.structured_content or {}).get("error") or {}
        print(json.dumps({
            "listed_echo": "kandev_tp_echo" in names,
            "texts": texts,
            "bad_is_error": bool(bad.is_error),
            "bad_code": error.get("code"),
        }))


asyncio.run(main())
