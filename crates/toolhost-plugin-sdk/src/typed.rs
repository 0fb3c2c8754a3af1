//! Tools from types: a tool's arguments and result as Rust types, whose
//! JSON Schemas (schemars) the plugin states to toolhost. `toolhost schema
//! sync` writes them into the manifest's schema files, and `toolhost check
//! --start` fails when the two drift apart: the manifest stays the contract
//! toolhost checks and serves, and the code states the shape once.
//!
//! ```no_run
//! use toolhost_plugin_sdk::{Plugin, ToolCall, ToolError};
//!
//! /// Opens a ticket.
//! #[derive(serde::Deserialize, schemars::JsonSchema)]
//! struct CreateTicket {
//!     /// What is wrong or wanted, in one line.
//!     title: String,
//!     #[serde(default)]
//!     labels: Vec<String>,
//! }
//!
//! #[derive(serde::Serialize, schemars::JsonSchema)]
//! struct Ticket { id: u64, title: String }
//!
//! async fn create(args: CreateTicket, _call: ToolCall) -> Result<Ticket, ToolError> {
//!     Ok(Ticket { id: 1, title: args.title })
//! }
//!
//! fn main() -> std::process::ExitCode {
//!     Plugin::new().typed("create_ticket", create).run()
//! }
//! ```
//!
//! Doc comments become descriptions (the argument type's, the tool's); `#[serde(default)]` and `Option`
//! make a field optional; every object is closed to keys it does not
//! declare, as the other SDKs state them, so a misspelt key is an error the
//! agent reads rather than a value silently dropped.

use serde_json::Value;

/// The JSON Schema of `T`, as a manifest's schema file holds it: one
/// self-contained object (subschemas inlined), without `$schema` or the
/// type's name as a title, every object closed.
#[must_use]
pub fn schema_of<T: schemars::JsonSchema>() -> Value {
    let generator = schemars::generate::SchemaSettings::draft2020_12()
        .with(|s| s.inline_subschemas = true)
        .into_generator();
    let mut schema = generator.into_root_schema_for::<T>().to_value();
    if let Value::Object(root) = &mut schema {
        root.remove("$schema");
        root.remove("title");
        root.remove("description");
    }
    close(&mut schema);
    schema
}

/// The description a type's doc comment gives, when it has one.
#[must_use]
pub fn description_of<T: schemars::JsonSchema>() -> Option<String> {
    let generator = schemars::generate::SchemaSettings::draft2020_12().into_generator();
    generator
        .into_root_schema_for::<T>()
        .get("description")
        .and_then(Value::as_str)
        .map(str::to_owned)
}

fn close(v: &mut Value) {
    match v {
        Value::Object(o) => {
            let is_object = o.get("type").and_then(Value::as_str) == Some("object");
            if is_object && o.contains_key("properties") && !o.contains_key("additionalProperties")
            {
                o.insert("additionalProperties".into(), Value::Bool(false));
            }
            o.values_mut().for_each(close);
        }
        Value::Array(a) => a.iter_mut().for_each(close),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A label on a ticket.
    #[derive(schemars::JsonSchema, serde::Deserialize)]
    #[allow(dead_code)]
    struct Label {
        /// A short tag.
        name: String,
        #[serde(default)]
        color: Option<String>,
    }

    #[derive(schemars::JsonSchema, serde::Deserialize)]
    #[allow(dead_code)]
    struct Create {
        title: String,
        labels: Vec<Label>,
    }

    /// The bounds every SDK can state, as a Rust author writes them.
    #[derive(schemars::JsonSchema, serde::Deserialize)]
    #[allow(dead_code)]
    struct Constraints {
        #[schemars(range(min = 1, max = 100))]
        limit: u32,
        #[schemars(extend("exclusiveMinimum" = 0, "exclusiveMaximum" = 1))]
        ratio: f64,
        #[schemars(length(min = 1, max = 80))]
        title: String,
        #[schemars(regex(pattern = r"^[a-z]+$"))]
        slug: String,
        #[schemars(length(min = 1, max = 5))]
        tags: Vec<String>,
    }

    /// A schema without `format` (an annotation, not a rule; the SDKs
    /// differ in it) and with `required` in order.
    fn rules(v: &Value) -> Value {
        match v {
            Value::Object(o) => {
                let mut out: serde_json::Map<String, Value> = o
                    .iter()
                    .filter(|(k, _)| *k != "format")
                    .map(|(k, v)| (k.clone(), rules(v)))
                    .collect();
                if let Some(Value::Array(required)) = out.get_mut("required") {
                    required.sort_by_key(|r| r.as_str().map(str::to_owned));
                }
                Value::Object(out)
            }
            Value::Array(a) => Value::Array(a.iter().map(rules).collect()),
            other => other.clone(),
        }
    }

    /// The Python (pydantic, annotated_types, toolhost's own) and
    /// TypeScript (zod) SDKs' tests hold their schemas for the same bounds
    /// to the same file.
    #[test]
    fn the_same_constraints_give_the_same_schema_in_every_sdk() {
        let shared: Value =
            serde_json::from_str(include_str!("../../../sdk/constraints.schema.json"))
                .unwrap_or_default();
        assert!(shared.is_object());
        assert_eq!(rules(&schema_of::<Constraints>()), rules(&shared));
    }

    #[test]
    fn a_type_is_one_closed_self_contained_schema() {
        let s = schema_of::<Create>();
        assert_eq!(s["type"], "object");
        assert_eq!(s["additionalProperties"], false);
        assert!(
            s.get("$schema").is_none() && s.get("title").is_none() && s.get("$defs").is_none(),
            "{s}"
        );
        let label = &s["properties"]["labels"]["items"];
        assert_eq!(label["additionalProperties"], false, "{s}");
        assert_eq!(label["required"], serde_json::json!(["name"]));
        assert_eq!(label["properties"]["name"]["description"], "A short tag.");
        assert_eq!(
            description_of::<Label>().as_deref(),
            Some("A label on a ticket.")
        );
    }
}

#[cfg(test)]
mod template_shape {
    /// What `toolhost new`'s Rust template states; its schema file must be
    /// the same JSON as the other templates'.
    #[derive(schemars::JsonSchema, serde::Deserialize)]
    #[allow(dead_code)]
    struct Hello {
        /// Who to greet.
        #[serde(default = "world")]
        name: String,
    }

    fn world() -> String {
        "world".into()
    }

    #[test]
    fn the_templates_hello_states_the_shared_schema() {
        assert_eq!(
            super::schema_of::<Hello>(),
            serde_json::json!({
                "type": "object",
                "properties": {"name": {"type": "string", "description": "Who to greet.", "default": "world"}},
                "additionalProperties": false,
            })
        );
    }
}
