//! Argument checking as the pipeline sees it. Each test is one rule of
//! docs/CONTRACT.md §5, steps 2 to 4.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests say what they expect

use proptest::prelude::*;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use toolhost_validate::{
    ArgumentError, Checked, CompiledSchema, ToolPolicy, UnknownArguments, check_arguments,
};

fn compile(schema: Value) -> CompiledSchema {
    match CompiledSchema::compile(&schema) {
        Ok(c) => c,
        Err(p) => panic!("schema should compile: {p:?}"),
    }
}

fn check(schema: &CompiledSchema, args: Option<Value>) -> Result<Checked, ArgumentError> {
    let aliases = BTreeMap::new();
    check_arguments(
        schema,
        &ToolPolicy {
            aliases: &aliases,
            unknown: UnknownArguments::Reject,
        },
        args,
    )
}

fn err(r: Result<Checked, ArgumentError>) -> ArgumentError {
    match r {
        Ok(c) => panic!("expected refusal, got {c:?}"),
        Err(e) => e,
    }
}

/// Everything an error shows a model: the text and the structured form.
fn rendered(e: &ArgumentError) -> String {
    format!(
        "{} {}",
        e.message,
        serde_json::to_string(&e.violations).unwrap_or_default()
    )
}

const SECRET: &str = "S3CRET-canary-9f1c";
/// Keys are named when they look like identifiers (docs/CONTRACT.md §5); a key
/// that does not must never be shown, so key-position canaries carry a space.
const SECRET_KEY: &str = "S3CRET canary key";

fn add_note() -> CompiledSchema {
    compile(json!({
        "type": "object",
        "properties": {
            "text": { "type": "string", "minLength": 1, "maxLength": 10 },
            "tags": { "type": "array", "items": { "type": "string", "pattern": "^[a-z]+$" }, "maxItems": 2, "uniqueItems": true },
            "mode": { "enum": ["fast", "slow"] },
            "kind": { "const": "note" },
            "count": { "type": "integer", "minimum": 1, "maximum": 5, "multipleOf": 1 },
            "email": { "type": "string", "format": "email" },
            "choice": { "oneOf": [ { "type": "integer" }, { "type": "boolean" } ] },
            "either": { "anyOf": [ { "type": "integer" }, { "type": "boolean" } ] },
            "meta": { "type": "object", "properties": { "level": { "type": "integer" } }, "required": ["level"], "additionalProperties": false },
            "settings": { "type": "object", "additionalProperties": { "type": "string" } }
        },
        "required": ["text"]
    }))
}

#[test]
fn canary_secret_never_appears_for_any_keyword() {
    let s = add_note();
    let cases = [
        ("type", json!({ "text": 5, "count": SECRET })),
        ("required", json!({ "tags": [SECRET] })),
        ("enum", json!({ "text": "a", "mode": SECRET })),
        ("const", json!({ "text": "a", "kind": SECRET })),
        ("pattern", json!({ "text": "a", "tags": [SECRET] })),
        ("maxLength", json!({ "text": SECRET })),
        (
            "minLength",
            json!({ "text": "", "settings": { "k": SECRET } }),
        ),
        ("maximum", json!({ "text": "a", "count": 987_654_321 })),
        ("minimum", json!({ "text": "a", "count": -987_654_321 })),
        (
            "items/type",
            json!({ "text": "a", "tags": [{ "x": SECRET }] }),
        ),
        (
            "maxItems",
            json!({ "text": "a", "tags": ["a", "b", SECRET] }),
        ),
        (
            "uniqueItems",
            json!({ "text": "a", "tags": [SECRET, SECRET] }),
        ),
        ("oneOf", json!({ "text": "a", "choice": SECRET })),
        ("anyOf", json!({ "text": "a", "either": SECRET })),
        ("format", json!({ "text": "a", "email": SECRET })),
        (
            "nested required/additional",
            json!({ "text": "a", "meta": { SECRET_KEY: SECRET } }),
        ),
        (
            "open map value type",
            json!({ "text": "a", "settings": { SECRET_KEY: 1 } }),
        ),
        (
            "unknown top-level key",
            json!({ "text": "a", SECRET_KEY: SECRET }),
        ),
        ("not an object", json!([SECRET])),
    ];
    for (keyword, args) in cases {
        let e = err(check(&s, Some(args)));
        let shown = rendered(&e);
        assert!(
            !shown.contains(SECRET),
            "{keyword}: secret leaked in {shown}"
        );
        assert!(
            !shown.contains("canary"),
            "{keyword}: part of the secret leaked in {shown}"
        );
        assert!(
            !shown.contains("987654321"),
            "{keyword}: a number leaked in {shown}"
        );
        assert!(!e.violations.is_empty(), "{keyword}: no violation");
    }
    let huge = json!({ "text": SECRET.repeat(80_000) });
    assert!(!rendered(&err(check(&s, Some(huge)))).contains(SECRET));
}

#[test]
fn required_lists_every_missing_name_sorted_at_its_location() {
    let s = compile(json!({
        "type": "object",
        "properties": { "b": {}, "a": {}, "c": { "type": "object", "required": ["z", "y"] } },
        "required": ["b", "a", "c"]
    }));
    let e = err(check(&s, Some(json!({}))));
    let v = &e.violations[0];
    assert_eq!(v.location, "");
    assert_eq!(v.constraint, "required");
    assert_eq!(
        v.missing.as_deref(),
        Some(&["a".to_owned(), "b".to_owned(), "c".to_owned()][..])
    );

    let e = err(check(&s, Some(json!({ "a": 1, "b": 2, "c": {} }))));
    assert_eq!(e.violations[0].location, "/c");
    assert_eq!(
        e.violations[0].missing.as_deref(),
        Some(&["y".to_owned(), "z".to_owned()][..])
    );
}

#[test]
fn violations_carry_what_the_schema_declares() {
    let s = add_note();
    let e = err(check(&s, Some(json!({ "text": "a", "mode": "warp" }))));
    assert_eq!(e.violations[0].location, "/mode");
    assert_eq!(e.violations[0].constraint, "enum");
    assert_eq!(e.violations[0].allowed, Some(json!(["fast", "slow"])));

    let e = err(check(&s, Some(json!({ "text": "a", "count": 9 }))));
    assert_eq!(e.violations[0].constraint, "maximum");
    assert_eq!(e.violations[0].limit, Some(json!(5)));

    let e = err(check(&s, Some(json!({ "text": "a", "tags": ["A"] }))));
    assert_eq!(e.violations[0].location, "/tags/0");
    assert_eq!(e.violations[0].pattern.as_deref(), Some("^[a-z]+$"));

    let e = err(check(&s, Some(json!({ "text": 3 }))));
    assert_eq!(
        e.violations[0].expected.as_deref(),
        Some(&["string".to_owned()][..])
    );
}

#[test]
fn the_root_is_closed_and_near_misses_get_a_hint() {
    let s = add_note();
    let e = err(check(&s, Some(json!({ "text": "a", "txet": "b" }))));
    assert_eq!(e.violations.len(), 1);
    assert_eq!(e.violations[0].location, "/txet");
    assert_eq!(e.violations[0].constraint, "additionalProperties");
    assert_eq!(e.violations[0].did_you_mean.as_deref(), Some("text"));
    assert!(e.message.contains("did you mean `text`"));

    let e = err(check(
        &s,
        Some(json!({ "text": "a", "not an identifier!": 1 })),
    ));
    assert!(!rendered(&e).contains("not an identifier"));
}

#[test]
fn nested_objects_keep_their_declared_behaviour() {
    let s = add_note();
    assert!(
        check(
            &s,
            Some(json!({ "text": "a", "settings": { "anything": "goes", "x-y": "z" } }))
        )
        .is_ok()
    );
    let e = err(check(
        &s,
        Some(json!({ "text": "a", "meta": { "level": 1, "extra": 2 } })),
    ));
    assert_eq!(e.violations[0].location, "/meta");
    assert_eq!(
        e.violations[0].unexpected.as_deref(),
        Some(&["extra".to_owned()][..])
    );
}

#[test]
fn properties_declared_in_all_of_and_refs_are_known() {
    let s = compile(json!({
        "type": "object",
        "$defs": { "paging": { "properties": { "page": { "type": "integer" } } } },
        "allOf": [ { "properties": { "q": { "type": "string" } }, "required": ["q"] }, { "$ref": "#/$defs/paging" } ]
    }));
    assert!(check(&s, Some(json!({ "q": "x", "page": 2 }))).is_ok());
    let e = err(check(&s, Some(json!({ "q": "x", "pgae": 2 }))));
    assert_eq!(e.violations[0].location, "/pgae");
    assert_eq!(e.violations[0].did_you_mean.as_deref(), Some("page"));
}

#[test]
fn parameterless_tools_take_nothing_or_empty_and_refuse_any_field() {
    let s = compile(json!({ "type": "object" }));
    assert!(check(&s, None).is_ok());
    assert!(check(&s, Some(json!({}))).is_ok());
    let e = err(check(&s, Some(json!({ "x": 1 }))));
    assert_eq!(e.violations[0].location, "/x");
    let s = compile(json!({ "type": "object", "properties": {} }));
    assert!(check(&s, Some(json!({ "y": 1 }))).is_err());
}

#[test]
fn aliases_rename_and_both_present_fails() {
    let s = compile(
        json!({ "type": "object", "properties": { "max_results": { "type": "integer" } } }),
    );
    let aliases = BTreeMap::from([
        ("limit".to_owned(), "max_results".to_owned()),
        ("top_k".to_owned(), "max_results".to_owned()),
    ]);
    let policy = ToolPolicy {
        aliases: &aliases,
        unknown: UnknownArguments::Reject,
    };
    let ok = check_arguments(&s, &policy, Some(json!({ "limit": 3 })));
    assert_eq!(
        ok.map(|c| Value::Object(c.arguments)),
        Ok(json!({ "max_results": 3 }))
    );
    let e = err(check_arguments(
        &s,
        &policy,
        Some(json!({ "limit": 3, "max_results": 4 })),
    ));
    // Both given: the error names both, and nothing else.
    assert_eq!(e.violations.len(), 1, "{:?}", e.violations);
    assert_eq!(e.violations[0].constraint, "alias");
    assert_eq!(e.violations[0].location, "/limit");
    assert!(
        e.message.contains("`limit` and `max_results`") && !e.message.contains("did you mean"),
        "{}",
        e.message
    );
    // An alias is validated under its canonical name's schema, and a
    // violation is reported at the name the caller used.
    let e = err(check_arguments(
        &s,
        &policy,
        Some(json!({ "top_k": SECRET })),
    ));
    assert_eq!(e.violations[0].location, "/top_k");
    assert!(e.message.contains("`/top_k`"), "{}", e.message);
    assert!(!e.message.contains("max_results"), "{}", e.message);
    assert!(!rendered(&e).contains(SECRET));
}

#[test]
fn report_drops_unknown_keys_and_lists_them() {
    let s = compile(json!({ "type": "object", "properties": { "q": { "type": "string" } } }));
    let aliases = BTreeMap::new();
    let policy = ToolPolicy {
        aliases: &aliases,
        unknown: UnknownArguments::Report,
    };
    let c = match check_arguments(
        &s,
        &policy,
        Some(json!({ "q": "x", "zeta": 1, "alpha": 2, "bad key": 3 })),
    ) {
        Ok(c) => c,
        Err(e) => panic!("{e}"),
    };
    assert_eq!(Value::Object(c.arguments), json!({ "q": "x" }));
    assert_eq!(c.unknown_args, vec!["*", "alpha", "zeta"]);
}

#[test]
fn bounds_come_first() {
    let s = add_note();
    let e = err(check(&s, Some(json!("text"))));
    assert_eq!(e.violations[0].constraint, "type");
    let mut deep = json!("x");
    for _ in 0..70 {
        deep = json!({ "d": deep });
    }
    let e = err(check(&s, Some(json!({ "text": "a", "settings": deep }))));
    assert_eq!(e.violations[0].constraint, "maxDepth");
}

/// Arguments the schema accepts are still held to the bounds: the fast
/// path (`is_valid` first) checks them after the schema, with the same
/// answer as the steps in order.
#[test]
fn schema_valid_arguments_are_still_bounded() {
    let s = compile(
        json!({ "type": "object", "properties": { "blob": {}, "n": { "type": "integer" } } }),
    );
    let mut deep = json!("x");
    for _ in 0..70 {
        deep = json!([deep]);
    }
    let e = err(check(&s, Some(json!({ "blob": deep }))));
    assert_eq!(e.violations[0].constraint, "maxDepth");
    let big = "x".repeat(toolhost_validate::bounds::MAX_ARGUMENT_BYTES);
    let e = err(check(&s, Some(json!({ "blob": big }))));
    assert_eq!(e.violations[0].constraint, "maxSize");
    // Both broken: the bounds are named, as when they were checked first.
    let e = err(check(
        &s,
        Some(
            json!({ "blob": "x".repeat(toolhost_validate::bounds::MAX_ARGUMENT_BYTES), "n": "no" }),
        ),
    ));
    assert_eq!(e.violations.len(), 1);
    assert_eq!(e.violations[0].constraint, "maxSize");
}

// ---- "the validator and the schema never drift" ----

/// A property's type, with one way to satisfy it and one way to break it.
#[derive(Debug, Clone)]
enum Prop {
    Str { max: u64 },
    Int { min: i64, max: i64 },
    Enum(Vec<String>),
    Bool,
    Arr { max_items: u64 },
    Obj(Vec<(String, Prop, bool)>),
}

impl Prop {
    fn schema(&self) -> Value {
        match self {
            Prop::Str { max } => json!({ "type": "string", "maxLength": max }),
            Prop::Int { min, max } => json!({ "type": "integer", "minimum": min, "maximum": max }),
            Prop::Enum(v) => json!({ "enum": v }),
            Prop::Bool => json!({ "type": "boolean" }),
            Prop::Arr { max_items } => {
                json!({ "type": "array", "items": { "type": "string" }, "maxItems": max_items })
            }
            Prop::Obj(props) => object_schema(props),
        }
    }

    fn valid(&self) -> Value {
        match self {
            Prop::Str { max } => json!("s".repeat(usize::try_from(*max).unwrap_or(0).min(3))),
            Prop::Int { min, .. } => json!(min),
            Prop::Enum(v) => json!(v[0]),
            Prop::Bool => json!(true),
            Prop::Arr { .. } => json!([]),
            Prop::Obj(props) => valid_instance(props),
        }
    }

    /// An instance breaking exactly one rule, and the location and keyword
    /// that rule is reported under.
    fn broken(&self, here: &str) -> (Value, String, &'static str) {
        let n = |u: u64| usize::try_from(u).unwrap_or(0);
        match self {
            Prop::Str { max } => (json!("s".repeat(n(*max) + 1)), here.to_owned(), "maxLength"),
            Prop::Int { max, .. } => (json!(max + 1), here.to_owned(), "maximum"),
            Prop::Enum(_) => (json!("NOT-DECLARED"), here.to_owned(), "enum"),
            Prop::Bool => (json!("true"), here.to_owned(), "type"),
            Prop::Arr { max_items } => (
                json!(vec!["a"; n(*max_items) + 1]),
                here.to_owned(),
                "maxItems",
            ),
            Prop::Obj(props) => {
                let mut inst = valid_instance(props);
                let (name, p, required) = &props[0];
                if *required {
                    if let Some(o) = inst.as_object_mut() {
                        o.remove(name);
                    }
                    (inst, here.to_owned(), "required")
                } else {
                    let (bad, loc, kw) = p.broken(&format!("{here}/{name}"));
                    if let Some(o) = inst.as_object_mut() {
                        o.insert(name.clone(), bad);
                    }
                    (inst, loc, kw)
                }
            }
        }
    }
}

fn object_schema(props: &[(String, Prop, bool)]) -> Value {
    let properties: serde_json::Map<String, Value> = props
        .iter()
        .map(|(n, p, _)| (n.clone(), p.schema()))
        .collect();
    let required: Vec<&String> = props
        .iter()
        .filter(|(_, _, r)| *r)
        .map(|(n, _, _)| n)
        .collect();
    json!({ "type": "object", "properties": properties, "required": required })
}

fn valid_instance(props: &[(String, Prop, bool)]) -> Value {
    Value::Object(
        props
            .iter()
            .map(|(n, p, _)| (n.clone(), p.valid()))
            .collect(),
    )
}

fn arb_prop() -> impl Strategy<Value = Prop> {
    let leaf = prop_oneof![
        (0u64..5).prop_map(|max| Prop::Str { max }),
        (-5i64..5, 0i64..5).prop_map(|(min, span)| Prop::Int {
            min,
            max: min + span
        }),
        prop::collection::btree_set("[a-z]{1,5}", 1..4)
            .prop_map(|s| Prop::Enum(s.into_iter().collect())),
        Just(Prop::Bool),
        (0u64..3).prop_map(|max_items| Prop::Arr { max_items }),
    ];
    leaf.prop_recursive(3, 16, 4, |inner| arb_props(inner).prop_map(Prop::Obj))
}

fn arb_props(
    inner: impl Strategy<Value = Prop>,
) -> impl Strategy<Value = Vec<(String, Prop, bool)>> {
    prop::collection::btree_map("[a-z]{1,6}", (inner, any::<bool>()), 1..5)
        .prop_map(|m| m.into_iter().map(|(k, (p, r))| (k, p, r)).collect())
}

fn arb_any() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<String>().prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(any::<String>(), inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn valid_instances_pass_and_each_single_break_is_located(
        props in arb_props(arb_prop()),
        pick in any::<prop::sample::Index>(),
    ) {
        let s = compile(object_schema(&props));
        prop_assert!(check(&s, Some(valid_instance(&props))).is_ok());

        let (name, p, required) = &props[pick.index(props.len())];
        let mut inst = valid_instance(&props);
        let (loc, kw) = if *required && pick.index(2) == 0 {
            if let Some(o) = inst.as_object_mut() { o.remove(name); }
            (String::new(), "required")
        } else {
            let (bad, loc, kw) = p.broken(&format!("/{name}"));
            if let Some(o) = inst.as_object_mut() { o.insert(name.clone(), bad); }
            (loc, kw)
        };
        match check(&s, Some(inst)) {
            Ok(_) => prop_assert!(false, "a broken instance passed ({kw} at {loc:?})"),
            Err(e) => prop_assert!(
                e.violations.iter().any(|v| v.location == loc && v.constraint == kw),
                "expected {} at {:?}, got {:?}", kw, loc, e.violations
            ),
        }
    }

    /// Whatever path decides, a closed schema's verdict is "within the
    /// bounds and valid by the schema", and a refusal names the bounds
    /// first when they are broken.
    #[test]
    fn the_verdict_is_bounds_then_schema(mut v in arb_any(), w in arb_any(), nest in 55usize..66) {
        // Near the depth limit, on either side of it.
        for _ in 0..nest {
            v = json!([v]);
        }
        let s = compile(json!({ "type": "object", "properties": {
            "any": {}, "list": { "type": "array", "items": { "type": ["string", "integer", "null", "boolean", "array", "object"] } }
        } }));
        let args = json!({ "any": v, "list": [w] });
        let in_bounds = args.as_object().is_some_and(|m| toolhost_validate::bounds::within(m).is_ok());
        let valid = s.is_valid_raw(&args);
        match check(&s, Some(args)) {
            Ok(_) => prop_assert!(in_bounds && valid),
            Err(e) => {
                prop_assert!(!(in_bounds && valid));
                let bound = matches!(e.violations[0].constraint.as_str(), "maxSize" | "maxDepth");
                prop_assert_eq!(bound, !in_bounds);
            }
        }
    }

    #[test]
    fn checking_is_total_and_never_echoes(v in arb_any(), secret in "[A-Z]{12}") {
        let s = add_note();
        let args = json!({
            "text": secret.clone(), "settings": { "k": v.clone() },
            "tags": [v.clone(), secret.clone()], "mode": v, "count": secret.clone()
        });
        if let Err(e) = check(&s, Some(args)) {
            prop_assert!(!rendered(&e).contains(&secret));
        }
    }
}

/// Inputs the fuzzers found, kept as regressions: checking never panics on
/// them, and no string value is shown unless it is part of a key that may be
/// named.
#[test]
fn fuzz_regressions() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz-regressions");
    let s = compile(
        json!({ "type": "object", "allOf": [ { "properties": { "q": { "type": "string", "format": "email" } } } ] }),
    );
    let mut seen = 0;
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let Ok(v) =
            serde_json::from_slice::<Value>(&std::fs::read(entry.path()).unwrap_or_default())
        else {
            continue;
        };
        seen += 1;
        if let Err(e) = check(&s, Some(v.clone())) {
            let shown = rendered(&e);
            let keys: Vec<&String> = v
                .as_object()
                .map(|m| m.keys().collect())
                .unwrap_or_default();
            for value in v
                .as_object()
                .into_iter()
                .flat_map(|m| m.values())
                .filter_map(Value::as_str)
            {
                if !keys.iter().any(|k| k.contains(value)) {
                    assert!(!shown.contains(value), "{value} shown in {shown}");
                }
            }
        }
    }
    assert!(seen > 0);
}
