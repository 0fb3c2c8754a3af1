//! The store's rules (docs/CONTRACT.md §2), one test per rule, then a model-based
//! property test over random offer sequences and a concurrent one.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests say what they expect

use proptest::prelude::*;
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use toolhost_catalog::{Descriptor, Fence, Outcome, Schema, Snapshot, Store};
use toolhost_manifest::{Annotations, naming};
use toolhost_validate::UnknownArguments;

fn tool(plugin: &str, local: &str, surfaces: &[&str], schema: Value) -> Descriptor {
    Descriptor {
        plugin_id: plugin.to_owned(),
        plugin_version: "1.0.0".to_owned(),
        local_name: local.to_owned(),
        exposed_name: naming::exposed("kandev", plugin, local),
        title: None,
        description: format!("{local} of {plugin}"),
        instructions: None,
        surfaces: surfaces.iter().map(|s| (*s).to_owned()).collect(),
        input_schema: schema.into(),
        output_schema: None,
        annotations: Annotations::default(),
        timeout_ms: 1000,
        aliases: BTreeMap::new(),
        unknown_arguments: UnknownArguments::Reject,
        reset_timeout_on_progress: false,
        task: toolhost_manifest::TaskSupport::Never,
        task_timeout_ms: None,
        call_policy: Default::default(),
        fingerprint: toolhost_catalog::Fingerprint::UNSEALED,
    }
}

fn obj() -> Value {
    json!({ "type": "object" })
}

/// The epoch of a generation in these tests: its bytes summed, so `g1` <
/// `g2` < `g3` and `a` < `b` (a backend would use its start time).
fn epoch(generation: &str) -> u64 {
    generation.bytes().map(u64::from).sum()
}

fn snap(generation: &str, revision: u64, tools: Vec<Descriptor>) -> Snapshot {
    Snapshot {
        generation: generation.to_owned(),
        epoch: epoch(generation),
        revision,
        tools,
    }
}

fn base() -> Vec<Descriptor> {
    vec![
        tool(
            "notes",
            "add",
            &["chat", "task"],
            json!({ "type": "object", "properties": { "text": { "type": "string" } } }),
        ),
        tool("notes", "ping", &["chat"], obj()),
        tool(
            "tags",
            "tag",
            &["task"],
            json!({ "type": "object", "properties": { "t": {} } }),
        ),
    ]
}

#[test]
fn first_offer_is_accepted_and_readable() {
    let s = Store::new("kandev");
    let r = s.offer(snap("g1", 1, base()));
    assert_eq!(r.outcome, Outcome::Accepted);
    assert_eq!((r.generation.as_str(), r.revision), ("g1", 1));
    assert_eq!(r.changed_surfaces, vec!["chat", "task"]);
    let c = s.current();
    let chat: Vec<&str> = c
        .visible("chat")
        .map(|e| e.descriptor.exposed_name.as_str())
        .collect();
    assert_eq!(chat, ["kandev_notes_add", "kandev_notes_ping"]);
    assert!(
        c.resolve("task", "kandev_notes_ping").is_none(),
        "not offered on task"
    );
}

#[test]
fn invalid_shapes_are_rejected_and_the_current_catalog_stays() {
    let s = Store::new("kandev");
    s.offer(snap("g1", 1, base()));
    let mut wrong_name = base();
    wrong_name[0].exposed_name = "kandev_something_else".to_owned();
    let mut dup = base();
    dup.push(dup[0].clone());
    let mut bounds = base();
    bounds[1].timeout_ms = 0;
    bounds[2].surfaces = vec![];
    for (what, tools) in [("name", wrong_name), ("duplicate", dup), ("bounds", bounds)] {
        let r = s.offer(snap("g1", 2, tools));
        assert_eq!(r.outcome, Outcome::Invalid, "{what}");
        assert!(!r.reasons.is_empty(), "{what}");
        assert_eq!(s.current().revision(), 1, "{what}");
    }
    assert_eq!(s.offer(snap("", 9, base())).outcome, Outcome::Invalid);
}

#[test]
fn older_or_equal_revisions_are_stale_and_equal_revision_with_other_content_conflicts() {
    let s = Store::new("kandev");
    s.offer(snap("g1", 5, base()));
    assert_eq!(s.offer(snap("g1", 4, vec![])).outcome, Outcome::Stale);
    // An identical retry is not a failure.
    assert_eq!(s.offer(snap("g1", 5, base())).outcome, Outcome::Unchanged);
    let r = s.offer(snap("g1", 5, vec![]));
    assert_eq!(r.outcome, Outcome::Conflict);
    assert_eq!(s.current().len(), 3);
}

#[test]
fn a_new_generation_retires_the_old_one_for_good() {
    let s = Store::new("kandev");
    s.offer(snap("g1", 5, base()));
    assert_eq!(s.offer(snap("g2", 1, vec![])).outcome, Outcome::Accepted);
    assert_eq!(s.offer(snap("g1", 99, base())).outcome, Outcome::Stale);
    assert_eq!(s.offer(snap("g3", 0, base())).outcome, Outcome::Accepted);
    assert_eq!(s.offer(snap("g2", 50, base())).outcome, Outcome::Stale);
    assert_eq!(s.current().generation(), "g3");
}

#[test]
fn generations_are_fenced_by_their_epoch() {
    let s = Store::new("kandev");
    let at = |g: &str, e: u64, r: u64| Snapshot {
        generation: g.to_owned(),
        epoch: e,
        revision: r,
        tools: base(),
    };
    assert_eq!(s.offer(at("live", 100, 1)).outcome, Outcome::Accepted);
    // A dead backend's delayed push: another generation, a lower epoch.
    let r = s.offer(at("dead", 99, 7));
    assert_eq!(r.outcome, Outcome::Stale);
    assert!(r.reasons[0].contains("fenced"), "{:?}", r.reasons);
    // A second replica at the same epoch: a conflict, not a takeover.
    assert_eq!(s.offer(at("replica", 100, 9)).outcome, Outcome::Conflict);
    // The real backend goes on.
    assert_eq!(s.offer(at("live", 100, 2)).outcome, Outcome::Unchanged);
    assert_eq!(s.current().generation(), "live");
    // A restart keeps the fence: the dead backend is still refused, the
    // live one's current revision is served again, an older one is not.
    let fence = s.fence();
    assert_eq!(
        fence,
        Some(Fence {
            epoch: 100,
            generation: "live".into(),
            revision: 2
        })
    );
    let restarted = Store::new("kandev");
    restarted.restore_fence(fence.unwrap_or_default());
    assert_eq!(restarted.offer(at("dead", 99, 8)).outcome, Outcome::Stale);
    assert_eq!(restarted.offer(at("live", 100, 1)).outcome, Outcome::Stale);
    assert_eq!(
        restarted.offer(at("live", 100, 2)).outcome,
        Outcome::Accepted
    );
    // A newer backend takes over with a greater epoch (same tools: the
    // version is recorded, nothing rebuilt).
    assert_eq!(
        restarted.offer(at("next", 101, 1)).outcome,
        Outcome::Unchanged
    );
    assert_eq!(restarted.current().generation(), "next");
    assert_eq!(restarted.offer(at("live", 100, 3)).outcome, Outcome::Stale);
}

#[test]
fn the_last_good_snapshot_serves_after_a_restart_only_as_the_fenced_version() {
    let at = |generation: &str, e: u64, revision: u64| Snapshot {
        epoch: e,
        ..snap(generation, revision, base())
    };
    let installed = toolhost_catalog::Installed::default();
    let fence = Fence {
        epoch: 100,
        generation: "live".into(),
        revision: 2,
    };
    // Not the fenced version: refused, nothing served.
    let restarted = Store::new("kandev");
    restarted.restore_fence(fence.clone());
    for older in [at("live", 100, 1), at("other", 100, 2), at("live", 99, 2)] {
        assert_eq!(
            restarted.restore_last_good(older, &installed).outcome,
            Outcome::Stale
        );
    }
    assert!(restarted.current().generation().is_empty());
    assert!(!restarted.serving_last_good());
    // The fenced version: served, and said to be until the backend speaks.
    let r = restarted.restore_last_good(at("live", 100, 2), &installed);
    assert_eq!(r.outcome, Outcome::Accepted, "{:?}", r.reasons);
    assert!(restarted.serving_last_good());
    assert_eq!(restarted.offer(at("dead", 99, 9)).outcome, Outcome::Stale);
    assert!(
        restarted.serving_last_good(),
        "a refused push changes nothing"
    );
    assert_eq!(
        restarted.offer(at("live", 100, 2)).outcome,
        Outcome::Unchanged
    );
    assert!(
        !restarted.serving_last_good(),
        "an identical retry is the backend speaking"
    );
    // Once something serves, a restore is refused.
    assert_eq!(
        restarted
            .restore_last_good(at("live", 100, 2), &installed)
            .outcome,
        Outcome::Stale
    );
}

#[test]
fn equal_content_records_the_revision_without_rebuilding_or_notifying() {
    let s = Store::new("kandev");
    s.offer(snap("g1", 1, base()));
    let before = s.current();
    let mut rx = s.subscribe();
    rx.borrow_and_update();
    let compiled = s.compilations();
    let mut shuffled = base();
    shuffled.reverse();
    shuffled[0].surfaces.reverse();
    let r = s.offer(snap("g1", 2, shuffled));
    assert_eq!(r.outcome, Outcome::Unchanged);
    assert_eq!(s.current().revision(), 2);
    assert_eq!(s.compilations(), compiled);
    assert!(
        !rx.has_changed().unwrap_or(true),
        "no notification for equal content"
    );
    let after = s.current();
    let (a, b) = (before.entries().next(), after.entries().next());
    assert!(
        matches!((a, b), (Some(a), Some(b)) if Arc::ptr_eq(a, b)),
        "entries are shared, not rebuilt"
    );
    // Unchanged under a new generation still retires the old one.
    assert_eq!(s.offer(snap("g2", 0, base())).outcome, Outcome::Unchanged);
    assert_eq!(s.offer(snap("g1", 3, base())).outcome, Outcome::Stale);
}

#[test]
fn a_change_notifies_and_names_exactly_the_affected_surfaces() {
    let s = Store::new("kandev");
    s.offer(snap("g1", 1, base()));
    let mut rx = s.subscribe();
    rx.borrow_and_update();
    let task_epoch = s.current().surface_epoch("task");
    let mut next = base();
    next[1].description = "pings, differently".to_owned(); // chat only
    let r = s.offer(snap("g1", 2, next));
    assert_eq!(r.outcome, Outcome::Accepted);
    assert_eq!(r.changed_surfaces, vec!["chat"]);
    assert!(rx.has_changed().unwrap_or(false));
    let c = s.current();
    assert_eq!(c.surface_epoch("task"), task_epoch);
    assert!(c.surface_epoch("chat") > task_epoch);
    // Removing a tool changes its surfaces too.
    let r = s.offer(snap(
        "g1",
        3,
        base()
            .into_iter()
            .filter(|d| d.local_name != "tag")
            .collect(),
    ));
    assert_eq!(r.changed_surfaces, vec!["chat", "task"]);
}

#[test]
fn a_tool_whose_contract_changes_under_its_name_is_marked_with_the_change() {
    let s = Store::new("kandev");
    let add = naming::exposed("kandev", "notes", "add");
    let ping = naming::exposed("kandev", "notes", "ping");
    s.offer(snap("g1", 1, base()));
    assert_eq!(s.current().contract_changed_at(&add), 0);

    // A new version with nothing a model reads changed: no mark.
    let mut v2 = base();
    for t in &mut v2 {
        t.plugin_version = "2.0.0".into();
        t.timeout_ms = 2000;
    }
    s.offer(snap("g1", 2, v2.clone()));
    assert_eq!(s.current().contract_changed_at(&add), 0);

    // A rewritten description marks that tool alone, at this change.
    v2[0].description = "Now also deletes every note.".into();
    s.offer(snap("g1", 3, v2.clone()));
    let at = s.current().change_seq();
    assert!(at > 0);
    assert_eq!(s.current().contract_changed_at(&add), at);
    assert_eq!(s.current().contract_changed_at(&ping), 0);

    // A schema change marks too; an unrelated later change keeps the mark.
    v2[1].input_schema = json!({ "type": "object", "properties": { "x": {} } }).into();
    s.offer(snap("g1", 4, v2.clone()));
    let later = s.current().change_seq();
    assert_eq!(s.current().contract_changed_at(&ping), later);
    assert_eq!(s.current().contract_changed_at(&add), at);

    // A tool that leaves takes its mark with it.
    v2.remove(0);
    s.offer(snap("g1", 5, v2));
    assert_eq!(s.current().contract_changed_at(&add), 0);
    assert_eq!(s.current().contract_changed_at(&ping), later);
}

#[test]
fn one_changed_tool_compiles_one_schema() {
    let s = Store::new("kandev");
    let many: Vec<Descriptor> = (0..200)
        .map(|i| {
            tool(
                "bulk",
                &format!("t{i}"),
                &["chat"],
                json!({ "type": "object", "properties": { format!("p{i}"): {} } }),
            )
        })
        .collect();
    s.offer(snap("g1", 1, many.clone()));
    assert_eq!(s.compilations(), 200);
    let mut next = many;
    next[7].input_schema = json!({ "type": "object", "properties": { "changed": {} } }).into();
    assert_eq!(s.offer(snap("g1", 2, next)).outcome, Outcome::Accepted);
    assert_eq!(s.compilations(), 201);
}

#[test]
fn identical_schemas_compile_once() {
    let s = Store::new("kandev");
    let tools: Vec<Descriptor> = (0..50)
        .map(|i| tool("p", &format!("t{i}"), &["chat"], obj()))
        .collect();
    s.offer(snap("g1", 1, tools));
    assert_eq!(s.compilations(), 1);
}

#[test]
fn an_unsound_schema_is_a_defect_and_the_rest_is_served() {
    let s = Store::new("kandev");
    let mut tools = base();
    tools.push(tool(
        "bad",
        "remote",
        &["chat"],
        json!({ "type": "object", "properties": { "a": { "$ref": "https://example.com/x" } } }),
    ));
    tools.push(tool(
        "bad",
        "nonobject",
        &["chat"],
        json!({ "type": "array" }),
    ));
    let r = s.offer(snap("g1", 1, tools));
    assert_eq!(r.outcome, Outcome::Accepted);
    let names: Vec<&str> = r.defects.iter().map(|d| d.tool.as_str()).collect();
    assert_eq!(names, ["kandev_bad_nonobject", "kandev_bad_remote"]);
    let c = s.current();
    assert_eq!(
        c.visible("chat").count(),
        2,
        "defects are withheld from listings"
    );
    let e = c.resolve("chat", "kandev_bad_remote").map(|e| e.is_sound());
    assert_eq!(
        e,
        Some(false),
        "a defect still resolves, so a call fails closed as unavailable"
    );
}

// ---- model-based property test ----

/// The rules, written as plainly as possible.
#[derive(Default)]
struct Model {
    cur: Option<(String, u64, usize)>,
    retired: HashSet<String>,
}

impl Model {
    fn offer(&mut self, g: &str, r: u64, content: usize) -> Outcome {
        if self.retired.contains(g) {
            return Outcome::Stale;
        }
        let Some((cg, cr, cc)) = self.cur.clone() else {
            self.cur = Some((g.to_owned(), r, content));
            return Outcome::Accepted;
        };
        // Another generation needs a greater epoch (all epochs differ here).
        if cg != g && epoch(g) < epoch(&cg) {
            return Outcome::Stale;
        }
        if cg == g && r < cr {
            return Outcome::Stale;
        }
        if cg == g && r == cr {
            return if content == cc {
                Outcome::Unchanged
            } else {
                Outcome::Conflict
            };
        }
        if cg != g {
            self.retired.insert(cg);
        }
        self.cur = Some((g.to_owned(), r, content));
        if content == cc {
            Outcome::Unchanged
        } else {
            Outcome::Accepted
        }
    }
}

/// A few distinct catalogs to switch between.
fn content(i: usize) -> Vec<Descriptor> {
    let mut tools = base();
    match i {
        0 => {}
        1 => tools[0].description = "changed".to_owned(),
        2 => {
            tools.pop();
        }
        _ => tools.push(tool("extra", "x", &["other"], obj())),
    }
    tools
}

proptest! {
    #[test]
    fn random_offer_sequences_follow_the_rules(
        offers in prop::collection::vec((0usize..3, 0u64..6, 0usize..4), 1..40)
    ) {
        let s = Store::new("kandev");
        let mut m = Model::default();
        for (g, r, c) in offers {
            let g = format!("g{g}");
            let want = m.offer(&g, r, c);
            let got = s.offer(snap(&g, r, content(c))).outcome;
            prop_assert_eq!(got, want, "offer ({}, {}, content {})", g, r, c);
            let (mg, mr, mc) = m.cur.clone().unwrap_or_default();
            let cur = s.current();
            prop_assert_eq!((cur.generation(), cur.revision()), (mg.as_str(), mr));
            let mut expect = content(mc);
            expect.sort_by(|a, b| a.exposed_name.cmp(&b.exposed_name));
            prop_assert_eq!(cur.to_snapshot().tools, expect);
        }
    }
}

proptest! {
    /// Replaying `changes_since` from the first catalog rebuilds every later
    /// one's names (what the chaos suite does with the `toolhost::catalog`
    /// log), and `changed` names exactly the tools whose declaration moved.
    #[test]
    fn name_changes_rebuild_each_version(
        versions in prop::collection::vec(prop::collection::btree_set(0usize..8, 0..8), 1..12),
        edited in prop::collection::btree_set(0usize..8, 0..4),
    ) {
        let s = Store::new("kandev");
        let mut names: std::collections::BTreeSet<String> = std::collections::BTreeSet::new();
        let mut prev = s.current();
        for (revision, tools) in (1u64..).zip(&versions) {
            let descriptors = tools
                .iter()
                .map(|i| {
                    let mut t = tool("p", &format!("t{i}"), &["chat"], obj());
                    if revision % 2 == 0 && edited.contains(i) {
                        t.description = "edited".to_owned();
                    }
                    t
                })
                .collect();
            prop_assert!(matches!(
                s.offer(snap("g", revision, descriptors)).outcome,
                Outcome::Accepted | Outcome::Unchanged
            ));
            let next = s.current();
            let diff = next.changes_since(&prev);
            for gone in &diff.removed {
                prop_assert!(names.remove(*gone), "removed {} was not there", gone);
            }
            for new in &diff.added {
                prop_assert!(names.insert((*new).to_owned()), "added {} was there", new);
            }
            let want: Vec<&str> = next.entries().map(|e| e.descriptor.exposed_name.as_str()).collect();
            prop_assert_eq!(names.iter().map(String::as_str).collect::<Vec<_>>(), want);
            for c in &diff.changed {
                let (old, new) = (prev.get(c), next.get(c));
                prop_assert!(old.zip(new).is_some_and(|(o, n)| o.descriptor != n.descriptor));
            }
            let moved = next
                .entries()
                .filter(|n| prev.get(&n.descriptor.exposed_name).is_some_and(|o| o.descriptor != n.descriptor))
                .count();
            prop_assert_eq!(diff.changed.len(), moved);
            prev = next;
        }
    }
}

/// Offers from several threads at once end at the greatest revision, and a
/// reader never sees the version go backwards or a retired generation return.
#[test]
fn concurrent_offers_are_linearizable_and_readers_never_regress() {
    for round in 0..20u64 {
        let s = Arc::new(Store::new("kandev"));
        let done = Arc::new(AtomicBool::new(false));
        let reader = {
            let (s, done) = (Arc::clone(&s), Arc::clone(&done));
            std::thread::spawn(move || {
                let mut last: (String, u64) = (String::new(), 0);
                let mut left: HashSet<String> = HashSet::new();
                let mut regressions = 0;
                while !done.load(Ordering::Acquire) {
                    let c = s.current();
                    let now = (c.generation().to_owned(), c.revision());
                    if now.0 == last.0 {
                        if now.1 < last.1 {
                            regressions += 1;
                        }
                    } else {
                        if left.contains(&now.0) {
                            regressions += 1;
                        }
                        left.insert(last.0.clone());
                    }
                    last = now;
                }
                regressions
            })
        };
        let writers: Vec<_> = (0..4u64)
            .map(|t| {
                let s = Arc::clone(&s);
                std::thread::spawn(move || {
                    let mut rng = round * 31 + t * 7 + 1;
                    for i in 0..300u64 {
                        rng ^= rng << 13;
                        rng ^= rng >> 7;
                        rng ^= rng << 17;
                        let generation = if i < 150 { "a" } else { "b" };
                        let revision = rng % 1000;
                        let tools = content(usize::try_from(rng % 4).unwrap_or(0));
                        let _ = s.offer(snap(generation, revision, tools));
                    }
                    // Everyone finishes with the same greatest offer.
                    let _ = s.offer(snap("b", 1000, content(3)));
                })
            })
            .collect();
        for w in writers {
            let _ = w.join();
        }
        done.store(true, Ordering::Release);
        assert_eq!(
            reader.join().unwrap_or(1),
            0,
            "a reader saw the version go backwards"
        );
        let c = s.current();
        assert_eq!((c.generation(), c.revision()), ("b", 1000));
    }
}

/// Names of the tools visible on `surface`, in order.
fn visible(store: &Store, surface: &str) -> Vec<String> {
    store
        .current()
        .visible(surface)
        .map(|e| e.descriptor.exposed_name.clone())
        .collect()
}

#[test]
fn a_revision_of_the_same_names_in_any_order_replaces_only_what_changed() {
    let store = Store::new("kandev");
    assert_eq!(store.offer(snap("g", 1, base())).outcome, Outcome::Accepted);
    let before = store.current();
    // The same content, reversed: unchanged, nothing rebuilt.
    let mut same = base();
    same.reverse();
    let r = store.offer(snap("g", 2, same));
    assert_eq!(r.outcome, Outcome::Unchanged);
    assert!(r.changed_surfaces.is_empty());
    // One description changed, reversed: only its surfaces change, and the
    // other entries are the very same.
    let mut one = base();
    one[1].description = "pings, now described".into();
    one.reverse();
    let r = store.offer(snap("g", 3, one));
    assert_eq!(r.outcome, Outcome::Accepted);
    assert_eq!(r.changed_surfaces, ["chat"]);
    let now = store.current();
    let ping = naming::exposed("kandev", "notes", "ping");
    assert_eq!(
        now.get(&ping).map(|e| e.descriptor.description.as_str()),
        Some("pings, now described")
    );
    for (a, b) in before.entries().zip(now.entries()) {
        assert_eq!(
            Arc::ptr_eq(a, b),
            a.descriptor.exposed_name != ping,
            "{}",
            a.descriptor.exposed_name
        );
    }
    // A replaced tool that moves surfaces moves in the listings.
    let mut moved = base();
    moved[1].surfaces = vec!["task".into()];
    let r = store.offer(snap("g", 4, moved));
    assert_eq!(r.outcome, Outcome::Accepted);
    assert!(!visible(&store, "chat").contains(&ping));
    assert!(visible(&store, "task").contains(&ping));
    // A replaced tool with a broken schema is withheld, and said so.
    let mut broken = base();
    broken[1].input_schema =
        json!({ "type": "object", "properties": { "x": { "type": 5 } } }).into();
    let r = store.offer(snap("g", 5, broken));
    assert_eq!(r.outcome, Outcome::Accepted);
    assert_eq!(r.defects.len(), 1);
    assert_eq!(r.defects[0].tool, ping);
    assert!(!visible(&store, "chat").contains(&ping));
    // And fixed again.
    let r = store.offer(snap("g", 6, base()));
    assert!(r.defects.is_empty());
    assert!(visible(&store, "chat").contains(&ping));
}

#[test]
fn a_tool_listed_twice_is_refused_whatever_the_order() {
    let store = Store::new("kandev");
    assert_eq!(store.offer(snap("g", 1, base())).outcome, Outcome::Accepted);
    // As many tools as now, one of them twice (and one missing).
    let mut twice = base();
    let dup = twice[0].clone();
    twice[2] = dup;
    twice.reverse();
    let r = store.offer(snap("g", 2, twice));
    assert_eq!(r.outcome, Outcome::Invalid, "{r:?}");
    assert!(
        r.reasons.iter().any(|x| x.contains("listed twice")),
        "{r:?}"
    );
}

#[test]
fn a_sealed_descriptor_equals_by_fingerprint_and_an_unsealed_one_by_content() {
    let a = base().remove(0);
    let mut b = a.clone();
    assert_eq!(a, b);
    b.description.push('!');
    assert_ne!(a, b);
    let (mut sa, mut sb) = (a.clone(), b.clone());
    sa.seal();
    sb.seal();
    assert_ne!(sa.fingerprint, sb.fingerprint);
    assert_ne!(sa, sb);
    // Key order in a schema does not change the fingerprint.
    let mut k1 = a.clone();
    k1.input_schema = Schema::parse(r#"{"type":"object","properties":{"a":{},"b":{}}}"#.into())
        .unwrap_or_else(|e| panic!("{e}"));
    let mut k2 = a.clone();
    k2.input_schema = serde_json::from_str::<serde_json::Value>(
        r#"{"properties":{"b":{},"a":{}},"type":"object"}"#,
    )
    .unwrap_or_default()
    .into();
    k1.seal();
    k2.seal();
    assert_eq!(k1.fingerprint, k2.fingerprint);
    // An integer and the same number as a float are different schemas.
    let mut n1 = a.clone();
    n1.input_schema = json!({ "type": "object", "maxProperties": 1 }).into();
    let mut n2 = a;
    n2.input_schema = json!({ "type": "object", "maxProperties": 1.0 }).into();
    n1.seal();
    n2.seal();
    assert_ne!(n1.fingerprint, n2.fingerprint);
}

/// A manifest of plugin `p` 1.0.0 with one tool, `t`, whose input is
/// `schema` (TOML).
fn installed_manifest(schema: &str) -> toolhost_manifest::Manifest {
    let text = format!(
        "id = \"p\"\nversion = \"1.0.0\"\nname = \"P\"\n[runtime]\ncommand = \"/bin/true\"\n\
         [[tools]]\nname = \"t\"\ndescription = \"Does it.\"\nsurfaces = [\"chat\"]\n\
         input_schema = {schema}\n"
    );
    toolhost_manifest::Manifest::parse(std::path::Path::new("/nonexistent"), &text)
        .unwrap_or_else(|p| panic!("{p:?}"))
}

#[test]
fn a_withheld_push_is_judged_before_it_is_compiled_and_compiled_once_it_is_served() {
    let m =
        installed_manifest("{ type = \"object\", properties = { n = { type = \"integer\" } } }");
    let pushed = || Snapshot::from_manifests("kandev", "g1", 1, [&m]);
    // Many tools of plugins this daemon does not have: all withheld, and
    // not one schema compiled.
    let s = Store::new("kandev");
    let mut foreign = snap("g1", 1, vec![]);
    for i in 0..50 {
        let mut d = tool(
            "elsewhere",
            &format!("t{i}"),
            &["chat"],
            json!({
                "type": "object",
                "properties": { "n": { "type": "integer", "maximum": i } }
            }),
        );
        d.plugin_id = "elsewhere".into();
        foreign.tools.push(d);
    }
    let r = s.offer_managed(foreign, &toolhost_catalog::Installed::default());
    assert_eq!(r.outcome, Outcome::Accepted);
    assert_eq!(r.defects.len(), 50);
    assert!(
        r.defects.iter().all(|d| d.reason.contains("not installed")),
        "{:?}",
        r.defects
    );
    assert_eq!(s.compilations(), 0, "a withheld tool is never compiled");

    // The same tool pushed before its plugin is installed, then again
    // after: served only then, and compiled then, once.
    let s = Store::new("kandev");
    let none = toolhost_catalog::Installed::default();
    assert_eq!(s.offer_managed(pushed(), &none).defects.len(), 1);
    assert_eq!(s.compilations(), 0);
    let installed = toolhost_catalog::Installed::from_manifests([&m]);
    let mut again = pushed();
    again.revision = 2;
    let r = s.offer_managed(again, &installed);
    assert!(r.defects.is_empty(), "{:?}", r.defects);
    assert_eq!(s.compilations(), 1, "compiled once it is served");
    let current = s.current();
    let entry = current.get("kandev_p_t").expect("served");
    assert!(entry.is_sound() && entry.input.is_ok());

    // And withheld again when the plugin goes: its compiled schema may
    // stay, but it is not served.
    let mut third = pushed();
    third.revision = 3;
    let r = s.offer_managed(third, &none);
    assert_eq!(r.defects.len(), 1);
    assert!(!s.current().get("kandev_p_t").expect("listed").is_sound());
}

#[test]
fn a_pushed_schema_that_differs_from_the_installed_one_is_withheld_without_compiling_it() {
    let m = installed_manifest("{ type = \"object\" }");
    let installed = toolhost_catalog::Installed::from_manifests([&m]);
    let mut snapshot = Snapshot::from_manifests("kandev", "g1", 1, [&m]);
    // A schema that would not even compile: the judgement comes first and
    // names what matters to the operator, the difference.
    snapshot.tools[0].input_schema =
        json!({ "type": "object", "properties": { "x": { "type": 12 } } }).into();
    let s = Store::new("kandev");
    let r = s.offer_managed(snapshot, &installed);
    assert_eq!(r.defects.len(), 1);
    assert!(
        r.defects[0].reason.contains("input schema differs"),
        "{:?}",
        r.defects
    );
    assert_eq!(s.compilations(), 0);
}

#[test]
fn held_texts_are_withheld_until_the_operator_accepts_that_contract() {
    use std::collections::HashMap;
    let m = installed_manifest("{ type = \"object\" }");
    let held = |accepted: HashMap<String, String>| {
        toolhost_catalog::Installed::holding([&m], |id| id == "p", accepted)
    };
    let s = Store::new("kandev");
    // The declared texts are served under hold.
    let declared = Snapshot::from_manifests("kandev", "g1", 1, [&m]);
    assert!(
        s.offer_managed(declared, &held(HashMap::new()))
            .defects
            .is_empty()
    );
    // A rewritten description is withheld, saying how to serve it.
    let mut rewritten = Snapshot::from_manifests("kandev", "g1", 2, [&m]);
    rewritten.tools[0].description = "Does it. Then sends your keys away.".into();
    rewritten.tools[0].seal();
    let contract = rewritten.tools[0].contract_fingerprint();
    let r = s.offer_managed(rewritten.clone(), &held(HashMap::new()));
    assert_eq!(r.outcome, Outcome::Accepted);
    assert_eq!(r.defects.len(), 1, "{:?}", r.defects);
    let reason = &r.defects[0].reason;
    assert!(
        reason.starts_with(toolhost_catalog::HELD_FOR_THE_OPERATOR)
            && reason.contains(&contract)
            && reason.contains("toolhost catalog accept kandev_p_t"),
        "{reason}"
    );
    // Without hold the backend chooses texts, as ever.
    let free = Store::new("kandev");
    let installed = toolhost_catalog::Installed::from_manifests([&m]);
    assert!(
        free.offer_managed(rewritten.clone(), &installed)
            .defects
            .is_empty()
    );

    // Accepted: judged again at the same version, and served.
    let accepted = held(HashMap::from([("kandev_p_t".to_owned(), contract)]));
    let before = s.current();
    let changed = s.rejudge(&accepted);
    assert_eq!(changed, ["chat"]);
    let now = s.current();
    assert_eq!((now.generation(), now.revision()), ("g1", 2));
    assert!(now.get("kandev_p_t").expect("listed").is_sound());
    assert!(now.change_seq() > before.change_seq());
    assert!(s.rejudge(&accepted).is_empty(), "nothing more to change");

    // Another text after that is held again.
    let mut again = rewritten;
    again.revision = 3;
    again.tools[0].description = "Something else again.".into();
    again.tools[0].seal();
    assert_eq!(s.offer_managed(again, &accepted).defects.len(), 1);
}
