//! What a plugin asks for beyond its tools: `[[config]]` items (settings
//! and secrets the operator supplies) and `[capabilities]` (paths, network,
//! environment). The manifest only *declares* them; an operator grants
//! them. `toolhost check` validates the declarations and shows them, so an
//! operator sees what a plugin asks for before running it.

use crate::problem::Rule;
use crate::read::Ctx;
use std::path::{Component, Path, PathBuf};
use toml::Table;

pub use crate::decl::{
    Access, Capabilities, ConfigDecl, ConfigType, ConfigValue, MAX_CONFIG_ITEMS, Network, PathGrant,
};

const CONFIG_KEYS: [&str; 6] = [
    "name",
    "description",
    "type",
    "required",
    "default",
    "secret",
];
/// The keys of `[capabilities]`: everything a plugin may ask of the
/// sandbox.
pub const CAPABILITY_KEYS: [&str; 7] = [
    "filesystem",
    "network",
    "env",
    "memory_mb",
    "open_files",
    "processes",
    "disk_mb",
];

fn is_config_name(n: &str) -> bool {
    let mut chars = n.chars();
    chars.next().is_some_and(|c| c.is_ascii_lowercase())
        && n.len() <= 64
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

fn is_env_name(n: &str) -> bool {
    let mut chars = n.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && n.len() <= 128
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// `[[config]]`, every problem reported.
///
/// Kept whole on purpose: one rule per line over a `[[config]]` item, in the
/// order PROTOCOL.md lists them.
pub(crate) fn config(cx: &mut Ctx<'_>, root: &Table) -> Vec<ConfigDecl> {
    let items = cx.array_of_tables(root, "config", MAX_CONFIG_ITEMS, Rule::Config);
    let mut out: Vec<ConfigDecl> = Vec::new();
    for (i, t) in items {
        cx.unknown_keys(t, "a [[config]] item", &CONFIG_KEYS);
        let name = cx.string(t, "name", true).unwrap_or_default();
        let label = if name.is_empty() {
            format!("config[{i}]")
        } else {
            format!("config item `{name}`")
        };
        if t.contains_key("name") && !is_config_name(&name) {
            cx.report(
                Rule::Config,
                format!(
                    "{label}: the name must be 1 to 64 of a-z, 0-9 and `_`, starting with a letter"
                ),
            );
        }
        if out.iter().any(|c| c.name == name) {
            cx.report(Rule::Config, format!("{label} is declared twice"));
        }
        let description = cx.string(t, "description", true).unwrap_or_default();
        if t.contains_key("description") && !crate::rules::is_valid_description(&description) {
            cx.report(
                Rule::Config,
                format!("{label}: the description must be 1 to 1024 bytes and not blank"),
            );
        }
        let kind = match cx.string(t, "type", true).as_deref() {
            Some("string") => Some(ConfigType::String),
            Some("integer") => Some(ConfigType::Integer),
            Some("boolean") => Some(ConfigType::Boolean),
            Some(other) => {
                cx.report(
                    Rule::Config,
                    format!("{label}: type {other:?} is not string, integer or boolean"),
                );
                None
            }
            None => None,
        };
        let required = cx.boolean(t, "required").unwrap_or(false);
        let secret = cx.boolean(t, "secret").unwrap_or(false);
        let default = match (t.get("default"), kind) {
            (None, _) | (_, None) => None,
            (Some(_), Some(_)) if secret => {
                cx.report(
                    Rule::Config,
                    format!("{label}: a secret has no default (it would ship inside the package)"),
                );
                None
            }
            (Some(_), Some(_)) if required => {
                cx.report(
                    Rule::Config,
                    format!("{label}: a required item has no default (drop one of the two)"),
                );
                None
            }
            (Some(v), Some(k)) => match (k, v) {
                (ConfigType::String, toml::Value::String(s)) => {
                    Some(ConfigValue::String(s.clone()))
                }
                (ConfigType::Integer, toml::Value::Integer(n)) => Some(ConfigValue::Integer(*n)),
                (ConfigType::Boolean, toml::Value::Boolean(b)) => Some(ConfigValue::Boolean(*b)),
                (k, v) => {
                    cx.report(
                        Rule::Config,
                        format!(
                            "{label}: the default is {}, but the type is {}",
                            v.type_str(),
                            k.as_str()
                        ),
                    );
                    None
                }
            },
        };
        if let Some(kind) = kind {
            out.push(ConfigDecl {
                name,
                description,
                kind,
                required,
                default,
                secret,
            });
        }
    }
    out
}

fn absolute_and_clean(p: &Path) -> bool {
    p.is_absolute()
        && p.components()
            .all(|c| !matches!(c, Component::ParentDir | Component::CurDir))
}

/// `[capabilities]`, every problem reported.
///
/// Kept whole on purpose: one rule per line over `[capabilities]`, in the order
/// PROTOCOL.md lists them, so the checks can be read against the contract.
pub(crate) fn capabilities(cx: &mut Ctx<'_>, root: &Table) -> Capabilities {
    let credentials = credentials(cx, root);
    let Some(t) = cx.table(root, "capabilities") else {
        return Capabilities {
            credentials,
            ..Capabilities::default()
        };
    };
    cx.unknown_keys(t, "[capabilities]", &CAPABILITY_KEYS);
    let mut caps = Capabilities {
        credentials,
        ..Capabilities::default()
    };
    match t.get("filesystem") {
        None => {}
        Some(toml::Value::Array(items)) => {
            for (i, item) in items.iter().enumerate() {
                let entry = item.as_table();
                let path = entry
                    .and_then(|e| e.get("path"))
                    .and_then(toml::Value::as_str);
                let access = entry
                    .and_then(|e| e.get("access"))
                    .and_then(toml::Value::as_str);
                let access = match access {
                    Some("read") => Some(Access::Read),
                    Some("write") => Some(Access::Write),
                    _ => None,
                };
                match (path, access) {
                    (Some(p), Some(access)) if absolute_and_clean(Path::new(p)) => {
                        caps.filesystem.push(PathGrant {
                            path: PathBuf::from(p),
                            access,
                        });
                    }
                    (Some(_), Some(_)) => cx.report(
                        Rule::Capabilities,
                        format!("capabilities.filesystem[{i}]: the path must be absolute, without `.` or `..`"),
                    ),
                    _ => cx.report(
                        Rule::Capabilities,
                        format!(
                            "capabilities.filesystem[{i}] must be {{ path = \"/absolute/path\", access = \"read\" or \"write\" }}"
                        ),
                    ),
                }
            }
        }
        Some(v) => cx.report(
            Rule::WrongType,
            format!(
                "capabilities.filesystem must be an array of tables, not {}",
                v.type_str()
            ),
        ),
    }
    caps.network = match t.get("network") {
        None => Network::None,
        Some(toml::Value::String(s)) if s == "none" => Network::None,
        Some(toml::Value::String(s)) if s == "any" => Network::Any,
        Some(toml::Value::Table(n)) => {
            cx.unknown_keys(n, "capabilities.network", &["connect"]);
            let ports: Option<Vec<u16>> =
                n.get("connect").and_then(toml::Value::as_array).map(|a| {
                    a.iter()
                        .filter_map(|p| {
                            p.as_integer()
                                .and_then(|p| u16::try_from(p).ok())
                                .filter(|p| *p > 0)
                        })
                        .collect()
                });
            let declared = n
                .get("connect")
                .and_then(toml::Value::as_array)
                .map_or(0, Vec::len);
            match ports {
                Some(p) if !p.is_empty() && p.len() == declared => Network::Connect(p),
                _ => {
                    cx.report(
                        Rule::Capabilities,
                        "capabilities.network.connect must list TCP ports, 1 to 65535",
                    );
                    Network::None
                }
            }
        }
        Some(_) => {
            cx.report(
                Rule::Capabilities,
                "capabilities.network must be \"none\", \"any\", or { connect = [ports] }",
            );
            Network::None
        }
    };
    if let Some(env) = cx.strings(t, "env") {
        for name in &env {
            if !is_env_name(name) {
                cx.report(
                    Rule::Capabilities,
                    format!("capabilities.env: {name:?} is not an environment variable name"),
                );
            } else if toolhost_proto::contract::RESERVED_ENV.contains(&name.as_str()) {
                cx.report(
                    Rule::Capabilities,
                    format!("capabilities.env: {name} is toolhost's to set"),
                );
            }
        }
        caps.env = env;
    }
    let limit = |cx: &mut Ctx<'_>, key: &str, (low, high): (u64, u64)| match t.get(key) {
        None => None,
        Some(toml::Value::Integer(n)) if (low..=high).contains(&n.unsigned_abs()) && *n > 0 => {
            Some(n.unsigned_abs())
        }
        Some(_) => {
            cx.report(
                Rule::Capabilities,
                format!("capabilities.{key} must be an integer from {low} to {high}"),
            );
            None
        }
    };
    caps.memory_mb = limit(cx, "memory_mb", crate::decl::MEMORY_MB_RANGE);
    caps.open_files = limit(cx, "open_files", crate::decl::OPEN_FILES_RANGE);
    caps.processes = limit(cx, "processes", crate::decl::PROCESSES_RANGE);
    caps.disk_mb = limit(cx, "disk_mb", crate::decl::DISK_MB_RANGE);
    caps
}

/// What a plugin asks the operator for, one line each: its configuration
/// (a secret's value is never in a manifest, so nothing is hidden here) and
/// its capabilities.
/// (`Manifest::asks` calls it with its own declarations.)
pub fn asks(config: &[ConfigDecl], caps: &Capabilities) -> Vec<String> {
    let mut out = Vec::new();
    for c in config {
        let mut what = vec![c.kind.as_str().to_owned()];
        if c.required {
            what.push("required".into());
        }
        if c.secret {
            what.push("secret".into());
        }
        out.push(format!(
            "config {}: {} ({})",
            c.name,
            c.description,
            what.join(", ")
        ));
    }
    for g in &caps.filesystem {
        let access = match g.access {
            Access::Read => "read",
            Access::Write => "read and write",
        };
        out.push(format!("asks for {}: {access}", g.path.display()));
    }
    match &caps.network {
        Network::None => {}
        Network::Any => out.push("asks for the network: any TCP port".into()),
        Network::Connect(ports) => out.push(format!(
            "asks for the network: TCP to port(s) {}",
            ports
                .iter()
                .map(u16::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
    if !caps.env.is_empty() {
        out.push(format!("asks for the environment: {}", caps.env.join(", ")));
    }
    if !caps.credentials.is_empty() {
        out.push(format!(
            "asks for tokens on its callers' behalf, for: {}",
            caps.credentials.join(", ")
        ));
    }
    if let Some(mb) = caps.memory_mb {
        out.push(format!("asks for memory: {mb} MiB of address space"));
    }
    if let Some(n) = caps.open_files {
        out.push(format!("asks for open files: {n}"));
    }
    if let Some(n) = caps.processes {
        out.push(format!("asks for processes and threads: {n}"));
    }
    if let Some(mb) = caps.disk_mb {
        out.push(format!("asks for disk: {mb} MiB of data"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_their_patterns() {
        assert!(is_config_name("api_url"));
        assert!(!is_config_name("Api"));
        assert!(!is_config_name("1x"));
        assert!(!is_config_name(""));
        assert!(is_env_name("HTTP_PROXY"));
        assert!(!is_env_name("A-B"));
        assert!(absolute_and_clean(Path::new("/etc/ssl")));
        assert!(!absolute_and_clean(Path::new("/etc/../root")));
        assert!(!absolute_and_clean(Path::new("etc")));
    }
}

#[cfg(test)]
mod parse_tests {
    use super::*;
    use crate::Manifest;

    #[test]
    fn a_manifest_declares_config_and_capabilities() {
        let text = r#"
id = "acme.jira"
version = "1.0.0"
name = "Jira"

[runtime]
command = "/bin/sh"

[[config]]
name = "base_url"
description = "The Jira site."
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
description = "Issues per page."
type = "integer"
default = 50

[capabilities]
filesystem = [{ path = "/etc/ssl/certs", access = "read" }]
network = { connect = [443] }
env = ["HTTPS_PROXY"]
memory_mb = 512
processes = 16
"#;
        let m = match Manifest::parse(Path::new("/"), text) {
            Ok(m) => m,
            Err(p) => panic!("{p:#?}"),
        };
        assert_eq!(m.config.len(), 3);
        assert_eq!(
            m.config[0].default,
            Some(ConfigValue::String("https://jira.example.com".into()))
        );
        assert!(m.config[1].secret && m.config[1].required);
        assert_eq!(m.config[2].kind, ConfigType::Integer);
        assert_eq!(m.capabilities.network, Network::Connect(vec![443]));
        assert_eq!(m.capabilities.filesystem[0].access, Access::Read);
        assert_eq!(m.capabilities.env, ["HTTPS_PROXY"]);
        assert_eq!(m.capabilities.memory_mb, Some(512));
        assert_eq!(m.capabilities.processes, Some(16));
        assert_eq!(m.capabilities.open_files, None);
    }
}

/// `[credentials]`: the audiences a plugin calls with a token exchanged
/// from its caller's. An audience is what the authorization server names a
/// service by (a URL, or a URN): 1 to 256 printable ASCII characters with
/// no space.
fn credentials(cx: &mut Ctx<'_>, root: &Table) -> Vec<String> {
    let Some(t) = cx.table(root, "credentials") else {
        return Vec::new();
    };
    cx.unknown_keys(t, "[credentials]", &["audiences"]);
    let audiences = cx.strings(t, "audiences").unwrap_or_default();
    if audiences.len() > crate::decl::MAX_AUDIENCES {
        cx.report(
            Rule::Credentials,
            format!(
                "credentials.audiences lists {} audiences; at most {} are allowed",
                audiences.len(),
                crate::decl::MAX_AUDIENCES
            ),
        );
        return Vec::new();
    }
    let mut out: Vec<String> = Vec::new();
    for a in audiences {
        if a.is_empty() || a.len() > 256 || !a.bytes().all(|b| b.is_ascii_graphic()) {
            cx.report(
                Rule::Credentials,
                "credentials.audiences: each audience is 1 to 256 printable ASCII characters, no space",
            );
        } else if out.contains(&a) {
            cx.report(
                Rule::Credentials,
                format!("credentials.audiences names {a} twice"),
            );
        } else {
            out.push(a);
        }
    }
    out
}
