//! Catalog snapshots between the wire (`toolhost.admin.v1.Snapshot`, schemas
//! as JSON text) and the catalog's own types.

use toolhost_catalog::{CallPolicy, CallRate, Descriptor, Schema, Snapshot};
use toolhost_manifest::{Annotations, TaskSupport};
use toolhost_proto::admin as pb;
use toolhost_validate::UnknownArguments;

/// A pushed schema, checked to be JSON and kept as its text: a tool this
/// daemon withholds never has its schema's tree built (toolhost_catalog's
/// `Schema`).
fn schema(text: String, what: &str, tool: &str) -> Result<Option<Schema>, String> {
    if text.trim().is_empty() {
        return Ok(None);
    }
    Schema::parse(text)
        .map(Some)
        .map_err(|e| format!("{tool}: {what} is not valid JSON: {e}"))
}

/// The backend's policy for one tool: both rate fields zero means no pushed
/// rate (a zero in only one is kept, so the catalog's shape check names it).
fn call_policy(requires_approval: bool, per_minute: u32, burst: u32) -> CallPolicy {
    CallPolicy {
        requires_approval,
        rate: (per_minute != 0 || burst != 0).then_some(CallRate { per_minute, burst }),
    }
}

/// Why a sharded header pushed whole is refused.
const SHARDED_HERE: &str = "a sharded header (shards) is read from a fleet's bucket, where its shards are; a snapshot pushed here carries its tools";

/// A pushed snapshot as catalog data; schemas that are not JSON make it
/// invalid (every such problem is listed).
pub fn snapshot_from_proto(p: pb::Snapshot) -> Result<Snapshot, Vec<String>> {
    if !p.shards.is_empty() || !p.retiring.is_empty() {
        return Err(vec![SHARDED_HERE.to_owned()]);
    }
    let mut problems = Vec::new();
    let mut tools = Vec::with_capacity(p.tools.len());
    for t in p.tools {
        let name = t.exposed_name.clone();
        let input = match schema(t.input_schema_json, "input_schema_json", &name) {
            Ok(Some(v)) => v,
            Ok(None) => {
                problems.push(format!("{name}: input_schema_json is required"));
                continue;
            }
            Err(e) => {
                problems.push(e);
                continue;
            }
        };
        let output = match schema(t.output_schema_json, "output_schema_json", &name) {
            Ok(v) => v,
            Err(e) => {
                problems.push(e);
                continue;
            }
        };
        let task = match pb::TaskSupport::try_from(t.task) {
            Ok(pb::TaskSupport::Never) => TaskSupport::Never,
            Ok(pb::TaskSupport::Optional) => TaskSupport::Optional,
            Ok(pb::TaskSupport::Required) => TaskSupport::Required,
            Err(_) => {
                problems.push(format!("{name}: task {} is not a TaskSupport", t.task));
                continue;
            }
        };
        let a = t.annotations.unwrap_or_default();
        tools.push(Descriptor {
            plugin_id: t.plugin_id,
            plugin_version: t.plugin_version,
            local_name: t.local_name,
            exposed_name: t.exposed_name,
            title: (!t.title.is_empty()).then_some(t.title),
            description: t.description,
            instructions: (!t.instructions.is_empty()).then_some(t.instructions),
            surfaces: t.surfaces,
            input_schema: input,
            output_schema: output,
            annotations: Annotations {
                read_only: a.read_only,
                destructive: a.destructive,
                idempotent: a.idempotent,
                open_world: a.open_world,
            },
            timeout_ms: t.timeout_ms,
            aliases: t.aliases.into_iter().collect(),
            unknown_arguments: match pb::UnknownArguments::try_from(t.unknown_arguments) {
                Ok(pb::UnknownArguments::Report) => UnknownArguments::Report,
                _ => UnknownArguments::Reject,
            },
            reset_timeout_on_progress: t.reset_timeout_on_progress,
            task,
            task_timeout_ms: (t.task_timeout_ms != 0).then_some(t.task_timeout_ms),
            call_policy: call_policy(t.requires_approval, t.rate_per_minute, t.rate_burst),
            fingerprint: toolhost_catalog::Fingerprint::UNSEALED,
        });
    }
    if problems.is_empty() {
        // Decoded: each descriptor's fingerprint is computed now, once.
        Ok(Snapshot {
            generation: p.generation,
            epoch: p.epoch,
            revision: p.revision,
            tools,
        }
        .sealed())
    } else {
        Err(problems)
    }
}

/// Catalog data as a wire snapshot.
#[must_use]
pub fn snapshot_to_proto(s: &Snapshot) -> pb::Snapshot {
    pb::Snapshot {
        generation: s.generation.clone(),
        epoch: s.epoch,
        revision: s.revision,
        shards: Vec::new(),
        retiring: Vec::new(),
        tools: s
            .tools
            .iter()
            .map(|d| pb::ToolDescriptor {
                plugin_id: d.plugin_id.clone(),
                plugin_version: d.plugin_version.clone(),
                local_name: d.local_name.clone(),
                exposed_name: d.exposed_name.clone(),
                title: d.title.clone().unwrap_or_default(),
                description: d.description.clone(),
                surfaces: d.surfaces.clone(),
                input_schema_json: d.input_schema.text().into_owned(),
                output_schema_json: d
                    .output_schema
                    .as_ref()
                    .map(|s| s.text().into_owned())
                    .unwrap_or_default(),
                annotations: Some(pb::Annotations {
                    read_only: d.annotations.read_only,
                    destructive: d.annotations.destructive,
                    idempotent: d.annotations.idempotent,
                    open_world: d.annotations.open_world,
                }),
                timeout_ms: d.timeout_ms,
                aliases: d.aliases.clone().into_iter().collect(),
                unknown_arguments: match d.unknown_arguments {
                    UnknownArguments::Reject => pb::UnknownArguments::Reject.into(),
                    UnknownArguments::Report => pb::UnknownArguments::Report.into(),
                },
                reset_timeout_on_progress: d.reset_timeout_on_progress,
                task: match d.task {
                    TaskSupport::Never => pb::TaskSupport::Never.into(),
                    TaskSupport::Optional => pb::TaskSupport::Optional.into(),
                    TaskSupport::Required => pb::TaskSupport::Required.into(),
                },
                task_timeout_ms: d.task_timeout_ms.unwrap_or(0),
                instructions: d.instructions.clone().unwrap_or_default(),
                requires_approval: d.call_policy.requires_approval,
                rate_per_minute: d.call_policy.rate.map_or(0, |r| r.per_minute),
                rate_burst: d.call_policy.rate.map_or(0, |r| r.burst),
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one_tool() -> Snapshot {
        let text = "id = \"p\"\nversion = \"1.0.0\"\nname = \"P\"\n[runtime]\ncommand = \"/bin/true\"\n\
                    [[tools]]\nname = \"t\"\ndescription = \"Does it.\"\nsurfaces = [\"chat\"]\n\
                    input_schema = { type = \"object\" }\ntask = \"optional\"\n\
                    instructions = \"Call it once per task.\"\n";
        let m = match toolhost_manifest::Manifest::parse(std::path::Path::new("/none"), text) {
            Ok(m) => m,
            Err(p) => panic!("{p:?}"),
        };
        Snapshot::from_manifests("kandev", "g", 1, [&m])
    }

    #[test]
    fn task_support_crosses_the_wire_and_an_unknown_value_is_a_problem() {
        let s = one_tool();
        let mut wire = snapshot_to_proto(&s);
        assert_eq!(wire.tools[0].task, i32::from(pb::TaskSupport::Optional));
        let back = snapshot_from_proto(wire.clone()).unwrap_or_else(|p| panic!("{p:?}"));
        assert_eq!(back.tools[0].task, TaskSupport::Optional);
        assert_eq!(back.tools[0], s.tools[0]);
        wire.tools[0].task = 7;
        let problems = snapshot_from_proto(wire).err().unwrap_or_default();
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].contains("task 7"), "{problems:?}");
    }

    /// A fleet's daemon judges every pushed tool and serves few: a tool
    /// whose plugin is not installed keeps its schema as text, and the
    /// tree is built when an install serves it.
    #[test]
    fn a_withheld_tools_schema_stays_text_until_an_install_serves_it() {
        let s = one_tool();
        let mut wire = snapshot_to_proto(&s);
        // Spaced and reordered as a backend might write it.
        wire.tools[0].input_schema_json = "{ \"type\" : \"object\" }".to_owned();
        wire.revision = 1;
        let pushed = snapshot_from_proto(wire).unwrap_or_else(|p| panic!("{p:?}"));
        assert_eq!(pushed.tools[0], s.tools[0], "the same contract by digest");
        let store = toolhost_catalog::Store::new("kandev");
        let nothing = toolhost_catalog::Installed::default();
        let r = store.offer_managed(pushed, &nothing);
        assert_eq!(r.defects.len(), 1, "{r:?}");
        let cur = store.current();
        let withheld = cur
            .entries()
            .next()
            .map(|e| e.descriptor.input_schema.is_built());
        assert_eq!(withheld, Some(false));

        let text = "id = \"p\"\nversion = \"1.0.0\"\nname = \"P\"\n[runtime]\ncommand = \"/bin/true\"\n\
                    [[tools]]\nname = \"t\"\ndescription = \"Does it.\"\nsurfaces = [\"chat\"]\n\
                    input_schema = { type = \"object\" }\ntask = \"optional\"\n\
                    instructions = \"Call it once per task.\"\n";
        let m = toolhost_manifest::Manifest::parse(std::path::Path::new("/none"), text)
            .unwrap_or_else(|p| panic!("{p:?}"));
        store.rejudge(&toolhost_catalog::Installed::from_manifests([&m]));
        let cur = store.current();
        let served = cur.entries().next();
        assert!(served.is_some_and(|e| e.is_sound()), "{served:?}");
        assert!(served.is_some_and(|e| e.descriptor.input_schema.is_built()));
    }

    #[test]
    fn a_tools_instructions_cross_the_wire() {
        let s = one_tool();
        let wire = snapshot_to_proto(&s);
        assert_eq!(wire.tools[0].instructions, "Call it once per task.");
        let back = snapshot_from_proto(wire).unwrap_or_else(|p| panic!("{p:?}"));
        assert_eq!(
            back.tools[0].instructions.as_deref(),
            Some("Call it once per task.")
        );
    }
}
