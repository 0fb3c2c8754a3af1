//! Descriptors and snapshots: the data a catalog is made of.

use crate::schema::Schema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet};
use toolhost_manifest::manifest::{
    MAX_TASK_TIMEOUT_MS, MAX_TOOL_TIMEOUT_MS, is_valid_description, is_valid_plugin_id,
    is_valid_surface, is_valid_tool_name,
};
use toolhost_manifest::{Annotations, Manifest, TaskSupport, ToolDecl, naming};
use toolhost_validate::{UnknownArguments, is_identifier_like};

/// The largest burst a pushed rate may allow (a bigger one limits nothing).
pub const MAX_RATE_BURST: u32 = 1_000_000;

/// A digest of a descriptor's whole content (128 bits of SHA-256 over a
/// canonical encoding: every field, schemas with object keys in order),
/// computed once when a snapshot is decoded ([`Descriptor::seal`]), so
/// that telling an unchanged descriptor from a changed one is comparing 16
/// bytes rather than walking two trees. The daemon's, never on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Fingerprint([u8; 16]);

impl Fingerprint {
    /// Not computed yet.
    pub const UNSEALED: Self = Self([0; 16]);

    /// Whether it has been computed.
    #[must_use]
    pub fn is_sealed(self) -> bool {
        self != Self::UNSEALED
    }
}

/// Everything toolhost knows about one exposed tool.
///
/// Two descriptors are equal when their content is; when both are sealed,
/// that is decided by their fingerprints.
///
/// As JSON (what `toolhost catalog push` reads and `catalog show` prints)
/// a descriptor is `json.rs`'s `DescriptorJson`: the backend's policy is flat, as
/// docs/CONTRACT.md §2 names it (`requires_approval`, `rate_per_minute`,
/// `rate_burst`), and an unknown key is refused by name, never dropped: a
/// misspelt `requires_approval` must not serve a tool without asking.
#[derive(Debug, Clone)]
pub struct Descriptor {
    /// The plugin that implements it.
    pub plugin_id: String,
    /// That plugin's version.
    pub plugin_version: String,
    /// The plugin's name for the tool (what the plugin is called with).
    pub local_name: String,
    /// The name agents see: `naming::exposed(prefix, plugin_id, local_name)`.
    pub exposed_name: String,
    /// Human title.
    pub title: Option<String>,
    /// For the model.
    pub description: String,
    /// The plugin's sentence for the server's instructions; cosmetic like
    /// the description (a pushed descriptor may leave it out).
    pub instructions: Option<String>,
    /// Where the tool is offered; sorted and unique once normalized.
    pub surfaces: Vec<String>,
    /// As declared (a pushed one kept as its text until served).
    pub input_schema: Schema,
    /// As declared.
    pub output_schema: Option<Schema>,
    /// Behaviour hints.
    pub annotations: Annotations,
    /// Per-call deadline.
    pub timeout_ms: u32,
    /// alias -> canonical property.
    pub aliases: BTreeMap<String, String>,
    /// Undeclared top-level arguments: reject or report.
    pub unknown_arguments: UnknownArguments,
    /// Progress restarts the deadline (protocol 2 plugins only), bounded
    /// by the daemon's `max_timeout_ms`.
    pub reset_timeout_on_progress: bool,
    /// Whether a call may run as an MCP task (`never` when absent).
    pub task: TaskSupport,
    /// How long a call run as a task may take, when longer than
    /// `timeout_ms`; absent: `timeout_ms`.
    pub task_timeout_ms: Option<u32>,
    /// What the backend asks of this tool's calls beyond the operator's
    /// policy. An installed plugin's descriptor asks nothing.
    pub call_policy: CallPolicy,
    /// The content's digest once sealed; [`Fingerprint::UNSEALED`] until
    /// then (and after any field is changed by hand: seal again).
    pub fingerprint: Fingerprint,
}

/// What a pushed catalog asks of a tool's calls on top of the operator's
/// config. It can only add: `requires_approval = false` or no rate lifts
/// nothing the operator set, because the daemon takes the union of the two
/// approval policies and the stricter of the two rates. That is why it
/// needs no judging against the installed declaration, unlike the fields
/// that could loosen one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CallPolicy {
    /// Every call needs a person's approval first.
    #[serde(default)]
    pub requires_approval: bool,
    /// A limit on the tool's calls across every caller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<CallRate>,
}

impl CallPolicy {
    /// Whether it asks for nothing (what an installed plugin's descriptor has).
    #[must_use]
    pub fn is_nothing(&self) -> bool {
        *self == Self::default()
    }
}

/// A pushed rate limit: `per_minute` calls a minute on average, at most
/// `burst` at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CallRate {
    /// Calls a minute, at least 1.
    pub per_minute: u32,
    /// The most calls at once, at least 1.
    pub burst: u32,
}

/// Bytes as lowercase hex.
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
            use std::fmt::Write as _;
            let _ = write!(s, "{b:02x}");
            s
        })
}

/// Feeds the canonical encoding of a descriptor's parts to a hasher:
/// lengths before contents, a tag before each JSON value, object keys in
/// order, so two encodings are equal exactly when the contents are.
struct Canonical(Sha256);

impl Canonical {
    fn len(&mut self, n: usize) {
        self.0.update((n as u64).to_le_bytes());
    }

    fn str(&mut self, s: &str) {
        self.len(s.len());
        self.0.update(s.as_bytes());
    }

    fn opt_str(&mut self, s: Option<&str>) {
        match s {
            None => self.0.update([0]),
            Some(s) => {
                self.0.update([1]);
                self.str(s);
            }
        }
    }

    /// The input schema, then the output schema or its absence.
    fn schemas(&mut self, input: &Schema, output: Option<&Schema>) {
        self.value(input);
        match output {
            None => self.0.update([0]),
            Some(v) => {
                self.0.update([1]);
                self.value(v);
            }
        }
    }

    /// The four annotation hints, one byte each.
    fn hints(&mut self, a: Annotations) {
        self.0.update([
            u8::from(a.read_only),
            u8::from(a.destructive),
            u8::from(a.idempotent),
            u8::from(a.open_world),
        ]);
    }

    fn value(&mut self, v: &Value) {
        match v {
            Value::Null => self.0.update([b'n']),
            Value::Bool(b) => self.0.update([b'b', u8::from(*b)]),
            Value::Number(n) => {
                self.0.update([b'#']);
                self.str(&n.to_string());
            }
            Value::String(s) => {
                self.0.update([b's']);
                self.str(s);
            }
            Value::Array(a) => {
                self.0.update([b'a']);
                self.len(a.len());
                for x in a {
                    self.value(x);
                }
            }
            Value::Object(m) => {
                self.0.update([b'o']);
                self.len(m.len());
                let mut keys: Vec<&String> = m.keys().collect();
                if !keys.is_sorted() {
                    keys.sort();
                }
                for k in keys {
                    self.str(k);
                    if let Some(x) = m.get(k) {
                        self.value(x);
                    }
                }
            }
        }
    }
}

impl Descriptor {
    /// The fingerprint of the tool's contract with the model, as an agent
    /// sees it in `tools/list` (its `_meta["toolhost/contract"]`): name,
    /// title, description, instructions, schemas, annotations and task
    /// mode, and nothing an upgrade may change without changing what the
    /// tool means (the plugin's version, timeouts, surfaces). 32 hex digits.
    #[must_use]
    pub fn contract_fingerprint(&self) -> String {
        hex(&self.contract_digest())
    }

    /// [`Descriptor::contract_fingerprint`]'s 16 bytes.
    #[must_use]
    pub fn contract_digest(&self) -> [u8; 16] {
        let mut c = Canonical(Sha256::new());
        c.str(&self.exposed_name);
        c.opt_str(self.title.as_deref());
        c.str(&self.description);
        c.opt_str(self.instructions.as_deref());
        c.schemas(&self.input_schema, self.output_schema.as_ref());
        c.hints(self.annotations);
        c.str(&format!("{:?}", self.task));
        let digest = c.0.finalize();
        let mut out = [0; 16];
        out.copy_from_slice(&digest[..16]);
        out
    }

    /// Computes the fingerprint (surfaces sorted first, as a normalized
    /// snapshot has them). Decoders call it once per descriptor; a
    /// descriptor changed by hand afterwards must be sealed again.
    ///
    /// Kept whole on purpose: the fingerprint is one hash fed field by field in
    /// a fixed order; splitting it would hide which fields it covers, and a
    /// missed field is a loosening nobody sees.
    pub fn seal(&mut self) {
        if !self.surfaces.is_sorted() {
            self.surfaces.sort();
        }
        // Every field by name: a field added to `Descriptor` does not
        // compile here until it is part of the fingerprint (and of `eq`).
        let Self {
            plugin_id: _,
            plugin_version: _,
            local_name: _,
            exposed_name: _,
            title: _,
            description: _,
            instructions: _,
            surfaces: _,
            input_schema: _,
            output_schema: _,
            annotations: _,
            timeout_ms: _,
            aliases: _,
            unknown_arguments: _,
            reset_timeout_on_progress: _,
            task: _,
            task_timeout_ms: _,
            call_policy: _,
            fingerprint: _,
        } = self;
        let mut c = Canonical(Sha256::new());
        for s in [
            &self.plugin_id,
            &self.plugin_version,
            &self.local_name,
            &self.exposed_name,
            &self.description,
        ] {
            c.str(s);
        }
        c.opt_str(self.title.as_deref());
        c.opt_str(self.instructions.as_deref());
        c.len(self.surfaces.len());
        for s in &self.surfaces {
            c.str(s);
        }
        // The schemas by their canonical digests: sealing a pushed
        // descriptor must not build its schemas' trees (crate::schema).
        c.0.update(self.input_schema.digest());
        match &self.output_schema {
            None => c.0.update([0]),
            Some(s) => {
                c.0.update([1]);
                c.0.update(s.digest());
            }
        }
        c.hints(self.annotations);
        c.0.update([
            u8::from(self.unknown_arguments == UnknownArguments::Report),
            u8::from(self.reset_timeout_on_progress),
            match self.task {
                TaskSupport::Never => 0,
                TaskSupport::Optional => 1,
                TaskSupport::Required => 2,
            },
        ]);
        c.0.update(self.timeout_ms.to_le_bytes());
        match self.task_timeout_ms {
            None => c.0.update([0]),
            Some(ms) => {
                c.0.update([1]);
                c.0.update(ms.to_le_bytes());
            }
        }
        c.len(self.aliases.len());
        for (k, v) in &self.aliases {
            c.str(k);
            c.str(v);
        }
        // Last and only when set: everything before is self-delimiting, so
        // the encoding stays unambiguous, and a descriptor that asks
        // nothing keeps the fingerprint it had before the field existed.
        if !self.call_policy.is_nothing() {
            let rate = self.call_policy.rate;
            c.0.update([b'p', u8::from(self.call_policy.requires_approval)]);
            c.0.update(rate.map_or(0, |r| r.per_minute).to_le_bytes());
            c.0.update(rate.map_or(0, |r| r.burst).to_le_bytes());
        }
        let digest = c.0.finalize();
        let mut fp = [0u8; 16];
        fp.copy_from_slice(&digest[..16]);
        if fp == [0; 16] {
            // The one value that means "not computed".
            fp[0] = 1;
        }
        self.fingerprint = Fingerprint(fp);
    }
}

impl Descriptor {
    /// The descriptor of one declared tool of an installed plugin.
    #[must_use]
    pub fn from_decl(prefix: &str, m: &Manifest, t: &ToolDecl) -> Self {
        let mut d = Self {
            plugin_id: m.id.clone(),
            plugin_version: m.version.to_string(),
            local_name: t.name.clone(),
            exposed_name: naming::exposed(prefix, &m.id, &t.name),
            title: t.title.clone(),
            description: t.description.clone(),
            instructions: t.instructions.clone(),
            surfaces: t.surfaces.clone(),
            input_schema: t.input_schema.clone().into(),
            output_schema: t.output_schema.clone().map(Schema::from),
            annotations: t.annotations,
            timeout_ms: t.timeout_ms,
            aliases: t.aliases.clone(),
            unknown_arguments: t.unknown_arguments,
            reset_timeout_on_progress: t.reset_timeout_on_progress,
            task: t.task,
            task_timeout_ms: t.task_timeout_ms,
            call_policy: CallPolicy::default(),
            fingerprint: Fingerprint::UNSEALED,
        };
        d.surfaces.sort();
        d.surfaces.dedup();
        d.seal();
        d
    }

    /// Whether the descriptor is visible on `surface`.
    #[must_use]
    pub fn on_surface(&self, surface: &str) -> bool {
        self.surfaces
            .binary_search_by(|s| s.as_str().cmp(surface))
            .is_ok()
    }

    /// Shape rules a pushed descriptor must satisfy (the same rules a
    /// manifest satisfies, plus a name consistent with its parts). Schema
    /// soundness is not checked here: an unsound schema is a defect, not an
    /// invalid snapshot.
    pub(crate) fn shape_problems(&self, prefix: &str, out: &mut Vec<String>) {
        let who = &self.exposed_name;
        let mut bad = |m: String| out.push(format!("{who}: {m}"));
        if !is_valid_plugin_id(&self.plugin_id) {
            bad(format!(
                "plugin_id {:?} is not a valid plugin id",
                self.plugin_id
            ));
        }
        if semver::Version::parse(&self.plugin_version).is_err() {
            bad("plugin_version is not semver".to_owned());
        }
        if !is_valid_tool_name(&self.local_name) {
            bad(format!(
                "local_name {:?} is not a valid tool name",
                self.local_name
            ));
        }
        let expected = naming::exposed(prefix, &self.plugin_id, &self.local_name);
        if self.exposed_name != expected {
            bad(format!(
                "exposed_name should be {expected:?} for its plugin and local name"
            ));
        }
        if !is_valid_description(&self.description) {
            bad("description must be 1 to 1024 bytes and not blank".to_owned());
        }
        if let Some(t) = &self.title
            && (t.trim().is_empty() || t.len() > 128)
        {
            bad("title must be 1 to 128 bytes and not blank".to_owned());
        }
        if let Some(i) = &self.instructions
            && (i.trim().is_empty() || i.len() > 300 || i.chars().any(char::is_control))
        {
            bad("instructions must be one line of 1 to 300 bytes".to_owned());
        }
        if self.surfaces.is_empty() || !self.surfaces.iter().all(|s| is_valid_surface(s)) {
            bad("surfaces must be a non-empty list of valid surface names".to_owned());
        }
        if self.surfaces.iter().collect::<BTreeSet<_>>().len() != self.surfaces.len() {
            bad("surfaces are listed twice".to_owned());
        }
        if self.timeout_ms == 0 || self.timeout_ms > MAX_TOOL_TIMEOUT_MS {
            bad(format!("timeout_ms must be 1 to {MAX_TOOL_TIMEOUT_MS}"));
        }
        if let Some(ms) = self.task_timeout_ms
            && (!self.task.allows_task() || ms < self.timeout_ms || ms > MAX_TASK_TIMEOUT_MS)
        {
            bad(format!(
                "task_timeout_ms must be from timeout_ms to {MAX_TASK_TIMEOUT_MS}, and only with task = optional or required"
            ));
        }
        if self.annotations.read_only && self.annotations.destructive {
            bad("read_only and destructive are both true".to_owned());
        }
        if self.unknown_arguments == UnknownArguments::Report && !self.annotations.read_only {
            bad("unknown_arguments = report needs read_only".to_owned());
        }
        if !self.aliases.keys().all(|a| is_identifier_like(a)) {
            bad("an alias is not identifier-like".to_owned());
        }
        if let Some(r) = self.call_policy.rate
            && (r.per_minute == 0 || r.burst == 0 || r.burst > MAX_RATE_BURST)
        {
            bad(format!(
                "rate_per_minute and rate_burst must be at least 1, and the burst at most {MAX_RATE_BURST}"
            ));
        }
    }
}

/// A catalog as data: what a backend pushes, or what the embedded authority
/// builds from installed plugins.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Snapshot {
    /// Which authority run this belongs to. A generation that has been
    /// replaced never comes back.
    pub generation: String,
    /// The fence: a new generation is accepted only with an epoch greater
    /// than the current one's. A backend derives it from something
    /// monotonic (its start time, a counter in its database).
    #[serde(default)]
    pub epoch: u64,
    /// Ordering within a generation.
    pub revision: u64,
    /// The tools.
    pub tools: Vec<Descriptor>,
}

impl Snapshot {
    /// The snapshot of every tool of every given plugin.
    #[must_use]
    pub fn from_manifests<'a>(
        prefix: &str,
        generation: impl Into<String>,
        revision: u64,
        plugins: impl IntoIterator<Item = &'a Manifest>,
    ) -> Self {
        let tools = plugins
            .into_iter()
            .flat_map(|m| {
                m.tools
                    .iter()
                    .map(move |t| Descriptor::from_decl(prefix, m, t))
            })
            .collect();
        let mut s = Self {
            generation: generation.into(),
            epoch: 0,
            revision,
            tools,
        };
        s.normalize();
        s
    }

    /// Puts the snapshot in its canonical order: tools by exposed name,
    /// surfaces sorted. Two snapshots with the same content are equal after
    /// this, whatever order they arrived in.
    pub fn normalize(&mut self) {
        for t in &mut self.tools {
            // A sealed descriptor's surfaces were sorted when it was sealed.
            if !t.fingerprint.is_sealed() && !t.surfaces.is_sorted() {
                t.surfaces.sort();
            }
        }
        // A snapshot already in name order (the embedded authority's, or a
        // backend's that keeps the order GetCatalog returns) is checked in
        // one pass; sorting 10,000 descriptors costs milliseconds of cache
        // misses even when nothing moves.
        if self
            .tools
            .is_sorted_by(|a, b| a.exposed_name <= b.exposed_name)
        {
            return;
        }
        self.tools
            .sort_by(|a, b| a.exposed_name.cmp(&b.exposed_name));
    }
}

impl Snapshot {
    /// Seals every descriptor not sealed yet ([`Descriptor::seal`]): what a
    /// decoder does once, so that offering the snapshot compares
    /// fingerprints.
    pub fn seal(&mut self) {
        for t in &mut self.tools {
            if !t.fingerprint.is_sealed() {
                t.seal();
            }
        }
    }

    /// The same, by value.
    #[must_use]
    pub fn sealed(mut self) -> Self {
        self.seal();
        self
    }
}
