//! A set of plugins validated together, as one installation: ids must be
//! unique and exposed names must not collide. Order matters: the earlier
//! plugin keeps its names and the later one fails, naming both, which is
//! what "the later install fails" means for a set read from disk at once.

use crate::manifest::{MANIFEST_FILE, Manifest};
use crate::naming;
use crate::problem::{Problem, Rule};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The outcome of checking a set: the plugins that passed, and every
/// problem found (in any plugin).
#[derive(Debug, Default)]
pub struct CheckedSet {
    /// Valid plugins, in the order given.
    pub plugins: Vec<Manifest>,
    /// All problems that refused a plugin.
    pub problems: Vec<Problem>,
}

impl CheckedSet {
    /// Every problem, those that refused a plugin and those that withhold
    /// one tool ([`Manifest::defects`]): what `toolhost check` reports.
    #[must_use]
    pub fn all_problems(&self) -> Vec<Problem> {
        self.problems
            .iter()
            .chain(self.plugins.iter().flat_map(|m| m.defects.iter()))
            .cloned()
            .collect()
    }
}

/// Expands each path: a directory holding `plugin.toml` is a plugin; any
/// other directory is a directory of plugin directories (its subdirectories
/// with a `plugin.toml`, in name order).
pub fn expand_plugin_dirs(paths: &[PathBuf]) -> (Vec<PathBuf>, Vec<Problem>) {
    let mut dirs = Vec::new();
    let mut problems = Vec::new();
    for p in paths {
        if p.join(MANIFEST_FILE).is_file() {
            dirs.push(p.clone());
            continue;
        }
        let entries = match std::fs::read_dir(p) {
            Ok(e) => e,
            Err(e) => {
                problems.push(not_a_plugin(p, format!("cannot read directory: {e}")));
                continue;
            }
        };
        let mut found: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|d| d.join(MANIFEST_FILE).is_file())
            .collect();
        found.sort();
        if found.is_empty() {
            problems.push(not_a_plugin(
                p,
                "neither a plugin directory (no plugin.toml) nor a directory of plugin directories"
                    .to_owned(),
            ));
        }
        dirs.extend(found);
    }
    (dirs, problems)
}

fn not_a_plugin(p: &Path, message: String) -> Problem {
    Problem {
        file: p.to_path_buf(),
        tool: None,
        rule: Rule::NotAPlugin,
        message,
    }
}

/// Loads and validates plugin directories as one installed set.
pub fn check_set(prefix: &str, dirs: &[PathBuf]) -> CheckedSet {
    let mut set = CheckedSet::default();
    let mut ids: BTreeMap<String, PathBuf> = BTreeMap::new();
    let mut names: BTreeMap<String, (String, String)> = BTreeMap::new();
    for dir in dirs {
        let m = match Manifest::load(dir) {
            Ok(m) => m,
            Err(p) => {
                set.problems.extend(p);
                continue;
            }
        };
        let file = dir.join(MANIFEST_FILE);
        if let Some(first) = ids.get(&m.id) {
            set.problems.push(Problem {
                file,
                tool: None,
                rule: Rule::DuplicatePlugin,
                message: format!(
                    "plugin id {:?} is already used by {}",
                    m.id,
                    first.display()
                ),
            });
            continue;
        }
        let mut clashes = Vec::new();
        for t in &m.tools {
            let exposed = naming::exposed(prefix, &m.id, &t.name);
            if let Some((other_plugin, other_tool)) = names.get(&exposed) {
                clashes.push(Problem {
                    file: file.clone(),
                    tool: Some(t.name.clone()),
                    rule: Rule::ExposedNameCollision,
                    message: format!(
                        "exposed name `{exposed}` of plugin {:?} collides with tool `{other_tool}` of plugin {other_plugin:?}; \
                         rename the tool or choose a plugin id that does not slug to the same name",
                        m.id
                    ),
                });
            }
        }
        if !clashes.is_empty() {
            set.problems.extend(clashes);
            continue;
        }
        for t in &m.tools {
            names.insert(
                naming::exposed(prefix, &m.id, &t.name),
                (m.id.clone(), t.name.clone()),
            );
        }
        ids.insert(m.id.clone(), dir.clone());
        set.plugins.push(m);
    }
    set
}
