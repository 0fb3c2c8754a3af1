//! Where a plugin's configuration values come from, and the operator's
//! other decisions for it, as its `[plugin.<id>]` table says.
//!
//! The configuration file names a value in one of three ways:
//!
//! - inline (`name = "..."`, or an integer or a boolean): a plain value;
//! - `<name>_file = "/path"`: the file's content, less one trailing line
//!   ending (`\n` or `\r\n`), so a secret written by `echo` works;
//! - `<name>_env = "VAR"`: a variable of the daemon's environment.
//!
//! An item given two ways is an error of the whole file: which one wins
//! would be a guess. A file or variable that cannot be read is a problem of
//! that plugin (it shows in its status and the plugin waits for the
//! value), never of the daemon, and it names the item, never the value.
//!
//! The binary parses TOML into an [`OperatorFile`]; everything after that
//! is here.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use toolhost_sandbox::Rule;

/// Capabilities a plugin declared that the operator may grant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Grant {
    /// Its declared paths.
    Filesystem,
    /// Its declared network access.
    Network,
    /// Its declared environment variables.
    Env,
    /// Tokens for its declared audiences, exchanged from each caller's.
    Credentials,
}

impl Grant {
    /// Parses `filesystem`, `network`, `env` or `credentials`.
    #[must_use]
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "filesystem" => Some(Self::Filesystem),
            "network" => Some(Self::Network),
            "env" => Some(Self::Env),
            "credentials" => Some(Self::Credentials),
            _ => None,
        }
    }

    /// The name used in configuration.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Filesystem => "filesystem",
            Self::Network => "network",
            Self::Env => "env",
            Self::Credentials => "credentials",
        }
    }
}

/// Where a supplied value came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The admin API.
    Admin,
    /// Inline in the configuration file.
    File,
    /// A file named by the configuration file (`<name>_file`).
    SecretFile,
    /// An environment variable of the daemon (`<name>_env`).
    Env,
    /// The manifest's default.
    Default,
    /// The command line of `serve --dev` (`--set NAME=VALUE`): for this
    /// run only, never stored.
    CommandLine,
}

impl Source {
    /// For status output.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Admin => "admin",
            Self::File => "config file",
            Self::SecretFile => "secret file",
            Self::Env => "environment",
            Self::Default => "default",
            Self::CommandLine => "command line",
        }
    }
}

/// One value as the operator supplied it: text to be parsed against the
/// declared type, or already typed (TOML).
#[derive(Clone, PartialEq, Eq)]
pub enum Supplied {
    /// Text (admin API, files, environment, TOML strings).
    Text(String),
    /// A TOML integer.
    Integer(i64),
    /// A TOML boolean.
    Boolean(bool),
}

impl std::fmt::Debug for Supplied {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Supplied(redacted)")
    }
}

/// The configuration file's values for one plugin, already read from their
/// files and environment variables, or why one could not be.
#[derive(Debug, Clone, Default)]
pub struct FileValues {
    /// By item name.
    pub values: BTreeMap<String, (Supplied, Source)>,
    /// Problems found while reading them (naming items, never values).
    pub problems: Vec<String>,
}

/// What a plugin the operator lets export spans gets: the OpenTelemetry
/// variables naming the daemon's collector (never the daemon's export
/// headers, which are its secrets), and a TCP connect rule for the
/// collector's port and nothing more.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PluginTelemetry {
    /// `OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_EXPORTER_OTLP_PROTOCOL`,
    /// `OTEL_SERVICE_NAME`, and the sampler and batch delay to match the
    /// daemon's.
    pub env: BTreeMap<String, String>,
    /// The collector's port.
    pub port: u16,
}

/// What the operator decided about one plugin (`[plugin.<id>]`).
#[derive(Debug, Clone, Default)]
pub struct Operator {
    /// Variables of the daemon's environment it also gets.
    pub pass_env: Vec<String>,
    /// Configuration values.
    pub config: FileValues,
    /// Declared capabilities granted.
    pub grant: BTreeSet<Grant>,
    /// Sandbox rules turned off.
    pub sandbox_off: BTreeSet<Rule>,
    /// More paths it may read and execute (an interpreter, say).
    pub read: Vec<PathBuf>,
    /// Its spans go to the daemon's collector (`[plugin.<id>] telemetry`).
    pub telemetry: Option<PluginTelemetry>,
}

/// One value of `[plugin.<id>.config]` as the file gives it, before its
/// source is read.
#[derive(Clone, PartialEq)]
pub enum RawValue {
    /// A string.
    Text(String),
    /// An integer.
    Integer(i64),
    /// A boolean.
    Boolean(bool),
    /// Anything else (a float, a table, an array): refused.
    Other,
}

impl std::fmt::Debug for RawValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RawValue(redacted)")
    }
}

/// The operator's `[plugin.<id>]` table as written.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OperatorFile {
    /// Variables of the daemon's environment the plugin also gets.
    pub pass_env: Vec<String>,
    /// `[plugin.<id>.config]`: item names, with `_file` or `_env` suffixes
    /// for values read from elsewhere.
    pub config: BTreeMap<String, RawValue>,
    /// Capabilities granted, by name.
    pub grant: Vec<String>,
    /// Sandbox rules turned off, by name.
    pub sandbox_off: Vec<String>,
    /// More paths it may read and execute.
    pub read: Vec<PathBuf>,
}

/// Why an operator's table cannot be taken: an error of the configuration
/// file, naming the key and never a value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OperatorFileError {
    /// A grant that is not a capability.
    #[error("[plugin.{id:?}] grant: {grant:?} is not one of filesystem, network, env, credentials")]
    UnknownGrant {
        /// The plugin.
        id: String,
        /// What was written.
        grant: String,
    },
    /// A rule name that is not a switchable rule.
    #[error("[plugin.{id:?}] sandbox_off: {rule:?} is not one of {names}", names = Rule::switchable_names())]
    UnknownRule {
        /// The plugin.
        id: String,
        /// What was written.
        rule: String,
    },
    /// `<name>_file` that is not a path.
    #[error("[plugin.{id:?}.config] {key} must be a file path")]
    NotAPath {
        /// The plugin.
        id: String,
        /// The key.
        key: String,
    },
    /// `<name>_env` that is not a variable name.
    #[error("[plugin.{id:?}.config] {key} must name an environment variable")]
    NotAVariable {
        /// The plugin.
        id: String,
        /// The key.
        key: String,
    },
    /// An inline value of another type.
    #[error("[plugin.{id:?}.config] {key} must be a string, an integer or a boolean")]
    WrongType {
        /// The plugin.
        id: String,
        /// The key.
        key: String,
    },
    /// One item given two ways.
    #[error("[plugin.{id:?}.config] gives `{name}` twice (inline, _file or _env: pick one)")]
    GivenTwice {
        /// The plugin.
        id: String,
        /// The item.
        name: String,
    },
}

impl Operator {
    /// The operator's decisions for plugin `id`, with every value read
    /// from its source (see the module's documentation).
    pub fn from_file(id: &str, file: &OperatorFile) -> Result<Self, OperatorFileError> {
        let mut grant = BTreeSet::new();
        for g in &file.grant {
            let Some(g) = Grant::parse(g) else {
                return Err(OperatorFileError::UnknownGrant {
                    id: id.to_owned(),
                    grant: g.clone(),
                });
            };
            grant.insert(g);
        }
        let mut sandbox_off = BTreeSet::new();
        for rule in &file.sandbox_off {
            let Some(r) = Rule::switchable(rule) else {
                return Err(OperatorFileError::UnknownRule {
                    id: id.to_owned(),
                    rule: rule.clone(),
                });
            };
            sandbox_off.insert(r);
        }
        Ok(Self {
            pass_env: file.pass_env.clone(),
            config: file_values(id, &file.config)?,
            grant,
            sandbox_off,
            read: file.read.clone(),
            telemetry: None,
        })
    }
}

/// Reads each value from its source.
fn file_values(
    id: &str,
    config: &BTreeMap<String, RawValue>,
) -> Result<FileValues, OperatorFileError> {
    let mut values = FileValues::default();
    let err_key = |make: fn(String, String) -> OperatorFileError, key: &str| {
        make(id.to_owned(), key.to_owned())
    };
    for (key, v) in config {
        let (name, supplied) = if let Some(name) = key.strip_suffix("_file") {
            let RawValue::Text(path) = v else {
                return Err(err_key(
                    |id, key| OperatorFileError::NotAPath { id, key },
                    key,
                ));
            };
            match std::fs::read_to_string(path) {
                Ok(text) => (
                    name,
                    Some((
                        Supplied::Text(without_line_ending(text)),
                        Source::SecretFile,
                    )),
                ),
                Err(e) => {
                    values
                        .problems
                        .push(format!("`{name}`: cannot read {path}: {e}"));
                    (name, None)
                }
            }
        } else if let Some(name) = key.strip_suffix("_env") {
            let RawValue::Text(var) = v else {
                return Err(err_key(
                    |id, key| OperatorFileError::NotAVariable { id, key },
                    key,
                ));
            };
            match std::env::var(var) {
                Ok(text) => (name, Some((Supplied::Text(text), Source::Env))),
                Err(_) => {
                    values.problems.push(format!(
                        "`{name}`: the environment variable {var} is not set (or not UTF-8)"
                    ));
                    (name, None)
                }
            }
        } else {
            let supplied = match v {
                RawValue::Text(s) => Supplied::Text(s.clone()),
                RawValue::Integer(n) => Supplied::Integer(*n),
                RawValue::Boolean(b) => Supplied::Boolean(*b),
                RawValue::Other => {
                    return Err(err_key(
                        |id, key| OperatorFileError::WrongType { id, key },
                        key,
                    ));
                }
            };
            (key.as_str(), Some((supplied, Source::File)))
        };
        if let Some(s) = supplied
            && values.values.insert(name.to_owned(), s).is_some()
        {
            return Err(OperatorFileError::GivenTwice {
                id: id.to_owned(),
                name: name.to_owned(),
            });
        }
    }
    Ok(values)
}

/// A secret file's content less one trailing line ending.
fn without_line_ending(mut text: String) -> String {
    if text.ends_with('\n') {
        text.pop();
        if text.ends_with('\r') {
            text.pop();
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(entries: &[(&str, RawValue)]) -> OperatorFile {
        OperatorFile {
            config: entries
                .iter()
                .map(|(k, v)| ((*k).to_owned(), v.clone()))
                .collect(),
            ..OperatorFile::default()
        }
    }

    #[test]
    fn a_secret_file_loses_one_line_ending_and_nothing_else() {
        assert_eq!(without_line_ending("s3cret\n".into()), "s3cret");
        assert_eq!(without_line_ending("s3cret\r\n".into()), "s3cret");
        assert_eq!(without_line_ending("s3cret\n\n".into()), "s3cret\n");
        assert_eq!(without_line_ending(" s3cret ".into()), " s3cret ");
    }

    #[test]
    fn values_come_from_files_variables_or_inline() {
        let dir = std::env::temp_dir().join(format!("toolhost-sources-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let secret = dir.join("token");
        assert!(std::fs::write(&secret, "from-a-file\n").is_ok());
        let file = table(&[
            ("token_file", RawValue::Text(secret.display().to_string())),
            ("home_env", RawValue::Text("HOME".into())),
            (
                "missing_env",
                RawValue::Text("TOOLHOST_SURELY_UNSET_VARIABLE".into()),
            ),
            ("page_size", RawValue::Integer(5)),
            ("verbose", RawValue::Boolean(true)),
        ]);
        let op = Operator::from_file("p", &file).unwrap_or_else(|e| panic!("{e}"));
        let v = &op.config.values;
        assert_eq!(v.get("token").map(|(_, s)| *s), Some(Source::SecretFile));
        assert_eq!(
            v.get("token").map(|(s, _)| s.clone()),
            Some(Supplied::Text("from-a-file".into()))
        );
        assert_eq!(v.get("page_size").map(|(_, s)| *s), Some(Source::File));
        assert!(!v.contains_key("missing"));
        assert_eq!(op.config.problems.len(), 1, "{:?}", op.config.problems);
        assert!(op.config.problems[0].starts_with("`missing`"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn an_item_given_twice_or_of_the_wrong_shape_is_refused_by_name() {
        let twice = table(&[
            ("token", RawValue::Text("inline-secret".into())),
            ("token_env", RawValue::Text("HOME".into())),
        ]);
        let err = Operator::from_file("p", &twice).err();
        assert!(
            matches!(err, Some(OperatorFileError::GivenTwice { ref name, .. }) if name == "token")
        );
        assert!(
            !err.map(|e| e.to_string())
                .unwrap_or_default()
                .contains("inline-secret")
        );
        let bad = table(&[("token_file", RawValue::Integer(3))]);
        assert!(matches!(
            Operator::from_file("p", &bad),
            Err(OperatorFileError::NotAPath { .. })
        ));
        let float = table(&[("ratio", RawValue::Other)]);
        assert!(matches!(
            Operator::from_file("p", &float),
            Err(OperatorFileError::WrongType { .. })
        ));
    }

    #[test]
    fn grants_and_rules_are_checked_against_their_lists() {
        let ok = OperatorFile {
            grant: vec!["network".into()],
            sandbox_off: vec!["processes".into()],
            ..OperatorFile::default()
        };
        let op = Operator::from_file("p", &ok).unwrap_or_else(|e| panic!("{e}"));
        assert!(op.grant.contains(&Grant::Network));
        assert!(op.sandbox_off.contains(&Rule::Processes));
        let bad_rule = OperatorFile {
            sandbox_off: vec!["signals".into()],
            ..OperatorFile::default()
        };
        let e = Operator::from_file("p", &bad_rule)
            .err()
            .map(|e| e.to_string());
        assert_eq!(
            e.as_deref(),
            Some(
                "[plugin.\"p\"] sandbox_off: \"signals\" is not one of no_new_privs, capabilities, memory, open_files, processes, disk, filesystem, network"
            )
        );
        let bad_grant = OperatorFile {
            grant: vec!["root".into()],
            ..OperatorFile::default()
        };
        assert!(matches!(
            Operator::from_file("p", &bad_grant),
            Err(OperatorFileError::UnknownGrant { .. })
        ));
    }
}
