//! Upgrades held for the operator: `contract_changes = "hold"` for a
//! plugin whose upgrade changes what a model reads (a description, a
//! schema, an annotation), and always an upgrade that changes what the
//! plugin asks of the sandbox.
//!
//! A held upgrade is verified, validated and placed in its version
//! directory exactly as one that takes over, and recorded in the state
//! file (`held`), so it survives a restart and start-up's clean-up keeps
//! it; but nothing starts and the catalog does not move: the installed
//! version keeps serving every call. `toolhost plugins accept ID` runs the
//! rest of the upgrade (start, switch, drain, stop the old); `plugins
//! reject ID` deletes it. A later upgrade replaces a held one.
//!
//! The audit records every contract change with the tool's contract
//! fingerprints before and after (`tools/list`'s
//! `_meta["toolhost/contract"]`), when it is held and when it takes over.

use super::core::{HeldInfo, Lifecycle, LifecycleError, invalid};
use crate::contract::OnChange;
use crate::files::{HeldUpgrade, version_dir};
use std::collections::BTreeMap;
use std::path::Path;
use toolhost_manifest::Manifest;

/// What an upgrade did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upgraded {
    /// The plugin.
    pub id: String,
    /// The registry reference it came from, pinned by digest, when it
    /// came from one.
    pub source: Option<String>,
    /// The catalog revision now (unchanged when the upgrade is held).
    pub revision: u64,
    /// What it changes in the plugin's contract and asks, one line each,
    /// texts escaped.
    pub changes: Vec<String>,
    /// Why it is held for the operator, when it is: the installed version
    /// keeps serving until it is accepted.
    pub held: Option<String>,
}

impl From<&HeldUpgrade> for HeldInfo {
    fn from(h: &HeldUpgrade) -> Self {
        Self {
            version: h.version.clone(),
            statement: h.statement.clone(),
            downgrade: h.downgrade,
            why: h.why.clone(),
            changes: h.changes.clone(),
            source: h.source.clone(),
        }
    }
}

/// An upgrade about to be held: who signed it, what it changes, why it is
/// held, and whether it goes back in version.
pub(super) struct ToHold {
    pub(super) signer: Option<String>,
    pub(super) source: Option<String>,
    pub(super) changes: Vec<String>,
    pub(super) why: String,
    pub(super) downgrade: bool,
}

/// What the operator reviewed of a held upgrade, named when accepting it:
/// its version, or the digest of its statement. An accept that names
/// neither, or names another upgrade than the one held now, is refused:
/// a later upgrade may have replaced what was reviewed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reviewed {
    /// The version the operator saw held.
    pub version: Option<String>,
    /// The statement digest the operator saw (`sha256:HEX`, or the hex).
    pub statement: Option<String>,
}

/// How an upgrade may go.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UpgradeOptions {
    /// The operator allows this one upgrade to an older version.
    pub allow_downgrade: bool,
}

/// The digest of the statement of the plugin placed in `dir`: SHA-256 of
/// its canonical bytes, recomputed from what is there (signed or not).
pub(super) fn statement_digest(m: &Manifest) -> std::io::Result<String> {
    use sha2::Digest as _;
    let statement = toolhost_package::statement::statement_of(&m.dir, m)?;
    let digest = sha2::Sha256::digest(statement.to_bytes());
    Ok(format!(
        "sha256:{}",
        digest.iter().fold(String::new(), |mut s, b| {
            use std::fmt::Write as _;
            let _ = write!(s, "{b:02x}");
            s
        })
    ))
}

/// The refusal of a version that needs configuration nobody gave.
pub(super) fn missing_config(m: &Manifest, missing: &[String], command: &str) -> LifecycleError {
    LifecycleError::StartFailed {
        id: m.id.clone(),
        reason: format!(
            "version {} of {} needs configuration the running version does not: give it with the upgrade \
             (toolhost plugins {command} {}), or set it in [plugin.\"{}\".config]; the old version keeps serving",
            m.version,
            m.id,
            missing
                .iter()
                .map(|n| {
                    let secret = m.config.iter().any(|d| &d.name == n && d.secret);
                    format!("{n}={}", if secret { "@FILE" } else { "VALUE" })
                })
                .collect::<Vec<_>>()
                .join(" "),
            m.id
        ),
    }
}

impl Lifecycle {
    /// Why the upgrade to `m` (changing `changed`) waits for the operator,
    /// or `None` when it takes over at once.
    pub(super) fn hold_reason(&self, m: &Manifest, changed: &[String]) -> Option<String> {
        let inner = self.lock();
        let old = &inner.records.get(&m.id)?.manifest;
        if crate::contract::asks_changed(old, m) {
            return Some(
                "it changes what the plugin asks of the sandbox, which is always held until the operator accepts it"
                    .to_owned(),
            );
        }
        (!changed.is_empty() && self.contract_policy(&m.id) == OnChange::Hold).then(|| {
            "it changes the plugin's contract and contract_changes = \"hold\" applies to it"
                .to_owned()
        })
    }

    /// Places the staged version and records it as held; nothing starts.
    /// A package of the version already held, with other content, is
    /// refused: the operator names what they reviewed by its version, so
    /// one version must stay one package until it is rejected.
    pub(super) fn hold(
        &self,
        staging: &Path,
        m: &Manifest,
        holding: ToHold,
        set: &BTreeMap<String, String>,
    ) -> Result<Upgraded, LifecycleError> {
        let ToHold {
            signer,
            source,
            changes,
            why,
            downgrade,
        } = holding;
        let version = m.version.to_string();
        let statement =
            statement_digest(m).map_err(super::core::io("cannot read the held package", staging));
        let statement = match statement {
            Ok(s) => s,
            Err(e) => {
                let _ = std::fs::remove_dir_all(staging);
                return Err(e);
            }
        };
        let already = self.lock().file.held.get(&m.id).cloned();
        if let Some(held) = already.filter(|h| h.version == version && h.statement != statement) {
            let _ = std::fs::remove_dir_all(staging);
            return Err(LifecycleError::NotReviewed {
                id: m.id.clone(),
                reason: format!(
                    "version {version} of {} is already held with other content ({}): a held version is one \
                     package until it is rejected (toolhost plugins reject {})",
                    m.id, held.statement, m.id
                ),
            });
        }
        let placed = self.place(staging, m)?;
        let (old, replaced) = {
            let mut inner = self.lock();
            let held = HeldUpgrade {
                version: version.clone(),
                signer,
                source,
                why: why.clone(),
                changes: changes.clone(),
                statement: statement.clone(),
                downgrade,
            };
            let replaced = inner.file.held.insert(m.id.clone(), held);
            if let Err(e) = self.save(&inner) {
                match replaced {
                    Some(r) => inner.file.held.insert(m.id.clone(), r),
                    None => inner.file.held.remove(&m.id),
                };
                drop(inner);
                let _ = std::fs::remove_dir_all(&placed.dir);
                return Err(e);
            }
            // Values given with the upgrade are kept for its acceptance,
            // in memory only: secrets are never written to the state file.
            inner.held_values.insert(m.id.clone(), set.clone());
            let old = inner.records.get(&m.id).map(|r| r.manifest.clone());
            (old, replaced)
        };
        if let Some(r) = replaced.filter(|r| r.version != version) {
            let _ = std::fs::remove_dir_all(version_dir(&self.install_dir(), &m.id, &r.version));
        }
        tracing::info!(target: "toolhost::audit", plugin = %m.id, to = %version, %statement, %why, "upgrade held for the operator");
        if let Some(old) = &old {
            self.audit_changes(old, &placed, &changes, "contract change held");
        }
        Ok(Upgraded {
            source: None,
            id: m.id.clone(),
            revision: self.store.current().revision(),
            changes,
            held: Some(why),
        })
    }

    /// Accepts the upgrade held for plugin `id`, the one the operator
    /// reviewed (`reviewed`: its version or statement digest): it takes
    /// over as any upgrade does (started, switched, the old version
    /// drained and stopped). `set` gives configuration values it needs;
    /// without any, those given with the upgrade are used.
    ///
    /// # Errors
    /// Nothing is held for `id`; `reviewed` names nothing, or another
    /// upgrade than the one held now; the held version needs
    /// configuration; it does not start (it is then deleted, and the old
    /// version keeps serving).
    pub async fn accept(
        &self,
        id: &str,
        reviewed: &Reviewed,
        set: &BTreeMap<String, String>,
    ) -> Result<Upgraded, LifecycleError> {
        // Allowed in managed mode: a hold there comes from a placement,
        // and the operator's review is what it waits for.
        let _op = self.ops.lock().await;
        let (held, given) = {
            let inner = self.lock();
            (
                inner.file.held.get(id).cloned(),
                inner.held_values.get(id).cloned(),
            )
        };
        let Some(held) = held else {
            return Err(self.nothing_held(id));
        };
        check_reviewed(id, &held, reviewed)?;
        let dir = version_dir(&self.install_dir(), id, &held.version);
        let m = Manifest::load(&dir).map_err(|p| invalid(&p))?;
        let set = if set.is_empty() {
            given.unwrap_or_default()
        } else {
            set.clone()
        };
        // Against what is installed now (the same, unless the
        // configuration changed meanwhile).
        let changed = self.upgrade_changes(&m, held.downgrade)?;
        let (resolved, values) = self.resolve_with(&m, &set)?;
        if !resolved.missing.is_empty() {
            return Err(missing_config(
                &m,
                &resolved.missing,
                &format!("accept {id}"),
            ));
        }
        tracing::info!(target: "toolhost::audit", plugin = %id, to = %held.version, statement = %held.statement, "held upgrade accepted");
        let provenance = Provenance {
            signer: held.signer,
            source: held.source,
        };
        self.take_over(m, resolved, values, provenance, changed)
            .await
    }

    /// Deletes the upgrade held for plugin `id`; the installed version
    /// goes on as it was. Returns the held version.
    ///
    /// # Errors
    /// Nothing is held for `id`, or the state file cannot be written.
    pub async fn reject(&self, id: &str) -> Result<String, LifecycleError> {
        let _op = self.ops.lock().await;
        let held = {
            let mut inner = self.lock();
            let Some(held) = inner.file.held.remove(id) else {
                drop(inner);
                return Err(self.nothing_held(id));
            };
            if let Err(e) = self.save(&inner) {
                inner.file.held.insert(id.to_owned(), held);
                return Err(e);
            }
            inner.held_values.remove(id);
            held
        };
        let _ = std::fs::remove_dir_all(version_dir(&self.install_dir(), id, &held.version));
        tracing::info!(target: "toolhost::audit", plugin = %id, version = %held.version, "held upgrade rejected");
        Ok(held.version)
    }

    pub(super) fn nothing_held(&self, id: &str) -> LifecycleError {
        if self.lock().records.contains_key(id) {
            LifecycleError::NothingHeld { id: id.to_owned() }
        } else {
            LifecycleError::NotFound {
                id: id.to_owned(),
                hint: "",
            }
        }
    }

    /// One audit line per change, by name (never the texts), and one per
    /// tool whose contract fingerprint moved, with both.
    pub(super) fn audit_changes(
        &self,
        old: &Manifest,
        new: &Manifest,
        changed: &[String],
        what: &str,
    ) {
        let (from, to) = (old.version.to_string(), new.version.to_string());
        for change in crate::contract::summary(changed) {
            tracing::info!(target: "toolhost::audit", plugin = %new.id, %from, %to, %change, "{what}");
        }
        for (tool, before, after) in
            crate::contract::fingerprint_changes(&self.cfg.prefix, old, new)
        {
            let (before, after) = (
                before.as_deref().unwrap_or("-"),
                after.as_deref().unwrap_or("-"),
            );
            tracing::info!(target: "toolhost::audit", plugin = %new.id, %from, %to, %tool, before, after, "{what}: fingerprint");
        }
    }
}

/// Whether `reviewed` names `held`: its version, or its statement's
/// digest (with or without `sha256:`), and nothing else.
fn check_reviewed(id: &str, held: &HeldUpgrade, reviewed: &Reviewed) -> Result<(), LifecycleError> {
    let refused = |reason: String| LifecycleError::NotReviewed {
        id: id.to_owned(),
        reason,
    };
    let now = format!("version {} (statement {})", held.version, held.statement);
    if reviewed.version.is_none() && reviewed.statement.is_none() {
        return Err(refused(format!(
            "say which held upgrade of {id} you reviewed: toolhost plugins accept {id} --version {} (held now: {now}; \
             toolhost plugins show {id} prints what it changes)",
            held.version
        )));
    }
    if let Some(v) = &reviewed.version
        && *v != held.version
    {
        return Err(refused(format!(
            "the upgrade held for {id} is {now}, not the version {} you named: it was replaced after your review. \
             Read what it changes (toolhost plugins show {id}) before you accept it",
            toolhost_base::text::escaped(v, 64)
        )));
    }
    if let Some(d) = &reviewed.statement {
        let want = d.trim().trim_start_matches("sha256:").to_ascii_lowercase();
        let have = held.statement.trim_start_matches("sha256:");
        if want.is_empty() || want != have {
            return Err(refused(format!(
                "the upgrade held for {id} is {now}, not the statement you named: it was replaced after your \
                 review. Read what it changes (toolhost plugins show {id}) before you accept it"
            )));
        }
    }
    Ok(())
}

/// Where an installed version came from: the trusted key that signed it,
/// and the registry reference (pinned by digest) it was pulled from.
#[derive(Debug, Clone, Default)]
pub(super) struct Provenance {
    pub(super) signer: Option<String>,
    pub(super) source: Option<String>,
}
