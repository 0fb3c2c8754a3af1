//! tickets: a small ticket tracker, on the Rust SDK, with tools from types.

use toolhost_plugin_sdk::prelude::*;

#[derive(Serialize, Deserialize, JsonSchema, Clone)]
struct Label {
    /// A short tag, like bug or ui.
    name: String,
    color: Option<String>,
}

#[derive(Serialize, Deserialize, JsonSchema, Clone, Default)]
#[serde(rename_all = "lowercase")]
enum Priority {
    Low,
    #[default]
    Normal,
    High,
}

#[derive(Serialize, Deserialize, JsonSchema, Clone)]
struct Ticket {
    id: usize,
    title: String,
    priority: Priority,
    labels: Vec<Label>,
    open: bool,
}

/// Opens a ticket.
#[derive(Deserialize, JsonSchema)]
struct CreateTicket {
    /// What is wrong or wanted, in one line.
    title: String,
    /// Tags to file it under.
    #[serde(default)]
    labels: Vec<Label>,
    #[serde(default)]
    priority: Priority,
}

/// Lists tickets, oldest first, a page at a time.
#[derive(Deserialize, JsonSchema)]
struct ListTickets {
    /// Where the previous page ended (0 for the first page).
    cursor: Option<usize>,
    /// The most tickets in one page (20 when not given).
    limit: Option<usize>,
}

#[derive(Serialize, JsonSchema)]
struct TicketPage {
    tickets: Vec<Ticket>,
    next_cursor: Option<usize>,
}

/// Closes a ticket for good, after the user agrees.
#[derive(Deserialize, JsonSchema)]
struct CloseTicket {
    /// The ticket's number.
    id: usize,
}

static TICKETS: DataFile = DataFile::new("tickets.json");

async fn create_ticket(a: CreateTicket, _: ToolCall) -> Result<Ticket, ToolError> {
    config().secret("api_token").ok_or_else(|| ToolError::new("no api_token; ask the operator"))?;
    TICKETS.update(|tickets: &mut Vec<Ticket>| {
        let (id, priority) = (tickets.len() + 1, a.priority);
        let ticket = Ticket { id, title: a.title, priority, labels: a.labels, open: true };
        tickets.push(ticket.clone());
        Ok(ticket)
    })
}

async fn list_tickets(a: ListTickets, call: ToolCall) -> Result<TicketPage, ToolError> {
    let all: Vec<Ticket> = TICKETS.load()?;
    let (cursor, limit) = (a.cursor.unwrap_or(0), a.limit.unwrap_or(20));
    let tickets: Vec<Ticket> = all.iter().skip(cursor).take(limit).cloned().collect();
    for i in 1..=tickets.len() {
        call.progress(i as f64, Some(tickets.len() as f64), "");
    }
    let next_cursor = (cursor + limit < all.len()).then_some(cursor + limit);
    Ok(TicketPage { tickets, next_cursor })
}

async fn close_ticket(a: CloseTicket, call: ToolCall) -> Result<String, ToolError> {
    let Some(ticket) = TICKETS.load::<Vec<Ticket>>()?.into_iter().find(|t| t.id == a.id) else {
        return Err(ToolError::new(format!("no ticket {}; list_tickets shows them", a.id)));
    };
    let q = Question::new(format!("Close ticket {}, {:?}?", a.id, ticket.title));
    if !call.ask(q.boolean("confirm", "Close it").required("confirm")).await?.flag("confirm") {
        return Ok(format!("ticket {} stays open", a.id));
    }
    TICKETS.update(|all: &mut Vec<Ticket>| Ok(all.get_mut(a.id - 1).map(|t| t.open = false)))?;
    Ok(format!("closed ticket {}", a.id))
}

fn plugin() -> Plugin {
    Plugin::new()
        .typed("create_ticket", create_ticket)
        .typed("list_tickets", list_tickets)
        .typed("close_ticket", close_ticket)
}

fn main() -> std::process::ExitCode {
    plugin().run()
}

#[cfg(test)]
mod tests {
    //! The tools through toolhost's own rules, with no daemon: the SDK's
    //! harness runs each call through `toolhost harness` (built beside this
    //! test by `cargo build --workspace --bins`, or named by TOOLHOST_BIN).

    #![allow(clippy::unwrap_used, clippy::expect_used)] // tests say what they expect

    use serde_json::json;
    use toolhost_plugin_sdk::testing::Harness;

    fn toolhost() -> std::path::PathBuf {
        std::env::var_os("TOOLHOST_BIN").map_or_else(
            // target/debug/deps/<this test> -> target/debug/toolhost
            || {
                std::env::current_exe()
                    .unwrap()
                    .parent()
                    .unwrap()
                    .parent()
                    .unwrap()
                    .join("toolhost")
            },
            Into::into,
        )
    }

    #[tokio::test]
    async fn a_ticket_is_opened_listed_and_closed_and_a_wrong_argument_reads_as_an_agent_reads_it()
    {
        let dir = env!("CARGO_MANIFEST_DIR");
        let mut h =
            Harness::start_using(&toolhost(), &super::plugin(), dir, &[("api_token", "test")])
                .await
                .unwrap();
        let opened = h
            .call("create_ticket", json!({"title": "Login fails", "labels": [{"name": "bug"}]}))
            .await
            .unwrap();
        assert_eq!(opened.structured().unwrap()["id"], 1, "{}", opened.text());
        let page = h.call("list_tickets", json!({"limit": 5})).await.unwrap();
        assert_eq!(page.structured().unwrap()["tickets"][0]["title"], "Login fails");
        assert_eq!(page.progress.last().unwrap()["progress"], 1.0);
        let kept = h
            .call_answering("close_ticket", json!({"id": 1}), vec![json!("decline")])
            .await
            .unwrap();
        assert_eq!(kept.text(), "ticket 1 stays open");
        let closed = h
            .call_answering("close_ticket", json!({"id": 1}), vec![json!({"confirm": true})])
            .await
            .unwrap();
        assert_eq!(closed.text(), "closed ticket 1");
        let bad = h
            .call("create_ticket", json!({"title": "x", "labels": [{"colour": "red"}]}))
            .await
            .unwrap();
        assert_eq!(
            bad.text(),
            "Error (invalid_arguments): Invalid arguments: `/labels/0` has unexpected properties: `colour`; \
             `/labels/0` is missing required properties: `name`."
        );
        h.close().await;
    }
}
