//! What is installed, as managed mode checks pushed descriptors against it.
//!
//! The backend decides which tools are active and for whom, but it can
//! never loosen what a plugin declared: a pushed descriptor is served only
//! when its plugin is installed at that version, declares that local name,
//! and every security-relevant field matches the declaration: the canonical
//! input and output schemas, the annotations, the unknown-argument policy
//! and the aliases are equal; the surfaces are among the declared ones and
//! the timeout is at most the declared one (narrowing is allowed). Titles
//! and descriptions are the backend's to choose.

use crate::descriptor::Descriptor;
use crate::schema::canonical_digest;
use std::collections::{BTreeMap, HashMap};
use toolhost_manifest::{Annotations, Manifest};
use toolhost_validate::UnknownArguments;

#[derive(Debug, Clone, PartialEq, Eq)]
struct Declared {
    input: [u8; 32],
    output: Option<[u8; 32]>,
    annotations: Annotations,
    unknown_arguments: UnknownArguments,
    aliases: BTreeMap<String, String>,
    surfaces: Vec<String>,
    timeout_ms: u32,
    reset_timeout_on_progress: bool,
    task: toolhost_manifest::TaskSupport,
    /// The longest a task of the tool may run (`timeout_ms` when the
    /// manifest says nothing longer).
    task_timeout_ms: u32,
    /// The digest of the declared title, description and instructions,
    /// when the operator holds this plugin's contract changes.
    texts: Option<[u8; 32]>,
}

/// How the reason of a pushed tool withheld because its texts differ from
/// the declaration, under `contract_changes = "hold"`, begins.
pub const HELD_FOR_THE_OPERATOR: &str = "held for the operator";

/// The digest of what a model reads of a tool besides its schemas.
fn texts_digest(title: Option<&str>, description: &str, instructions: Option<&str>) -> [u8; 32] {
    use sha2::{Digest as _, Sha256};
    let mut h = Sha256::new();
    for part in [title, Some(description), instructions] {
        match part {
            None => h.update([0u8]),
            Some(t) => {
                h.update([1u8]);
                h.update((t.len() as u64).to_le_bytes());
                h.update(t.as_bytes());
            }
        }
    }
    h.finalize().into()
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
    /// exposed name -> the contract fingerprint the operator accepted for
    /// it, where its plugin's contract changes are held.
    accepted: HashMap<String, String>,
}

impl Installed {
    /// The declarations of these manifests.
    #[must_use]
    pub fn from_manifests<'a>(manifests: impl IntoIterator<Item = &'a Manifest>) -> Self {
        Self::holding(manifests, |_| false, HashMap::new())
    }

    /// The declarations of these manifests, where the plugins `held` names
    /// have their contract changes held: a pushed text other than the
    /// declared one is withheld unless its contract fingerprint is the one
    /// `accepted` names for that tool (exposed name -> fingerprint).
    #[must_use]
    pub fn holding<'a>(
        manifests: impl IntoIterator<Item = &'a Manifest>,
        held: impl Fn(&str) -> bool,
        accepted: HashMap<String, String>,
    ) -> Self {
        let plugins = manifests
            .into_iter()
            .map(|m| {
                let hold = held(&m.id);
                let tools = m
                    .tools
                    .iter()
                    .map(|t| {
                        let d = Declared {
                            input: canonical_digest(&t.input_schema),
                            output: t.output_schema.as_ref().map(canonical_digest),
                            annotations: t.annotations,
                            unknown_arguments: t.unknown_arguments,
                            aliases: t.aliases.clone(),
                            surfaces: t.surfaces.clone(),
                            timeout_ms: t.timeout_ms,
                            reset_timeout_on_progress: t.reset_timeout_on_progress,
                            task: t.task,
                            task_timeout_ms: t.task_timeout_ms.unwrap_or(t.timeout_ms),
                            texts: hold.then(|| {
                                texts_digest(
                                    t.title.as_deref(),
                                    &t.description,
                                    t.instructions.as_deref(),
                                )
                            }),
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
        Self { plugins, accepted }
    }

    /// Why a pushed descriptor (whose schemas have these digests) must be
    /// withheld, or `None` when it loosens nothing that is installed.
    pub(crate) fn verdict(
        &self,
        d: &Descriptor,
        digests: &([u8; 32], Option<[u8; 32]>),
    ) -> Option<String> {
        let (plugin_id, version, local) = (&d.plugin_id, d.plugin_version.as_str(), &d.local_name);
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
        let differ = |what: &str| format!("{what} from what {plugin_id} declares for {local}");
        if t.annotations != d.annotations {
            return Some(differ("the annotations differ"));
        }
        if t.unknown_arguments != d.unknown_arguments {
            return Some(differ("the unknown-argument policy differs"));
        }
        if t.aliases != d.aliases {
            return Some(differ("the aliases differ"));
        }
        if let Some(extra) = d.surfaces.iter().find(|s| !t.surfaces.contains(s)) {
            return Some(format!(
                "surface {extra} is not one {plugin_id} declares for {local} (a push may only narrow the surfaces)"
            ));
        }
        if d.timeout_ms > t.timeout_ms {
            return Some(format!(
                "the timeout of {} ms is longer than the {} ms {plugin_id} declares for {local}",
                d.timeout_ms, t.timeout_ms
            ));
        }
        if d.reset_timeout_on_progress && !t.reset_timeout_on_progress {
            return Some(format!(
                "reset_timeout_on_progress is set, but {plugin_id} does not declare it for {local}"
            ));
        }
        if !d.task.within(t.task) {
            return Some(format!(
                "task = {:?} allows more than the {:?} {plugin_id} declares for {local}",
                d.task.as_str(),
                t.task.as_str()
            ));
        }
        let pushed_task_timeout = d.task_timeout_ms.unwrap_or(d.timeout_ms);
        if pushed_task_timeout > t.task_timeout_ms {
            return Some(format!(
                "the task timeout of {pushed_task_timeout} ms is longer than the {} ms {plugin_id} declares for {local}",
                t.task_timeout_ms
            ));
        }
        self.held_texts(d, t)
    }

    /// Why a pushed descriptor whose texts differ from the declaration is
    /// held for the operator, where they are held and no accepted contract
    /// covers it.
    fn held_texts(&self, d: &Descriptor, t: &Declared) -> Option<String> {
        let declared = t.texts?;
        let pushed = texts_digest(
            d.title.as_deref(),
            &d.description,
            d.instructions.as_deref(),
        );
        if pushed == declared {
            return None;
        }
        let contract = d.contract_fingerprint();
        if self.accepted.get(&d.exposed_name) == Some(&contract) {
            return None;
        }
        Some(format!(
            "{HELD_FOR_THE_OPERATOR}: its title, description or instructions differ from what {} declares for {}, \
             and contract_changes = \"hold\" applies to {} (contract {contract}); toolhost catalog accept {} --contract {contract} serves it",
            d.plugin_id, d.local_name, d.plugin_id, d.exposed_name
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::descriptor::Snapshot;
    use toolhost_manifest::{Manifest, TaskSupport};

    fn manifest(task: &str) -> Manifest {
        let text = format!(
            "id = \"p\"\nversion = \"1.0.0\"\nname = \"P\"\n[runtime]\ncommand = \"/bin/true\"\n\
             [[tools]]\nname = \"t\"\ndescription = \"Does it.\"\nsurfaces = [\"chat\"]\n\
             input_schema = {{ type = \"object\" }}\ntask = \"{task}\"\n"
        );
        match Manifest::parse(std::path::Path::new("/nonexistent"), &text) {
            Ok(m) => m,
            Err(p) => panic!("{p:?}"),
        }
    }

    /// A pushed descriptor may narrow `optional` to either, and change
    /// nothing else: every pair of the three, against the installed word.
    #[test]
    fn a_push_may_narrow_task_support_but_never_loosen_it() {
        use TaskSupport::{Never, Optional, Required};
        let all = [Never, Optional, Required];
        for declared in all {
            let m = manifest(declared.as_str());
            let installed = Installed::from_manifests([&m]);
            for pushed in all {
                let mut d = Snapshot::from_manifests("kandev", "g", 1, [&m])
                    .tools
                    .remove(0);
                d.task = pushed;
                let digests = (canonical_digest(&d.input_schema), None);
                let verdict = installed.verdict(&d, &digests);
                let allowed = pushed == declared || declared == Optional;
                assert_eq!(
                    verdict.is_none(),
                    allowed,
                    "declared {declared:?}, pushed {pushed:?}: {verdict:?}"
                );
                assert_eq!(pushed.within(declared), allowed);
            }
        }
    }
}
