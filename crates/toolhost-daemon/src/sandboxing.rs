//! The sandbox's sections of the configuration file: `[sandbox]` (every
//! plugin's limits, the disk quota's mechanism, the plugins' account) and
//! `[plugin.<id>]` (one plugin's grants, values and rules turned off),
//! resolved into the lifecycle's types.

use anyhow::{Result, bail};
use serde::Deserialize;
use std::path::PathBuf;
use toolhost_lifecycle::settings::{Operator, OperatorFile, RawValue, SandboxConfig};

/// `[plugin.<id>]`: what the operator decides for one plugin.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PluginConfig {
    /// Variables of the daemon's environment this plugin also gets (its
    /// environment is otherwise clean).
    #[serde(default)]
    pub pass_env: Vec<String>,
    /// Its `[[config]]` values: plain values inline, secrets as
    /// `<name>_file` (a file's content) or `<name>_env` (a variable of the
    /// daemon's environment).
    #[serde(default)]
    pub config: toml::Table,
    /// Capabilities its manifest declares that the operator grants:
    /// `filesystem`, `network`, `env`, `credentials`.
    #[serde(default)]
    pub grant: Vec<String>,
    /// Sandbox rules turned off for this plugin.
    #[serde(default)]
    pub sandbox_off: Vec<String>,
    /// More paths it may read and execute.
    #[serde(default)]
    pub read: Vec<PathBuf>,
    /// Its SDK exports spans to `[telemetry]`'s collector: it gets the
    /// collector's address (not toolhost's export headers) and may
    /// connect to the collector's port, and to no other.
    #[serde(default)]
    pub telemetry: bool,
    /// What an upgrade of this plugin that changes its contract does:
    /// `"accept"` or `"hold"` (`[install] contract_changes` otherwise).
    pub contract_changes: Option<String>,
}

/// `[sandbox]`: the sandbox of every plugin.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SandboxFile {
    /// `false` turns the sandbox off for every plugin.
    pub enabled: Option<bool>,
    /// Address space when a manifest asks for none, MiB.
    pub default_memory_mb: Option<u64>,
    /// The most any plugin gets, MiB.
    pub max_memory_mb: Option<u64>,
    /// Open files when a manifest asks for none.
    pub default_open_files: Option<u64>,
    /// The most any plugin gets.
    pub max_open_files: Option<u64>,
    /// Processes and threads when a manifest asks for none.
    pub default_processes: Option<u64>,
    /// The most any plugin gets.
    pub max_processes: Option<u64>,
    /// A data directory's quota when a manifest asks for none, MiB.
    pub default_disk_mb: Option<u64>,
    /// The most any plugin's data directory gets, MiB.
    pub max_disk_mb: Option<u64>,
    /// The most files and folders a plugin's data directory holds.
    pub disk_files: Option<u64>,
    /// How quotas are held: "auto" (a project quota where the file system
    /// has them, else measured) or "image" (an ext4 image per plugin).
    pub disk_quota: Option<String>,
    /// How often each plugin's disk use is read, ms.
    pub disk_check_ms: Option<u64>,
    /// Paths every plugin may read and execute (interpreters, libraries
    /// outside the system paths).
    #[serde(default)]
    pub read: Vec<PathBuf>,
    /// The account plugins run as (a root daemon only): a name, a uid, or
    /// `uid:gid`.
    pub user: Option<String>,
}

impl SandboxFile {
    /// The sandbox settings as a daemon reading this file applies them.
    pub fn resolve(&self) -> Result<SandboxConfig> {
        let d = SandboxConfig::default();
        let c = SandboxConfig {
            enabled: self.enabled.unwrap_or(d.enabled),
            default_memory_mb: self.default_memory_mb.unwrap_or(d.default_memory_mb),
            max_memory_mb: self.max_memory_mb.unwrap_or(d.max_memory_mb),
            default_open_files: self.default_open_files.unwrap_or(d.default_open_files),
            max_open_files: self.max_open_files.unwrap_or(d.max_open_files),
            default_processes: self.default_processes.unwrap_or(d.default_processes),
            max_processes: self.max_processes.unwrap_or(d.max_processes),
            default_disk_mb: self.default_disk_mb.unwrap_or(d.default_disk_mb),
            disk_files: self.disk_files.unwrap_or(d.disk_files),
            max_disk_mb: self.max_disk_mb.unwrap_or(d.max_disk_mb),
            disk_images: match self.disk_quota.as_deref() {
                None | Some("auto") => false,
                Some("image") => true,
                Some(other) => bail!(
                    "[sandbox] disk_quota must be \"auto\" or \"image\", not {:?}",
                    toolhost_base::text::escaped(other, 64)
                ),
            },
            disk_check: self
                .disk_check_ms
                .map_or(d.disk_check, std::time::Duration::from_millis),
            read: self.read.clone(),
            user: self
                .user
                .as_deref()
                .map(toolhost_sandbox::account::run_as)
                .transpose()?,
        };
        if c.default_memory_mb < 64
            || c.default_open_files < 16
            || c.default_processes < 1
            || c.default_disk_mb < 1
            || c.disk_files < 64
        {
            bail!(
                "[sandbox] defaults are too small to run anything: memory at least 64 MiB, 16 open files, 1 process, 1 MiB of disk, 64 files"
            );
        }
        Ok(c)
    }
}

impl PluginConfig {
    /// The operator's decisions for plugin `id`, every value read from its
    /// source by the lifecycle's rules (`toolhost_lifecycle::settings::sources`).
    pub fn operator(&self, id: &str) -> Result<Operator> {
        let file = OperatorFile {
            pass_env: self.pass_env.clone(),
            config: self
                .config
                .iter()
                .map(|(key, v)| {
                    let raw = match v {
                        toml::Value::String(s) => RawValue::Text(s.clone()),
                        toml::Value::Integer(n) => RawValue::Integer(*n),
                        toml::Value::Boolean(b) => RawValue::Boolean(*b),
                        _ => RawValue::Other,
                    };
                    (key.clone(), raw)
                })
                .collect(),
            grant: self.grant.clone(),
            sandbox_off: self.sandbox_off.clone(),
            read: self.read.clone(),
        };
        Ok(Operator::from_file(id, &file)?)
    }
}
