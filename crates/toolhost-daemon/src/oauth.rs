//! `[http.oauth]`: toolhost as an OAuth 2.1 resource server, read and
//! checked at start (a rule that does not compile, an issuer that is not
//! HTTPS, a secret file that cannot be read are refused then).

use anyhow::{Context as _, Result, bail};
use serde::Deserialize;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use toolhost_http::{BindingRule, FieldSource, OAuthGate};
use toolhost_oauth::keys::Algorithm;
use toolhost_oauth::{ClientCredentials, IssuerSettings, Settings, Verifier, is_scope_token};

/// `[http.oauth]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OAuthFile {
    /// This resource's canonical URI, as clients reach it: what tokens
    /// must be issued for (`aud`), e.g. `https://tools.example.com/mcp`.
    pub resource: String,
    /// A name for people, in the resource's metadata.
    pub resource_name: Option<String>,
    /// `[[http.oauth.issuers]]`: the authorization servers trusted.
    #[serde(default)]
    pub issuers: Vec<IssuerFile>,
    /// Scopes this resource knows, published in its metadata.
    #[serde(default)]
    pub scopes_supported: Vec<String>,
    /// Scopes every request needs.
    #[serde(default)]
    pub scopes_required: Vec<String>,
    /// Signature algorithms accepted (default: RS256/384/512,
    /// PS256/384/512, ES256, ES384, EdDSA; never `none` or HMAC).
    pub algorithms: Option<Vec<String>>,
    /// Clock skew allowed on `exp` and `nbf`, in seconds (default 60, at
    /// most 300).
    pub max_skew_secs: Option<u64>,
    /// An issuer's keys are fetched again for an unknown key id at most
    /// this often, in seconds (default 30, at least 1).
    pub jwks_min_refresh_secs: Option<u64>,
    /// An introspection answer is kept at most this long, in seconds
    /// (default 60).
    pub introspection_cache_secs: Option<u64>,
    /// PEM files of certificate authorities trusted for the authorization
    /// servers besides the system's.
    #[serde(default)]
    pub ca_files: Vec<PathBuf>,
    /// `[[http.oauth.bindings]]`: which binding a caller stands for.
    #[serde(default)]
    pub bindings: Vec<BindingFile>,
    /// `[http.oauth.tool_scopes]`: scopes a tool needs, by exposed name.
    #[serde(default)]
    pub tool_scopes: HashMap<String, Vec<String>>,
    /// `[http.oauth.plugin_scopes]`: scopes every tool of a plugin needs,
    /// by plugin id.
    #[serde(default)]
    pub plugin_scopes: HashMap<String, Vec<String>>,
}

/// One `[[http.oauth.issuers]]` entry.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IssuerFile {
    /// The issuer identifier, exactly as its tokens' `iss`.
    pub issuer: String,
    /// toolhost's own client id at this issuer, for introspection and
    /// token exchange.
    pub client_id: Option<String>,
    /// A file holding that client's secret (first line).
    pub client_secret_file: Option<PathBuf>,
    /// Ask this issuer about opaque tokens (RFC 7662; at most one issuer).
    #[serde(default)]
    pub introspection: bool,
}

/// One `[[http.oauth.bindings]]` entry.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BindingFile {
    /// A CEL condition over `token` (`iss`, `sub`, `client_id`, `scopes`,
    /// `claims`); the first entry whose condition holds is used.
    pub when: String,
    /// The surface the caller works on.
    pub surface: String,
    /// The task, fixed, or
    pub task_id: Option<String>,
    /// the value of this claim.
    pub task_claim: Option<String>,
    /// The workspace, fixed, or
    pub workspace_id: Option<String>,
    /// the value of this claim.
    pub workspace_claim: Option<String>,
}

impl OAuthFile {
    /// Paths relative to the config file's folder.
    pub fn rebase(&mut self, rebase: &mut dyn FnMut(&mut PathBuf)) {
        self.ca_files.iter_mut().for_each(&mut *rebase);
        for i in &mut self.issuers {
            if let Some(f) = i.client_secret_file.as_mut() {
                rebase(f);
            }
        }
    }

    /// The gate the HTTP transport uses.
    ///
    /// # Errors
    /// Naming the key and what is wrong with it.
    pub fn resolve(&self) -> Result<Arc<OAuthGate>> {
        let resource = url::Url::parse(&self.resource)
            .with_context(|| format!("[http.oauth] resource {:?} is not a URL", self.resource))?;
        let issuers = self
            .issuers
            .iter()
            .enumerate()
            .map(|(n, i)| i.resolve(n + 1))
            .collect::<Result<Vec<_>>>()?;
        let mut settings = Settings::new(resource, issuers);
        settings.scopes_supported = self.scopes_supported.clone();
        settings.resource_name = self.resource_name.clone();
        settings.ca_files = self.ca_files.clone();
        if let Some(names) = &self.algorithms {
            settings.algorithms = names
                .iter()
                .map(|n| {
                    Algorithm::from_name(n).with_context(|| {
                        format!(
                            "[http.oauth] algorithms: {n:?} is not one toolhost verifies (RS256, RS384, RS512, PS256, PS384, PS512, ES256, ES384, EdDSA)"
                        )
                    })
                })
                .collect::<Result<_>>()?;
        }
        if let Some(s) = self.max_skew_secs {
            settings.skew = Duration::from_secs(s);
        }
        if let Some(s) = self.jwks_min_refresh_secs {
            settings.jwks_min_refresh = Duration::from_secs(s);
        }
        if let Some(s) = self.introspection_cache_secs {
            settings.introspection_cache = Duration::from_secs(s);
        }
        let scopes = self
            .scopes_required
            .iter()
            .chain(self.tool_scopes.values().flatten())
            .chain(self.plugin_scopes.values().flatten());
        for s in scopes {
            if !is_scope_token(s) {
                bail!(
                    "[http.oauth] scope {s:?} is not a scope token (printable ASCII, no space, quote or backslash)"
                );
            }
        }
        if self.bindings.is_empty() {
            bail!(
                "[http.oauth] has no [[http.oauth.bindings]]: say which binding (surface, task) a caller with a valid token stands for"
            );
        }
        let rules = self
            .bindings
            .iter()
            .enumerate()
            .map(|(n, b)| b.rule(n + 1))
            .collect::<Result<Vec<_>>>()?;
        let verifier = Arc::new(Verifier::new(settings)?);
        let gate = OAuthGate::new(
            verifier,
            rules,
            self.scopes_required.clone(),
            self.tool_scopes.clone(),
            self.plugin_scopes.clone(),
        )?;
        Ok(Arc::new(gate))
    }
}

impl IssuerFile {
    fn resolve(&self, n: usize) -> Result<IssuerSettings> {
        let client = match (&self.client_id, &self.client_secret_file) {
            (None, None) => None,
            (Some(id), Some(file)) => Some(ClientCredentials {
                client_id: id.clone(),
                client_secret: crate::secret::read_secret(file)
                    .with_context(|| format!("[[http.oauth.issuers]] #{n}"))?,
            }),
            _ => bail!(
                "[[http.oauth.issuers]] #{n}: give both client_id and client_secret_file, or neither"
            ),
        };
        Ok(IssuerSettings {
            issuer: self.issuer.clone(),
            client,
            introspection: self.introspection,
        })
    }
}

impl BindingFile {
    fn rule(&self, n: usize) -> Result<BindingRule> {
        let place = format!("[[http.oauth.bindings]] #{n}");
        let source =
            |fixed: &Option<String>, claim: &Option<String>, what: &str| match (fixed, claim) {
                (Some(v), None) => Ok(Some(FieldSource::Fixed(v.clone()))),
                (None, Some(c)) => Ok(Some(FieldSource::Claim(c.clone()))),
                (None, None) => Ok(None),
                (Some(_), Some(_)) => {
                    bail!("{place}: give {what}_id or {what}_claim, not both")
                }
            };
        let task_id = source(&self.task_id, &self.task_claim, "task")?
            .with_context(|| format!("{place}: needs task_id or task_claim"))?;
        if self.surface.trim().is_empty() {
            bail!("{place}: surface is empty");
        }
        Ok(BindingRule {
            place: place.clone(),
            when: self.when.clone(),
            surface: self.surface.clone(),
            task_id,
            workspace_id: source(&self.workspace_id, &self.workspace_claim, "workspace")?,
        })
    }
}
