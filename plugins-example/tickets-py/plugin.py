"""tickets: a small ticket tracker, on the Python SDK, with tools from types."""

import json
import os
from dataclasses import asdict, dataclass, field
from typing import Annotated, Literal

from toolhost_plugin import Plugin, Question, ToolCall, ToolError, config

plugin = Plugin()
Priority = Literal["low", "normal", "high"]


@dataclass
class Label:
    name: Annotated[str, "A short tag, like bug or ui."]
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


def load() -> list[dict]:
    path = os.path.join(plugin.data_dir() or ".", "tickets.json")
    return json.load(open(path)) if os.path.exists(path) else []


def save(tickets: list[dict]) -> None:
    json.dump(tickets, open(os.path.join(plugin.data_dir() or ".", "tickets.json"), "w"))


@plugin.tool
def create_ticket(title: str, labels: list[Label] = [], priority: Priority = "normal") -> Ticket:
    """Opens a ticket.

    Args:
        title: What is wrong or wanted, in one line.
        labels: Tags to file it under.
    """
    if config.secret("api_token").expose() == "":
        raise ToolError("the tracker's api_token is empty; ask the operator to set it")
    tickets = load()
    ticket = Ticket(len(tickets) + 1, title, priority, labels)
    save(tickets + [asdict(ticket)])
    return ticket


@plugin.tool
def list_tickets(cursor: int = 0, limit: int = 20, call: ToolCall = None) -> TicketPage:
    """Lists tickets, oldest first, a page at a time.

    Args:
        cursor: Where the previous page ended (0 for the first page).
        limit: The most tickets in one page.
    """
    tickets = load()
    for i in range(cursor, min(cursor + limit, len(tickets))):
        call.progress(i - cursor + 1, min(limit, len(tickets) - cursor))
    page = [Ticket(**{**t, "labels": [Label(**l) for l in t["labels"]]}) for t in tickets[cursor : cursor + limit]]
    more = cursor + limit < len(tickets)
    return TicketPage(page, cursor + limit if more else None)


@plugin.tool
async def close_ticket(id: int, call: ToolCall) -> str:
    """Closes a ticket for good, after the user agrees.

    Args:
        id: The ticket's number.
    """
    tickets = load()
    if not 0 < id <= len(tickets):
        raise ToolError(f"there is no ticket {id}; list_tickets shows the open ones")
    answer = await call.ask(Question(f"Close ticket {id}?").boolean("confirm", "Close it").require("confirm"))
    if not answer.flag("confirm"):
        return f"ticket {id} stays open"
    tickets[id - 1]["open"] = False
    save(tickets)
    return f"closed ticket {id}"


if __name__ == "__main__":
    plugin.run()
