//! Which binding a caller with an access token stands for: the operator's
//! CEL conditions over the verified token, tried in the order written.
//!
//! One authorization server can stand for many bindings: "tokens of the
//! `ci` client work on surface `ci`", "a person with the `tickets` scope
//! works on surface `chat`, on the task their token names". Each rule sees
//! `token`: `iss`, `sub`, `client_id`, `scopes` (a list) and `claims` (all
//! of them). The first rule that is true names the binding; a rule that is
//! false or cannot be evaluated (a claim it reads is absent) does not.
//!
//! The same bounds as the argument rules hold (`rules.rs`): 1 KiB and 256
//! nodes, no nested comprehension, a cost bound found when compiled and
//! checked at each token's size before any rule runs.
//!
//! What this module must not do: put a claim's value in a message or a
//! log line.

use crate::cost::{Budget, Cost};
use crate::rules::{BadRule, Stdlib, compile_bounded};

/// One rule as the operator wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallerRuleSpec {
    /// Where it was written: `[[http.oauth.bindings]] #1`.
    pub place: String,
    /// The condition (`when`).
    pub expression: String,
}

#[derive(Debug)]
struct CallerRule {
    place: String,
    program: cel::Program,
    cost: Cost,
}

/// The compiled rules.
#[derive(Debug)]
pub struct CallerRules {
    rules: Vec<CallerRule>,
    stdlib: Stdlib,
    budget: Budget,
}

impl Default for CallerRules {
    fn default() -> Self {
        Self {
            rules: Vec::new(),
            stdlib: Stdlib::default(),
            budget: Budget::DEFAULT,
        }
    }
}

/// No rule could be run over this token (its claims are too large for
/// the rules' budget).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the access token's claims are too large for the operator's binding rules ({0} bytes); no rule ran"
)]
pub struct TooCostly(pub usize);

impl CallerRules {
    /// Compiles each rule.
    ///
    /// # Errors
    /// The first rule that does not compile or cannot be bounded.
    pub fn compile(specs: &[CallerRuleSpec]) -> Result<Self, BadRule> {
        let rules = specs
            .iter()
            .map(|s| {
                let (program, cost) = compile_bounded(&s.place, &s.expression, &["token"])?;
                Ok(CallerRule {
                    place: s.place.clone(),
                    program,
                    cost,
                })
            })
            .collect::<Result<Vec<_>, BadRule>>()?;
        Ok(Self {
            rules,
            stdlib: Stdlib::default(),
            budget: Budget::DEFAULT,
        })
    }

    /// How many rules there are.
    #[must_use]
    pub fn len(&self) -> usize {
        self.rules.len()
    }

    /// Whether there are none.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The index of the first rule that holds for `token`, if any.
    ///
    /// # Errors
    /// The rules could cost more than the budget at this token's size.
    pub fn first_holding(&self, token: &serde_json::Value) -> Result<Option<usize>, TooCostly> {
        let size = serde_json::to_vec(token).map_or(usize::MAX, |v| v.len());
        let n = size as f64;
        let (work, alloc) = self.rules.iter().fold((0.0, 0.0), |(w, a), r| {
            (w + r.cost.work.at(n), a + r.cost.alloc.at(n))
        });
        if work > self.budget.work || alloc > self.budget.alloc {
            tracing::warn!(
                token_bytes = size,
                "an access token's claims were too large for the binding rules"
            );
            return Err(TooCostly(size));
        }
        let mut cx = cel::Context::with_env(std::sync::Arc::clone(&self.stdlib.0));
        if cx.add_variable("token", token).is_err() {
            return Err(TooCostly(size));
        }
        for (i, rule) in self.rules.iter().enumerate() {
            match rule.program.execute(&cx) {
                Ok(cel::Value::Bool(true)) => return Ok(Some(i)),
                Ok(_) => {}
                Err(_) => {
                    tracing::debug!(rule = %rule.place, "a binding rule could not be decided for a token; it does not hold");
                }
            }
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rules(exprs: &[&str]) -> Result<CallerRules, BadRule> {
        let specs: Vec<CallerRuleSpec> = exprs
            .iter()
            .enumerate()
            .map(|(i, e)| CallerRuleSpec {
                place: format!("#{i}"),
                expression: (*e).to_owned(),
            })
            .collect();
        CallerRules::compile(&specs)
    }

    #[test]
    fn the_first_rule_that_holds_wins() {
        let r = rules(&[
            "token.client_id == 'ci'",
            "'tickets' in token.scopes && token.claims.team == 'blue'",
            "true",
        ])
        .unwrap_or_default();
        let t = |client: &str, scopes: &[&str], claims: serde_json::Value| json!({"iss": "i", "sub": "s", "client_id": client, "scopes": scopes, "claims": claims});
        assert_eq!(r.first_holding(&t("ci", &[], json!({}))), Ok(Some(0)));
        assert_eq!(
            r.first_holding(&t("x", &["tickets"], json!({"team": "blue"}))),
            Ok(Some(1))
        );
        // An absent claim: rule 1 cannot be decided, so it does not hold.
        assert_eq!(
            r.first_holding(&t("x", &["tickets"], json!({}))),
            Ok(Some(2))
        );
    }

    #[test]
    fn only_the_token_is_visible() {
        let bad = rules(&["args.x == 1"]);
        assert!(matches!(bad, Err(e) if e.why.contains("token")));
    }

    #[test]
    fn huge_claims_are_refused_before_a_rule_runs() {
        // Work that grows with the square of the claims' size.
        let r = rules(&["token.claims.items.map(x, token.claims.s + x).size() >= 0"])
            .unwrap_or_default();
        let items: Vec<String> = (0..5_000).map(|i| format!("{i}")).collect();
        let token = json!({"sub": "s", "claims": {"s": "x".repeat(30_000), "items": items}});
        let started = std::time::Instant::now();
        assert!(r.first_holding(&token).is_err());
        assert!(started.elapsed() < std::time::Duration::from_millis(50));
        // A linear rule over a token of a real size (a few KiB) runs.
        let r =
            rules(&["token.claims.groups.exists(g, g.startsWith('team-'))"]).unwrap_or_default();
        let groups: Vec<String> = (0..200)
            .map(|i| format!("group-{i}"))
            .chain(["team-a".into()])
            .collect();
        let real = json!({"sub": "s", "claims": {"groups": groups}});
        assert_eq!(r.first_holding(&real), Ok(Some(0)));
    }
}
