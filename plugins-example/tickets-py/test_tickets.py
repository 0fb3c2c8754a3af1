"""The tickets tools through toolhost's own rules, with no daemon:
`python -m pytest` here (toolhost on PATH, or TOOLHOST_BIN)."""

import pytest
from plugin import plugin
from toolhost_plugin.testing import Harness


@pytest.fixture
def h():
    with Harness(plugin, config={"api_token": "test"}) as harness:
        yield harness


def test_a_ticket_is_opened_listed_and_closed_once_the_user_agrees(h):
    opened = h.call("create_ticket", {"title": "Login fails", "labels": [{"name": "bug"}]})
    assert opened.structured == {
        "id": 1, "title": "Login fails", "priority": "normal",
        "labels": [{"name": "bug", "color": "grey"}], "open": True,
    }
    page = h.call("list_tickets", {"limit": 5})
    assert [t["title"] for t in page.structured["tickets"]] == ["Login fails"]
    assert page.progress[-1]["progress"] == 1
    kept = h.call("close_ticket", {"id": 1}, answers=["decline"])
    assert kept.text == "ticket 1 stays open"
    closed = h.call("close_ticket", {"id": 1}, answers=[{"confirm": True}])
    assert closed.text == "closed ticket 1" and closed.questions[0]["message"] == "Close ticket 1?"


def test_a_wrong_argument_reads_as_an_agent_would_read_it(h):
    bad = h.call("create_ticket", {"title": "x", "labels": [{"colour": "red"}]})
    assert bad.error_code == "invalid_arguments"
    assert bad.text == (
        "Error (invalid_arguments): Invalid arguments: `/labels/0` has unexpected properties: `colour`; "
        "`/labels/0` is missing required properties: `name`."
    )
