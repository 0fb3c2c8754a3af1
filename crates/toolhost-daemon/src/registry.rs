//! `[registry]`: how the daemon reaches OCI registries for `plugins
//! install REGISTRY/REPO:TAG`, read and checked at start (a CA file that
//! cannot be read is refused then, not at the first pull).

use serde::Deserialize;
use std::path::PathBuf;

/// `[registry]`: how `plugins install REGISTRY/REPO:TAG` reaches
/// registries. Credentials are not here: they are read where the
/// container tools keep them (`REGISTRY_AUTH_FILE`, `DOCKER_CONFIG`).
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegistryFile {
    /// PEM files of certificate authorities trusted besides the system's.
    #[serde(default)]
    pub ca_files: Vec<PathBuf>,
    /// Registries (`host:port`) reached over plain HTTP when they do not
    /// answer HTTPS; loopback ones always may be.
    #[serde(default)]
    pub plain_http: Vec<String>,
    /// The most pulled packages kept in `<state_dir>/registry`, in MiB.
    pub cache_mb: Option<u64>,
}

impl RegistryFile {
    /// The lifecycle's registry settings; a CA file that cannot be read
    /// or a plain-HTTP entry that is not a registry is refused at start.
    ///
    /// # Errors
    /// Naming the key and the entry.
    pub fn resolve(&self) -> anyhow::Result<toolhost_lifecycle::RegistryConfig> {
        for f in &self.ca_files {
            let text = std::fs::read_to_string(f).map_err(|e| {
                anyhow::anyhow!("[registry] ca_files: cannot read {}: {e}", f.display())
            })?;
            if !text.contains("-----BEGIN CERTIFICATE-----") {
                anyhow::bail!(
                    "[registry] ca_files: {} holds no PEM certificate",
                    f.display()
                );
            }
        }
        for r in &self.plain_http {
            if toolhost_registry::Reference::parse(&format!("{r}/x:1")).is_err() {
                anyhow::bail!(
                    "[registry] plain_http: {r:?} is not a registry (write host:port, e.g. registry.internal:5000)"
                );
            }
        }
        Ok(toolhost_lifecycle::RegistryConfig {
            settings: toolhost_registry::Settings {
                ca_files: self.ca_files.clone(),
                plain_http: self.plain_http.clone(),
            },
            cache_bytes: self.cache_mb.unwrap_or(1024).saturating_mul(1 << 20),
        })
    }
}
