//! The plugin's configuration: the values and secrets the operator supplied
//! for the `[[config]]` items its manifest declares.
//!
//! toolhost resolves them (operator's value, else the manifest's default)
//! and writes them, once per process start, to a 0600 file named by
//! `TOOLHOST_PLUGIN_CONFIG`. This module reads that file once, deletes it,
//! and keeps the values in memory: a process the plugin starts later finds
//! no file to read.
//!
//! Plain values and secrets are apart on purpose: [`Config::get`] never
//! returns a secret, and a [`Secret`] prints as `Secret(..)` in `Debug`, so
//! logging the whole configuration or a secret by mistake leaks nothing.
//!
//! ```no_run
//! let cfg = toolhost_plugin_sdk::config();
//! let site = cfg.get_str("base_url").unwrap_or("https://jira.example.com");
//! let per_page = cfg.get_i64("page_size").unwrap_or(50);
//! if let Some(token) = cfg.secret("token") {
//!     let header = format!("Bearer {}", token.expose());
//!     # let _ = (site, per_page, header);
//! }
//! ```

use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::sync::OnceLock;
use toolhost_proto::contract::CONFIG_FILE_KEY;

/// A secret value. `Debug` and `Display` never show it; [`Secret::expose`]
/// does, where it is used.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// The value itself.
    #[must_use]
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

impl std::fmt::Display for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("(secret)")
    }
}

/// The configuration values and secrets toolhost gave this process.
#[derive(Debug, Default, Clone)]
pub struct Config {
    values: Map<String, Value>,
    secrets: BTreeMap<String, Secret>,
}

impl Config {
    /// Parses toolhost's document: `{"config": {..}, "secrets": {..}}`.
    /// Anything else is an empty configuration.
    #[must_use]
    pub fn from_json(text: &str) -> Self {
        let Ok(Value::Object(mut doc)) = serde_json::from_str::<Value>(text) else {
            return Self::default();
        };
        let values = match doc.remove("config") {
            Some(Value::Object(m)) => m,
            _ => Map::new(),
        };
        let secrets = match doc.remove("secrets") {
            Some(Value::Object(m)) => m
                .into_iter()
                .filter_map(|(k, v)| match v {
                    Value::String(s) => Some((k, Secret(s))),
                    Value::Number(n) => Some((k, Secret(n.to_string()))),
                    Value::Bool(b) => Some((k, Secret(b.to_string()))),
                    _ => None,
                })
                .collect(),
            _ => BTreeMap::new(),
        };
        Self { values, secrets }
    }

    /// A plain (non-secret) value; `None` when it has none (optional and
    /// not set). Never a secret: use [`Config::secret`].
    #[must_use]
    pub fn get(&self, name: &str) -> Option<&Value> {
        self.values.get(name)
    }

    /// A string item's value.
    #[must_use]
    pub fn get_str(&self, name: &str) -> Option<&str> {
        self.get(name).and_then(Value::as_str)
    }

    /// An integer item's value.
    #[must_use]
    pub fn get_i64(&self, name: &str) -> Option<i64> {
        self.get(name).and_then(Value::as_i64)
    }

    /// A boolean item's value.
    #[must_use]
    pub fn get_bool(&self, name: &str) -> Option<bool> {
        self.get(name).and_then(Value::as_bool)
    }

    /// A secret item's value.
    #[must_use]
    pub fn secret(&self, name: &str) -> Option<&Secret> {
        self.secrets.get(name)
    }
}

static CONFIG: OnceLock<Config> = OnceLock::new();

/// Gives this process its configuration before anything reads it: the test
/// harness's values. `false` when it was read (or given) already, and so
/// stays as it was.
#[cfg(feature = "testing")]
pub(crate) fn provide(given: Config) -> bool {
    CONFIG.set(given).is_ok()
}

/// This process's configuration, read (and its file deleted) on first use.
/// Empty when the manifest declares no `[[config]]` items.
pub fn config() -> &'static Config {
    CONFIG.get_or_init(|| {
        let Some(path) = std::env::var_os(CONFIG_FILE_KEY) else {
            return Config::default();
        };
        let text = std::fs::read_to_string(&path);
        let _ = std::fs::remove_file(&path);
        match text {
            Ok(t) => Config::from_json(&t),
            Err(e) => {
                eprintln!("cannot read the configuration toolhost gave this plugin: {e}");
                Config::default()
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_and_secrets_are_apart_and_secrets_never_print() {
        let c = Config::from_json(
            r#"{"config": {"url": "https://x", "n": 3, "on": true}, "secrets": {"token": "s3cr3t"}}"#,
        );
        assert_eq!(c.get_str("url"), Some("https://x"));
        assert_eq!(c.get_i64("n"), Some(3));
        assert_eq!(c.get_bool("on"), Some(true));
        assert_eq!(c.get("token"), None);
        assert_eq!(c.secret("token").map(Secret::expose), Some("s3cr3t"));
        assert!(!format!("{c:?}").contains("s3cr3t"));
        assert!(
            !c.secret("token")
                .map_or(String::new(), ToString::to_string)
                .contains("s3cr3t")
        );
        assert!(Config::from_json("not json").get("url").is_none());
    }
}
