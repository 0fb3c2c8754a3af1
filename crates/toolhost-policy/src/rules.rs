//! Argument rules: the operator's CEL expressions over a call's arguments.
//!
//! A rule belongs to a tool (by exposed name) or to every tool of a plugin,
//! and must hold for the call to run: "`path` stays under `/workspace`",
//! "`amount` ≤ 100 unless the surface is `admin`". It sees
//!
//! - `args`: the arguments, as validated against the tool's schema (aliases
//!   resolved);
//! - `binding`: `surface`, `task_id`, `session_id`, `workspace_id`;
//! - `tool`: `name`, `plugin`, `local_name`, `destructive`, `read_only`.
//!
//! A rule that is false refuses the call with the rule's own message; one
//! that cannot be evaluated (an argument it reads is absent, a type does not
//! fit) refuses it too, with a message naming the rule: an operator's rule
//! fails closed. Neither message holds a value: the interpreter's own
//! errors can quote values, so they are never shown.
//!
//! Rules are compiled when the configuration is read, and a bad one is
//! reported with its place. Their cost is bounded where they run: an
//! expression is at most 1 KiB and 256 nodes, a comprehension (`all`,
//! `exists`, `map`, `filter`) may not hold another, and each rule's work
//! and memory are bounded by polynomials in the size of the arguments
//! (`cost.rs`), found when it is compiled. Before a call's rules run, the
//! bounds are taken at its arguments' size: over the budget, the call is
//! refused (and counted) and no rule starts. Arguments larger than 64 KiB
//! are refused by a tool that has rules rather than evaluated.
//!
//! What this module must not do: put a value in a message, a log or a
//! metric.

use crate::cost::{self, Budget, Cost};
use cel::common::ast::{EntryExpr, Expr, IdedExpr};
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use toolhost_catalog::Descriptor;
use toolhost_pipeline::Binding;

/// The longest rule, in bytes.
pub const MAX_RULE_BYTES: usize = 1024;
/// The most nodes a rule's expression may have.
const MAX_NODES: usize = 256;
/// The largest arguments a rule is evaluated over (serialized JSON).
pub const MAX_RULE_INPUT_BYTES: usize = 64 * 1024;
/// The message a rule carries, at most.
const MAX_MESSAGE_BYTES: usize = 512;

/// Functions a rule may call by name (operators are always allowed).
const FUNCTIONS: [&str; 14] = [
    "size",
    "contains",
    "startsWith",
    "endsWith",
    "int",
    "uint",
    "double",
    "string",
    "bool",
    "bytes",
    "type",
    "dyn",
    "max",
    "min",
];

/// Which calls a rule applies to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// One tool, by exposed name.
    Tool(String),
    /// Every tool of a plugin, by id.
    Plugin(String),
}

/// A rule as the operator wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleSpec {
    /// Where it was written, for errors: `[[rules]] #2`.
    pub place: String,
    /// Which calls it applies to.
    pub scope: Scope,
    /// The CEL expression that must be true.
    pub expression: String,
    /// What the agent is told when it is not.
    pub message: String,
}

/// Why a rule was refused when the configuration was read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{place}: {why}")]
pub struct BadRule {
    /// Where it was written.
    pub place: String,
    /// What is wrong, with the line and column the parser gives.
    pub why: String,
}

/// A compiled rule.
#[derive(Debug)]
struct Rule {
    place: String,
    program: cel::Program,
    message: String,
    /// What it can cost, by the size of the arguments.
    cost: Cost,
}

/// Every rule, by what it applies to.
#[derive(Debug)]
pub struct Rules {
    by_tool: HashMap<String, Vec<Rule>>,
    by_plugin: HashMap<String, Vec<Rule>>,
    count: usize,
    stdlib: Stdlib,
    budget: Budget,
    /// Calls refused because their rules could have gone over the budget.
    over_budget: AtomicU64,
}

impl Default for Rules {
    fn default() -> Self {
        Self {
            by_tool: HashMap::new(),
            by_plugin: HashMap::new(),
            count: 0,
            stdlib: Stdlib::default(),
            budget: Budget::DEFAULT,
            over_budget: AtomicU64::new(0),
        }
    }
}

/// A rule's place, and the largest arguments (bytes of JSON) it runs on
/// within the budget.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reach {
    /// Where it was written.
    pub place: String,
    /// The largest argument size it is evaluated on; larger calls are
    /// refused before it runs.
    pub max_arguments: usize,
}

/// CEL's standard functions, registered once: building them is most of
/// what a fresh `cel::Context` costs, and every call's context borrows them.
pub(crate) struct Stdlib(pub(crate) std::sync::Arc<cel::Env>);

impl Default for Stdlib {
    fn default() -> Self {
        Self(std::sync::Arc::new(cel::Env::stdlib()))
    }
}

impl std::fmt::Debug for Stdlib {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Stdlib")
    }
}

/// Why a call was refused by the rules. Each message is written for the
/// model and holds no value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused(pub String);

impl Rules {
    /// Compiles every rule; the first bad one is the error.
    ///
    /// # Errors
    /// The first rule that does not compile, breaks a bound, or whose cost
    /// cannot be bounded.
    pub fn compile(specs: &[RuleSpec]) -> Result<Self, BadRule> {
        Self::compile_within(specs, Budget::DEFAULT)
    }

    /// [`Rules::compile`] with another budget (the tests' and the
    /// benchmark's).
    ///
    /// # Errors
    /// As [`Rules::compile`].
    pub fn compile_within(specs: &[RuleSpec], budget: Budget) -> Result<Self, BadRule> {
        let mut rules = Self {
            budget,
            ..Self::default()
        };
        for spec in specs {
            let rule = compile(spec)?;
            let map = match &spec.scope {
                Scope::Tool(t) => rules.by_tool.entry(t.clone()),
                Scope::Plugin(p) => rules.by_plugin.entry(p.clone()),
            };
            map.or_default().push(rule);
            rules.count += 1;
        }
        Ok(rules)
    }

    /// Each rule's reach: the largest arguments it is evaluated on within
    /// the budget (for the log at load and `status`), in the order written.
    #[must_use]
    pub fn reach(&self) -> Vec<Reach> {
        let mut all: Vec<Reach> = self
            .by_tool
            .values()
            .chain(self.by_plugin.values())
            .flatten()
            .map(|r| Reach {
                place: r.place.clone(),
                max_arguments: largest_within(&r.cost, self.budget),
            })
            .collect();
        all.sort_by(|a, b| a.place.cmp(&b.place));
        all
    }

    /// The bounds on what `d`'s rules can cost together over `n` bytes of
    /// arguments: (units of work, bytes allocated).
    #[must_use]
    pub fn bounds(&self, d: &Descriptor, n: usize) -> (f64, f64) {
        let n = n as f64;
        self.by_tool
            .get(&d.exposed_name)
            .into_iter()
            .chain(self.by_plugin.get(&d.plugin_id))
            .flatten()
            .fold((0.0, 0.0), |(w, a), r| {
                (w + r.cost.work.at(n), a + r.cost.alloc.at(n))
            })
    }

    /// The budget they must fit.
    #[must_use]
    pub fn budget(&self) -> Budget {
        self.budget
    }

    /// Calls refused because their rules could have gone over the budget.
    #[must_use]
    pub fn over_budget(&self) -> u64 {
        self.over_budget.load(Ordering::Relaxed)
    }

    /// How many rules there are.
    #[must_use]
    pub fn len(&self) -> usize {
        self.count
    }

    /// Whether there are none.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// How many rules apply to `d` (for `status` and `plugins show`).
    #[must_use]
    pub fn for_tool(&self, d: &Descriptor) -> usize {
        self.by_tool.get(&d.exposed_name).map_or(0, Vec::len)
            + self.by_plugin.get(&d.plugin_id).map_or(0, Vec::len)
    }

    /// Whether every rule of `d`'s holds for these arguments.
    ///
    /// # Errors
    /// The refusal: a rule that is false or cannot be decided, arguments
    /// too large for rules, or rules that could cost more than the budget
    /// at this size (then no rule runs).
    pub fn check(
        &self,
        d: &Descriptor,
        binding: &Binding,
        args: &Map<String, Value>,
    ) -> Result<(), Refused> {
        let tool = self.by_tool.get(&d.exposed_name);
        let plugin = self.by_plugin.get(&d.plugin_id);
        if tool.is_none() && plugin.is_none() {
            return Ok(());
        }
        let size = serde_json::to_vec(args).map_or(usize::MAX, |v| v.len());
        if size > MAX_RULE_INPUT_BYTES {
            return Err(Refused(format!(
                "the operator's rules for {} look at its arguments, and these are larger than the \
                 {MAX_RULE_INPUT_BYTES} bytes a rule reads; nothing ran. Send less.",
                d.exposed_name
            )));
        }
        let applicable = || tool.into_iter().chain(plugin).flatten();
        let (work, alloc) = self.bounds(d, size);
        if work > self.budget.work || alloc > self.budget.alloc {
            self.over_budget.fetch_add(1, Ordering::Relaxed);
            let places: Vec<&str> = applicable().map(|r| r.place.as_str()).collect();
            tracing::warn!(tool = %d.exposed_name, rules = %places.join(", "), arguments_bytes = size,
                "a call was refused before its rules ran: they could cost more than a rule's budget at this argument size");
            return Err(Refused(format!(
                "the operator's rules for {} ({}) could cost more than toolhost lets rules spend on {size} bytes of                  arguments, so they were not run and neither was the call. Send less (smaller lists or strings).",
                d.exposed_name,
                places.join(", ")
            )));
        }
        let mut cx = cel::Context::with_env(std::sync::Arc::clone(&self.stdlib.0));
        let facts = [
            cx.add_variable("args", args).is_ok(),
            cx.add_variable(
                "binding",
                serde_json::json!({
                    "surface": binding.surface,
                    "task_id": binding.task_id,
                    "session_id": binding.session_id,
                    "workspace_id": binding.workspace_id.clone().unwrap_or_default(),
                }),
            )
            .is_ok(),
            cx.add_variable(
                "tool",
                serde_json::json!({
                    "name": d.exposed_name,
                    "plugin": d.plugin_id,
                    "local_name": d.local_name,
                    "destructive": d.annotations.destructive,
                    "read_only": d.annotations.read_only,
                }),
            )
            .is_ok(),
        ];
        if facts.contains(&false) {
            return Err(Refused(format!(
                "toolhost could not give {}'s arguments to the operator's rules; nothing ran",
                d.exposed_name
            )));
        }
        for rule in applicable() {
            match rule.program.execute(&cx) {
                Ok(cel::Value::Bool(true)) => {}
                Ok(cel::Value::Bool(false)) => return Err(Refused(rule.message.clone())),
                // Not a yes: an error (which may quote a value, so its text
                // is dropped) or a result that is not a boolean.
                _ => {
                    return Err(Refused(format!(
                        "the operator's rule {} for {} could not be decided for these arguments \
                         (an argument it reads may be absent or of another type); nothing ran",
                        rule.place, d.exposed_name
                    )));
                }
            }
        }
        Ok(())
    }
}

/// Compiles one rule and checks its bounds.
fn compile(spec: &RuleSpec) -> Result<Rule, BadRule> {
    let bad = |why: String| BadRule {
        place: spec.place.clone(),
        why,
    };
    if spec.message.trim().is_empty() || spec.message.len() > MAX_MESSAGE_BYTES {
        return Err(bad(format!(
            "the message an agent is told must be 1 to {MAX_MESSAGE_BYTES} bytes"
        )));
    }
    let (program, cost) =
        compile_bounded(&spec.place, &spec.expression, &["args", "binding", "tool"])?;
    Ok(Rule {
        place: spec.place.clone(),
        program,
        message: spec.message.clone(),
        cost,
    })
}

/// Compiles an expression that may read only `variables`, and finds the
/// bound on what it costs: every rule of the operator's, whatever it is
/// evaluated over, goes through here.
pub(crate) fn compile_bounded(
    place: &str,
    expression: &str,
    variables: &[&str],
) -> Result<(cel::Program, Cost), BadRule> {
    let bad = |why: String| BadRule {
        place: place.to_owned(),
        why,
    };
    if expression.trim().is_empty() {
        return Err(bad("the rule's expression (`when`) is empty".into()));
    }
    if expression.len() > MAX_RULE_BYTES {
        return Err(bad(format!(
            "the expression is longer than {MAX_RULE_BYTES} bytes"
        )));
    }
    let program = cel::Program::compile(expression)
        .map_err(|e| bad(format!("the expression does not compile: {e}")))?;
    let mut walk = Walk::default();
    walk.expr(program.expression(), 0);
    if walk.nodes > MAX_NODES {
        return Err(bad(format!(
            "the expression has {} nodes, more than the {MAX_NODES} a rule may have",
            walk.nodes
        )));
    }
    if walk.nested {
        return Err(bad(
            "a comprehension (all, exists, exists_one, map, filter) holds another: a rule's cost must stay linear in the arguments".into(),
        ));
    }
    if let Some(f) = walk.unknown {
        return Err(bad(format!(
            "function {f:?} is not one a rule may call (allowed: {})",
            FUNCTIONS.join(", ")
        )));
    }
    if let Some(v) = walk
        .variables
        .iter()
        .find(|v| !variables.contains(&v.as_str()))
    {
        return Err(bad(format!(
            "{v:?} is not a variable a rule sees ({})",
            variables.join(", ")
        )));
    }
    let cost = cost::of_rule(program.expression()).map_err(|u| {
        bad(format!(
            "toolhost cannot bound what this rule costs: {}",
            u.0
        ))
    })?;
    Ok((program, cost))
}

/// The largest argument size (bytes) at which `cost` fits `budget`, up to
/// [`MAX_RULE_INPUT_BYTES`]: the bounds only grow with the size.
fn largest_within(cost: &Cost, budget: Budget) -> usize {
    let fits = |n: usize| {
        let n = n as f64;
        cost.work.at(n) <= budget.work && cost.alloc.at(n) <= budget.alloc
    };
    if fits(MAX_RULE_INPUT_BYTES) {
        return MAX_RULE_INPUT_BYTES;
    }
    let (mut lo, mut hi) = (0usize, MAX_RULE_INPUT_BYTES);
    while lo + 1 < hi {
        let mid = lo + (hi - lo) / 2;
        if fits(mid) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    lo
}

/// What a walk over a rule's expression found.
#[derive(Default)]
struct Walk {
    nodes: usize,
    nested: bool,
    unknown: Option<String>,
    variables: Vec<String>,
    /// Comprehension variables in scope.
    bound: Vec<String>,
}

impl Walk {
    fn expr(&mut self, e: &IdedExpr, comprehensions: usize) {
        self.nodes += 1;
        if self.nodes > MAX_NODES {
            return;
        }
        match &e.expr {
            Expr::Call(c) => {
                let operator = c.func_name.starts_with(['_', '@', '!', '-']);
                if !operator && !FUNCTIONS.contains(&c.func_name.as_str()) {
                    self.unknown.get_or_insert_with(|| c.func_name.clone());
                }
                if let Some(t) = &c.target {
                    self.expr(t, comprehensions);
                }
                for a in &c.args {
                    self.expr(a, comprehensions);
                }
            }
            Expr::Comprehension(c) => {
                if comprehensions > 0 {
                    self.nested = true;
                }
                self.expr(&c.iter_range, comprehensions);
                self.expr(&c.accu_init, comprehensions);
                self.bound.push(c.iter_var.clone());
                self.bound.extend(c.iter_var2.clone());
                self.bound.push(c.accu_var.clone());
                for part in [&c.loop_cond, &c.loop_step, &c.result] {
                    self.expr(part, comprehensions + 1);
                }
                let keep = self.bound.len() - 2 - usize::from(c.iter_var2.is_some());
                self.bound.truncate(keep);
            }
            Expr::Ident(name) => {
                if !self.bound.contains(name) && !self.variables.contains(name) {
                    self.variables.push(name.clone());
                }
            }
            Expr::List(l) => {
                for x in &l.elements {
                    self.expr(x, comprehensions);
                }
            }
            Expr::Map(m) => self.entries(&m.entries, comprehensions),
            Expr::Struct(s) => self.entries(&s.entries, comprehensions),
            Expr::Select(s) => self.expr(&s.operand, comprehensions),
            Expr::Literal(_) | Expr::Unspecified => {}
        }
    }

    fn entries(&mut self, entries: &[cel::common::ast::IdedEntryExpr], comprehensions: usize) {
        for entry in entries {
            match &entry.expr {
                EntryExpr::StructField(f) => self.expr(&f.value, comprehensions),
                EntryExpr::MapEntry(m) => {
                    self.expr(&m.key, comprehensions);
                    self.expr(&m.value, comprehensions);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(expression: &str) -> RuleSpec {
        RuleSpec {
            place: "[[rules]] #1".into(),
            scope: Scope::Tool("kandev_notes_add".into()),
            expression: expression.into(),
            message: "path must stay under /workspace".into(),
        }
    }

    fn check(expression: &str, args: Value, surface: &str) -> Result<(), Refused> {
        let rules = Rules::compile(&[spec(expression)]).expect("compiles");
        let d = crate::testing::descriptor();
        let b = Binding::new(surface, "t", "s", None);
        rules.check(&d, &b, args.as_object().expect("an object"))
    }

    #[test]
    fn a_rule_allows_and_refuses_with_its_own_message() {
        let under = r#"args.path.startsWith("/workspace/") && !args.path.contains("..")"#;
        assert_eq!(
            check(under, json!({"path": "/workspace/a"}), "chat"),
            Ok(())
        );
        assert_eq!(
            check(under, json!({"path": "/etc/passwd"}), "chat"),
            Err(Refused("path must stay under /workspace".into()))
        );
        assert!(check(under, json!({"path": "/workspace/../etc"}), "chat").is_err());
        let amount = r#"args.amount <= 100 || binding.surface == "admin""#;
        assert!(check(amount, json!({"amount": 500}), "chat").is_err());
        assert_eq!(check(amount, json!({"amount": 500}), "admin"), Ok(()));
        assert_eq!(check(amount, json!({"amount": 5}), "chat"), Ok(()));
        let all = r#"args.tags.all(t, size(t) < 8)"#;
        assert_eq!(check(all, json!({"tags": ["a", "b"]}), "chat"), Ok(()));
        assert!(check(all, json!({"tags": ["a", "bbbbbbbbbbb"]}), "chat").is_err());
    }

    #[test]
    fn a_rule_that_cannot_be_decided_refuses_without_a_value() {
        let r = check(
            "args.path.startsWith(\"/w\")",
            json!({"other": "sekrit"}),
            "chat",
        );
        let Err(Refused(message)) = r else {
            panic!("{r:?}")
        };
        assert!(message.contains("could not be decided"), "{message}");
        assert!(!message.contains("sekrit"));
        let r = check("args.n + 1", json!({"n": 1}), "chat");
        assert!(r.is_err(), "a number is not a yes");
    }

    #[test]
    fn bad_rules_are_reported_with_their_place() {
        for (expression, says) in [
            ("args.path.startsWith(", "does not compile"),
            ("", "empty"),
            ("args.l.all(x, args.l.all(y, x == y))", "holds another"),
            ("system(args.cmd)", "not one a rule may call"),
            ("secrets.key == 1", "not a variable"),
        ] {
            let e = Rules::compile(&[spec(expression)]).expect_err(expression);
            assert_eq!(e.place, "[[rules]] #1");
            assert!(e.why.contains(says), "{expression}: {e}");
        }
        let long = format!("args.a == \"{}\"", "x".repeat(2000));
        assert!(Rules::compile(&[spec(&long)]).is_err());
    }

    /// The two rules that cost a daemon 30 s and 309 MiB over 61 KiB of
    /// arguments: refused before they run, at once, and counted.
    #[test]
    fn a_rule_whose_work_grows_with_the_square_of_the_arguments_is_refused_before_it_runs() {
        let items: Vec<String> = (0..5_000).map(|i| format!("{i}")).collect();
        let args = json!({"s": "x".repeat(30_000), "items": items});
        assert!(serde_json::to_vec(&args).unwrap().len() < MAX_RULE_INPUT_BYTES);
        for hostile in [
            "args.items.map(x, args.s + x).size() >= 0",
            "size(args.items.map(x, args.s + x)) >= 0",
        ] {
            let rules = Rules::compile(&[spec(hostile)]).expect("a legal rule");
            let d = crate::testing::descriptor();
            let b = Binding::new("chat", "t", "s", None);
            let started = std::time::Instant::now();
            let r = rules.check(&d, &b, args.as_object().expect("an object"));
            assert!(
                matches!(&r, Err(Refused(m)) if m.contains("could cost more")),
                "{r:?}"
            );
            assert!(started.elapsed() < std::time::Duration::from_millis(50));
            assert_eq!(rules.over_budget(), 1);
            let reach = rules.reach();
            assert!(reach[0].max_arguments < 20_000, "{reach:?}");
        }
        // The same rule over small arguments runs, and decides.
        let rules = Rules::compile(&[spec("args.items.map(x, args.s + x).size() >= 0")]).unwrap();
        let small = json!({"s": "ab", "items": ["1", "2"]});
        let d = crate::testing::descriptor();
        let b = Binding::new("chat", "t", "s", None);
        assert_eq!(rules.check(&d, &b, small.as_object().unwrap()), Ok(()));
    }

    #[test]
    fn a_linear_rule_runs_on_the_largest_arguments() {
        let tags: Vec<String> = (0..10_000).map(|i| format!("t{}", i % 100)).collect();
        let args = json!({"tags": tags});
        let rules = Rules::compile(&[spec("args.tags.all(t, size(t) < 8)")]).unwrap();
        assert_eq!(rules.reach()[0].max_arguments, MAX_RULE_INPUT_BYTES);
        let d = crate::testing::descriptor();
        let b = Binding::new("chat", "t", "s", None);
        assert_eq!(rules.check(&d, &b, args.as_object().unwrap()), Ok(()));
    }

    #[test]
    fn large_arguments_are_refused_rather_than_read() {
        let r = check("true", json!({"blob": "x".repeat(70_000)}), "chat");
        assert!(matches!(r, Err(Refused(m)) if m.contains("larger than")));
    }
}
