//! Registry credentials, where the container tools keep them.
//!
//! The first file that exists is read: `$REGISTRY_AUTH_FILE` (podman,
//! skopeo), `$DOCKER_CONFIG/config.json`, `$XDG_RUNTIME_DIR/containers/auth.json`,
//! then `~/.docker/config.json`. Each has the same shape:
//! `{"auths": {"HOST[:PORT]": {"auth": base64("user:password")}}}` (a key
//! may carry `https://` and a path, as old Docker wrote them). Credential
//! helpers (`credsStore`, `credHelpers`) are programs; toolhost does not
//! run them, and says so when a registry asks for credentials it has not
//! found.
//!
//! What this module must not do: print or log a credential, or read a
//! file of unbounded size.

use base64::Engine as _;
use std::path::{Path, PathBuf};

/// A user name and password for one registry.
#[derive(Clone, PartialEq, Eq)]
pub struct Basic {
    /// The user name.
    pub user: String,
    /// The password (or an identity token).
    pub password: String,
}

impl std::fmt::Debug for Basic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Basic")
            .field("user", &self.user)
            .finish_non_exhaustive()
    }
}

/// What was found for one registry, and where it was looked for.
#[derive(Debug, Clone, Default)]
pub struct Found {
    /// The credentials, if a file had them.
    pub basic: Option<Basic>,
    /// The file that was read (or `None`: none of them exists).
    pub file: Option<PathBuf>,
    /// The file names a credential helper for this registry.
    pub helper: bool,
}

impl Found {
    /// Where credentials were looked for, for an error message.
    #[must_use]
    pub fn looked_in(&self) -> String {
        match &self.file {
            Some(f) => format!(
                "{}{}",
                f.display(),
                if self.helper {
                    " (it names a credential helper, which toolhost does not run: write the registry's credentials into an auth file with `skopeo login --authfile FILE` and point REGISTRY_AUTH_FILE at it)"
                } else {
                    ""
                }
            ),
            None => {
                "no auth file (REGISTRY_AUTH_FILE, DOCKER_CONFIG, ~/.docker/config.json)".to_owned()
            }
        }
    }
}

const MAX_AUTH_FILE: u64 = 1 << 20;

/// The candidate files, in order.
fn candidates() -> Vec<PathBuf> {
    let env = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
    let mut out = Vec::new();
    if let Some(f) = env("REGISTRY_AUTH_FILE") {
        out.push(PathBuf::from(f));
    }
    if let Some(d) = env("DOCKER_CONFIG") {
        out.push(Path::new(&d).join("config.json"));
    }
    if let Some(d) = env("XDG_RUNTIME_DIR") {
        out.push(Path::new(&d).join("containers/auth.json"));
    }
    if let Some(h) = env("HOME") {
        out.push(Path::new(&h).join(".docker/config.json"));
    }
    out
}

/// The credentials for `registry` (`host[:port]`) from the first auth
/// file that exists.
#[must_use]
pub fn lookup(registry: &str) -> Found {
    for file in candidates() {
        let Ok(meta) = std::fs::metadata(&file) else {
            continue;
        };
        let mut found = Found {
            file: Some(file.clone()),
            ..Found::default()
        };
        if meta.len() > MAX_AUTH_FILE {
            tracing::warn!(file = %file.display(), "the registry auth file is larger than 1 MiB: not read");
            return found;
        }
        let Ok(text) = std::fs::read(&file) else {
            return found;
        };
        let Ok(v) = serde_json::from_slice::<serde_json::Value>(&text) else {
            tracing::warn!(file = %file.display(), "the registry auth file is not JSON: not read");
            return found;
        };
        found.helper = v.get("credsStore").is_some()
            || v.get("credHelpers").and_then(|h| h.get(registry)).is_some();
        let Some(auths) = v.get("auths").and_then(serde_json::Value::as_object) else {
            return found;
        };
        let entry = auths.iter().find(|(k, _)| key_names(k, registry));
        found.basic = entry.and_then(|(_, e)| decode(e));
        return found;
    }
    Found::default()
}

/// Whether an `auths` key (`host`, `https://host/v1/`, `host/path`) names
/// `registry`.
fn key_names(key: &str, registry: &str) -> bool {
    let k = key
        .strip_prefix("https://")
        .or_else(|| key.strip_prefix("http://"))
        .unwrap_or(key);
    k.split('/').next() == Some(registry)
}

fn decode(entry: &serde_json::Value) -> Option<Basic> {
    if let Some(auth) = entry.get("auth").and_then(serde_json::Value::as_str) {
        let raw = base64::engine::general_purpose::STANDARD
            .decode(auth.trim())
            .ok()?;
        let text = String::from_utf8(raw).ok()?;
        let (user, password) = text.split_once(':')?;
        return Some(Basic {
            user: user.to_owned(),
            password: password.to_owned(),
        });
    }
    let user = entry.get("username")?.as_str()?;
    let password = entry.get("password")?.as_str()?;
    Some(Basic {
        user: user.to_owned(),
        password: password.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_as_docker_and_podman_write_them() {
        assert!(key_names("localhost:5000", "localhost:5000"));
        assert!(key_names(
            "https://index.example.com/v1/",
            "index.example.com"
        ));
        assert!(key_names("reg.example.com/team", "reg.example.com"));
        assert!(!key_names("reg.example.com.evil", "reg.example.com"));
        assert!(!key_names("localhost:5001", "localhost:5000"));
    }

    #[test]
    fn an_entry_decodes_and_never_shows_its_password() {
        let e = serde_json::json!({ "auth": base64::engine::general_purpose::STANDARD.encode("alice:pa:ss") });
        let b = decode(&e);
        assert_eq!(
            b.as_ref().map(|b| (b.user.as_str(), b.password.as_str())),
            Some(("alice", "pa:ss"))
        );
        assert!(!format!("{b:?}").contains("pa:ss"));
        assert!(decode(&serde_json::json!({ "auth": "%%%" })).is_none());
    }
}
