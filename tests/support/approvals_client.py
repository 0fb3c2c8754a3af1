"""An agent on the official MCP Python SDK (`mcp`), for tests/approvals.rs.

Usage: approvals_client.py URL TOKEN ERA STEPS_JSON

ERA is `legacy` (the 2025-11-25 handshake) or `2026-07-28`. STEPS_JSON is a
list of steps, run in order on one client:

    {"call": TOOL, "args": {...}, "answer": ANSWER}
    {"call": TOOL, "args": {...}, "answer": ANSWER, "forge_args": {...}}
    {"task": TOOL, "args": {...}, "answer": ANSWER}

A step may carry `"pad": {"name": NAME, "bytes": N}`: the argument NAME
set to N bytes of `x` (a value too large for the command line).

ANSWER is what the user says to each question, in turn (the last one
repeats): "approve", "session", "decline", "cancel", "wrong" (accept with a
value that is not a yes), or "late:MS" (approve after MS milliseconds). A
step with `forge_args` (2026-07-28 only) answers the first question with a
yes but sends the retry with these other arguments, as an attacker would.
A `task` step (2026-07-28 only) declares the Tasks extension, polls
`tasks/get` and answers `input_required` through `tasks/update`.

Prints one JSON line: per step, what came back (`is_error`, the error
`code`, the text) and the questions the user saw.
"""

import asyncio
import json
import sys
from typing import ClassVar

import httpx2
from mcp import types
from mcp.client import Client
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from pydantic import TypeAdapter

TASKS = "io.modelcontextprotocol/tasks"


class User:
    """Answers questions as the step says, and remembers them."""

    def __init__(self):
        self.answers = ["approve"]
        self.seen = []

    def next_answer(self):
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]

    async def reply(self, message, schema):
        self.seen.append({"message": message, "schema": schema})
        answer = self.next_answer()
        if answer.startswith("late:"):
            await asyncio.sleep(int(answer[5:]) / 1000)
            answer = "approve"
        if answer == "approve":
            return {"action": "accept", "content": {"approve": True}}
        if answer == "session":
            return {"action": "accept", "content": {"approve": True, "for_session": True}}
        if answer == "wrong":
            return {"action": "accept", "content": {"approve": False}}
        return {"action": answer}


def outcome(result, user, asked_before):
    text = "".join(c.text for c in result.content if getattr(c, "type", "") == "text")
    error = (result.structured_content or {}).get("error") if result.is_error else None
    return {
        "is_error": bool(result.is_error),
        "code": (error or {}).get("code"),
        "text": text,
        "questions": user.seen[asked_before:],
    }


async def forged_retry(session, step, user):
    """Answers the first question with a yes, but retries with other arguments."""
    first = await session.call_tool(step["call"], step["args"], allow_input_required=True)
    assert isinstance(first, types.InputRequiredResult), first
    (key, request), = first.input_requests.items()
    user.seen.append({"message": request.params.message, "schema": request.params.requested_schema})
    answer = types.ElicitResult(action="accept", content={"approve": True})
    return await session.call_tool(
        step["call"],
        step["forge_args"],
        input_responses={key: answer},
        request_state=first.request_state,
        allow_input_required=True,
    )


class TaskRequest(types.Request[dict, str]):
    """A Tasks-extension request: its `taskId` travels as the `Mcp-Name` header too."""

    name_param: ClassVar[str | None] = "taskId"


async def raw(session, method, params):
    kind = TaskRequest if method.startswith("tasks/") else types.Request[dict, str]
    return await session.send_request(kind(method=method, params=params), TypeAdapter(dict))


async def task_step(session, step, user):
    """Runs a call as a task: tasks/get until it ends, answering input_required."""
    created = await raw(session, "tools/call", {"name": step["call"], "arguments": step["args"]})
    task = created.get("task") or created
    task_id = task["taskId"]
    for _ in range(2000):
        got = await raw(session, "tasks/get", {"taskId": task_id})
        status = got.get("status")
        if status == "input_required":
            requests = got.get("inputRequests") or {}
            responses = {}
            for key, request in requests.items():
                params = request.get("params", {})
                responses[key] = await user.reply(params.get("message"), params.get("requestedSchema"))
            await raw(session, "tasks/update", {"taskId": task_id, "inputResponses": responses})
            continue
        if status == "failed":
            # A failed task carries the JSON-RPC error a direct call would
            # have got; its data is the coded error.
            error = got.get("error") or {}
            data = error.get("data") or {}
            return types.CallToolResult(
                content=[types.TextContent(type="text", text=error.get("message", ""))],
                structured_content={"error": data},
                is_error=True,
            )
        if status in ("completed", "cancelled"):
            return types.CallToolResult.model_validate(got.get("result") or {"content": []})
        await asyncio.sleep(0.05)
    raise RuntimeError("the task did not end")


async def main():
    url, token, era, steps = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
    user = User()

    async def elicit(_context, params):
        return types.ElicitResult(**(await user.reply(params.message, params.requested_schema)))

    can_ask = not any(s.get("no_elicitation") for s in steps)
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60)
    extensions = None
    if any("task" in s for s in steps):
        from mcp.client.extension import advertise

        extensions = [advertise(TASKS, {})]
    client = Client(
        streamable_http_client(url, http_client=http),
        mode="legacy" if era == "legacy" else era,
        elicitation_callback=elicit if can_ask else None,
        extensions=extensions,
    )
    out = []
    async with client:
        session: ClientSession = client.session
        for step in steps:
            if "pad" in step:
                pad = step["pad"]
                step = dict(step, args=dict(step["args"], **{pad["name"]: "x" * pad["bytes"]}))
            user.answers = list(step.get("answer", ["approve"]))
            before = len(user.seen)
            if "task" in step:
                step = dict(step, call=step["task"])
                result = await task_step(session, step, user)
            elif "forge_args" in step:
                result = await forged_retry(session, step, user)
            else:
                result = await client.call_tool(step["call"], step["args"])
            if isinstance(result, types.InputRequiredResult):
                out.append({"input_required": True, "questions": user.seen[before:]})
            else:
                out.append(outcome(result, user, before))
    print(json.dumps(out))


asyncio.run(main())
