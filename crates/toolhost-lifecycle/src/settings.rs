//! A plugin's configuration values and the operator's grants: where they
//! come from, how they are checked against what the manifest declares, and
//! what the plugin is given.
//!
//! Values come from three places; for each item the first that has one
//! wins:
//!
//! 1. set through the admin API (`SetPluginConfig`, `toolhost plugins
//!    config`), kept in `<state_dir>/config/<id>.json` (0600, in a 0700
//!    directory, written whole and renamed into place);
//! 2. the configuration file's `[plugin.<id>.config]` (plain values inline,
//!    secrets only from `<name>_file` or `<name>_env`);
//! 3. the manifest's default.
//!
//! A required item with none of them is *missing*: the plugin is not
//! started (it `needs_config`) and its tools are withheld.
//!
//! What this module must not do: put a value in an error, a log line or a
//! status. Problems name the item and the rule, never what was supplied.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use toolhost_manifest::Manifest;
use toolhost_manifest::grants::{Access, ConfigDecl, ConfigType, ConfigValue, Network};
use toolhost_runtime::Delivered;
use toolhost_runtime::sandbox::{FsAccess, FsRule, NetPolicy, SandboxPolicy};

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

/// Capabilities a plugin declared that the operator may grant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Grant {
    /// Its declared paths.
    Filesystem,
    /// Its declared network access.
    Network,
    /// Its declared environment variables.
    Env,
}

impl Grant {
    /// Parses `filesystem`, `network` or `env`.
    #[must_use]
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "filesystem" => Some(Self::Filesystem),
            "network" => Some(Self::Network),
            "env" => Some(Self::Env),
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
        }
    }
}

/// Sandbox rules an operator may turn off for one plugin.
pub const SANDBOX_RULES: [&str; 6] = [
    "no_new_privs",
    "memory",
    "open_files",
    "processes",
    "filesystem",
    "network",
];

/// What the operator decided about one plugin (`[plugin.<id>]`).
#[derive(Debug, Clone, Default)]
pub struct Operator {
    /// Variables of the daemon's environment it also gets.
    pub pass_env: Vec<String>,
    /// Configuration values.
    pub config: FileValues,
    /// Declared capabilities granted.
    pub grant: BTreeSet<Grant>,
    /// Sandbox rules turned off (names from [`SANDBOX_RULES`]).
    pub sandbox_off: BTreeSet<String>,
    /// More paths it may read and execute (an interpreter, say).
    pub read: Vec<PathBuf>,
}

/// The sandbox's daemon-wide settings (`[sandbox]`).
#[derive(Debug, Clone)]
pub struct SandboxConfig {
    /// Off for every plugin (the operator's choice; status says so).
    pub enabled: bool,
    /// Address space when a manifest asks for none, MiB.
    pub default_memory_mb: u64,
    /// The most any plugin gets, MiB.
    pub max_memory_mb: u64,
    /// Open files when a manifest asks for none.
    pub default_open_files: u64,
    /// The most any plugin gets.
    pub max_open_files: u64,
    /// Processes and threads when a manifest asks for none.
    pub default_processes: u64,
    /// The most any plugin gets.
    pub max_processes: u64,
    /// Paths every plugin may read and execute: interpreters and libraries
    /// outside the system paths.
    pub read: Vec<PathBuf>,
}

impl Default for SandboxConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            default_memory_mb: 4096,
            max_memory_mb: 16_384,
            default_open_files: 1024,
            max_open_files: 65_536,
            default_processes: 256,
            max_processes: 4096,
            read: Vec::new(),
        }
    }
}

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
                toolhost_runtime::log_safe(name, 64),
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

/// Problems with the configuration file's values for `m`: names it does
/// not declare, inline secrets.
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
                "[plugin.{}.config] sets `{name}`, which the plugin does not declare{}",
                m.id,
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

/// The environment names a plugin gets from the daemon: the operator's
/// `pass_env`, plus its declared `env` capability when granted.
#[must_use]
pub fn pass_env(m: &Manifest, op: &Operator) -> Vec<String> {
    let mut names = op.pass_env.clone();
    if op.grant.contains(&Grant::Env) {
        names.extend(m.capabilities.env.iter().cloned());
    }
    names.sort();
    names.dedup();
    names
}

/// The sandbox for `m`: limits from the manifest capped by the operator,
/// paths and network as declared *and* granted, rules the operator turned
/// off left out.
#[must_use]
pub fn sandbox_policy(m: &Manifest, op: &Operator, cfg: &SandboxConfig) -> SandboxPolicy {
    if !cfg.enabled {
        return SandboxPolicy::default();
    }
    let on = |rule: &str| !op.sandbox_off.contains(rule);
    let caps = &m.capabilities;
    let limit = |rule: &str, asked: Option<u64>, default: u64, max: u64| {
        on(rule).then(|| asked.unwrap_or(default).min(max))
    };
    let filesystem = on("filesystem").then(|| {
        let mut rules: Vec<FsRule> = cfg
            .read
            .iter()
            .chain(&op.read)
            .map(|p| FsRule {
                path: p.clone(),
                access: FsAccess::ReadExec,
            })
            .collect();
        if op.grant.contains(&Grant::Filesystem) {
            rules.extend(caps.filesystem.iter().map(|g| FsRule {
                path: g.path.clone(),
                access: match g.access {
                    Access::Read => FsAccess::ReadExec,
                    Access::Write => FsAccess::ReadWrite,
                },
            }));
        }
        rules
    });
    let network = on("network").then(|| {
        if op.grant.contains(&Grant::Network) {
            match &caps.network {
                Network::None => NetPolicy::Deny,
                Network::Connect(ports) => NetPolicy::Connect(ports.clone()),
                Network::Any => NetPolicy::Any,
            }
        } else {
            NetPolicy::Deny
        }
    });
    SandboxPolicy {
        no_new_privs: on("no_new_privs"),
        memory_bytes: limit(
            "memory",
            caps.memory_mb,
            cfg.default_memory_mb,
            cfg.max_memory_mb,
        )
        .map(|mb| mb.saturating_mul(1 << 20)),
        open_files: limit(
            "open_files",
            caps.open_files,
            cfg.default_open_files,
            cfg.max_open_files,
        ),
        processes: limit(
            "processes",
            caps.processes,
            cfg.default_processes,
            cfg.max_processes,
        ),
        filesystem,
        network,
    }
}

/// Which declared capabilities were asked for and not granted, in words.
#[must_use]
pub fn ungranted(m: &Manifest, op: &Operator) -> Vec<String> {
    let caps = &m.capabilities;
    let mut out = Vec::new();
    if !caps.filesystem.is_empty() && !op.grant.contains(&Grant::Filesystem) {
        out.push("filesystem".to_owned());
    }
    if caps.network != Network::None && !op.grant.contains(&Grant::Network) {
        out.push("network".to_owned());
    }
    if !caps.env.is_empty() && !op.grant.contains(&Grant::Env) {
        out.push("env".to_owned());
    }
    out
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

    /// Writes one plugin's values whole: a fresh 0600 file renamed into
    /// place, in a 0700 directory.
    pub(crate) fn save(&self, id: &str, values: &BTreeMap<String, String>) -> std::io::Result<()> {
        use std::io::Write as _;
        use std::os::unix::fs::OpenOptionsExt as _;
        crate::files::private_dir(&self.dir)?;
        let target = self.file(id);
        if values.is_empty() {
            return match std::fs::remove_file(&target) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
                _ => Ok(()),
            };
        }
        let tmp = self.dir.join(format!(".{id}.{}.tmp", fastrand::u64(..)));
        let written = (|| {
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&tmp)?;
            f.write_all(&serde_json::to_vec(values).map_err(std::io::Error::other)?)?;
            f.sync_all()?;
            std::fs::rename(&tmp, &target)
        })();
        if written.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        written
    }

    /// Deletes one plugin's values (with its data, on purge).
    pub(crate) fn remove(&self, id: &str) {
        let _ = std::fs::remove_file(self.file(id));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest() -> Manifest {
        let text = r#"
id = "acme.jira"
version = "1.0.0"
name = "Jira"

[runtime]
command = "/bin/sh"

[[config]]
name = "base_url"
description = "The site."
type = "string"
default = "https://jira.example.com"

[[config]]
name = "token"
description = "An API token."
type = "string"
required = true
secret = true

[[config]]
name = "page_size"
description = "Per page."
type = "integer"

[capabilities]
network = { connect = [443] }
filesystem = [{ path = "/srv/shared", access = "write" }]
env = ["HTTPS_PROXY"]
memory_mb = 100000
"#;
        match Manifest::parse(Path::new("/"), text) {
            Ok(m) => m,
            Err(p) => panic!("{p:#?}"),
        }
    }

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

    #[test]
    fn capabilities_apply_only_when_granted_and_limits_are_capped() {
        let m = manifest();
        let cfg = SandboxConfig::default();
        let none = sandbox_policy(&m, &Operator::default(), &cfg);
        assert_eq!(none.network, Some(NetPolicy::Deny));
        assert_eq!(none.filesystem, Some(Vec::new()));
        assert_eq!(none.memory_bytes, Some(cfg.max_memory_mb << 20));
        assert_eq!(pass_env(&m, &Operator::default()), Vec::<String>::new());
        let op = Operator {
            grant: [Grant::Network, Grant::Filesystem, Grant::Env].into(),
            sandbox_off: ["processes".to_owned()].into(),
            ..Operator::default()
        };
        let granted = sandbox_policy(&m, &op, &cfg);
        assert_eq!(granted.network, Some(NetPolicy::Connect(vec![443])));
        assert_eq!(
            granted.filesystem.map(|f| f.len()),
            Some(1),
            "the declared path"
        );
        assert_eq!(granted.processes, None);
        assert_eq!(pass_env(&m, &op), ["HTTPS_PROXY"]);
        assert_eq!(ungranted(&m, &Operator::default()).len(), 3);
    }
}
