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
///
/// ```
/// use serde_json::json;
/// use std::collections::BTreeMap;
/// use toolhost_validate::{CompiledSchema, ToolPolicy, UnknownArguments, check_arguments};
///
/// let schema = CompiledSchema::compile(&json!({
///     "type": "object",
///     "properties": { "text": { "type": "string", "maxLength": 100 } },
///     "required": ["text"]
/// }))
/// .expect("a sound schema");
/// let aliases = BTreeMap::from([("body".to_owned(), "text".to_owned())]);
/// let policy = ToolPolicy { aliases: &aliases, unknown: UnknownArguments::Reject };
///
/// // A declared alias is renamed before the schema sees it.
/// let checked = check_arguments(&schema, &policy, Some(json!({ "body": "hi" }))).unwrap();
/// assert_eq!(checked.arguments["text"], "hi");
///
/// // The root is closed to unknown keys, and the error a model reads
/// // names keys and rules, never a value.
/// let refused = check_arguments(&schema, &policy, Some(json!({ "txet": "my secret" })));
/// let error = refused.unwrap_err();
/// assert!(error.message.contains("did you mean `text`"), "{}", error.message);
/// assert!(!error.message.contains("my secret"));
///
/// // Not an object at all: refused before any schema work.
/// assert!(check_arguments(&schema, &policy, Some(json!("text"))).is_err());
/// ```
///
/// Kept whole on purpose: validation and the error report (keywords and paths
/// only, never a value) are one walk over the validator's errors.
pub fn check_arguments(
    schema: &CompiledSchema,
    policy: &ToolPolicy<'_>,
    arguments: Option<Value>,
) -> Result<Checked, ArgumentError> {
    // Fast path, for valid arguments: when the compiled validator closes
    // the root itself and no alias is in play, one `is_valid` decides the
    // schema, and the bounds walk follows it over memory `is_valid` has
    // just read. Only a refusal (or, under `report`, an unknown key) takes
    // the long way below, in step order, which says why; so the verdict
    // and its reasons are the same either way.
    let mut schema_refused = false;
    let arguments = match arguments {
        Some(Value::Object(map))
            if schema.closed_by_validator
                && !policy.aliases.keys().any(|a| map.contains_key(a)) =>
        {
            let instance = Value::Object(map);
            if schema.validator.is_valid(&instance) {
                let map = into_object(instance);
                if schema.bounded_by_schema {
                    // The schema itself bounds what it accepts.
                    return Ok(Checked {
                        arguments: map,
                        unknown_args: Vec::new(),
                    });
                }
                return match bounds::within(&map) {
                    Ok(()) => Ok(Checked {
                        arguments: map,
                        unknown_args: Vec::new(),
                    }),
                    Err(e) => Err(ArgumentError::new(vec![bound_violation(e)])),
                };
            }
            schema_refused = true;
            Some(instance)
        }
        other => other,
    };
    // Step 2: bounds.
    let mut args =
        bounds::bound(arguments).map_err(|e| ArgumentError::new(vec![bound_violation(e)]))?;
    // Step 3: aliases.
    let mut violations = Vec::new();
    let renamed = rename_aliases(&mut args, policy, &mut violations);
    // The same fast path, when aliases were renamed (the first one did not
    // run).
    if schema.closed_by_validator && violations.is_empty() && !schema_refused {
        let instance = Value::Object(args);
        if schema.validator.is_valid(&instance) {
            return Ok(Checked {
                arguments: into_object(instance),
                unknown_args: Vec::new(),
            });
        }
        args = into_object(instance);
    }
    // Step 4a: the closed root.
    let unknown = remove_strays(schema, &mut args);
    let unknown_args = match policy.unknown {
        UnknownArguments::Report => reported_names(&unknown),
        UnknownArguments::Reject => {
            violations.extend(unknown_key_violations(schema, &unknown));
            Vec::new()
        }
    };
    // Step 4b: the schema.
    let instance = Value::Object(args);
    let mut unlisted = violations.len().saturating_sub(MAX_VIOLATIONS);
    violations.truncate(MAX_VIOLATIONS);
    if !schema.validator.is_valid(&instance) {
        let room = MAX_VIOLATIONS - violations.len();
        let (listed, more) = render::violations(
            schema.validator.iter_errors(&instance),
            room,
            &schema.names,
            render::Subject::Arguments,
        );
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
    Ok(Checked {
        arguments: into_object(instance),
        unknown_args,
    })
}

/// Step 3: renames each alias the caller used to its canonical name, and
/// returns the renames, so that a violation found under the canonical name
/// is reported at the name the caller used. An alias given with its
/// canonical name is one violation naming both.
fn rename_aliases<'p>(
    args: &mut Map<String, Value>,
    policy: &ToolPolicy<'p>,
    violations: &mut Vec<Violation>,
) -> Vec<(&'p str, &'p str)> {
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
    renamed
}

/// Step 4a: takes the keys the closed root does not admit out of `args`
/// (either way they leave the instance, so the schema's own root
/// `additionalProperties: false` cannot report them a second time).
fn remove_strays(schema: &CompiledSchema, args: &mut Map<String, Value>) -> Vec<String> {
    if schema.root.open {
        return Vec::new();
    }
    let strays: Vec<String> = args
        .keys()
        .filter(|k| !schema.root.admits(k))
        .cloned()
        .collect();
    for key in &strays {
        args.remove(key);
    }
    strays
}

/// Report mode's `unknown_args`: nameable keys by name, others as `*`,
/// sorted, at most [`MAX_VIOLATIONS`] and a count of the rest.
fn reported_names(unknown: &[String]) -> Vec<String> {
    let mut names: Vec<String> = unknown
        .iter()
        .map(|k| {
            if is_nameable(k) {
                k.clone()
            } else {
                "*".to_owned()
            }
        })
        .collect();
    names.sort();
    names.dedup();
    if names.len() > MAX_VIOLATIONS {
        let more = names.len() - MAX_VIOLATIONS;
        names.truncate(MAX_VIOLATIONS);
        names.push(format!("(and {more} more)"));
    }
    names
}

/// The map of a `Value::Object` built a few lines earlier.
fn into_object(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => unreachable_object(),
    }
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
