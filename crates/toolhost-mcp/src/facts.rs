//! What a 2025-era session settled at its start, for a transport that
//! answers some of its calls without rmcp.
//!
//! A call's result is not all a session may be owed: a client that declared
//! it can answer questions gets them as elicitation on the call's stream,
//! and one that set a log level gets the plugin's log lines there. Only the
//! handler sees `initialize` and `logging/setLevel`, and only the transport
//! knows which session a request belongs to. So the transport makes one
//! [`SessionFacts`] per session and hands it to every request of that
//! session (as an extension of the HTTP request); the handler fills it when
//! the session says it is initialized, and shares the session's log level
//! with it. The transport then asks [`SessionFacts::only_results`] before it
//! answers a call itself.
//!
//! What this module must not do: decide anything about a call, or know
//! what identifies a session (that stays the transport's).

// rmcp marks logging deprecated (SEP-2577); the 2025 era still has it.
#![allow(deprecated)]

use rmcp::model::{ClientCapabilities, LoggingLevel};
use std::sync::{Arc, Mutex, OnceLock};

/// One session's facts: empty until the session is initialized.
#[derive(Debug, Default)]
pub struct SessionFacts {
    settled: OnceLock<Settled>,
}

#[derive(Debug)]
struct Settled {
    /// The client declared it can answer a form question.
    can_ask: bool,
    /// The session's `logging/setLevel`, shared with its handler.
    log_level: Arc<Mutex<Option<LoggingLevel>>>,
}

impl SessionFacts {
    /// A session that has not said it is initialized yet.
    #[must_use]
    pub fn new() -> Arc<Self> {
        Arc::default()
    }

    /// Records what the session settled; the first time counts (a second
    /// `notifications/initialized` changes nothing).
    pub(crate) fn settle(&self, can_ask: bool, log_level: Arc<Mutex<Option<LoggingLevel>>>) {
        let _ = self.settled.set(Settled { can_ask, log_level });
    }

    /// Whether a call on this session without a progress token owes the
    /// client nothing but its result: the session is initialized, its
    /// client cannot answer questions, and it set no log level. Such a
    /// call can be answered with one JSON body; any other must go through
    /// the session.
    #[must_use]
    pub fn only_results(&self) -> bool {
        self.settled
            .get()
            .is_some_and(|s| !s.can_ask && s.log_level.lock().is_ok_and(|level| level.is_none()))
    }
}

/// Whether a client with these capabilities can answer a form question.
pub(crate) fn can_elicit(capabilities: &ClientCapabilities) -> bool {
    capabilities
        .elicitation
        .as_ref()
        .is_some_and(|e| e.form.is_some() || e.url.is_none())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_initialized_session_that_is_owed_nothing_more_takes_only_results() {
        let facts = SessionFacts::new();
        assert!(!facts.only_results(), "not initialized yet");
        let level = Arc::new(Mutex::new(None));
        facts.settle(false, Arc::clone(&level));
        assert!(facts.only_results());
        if let Ok(mut l) = level.lock() {
            *l = Some(LoggingLevel::Info);
        }
        assert!(!facts.only_results(), "a level set later counts at once");

        let asks = SessionFacts::new();
        asks.settle(true, Arc::new(Mutex::new(None)));
        assert!(!asks.only_results(), "a client that can answer questions");
        asks.settle(false, Arc::new(Mutex::new(None)));
        assert!(!asks.only_results(), "the first settlement counts");
    }
}
