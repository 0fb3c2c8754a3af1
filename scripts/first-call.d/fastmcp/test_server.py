"""The tickets tools through FastMCP's in-memory client: `python -m pytest`."""

import pytest
from fastmcp import Client
from fastmcp.client.elicitation import ElicitResult
from fastmcp.exceptions import ToolError

from server import mcp


@pytest.fixture(autouse=True)
def env(tmp_path, monkeypatch):
    monkeypatch.setenv("TICKETS_DIR", str(tmp_path))
    monkeypatch.setenv("TICKETS_API_TOKEN", "test")


async def test_a_ticket_is_opened_listed_and_closed_once_the_user_agrees():
    answers = [ElicitResult(action="decline"), {"value": True}]
    async def answer(message, response_type, params, context):
        return answers.pop(0)
    # FastMCP asks the user only on the 2025 handshake (mode="legacy").
    async with Client(mcp, elicitation_handler=answer, mode="legacy") as c:
        opened = await c.call_tool("create_ticket", {"title": "Login fails", "labels": [{"name": "bug"}]})
        assert opened.structured_content == {
            "id": 1, "title": "Login fails", "priority": "normal",
            "labels": [{"name": "bug", "color": "grey"}], "open": True,
        }
        page = await c.call_tool("list_tickets", {"limit": 5})
        assert [t["title"] for t in page.structured_content["tickets"]] == ["Login fails"]
        kept = await c.call_tool("close_ticket", {"id": 1})
        assert kept.content[0].text == "ticket 1 stays open"
        closed = await c.call_tool("close_ticket", {"id": 1})
        assert closed.content[0].text == "closed ticket 1"


async def test_a_wrong_argument_is_refused():
    async with Client(mcp) as c:
        with pytest.raises(ToolError, match="colour"):
            await c.call_tool("create_ticket", {"title": "x", "labels": [{"colour": "red"}]})
