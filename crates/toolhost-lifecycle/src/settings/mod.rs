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
//!
//! The rules live in four parts:
//!
//! - [`sources`]: where a value comes from, as the operator's
//!   configuration file says (`<name>_file`, `<name>_env`, inline), and the
//!   operator's other decisions for a plugin, checked;
//! - [`values`]: each declared item resolved from its sources, typed,
//!   checked, and stored when set through the admin API;
//! - [`grants`]: the declared capabilities the operator granted, and the
//!   sandbox policy that follows from them.

pub mod grants;
pub mod registry;
pub mod sources;
pub mod values;

pub use grants::{SandboxConfig, granted_audiences, pass_env, sandbox_policy, ungranted};
pub use sources::{
    FileValues, Grant, Operator, OperatorFile, OperatorFileError, PluginTelemetry, RawValue,
    Source, Supplied,
};
pub(crate) use values::Stored;
pub use values::{
    ItemStatus, MAX_VALUE_BYTES, Resolved, check_file, check_update, did_you_mean, resolve,
    without_inline_secrets,
};

#[cfg(test)]
pub(crate) mod sample {
    //! A manifest that declares every kind of item and capability.

    use std::path::Path;
    use toolhost_manifest::Manifest;

    pub(crate) fn manifest() -> Manifest {
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
}
