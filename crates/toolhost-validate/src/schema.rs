//! Tool schemas: the install-time rules (docs/PROTOCOL.md §1) and compilation.
//!
//! A schema is compiled once, by the catalog, and shared behind an `Arc` by
//! every revision that declares the same canonical schema. Compilation never
//! touches the network: a `$ref` must point inside the schema itself.

use crate::known::RootKeys;
use jsonschema::{Draft, Validator};
use serde_json::Value;
use std::fmt;

/// Largest accepted schema, serialized compactly.
pub const MAX_SCHEMA_BYTES: usize = 64 * 1024;

/// Which schema rule was broken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SchemaRule {
    /// Over [`MAX_SCHEMA_BYTES`].
    TooLarge,
    /// The root is not `"type": "object"`.
    RootNotObject,
    /// `$schema` names a draft jsonschema does not know.
    UnknownDraft,
    /// A `$ref` that points outside the schema.
    RemoteRef,
    /// The schema is not valid against its meta-schema, or a keyword is
    /// malformed (a bad regex, say).
    DoesNotCompile,
}

impl SchemaRule {
    /// A short stable code, used in messages and tests.
    #[must_use]
    pub fn code(self) -> &'static str {
        match self {
            Self::TooLarge => "schema-size",
            Self::RootNotObject => "schema-root-object",
            Self::UnknownDraft => "schema-draft",
            Self::RemoteRef => "schema-remote-ref",
            Self::DoesNotCompile => "schema-compiles",
        }
    }
}

/// One broken schema rule, described for a plugin author.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaProblem {
    /// The rule.
    pub rule: SchemaRule,
    /// What is wrong and how to fix it. May quote the schema (it is the
    /// author's own declaration), never an argument.
    pub message: String,
}

impl fmt::Display for SchemaProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

fn problem(rule: SchemaRule, message: impl Into<String>) -> SchemaProblem {
    SchemaProblem {
        rule,
        message: message.into(),
    }
}

/// The most meta-schema problems reported for one schema.
const MAX_META_PROBLEMS: usize = 20;

/// Where `schema` breaks its draft's meta-schema, at most
/// [`MAX_META_PROBLEMS`], each naming its place ("at /properties/b/pattern")
/// and the rule, with any value masked.
fn meta_problems(schema: &Value, draft: Draft) -> Vec<SchemaProblem> {
    let meta = match draft {
        Draft::Draft4 => jsonschema::draft4::meta::validator(),
        Draft::Draft6 => jsonschema::draft6::meta::validator(),
        Draft::Draft7 => jsonschema::draft7::meta::validator(),
        Draft::Draft201909 => jsonschema::draft201909::meta::validator(),
        _ => jsonschema::draft202012::meta::validator(),
    };
    meta.iter_errors(schema)
        .take(MAX_META_PROBLEMS)
        .map(|e| located(&e))
        .collect()
}

/// Every `pattern` (and `patternProperties` key) of `v` that is not a
/// regular expression the validator accepts, with its place: the
/// meta-schema cannot say so, and a compile names only the first.
fn pattern_problems(v: &Value, draft: Draft, at: &mut String, out: &mut Vec<SchemaProblem>) {
    if out.len() >= MAX_META_PROBLEMS {
        return;
    }
    let bad = |p: &str| {
        jsonschema::options()
            .with_draft(draft)
            .build(&serde_json::json!({ "pattern": p }))
            .is_err()
    };
    match v {
        Value::Object(m) => {
            for (k, child) in m {
                let len = at.len();
                at.push('/');
                at.push_str(&k.replace('~', "~0").replace('/', "~1"));
                match (k.as_str(), child) {
                    ("pattern", Value::String(p)) if bad(p) => out.push(problem(
                        SchemaRule::DoesNotCompile,
                        format!("the schema does not compile: at {at}: not a regular expression"),
                    )),
                    ("patternProperties", Value::Object(props)) => {
                        for key in props.keys().filter(|k| bad(k)) {
                            out.push(problem(
                                SchemaRule::DoesNotCompile,
                                format!(
                                    "the schema does not compile: at {at}: a key is not a regular expression ({})",
                                    key.chars().take(64).collect::<String>()
                                ),
                            ));
                        }
                        pattern_problems(child, draft, at, out);
                    }
                    _ => pattern_problems(child, draft, at, out),
                }
                at.truncate(len);
            }
        }
        Value::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                let len = at.len();
                at.push('/');
                at.push_str(&i.to_string());
                pattern_problems(child, draft, at, out);
                at.truncate(len);
            }
        }
        _ => {}
    }
}

/// Where in the schema an error is: a JSON pointer, or "the root".
fn place(e: &jsonschema::ValidationError<'_>) -> String {
    let at = e.instance_path().to_string();
    if at.is_empty() {
        "the root".to_owned()
    } else {
        at
    }
}

/// A compile or meta-schema error as a problem naming its place in the
/// schema, the value masked.
fn located(e: &jsonschema::ValidationError<'_>) -> SchemaProblem {
    let at = place(e);
    problem(
        SchemaRule::DoesNotCompile,
        format!("the schema does not compile: at {at}: {}", e.masked()),
    )
}

/// The draft a schema declares with `$schema`; 2020-12 when it declares none.
fn draft_of(schema: &Value) -> Result<Draft, SchemaProblem> {
    let Some(uri) = schema.get("$schema") else {
        return Ok(Draft::Draft202012);
    };
    let Some(uri) = uri.as_str() else {
        return Err(problem(
            SchemaRule::UnknownDraft,
            "`$schema` must be a string URI",
        ));
    };
    let bare = uri
        .trim_end_matches('#')
        .trim_start_matches("https://")
        .trim_start_matches("http://");
    match bare {
        "json-schema.org/draft-04/schema" => Ok(Draft::Draft4),
        "json-schema.org/draft-06/schema" => Ok(Draft::Draft6),
        "json-schema.org/draft-07/schema" => Ok(Draft::Draft7),
        "json-schema.org/draft/2019-09/schema" => Ok(Draft::Draft201909),
        "json-schema.org/draft/2020-12/schema" => Ok(Draft::Draft202012),
        _ => Err(problem(
            SchemaRule::UnknownDraft,
            format!(
                "`$schema` is {uri:?}; supported drafts are 4, 6, 7, 2019-09 and 2020-12 \
                 (omit `$schema` for 2020-12)"
            ),
        )),
    }
}

/// Applies every install rule to one schema and returns all broken ones.
/// On success the schema also compiles; use [`CompiledSchema::compile`] to
/// keep the compiled form.
pub fn check_schema(schema: &Value) -> Result<(), Vec<SchemaProblem>> {
    CompiledSchema::compile(schema).map(|_| ())
}

/// A schema compiled for argument checking: the validator plus what the
/// closed-root rule needs to know about the root's declared keys.
pub struct CompiledSchema {
    /// For a closable root, compiled with `"additionalProperties": false`
    /// added at the root, so one `is_valid` also enforces the closed root.
    pub(crate) validator: Validator,
    pub(crate) root: RootKeys,
    /// Whether `validator` itself closes the root (see [`closable`]).
    pub(crate) closed_by_validator: bool,
    /// Whether every argument object the schema accepts is within the
    /// bounds of step 2 (see [`crate::extent`]): then valid arguments need
    /// no bounds walk.
    pub(crate) bounded_by_schema: bool,
    /// The declared names, for masking violation locations.
    pub(crate) names: crate::names::Declared,
}

/// Keywords at the root after which `additionalProperties: false` would not
/// mean "only the declared keys": composition and references (whose
/// properties that keyword ignores), and an explicit openness declaration.
const NOT_CLOSABLE: [&str; 15] = [
    "allOf",
    "anyOf",
    "oneOf",
    "not",
    "$ref",
    "$dynamicRef",
    "$recursiveRef",
    "if",
    "then",
    "else",
    "dependentSchemas",
    "dependencies",
    "additionalProperties",
    "unevaluatedProperties",
    "patternProperties",
];

/// Whether adding `"additionalProperties": false` at the root admits exactly
/// the keys the closed-root rule admits: the root declares its keys only in
/// `properties` (and lists no `required` name outside them).
fn closable(schema: &Value) -> bool {
    let Some(root) = schema.as_object() else {
        return false;
    };
    if NOT_CLOSABLE.iter().any(|k| root.contains_key(*k)) {
        return false;
    }
    let props = root.get("properties").and_then(Value::as_object);
    match root.get("required") {
        None => true,
        Some(Value::Array(req)) => req.iter().all(|r| {
            r.as_str()
                .is_some_and(|r| props.is_some_and(|p| p.contains_key(r)))
        }),
        Some(_) => false,
    }
}

impl fmt::Debug for CompiledSchema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CompiledSchema")
            .field("root", &self.root)
            .finish_non_exhaustive()
    }
}

impl CompiledSchema {
    /// Checks the install rules and compiles. All broken rules are returned
    /// at once, except that a schema failing a structural rule is not also
    /// compiled (its compile error would only repeat the cause).
    ///
    /// Kept whole on purpose: it gathers every problem of a schema (size,
    /// root type, dialect, remote references, then the compile) into one
    /// list, so an author sees them all at once, in a fixed order.
    pub fn compile(schema: &Value) -> Result<Self, Vec<SchemaProblem>> {
        let mut problems = Vec::new();
        let size = serde_json::to_vec(schema).map_or(usize::MAX, |b| b.len());
        if size > MAX_SCHEMA_BYTES {
            problems.push(problem(
                SchemaRule::TooLarge,
                format!("the schema is {size} bytes serialized; the limit is {MAX_SCHEMA_BYTES} (64 KiB)"),
            ));
        }
        if schema.get("type").and_then(Value::as_str) != Some("object") {
            problems.push(problem(
                SchemaRule::RootNotObject,
                "the schema's root must declare \"type\": \"object\" (tool arguments are a JSON object)",
            ));
        }
        let draft = match draft_of(schema) {
            Ok(d) => Some(d),
            Err(p) => {
                problems.push(p);
                None
            }
        };
        for r in crate::refs::Index::of(schema).remote() {
            problems.push(problem(
                SchemaRule::RemoteRef,
                format!(
                    "`$ref` {r:?} points outside the schema; only references that resolve inside it \
                     (\"#/$defs/...\", or the URI of its own `$id`) are allowed, schemas are never fetched"
                ),
            ));
        }
        let Some(draft) = draft else {
            return Err(problems);
        };
        if !problems.is_empty() {
            return Err(problems);
        }
        let closed_by_validator = closable(schema);
        let closed;
        let to_compile = if closed_by_validator {
            let mut c = schema.clone();
            if let Some(root) = c.as_object_mut() {
                root.insert("additionalProperties".to_owned(), Value::Bool(false));
            }
            closed = c;
            &closed
        } else {
            schema
        };
        // Every way the schema breaks its draft's meta-schema, each with its
        // place in the schema (a compile stops at the first); then what
        // only compiling finds (a pattern that is not a regular expression),
        // with its place too.
        let mut broken = meta_problems(schema, draft);
        pattern_problems(schema, draft, &mut String::new(), &mut broken);
        let built = jsonschema::options()
            .with_draft(draft)
            .should_validate_formats(true)
            .build(to_compile);
        let validator = match built {
            Ok(v) if broken.is_empty() => v,
            Ok(_) => return Err(broken),
            Err(e) => {
                // Once per place: the compile's first error is usually one
                // already found above.
                let at = format!("at {}:", place(&e));
                if !broken.iter().any(|p| p.message.contains(&at)) {
                    broken.push(located(&e));
                }
                return Err(broken);
            }
        };
        let root = RootKeys::of(schema, draft)
            .map_err(|m| vec![problem(SchemaRule::DoesNotCompile, m)])?;
        Ok(Self {
            validator,
            root,
            closed_by_validator,
            bounded_by_schema: closed_by_validator && crate::extent::root_is_within_bounds(schema),
            names: crate::names::Declared::of(schema),
        })
    }

    /// The top-level property names the schema declares, sorted. Used for
    /// alias checks at install and "did you mean" hints at call time.
    #[must_use]
    pub fn declared_properties(&self) -> &std::collections::BTreeSet<String> {
        &self.root.declared
    }

    /// Checks a value against the schema exactly as declared (no closed
    /// root, no aliases): how a plugin's structured result is checked against
    /// its output schema. Violations carry no values, as for arguments.
    pub fn check_value(&self, value: &Value) -> Result<(), crate::violation::ArgumentError> {
        // The closed variant would reject undeclared result keys; results
        // are checked as declared, so compile-time closing is undone here by
        // tolerating only root additionalProperties failures.
        if self.closed_by_validator {
            let errors: Vec<_> = self
                .validator
                .iter_errors(value)
                .filter(|e| {
                    !(e.instance_path().as_str().is_empty()
                        && e.kind().keyword() == "additionalProperties")
                })
                .collect();
            if errors.is_empty() {
                return Ok(());
            }
            let (listed, unlisted) = crate::render::violations(
                errors.into_iter(),
                crate::violation::MAX_VIOLATIONS,
                &self.names,
                crate::render::Subject::Output,
            );
            return Err(crate::violation::ArgumentError::with_unlisted(
                listed, unlisted,
            ));
        }
        if self.validator.is_valid(value) {
            return Ok(());
        }
        let (listed, unlisted) = crate::render::violations(
            self.validator.iter_errors(value),
            crate::violation::MAX_VIOLATIONS,
            &self.names,
            crate::render::Subject::Output,
        );
        Err(crate::violation::ArgumentError::with_unlisted(
            listed, unlisted,
        ))
    }

    /// `jsonschema`'s own verdict, for benchmarks that compare against the
    /// floor. The pipeline uses `check_arguments`.
    #[must_use]
    pub fn is_valid_raw(&self, instance: &Value) -> bool {
        self.validator.is_valid(instance)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rules(schema: Value) -> Vec<SchemaRule> {
        match CompiledSchema::compile(&schema) {
            Ok(_) => vec![],
            Err(p) => p.into_iter().map(|p| p.rule).collect(),
        }
    }

    #[test]
    fn an_output_that_breaks_its_schema_is_named_as_the_structured_content() {
        let out = CompiledSchema::compile(&json!({
            "type": "object",
            "additionalProperties": false,
            "required": ["count"],
            "properties": { "count": { "type": "integer" } }
        }))
        .unwrap_or_else(|_| panic!("compiles"));
        let e = out
            .check_value(&json!({"extra": 1}))
            .err()
            .map(|e| e.violations)
            .unwrap_or_default();
        let messages: Vec<&str> = e.iter().map(|v| v.message.as_str()).collect();
        assert!(
            messages
                .iter()
                .any(|m| m.starts_with("the structured content")),
            "{messages:?}"
        );
        assert!(
            messages.iter().all(|m| !m.contains("argument")),
            "{messages:?}"
        );
    }

    #[test]
    fn accepts_a_plain_object_schema() {
        assert_eq!(
            rules(json!({"type":"object","properties":{"a":{"type":"string"}}})),
            vec![]
        );
    }

    #[test]
    fn every_rule_fires() {
        assert_eq!(
            rules(json!({"type":"array"})),
            vec![SchemaRule::RootNotObject]
        );
        assert_eq!(
            rules(json!({"type":"object","$schema":"https://example.com/mine"})),
            vec![SchemaRule::UnknownDraft]
        );
        assert_eq!(
            rules(
                json!({"type":"object","properties":{"a":{"$ref":"https://example.com/a.json"}}})
            ),
            vec![SchemaRule::RemoteRef]
        );
        assert_eq!(
            rules(json!({"type":"object","properties":{"a":{"$ref":"other.json#/x"}}})),
            vec![SchemaRule::RemoteRef]
        );
        assert_eq!(
            rules(json!({"type":"object","properties":{"a":{"type":12}}})),
            vec![SchemaRule::DoesNotCompile]
        );
        let big: serde_json::Map<String, Value> = (0..4000)
            .map(|i| (format!("p{i:05}"), json!({"type":"string"})))
            .collect();
        assert_eq!(
            rules(json!({"type":"object","properties":big})),
            vec![SchemaRule::TooLarge]
        );
    }

    #[test]
    fn every_meta_schema_problem_is_reported_with_its_place() {
        let schema = json!({
            "type": "object",
            "properties": {
                "a": { "type": "strin" },
                "b": { "type": "string", "pattern": "(" },
                "c": { "type": "integer", "minimum": "five" }
            }
        });
        let problems = CompiledSchema::compile(&schema).expect_err("three problems");
        let text: Vec<&str> = problems.iter().map(|p| p.message.as_str()).collect();
        for at in [
            "/properties/a/type",
            "/properties/b/pattern",
            "/properties/c/minimum",
        ] {
            assert!(
                text.iter().any(|t| t.contains(&format!("at {at}:"))),
                "{at} missing from {text:?}"
            );
        }
        assert!(
            !text
                .iter()
                .any(|t| t.contains("five") || t.contains("strin\"")),
            "{text:?}"
        );
    }

    #[test]
    fn local_refs_compile() {
        let s = json!({
            "type":"object",
            "$defs":{"tag":{"type":"string"}},
            "properties":{"t":{"$ref":"#/$defs/tag"}}
        });
        assert_eq!(rules(s), vec![]);
    }

    #[test]
    fn drafts_are_honoured() {
        let d7 = json!({"$schema":"http://json-schema.org/draft-07/schema#","type":"object"});
        assert_eq!(rules(d7), vec![]);
    }
}
