//! `[install]`: whose packages this daemon installs. The keys are read and
//! checked here, when the configuration is read, so a bad key stops the
//! start (and `toolhost check --config`) rather than the first install.
//!
//! What this module must not do: verify packages (`toolhost-lifecycle`'s
//! `package` does, at install).

use serde::Deserialize;

/// `[install]`: which package signatures are trusted, and whether one is
/// required.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InstallFile {
    /// minisign public keys (the base64 line of a `.pub` file) or paths to
    /// `.pub` files.
    #[serde(default)]
    pub trusted_keys: Vec<String>,
    /// Refuse packages no trusted key signed. Default: on when
    /// `trusted_keys` lists a key, off when it lists none.
    pub require_signature: Option<bool>,
    /// Let an upgrade be signed by another key than the installed version.
    #[serde(default)]
    pub allow_signer_change: bool,
    /// What an upgrade that changes a plugin's contract does: `"accept"`
    /// (the default: it takes over, and prints and logs what changed) or
    /// `"hold"` (it waits for `toolhost plugins accept ID`). A plugin's own
    /// `[plugin.<id>] contract_changes` overrides it.
    pub contract_changes: Option<String>,
}

/// One `contract_changes` value, read.
fn on_change(key: &str, v: &str) -> anyhow::Result<toolhost_lifecycle::contract::OnChange> {
    toolhost_lifecycle::contract::OnChange::parse(v).ok_or_else(|| {
        anyhow::anyhow!(
            "{key} must be \"accept\" or \"hold\", not {:?}",
            toolhost_base::text::escaped(v, 64)
        )
    })
}

/// The contract policy of `[install] contract_changes` and each plugin's
/// `[plugin.<id>] contract_changes` (`per_plugin`: id and value).
///
/// # Errors
/// A value that is neither `"accept"` nor `"hold"`.
pub fn contract_policy<'a>(
    install: &InstallFile,
    per_plugin: impl IntoIterator<Item = (&'a String, Option<&'a str>)>,
) -> anyhow::Result<toolhost_lifecycle::contract::ContractPolicy> {
    let mut policy = toolhost_lifecycle::contract::ContractPolicy::default();
    if let Some(v) = &install.contract_changes {
        policy.default = on_change("[install] contract_changes", v)?;
    }
    for (id, v) in per_plugin {
        if let Some(v) = v {
            let key = format!("[plugin.{id:?}] contract_changes");
            policy.plugins.insert(id.clone(), on_change(&key, v)?);
        }
    }
    Ok(policy)
}

impl InstallFile {
    /// The trust policy, with every key read.
    ///
    /// # Errors
    /// A key that is not a minisign public key, or signatures required with
    /// no key to verify them.
    pub fn resolve(&self) -> anyhow::Result<toolhost_package::statement::TrustPolicy> {
        let mut keys = Vec::with_capacity(self.trusted_keys.len());
        for (i, k) in self.trusted_keys.iter().enumerate() {
            let key = toolhost_package::statement::public_key(k)
                .map_err(|e| anyhow::anyhow!("[install] trusted_keys[{i}]: {e}"))?;
            keys.push(key);
        }
        if let Some((i, j, id)) = toolhost_package::statement::shared_ids(&keys)
            .into_iter()
            .next()
        {
            anyhow::bail!(
                "[install] trusted_keys[{i}] and trusted_keys[{j}] have the same key id {id}: a key id is chosen by \
                 the key's maker, so one key can carry another's id; trust each signer by one key, and give two \
                 keys of one signer ids of their own"
            );
        }
        let require_signature = self.require_signature.unwrap_or(!keys.is_empty());
        if require_signature && keys.is_empty() {
            anyhow::bail!(
                "[install] require_signature = true needs a key in [install] trusted_keys: with none, every package would be refused"
            );
        }
        Ok(toolhost_package::statement::TrustPolicy {
            keys,
            require_signature,
            allow_signer_change: self.allow_signer_change,
        })
    }
}
