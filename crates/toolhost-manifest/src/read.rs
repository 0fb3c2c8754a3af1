//! Reading a TOML table by hand, so every problem is found in one pass.
//!
//! serde would stop at the first error; an author fixing a manifest wants
//! every problem at once. Each accessor records what it finds wrong, names
//! the file and tool, and carries on.

use crate::problem::{Problem, Rule};
use std::collections::BTreeMap;
use std::path::Path;
use toml::Table;

/// The largest `plugin.toml` read. A manifest of 32 tools with inline
/// schemas at their limit is about 2 MiB; this file is read before
/// anything else about the plugin is known, so the cap is what keeps an
/// archive's 200 MiB "manifest" out of memory.
pub const MAX_MANIFEST_BYTES: u64 = 4 * 1024 * 1024;

/// The largest schema file read: four times the serialized cap
/// (`toolhost_validate`'s 64 KiB), for indentation.
pub const MAX_SCHEMA_FILE_BYTES: u64 = 256 * 1024;

/// The file `rel` of the plugin folder `dir`, at most `max` bytes, as
/// UTF-8 text. Read beneath the folder (`toolhost_base::beneath`): a link
/// or `..` that leads outside fails the read, so a manifest cannot pull a
/// file from elsewhere on the machine into a tool's schema (a folder just
/// cloned is someone else's).
pub(crate) fn read_beneath(dir: &Path, rel: &Path, max: u64) -> std::io::Result<String> {
    let bytes = toolhost_base::beneath::Beneath::open(dir)?
        .read(rel, max)
        .map_err(|e| {
            if e.kind() == std::io::ErrorKind::InvalidData {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("it is larger than the {max} bytes read"),
                )
            } else {
                e
            }
        })?;
    String::from_utf8(bytes)
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidData, "it is not UTF-8"))
}

/// Collects problems for one file, and optionally one tool.
pub(crate) struct Ctx<'a> {
    pub(crate) file: &'a Path,
    pub(crate) tool: Option<String>,
    pub(crate) problems: &'a mut Vec<Problem>,
}

impl Ctx<'_> {
    pub(crate) fn report(&mut self, rule: Rule, message: impl Into<String>) {
        self.problems.push(Problem {
            file: self.file.to_path_buf(),
            tool: self.tool.clone(),
            rule,
            message: message.into(),
        });
    }

    pub(crate) fn unknown_keys(&mut self, table: &Table, section: &str, allowed: &[&str]) {
        for key in table.keys() {
            if !allowed.contains(&key.as_str()) {
                let mut msg = format!(
                    "unknown key `{}` in {section}",
                    toolhost_base::text::escaped(key, 64)
                );
                if let Some(near) = allowed.iter().find(|a| strsim_close(a, key)) {
                    msg.push_str(&format!(" (did you mean `{near}`?)"));
                }
                msg.push_str(&format!("; allowed keys: {}", allowed.join(", ")));
                self.report(Rule::UnknownField, msg);
            }
        }
    }

    /// `key` as an array of tables (`[[key]]`), at most `max` of them
    /// (`too_many` names the rule broken past that): each table with its
    /// index, a problem for anything else.
    pub(crate) fn array_of_tables<'t>(
        &mut self,
        t: &'t Table,
        key: &str,
        max: usize,
        too_many: Rule,
    ) -> Vec<(usize, &'t Table)> {
        let items = match t.get(key) {
            None => return Vec::new(),
            Some(toml::Value::Array(items)) => items,
            Some(v) => {
                self.report(
                    Rule::WrongType,
                    format!(
                        "`{key}` must be an array of tables ([[{key}]]), not {}",
                        v.type_str()
                    ),
                );
                return Vec::new();
            }
        };
        if items.len() > max {
            self.report(
                too_many,
                format!("{} {key} declared; at most {max} are allowed", items.len()),
            );
        }
        let mut out = Vec::new();
        for (i, item) in items.iter().enumerate() {
            match item.as_table() {
                Some(table) => out.push((i, table)),
                None => self.report(Rule::WrongType, format!("{key}[{i}] must be a table")),
            }
        }
        out
    }

    pub(crate) fn string(&mut self, t: &Table, key: &str, required: bool) -> Option<String> {
        match t.get(key) {
            None if required => {
                self.report(Rule::MissingField, format!("`{key}` is required"));
                None
            }
            None => None,
            Some(toml::Value::String(s)) => Some(s.clone()),
            Some(v) => {
                self.report(
                    Rule::WrongType,
                    format!("`{key}` must be a string, not {}", v.type_str()),
                );
                None
            }
        }
    }

    pub(crate) fn integer(&mut self, t: &Table, key: &str) -> Option<i64> {
        match t.get(key)? {
            toml::Value::Integer(i) => Some(*i),
            v => {
                self.report(
                    Rule::WrongType,
                    format!("`{key}` must be an integer, not {}", v.type_str()),
                );
                None
            }
        }
    }

    pub(crate) fn boolean(&mut self, t: &Table, key: &str) -> Option<bool> {
        match t.get(key)? {
            toml::Value::Boolean(b) => Some(*b),
            v => {
                self.report(
                    Rule::WrongType,
                    format!("`{key}` must be true or false, not {}", v.type_str()),
                );
                None
            }
        }
    }

    pub(crate) fn table<'t>(&mut self, t: &'t Table, key: &str) -> Option<&'t Table> {
        match t.get(key)? {
            toml::Value::Table(inner) => Some(inner),
            v => {
                self.report(
                    Rule::WrongType,
                    format!("`{key}` must be a table, not {}", v.type_str()),
                );
                None
            }
        }
    }

    pub(crate) fn strings(&mut self, t: &Table, key: &str) -> Option<Vec<String>> {
        match t.get(key)? {
            toml::Value::Array(items) => {
                let mut out = Vec::with_capacity(items.len());
                for item in items {
                    match item {
                        toml::Value::String(s) => out.push(s.clone()),
                        v => {
                            self.report(
                                Rule::WrongType,
                                format!(
                                    "`{key}` must be a list of strings; found {}",
                                    v.type_str()
                                ),
                            );
                            return None;
                        }
                    }
                }
                Some(out)
            }
            v => {
                self.report(
                    Rule::WrongType,
                    format!("`{key}` must be a list of strings, not {}", v.type_str()),
                );
                None
            }
        }
    }

    pub(crate) fn string_map(&mut self, t: &Table, key: &str) -> Option<BTreeMap<String, String>> {
        let table = self.table(t, key)?;
        let mut out = BTreeMap::new();
        for (k, v) in table {
            match v {
                toml::Value::String(s) => {
                    out.insert(k.clone(), s.clone());
                }
                v => {
                    self.report(
                        Rule::WrongType,
                        format!(
                            "`{key}.{}` must be a string, not {}",
                            toolhost_base::text::escaped(k, 64),
                            v.type_str()
                        ),
                    );
                }
            }
        }
        Some(out)
    }
}

/// A near miss of a known key: one edit away for short names, two for
/// longer ones (a transposition counts as one).
fn strsim_close(a: &str, b: &str) -> bool {
    let budget = if a.len().min(b.len()) <= 4 { 1 } else { 2 };
    strsim::damerau_levenshtein(a, b) <= budget
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn near_keys() {
        assert!(strsim_close("surfaces", "surface"));
        assert!(strsim_close("timeout_ms", "timeout_sm"));
        assert!(!strsim_close("name", "aliases"));
    }
}
