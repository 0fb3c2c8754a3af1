//! Approvals: a person says yes to one call, with its arguments, before the
//! call reaches its plugin.
//!
//! The operator's [`ApprovalPolicy`] says which tools need one (by name, by
//! plugin, or every tool annotated `destructive`). The pipeline asks after
//! validation and authorization and before it takes a place among the
//! plugin's calls, so the plugin never sees an unapproved call.
//!
//! An approval is bound to what was approved, and used once:
//!
//! - asked through the client (elicitation, input-required, a task's
//!   `input_required`), it is the answer of the call that asked, so it
//!   covers that call's arguments and nothing else; an answer that arrives
//!   after the approval's lifetime is expired, and the call asks again;
//! - approved "for this session", it covers the same binding and the same
//!   tool declaration (its fingerprint) until it expires;
//! - asked of the operator, because the backend's `Authorize` answered
//!   "needs approval", it is a [`Pending`] approval keyed by the binding,
//!   the tool, the catalog version that authorized the call and a digest of
//!   the canonical arguments. Approved, it lets exactly one repeat of that
//!   call through; any other arguments, binding or catalog version asks
//!   again.
//!
//! The question shows the arguments to the person deciding: every
//! argument by name, each value cut on its own share of the question's
//! room (saying how much was cut), so a long value cannot push another out
//! of sight; every character a person could not see escaped by
//! `toolhost-base`'s one rule. Approving a call one cannot see would be
//! approving a name. They are never logged, counted or echoed to the
//! model; the audit line carries their digest.
//!
//! What this module must not do: keep a value in a log, a metric or an
//! error, or hold unbounded state (both maps are capped).

use serde_json::{Map, Value, json};
use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};
use toolhost_catalog::{Descriptor, Fingerprint};
use toolhost_pipeline::{Answer, AnswerAction, Binding, Question};

/// Most approvals waiting for the operator at once, and per binding.
const MAX_PENDING: usize = 1024;
const MAX_PENDING_PER_BINDING: usize = 32;
/// Most "for this session" grants kept at once.
const MAX_SESSION_GRANTS: usize = 4096;
/// The room the arguments have in a question (bytes), within the
/// protocol's bound on a question's message.
const MAX_SHOWN_ARGUMENTS: usize = 3 * 1024;
/// An argument's name, at most (characters).
const MAX_SHOWN_NAME: usize = 64;
/// The least room a value gets: past this many arguments, the rest are
/// counted, not shown.
const MIN_SHOWN_VALUE: usize = 24;

/// Which calls need a person's approval, and for how long one holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalPolicy {
    /// Every tool whose declaration says `destructive`.
    pub destructive: bool,
    /// These tools (exposed names).
    pub tools: BTreeSet<String>,
    /// Every tool of these plugins (ids).
    pub plugins: BTreeSet<String>,
    /// Tools a person may approve for the rest of the session (exposed
    /// names; `*` for every tool that needs approval).
    pub session: BTreeSet<String>,
    /// How long an answer or a pending approval holds.
    pub lifetime: Duration,
    /// How long a "for this session" approval holds.
    pub session_lifetime: Duration,
}

impl Default for ApprovalPolicy {
    /// No call needs approval: see docs/CONTRACT.md §5 for why that is the
    /// default.
    fn default() -> Self {
        Self {
            destructive: false,
            tools: BTreeSet::new(),
            plugins: BTreeSet::new(),
            session: BTreeSet::new(),
            lifetime: Duration::from_secs(300),
            session_lifetime: Duration::from_secs(3600),
        }
    }
}

impl ApprovalPolicy {
    /// Why `d` needs approval under this policy, in words for the model and
    /// the person asked; `None` when it does not.
    #[must_use]
    pub fn requires(&self, d: &Descriptor) -> Option<&'static str> {
        if self.tools.contains(&d.exposed_name) {
            Some("the operator requires approval for this tool")
        } else if self.plugins.contains(&d.plugin_id) {
            Some("the operator requires approval for every tool of its plugin")
        } else if self.destructive && d.annotations.destructive && !d.annotations.read_only {
            Some("the operator requires approval for tools that may destroy data")
        } else if d.call_policy.requires_approval {
            Some("the backend requires approval for this tool")
        } else {
            None
        }
    }

    /// Whether a person may approve `tool` for the rest of the session.
    #[must_use]
    pub fn allows_session(&self, tool: &str) -> bool {
        self.session.contains("*") || self.session.contains(tool)
    }

    /// Which calls need approval, in words for `status`.
    #[must_use]
    pub fn summary(&self) -> String {
        let mut parts = Vec::new();
        if self.destructive {
            parts.push("tools annotated destructive".to_owned());
        }
        if !self.tools.is_empty() {
            parts.push(format!("{} named tool(s)", self.tools.len()));
        }
        if !self.plugins.is_empty() {
            let ids: Vec<&str> = self.plugins.iter().map(String::as_str).collect();
            parts.push(format!("every tool of {}", ids.join(", ")));
        }
        if parts.is_empty() {
            "none (the backend may still ask for one)".to_owned()
        } else {
            parts.join("; ")
        }
    }
}

/// The question that asks a person to approve one call: the tool, its
/// plugin, why, and the exact arguments, bounded and escaped.
#[must_use]
pub fn question(
    d: &Descriptor,
    why: &str,
    arguments: &Map<String, Value>,
    session: bool,
) -> Question {
    let shown = shown_arguments(arguments);
    let message = format!(
        "Approve this call?\n\nTool: {} (plugin {})\nWhy you are asked: {why}.\nArguments:\n{shown}",
        d.exposed_name, d.plugin_id
    );
    let mut properties = Map::new();
    properties.insert(
        "approve".into(),
        json!({"type": "boolean", "title": "Approve",
               "description": "Run this call once, with exactly these arguments."}),
    );
    if session {
        properties.insert(
            "for_session".into(),
            json!({"type": "boolean", "title": "Approve for this session",
                   "description": "Also run later calls of this tool in this session without asking.",
                   "default": false}),
        );
    }
    let mut schema = Map::new();
    schema.insert("type".into(), json!("object"));
    schema.insert("properties".into(), Value::Object(properties));
    schema.insert("required".into(), json!(["approve"]));
    Question {
        message,
        requested_schema: schema,
    }
}

/// The arguments as a person reads them: one line per argument, its name
/// then its value as compact JSON, with every character a person could
/// not see escaped (`toolhost-base`'s rule). The room is shared fairly:
/// short values are shown whole, and the long ones split what is left
/// equally, each cut on its own with how much was cut, so no argument can
/// crowd another out. Past what fits with [`MIN_SHOWN_VALUE`] each, the
/// rest are counted.
fn shown_arguments(arguments: &Map<String, Value>) -> String {
    use std::fmt::Write as _;
    if arguments.is_empty() {
        return "(none)".to_owned();
    }
    // Names first: each takes its line's frame and room for a cut note;
    // once what is left would not give the next value its least room,
    // the rest are counted.
    let mut shown: Vec<(String, String)> = Vec::new();
    let mut room = MAX_SHOWN_ARGUMENTS.saturating_sub(HIDDEN_NOTE);
    for (k, v) in arguments {
        let name = toolhost_base::text::escaped(k, MAX_SHOWN_NAME).into_owned();
        let frame = name.len() + LINE_FRAME + CUT_NOTE;
        if room < frame + MIN_SHOWN_VALUE * (shown.len() + 1) {
            break;
        }
        room -= frame;
        shown.push((name, serde_json::to_string(v).unwrap_or_default()));
    }
    let shares = fair_shares(shown.iter().map(|(_, v)| escaped_len(v)).collect(), room);
    let mut out = String::new();
    for ((name, value), share) in shown.iter().zip(shares) {
        let (text, shown_bytes) = escaped_within(value, share);
        let _ = write!(out, "- {name}: {text}");
        if shown_bytes < value.len() {
            let _ = write!(out, " … (cut: {} more bytes)", value.len() - shown_bytes);
        }
        out.push('\n');
    }
    let hidden = arguments.len() - shown.len();
    if hidden > 0 {
        let _ = writeln!(
            out,
            "and {hidden} more arguments this question has no room for: do not approve what you cannot see"
        );
    }
    out
}

/// Bytes of a line's frame (`- `, `: `, the newline).
const LINE_FRAME: usize = 5;
/// Bytes a cut note takes at most (` … (cut: N more bytes)`).
const CUT_NOTE: usize = 32;
/// Bytes the line counting hidden arguments takes at most.
const HIDDEN_NOTE: usize = 128;

/// Shares of `room` for values of these lengths: every value that fits
/// under an equal share is shown whole, and what they leave is split
/// equally among the rest (water-filling).
fn fair_shares(lengths: Vec<usize>, room: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..lengths.len()).collect();
    order.sort_by_key(|i| lengths.get(*i).copied().unwrap_or(0));
    let mut shares = vec![0; lengths.len()];
    let mut left = room;
    for (k, i) in order.iter().enumerate() {
        let remaining = lengths.len() - k;
        let equal = left / remaining.max(1);
        let want = lengths.get(*i).copied().unwrap_or(0);
        let take = want.min(equal.max(MIN_SHOWN_VALUE.min(left)));
        if let Some(s) = shares.get_mut(*i) {
            *s = take;
        }
        left = left.saturating_sub(take);
    }
    shares
}

/// How long `value` is once escaped (bytes), without making the text.
fn escaped_len(value: &str) -> usize {
    let mut buf = [0u8; 4];
    value
        .chars()
        .map(|c| toolhost_base::text::escaped_whole(c.encode_utf8(&mut buf)).len())
        .sum()
}

/// `value` escaped (every character a person could not see written as
/// `\u{..}`) within `max` bytes of text, never cutting an escape in two,
/// and how many bytes of `value` it shows.
fn escaped_within(value: &str, max: usize) -> (String, usize) {
    let mut out = String::with_capacity(value.len().min(max));
    let mut taken = 0;
    let mut buf = [0u8; 4];
    for c in value.chars() {
        let piece = c.encode_utf8(&mut buf);
        let escaped = toolhost_base::text::escaped_whole(piece);
        if out.len() + escaped.len() > max {
            break;
        }
        out.push_str(&escaped);
        taken += c.len_utf8();
    }
    (out, taken)
}

/// What a person answered, read from the answer to [`question`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Run this call.
    Once,
    /// Run this call, and later calls of the tool in this session.
    Session,
    /// Do not.
    Denied,
}

/// Reads an answer to [`question`]: accepted with `approve: true` is a yes
/// (for the session too when asked for and allowed); anything else is no.
#[must_use]
pub fn decision(answer: &Answer, session_allowed: bool) -> Decision {
    if answer.action != AnswerAction::Accept {
        return Decision::Denied;
    }
    let field = |name: &str| {
        answer
            .content
            .as_ref()
            .and_then(|c| c.get(name))
            .and_then(Value::as_bool)
    };
    match (field("approve"), field("for_session")) {
        (Some(true), Some(true)) if session_allowed => Decision::Session,
        (Some(true), _) => Decision::Once,
        _ => Decision::Denied,
    }
}

/// An approval waiting for the operator (the backend asked for one).
#[derive(Debug, Clone)]
pub struct Pending {
    /// Its id: 128 random bits.
    pub id: String,
    /// The tool's exposed name.
    pub tool: String,
    /// Its plugin.
    pub plugin: String,
    /// The binding's surface, task and session ids.
    pub surface: String,
    /// The task the binding works on.
    pub task_id: String,
    /// The agent session.
    pub session_id: String,
    /// The digest of the call's canonical arguments.
    pub arguments_digest: String,
    /// The catalog version (generation, revision) that authorized the call.
    pub catalog: (String, u64),
    /// The backend's reason, cut short.
    pub reason: String,
    /// The backend's id for the decision that asked for it.
    pub decision_id: Option<String>,
    /// The subject of the caller's access token, if it had one.
    pub principal: Option<String>,
    /// When it was asked for (seconds since the Unix epoch).
    pub requested_at: u64,
    /// Seconds left before it expires.
    pub expires_in: u64,
    /// `None` while undecided; then whether it was approved.
    pub decision: Option<bool>,
    binding: u64,
    expires: Instant,
}

/// Why a decision on a pending approval was not taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotDecided {
    /// No pending approval has this id (never, decided and used, or
    /// expired).
    #[error("no approval {0} is pending (it may have expired or been decided)")]
    Unknown(String),
}

/// How a call stands with the operator, when the backend wants approval.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OperatorVerdict {
    /// Approved, and now used.
    Approved,
    /// Denied by the operator (and forgotten).
    Denied,
    /// Waiting, under this id, for this many more seconds.
    Waiting {
        /// The pending approval's id.
        id: String,
        /// Seconds before it expires.
        expires_in: u64,
    },
    /// Too many approvals wait already.
    Full,
    /// No id could be made (the random number generator failed).
    NoRandomness,
}

/// Approvals asked, granted, denied and expired, for `/metrics`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ApprovalStats {
    /// Questions put to a person through the client.
    pub asked: u64,
    /// Approvals pending for the operator that were created.
    pub pending_created: u64,
    /// Calls approved (by the user, a session grant or the operator).
    pub granted: u64,
    /// Calls denied.
    pub denied: u64,
    /// Approvals that expired before they were used.
    pub expired: u64,
    /// Calls refused because nobody could be asked.
    pub refused: u64,
}

/// The policy and the approvals in flight, shared by every call.
#[derive(Debug, Default)]
pub struct Approvals {
    policy: ApprovalPolicy,
    state: Mutex<State>,
    asked: AtomicU64,
    pending_created: AtomicU64,
    granted: AtomicU64,
    denied: AtomicU64,
    expired: AtomicU64,
    refused: AtomicU64,
}

#[derive(Debug, Default)]
struct State {
    /// (binding identity, tool, declaration) -> until when.
    session: HashMap<(u64, String, Fingerprint), Instant>,
    /// By id.
    pending: HashMap<String, Pending>,
}

/// Which counter an event goes to.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Counted {
    Asked,
    Granted,
    Denied,
    Expired,
    Refused,
}

impl Approvals {
    /// Approvals under `policy`.
    #[must_use]
    pub fn new(policy: ApprovalPolicy) -> Self {
        Self {
            policy,
            ..Self::default()
        }
    }

    /// The policy.
    #[must_use]
    pub fn policy(&self) -> &ApprovalPolicy {
        &self.policy
    }

    pub(crate) fn count(&self, what: Counted) {
        let c = match what {
            Counted::Asked => &self.asked,
            Counted::Granted => &self.granted,
            Counted::Denied => &self.denied,
            Counted::Expired => &self.expired,
            Counted::Refused => &self.refused,
        };
        c.fetch_add(1, Ordering::Relaxed);
    }

    /// The counts so far.
    #[must_use]
    pub fn stats(&self) -> ApprovalStats {
        let r = |c: &AtomicU64| c.load(Ordering::Relaxed);
        ApprovalStats {
            asked: r(&self.asked),
            pending_created: r(&self.pending_created),
            granted: r(&self.granted),
            denied: r(&self.denied),
            expired: r(&self.expired),
            refused: r(&self.refused),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether `binding` holds an unexpired "for this session" approval of
    /// this tool declaration.
    pub(crate) fn session_granted(&self, binding: &Binding, d: &Descriptor) -> bool {
        let key = (binding.identity(), d.exposed_name.clone(), d.fingerprint);
        let mut s = self.lock();
        match s.session.get(&key) {
            Some(until) if *until > Instant::now() => true,
            Some(_) => {
                s.session.remove(&key);
                self.count(Counted::Expired);
                false
            }
            None => false,
        }
    }

    /// Remembers a "for this session" approval. When the map is full (after
    /// forgetting expired grants), the call is still approved, once.
    pub(crate) fn grant_session(&self, binding: &Binding, d: &Descriptor) {
        let now = Instant::now();
        let mut s = self.lock();
        if s.session.len() >= MAX_SESSION_GRANTS {
            s.session.retain(|_, until| *until > now);
        }
        if s.session.len() < MAX_SESSION_GRANTS {
            s.session.insert(
                (binding.identity(), d.exposed_name.clone(), d.fingerprint),
                now + self.policy.session_lifetime,
            );
        }
    }

    /// The call's standing with the operator: its approval used if one was
    /// granted for exactly this binding, tool, catalog version and
    /// arguments; otherwise pending under an id (created if need be).
    pub(crate) fn with_operator(
        &self,
        binding: &Binding,
        d: &Descriptor,
        catalog: &(String, u64),
        digest: &str,
        reason: &str,
        decision_id: Option<&str>,
    ) -> OperatorVerdict {
        let now = Instant::now();
        let mut s = self.lock();
        self.forget_expired(&mut s, now);
        let same = s.pending.values().find(|p| {
            p.binding == binding.identity()
                && p.tool == d.exposed_name
                && p.catalog == *catalog
                && p.arguments_digest == digest
        });
        if let Some(p) = same {
            let id = p.id.clone();
            return match p.decision {
                Some(true) => {
                    s.pending.remove(&id);
                    self.count(Counted::Granted);
                    OperatorVerdict::Approved
                }
                Some(false) => {
                    s.pending.remove(&id);
                    self.count(Counted::Denied);
                    OperatorVerdict::Denied
                }
                None => OperatorVerdict::Waiting {
                    expires_in: p.expires.saturating_duration_since(now).as_secs(),
                    id,
                },
            };
        }
        let mine = s
            .pending
            .values()
            .filter(|p| p.binding == binding.identity())
            .count();
        if s.pending.len() >= MAX_PENDING || mine >= MAX_PENDING_PER_BINDING {
            return OperatorVerdict::Full;
        }
        let Ok(id) = toolhost_base::ids::unguessable_id() else {
            return OperatorVerdict::NoRandomness;
        };
        let lifetime = self.policy.lifetime;
        let pending = Pending {
            id: id.clone(),
            tool: d.exposed_name.clone(),
            plugin: d.plugin_id.clone(),
            surface: binding.surface.clone(),
            task_id: binding.task_id.clone(),
            session_id: binding.session_id.clone(),
            arguments_digest: digest.to_owned(),
            catalog: catalog.clone(),
            reason: reason.chars().take(256).collect(),
            decision_id: decision_id.map(str::to_owned),
            principal: binding.principal.as_ref().map(|p| p.subject.clone()),
            requested_at: SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            expires_in: lifetime.as_secs(),
            decision: None,
            binding: binding.identity(),
            expires: now + lifetime,
        };
        s.pending.insert(id.clone(), pending);
        self.pending_created.fetch_add(1, Ordering::Relaxed);
        OperatorVerdict::Waiting {
            id,
            expires_in: lifetime.as_secs(),
        }
    }

    /// Forgets pending approvals past their lifetime, counting each.
    fn forget_expired(&self, s: &mut State, now: Instant) {
        let before = s.pending.len();
        s.pending.retain(|_, p| p.expires > now);
        for _ in s.pending.len()..before {
            self.count(Counted::Expired);
        }
    }

    /// The approvals waiting for the operator (or decided and not yet
    /// used), oldest first.
    #[must_use]
    pub fn pending(&self) -> Vec<Pending> {
        let now = Instant::now();
        let s = self.lock();
        let mut all: Vec<Pending> = s
            .pending
            .values()
            .filter(|p| p.expires > now)
            .map(|p| Pending {
                expires_in: p.expires.saturating_duration_since(now).as_secs(),
                ..p.clone()
            })
            .collect();
        all.sort_by(|a, b| (a.requested_at, &a.id).cmp(&(b.requested_at, &b.id)));
        all
    }

    /// The operator's decision on a pending approval. Approved, it lets the
    /// same call through once when the agent repeats it; denied, the
    /// repeat is refused once.
    pub fn decide(&self, id: &str, approve: bool) -> Result<Pending, NotDecided> {
        let now = Instant::now();
        let mut s = self.lock();
        match s.pending.get_mut(id) {
            Some(p) if p.expires > now && p.decision.is_none() => {
                p.decision = Some(approve);
                Ok(p.clone())
            }
            _ => Err(NotDecided::Unknown(id.chars().take(64).collect())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn descriptor(destructive: bool) -> Descriptor {
        let mut d = crate::testing::descriptor();
        d.annotations.destructive = destructive;
        d.annotations.read_only = false;
        d.seal();
        d
    }

    #[test]
    fn the_policy_names_why_a_tool_needs_approval() {
        let d = descriptor(true);
        assert_eq!(ApprovalPolicy::default().requires(&d), None);
        let by_annotation = ApprovalPolicy {
            destructive: true,
            ..ApprovalPolicy::default()
        };
        assert!(by_annotation.requires(&d).is_some());
        assert_eq!(by_annotation.requires(&descriptor(false)), None);
        let by_plugin = ApprovalPolicy {
            plugins: ["notes".to_owned()].into(),
            ..ApprovalPolicy::default()
        };
        assert!(by_plugin.requires(&descriptor(false)).is_some());
    }

    fn args(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn the_question_shows_the_arguments_escaped_and_bounded() {
        let d = descriptor(true);
        let a = args(serde_json::json!({"a": "a\u{202e}b\u{0007}", "big": "x".repeat(10_000)}));
        let q = question(&d, "why", &a, false);
        assert!(q.message.contains("kandev_notes_add"));
        assert!(q.message.contains("\\u{202e}"), "{}", q.message);
        assert!(!q.message.contains('\u{202e}'));
        assert!(q.message.len() < toolhost_pipeline::MAX_QUESTION_MESSAGE);
        assert!(q.message.contains("cut"));
        assert!(toolhost_pipeline::check_question(q.message, q.requested_schema).is_ok());
    }

    /// A hijacked agent pads an argument that sorts first: the person must
    /// still see every other argument's value whole.
    #[test]
    fn a_long_argument_that_sorts_first_hides_no_other() {
        let d = descriptor(true);
        let a = args(serde_json::json!({
            "aaa_blob": "x".repeat(1_000_000),
            "target": "/etc/passwd",
            "mode": "overwrite",
        }));
        let q = question(&d, "why", &a, false);
        assert!(
            q.message.contains("- target: \"/etc/passwd\""),
            "{}",
            q.message
        );
        assert!(q.message.contains("- mode: \"overwrite\""), "{}", q.message);
        assert!(q.message.contains("- aaa_blob: \"xxx"), "{}", q.message);
        assert!(q.message.contains("more bytes)"));
        assert!(q.message.len() <= toolhost_pipeline::MAX_QUESTION_MESSAGE);
    }

    /// Invisible characters cannot make a value look empty.
    #[test]
    fn a_value_of_invisible_characters_is_shown_escaped() {
        let d = descriptor(true);
        let a =
            args(serde_json::json!({"to": "\u{3164}\u{115f}\u{034f}\u{fe0f}\u{180b}\u{e0100}"}));
        let q = question(&d, "why", &a, false);
        for c in ["3164", "115f", "34f", "fe0f", "180b", "e0100"] {
            assert!(
                q.message.contains(&format!("\\u{{{c}}}")),
                "{c}: {}",
                q.message
            );
        }
    }

    #[test]
    fn many_arguments_are_named_until_the_room_ends_and_the_rest_counted() {
        let d = descriptor(true);
        let many: Map<String, Value> = (0..500)
            .map(|i| (format!("k{i:03}"), Value::from("v".repeat(200))))
            .collect();
        let q = question(&d, "why", &many, false);
        assert!(
            q.message.len() <= toolhost_pipeline::MAX_QUESTION_MESSAGE,
            "{}",
            q.message.len()
        );
        assert!(
            q.message
                .contains("more arguments this question has no room for")
        );
    }

    proptest::proptest! {
        #[test]
        fn shares_never_exceed_the_room_and_small_values_are_whole(
            lengths in proptest::collection::vec(0usize..5000, 1..20),
        ) {
            let shares = fair_shares(lengths.clone(), 3000);
            proptest::prop_assert!(shares.iter().sum::<usize>() <= 3000);
            let equal = 3000 / lengths.len();
            for (len, share) in lengths.iter().zip(&shares) {
                if *len <= equal.min(MIN_SHOWN_VALUE.max(equal)) {
                    proptest::prop_assert_eq!(share, len);
                }
            }
        }
    }

    #[test]
    fn only_an_explicit_yes_approves() {
        let yes = |content: Value| Answer {
            action: AnswerAction::Accept,
            content: Some(content),
        };
        assert_eq!(
            decision(&yes(json!({"approve": true})), false),
            Decision::Once
        );
        assert_eq!(
            decision(&yes(json!({"approve": true, "for_session": true})), true),
            Decision::Session
        );
        assert_eq!(
            decision(&yes(json!({"approve": true, "for_session": true})), false),
            Decision::Once
        );
        assert_eq!(
            decision(&yes(json!({"approve": "yes"})), false),
            Decision::Denied
        );
        let declined = Answer {
            action: AnswerAction::Decline,
            content: Some(json!({"approve": true})),
        };
        assert_eq!(decision(&declined, true), Decision::Denied);
    }

    #[test]
    fn an_operator_approval_lets_exactly_one_identical_call_through() {
        let a = Approvals::new(ApprovalPolicy::default());
        let b = Binding::new("chat", "t", "s", None);
        let d = descriptor(true);
        let v = ("g".to_owned(), 1);
        let OperatorVerdict::Waiting { id, .. } = a.with_operator(&b, &d, &v, "d1", "why", None)
        else {
            panic!("a first call waits")
        };
        assert!(matches!(
            a.with_operator(&b, &d, &v, "d1", "why", None),
            OperatorVerdict::Waiting { id: ref again, .. } if *again == id
        ));
        assert_eq!(a.pending().len(), 1);
        assert!(a.decide(&id, true).is_ok());
        assert!(a.decide(&id, false).is_err(), "decided once");
        // Other arguments, another binding, another revision: asked anew.
        for (b2, v2, d2) in [
            (&b, &v, "d2"),
            (&Binding::new("chat", "t", "s", None), &v, "d1"),
            (&b, &("g".to_owned(), 2), "d1"),
        ] {
            assert!(matches!(
                a.with_operator(b2, &d, v2, d2, "why", None),
                OperatorVerdict::Waiting { id: ref other, .. } if *other != id
            ));
        }
        assert_eq!(
            a.with_operator(&b, &d, &v, "d1", "why", None),
            OperatorVerdict::Approved
        );
        assert!(matches!(
            a.with_operator(&b, &d, &v, "d1", "why", None),
            OperatorVerdict::Waiting { .. }
        ));
    }

    #[test]
    fn a_session_grant_covers_one_binding_and_one_declaration() {
        let a = Approvals::new(ApprovalPolicy::default());
        let b = Binding::new("chat", "t", "s", None);
        let d = descriptor(true);
        assert!(!a.session_granted(&b, &d));
        a.grant_session(&b, &d);
        assert!(a.session_granted(&b, &d));
        assert!(!a.session_granted(&Binding::new("chat", "t", "s", None), &d));
        assert!(!a.session_granted(&b, &descriptor(false)));
    }
}
