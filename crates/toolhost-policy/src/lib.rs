//! The operator's word over each call: which calls a person must approve
//! ([`approval`]), how fast each token and each tool may call ([`rate`]),
//! and what a call's arguments must satisfy ([`rules`], CEL expressions
//! whose cost is bounded where they run, [`cost`]).
//!
//! [`OperatorPolicy`] implements the pipeline's seam
//! ([`toolhost_pipeline::Policy`]): the pipeline asks it to screen a call
//! before the call waits for anything (rate limits, then rules), and, after
//! the backend's `Authorize`, to decide: allow, refuse with a reason, or
//! ask a person (with the question it wants put). The pipeline does the
//! asking, within the call's deadline, and gives the answer back.
//!
//! The token bucket and the escaping of text shown to a person are
//! `toolhost-base`'s: this crate has no rule of its own for either.
//!
//! What this crate must not do: dispatch anything, know a transport, or
//! put an argument value in a log line, a metric or a message to the model
//! (the question to a person is the one place values are shown, escaped).

#![forbid(unsafe_code)]

pub mod approval;
pub mod callers;
mod cost;
pub mod rate;
pub mod rules;
#[cfg(test)]
mod testing;

pub use approval::{ApprovalPolicy, ApprovalStats, Approvals, Pending};
pub use callers::{CallerRuleSpec, CallerRules, TooCostly};
pub use cost::Budget;
pub use rate::{Rate, RateLimiter, RatePolicy};
pub use rules::{BadRule, Reach, RuleSpec, Rules, Scope};

use approval::{Counted, Decision as Answered, OperatorVerdict};
use std::sync::Arc;
use toolhost_catalog::Descriptor;
use toolhost_pipeline::{
    ApprovalNote, Asked, Asking, Binding, CallFacts, Decision, ErrorCode, Policy, Question,
    Refusal, arguments_digest,
};

/// How many times a person is asked again when each answer came after the
/// approval's lifetime.
const ASKS: u32 = 3;

/// The operator's policy: approvals, rate limits and rules, as the
/// configuration file and the pushed catalog say.
#[derive(Debug, Default)]
pub struct OperatorPolicy {
    approvals: Arc<Approvals>,
    rates: RateLimiter,
    rules: Rules,
}

impl OperatorPolicy {
    /// A policy of these parts.
    #[must_use]
    pub fn new(approvals: ApprovalPolicy, rates: RatePolicy, rules: Rules) -> Self {
        Self {
            approvals: Arc::new(Approvals::new(approvals)),
            rates: RateLimiter::new(rates),
            rules,
        }
    }

    /// The approvals: their policy, those pending and their counts.
    #[must_use]
    pub fn approvals(&self) -> &Approvals {
        &self.approvals
    }

    /// The rate limits.
    #[must_use]
    pub fn rates(&self) -> &RateLimiter {
        &self.rates
    }

    /// The argument rules.
    #[must_use]
    pub fn rules(&self) -> &Rules {
        &self.rules
    }

    /// What the policy decides over `d`'s calls: (approval, the tool's
    /// own rate limit, how many rules apply), in words for `status` and
    /// `plugins show`.
    #[must_use]
    pub fn describe(&self, d: &Descriptor) -> (String, Option<String>, usize) {
        let approval = match self.approvals.policy().requires(d) {
            None => "none".to_owned(),
            Some(why) if self.approvals.policy().allows_session(&d.exposed_name) => {
                format!("per call, or for the session ({why})")
            }
            Some(why) => format!("per call ({why})"),
        };
        (
            approval,
            self.rates
                .policy()
                .describe(&d.exposed_name, d.call_policy.rate.map(Rate::from)),
            self.rules.for_tool(d),
        )
    }

    /// The backend wants the operator's approval: used if granted for
    /// exactly this call, else pending under an id the agent is told.
    fn by_operator(&self, call: &CallFacts<'_>, reason: &str) -> Decision {
        let d = call.tool;
        let digest = arguments_digest(call.arguments);
        let verdict = self.approvals.with_operator(
            call.binding,
            d,
            call.catalog,
            &digest,
            reason,
            call.decision_id,
        );
        let note = |by| ApprovalNote {
            by,
            arguments_digest: Some(digest.clone()),
        };
        let tool = &d.exposed_name;
        let refuse =
            |code, message: String, by| Decision::Refuse(Refusal::new(code, message), note(by));
        match verdict {
            OperatorVerdict::Approved => Decision::Allow(note(Some("operator"))),
            OperatorVerdict::Denied => refuse(
                ErrorCode::ApprovalDenied,
                format!("the operator denied this call of {tool}; it did not run. Do not repeat it."),
                Some("operator"),
            ),
            OperatorVerdict::Waiting { id, expires_in } => refuse(
                ErrorCode::ApprovalRequired,
                format!(
                    "{tool} needs an operator's approval before it runs (the backend asked for one); \
                     approval {id} is pending. Nothing ran. Once the operator approves it, repeat this \
                     exact call, with the same arguments, within {expires_in} s; other arguments need \
                     an approval of their own."
                ),
                None,
            ),
            OperatorVerdict::Full => refuse(
                ErrorCode::ApprovalRequired,
                format!(
                    "{tool} needs an operator's approval, and too many approvals are pending already; nothing ran"
                ),
                None,
            ),
            OperatorVerdict::NoRandomness => refuse(
                ErrorCode::Internal,
                "toolhost could not make an approval id (the system's random number generator failed); nothing ran"
                    .to_owned(),
                None,
            ),
        }
    }
}

impl Policy for OperatorPolicy {
    fn screen(&self, call: &CallFacts<'_>) -> Result<(), Refusal> {
        let d = call.tool;
        let pushed = d.call_policy.rate.map(Rate::from);
        self.rates
            .take(call.binding, &d.exposed_name, pushed)
            .map_err(|l| {
                let whose = match l.scope {
                    "binding" => "this session's token",
                    _ => "this tool, across all callers,",
                };
                Refusal::new(
                    ErrorCode::RateLimited,
                    format!(
                        "{} was not run: {whose} is over its rate limit of {} calls a minute (bursts of {}). \
                         Try again in {:.1} s.",
                        d.exposed_name,
                        l.rate.per_minute,
                        l.rate.burst,
                        l.retry_after.as_secs_f64().max(0.1)
                    ),
                )
            })?;
        if self.rules.is_empty() {
            return Ok(());
        }
        self.rules
            .check(d, call.binding, call.arguments)
            .map_err(|r| {
                Refusal::new(
                    ErrorCode::RefusedByRule,
                    format!(
                        "{} was not run: {} (the operator's rule)",
                        d.exposed_name, r.0
                    ),
                )
            })
    }

    fn decide(&self, call: &CallFacts<'_>, backend_asks: Option<&str>, can_ask: bool) -> Decision {
        if let Some(reason) = backend_asks {
            return self.by_operator(call, reason);
        }
        let d = call.tool;
        let Some(why) = self.approvals.policy().requires(d) else {
            return Decision::Allow(ApprovalNote::default());
        };
        let digest = arguments_digest(call.arguments);
        if self.approvals.session_granted(call.binding, d) {
            self.approvals.count(Counted::Granted);
            return Decision::Allow(ApprovalNote {
                by: Some("session"),
                arguments_digest: Some(digest),
            });
        }
        if !can_ask {
            return cannot_ask(&self.approvals, d, why, digest);
        }
        let session = self.approvals.policy().allows_session(&d.exposed_name);
        self.approvals.count(Counted::Asked);
        Decision::Ask(Box::new(PersonAsked {
            approvals: Arc::clone(&self.approvals),
            question: approval::question(d, why, call.arguments, session),
            binding: call.binding.clone(),
            tool: d.clone(),
            why,
            session,
            digest,
            asked: 1,
        }))
    }
}

/// A question put to the person behind the client, and what their answer
/// decides.
struct PersonAsked {
    approvals: Arc<Approvals>,
    question: Question,
    binding: Binding,
    tool: Descriptor,
    why: &'static str,
    session: bool,
    digest: String,
    /// How many times it has been asked.
    asked: u32,
}

impl PersonAsked {
    fn refuse(self, code: ErrorCode, message: String, by: Option<&'static str>) -> Decision {
        Decision::Refuse(
            Refusal::new(code, message),
            ApprovalNote {
                by,
                arguments_digest: Some(self.digest),
            },
        )
    }
}

impl Asking for PersonAsked {
    fn question(&self) -> Question {
        self.question.clone()
    }

    fn answered(mut self: Box<Self>, asked: Asked) -> Decision {
        let name = self.tool.exposed_name.clone();
        let a = Arc::clone(&self.approvals);
        match asked {
            Asked::Answered(_, waited) if waited > a.policy().lifetime => {
                // Approvals hold for a bounded time: a late yes asks again.
                a.count(Counted::Expired);
                if self.asked >= ASKS {
                    return self.refuse(
                        ErrorCode::ApprovalRequired,
                        format!(
                            "the approval of {name} expired before it was answered, {ASKS} times; nothing ran"
                        ),
                        None,
                    );
                }
                self.asked += 1;
                a.count(Counted::Asked);
                Decision::Ask(self)
            }
            Asked::Answered(answer, _) => match approval::decision(&answer, self.session) {
                Answered::Denied => {
                    a.count(Counted::Denied);
                    self.refuse(
                        ErrorCode::ApprovalDenied,
                        format!(
                            "the user did not approve this call of {name}; it did not run. Do not repeat it unless the user asks for it."
                        ),
                        Some("user"),
                    )
                }
                Answered::Once => {
                    a.count(Counted::Granted);
                    Decision::Allow(ApprovalNote {
                        by: Some("user"),
                        arguments_digest: Some(self.digest),
                    })
                }
                Answered::Session => {
                    a.grant_session(&self.binding, &self.tool);
                    a.count(Counted::Granted);
                    Decision::Allow(ApprovalNote {
                        by: Some("user_session"),
                        arguments_digest: Some(self.digest),
                    })
                }
            },
            Asked::CannotAsk => {
                let (why, digest) = (self.why, self.digest.clone());
                cannot_ask(&a, &self.tool, why, digest)
            }
            Asked::Failed(failed) => {
                a.count(Counted::Refused);
                self.refuse(
                    ErrorCode::ApprovalRequired,
                    format!(
                        "{name} needs a person's approval, and the question could not be asked: {failed}; nothing ran"
                    ),
                    None,
                )
            }
            Asked::TimedOut => {
                a.count(Counted::Expired);
                self.refuse(
                    ErrorCode::ApprovalRequired,
                    format!(
                        "nobody answered the approval question for {name} within the call's deadline; nothing ran"
                    ),
                    None,
                )
            }
        }
    }
}

/// The refusal when a call needs approval and its client cannot be asked.
fn cannot_ask(approvals: &Approvals, d: &Descriptor, why: &str, digest: String) -> Decision {
    approvals.count(Counted::Refused);
    Decision::Refuse(
        Refusal::new(
            ErrorCode::ApprovalRequired,
            format!(
                "{} needs a person's approval before it runs ({why}), and this client cannot ask \
                 for one (it did not declare the elicitation capability); nothing ran. Ask the user \
                 to run it from a client that shows approval questions.",
                d.exposed_name
            ),
        ),
        ApprovalNote {
            by: None,
            arguments_digest: Some(digest),
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use toolhost_pipeline::{Answer, AnswerAction};

    fn facts<'a>(
        b: &'a Binding,
        d: &'a Descriptor,
        args: &'a serde_json::Map<String, serde_json::Value>,
        v: &'a (String, u64),
    ) -> CallFacts<'a> {
        CallFacts {
            binding: b,
            tool: d,
            arguments: args,
            catalog: v,
            decision_id: None,
        }
    }

    fn yes() -> Asked {
        Asked::Answered(
            Answer {
                action: AnswerAction::Accept,
                content: Some(json!({"approve": true})),
            },
            std::time::Duration::ZERO,
        )
    }

    #[test]
    fn a_tool_that_needs_approval_is_asked_and_a_yes_allows_it_once() {
        let p = OperatorPolicy::new(
            ApprovalPolicy {
                tools: ["kandev_notes_add".to_owned()].into(),
                ..ApprovalPolicy::default()
            },
            RatePolicy::default(),
            Rules::default(),
        );
        let (b, d, v) = (
            Binding::new("chat", "t", "s", None),
            testing::descriptor(),
            ("g".to_owned(), 1),
        );
        let args = json!({"text": "hi"})
            .as_object()
            .cloned()
            .unwrap_or_default();
        let Decision::Ask(asking) = p.decide(&facts(&b, &d, &args, &v), None, true) else {
            panic!("asks")
        };
        assert!(asking.question().message.contains("- text: \"hi\""));
        assert!(matches!(asking.answered(yes()), Decision::Allow(n) if n.by == Some("user")));
        assert!(matches!(
            p.decide(&facts(&b, &d, &args, &v), None, false),
            Decision::Refuse(r, _) if r.code == ErrorCode::ApprovalRequired
        ));
        assert_eq!(p.approvals().stats().granted, 1);
    }

    #[test]
    fn a_late_answer_asks_again_then_gives_up() {
        let p = OperatorPolicy::new(
            ApprovalPolicy {
                tools: ["kandev_notes_add".to_owned()].into(),
                lifetime: std::time::Duration::from_millis(1),
                ..ApprovalPolicy::default()
            },
            RatePolicy::default(),
            Rules::default(),
        );
        let (b, d, v) = (
            Binding::new("chat", "t", "s", None),
            testing::descriptor(),
            ("g".to_owned(), 1),
        );
        let args = serde_json::Map::new();
        let late = || {
            Asked::Answered(
                Answer {
                    action: AnswerAction::Accept,
                    content: Some(json!({"approve": true})),
                },
                std::time::Duration::from_secs(1),
            )
        };
        let mut decision = p.decide(&facts(&b, &d, &args, &v), None, true);
        for _ in 0..ASKS - 1 {
            let Decision::Ask(a) = decision else {
                panic!("asks again")
            };
            decision = a.answered(late());
        }
        let Decision::Ask(a) = decision else {
            panic!("asks")
        };
        assert!(
            matches!(a.answered(late()), Decision::Refuse(r, _) if r.message.contains("expired"))
        );
    }
}
