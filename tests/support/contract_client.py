"""An agent on the official MCP Python SDK (`mcp`) that pins what it listed,
for tests/signing.rs.

Usage: contract_client.py URL TOKEN ERA CHANGED OTHER [--go-on-stdin]

ERA is `legacy` (the 2025-11-25 handshake, notified on its session) or
`2026-07-28` (notified on a `subscriptions/listen` stream). The client
lists the tools, prints `listed` (and the test changes the tool CHANGED's
contract), waits for `tools/list_changed` (with `--go-on-stdin`, for a
line on stdin as well: the test's change may take several steps, such as
removing the tool and bringing it back), then calls CHANGED twice and
OTHER once, and lists again.

Prints one JSON line: whether it was notified, each call's outcome
(`is_error`, the error `code`, the text), and each tool's
`_meta["toolhost/contract"]` before and after.
"""

import asyncio
import contextlib
import json
import sys

import httpx2
from mcp import types
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client

CONTRACT = "toolhost/contract"
WAIT_S = 30


def outcome(result):
    text = "".join(c.text for c in result.content if getattr(c, "type", "") == "text")
    error = (result.structured_content or {}).get("error") if result.is_error else None
    return {"is_error": bool(result.is_error), "code": (error or {}).get("code"), "text": text}


async def fingerprints(client):
    out, cursor = {}, None
    while True:
        page = await client.list_tools(cursor=cursor, cache_mode="refresh")
        for tool in page.tools:
            out[tool.name] = (tool.meta or {}).get(CONTRACT)
        cursor = page.next_cursor
        if not cursor:
            return out


async def main():
    url, token, era, changed, other = sys.argv[1:6]
    go_on_stdin = "--go-on-stdin" in sys.argv[6:]
    notified = asyncio.Event()

    async def on_message(message):
        root = getattr(message, "root", message)
        if isinstance(root, types.ToolListChangedNotification):
            notified.set()

    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60)
    client = Client(
        streamable_http_client(url, http_client=http),
        mode="legacy" if era == "legacy" else era,
        message_handler=on_message,
    )
    async with client, contextlib.AsyncExitStack() as stack:
        if era != "legacy":
            # Listening before listing: no change can fall between the two.
            sub = await stack.enter_async_context(client.listen(tools_list_changed=True))

            async def watch():
                async for _event in sub:
                    notified.set()

            watcher = asyncio.create_task(watch())
            stack.callback(watcher.cancel)
        before = await fingerprints(client)
        print("listed", flush=True)
        try:
            await asyncio.wait_for(notified.wait(), WAIT_S)
        except TimeoutError:
            pass
        if go_on_stdin:
            await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
        calls = []
        for name in (changed, changed, other):
            calls.append(outcome(await client.call_tool(name, {})))
        after = await fingerprints(client)
        print(json.dumps({"notified": notified.is_set(), "calls": calls, "before": before, "after": after}))


asyncio.run(main())
