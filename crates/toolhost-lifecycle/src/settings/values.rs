//! Each declared configuration item resolved from its sources (the admin
//! API's stored value, then the file's, then the manifest's default),
//! typed and checked against its declaration; and the admin-set values'
//! storage.
//!
//! Nothing here puts a value in an error, a log line or a status: problems
//! name the item and the rule.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use toolhost_manifest::Manifest;
use toolhost_manifest::grants::{ConfigDecl, ConfigType, ConfigValue};
use toolhost_runtime::Delivered;

use super::sources::{FileValues, Source, Supplied};

/// One item's state, for status: never its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ItemStatus {
    /// The item.
    pub name: String,
    /// Whether it is a secret.
    pub secret: bool,
    /// Whether the plugin cannot start without it.
    pub required: bool,
    /// `set`, `default`, `missing` (required, none) or `unset` (optional,
    /// none).
    pub state: &'static str,
    /// Where the value came from, when there is one.
    pub source: Option<Source>,
    /// What was wrong with a supplied value (never the value).
    pub problem: Option<String>,
}

/// A plugin's configuration, resolved.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Resolved {
    /// Each declared item.
    pub items: Vec<ItemStatus>,
    /// Required items without a value.
    pub missing: Vec<String>,
    /// What the plugin is given (none when it declares no items).
    pub delivered: Option<Delivered>,
}

/// Parses a supplied value as the declared type. The error names the type,
/// never the value.
fn typed(decl: &ConfigDecl, v: &Supplied) -> Result<ConfigValue, String> {
    let wrong = || {
        format!(
            "config item `{}` must be {}",
            decl.name,
            match decl.kind {
                ConfigType::String => "a string",
                ConfigType::Integer => "an integer",
                ConfigType::Boolean => "true or false",
            }
        )
    };
    match (decl.kind, v) {
        (ConfigType::String, Supplied::Text(s)) => {
            if s.len() > MAX_VALUE_BYTES {
                Err(format!(
                    "config item `{}` is longer than {MAX_VALUE_BYTES} bytes",
                    decl.name
                ))
            } else {
                Ok(ConfigValue::String(s.clone()))
            }
        }
        (ConfigType::Integer, Supplied::Integer(n)) => Ok(ConfigValue::Integer(*n)),
        (ConfigType::Integer, Supplied::Text(s)) => s
            .trim()
            .parse()
            .map(ConfigValue::Integer)
            .map_err(|_| wrong()),
        (ConfigType::Boolean, Supplied::Boolean(b)) => Ok(ConfigValue::Boolean(*b)),
        (ConfigType::Boolean, Supplied::Text(s)) => match s.trim() {
            "true" => Ok(ConfigValue::Boolean(true)),
            "false" => Ok(ConfigValue::Boolean(false)),
            _ => Err(wrong()),
        },
        _ => Err(wrong()),
    }
}

/// The largest value, in bytes (a PEM bundle fits; a disk image does not).
pub const MAX_VALUE_BYTES: usize = 64 * 1024;

fn json(v: &ConfigValue) -> serde_json::Value {
    match v {
        ConfigValue::String(s) => serde_json::Value::String(s.clone()),
        ConfigValue::Integer(n) => serde_json::Value::from(*n),
        ConfigValue::Boolean(b) => serde_json::Value::Bool(*b),
    }
}

/// Resolves `m`'s items from the admin-set values, then the file's, then
/// the defaults.
#[must_use]
pub fn resolve(m: &Manifest, stored: &BTreeMap<String, String>, file: &FileValues) -> Resolved {
    let mut r = Resolved::default();
    let mut config = serde_json::Map::new();
    let mut secrets = serde_json::Map::new();
    for decl in &m.config {
        let mut problem = None;
        let supplied = stored
            .get(&decl.name)
            .map(|s| (Supplied::Text(s.clone()), Source::Admin))
            .or_else(|| file.values.get(&decl.name).cloned());
        let value = match supplied {
            Some((v, source)) => match typed(decl, &v) {
                Ok(v) => Some((v, source)),
                Err(e) => {
                    problem = Some(e);
                    None
                }
            },
            None => None,
        }
        .or_else(|| decl.default.clone().map(|d| (d, Source::Default)));
        let state = match (&value, decl.required) {
            (Some((_, Source::Default)), _) => "default",
            (Some(_), _) => "set",
            (None, true) => "missing",
            (None, false) => "unset",
        };
        if let Some((v, _)) = &value {
            let into = if decl.secret {
                &mut secrets
            } else {
                &mut config
            };
            into.insert(decl.name.clone(), json(v));
        } else if decl.required {
            r.missing.push(decl.name.clone());
        }
        r.items.push(ItemStatus {
            name: decl.name.clone(),
            secret: decl.secret,
            required: decl.required,
            state,
            source: value.map(|(_, s)| s),
            problem,
        });
    }
    if !m.config.is_empty() {
        let doc = serde_json::json!({ "config": config, "secrets": secrets });
        r.delivered = Some(Delivered::new(doc.to_string()));
    }
    r
}

/// Checks values to be set through the admin API against `m`'s items:
/// every name declared, every value of its type. Problems name items only.
pub fn check_update(
    m: &Manifest,
    set: &BTreeMap<String, String>,
    unset: &[String],
) -> Result<(), Vec<String>> {
    let mut problems = Vec::new();
    for name in set.keys().chain(unset.iter()) {
        if !m.config.iter().any(|d| &d.name == name) {
            problems.push(format!(
                "plugin {} declares no config item `{}`{}",
                m.id,
                toolhost_base::log_safe(name, 64),
                declared_hint(m)
            ));
        }
    }
    for decl in &m.config {
        if let Some(v) = set.get(&decl.name)
            && let Err(e) = typed(decl, &Supplied::Text(v.clone()))
        {
            problems.push(e);
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems)
    }
}

fn declared_hint(m: &Manifest) -> String {
    if m.config.is_empty() {
        " (it declares none)".into()
    } else {
        format!(
            " (it declares: {})",
            m.config
                .iter()
                .map(|d| d.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )
    }
}

/// The candidate closest to `word` by edit distance, if close enough to be
/// a typo of it: at most one edit in four characters (and at least one).
#[must_use]
pub fn did_you_mean<'a>(
    word: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    let limit = (word.chars().count() / 4).max(1);
    candidates
        .into_iter()
        .map(|c| (edit_distance(word, c), c))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

/// Edit distance by characters, a swap of two neighbours counting as one
/// edit (optimal string alignment): `notse` is one edit from `notes`.
fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    d[0] = (0..=b.len()).collect();
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = best;
        }
    }
    d[a.len()][b.len()]
}

/// Problems with the configuration file's values for `m`: names it does
/// not declare (with the declared name it is closest to), inline secrets.
#[must_use]
pub fn check_file(m: &Manifest, file: &FileValues) -> Vec<String> {
    let mut out: Vec<String> = file
        .problems
        .iter()
        .map(|p| format!("[plugin.{}.config]: {p}", m.id))
        .collect();
    for (name, (_, source)) in &file.values {
        match m.config.iter().find(|d| &d.name == name) {
            None => out.push(format!(
                "[plugin.{}.config] sets `{name}`, which the plugin does not declare{}{}",
                m.id,
                did_you_mean(name.trim_end_matches("_file").trim_end_matches("_env"), m.config.iter().map(|d| d.name.as_str()))
                    .map(|c| format!("; did you mean `{c}`?"))
                    .unwrap_or_default(),
                declared_hint(m)
            )),
            Some(d) if d.secret && *source == Source::File => out.push(format!(
                "[plugin.{}.config]: `{name}` is a secret, so it is not read inline; use {name}_file or {name}_env",
                m.id
            )),
            Some(_) => {}
        }
    }
    out
}

/// Drops inline values of secrets: a secret belongs in a file or the
/// environment, not in a configuration file that gets copied around.
#[must_use]
pub fn without_inline_secrets(m: &Manifest, file: &FileValues) -> FileValues {
    let mut kept = file.clone();
    kept.values.retain(|name, (_, source)| {
        !(*source == Source::File && m.config.iter().any(|d| &d.name == name && d.secret))
    });
    kept
}

/// The admin-set values of every plugin, one file each under
/// `<state_dir>/config/`.
#[derive(Debug)]
pub(crate) struct Stored {
    dir: PathBuf,
}

impl Stored {
    pub(crate) fn new(state_dir: &Path) -> Self {
        Self {
            dir: state_dir.join("config"),
        }
    }

    fn file(&self, id: &str) -> PathBuf {
        self.dir.join(format!("{id}.json"))
    }

    /// One plugin's values; none when it has no file. A file that cannot
    /// be read as values is an error naming the file.
    pub(crate) fn load(&self, id: &str) -> std::io::Result<BTreeMap<String, String>> {
        match std::fs::read(self.file(id)) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|_| {
                std::io::Error::other(format!(
                    "{} is not a JSON object of strings",
                    self.file(id).display()
                ))
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(BTreeMap::new()),
            Err(e) => Err(e),
        }
    }

    /// Writes one plugin's values whole and privately
    /// (`toolhost_base::files::write_private`); no values, no file.
    pub(crate) fn save(&self, id: &str, values: &BTreeMap<String, String>) -> std::io::Result<()> {
        let target = self.file(id);
        if values.is_empty() {
            return toolhost_base::files::remove_private(&target);
        }
        let bytes = serde_json::to_vec(values).map_err(std::io::Error::other)?;
        toolhost_base::files::write_private(&target, &bytes)
    }

    /// Deletes one plugin's values (with its data, on purge).
    pub(crate) fn remove(&self, id: &str) {
        let _ = std::fs::remove_file(self.file(id));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_typo_finds_the_name_it_was_meant_to_be_and_a_stranger_finds_none() {
        let names = ["api_token", "region", "allowed_hosts"];
        assert_eq!(did_you_mean("api_tokn", names), Some("api_token"));
        assert_eq!(did_you_mean("regoin", names), Some("region"));
        assert_eq!(did_you_mean("notse", ["notes", "jsonkit"]), Some("notes"));
        assert_eq!(did_you_mean("allowed_host", names), Some("allowed_hosts"));
        assert_eq!(did_you_mean("colour", names), None);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }
    use crate::settings::sample::manifest;

    #[test]
    fn a_missing_required_item_is_named_and_withheld_from_the_delivery() {
        let m = manifest();
        let r = resolve(&m, &BTreeMap::new(), &FileValues::default());
        assert_eq!(r.missing, ["token"]);
        let states: Vec<_> = r.items.iter().map(|i| i.state).collect();
        assert_eq!(states, ["default", "missing", "unset"]);
    }

    #[test]
    fn admin_values_win_over_the_file_and_secrets_are_delivered_apart() {
        let m = manifest();
        let mut file = FileValues::default();
        file.values.insert(
            "token".into(),
            (Supplied::Text("from-file".into()), Source::SecretFile),
        );
        file.values
            .insert("page_size".into(), (Supplied::Integer(10), Source::File));
        let stored = BTreeMap::from([("page_size".to_owned(), "25".to_owned())]);
        let r = resolve(&m, &stored, &file);
        assert!(r.missing.is_empty());
        let Some(d) = &r.delivered else {
            panic!("nothing delivered")
        };
        let doc: serde_json::Value = match serde_json::from_str(d.expose()) {
            Ok(v) => v,
            Err(e) => panic!("{e}"),
        };
        assert_eq!(doc["secrets"]["token"], "from-file");
        assert_eq!(doc["config"]["page_size"], 25);
        assert_eq!(doc["config"]["base_url"], "https://jira.example.com");
        assert!(doc["config"].get("token").is_none());
        // Debug never shows the document.
        assert!(!format!("{d:?}").contains("from-file"));
        assert_eq!(r.items[2].source, Some(Source::Admin));
        assert_eq!(r.items[1].source, Some(Source::SecretFile));
    }

    #[test]
    fn type_errors_name_the_item_never_the_value() {
        let m = manifest();
        let set = BTreeMap::from([
            ("page_size".to_owned(), "lots-of-secret-text".to_owned()),
            ("nope".to_owned(), "x".to_owned()),
        ]);
        let Err(problems) = check_update(&m, &set, &[]) else {
            panic!("accepted")
        };
        let all = problems.join("\n");
        assert!(all.contains("`page_size` must be an integer"), "{all}");
        assert!(all.contains("declares no config item `nope`"), "{all}");
        assert!(!all.contains("lots-of-secret-text"));
    }
}
