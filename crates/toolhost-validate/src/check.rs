//! The checking steps, in pipeline order, and the error they produce.

use crate::bounds::{self, BoundError};
use crate::names::is_nameable;
use crate::render;
use crate::schema::CompiledSchema;
use crate::violation::{ArgumentError, MAX_VIOLATIONS, Violation};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// What a tool does with top-level keys its schema does not declare.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum UnknownArguments {
    /// Refuse the call, naming the key where it looks like an identifier.
    #[default]
    Reject,
    /// Drop the keys and list them in the result as `unknown_args`. Only for
    /// read-only tools: a mutation never runs on a guess.
    Report,
}

/// The per-tool settings that are not part of the schema.
#[derive(Debug, Clone, Copy)]
pub struct ToolPolicy<'a> {
    /// alias -> canonical property.
    pub aliases: &'a BTreeMap<String, String>,
    /// The unknown-argument policy.
    pub unknown: UnknownArguments,
}

/// Arguments that passed every check, ready to dispatch.
#[derive(Debug, Clone, PartialEq)]
pub struct Checked {
    /// The arguments with aliases renamed and, under `report`, unknown keys
    /// dropped.
    pub arguments: Map<String, Value>,
    /// Under `report`: the dropped keys (identifier-like ones by name, any
    /// other as `"*"`), sorted.
    pub unknown_args: Vec<String>,
}

fn bound_violation(e: BoundError) -> Violation {
    let (constraint, message) = match e {
        BoundError::NotAnObject => ("type", "the arguments must be a JSON object".to_owned()),
        BoundError::TooLarge => (
            "maxSize",
            format!(
                "the arguments are larger than {} bytes serialized",
                bounds::MAX_ARGUMENT_BYTES
            ),
        ),
        BoundError::TooDeep => (
            "maxDepth",
            format!(
                "the arguments are nested deeper than {} levels",
                bounds::MAX_ARGUMENT_DEPTH
            ),
        ),
    };
    Violation {
        location: String::new(),
        constraint: constraint.to_owned(),
        expected: (e == BoundError::NotAnObject).then(|| vec!["object".to_owned()]),
        message,
        ..Violation::default()
    }
}

/// Steps 2 to 4 of the pipeline. Total: any value in, a verdict out.
pub fn check_arguments(
    schema: &CompiledSchema,
    policy: &ToolPolicy<'_>,
    arguments: Option<Value>,
) -> Result<Checked, ArgumentError> {
    let mut args =
        bounds::bound(arguments).map_err(|e| ArgumentError::new(vec![bound_violation(e)]))?;
    let mut violations = Vec::new();

    // Step 3: aliases. A renamed key is remembered, so that a violation
    // found under the canonical name is reported at the name the caller
    // used.
    let mut renamed: Vec<(&str, &str)> = Vec::new();
    for (alias, canonical) in policy.aliases {
        if !args.contains_key(alias) {
            continue;
        }
        if args.contains_key(canonical) {
            // The other name may itself have been an alias the caller used.
            let other = renamed
                .iter()
                .find(|(_, c)| c == canonical)
                .map_or(canonical.as_str(), |(a, _)| *a);
            violations.push(Violation {
                location: format!("/{}", render::escape_pointer(alias)),
                constraint: "alias".to_owned(),
                message: format!(
                    "`{alias}` and `{other}` name the same argument (`{alias}` is an alias of `{canonical}`); send only one of them"
                ),
                ..Violation::default()
            });
            // Known to the tool: it must not come back as "unexpected".
            args.remove(alias);
        } else if let Some(v) = args.remove(alias) {
            args.insert(canonical.clone(), v);
            renamed.push((alias, canonical));
        }
    }

    // Fast path: when the compiled validator closes the root itself, one
    // `is_valid` decides a valid call. Only a refusal (or, under `report`,
    // an unknown key) takes the long way below, which says why.
    if schema.closed_by_validator {
        let instance = Value::Object(args);
        if violations.is_empty() && schema.validator.is_valid(&instance) {
            let Value::Object(arguments) = instance else {
                unreachable_object()
            };
            return Ok(Checked {
                arguments,
                unknown_args: Vec::new(),
            });
        }
        let Value::Object(back) = instance else {
            unreachable_object()
        };
        args = back;
    }

    // Step 4a: the closed root. Unknown keys leave the instance either way,
    // so the schema's own root `additionalProperties: false` cannot report
    // them a second time.
    let mut unknown: Vec<String> = Vec::new();
    if !schema.root.open {
        let strays: Vec<String> = args
            .keys()
            .filter(|k| !schema.root.admits(k))
            .cloned()
            .collect();
        for key in strays {
            args.remove(&key);
            unknown.push(key);
        }
    }
    let mut unknown_args = Vec::new();
    if !unknown.is_empty() {
        match policy.unknown {
            UnknownArguments::Report => {
                unknown_args = unknown
                    .iter()
                    .map(|k| {
                        if is_nameable(k) {
                            k.clone()
                        } else {
                            "*".to_owned()
                        }
                    })
                    .collect();
                unknown_args.sort();
                unknown_args.dedup();
                if unknown_args.len() > MAX_VIOLATIONS {
                    let more = unknown_args.len() - MAX_VIOLATIONS;
                    unknown_args.truncate(MAX_VIOLATIONS);
                    unknown_args.push(format!("(and {more} more)"));
                }
            }
            UnknownArguments::Reject => violations.extend(unknown_key_violations(schema, &unknown)),
        }
    }

    // Step 4b: the schema. The fast path costs one `is_valid`.
    let instance = Value::Object(args);
    let mut unlisted = violations.len().saturating_sub(MAX_VIOLATIONS);
    violations.truncate(MAX_VIOLATIONS);
    if !schema.validator.is_valid(&instance) {
        let room = MAX_VIOLATIONS - violations.len();
        let (listed, more) =
            render::violations(schema.validator.iter_errors(&instance), room, &schema.names);
        violations.extend(listed);
        unlisted += more;
    }
    if !violations.is_empty() {
        for (alias, canonical) in &renamed {
            for v in &mut violations {
                speak_alias(v, alias, canonical);
            }
        }
        return Err(ArgumentError::with_unlisted(violations, unlisted));
    }
    let Value::Object(arguments) = instance else {
        // The instance was built as an object three lines up.
        return Err(ArgumentError::new(vec![bound_violation(
            BoundError::NotAnObject,
        )]));
    };
    Ok(Checked {
        arguments,
        unknown_args,
    })
}

/// Reports a violation found under `canonical` at `alias`, the name the
/// caller used: its location, and the name in its message.
fn speak_alias(v: &mut Violation, alias: &str, canonical: &str) {
    let (from, to) = (
        format!("/{}", render::escape_pointer(canonical)),
        format!("/{}", render::escape_pointer(alias)),
    );
    let under = v.location == from
        || v.location
            .strip_prefix(&from)
            .is_some_and(|rest| rest.starts_with('/'));
    if under {
        v.location = format!("{to}{}", &v.location[from.len()..]);
        v.message = v.message.replace(&format!("`{from}"), &format!("`{to}"));
    }
}

/// `Value::Object(map)` was built a few lines earlier; matching it back out
/// cannot fail.
#[cold]
fn unreachable_object() -> ! {
    unreachable!("an instance built as an object is an object")
}

fn unknown_key_violations(schema: &CompiledSchema, unknown: &[String]) -> Vec<Violation> {
    let mut out = Vec::new();
    let mut unnamed = 0usize;
    let mut names: Vec<&String> = unknown.iter().collect();
    names.sort();
    let mut unlisted = 0usize;
    for key in names {
        if !is_nameable(key) {
            unnamed += 1;
            continue;
        }
        // Past the cap a name is only counted: no suggestion is computed
        // and nothing is allocated for it.
        // Two places stay free for the two summaries below.
        if out.len() >= MAX_VIOLATIONS - 2 {
            unlisted += 1;
            continue;
        }
        let hint = schema.root.near_miss(key).map(str::to_owned);
        let message = match &hint {
            Some(h) => format!("unexpected argument `{key}` (did you mean `{h}`?)"),
            None => format!("unexpected argument `{key}`"),
        };
        out.push(Violation {
            location: format!("/{key}"),
            constraint: "additionalProperties".to_owned(),
            unexpected: Some(vec![key.clone()]),
            did_you_mean: hint,
            message,
            ..Violation::default()
        });
    }
    if unlisted > 0 {
        out.push(Violation {
            location: String::new(),
            constraint: "additionalProperties".to_owned(),
            message: format!("{unlisted} more unexpected argument(s) not listed"),
            ..Violation::default()
        });
    }
    if unnamed > 0 {
        out.push(Violation {
            location: String::new(),
            constraint: "additionalProperties".to_owned(),
            message: format!(
                "{unnamed} unexpected argument(s) whose names are not shown (not identifier-like, or shaped like a credential)"
            ),
            ..Violation::default()
        });
    }
    out
}
