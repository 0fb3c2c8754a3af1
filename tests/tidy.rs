//! Tidy checks, in the spirit of rust-analyzer's: the rules of the
//! codebase that no compiler enforces, checked on every test run.
//!
//! - ARCHITECTURE.md's crate table says exactly which of our crates each
//!   crate depends on (`cargo metadata` is the truth);
//! - no module of any crate depends, through others, on itself;
//! - the repository stands alone: nothing cites a design brief outside it;
//! - `toolhost.example.toml` carries every configuration key, and the
//!   README's command table every subcommand.

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

/// The `src/` of every crate of ours and of the example Rust plugin.
fn source_dirs() -> Vec<PathBuf> {
    let root = workspace_root();
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(root.join("crates"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("src"))
        .collect();
    dirs.push(root.join("plugins-example/notes/src"));
    dirs.sort();
    dirs.retain(|d| d.is_dir());
    dirs
}

#[test]
fn no_module_depends_on_itself_through_others() {
    for src in source_dirs() {
        if let Some(c) = cycle(&module_graph(&src)) {
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

/// The names a crate root (`lib.rs`, `main.rs`) defines: anything but
/// module declarations, imports and re-exports, and `fn main`.
fn root_definitions(root: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(root).unwrap_or_default();
    let code = text.split("#[cfg(test)]").next().unwrap_or_default();
    let mut found = Vec::new();
    let mut depth = 0usize;
    for line in code.lines() {
        let l = line.trim();
        if depth == 0 && !l.is_empty() && !l.starts_with("//") && !l.starts_with("#") {
            let item = l
                .trim_start_matches("pub(crate) ")
                .trim_start_matches("pub ");
            let allowed = item.starts_with("mod ")
                || item.starts_with("use ")
                || item.starts_with("fn main(")
                || item.starts_with("async fn main(")
                || item.starts_with('}');
            if !allowed {
                found.push(l.to_owned());
            }
        }
        depth = (depth + l.matches(['{', '(', '[']).count())
            .saturating_sub(l.matches(['}', ')', ']']).count());
    }
    found
}

/// Uses of `crate::<name>` (or `crate::{<name>, ...}`) in `code` where
/// `<name>` is not one of `modules`: an import running back up to the
/// crate root.
fn imports_up(code: &str, modules: &BTreeSet<String>) -> Vec<String> {
    let ident = |s: &str| -> String {
        s.trim_start()
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    let mut names = Vec::new();
    for (i, _) in code.match_indices("crate::") {
        let rest = &code[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let group = group.split('}').next().unwrap_or_default();
            // Only the first segment of each path in the group.
            let mut level = 0usize;
            let mut start = true;
            for part in group.split_inclusive([',', '{', '}']) {
                if start && level == 0 {
                    names.push(ident(part));
                }
                level += part.matches('{').count();
                level = level.saturating_sub(part.matches('}').count());
                start = part.ends_with(',');
            }
        } else {
            names.push(ident(rest));
        }
    }
    names
        .into_iter()
        .filter(|n| !n.is_empty() && n != "self" && !modules.contains(n))
        .collect()
}

#[test]
fn the_import_check_finds_names_from_the_root() {
    let modules = BTreeSet::from(["store".to_owned(), "catalog".to_owned()]);
    let code = "use crate::store::Store;\nuse crate::{catalog::Catalog, Fingerprint};\nlet x = crate::Snapshot::new();";
    assert_eq!(imports_up(code, &modules), ["Fingerprint", "Snapshot"]);
}

/// Every source directory whose crate root may hold only modules and
/// re-exports, with the root's file name.
fn crate_roots() -> Vec<(PathBuf, &'static str)> {
    let mut out = Vec::new();
    for src in source_dirs() {
        for file in ["lib.rs", "main.rs"] {
            if src.join(file).is_file() {
                out.push((src.clone(), file));
            }
        }
    }
    out
}

#[test]
fn crate_roots_declare_modules_and_submodules_import_nothing_from_them() {
    let mut wrong = Vec::new();
    for (src, root_file) in crate_roots() {
        let graph = module_graph(&src);
        let modules: BTreeSet<String> = graph.keys().cloned().collect();
        if modules.is_empty() {
            continue; // a one-file binary: nothing can run back up to it
        }
        for d in root_definitions(&src.join(root_file)) {
            wrong.push(format!("{}/{root_file} defines `{d}`", src.display()));
        }
        let mut files = Vec::new();
        collect_rs(&src, &mut files);
        for f in files {
            let rel = f.strip_prefix(&src).unwrap_or(&f);
            if rel == Path::new("lib.rs") || rel == Path::new("main.rs") || rel.starts_with("bin") {
                continue;
            }
            let text = std::fs::read_to_string(&f).unwrap_or_default();
            let code = text.split("#[cfg(test)]").next().unwrap_or_default();
            for name in imports_up(code, &modules) {
                wrong.push(format!(
                    "{} imports crate::{name} from its crate root",
                    f.display()
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "crate roots must only declare modules and re-export:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn every_crate_opens_with_a_doc_comment_saying_what_it_owns() {
    let mut wrong = Vec::new();
    for (src, root_file) in crate_roots() {
        let text = std::fs::read_to_string(src.join(root_file)).unwrap_or_default();
        let doc: Vec<&str> = text.lines().take_while(|l| l.starts_with("//!")).collect();
        if doc.len() < 3 {
            wrong.push(format!(
                "{}/{root_file}: no opening doc comment",
                src.display()
            ));
        }
        // Libraries say what they must not do.
        if root_file == "lib.rs"
            && !doc
                .iter()
                .any(|l| l.contains("must not") || l.contains("must never"))
        {
            wrong.push(format!(
                "{}/lib.rs: the doc does not say what the crate must not do",
                src.display()
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn only_the_sandbox_crate_uses_unsafe_and_every_other_forbids_it() {
    let mut wrong = Vec::new();
    for (src, root_file) in crate_roots() {
        let sandbox = src.ends_with("toolhost-sandbox/src");
        let root_text = std::fs::read_to_string(src.join(root_file)).unwrap_or_default();
        if !sandbox && !root_text.contains("#![forbid(unsafe_code)]") {
            wrong.push(format!(
                "{}/{root_file} does not forbid unsafe code",
                src.display()
            ));
        }
        let mut files = Vec::new();
        collect_rs(&src, &mut files);
        for f in files {
            let text = std::fs::read_to_string(&f).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            for (n, line) in lines.iter().enumerate() {
                let code = line.split("//").next().unwrap_or_default();
                if code.contains("unsafe ")
                    || code.contains("unsafe{")
                    || code.contains("allow(unsafe_code)")
                {
                    let noted = lines[n.saturating_sub(8)..n]
                        .iter()
                        .any(|l| l.contains("SAFETY:"));
                    if !sandbox {
                        wrong.push(format!("{}:{}: {line}", f.display(), n + 1));
                    } else if code.contains("unsafe {") && !noted {
                        wrong.push(format!(
                            "{}:{}: unsafe without a SAFETY note",
                            f.display(),
                            n + 1
                        ));
                    }
                }
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// ARCHITECTURE.md's layer picture: crate (without the `toolhost-`
/// prefix; the binary is `toolhost`) -> layer.
fn layers() -> BTreeMap<String, u32> {
    let text =
        std::fs::read_to_string(workspace_root().join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let mut map = BTreeMap::new();
    let mut in_picture = false;
    for line in text.lines() {
        // The picture starts at its top row: "<layer>  toolhost (binary)".
        let mut top = line.split_whitespace();
        if top.next().is_some_and(|n| n.parse::<u32>().is_ok())
            && top.next() == Some("toolhost")
            && top.next() == Some("(binary)")
        {
            in_picture = true;
        }
        if !in_picture {
            continue;
        }
        if line.starts_with("```") {
            break;
        }
        let mut words = line.split_whitespace();
        let Some(layer) = words.next().and_then(|w| w.parse::<u32>().ok()) else {
            continue;
        };
        for w in words.filter(|w| w.starts_with("toolhost")) {
            map.insert(w.to_owned(), layer);
        }
    }
    map
}

#[test]
fn the_layer_picture_holds_every_library_and_dependencies_point_down() {
    let deps = metadata_deps();
    let layers = layers();
    let beside = [
        "toolhost-bench",
        "toolhost-e2e",
        "notes-plugin",
        "tickets-plugin",
    ];
    let mut wrong = Vec::new();
    for (name, uses) in &deps {
        if beside.contains(&name.as_str()) {
            continue;
        }
        let Some(mine) = layers.get(name) else {
            wrong.push(format!("{name} is not in the layer picture"));
            continue;
        };
        for d in uses {
            let dep = format!("toolhost-{d}");
            match layers.get(&dep) {
                Some(theirs) if theirs < mine => {}
                Some(theirs) => wrong.push(format!(
                    "{name} (layer {mine}) depends on {dep} (layer {theirs}): dependencies point down"
                )),
                None => wrong.push(format!("{dep} is not in the layer picture")),
            }
        }
    }
    for name in layers.keys() {
        if !deps.contains_key(name) {
            wrong.push(format!("{name} is in the picture but not in the workspace"));
        }
    }
    assert!(
        wrong.is_empty(),
        "ARCHITECTURE.md's layer picture has drifted:\n{}",
        wrong.join("\n")
    );
}

/// FNV-1a, 64 bits: stable across Rust versions and platforms, which is all
/// a pin needs (it is no defence against anyone).
fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The hash of the wire contract that docs/PROTOCOL.md describes: every
/// file under `proto/` and the contract module, by path and content.
fn wire_contract_hash() -> String {
    let root = workspace_root();
    let mut files = Vec::new();
    collect_text(&root.join("proto"), &mut files);
    files.push(root.join("crates/toolhost-proto/src/contract.rs"));
    collect_rs(&root.join("crates/toolhost-proto/src/contract"), &mut files);
    let mut named: Vec<(String, Vec<u8>)> = files
        .iter()
        .map(|f| {
            let rel = f.strip_prefix(&root).unwrap_or(f).display().to_string();
            (rel, std::fs::read(f).expect("a contract file"))
        })
        .collect();
    named.sort();
    let mut all = Vec::new();
    for (name, bytes) in named {
        all.extend_from_slice(name.as_bytes());
        all.push(0);
        // Line endings do not change a contract.
        all.extend(bytes.into_iter().filter(|b| *b != b'\r'));
        all.push(0);
    }
    format!("{:016x}", fnv1a64(&all))
}

/// In the manner of rust-analyzer's `check_lsp_extensions_docs`: a change
/// to the wire contract fails this test until docs/PROTOCOL.md has been
/// read against it and its pinned hash updated.
#[test]
fn protocol_md_is_pinned_to_the_wire_contract() {
    let doc = std::fs::read_to_string(workspace_root().join("docs/PROTOCOL.md"))
        .expect("docs/PROTOCOL.md");
    let marker = "<!-- wire contract hash: ";
    let pinned = doc
        .lines()
        .find_map(|l| l.strip_prefix(marker))
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or("none");
    let actual = wire_contract_hash();
    assert_eq!(
        pinned, actual,
        "proto/ or crates/toolhost-proto/src/contract changed: check docs/PROTOCOL.md \
         against the change, then set its last line to `{marker}{actual} -->`"
    );
}

#[test]
fn the_documents_cite_no_issue_numbers() {
    // An issue number means nothing to a reader of the repository.
    let root = workspace_root();
    let mut found = Vec::new();
    for f in [
        "README.md",
        "ARCHITECTURE.md",
        "BENCHMARKS.md",
        "RELIABILITY.md",
        "docs/PROTOCOL.md",
        "docs/CONTRACT.md",
    ] {
        let text = std::fs::read_to_string(root.join(f)).unwrap_or_default();
        for (n, line) in text.lines().enumerate() {
            let lower = line.to_ascii_lowercase();
            let cites = lower.match_indices("issue ").any(|(i, _)| {
                lower[i + "issue ".len()..].starts_with(|c: char| c.is_ascii_digit())
            });
            if cites {
                found.push(format!("{f}:{}: {line}", n + 1));
            }
        }
    }
    assert!(
        found.is_empty(),
        "issue numbers cited:\n{}",
        found.join("\n")
    );
}

#[test]
fn a_long_source_file_says_why_it_is_whole() {
    let mut wrong = Vec::new();
    for (src, _) in crate_roots() {
        let mut files = Vec::new();
        collect_rs(&src, &mut files);
        // Test modules of their own (`foo/tests.rs`) read as documents.
        for f in files.into_iter().filter(|f| !f.ends_with("tests.rs")) {
            let text = std::fs::read_to_string(&f).unwrap_or_default();
            let code_lines = text
                .split("#[cfg(test)]")
                .next()
                .unwrap_or_default()
                .lines()
                .count();
            let doc: String = text
                .lines()
                .take_while(|l| l.starts_with("//!"))
                .collect::<Vec<_>>()
                .join(" ");
            if code_lines > 650 && !doc.contains("Kept in one file on purpose") {
                wrong.push(format!("{}: {code_lines} lines of code", f.display()));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "split these, or say in their opening comment why they are kept in one file:\n{}",
        wrong.join("\n")
    );
}

/// For every directory module (`foo/` beside or under `foo.rs` or
/// `foo/mod.rs`), its child modules and, for each, the siblings it names
/// as `super::<sibling>`.
fn nested_graphs(src: &Path) -> Vec<(PathBuf, BTreeMap<String, BTreeSet<String>>)> {
    let mut dirs = Vec::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            if e.path().is_dir() {
                dirs.push(e.path());
                stack.push(e.path());
            }
        }
    }
    let mut out = Vec::new();
    for dir in dirs {
        let files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "rs"))
            .filter(|p| !p.ends_with("mod.rs") && !p.ends_with("tests.rs"))
            .collect();
        let names: BTreeSet<String> = files
            .iter()
            .filter_map(|f| f.file_stem().and_then(|s| s.to_str()).map(str::to_owned))
            .collect();
        let mut graph = BTreeMap::new();
        for f in &files {
            let Some(me) = f.file_stem().and_then(|s| s.to_str()) else {
                continue;
            };
            let text = std::fs::read_to_string(f).unwrap_or_default();
            let code = text.split("#[cfg(test)]").next().unwrap_or_default();
            let uses: BTreeSet<String> = code
                .match_indices("super::")
                .map(|(i, _)| {
                    code[i + "super::".len()..]
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                        .collect::<String>()
                })
                .filter(|n| names.contains(n) && n != me)
                .collect();
            graph.insert(me.to_owned(), uses);
        }
        out.push((dir, graph));
    }
    out
}

#[test]
fn no_nested_module_depends_on_itself_through_its_siblings() {
    for src in source_dirs() {
        for (dir, graph) in nested_graphs(&src) {
            if let Some(c) = cycle(&graph) {
                panic!("a module cycle in {}: {}", dir.display(), c.join(" -> "));
            }
        }
    }
}

/// Every key of each `#[serde(deny_unknown_fields)]` struct in `file`
/// (our configuration's structs), by the struct's name: a field's name, or
/// its `#[serde(rename = "...")]`, and whether it is a table (a struct or
/// a map, which a `[header]` may carry); flattened and skipped fields are
/// not keys of their own.
fn config_keys(file: &Path) -> BTreeMap<String, BTreeSet<(String, bool)>> {
    let text = std::fs::read_to_string(file).expect("a configuration source file");
    let mut keys: BTreeMap<String, BTreeSet<(String, bool)>> = BTreeMap::new();
    let mut current: Option<String> = None;
    let mut denies = false;
    let mut attrs: Vec<&str> = Vec::new();
    for line in text.lines() {
        let t = line.trim();
        if t.starts_with("#[serde(deny_unknown_fields") {
            denies = true;
            continue;
        }
        if let Some(rest) = t.strip_prefix("pub struct ") {
            current = denies.then(|| rest.split([' ', '{', '<']).next().unwrap_or("").to_owned());
            denies = false;
            attrs.clear();
            continue;
        }
        if t == "}" {
            current = None;
            continue;
        }
        let Some(name) = &current else { continue };
        if t.starts_with("#[") {
            attrs.push(t);
            continue;
        }
        if let Some((field, ty)) = t.strip_prefix("pub ").and_then(|r| r.split_once(':')) {
            let ty = ty.trim().trim_start_matches("Option<");
            // A struct, a map, or an array of tables (`Vec<Struct>`).
            let element = ty.strip_prefix("Vec<").unwrap_or(ty);
            let table = (element.starts_with(|c: char| c.is_ascii_uppercase())
                || ["std::collections::", "toml::Table"]
                    .iter()
                    .any(|p| element.starts_with(p)))
                && !["String", "PathBuf"].iter().any(|p| element.starts_with(p));
            let flattened = attrs
                .iter()
                .any(|a| a.contains("flatten") || a.contains("skip"));
            let renamed = attrs.iter().find_map(|a| {
                a.split_once("rename = \"")
                    .and_then(|(_, r)| r.split_once('"'))
                    .map(|(r, _)| r.to_owned())
            });
            if !flattened {
                keys.entry(name.clone())
                    .or_default()
                    .insert((renamed.unwrap_or_else(|| field.trim().to_owned()), table));
            }
        }
        if !t.starts_with("///") && !t.is_empty() {
            attrs.clear();
        }
    }
    keys
}

/// README says `toolhost.example.toml` lists every key: each field of the
/// configuration's structs appears there, as `key =` (set or commented
/// out) or as a table header.
#[test]
fn the_example_configuration_carries_every_key() {
    let root = workspace_root();
    let example =
        std::fs::read_to_string(root.join("toolhost.example.toml")).expect("toolhost.example.toml");
    let mut structs = config_keys(&root.join("crates/toolhost-daemon/src/config.rs"));
    structs.extend(config_keys(
        &root.join("crates/toolhost-daemon/src/sandboxing.rs"),
    ));
    structs.extend(config_keys(
        &root.join("crates/toolhost-daemon/src/registry.rs"),
    ));
    structs.extend(config_keys(
        &root.join("crates/toolhost-daemon/src/oauth.rs"),
    ));
    assert!(
        structs.contains_key("Config") && structs.contains_key("PluginConfig"),
        "the configuration's structs moved: {:?}",
        structs.keys().collect::<Vec<_>>()
    );
    let present = |(key, table): &(String, bool)| {
        example.lines().any(|l| {
            let l = l.trim_start_matches(['#', ' ']);
            l.strip_prefix(key.as_str())
                .is_some_and(|rest| rest.trim_start().starts_with('='))
                || (*table
                    && l.starts_with('[')
                    && l.trim_matches(['[', ']'])
                        .split('.')
                        .any(|part| part.trim_matches('"') == key))
        })
    };
    let missing: Vec<String> = structs
        .iter()
        .flat_map(|(s, keys)| {
            keys.iter()
                .filter(|k| !present(k))
                .map(move |(k, _)| format!("{s}.{k}"))
        })
        .collect();
    assert!(
        missing.is_empty(),
        "toolhost.example.toml lacks these keys (add each, commented out if it has no good example value): {missing:?}"
    );
}

/// The subcommands `toolhost --help` lists under "Commands:".
fn subcommands(args: &[&str]) -> Vec<String> {
    let out = std::process::Command::new(toolhost_e2e::bin("toolhost"))
        .args(args)
        .arg("--help")
        .output()
        .expect("toolhost --help");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .filter(|c| c != "help")
        .collect()
}

/// README's command table has a row for every subcommand: `toolhost CMD`
/// in its first cell, and each of CMD's own subcommands named in one of
/// CMD's rows.
#[test]
fn the_readme_command_table_names_every_subcommand() {
    let readme = std::fs::read_to_string(workspace_root().join("README.md")).expect("README.md");
    let rows: Vec<&str> = readme
        .lines()
        .filter(|l| l.starts_with("| `toolhost "))
        .map(|l| l.split(" | ").next().unwrap_or(l))
        .collect();
    let commands = subcommands(&[]);
    assert!(commands.len() >= 10, "toolhost --help lists {commands:?}");
    let mut missing = Vec::new();
    for command in &commands {
        let own: Vec<&&str> = rows
            .iter()
            .filter(|r| r.contains(&format!("`toolhost {command}")))
            .collect();
        if own.is_empty() {
            missing.push(command.clone());
            continue;
        }
        for sub in subcommands(&[command]) {
            let named = own.iter().any(|r| {
                r.split(|c: char| !c.is_ascii_alphanumeric() && c != '-')
                    .any(|w| w == sub)
            });
            if !named {
                missing.push(format!("{command} {sub}"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "README's command table lacks: {missing:?}"
    );
}

/// The longest a production function may be without its doc comment
/// saying why it is whole ("Kept whole ...").
const MAX_FUNCTION_LINES: usize = 80;

/// Each production function over [`MAX_FUNCTION_LINES`] lines whose doc
/// comment does not say why, as `path:line name (lines)`. A function ends
/// at the first line that closes it at its own indentation (rustfmt's
/// layout); test modules and test files are not production code.
fn long_functions(file: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(file).expect("a source file");
    let lines: Vec<&str> = text.lines().collect();
    let mut found = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        if line.starts_with("mod tests") || line.starts_with("#[cfg(test)]") {
            // The rest of the file is tests, by this codebase's layout.
            break;
        }
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        let is_fn = [
            "fn ",
            "pub fn ",
            "pub(crate) fn ",
            "async fn ",
            "pub async fn ",
            "pub(crate) async fn ",
            "const fn ",
            "pub const fn ",
        ]
        .iter()
        .any(|p| trimmed.starts_with(p));
        if !is_fn || trimmed.ends_with(';') {
            i += 1;
            continue;
        }
        let close = format!("{}}}", " ".repeat(indent));
        let Some(end) = (i + 1..lines.len()).find(|&j| lines[j] == close) else {
            i += 1;
            continue;
        };
        let length = end - i + 1;
        let mut doc = Vec::new();
        let mut k = i;
        while k > 0 {
            k -= 1;
            let above = lines[k].trim_start();
            if above.starts_with("///") {
                doc.push(above);
            } else if !above.starts_with("#[") {
                break;
            }
        }
        let explained = doc.iter().any(|d| d.contains("Kept whole"));
        if length > MAX_FUNCTION_LINES && !explained {
            let name = trimmed
                .split("fn ")
                .nth(1)
                .and_then(|r| r.split(['(', '<']).next())
                .unwrap_or("?");
            let root = workspace_root();
            let shown = file
                .strip_prefix(&root)
                .unwrap_or(file)
                .display()
                .to_string();
            found.push(format!("{shown}:{} {name} ({length} lines)", i + 1));
        }
        i += 1;
    }
    found
}

#[test]
fn no_production_function_is_long_without_saying_why() {
    let mut files = Vec::new();
    for dir in source_dirs() {
        collect_rs(&dir, &mut files);
    }
    let long: Vec<String> = files
        .iter()
        .filter(|f| {
            let p = f.display().to_string();
            // The benchmark harness is not production code.
            !p.ends_with("/tests.rs") && !p.contains("/tests/") && !p.contains("/toolhost-bench/")
        })
        .flat_map(|f| long_functions(f))
        .collect();
    assert!(
        long.is_empty(),
        "{} functions over {MAX_FUNCTION_LINES} lines; split each, or say in its doc comment why it is kept whole (\"Kept whole ...\"):\n{}",
        long.len(),
        long.join("\n")
    );
}

/// The token bucket and the escaping of text a person reads are
/// `toolhost-base`'s, once: a second copy drifts (the approval question
/// once escaped fewer invisible characters than the log lines did).
/// Outside `toolhost-base`, no source defines a bucket's refill, a
/// character class of "unsafe" or "invisible" text, or writes a `\u{..}`
/// escape of its own.
#[test]
fn the_token_bucket_and_the_escaping_rule_live_only_in_base() {
    let forbidden = [
        "fn refill(",
        "struct Bucket ",
        "struct Bucket{",
        "fn is_invisible(",
        "fn is_unsafe(",
        "\"\\\\u{{{:",
    ];
    let mut wrong = Vec::new();
    for src in source_dirs() {
        if src.ends_with("toolhost-base/src") {
            continue;
        }
        let mut files = Vec::new();
        collect_rs(&src, &mut files);
        for f in files {
            let text = std::fs::read_to_string(&f).unwrap_or_default();
            for (n, line) in text.lines().enumerate() {
                let code = line.split("//").next().unwrap_or_default();
                if let Some(p) = forbidden.iter().find(|p| code.contains(**p)) {
                    wrong.push(format!("{}:{}: {p}", f.display(), n + 1));
                }
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The pipeline runs the steps and asks the operator's policy through a
/// seam: it links no expression interpreter (the policy's rules are CEL,
/// in `toolhost-policy`), and stays about the size of its job.
#[test]
fn the_pipeline_carries_no_policy_engine() {
    let out = std::process::Command::new(env!("CARGO"))
        .args([
            "tree",
            "-p",
            "toolhost-pipeline",
            "-e",
            "normal",
            "--prefix",
            "none",
            "--offline",
        ])
        .current_dir(toolhost_e2e::workspace_root())
        .output()
        .expect("cargo tree runs");
    let tree = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !tree.lines().any(|l| l.starts_with("cel ")),
        "toolhost-pipeline pulls the CEL interpreter:\n{tree}"
    );
    let mut files = Vec::new();
    collect_rs(
        &toolhost_e2e::workspace_root().join("crates/toolhost-pipeline/src"),
        &mut files,
    );
    let lines: usize = files
        .iter()
        .filter(|f| !f.to_string_lossy().contains("/tests"))
        .map(|f| {
            std::fs::read_to_string(f)
                .unwrap_or_default()
                .lines()
                .count()
        })
        .sum();
    assert!(
        lines < 4_200,
        "toolhost-pipeline has {lines} lines of source outside its tests"
    );
}
