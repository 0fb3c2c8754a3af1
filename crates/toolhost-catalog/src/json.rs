//! A descriptor as JSON, the form `toolhost catalog push` reads and
//! `catalog show` prints: every field by the name docs/CONTRACT.md §2 gives
//! it, the backend's policy flat (`requires_approval`, `rate_per_minute`,
//! `rate_burst`), and an unknown key refused by name. serde drops a key it
//! has no field for; here that would turn a misspelt `requires_approval`
//! into a tool served without asking.
//!
//! What this module must not do: accept a key it does not map, or write a
//! field the reader would not read back.

use crate::descriptor::{CallPolicy, CallRate, Descriptor, Fingerprint};
use crate::schema::Schema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use toolhost_manifest::{Annotations, TaskSupport};
use toolhost_validate::UnknownArguments;

impl Serialize for Descriptor {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        DescriptorJson::from(self.clone()).serialize(s)
    }
}

impl<'de> Deserialize<'de> for Descriptor {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let j = DescriptorJson::deserialize(d)?;
        Descriptor::try_from(j).map_err(serde::de::Error::custom)
    }
}

/// A descriptor as JSON: every field by the name docs/CONTRACT.md §2 gives
/// it, unknown keys refused.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct DescriptorJson {
    plugin_id: String,
    plugin_version: String,
    local_name: String,
    exposed_name: String,
    title: Option<String>,
    description: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    instructions: Option<String>,
    surfaces: Vec<String>,
    input_schema: Schema,
    output_schema: Option<Schema>,
    #[serde(with = "annotations_serde")]
    annotations: Annotations,
    timeout_ms: u32,
    aliases: BTreeMap<String, String>,
    unknown_arguments: UnknownArguments,
    #[serde(default)]
    reset_timeout_on_progress: bool,
    #[serde(default, with = "task_serde")]
    task: TaskSupport,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    task_timeout_ms: Option<u32>,
    /// Every call needs a person's approval first.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    requires_approval: bool,
    /// A per-tool rate: calls a minute (with `rate_burst`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    rate_per_minute: Option<u32>,
    /// A per-tool rate: the most calls at once (with `rate_per_minute`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    rate_burst: Option<u32>,
    /// The same policy, nested, as `catalog show` printed it before the
    /// flat names: read, never written.
    #[serde(default, skip_serializing)]
    call_policy: Option<CallPolicy>,
}

impl TryFrom<DescriptorJson> for Descriptor {
    type Error = String;

    fn try_from(j: DescriptorJson) -> Result<Self, String> {
        let flat = CallPolicy {
            requires_approval: j.requires_approval,
            rate: match (j.rate_per_minute, j.rate_burst) {
                (None, None) => None,
                (Some(per_minute), Some(burst)) => Some(CallRate { per_minute, burst }),
                _ => {
                    return Err(format!(
                        "{}: rate_per_minute and rate_burst go together (give both, or neither)",
                        j.exposed_name
                    ));
                }
            },
        };
        let call_policy = match j.call_policy {
            Some(nested) if !flat.is_nothing() && nested != flat => {
                return Err(format!(
                    "{}: the policy is given twice, as call_policy and as requires_approval/rate_*, and they differ",
                    j.exposed_name
                ));
            }
            Some(nested) => nested,
            None => flat,
        };
        Ok(Self {
            plugin_id: j.plugin_id,
            plugin_version: j.plugin_version,
            local_name: j.local_name,
            exposed_name: j.exposed_name,
            title: j.title,
            description: j.description,
            instructions: j.instructions,
            surfaces: j.surfaces,
            input_schema: j.input_schema,
            output_schema: j.output_schema,
            annotations: j.annotations,
            timeout_ms: j.timeout_ms,
            aliases: j.aliases,
            unknown_arguments: j.unknown_arguments,
            reset_timeout_on_progress: j.reset_timeout_on_progress,
            task: j.task,
            task_timeout_ms: j.task_timeout_ms,
            call_policy,
            fingerprint: Fingerprint::UNSEALED,
        })
    }
}

impl From<Descriptor> for DescriptorJson {
    fn from(d: Descriptor) -> Self {
        Self {
            plugin_id: d.plugin_id,
            plugin_version: d.plugin_version,
            local_name: d.local_name,
            exposed_name: d.exposed_name,
            title: d.title,
            description: d.description,
            instructions: d.instructions,
            surfaces: d.surfaces,
            input_schema: d.input_schema,
            output_schema: d.output_schema,
            annotations: d.annotations,
            timeout_ms: d.timeout_ms,
            aliases: d.aliases,
            unknown_arguments: d.unknown_arguments,
            reset_timeout_on_progress: d.reset_timeout_on_progress,
            task: d.task,
            task_timeout_ms: d.task_timeout_ms,
            requires_approval: d.call_policy.requires_approval,
            rate_per_minute: d.call_policy.rate.map(|r| r.per_minute),
            rate_burst: d.call_policy.rate.map(|r| r.burst),
            call_policy: None,
        }
    }
}

impl PartialEq for Descriptor {
    fn eq(&self, o: &Self) -> bool {
        if self.fingerprint.is_sealed() && o.fingerprint.is_sealed() {
            return self.fingerprint == o.fingerprint;
        }
        self.plugin_version == o.plugin_version && self.same_contract_as(o)
    }
}

impl Descriptor {
    /// Whether `o` declares this tool exactly as `self` does, whatever
    /// version of the plugin serves it: an upgrade that changed nothing a
    /// call is checked or run under. A call that read the tool just before
    /// such an upgrade may finish on the version it read.
    #[must_use]
    pub fn same_contract_as(&self, o: &Self) -> bool {
        self.plugin_id == o.plugin_id
            && self.local_name == o.local_name
            && self.exposed_name == o.exposed_name
            && self.title == o.title
            && self.description == o.description
            && self.surfaces == o.surfaces
            && self.input_schema == o.input_schema
            && self.output_schema == o.output_schema
            && self.annotations == o.annotations
            && self.timeout_ms == o.timeout_ms
            && self.aliases == o.aliases
            && self.unknown_arguments == o.unknown_arguments
            && self.reset_timeout_on_progress == o.reset_timeout_on_progress
            && self.task == o.task
            && self.task_timeout_ms == o.task_timeout_ms
            && self.call_policy == o.call_policy
    }
}

/// `task` as the manifest's word; an unknown word is refused.
mod task_serde {
    use serde::{Deserialize, Deserializer, Serializer};
    use toolhost_manifest::TaskSupport;

    pub fn serialize<S: Serializer>(t: &TaskSupport, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(t.as_str())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<TaskSupport, D::Error> {
        let word = String::deserialize(d)?;
        TaskSupport::parse(&word).ok_or_else(|| {
            serde::de::Error::custom("task must be \"never\", \"optional\" or \"required\"")
        })
    }
}

/// The four hints, each by name.
mod annotations_serde {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    use toolhost_manifest::Annotations;

    #[derive(Serialize, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Wire {
        read_only: bool,
        destructive: bool,
        idempotent: bool,
        open_world: bool,
    }

    pub fn serialize<S: Serializer>(a: &Annotations, s: S) -> Result<S::Ok, S::Error> {
        Wire {
            read_only: a.read_only,
            destructive: a.destructive,
            idempotent: a.idempotent,
            open_world: a.open_world,
        }
        .serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Annotations, D::Error> {
        let w = Wire::deserialize(d)?;
        Ok(Annotations {
            read_only: w.read_only,
            destructive: w.destructive,
            idempotent: w.idempotent,
            open_world: w.open_world,
        })
    }
}
