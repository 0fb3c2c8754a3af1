//! Step 6 for a protocol-2 plugin: one stream per call.
//!
//! The host sends `start`; the plugin sends progress, log messages and at
//! most one question at a time, and ends with its result. Everything the
//! plugin sends is checked and bounded here before it reaches the
//! [`Caller`]:
//!
//! - progress must be finite and increasing (others are dropped); it may
//!   restart the deadline only when the tool declares
//!   `reset_timeout_on_progress`, and never past `max_timeout` from the
//!   start of the call;
//! - log messages go only at or above the caller's level, at most
//!   [`LOG_BURST`] at once and [`LOG_PER_SECOND`] after that, each cut to
//!   [`MAX_LOG_MESSAGE`] bytes (and its data dropped past
//!   [`MAX_LOG_DATA`]); the daemon's own log records that one was sent,
//!   never its text;
//! - a question must be a flat form ([`crate::question`]), and its answer
//!   is checked against it before the plugin sees it. The wait is part of
//!   the call: bounded by its deadline, ended by its cancellation, and
//!   never a second attempt.

use crate::call::{Answered, Call, CallFailure, Step};
use crate::caller::{
    Answer, AnswerAction, AskFuture, LogMessage, Progress, Unanswered, level_from_wire,
};
use crate::content::blocks_from_wire;
use crate::port::PluginLink;
use crate::question::{CheckedQuestion, check_answer, check_question};
use crate::result::ErrorCode;
use serde_json::Value;
use std::time::{Duration, Instant};
use toolhost_base::Bucket;
use toolhost_proto::json::{json_from_struct, json_from_struct_owned, struct_from_json};
use toolhost_proto::plugin_v2::{self as wire, plugin_event::Event};
use toolhost_runtime::CallSlot;
use toolhost_validate::Checked;

/// Log messages a call may send at once.
pub const LOG_BURST: u32 = 20;
/// Log messages a call may send per second after its burst.
pub const LOG_PER_SECOND: u32 = 10;
/// The longest log message forwarded; longer ones are cut.
pub const MAX_LOG_MESSAGE: usize = 4 * 1024;
/// The largest log `data` forwarded (serialized); larger data is dropped.
pub const MAX_LOG_DATA: usize = 8 * 1024;
/// The longest progress message forwarded; longer ones are cut.
pub const MAX_PROGRESS_MESSAGE: usize = 1024;

/// The question being asked: its id, its checked form, and the caller's
/// pending answer.
type Asking<'a> = (u32, CheckedQuestion, AskFuture<'a>);

async fn answer_of(asking: &mut Option<Asking<'_>>) -> Result<Answer, Unanswered> {
    match asking {
        Some((_, _, pending)) => pending.await,
        None => std::future::pending().await,
    }
}

/// Cuts `s` to at most `max` bytes on a character boundary.
fn cut(mut s: String, max: usize) -> String {
    if s.len() > max {
        let mut end = max;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
    s
}

impl Call<'_> {
    /// Step 6 for protocol 2: opens the call's stream and serves it until
    /// the result, the deadline or cancellation.
    ///
    /// Kept whole on purpose: one select loop over the call's stream, its
    /// deadline and its cancellation; the arms share the stream and the result
    /// being built.
    pub(crate) async fn dispatch_stream(
        &mut self,
        client: &dyn PluginLink,
        slot: CallSlot,
        checked: &Checked,
        credentials: &[toolhost_proto::plugin::Credential],
        deadline: Duration,
    ) -> Step<Answered> {
        let started = Instant::now();
        let d = &self.entry.descriptor;
        let rolling = d.reset_timeout_on_progress;
        // The stream's own limit: the tool's deadline, or for a rolling
        // deadline the daemon's cap from the start of the call.
        let hard = if rolling {
            match self.mode {
                crate::call::CallMode::Task { cap } => cap,
                crate::call::CallMode::Direct => self.pipeline.limits.max_timeout,
            }
            .max(deadline)
        } else {
            deadline
        };
        let hard_at = started + hard;
        let mut soft_at = started + deadline;
        let caller = self.caller;
        let start = wire::Start {
            request: Some(self.request(checked, credentials).to_message()),
            can_ask: caller.can_ask(),
            wants_progress: caller.wants_progress(),
            log_level: caller.log_level().map_or(0, |l| l as i32),
        };
        // Protocol 2 carries bytes raw (smaller than the base64 the limit
        // counts), and a list of blocks decodes into far more memory than
        // its encoding: one event is read only up to the result limit plus
        // room for the envelope, not twice it as in protocol 1.
        let max_event = self
            .pipeline
            .limits
            .max_result_bytes
            .saturating_add(64 * 1024);
        let opened = tokio::select! {
            biased;
            () = self.cancel.cancelled() => return Err(self.cancelled()),
            r = client.open_stream(slot, start, hard, max_event) => r,
        };
        let mut stream = opened.map_err(|e| self.invoke_failure(e))?;
        let mut last_progress: Option<f64> = None;
        let mut budget = Bucket::new(f64::from(LOG_BURST), f64::from(LOG_PER_SECOND));
        let mut asking: Option<Asking<'_>> = None;
        loop {
            let wake = soft_at.min(hard_at);
            // The tool's own deadline, as protocol 1 says it (and the
            // harness, which runs this path): the time waited only where
            // progress kept moving the deadline.
            let after = || if rolling { started.elapsed() } else { deadline };
            tokio::select! {
                biased;
                () = self.cancel.cancelled() => return Err(self.cancelled()),
                () = tokio::time::sleep_until(wake.into()) => {
                    return Err(self.timed_out(after(), asking.is_some()));
                }
                // The plugin's events before the caller's answer: a plugin
                // that sent a second question before its first was answered
                // is refused before the answer goes out, whenever the
                // answer arrives.
                event = stream.next() => {
                    // Read after the deadline (the timer rounds up to the
                    // next millisecond): a timeout, as protocol 1's
                    // answers are, whatever the event says.
                    if Instant::now() >= wake {
                        return Err(self.timed_out(after(), asking.is_some()));
                    }
                    let event = event.map_err(|e| self.invoke_failure(e))?;
                    let Some(event) = event.and_then(|e| e.event) else {
                        return Err(self.plugin_broke("closed the call without a result"));
                    };
                    match event {
                        Event::Progress(p) => {
                            if !self.on_progress(p, &mut last_progress) {
                                continue;
                            }
                            if rolling {
                                soft_at = (Instant::now() + deadline).min(hard_at);
                            }
                        }
                        Event::Log(l) => self.on_log(l, &mut budget),
                        Event::Question(q) => {
                            // Open here, or open for the plugin when it
                            // asked (it had not yet seen every answer): a
                            // second question either way, refused before
                            // it goes out, whatever the timing.
                            let asked_before = self.events.questions;
                            if asking.is_some()
                                || q.answers_seen.is_some_and(|seen| seen < asked_before)
                            {
                                return Err(self.plugin_broke(
                                    "asked a second question before the first was answered",
                                ));
                            }
                            let checked_q = check_question(
                                q.message,
                                q.requested_schema.as_ref().map(json_from_struct).unwrap_or_default(),
                            )
                            .map_err(|rule| self.plugin_broke(&format!("asked a question that breaks a rule: {rule}")))?;
                            if !caller.can_ask() {
                                return Err(self.cannot_ask());
                            }
                            self.events.questions += 1;
                            tracing::debug!(question = self.events.questions, "plugin asked the user a question");
                            let pending = caller.ask(checked_q.question.clone());
                            asking = Some((q.id, checked_q, pending));
                        }
                        Event::Result(r) => {
                            stream.finish();
                            return self.on_result(r);
                        }
                    }
                }
                answer = answer_of(&mut asking) => {
                    let Some((id, question, _)) = asking.take() else {
                        continue;
                    };
                    let answer = self.checked_answer(&question, answer)?;
                    let wire_answer = wire::Answer {
                        question_id: id,
                        action: match answer.action {
                            AnswerAction::Accept => wire::answer::Action::Accept,
                            AnswerAction::Decline => wire::answer::Action::Decline,
                            AnswerAction::Cancel => wire::answer::Action::Cancel,
                        }
                        .into(),
                        content: match &answer.content {
                            Some(Value::Object(m)) => Some(struct_from_json(m)),
                            _ => None,
                        },
                    };
                    stream.answer(wire_answer).await.map_err(|e| self.invoke_failure(e))?;
                }
            }
        }
    }

    /// Forwards a valid progress update; returns whether it was valid.
    fn on_progress(&mut self, p: wire::Progress, last: &mut Option<f64>) -> bool {
        let valid = p.progress.is_finite()
            && p.total.is_none_or(f64::is_finite)
            && last.is_none_or(|l| p.progress > l);
        if !valid {
            return false;
        }
        *last = Some(p.progress);
        self.events.progress += 1;
        if self.caller.wants_progress() {
            self.caller.progress(Progress {
                progress: p.progress,
                total: p.total,
                message: (!p.message.is_empty()).then(|| cut(p.message, MAX_PROGRESS_MESSAGE)),
            });
        }
        true
    }

    /// Forwards a log message at or above the caller's level, within the
    /// budget.
    fn on_log(&mut self, l: wire::Log, budget: &mut Bucket) {
        let Some(level) = level_from_wire(l.level) else {
            return;
        };
        if self.caller.log_level().is_none_or(|min| level < min) {
            return;
        }
        if !budget.take() {
            self.events.logs_dropped += 1;
            return;
        }
        self.events.logs += 1;
        // Only that it happened: the text is the caller's, not the daemon's.
        tracing::debug!(
            level = level.as_str_name(),
            "plugin log message sent to the caller"
        );
        let data = l
            .data
            .as_ref()
            .map(toolhost_proto::json::json_from_value)
            .filter(|v| serde_json::to_vec(v).is_ok_and(|b| b.len() <= MAX_LOG_DATA));
        self.caller.log(LogMessage {
            level,
            logger: (!l.logger.is_empty()).then(|| cut(l.logger, 256)),
            message: cut(l.message, MAX_LOG_MESSAGE),
            data,
        });
    }

    /// The plugin's result: its blocks checked, its structured content
    /// taken over (step 7 checks the rest).
    fn on_result(&self, r: wire::ToolResult) -> Step<Answered> {
        let content = blocks_from_wire(r.content).map_err(|rule| {
            self.plugin_broke(&format!("answered a result that breaks a rule: {rule}"))
        })?;
        Ok(Answered {
            content,
            structured: r
                .structured_content
                .map(|s| Value::Object(json_from_struct_owned(s))),
            is_error: r.is_error,
        })
    }

    /// The caller's answer, checked against the question.
    fn checked_answer(
        &self,
        question: &CheckedQuestion,
        answer: Result<Answer, Unanswered>,
    ) -> Step<Answer> {
        let name = &self.entry.descriptor.exposed_name;
        match answer {
            Err(Unanswered::CannotAsk) => Err(self.cannot_ask()),
            Err(Unanswered::Failed(why)) => Err(CallFailure::new(
                ErrorCode::Cancelled,
                format!(
                    "{name} asked the user a question that could not be delivered ({why}); \
                     the call was stopped and may or may not have taken effect"
                ),
            )),
            Ok(a) => check_answer(question, a).map_err(|violations| {
                // The violations' own words, as argument errors give them:
                // names and rules, never the value the user typed.
                let why: Vec<&str> = violations.iter().map(|v| v.message.as_str()).collect();
                CallFailure::with_violations(
                    ErrorCode::InvalidArguments,
                    format!(
                        "the answer to {name}'s question does not match the requested schema: {}; \
                         the call was stopped and may or may not have taken effect",
                        why.join("; ")
                    ),
                    &violations,
                )
            }),
        }
    }

    fn cancelled(&self) -> CallFailure {
        CallFailure::new(ErrorCode::Cancelled, "the call was cancelled by the client")
    }

    fn cannot_ask(&self) -> CallFailure {
        CallFailure::new(
            ErrorCode::CannotAsk,
            format!(
                "{} needs to ask the user a question, and this client cannot answer questions \
                 (it declared no elicitation capability); the call was stopped and may or may \
                 not have taken effect",
                self.entry.descriptor.exposed_name
            ),
        )
    }

    fn timed_out(&self, after: Duration, waiting_for_answer: bool) -> CallFailure {
        let waiting = if waiting_for_answer {
            " (it was waiting for the user's answer to its question)"
        } else {
            ""
        };
        CallFailure::new(
            ErrorCode::Timeout,
            format!(
                "{} did not answer within {} ms{waiting}; it may or may not have taken effect",
                self.entry.descriptor.exposed_name,
                after.as_millis()
            ),
        )
    }

    fn plugin_broke(&self, what: &str) -> CallFailure {
        CallFailure::new(
            ErrorCode::PluginError,
            format!("plugin {} {what}", self.entry.descriptor.plugin_id),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuts_keep_characters_whole() {
        assert_eq!(cut("héllo".into(), 2), "h");
        assert_eq!(cut("abc".into(), 5), "abc");
    }

    #[test]
    fn the_log_budget_allows_a_burst_then_a_rate() {
        let mut b = Bucket::new(f64::from(LOG_BURST), f64::from(LOG_PER_SECOND));
        let burst = (0..100).filter(|_| b.take()).count();
        assert_eq!(burst, LOG_BURST as usize);
    }
}
