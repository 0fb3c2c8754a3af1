//! The answer channel of one question, shared by the calls a request drives
//! and the tasks a poller drives: whoever holds the question sends its
//! answer back on it.

use tokio::sync::oneshot;
use toolhost_pipeline::{Answer, Unanswered};

/// The answer channel of one question.
pub type Reply = oneshot::Sender<Result<Answer, Unanswered>>;
