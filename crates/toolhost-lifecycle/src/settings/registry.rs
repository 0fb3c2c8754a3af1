//! `[registry]`, as the lifecycle takes it: how registries are reached
//! and how much of what was pulled is kept.

/// How a daemon reaches registries and keeps what it pulled.
#[derive(Debug, Clone)]
pub struct RegistryConfig {
    /// TLS roots and the registries plain HTTP may reach.
    pub settings: toolhost_registry::Settings,
    /// The most the cache of pulled packages may weigh.
    pub cache_bytes: u64,
}

impl Default for RegistryConfig {
    fn default() -> Self {
        Self {
            settings: toolhost_registry::Settings::default(),
            cache_bytes: 1 << 30,
        }
    }
}
