//! Every directory under `tests/broken/` holds a manifest that breaks one
//! rule of docs/PROTOCOL.md §1 (or several, for `many-problems`), and an `EXPECT`
//! file with the rule codes it must be refused for. A new rule gets a new
//! directory here.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests say what they expect

use std::path::{Path, PathBuf};
use toolhost_manifest::{Manifest, Rule, check_set, expand_plugin_dirs};

fn cases(dir: &str) -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join(dir);
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&root)
        .map(|rd| {
            rd.filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| p.is_dir())
                .collect()
        })
        .unwrap_or_default();
    dirs.sort();
    dirs
}

#[test]
fn each_broken_manifest_fails_naming_its_rule() {
    let dirs = cases("broken");
    assert!(dirs.len() >= 35, "fixtures missing: {}", dirs.len());
    for dir in dirs {
        let name = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let expect = std::fs::read_to_string(dir.join("EXPECT")).unwrap_or_default();
        // A schema rule withholds its tool, not the plugin: such a
        // manifest loads, with the problem as a defect.
        let problems = match Manifest::load(&dir) {
            Ok(m) if !m.defects.is_empty() => m.defects,
            Ok(_) => panic!("{name}: accepted a broken manifest"),
            Err(p) => p,
        };
        let codes: Vec<&str> = problems.iter().map(|p| p.rule.code()).collect();
        for want in expect.trim().split(',') {
            assert!(
                codes.contains(&want),
                "{name}: expected rule {want}, got {problems:#?}"
            );
            let shown = problems
                .iter()
                .find(|p| p.rule.code() == want)
                .map(ToString::to_string)
                .unwrap_or_default();
            assert!(
                shown.contains(&format!("[{want}]")),
                "{name}: message does not name the rule: {shown}"
            );
            assert!(
                shown.contains("plugin.toml") || shown.contains(".json"),
                "{name}: message does not name the file: {shown}"
            );
        }
        if name != "many-problems" && name != "toml-syntax" {
            // A tool-level rule names the tool.
            for p in &problems {
                if p.rule.code().starts_with("tool-") || p.rule.code().starts_with("schema-") {
                    assert!(p.tool.is_some(), "{name}: {p} does not name its tool");
                }
            }
        }
    }
}

#[test]
fn a_broken_schema_withholds_its_tool_not_the_plugin() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/broken/schema-remote-ref");
    let m = match Manifest::load(&dir) {
        Ok(m) => m,
        Err(p) => panic!("the plugin was refused: {p:#?}"),
    };
    assert_eq!(m.tools.len(), 1, "the tool is kept, to be withheld");
    assert_eq!(m.defects.len(), 1, "{:#?}", m.defects);
    assert_eq!(m.defects[0].tool.as_deref(), Some("t"));
    assert_eq!(m.defects[0].rule.code(), "schema-remote-ref");
}

#[test]
fn several_problems_are_reported_at_once() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/broken/many-problems");
    let problems = Manifest::load(&dir).err().unwrap_or_default();
    assert!(problems.len() >= 5, "{problems:#?}");
}

#[test]
fn slug_collisions_fail_the_later_plugin_naming_both() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/broken-sets/collision");
    let (dirs, problems) = expand_plugin_dirs(&[root]);
    assert!(problems.is_empty());
    let set = check_set("kandev", &dirs);
    assert_eq!(set.plugins.len(), 1);
    assert_eq!(set.plugins[0].id, "plugin-a");
    assert_eq!(set.problems.len(), 1);
    let p = &set.problems[0];
    assert_eq!(p.rule, Rule::ExposedNameCollision);
    let shown = p.to_string();
    assert!(
        shown.contains("\"plugin-a\"") && shown.contains("\"plugin_a\""),
        "{shown}"
    );
    assert!(shown.contains("kandev_plugin_a_run"), "{shown}");
}

#[test]
fn duplicate_ids_fail_the_later_plugin() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/broken-sets/duplicate-id");
    let (dirs, _) = expand_plugin_dirs(&[root]);
    let set = check_set("kandev", &dirs);
    assert_eq!(set.plugins.len(), 1);
    assert_eq!(set.problems[0].rule, Rule::DuplicatePlugin);
}

#[test]
fn the_example_plugin_is_valid() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../plugins-example/notes");
    let m = match Manifest::load(&dir) {
        Ok(m) => m,
        Err(p) => panic!("{p:#?}"),
    };
    let names: Vec<String> = m
        .exposed_names("kandev")
        .into_iter()
        .map(|(_, e)| e)
        .collect();
    assert_eq!(
        names,
        [
            "kandev_notes_add_note",
            "kandev_notes_search_notes",
            "kandev_notes_configure",
            "kandev_notes_ping",
            "kandev_notes_export_notes",
            "kandev_notes_delete_notes",
            "kandev_notes_tidy_tags",
            "kandev_notes_add_notes",
        ]
    );
    assert_eq!(m.runtime.protocol, 2);
    assert!(m.tools[6].reset_timeout_on_progress);
    let search = &m.tools[1];
    assert!(search.annotations.read_only && !search.annotations.destructive);
    assert_eq!(
        search.aliases.get("top_k").map(String::as_str),
        Some("max_results")
    );
}

mod no_panic {
    use proptest::prelude::*;
    use std::path::Path;
    use toolhost_manifest::Manifest;

    /// Lines a manifest might contain, right or wrong, to recombine.
    const LINES: &[&str] = &[
        "id = \"x\"",
        "id = 3",
        "version = \"1.0.0\"",
        "version = \"v\"",
        "name = \"N\"",
        "[runtime]",
        "command = \"/bin/sh\"",
        "args = [1]",
        "env = { A = 1 }",
        "startup_timeout_ms = -1",
        "[[tools]]",
        "name = \"t\"",
        "name = \"T!\"",
        "description = \"d\"",
        "surfaces = [\"chat\"]",
        "surfaces = \"chat\"",
        "timeout_ms = 99999999999",
        "input_schema = { type = \"object\" }",
        "input_schema = 7",
        "input_schema_file = \"/etc/passwd\"",
        "output_schema = { type = \"object\", properties = { a = { type = 1 } } }",
        "annotations = { read_only = \"yes\" }",
        "aliases = { a = \"b\" }",
        "aliases = 3",
        "unknown_arguments = \"report\"",
        "tools = 5",
        "[tools]",
        "x = [[]]",
    ];

    proptest! {
        #[test]
        fn arbitrary_text_never_panics(s in ".{0,400}") {
            let _ = Manifest::parse(Path::new("/nonexistent"), &s);
        }

        #[test]
        fn recombined_lines_never_panic(idx in prop::collection::vec(0..LINES.len(), 0..24)) {
            let text: Vec<&str> = idx.iter().map(|i| LINES[*i]).collect();
            let _ = Manifest::parse(Path::new("/nonexistent"), &text.join("\n"));
        }
    }
}
