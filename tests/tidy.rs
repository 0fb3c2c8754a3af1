//! Tidy checks, in the spirit of rust-analyzer's: the rules of the
//! codebase that no compiler enforces, checked on every test run.
//!
//! - ARCHITECTURE.md's crate table says exactly which of our crates each
//!   crate depends on (`cargo metadata` is the truth);
//! - no module of any crate depends, through others, on itself;
//! - the repository stands alone: nothing cites a design brief outside it.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests say what they expect

use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use toolhost_e2e::workspace_root;

/// Our crates each workspace member depends on (normal dependencies),
/// without the `toolhost-` prefix, by package name.
fn metadata_deps() -> BTreeMap<String, BTreeSet<String>> {
    let out = std::process::Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(workspace_root())
        .output()
        .expect("cargo metadata");
    let v: Value = serde_json::from_slice(&out.stdout).expect("cargo metadata output");
    let mut map = BTreeMap::new();
    for p in v["packages"].as_array().into_iter().flatten() {
        let name = p["name"].as_str().unwrap_or_default().to_owned();
        let deps = p["dependencies"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|d| d["kind"].is_null())
            .filter_map(|d| d["name"].as_str())
            .filter_map(|n| n.strip_prefix("toolhost-"))
            .map(str::to_owned)
            .collect();
        map.insert(name, deps);
    }
    map
}

/// ARCHITECTURE.md's crate table: crate -> what its last column lists.
fn table_deps() -> BTreeMap<String, BTreeSet<String>> {
    let text =
        std::fs::read_to_string(workspace_root().join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let mut map = BTreeMap::new();
    let mut in_table = false;
    for line in text.lines() {
        if line.starts_with("| crate | owns | depends on |") {
            in_table = true;
            continue;
        }
        if in_table && !line.starts_with('|') {
            break;
        }
        if !in_table || line.starts_with("|---") {
            continue;
        }
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let (Some(first), Some(last)) = (cells.get(1), cells.get(cells.len().saturating_sub(2)))
        else {
            continue;
        };
        // "`toolhost-mcp`", "`toolhost` (binary)", "`toolhost-e2e` (`tests/`)".
        let name = first.split('`').nth(1).unwrap_or_default().to_owned();
        let deps = if *last == "nothing of ours" {
            BTreeSet::new()
        } else {
            last.split(',').map(|d| d.trim().to_owned()).collect()
        };
        map.insert(name, deps);
    }
    map
}

#[test]
fn the_architecture_table_lists_every_crate_with_its_exact_dependencies() {
    let actual = metadata_deps();
    let documented = table_deps();
    let mut wrong = Vec::new();
    for (name, deps) in &actual {
        match documented.get(name) {
            None => wrong.push(format!("{name} is missing from the table")),
            Some(d) if d != deps => wrong.push(format!(
                "{name}: the table says {d:?}, Cargo.toml says {deps:?}"
            )),
            Some(_) => {}
        }
    }
    for name in documented.keys() {
        if !actual.contains_key(name) {
            wrong.push(format!("{name} is in the table but not in the workspace"));
        }
    }
    assert!(
        wrong.is_empty(),
        "ARCHITECTURE.md has drifted:\n{}",
        wrong.join("\n")
    );
}

/// The top-level modules of a crate's `src/` and, for each, the sibling
/// modules it names as `crate::<module>`.
fn module_graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    collect_rs(src, &mut files);
    let module_of = |f: &Path| -> Option<String> {
        let rel = f.strip_prefix(src).ok()?;
        let first = rel.components().next()?.as_os_str().to_str()?.to_owned();
        let m = first.trim_end_matches(".rs").to_owned();
        (!matches!(m.as_str(), "lib" | "main" | "bin")).then_some(m)
    };
    let modules: BTreeSet<String> = files.iter().filter_map(|f| module_of(f)).collect();
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in &files {
        let Some(m) = module_of(f) else { continue };
        let text = std::fs::read_to_string(f).unwrap_or_default();
        // Only code outside the file's tests counts.
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        let used = graph.entry(m.clone()).or_default();
        for (i, _) in code.match_indices("crate::") {
            let rest = &code[i + "crate::".len()..];
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if modules.contains(&name) && name != m {
                used.insert(name);
            }
        }
    }
    graph
}

fn collect_rs(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            collect_rs(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// A cycle in `graph`, if there is one.
fn cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        n: &str,
        g: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|p| p == n) {
            let mut c = path[i..].to_vec();
            c.push(n.to_owned());
            return Some(c);
        }
        if done.contains(n) {
            return None;
        }
        path.push(n.to_owned());
        for next in g.get(n).into_iter().flatten() {
            if let Some(c) = visit(next, g, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(n.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|n| visit(n, graph, &mut Vec::new(), &mut done))
}

#[test]
fn no_module_depends_on_itself_through_others() {
    let root = workspace_root();
    let mut crates: Vec<PathBuf> = std::fs::read_dir(root.join("crates"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("src"))
        .collect();
    crates.push(root.join("plugins-example/notes/src"));
    for src in crates.iter().filter(|s| s.is_dir()) {
        if let Some(c) = cycle(&module_graph(src)) {
            panic!("a module cycle in {}: {}", src.display(), c.join(" -> "));
        }
    }
}

#[test]
fn the_cycle_check_finds_a_cycle() {
    let g = BTreeMap::from([
        ("a".to_owned(), BTreeSet::from(["b".to_owned()])),
        ("b".to_owned(), BTreeSet::from(["a".to_owned()])),
        ("c".to_owned(), BTreeSet::new()),
    ]);
    assert_eq!(cycle(&g), Some(vec!["a".into(), "b".into(), "a".into()]));
    let acyclic = BTreeMap::from([("a".to_owned(), BTreeSet::from(["b".to_owned()]))]);
    assert_eq!(cycle(&acyclic), None);
}

#[test]
fn the_repository_cites_nothing_outside_itself() {
    let root = workspace_root();
    let mut files = Vec::new();
    for dir in [
        "crates",
        "tests",
        "proto",
        "docs",
        "scripts",
        "plugins-example",
        ".ci",
    ] {
        collect_text(&root.join(dir), &mut files);
    }
    for f in [
        "README.md",
        "ARCHITECTURE.md",
        "BENCHMARKS.md",
        "RELIABILITY.md",
        "Cargo.toml",
    ] {
        files.push(root.join(f));
    }
    // Built from pieces, so this file does not cite what it looks for.
    let needles = [
        format!("{}{}", "SPEC", ".md"),
        format!("{}{}", "../", "shared"),
        format!("{} {}", "SPEC", "section"),
    ];
    let mut found = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap_or_default();
        for (n, line) in text.lines().enumerate() {
            if needles.iter().any(|k| line.contains(k.as_str())) {
                found.push(format!("{}:{}: {line}", f.display(), n + 1));
            }
        }
    }
    assert!(
        found.is_empty(),
        "cites outside the repository:\n{}",
        found.join("\n")
    );
}

fn collect_text(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        let name = e.file_name().to_string_lossy().into_owned();
        if matches!(
            name.as_str(),
            "target" | "gen" | "__pycache__" | "node_modules" | ".venv"
        ) {
            continue;
        }
        if p.is_dir() {
            collect_text(&p, out);
        } else if p.extension().is_some_and(|x| {
            ["rs", "md", "toml", "proto", "py", "sh", "json"]
                .contains(&x.to_string_lossy().as_ref())
        }) || p.extension().is_none()
        {
            out.push(p);
        }
    }
}
