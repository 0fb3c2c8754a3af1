//! jsonschema errors -> [`Violation`]s, built from the error's kind and
//! location only. `ValidationError`'s `Display` quotes the instance and is
//! deliberately never called here.

use crate::names::Declared;
use crate::names::is_nameable;
use crate::violation::Violation;
use jsonschema::ValidationError;
use jsonschema::error::{TypeKind, ValidationErrorKind as K};
use serde_json::Value;
use std::collections::BTreeMap;

/// Escapes one JSON pointer segment (RFC 6901).
pub(crate) fn escape_pointer(segment: &str) -> String {
    segment.replace('~', "~0").replace('/', "~1")
}

/// What a check looks at, for the root's name in its messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Subject {
    /// A call's arguments.
    Arguments,
    /// A result's structured content, against the tool's output schema.
    Output,
}

fn at(location: &str, subject: Subject) -> String {
    match (location.is_empty(), subject) {
        (true, Subject::Arguments) => "the argument object".to_owned(),
        (true, Subject::Output) => "the structured content".to_owned(),
        (false, _) => format!("`{location}`"),
    }
}

fn type_names(kind: &TypeKind) -> Vec<String> {
    match kind {
        TypeKind::Single(t) => vec![t.to_string()],
        TypeKind::Multiple(set) => set.iter().map(|t| t.to_string()).collect(),
    }
}

/// Converts errors, merging `required` errors per location (jsonschema
/// reports one per missing property) into one violation listing all names.
/// At most `room` violations are built; the rest are only counted (the
/// second value), so the answer does not grow with the input.
pub(crate) fn violations<'a>(
    errors: impl Iterator<Item = ValidationError<'a>>,
    room: usize,
    names: &Declared,
    subject: Subject,
) -> (Vec<Violation>, usize) {
    let mut out = Vec::new();
    let mut missing: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut unlisted = 0usize;
    for e in errors {
        if out.len() + missing.len() >= room {
            unlisted += 1;
            continue;
        }
        // Only declared names (and array indexes) are shown: the keys of
        // open maps are data.
        let location = names.mask(e.instance_path().as_str());
        if let K::Required { property } = e.kind() {
            missing
                .entry(location)
                .or_default()
                .push(property.as_str().unwrap_or("*").to_owned());
            continue;
        }
        out.push(one(e.kind(), location, subject));
    }
    for (location, mut names) in missing {
        names.sort();
        names.dedup();
        let list = names
            .iter()
            .map(|n| format!("`{n}`"))
            .collect::<Vec<_>>()
            .join(", ");
        out.push(Violation {
            message: format!(
                "{} is missing required properties: {list}",
                at(&location, subject)
            ),
            location,
            constraint: "required".to_owned(),
            missing: Some(names),
            ..Violation::default()
        });
    }
    out.sort_by(|a, b| (&a.location, &a.constraint).cmp(&(&b.location, &b.constraint)));
    (out, unlisted)
}

/// Kept whole on purpose: one `match` over every jsonschema error kind, so
/// a new kind is one arm beside its siblings.
fn one(kind: &K, location: String, subject: Subject) -> Violation {
    let place = at(&location, subject);
    let mut v = Violation {
        constraint: kind.keyword().to_owned(),
        ..Violation::default()
    };
    v.message = match kind {
        K::Type { kind } => {
            let names = type_names(kind);
            let m = format!("{place} must be of type {}", names.join(" or "));
            v.expected = Some(names);
            m
        }
        K::Enum { options } => {
            v.allowed = Some((**options).clone());
            format!("{place} must be one of the declared values: {options}")
        }
        K::Constant { expected_value } => {
            v.allowed = Some((**expected_value).clone());
            format!("{place} must be exactly {expected_value}")
        }
        K::Pattern { pattern } => {
            v.pattern = Some(pattern.clone());
            format!("{place} must match the pattern {pattern:?}")
        }
        K::Format { format } => {
            v.format = Some(format.clone());
            format!("{place} must be a valid {format:?}")
        }
        K::MaxLength { limit } => {
            bound(&mut v, *limit, &place, "must be at most", "characters long")
        }
        K::MinLength { limit } => bound(
            &mut v,
            *limit,
            &place,
            "must be at least",
            "characters long",
        ),
        K::MaxItems { limit } => bound(&mut v, *limit, &place, "must have at most", "items"),
        K::MinItems { limit } => bound(&mut v, *limit, &place, "must have at least", "items"),
        K::MaxProperties { limit } => {
            bound(&mut v, *limit, &place, "must have at most", "properties")
        }
        K::MinProperties { limit } => {
            bound(&mut v, *limit, &place, "must have at least", "properties")
        }
        K::Maximum { limit } => value_bound(&mut v, limit, &place, "at most"),
        K::Minimum { limit } => value_bound(&mut v, limit, &place, "at least"),
        K::ExclusiveMaximum { limit } => value_bound(&mut v, limit, &place, "less than"),
        K::ExclusiveMinimum { limit } => value_bound(&mut v, limit, &place, "greater than"),
        K::MultipleOf { multiple_of } => {
            v.limit = serde_json::Number::from_f64(*multiple_of).map(Value::Number);
            format!("{place} must be a multiple of {multiple_of}")
        }
        K::UniqueItems => format!("{place} must not contain duplicate items"),
        K::Contains => {
            format!("{place} must contain an item matching the declared `contains` schema")
        }
        K::AdditionalItems { limit } => {
            bound(&mut v, *limit as u64, &place, "must have at most", "items")
        }
        K::AdditionalProperties { unexpected } | K::UnevaluatedProperties { unexpected } => {
            unexpected_keys(&mut v, unexpected, &place)
        }
        K::UnevaluatedItems { .. } => format!("{place} has items the schema does not allow"),
        K::PropertyNames { .. } => format!("{place} has a property name the schema does not allow"),
        K::AnyOf { context } => format!(
            "{place} matches none of the {} alternatives (anyOf)",
            context.len()
        ),
        K::OneOfNotValid { context } => format!(
            "{place} matches none of the {} alternatives (oneOf)",
            context.len()
        ),
        K::OneOfMultipleValid { .. } => {
            format!("{place} matches more than one alternative (oneOf)")
        }
        K::Not { .. } => format!("{place} matches a schema it must not match (not)"),
        K::FalseSchema => format!("{place} is not allowed here"),
        K::ContentEncoding { content_encoding } => {
            format!("{place} must be encoded as {content_encoding:?}")
        }
        K::ContentMediaType { content_media_type } => {
            format!("{place} must be of media type {content_media_type:?}")
        }
        K::FromUtf8 { .. } => format!("{place} does not decode to UTF-8"),
        K::BacktrackLimitExceeded { .. } | K::RegexEngineFailure { .. } => {
            format!("{place} could not be checked against the declared pattern")
        }
        K::Required { .. } | K::Custom { .. } | K::Referencing(_) => {
            format!("{place} does not satisfy `{}`", kind.keyword())
        }
    };
    v.location = location;
    v
}

fn bound(v: &mut Violation, limit: u64, place: &str, verb: &str, unit: &str) -> String {
    v.limit = Some(Value::from(limit));
    format!("{place} {verb} {limit} {unit}")
}

fn value_bound(v: &mut Violation, limit: &Value, place: &str, relation: &str) -> String {
    v.limit = Some(limit.clone());
    format!("{place} must be {relation} {limit}")
}

/// Most unexpected keys one violation names.
const MAX_NAMED_KEYS: usize = 10;

fn unexpected_keys(v: &mut Violation, unexpected: &[String], place: &str) -> String {
    let named: Vec<String> = unexpected
        .iter()
        .filter(|k| is_nameable(k))
        .take(MAX_NAMED_KEYS)
        .cloned()
        .collect();
    let hidden = unexpected.len() - named.len();
    let mut m = format!("{place} has unexpected properties");
    if !named.is_empty() {
        let list = named
            .iter()
            .map(|n| format!("`{n}`"))
            .collect::<Vec<_>>()
            .join(", ");
        m.push_str(&format!(": {list}"));
    }
    if hidden > 0 {
        m.push_str(&format!(" ({hidden} not shown)"));
    }
    v.unexpected = Some(named);
    m
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn pointers_are_masked_segment_by_segment() {
        let names = Declared::of(&json!({
            "type": "object",
            "properties": {
                "tags": { "type": "array" },
                "settings": { "additionalProperties": { "properties": { "x": {} } } }
            }
        }));
        assert_eq!(names.mask(""), "");
        assert_eq!(names.mask("/tags/3"), "/tags/*", "no items declared");
        assert_eq!(names.mask("/settings/has space/x"), "/settings/*/x");
        assert_eq!(names.mask("/settings/harmless/x"), "/settings/*/x");
        assert_eq!(names.mask("/a~1b"), "/*");
    }
}
