//! Questions to the user: the shape a plugin's question must have, and the
//! check an answer passes before the plugin sees it.
//!
//! MCP form elicitation asks for a flat object of primitive fields, so a
//! question's schema is held to exactly that ([`check_question`]); the
//! answer is then validated against it with the root closed
//! ([`check_answer`]), and a violation names fields, never values.

use crate::caller::{Answer, AnswerAction, Question};
use serde_json::{Map, Value};
use toolhost_validate::{CompiledSchema, ToolPolicy, UnknownArguments, Violation};

/// The longest question message.
pub const MAX_QUESTION_MESSAGE: usize = 4 * 1024;
/// The most fields a question may ask for.
pub const MAX_QUESTION_FIELDS: usize = 32;
/// The largest requested schema, serialized.
pub const MAX_QUESTION_SCHEMA_BYTES: usize = 16 * 1024;

const PRIMITIVE_TYPES: [&str; 4] = ["string", "number", "integer", "boolean"];
const FIELD_KEYS: [&str; 13] = [
    "type",
    "title",
    "description",
    "default",
    "enum",
    "enumNames",
    "oneOf",
    "minLength",
    "maxLength",
    "pattern",
    "format",
    "minimum",
    "maximum",
];
const ROOT_KEYS: [&str; 6] = [
    "$schema",
    "type",
    "title",
    "description",
    "properties",
    "required",
];

/// A question that passed [`check_question`], with its schema compiled.
#[derive(Debug)]
pub struct CheckedQuestion {
    /// The question as the client will see it.
    pub question: Question,
    schema: CompiledSchema,
}

/// Checks a question's message and requested schema. The error is the
/// rule broken, naming no value.
///
/// Kept whole on purpose: one rule per line over a plugin's question, each
/// bounded before the next is read.
pub fn check_question(
    message: String,
    schema: Map<String, Value>,
) -> Result<CheckedQuestion, String> {
    if message.trim().is_empty() {
        return Err("the question's message is empty".into());
    }
    if message.len() > MAX_QUESTION_MESSAGE {
        return Err(format!(
            "the question's message is longer than {MAX_QUESTION_MESSAGE} bytes"
        ));
    }
    let size = serde_json::to_vec(&schema).map_or(usize::MAX, |b| b.len());
    if size > MAX_QUESTION_SCHEMA_BYTES {
        return Err(format!(
            "the requested schema is larger than {MAX_QUESTION_SCHEMA_BYTES} bytes"
        ));
    }
    if let Some(k) = schema.keys().find(|k| !ROOT_KEYS.contains(&k.as_str())) {
        return Err(format!(
            "the requested schema has a root keyword elicitation does not allow ({})",
            printable(k)
        ));
    }
    if schema.get("type").and_then(Value::as_str) != Some("object") {
        return Err("the requested schema's root must be {\"type\": \"object\"}".into());
    }
    let empty = Map::new();
    let props = match schema.get("properties") {
        None => &empty,
        Some(Value::Object(p)) => p,
        Some(_) => return Err("the requested schema's properties must be an object".into()),
    };
    if props.len() > MAX_QUESTION_FIELDS {
        return Err(format!(
            "the question asks for more than {MAX_QUESTION_FIELDS} fields"
        ));
    }
    for (name, field) in props {
        let Some(field) = field.as_object() else {
            return Err(format!("field {} is not a schema object", printable(name)));
        };
        if let Some(k) = field.keys().find(|k| !FIELD_KEYS.contains(&k.as_str())) {
            return Err(format!(
                "field {} uses a keyword elicitation does not allow ({}): fields are flat primitives",
                printable(name),
                printable(k)
            ));
        }
        let primitive = field
            .get("type")
            .and_then(Value::as_str)
            .is_some_and(|t| PRIMITIVE_TYPES.contains(&t));
        if !primitive {
            return Err(format!(
                "field {} must have type string, number, integer or boolean",
                printable(name)
            ));
        }
    }
    let names_only_fields = |req: &[Value]| {
        req.iter()
            .all(|r| r.as_str().is_some_and(|r| props.contains_key(r)))
    };
    match schema.get("required") {
        None => {}
        Some(Value::Array(req)) if names_only_fields(req) => {}
        Some(Value::Array(_)) => return Err("`required` may name only the requested fields".into()),
        Some(_) => return Err("`required` must be an array of field names".into()),
    }
    let value = Value::Object(schema);
    let compiled = CompiledSchema::compile(&value).map_err(|problems| {
        let first = problems
            .first()
            .map_or_else(String::new, |p| p.message.clone());
        format!("the requested schema does not compile: {first}")
    })?;
    let Value::Object(requested_schema) = value else {
        return Err("the requested schema must be an object".into());
    };
    Ok(CheckedQuestion {
        question: Question {
            message,
            requested_schema,
        },
        schema: compiled,
    })
}

/// Checks an answer against the question: an accepted answer's content
/// must be an object matching the requested schema, with no other fields.
/// Declined and cancelled answers carry no content.
pub fn check_answer(q: &CheckedQuestion, answer: Answer) -> Result<Answer, Vec<Violation>> {
    match answer.action {
        AnswerAction::Decline | AnswerAction::Cancel => Ok(Answer {
            action: answer.action,
            content: None,
        }),
        AnswerAction::Accept => {
            let content = answer.content.unwrap_or_else(|| Value::Object(Map::new()));
            let policy = ToolPolicy {
                aliases: &std::collections::BTreeMap::new(),
                unknown: UnknownArguments::Reject,
            };
            let checked = toolhost_validate::check_arguments(&q.schema, &policy, Some(content))
                .map_err(|e| e.violations)?;
            Ok(Answer {
                action: AnswerAction::Accept,
                content: Some(Value::Object(checked.arguments)),
            })
        }
    }
}

/// A field name from a plugin, quoted for an error: printable and short.
fn printable(name: &str) -> String {
    let clean: String = name
        .chars()
        .take(64)
        .map(|c| if c.is_control() { '?' } else { c })
        .collect();
    format!("{clean:?}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => Map::new(),
        }
    }

    fn confirm() -> CheckedQuestion {
        check_question(
            "Delete 3 notes?".into(),
            obj(json!({"type": "object", "properties": {"confirm": {"type": "boolean"}, "reason": {"type": "string", "maxLength": 20}}, "required": ["confirm"]})),
        )
        .unwrap()
    }

    #[test]
    fn flat_primitive_schemas_pass_and_nesting_does_not() {
        let _ = confirm();
        for bad in [
            json!({"type": "object", "properties": {"a": {"type": "object"}}}),
            json!({"type": "object", "properties": {"a": {"type": "array", "items": {"type": "string"}}}}),
            json!({"type": "object", "properties": {"a": {"type": "string", "properties": {}}}}),
            json!({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["b"]}),
            json!({"type": "string"}),
            json!({"type": "object", "allOf": []}),
        ] {
            assert!(
                check_question("q".into(), obj(bad.clone())).is_err(),
                "{bad}"
            );
        }
        assert!(check_question(" ".into(), obj(json!({"type": "object"}))).is_err());
    }

    #[test]
    fn answers_are_checked_and_violations_name_no_value() {
        let q = confirm();
        let ok = check_answer(
            &q,
            Answer {
                action: AnswerAction::Accept,
                content: Some(json!({"confirm": true})),
            },
        )
        .unwrap();
        assert_eq!(ok.content, Some(json!({"confirm": true})));
        let v = check_answer(
            &q,
            Answer {
                action: AnswerAction::Accept,
                content: Some(json!({"confirm": "SECRET-ANSWER"})),
            },
        )
        .unwrap_err();
        assert!(!format!("{v:?}").contains("SECRET-ANSWER"));
        assert!(
            check_answer(
                &q,
                Answer {
                    action: AnswerAction::Accept,
                    content: Some(json!({"confirm": true, "extra": 1}))
                }
            )
            .is_err()
        );
        assert!(
            check_answer(
                &q,
                Answer {
                    action: AnswerAction::Accept,
                    content: Some(json!({"confirm": true, "reason": "x".repeat(30)}))
                }
            )
            .is_err()
        );
        assert!(
            check_answer(
                &q,
                Answer {
                    action: AnswerAction::Accept,
                    content: None
                }
            )
            .is_err(),
            "a required field is missing"
        );
        let d = check_answer(
            &q,
            Answer {
                action: AnswerAction::Decline,
                content: Some(json!({"junk": 1})),
            },
        )
        .unwrap();
        assert_eq!(d.content, None);
    }
}
