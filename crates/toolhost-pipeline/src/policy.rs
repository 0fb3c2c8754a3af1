//! The seam through which the pipeline asks the operator's word about a
//! call: rate limits, argument rules and approvals live in
//! `toolhost-policy`, which implements [`Policy`]; the daemon plugs it in.
//!
//! The pipeline asks twice, at fixed places, and does what it is told:
//!
//! - [`Policy::screen`], after validation and authorization and before the
//!   call waits for anything or anyone (a starting plugin, the backend, a
//!   person): a rate limit or a rule may refuse it there, cheaply;
//! - [`Policy::decide`], after the backend's `Authorize`: allow, refuse
//!   with a reason, or ask a person ([`Asking`]). The pipeline puts the
//!   question through its [`crate::caller::Caller`] within the call's deadline and
//!   hands the answer back ([`Asking::answered`]), which decides again.
//!
//! Why a seam and not a dependency: the rules are CEL, and the pipeline,
//! which every transport and the plugin author's harness link, must not
//! carry an expression interpreter it never runs itself.
//!
//! What this module must not do: hold policy state (that is the
//! implementation's), or let a decision carry an argument value (a
//! [`Refusal`]'s message is read by the model and must name no value).

use crate::binding::Binding;
use crate::caller::{Answer, Question};
use crate::result::ErrorCode;
use serde_json::{Map, Value};
use sha2::{Digest as _, Sha256};
use std::time::Duration;
use toolhost_catalog::Descriptor;

/// What the policy may read of a call: who calls, which tool, and the
/// arguments as validated (aliases resolved).
#[derive(Debug, Clone, Copy)]
pub struct CallFacts<'a> {
    /// Who calls.
    pub binding: &'a Binding,
    /// The tool, as the call resolved it.
    pub tool: &'a Descriptor,
    /// The validated arguments.
    pub arguments: &'a Map<String, Value>,
    /// The catalog version (generation, revision) that authorized the call.
    pub catalog: &'a (String, u64),
    /// The backend's id for its `Authorize` decision, if it gave one.
    pub decision_id: Option<&'a str>,
}

/// Why the policy refused a call: the code and a message for the model,
/// which names no argument value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The error code the call ends with.
    pub code: ErrorCode,
    /// What the model is told.
    pub message: String,
}

impl Refusal {
    /// A refusal with this code and message.
    #[must_use]
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }
}

/// What the audit line says of an approval, when a call needed one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ApprovalNote {
    /// Who approved or denied: `user`, `user_session`, `session`,
    /// `operator`; `None` when nobody has.
    pub by: Option<&'static str>,
    /// The digest of the canonical arguments ([`arguments_digest`]).
    pub arguments_digest: Option<String>,
}

/// The policy's word on a call.
pub enum Decision {
    /// Run it.
    Allow(ApprovalNote),
    /// Do not: the call ends with this refusal.
    Refuse(Refusal, ApprovalNote),
    /// Ask a person first.
    Ask(Box<dyn Asking>),
}

impl std::fmt::Debug for Decision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Allow(n) => f.debug_tuple("Allow").field(n).finish(),
            Self::Refuse(r, n) => f.debug_tuple("Refuse").field(r).field(n).finish(),
            Self::Ask(_) => f.write_str("Ask"),
        }
    }
}

/// What became of a question put to a person.
#[derive(Debug, Clone, PartialEq)]
pub enum Asked {
    /// They answered, after this long.
    Answered(Answer, Duration),
    /// The client cannot ask (it declared no elicitation).
    CannotAsk,
    /// Asking failed (the text names no value).
    Failed(String),
    /// Nobody answered within the call's deadline.
    TimedOut,
}

/// A question the policy wants put to a person, and what it makes of the
/// answer.
pub trait Asking: Send {
    /// The question.
    fn question(&self) -> Question;
    /// The answer, or why there is none: allow, refuse, or ask again (an
    /// answer that came after the approval's lifetime).
    fn answered(self: Box<Self>, asked: Asked) -> Decision;
}

/// The operator's word over calls (rate limits, rules, approvals).
pub trait Policy: Send + Sync + std::fmt::Debug {
    /// Before the call waits for anything: a rate limit or a rule may
    /// refuse it. Counts a rate limit's token when it passes.
    ///
    /// # Errors
    /// The refusal.
    fn screen(&self, call: &CallFacts<'_>) -> Result<(), Refusal>;

    /// After the backend's `Authorize` (`backend_asks`: its reason when it
    /// allowed the call only with the operator's approval): allow, refuse
    /// or ask. `can_ask`: whether the caller can put a question to a
    /// person.
    fn decide(&self, call: &CallFacts<'_>, backend_asks: Option<&str>, can_ask: bool) -> Decision;
}

/// No policy: every call passes, except one the backend allows only with
/// an operator's approval, which nobody can give here (fail closed).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoPolicy;

impl Policy for NoPolicy {
    fn screen(&self, _call: &CallFacts<'_>) -> Result<(), Refusal> {
        Ok(())
    }

    fn decide(&self, call: &CallFacts<'_>, backend_asks: Option<&str>, _: bool) -> Decision {
        match backend_asks {
            None => Decision::Allow(ApprovalNote::default()),
            Some(_) => Decision::Refuse(
                Refusal::new(
                    ErrorCode::ApprovalRequired,
                    format!(
                        "{} needs an operator's approval (the backend asked for one), and this toolhost keeps \
                         no approvals; nothing ran",
                        call.tool.exposed_name
                    ),
                ),
                ApprovalNote::default(),
            ),
        }
    }
}

/// A digest of the canonical arguments: SHA-256 of their JSON with keys
/// sorted (serde_json's maps are ordered), first 16 bytes in hex. Two
/// calls with the same digest had the same arguments. What an approval
/// and a parked call are bound to, and what the audit line names.
#[must_use]
pub fn arguments_digest<A: serde::Serialize + ?Sized>(arguments: &A) -> String {
    let bytes = serde_json::to_vec(arguments).unwrap_or_default();
    let d = Sha256::digest(&bytes);
    d[..16].iter().fold(String::with_capacity(32), |mut s, b| {
        use std::fmt::Write as _;
        let _ = write!(s, "{b:02x}");
        s
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_digest_is_of_the_canonical_arguments() {
        let a = serde_json::json!({"b": 1, "a": [1, 2]});
        let b: Value = serde_json::from_str(r#"{"a":[1,2],"b":1}"#).unwrap_or_default();
        assert_eq!(arguments_digest(&a), arguments_digest(&b));
        assert_ne!(
            arguments_digest(&a),
            arguments_digest(&serde_json::json!({"b": 2, "a": [1, 2]}))
        );
        assert_eq!(arguments_digest(&a).len(), 32);
    }
}
