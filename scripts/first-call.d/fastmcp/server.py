import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Annotated, Literal

from fastmcp import Context, FastMCP
from fastmcp.exceptions import ToolError
from pydantic import Field

mcp = FastMCP("tickets")
Priority = Literal["low", "normal", "high"]


@dataclass
class Label:
    name: Annotated[str, Field(description="A short tag, like bug or ui.")]
    color: str = "grey"


@dataclass
class Ticket:
    id: int
    title: str
    priority: Priority
    labels: list[Label] = field(default_factory=list)
    open: bool = True


@dataclass
class TicketPage:
    tickets: list[Ticket]
    next_cursor: int | None = None


def store() -> Path:
    return Path(os.environ.get("TICKETS_DIR", ".")) / "tickets.json"


def load() -> list[dict]:
    return json.loads(store().read_text()) if store().exists() else []


@mcp.tool(annotations={"destructiveHint": False})
def create_ticket(title: str, labels: list[Label] = [], priority: Priority = "normal") -> Ticket:
    """Opens a ticket.

    Args:
        title: What is wrong or wanted, in one line.
        labels: Tags to file it under.
    """
    if not os.environ.get("TICKETS_API_TOKEN"):
        raise ToolError("the tracker's api_token is empty; ask the operator to set it")
    ticket = Ticket(len(load()) + 1, title, priority, labels)
    store().write_text(json.dumps(load() + [asdict(ticket)]))
    return ticket


@mcp.tool(annotations={"readOnlyHint": True})
async def list_tickets(ctx: Context, cursor: int = 0, limit: Annotated[int, Field(ge=1, le=100)] = 20) -> TicketPage:
    """Lists tickets, oldest first, a page at a time.

    Args:
        cursor: Where the previous page ended (0 for the first page).
        limit: The most tickets in one page.
    """
    page = [Ticket(**{**t, "labels": [Label(**l) for l in t["labels"]]}) for t in load()[cursor : cursor + limit]]
    for i in range(len(page)):
        await ctx.report_progress(i + 1, len(page))
    return TicketPage(page, cursor + limit if cursor + limit < len(load()) else None)


@mcp.tool(annotations={"destructiveHint": True})
async def close_ticket(id: Annotated[int, Field(description="The ticket's number.")], ctx: Context) -> str:
    """Closes a ticket for good, after the user agrees."""
    tickets = load()
    if not 0 < id <= len(tickets):
        raise ToolError(f"there is no ticket {id}; list_tickets shows the open ones")
    answer = await ctx.elicit(f"Close ticket {id}?", bool)
    if answer.action != "accept" or not answer.data:
        return f"ticket {id} stays open"
    tickets[id - 1]["open"] = False
    store().write_text(json.dumps(tickets))
    return f"closed ticket {id}"


if __name__ == "__main__":
    mcp.run()
