import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Annotated, Literal

from toolhost_plugin import Plugin, Question, Range, ToolCall, ToolError, config

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


def store() -> Path:
    return Path(plugin.data_dir() or ".") / "tickets.json"


def load() -> list[dict]:
    return json.loads(store().read_text()) if store().exists() else []


@plugin.tool
def create_ticket(title: str, labels: list[Label] = [], priority: Priority = "normal") -> Ticket:
    """Opens a ticket.

    Args:
        title: What is wrong or wanted, in one line.
        labels: Tags to file it under.
    """
    if not config.secret("api_token").expose():
        raise ToolError("the tracker's api_token is empty; ask the operator to set it")
    ticket = Ticket(len(load()) + 1, title, priority, labels)
    store().write_text(json.dumps(load() + [asdict(ticket)]))
    return ticket


@plugin.tool
def list_tickets(
    cursor: int = 0, limit: Annotated[int, Range(ge=1, le=100)] = 20, call: ToolCall = None
) -> TicketPage:
    """Lists tickets, oldest first, a page at a time.

    Args:
        cursor: Where the previous page ended (0 for the first page).
        limit: The most tickets in one page.
    """
    page = [Ticket(**{**t, "labels": [Label(**l) for l in t["labels"]]}) for t in load()[cursor : cursor + limit]]
    for i in range(len(page)):
        call.progress(i + 1, len(page))
    return TicketPage(page, cursor + limit if cursor + limit < len(load()) else None)


@plugin.tool
async def close_ticket(id: Annotated[int, "The ticket's number."], call: ToolCall) -> str:
    """Closes a ticket for good, after the user agrees."""
    tickets = load()
    if not 0 < id <= len(tickets):
        raise ToolError(f"there is no ticket {id}; list_tickets shows the open ones")
    answer = await call.ask(Question(f"Close ticket {id}?").boolean("confirm", "Close it").require("confirm"))
    if not answer.flag("confirm"):
        return f"ticket {id} stays open"
    tickets[id - 1]["open"] = False
    store().write_text(json.dumps(tickets))
    return f"closed ticket {id}"


if __name__ == "__main__":
    plugin.run()
