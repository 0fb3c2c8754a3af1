//! What is installed, as managed mode checks pushed descriptors against it.
//!
//! The backend decides which tools are active and for whom (surfaces,
//! descriptions, timeouts), but it cannot make toolhost call something a
//! plugin never declared: a pushed descriptor is served only when its plugin
//! is installed at that version and declares that local name with the same
//! canonical input and output schemas.

use crate::descriptor::canonical_digest;
use std::collections::HashMap;
use toolhost_manifest::Manifest;

#[derive(Debug, Clone, PartialEq, Eq)]
struct Declared {
    input: [u8; 32],
    output: Option<[u8; 32]>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Plugin {
    version: String,
    tools: HashMap<String, Declared>,
}

/// The installed declarations, by plugin id and local name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Installed {
    plugins: HashMap<String, Plugin>,
}

impl Installed {
    /// The declarations of these manifests.
    #[must_use]
    pub fn from_manifests<'a>(manifests: impl IntoIterator<Item = &'a Manifest>) -> Self {
        let plugins = manifests
            .into_iter()
            .map(|m| {
                let tools = m
                    .tools
                    .iter()
                    .map(|t| {
                        let d = Declared {
                            input: canonical_digest(&t.input_schema),
                            output: t.output_schema.as_ref().map(canonical_digest),
                        };
                        (t.name.clone(), d)
                    })
                    .collect();
                (
                    m.id.clone(),
                    Plugin {
                        version: m.version.to_string(),
                        tools,
                    },
                )
            })
            .collect();
        Self { plugins }
    }

    /// Why a descriptor (whose schemas have these digests) must be withheld,
    /// or `None` when it matches what is installed.
    pub(crate) fn verdict(
        &self,
        plugin_id: &str,
        version: &str,
        local: &str,
        digests: &([u8; 32], Option<[u8; 32]>),
    ) -> Option<String> {
        let Some(p) = self.plugins.get(plugin_id) else {
            return Some(format!("plugin {plugin_id} is not installed"));
        };
        if p.version != version {
            return Some(format!(
                "plugin {plugin_id} is installed at version {}, not {version}",
                p.version
            ));
        }
        let Some(t) = p.tools.get(local) else {
            return Some(format!(
                "plugin {plugin_id} does not declare a tool named {local}"
            ));
        };
        if t.input != digests.0 {
            return Some(format!(
                "the input schema differs from the one {plugin_id} declares for {local}"
            ));
        }
        if t.output != digests.1 {
            return Some(format!(
                "the output schema differs from the one {plugin_id} declares for {local}"
            ));
        }
        None
    }
}
