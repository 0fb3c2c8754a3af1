//! Each trusted authorization server: its metadata (RFC 8414, or OpenID
//! discovery) and its keys, fetched when first needed and kept.
//!
//! Keys are fetched again when a token names a key the set does not hold
//! (the server rotated), or when the set is an hour old; but never more
//! often than `jwks_min_refresh`, and one fetch at a time per issuer: a
//! flood of tokens with made-up key ids costs the server one request per
//! interval, not one each. A fetch that fails keeps the keys already held.
//!
//! What this module must not do: trust a metadata document whose `issuer`
//! is not exactly the configured one (the mix-up attack), or follow a key
//! set to a URL that is not HTTPS (loopback aside).

use crate::fetch::{FetchError, Fetcher, MAX_DOCUMENT_BYTES};
use crate::jwt::Unverified;
use crate::keys::{KeySet, MAX_JWKS_BYTES};
use crate::rejection::Rejection;
use crate::settings::IssuerSettings;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};
use url::Url;

/// Keys older than this are fetched again when next needed.
const KEYS_MAX_AGE: Duration = Duration::from_secs(3600);

/// What toolhost uses of an authorization server's metadata.
#[derive(Debug, Clone)]
pub(crate) struct Metadata {
    pub(crate) jwks_uri: Option<Url>,
    pub(crate) introspection_endpoint: Option<Url>,
    pub(crate) token_endpoint: Option<Url>,
}

/// One trusted issuer and what was fetched of it.
#[derive(Debug)]
pub(crate) struct Issuer {
    pub(crate) settings: IssuerSettings,
    metadata: tokio::sync::OnceCell<Metadata>,
    keys: RwLock<Option<(Arc<KeySet>, Instant)>>,
    /// When keys were last fetched (or tried); held while a fetch runs.
    last_fetch: tokio::sync::Mutex<Option<Instant>>,
}

impl Issuer {
    pub(crate) fn new(settings: IssuerSettings) -> Self {
        Self {
            settings,
            metadata: tokio::sync::OnceCell::new(),
            keys: RwLock::new(None),
            last_fetch: tokio::sync::Mutex::new(None),
        }
    }

    fn held(&self) -> Option<(Arc<KeySet>, Instant)> {
        self.keys.read().ok().and_then(|k| k.clone())
    }

    /// The keys to check `token` with: those held if they hold a candidate
    /// and are fresh, else a refetch if one is allowed now.
    pub(crate) async fn keys_for(
        &self,
        token: &Unverified<'_>,
        fetcher: &Fetcher,
        min_refresh: Duration,
    ) -> Result<Arc<KeySet>, Rejection> {
        let usable = |held: &Option<(Arc<KeySet>, Instant)>| {
            held.as_ref()
                .filter(|(k, at)| token.has_candidate(k) && at.elapsed() < KEYS_MAX_AGE)
                .map(|(k, _)| Arc::clone(k))
        };
        if let Some(k) = usable(&self.held()) {
            return Ok(k);
        }
        let mut last = self.last_fetch.lock().await;
        // Another request may have fetched while this one waited.
        let held = self.held();
        if let Some(k) = usable(&held) {
            return Ok(k);
        }
        if last.is_some_and(|t| t.elapsed() < min_refresh) {
            return held.map(|(k, _)| k).ok_or(Rejection::Unavailable);
        }
        *last = Some(Instant::now());
        match self.fetch_keys(fetcher).await {
            Ok(keys) => {
                let keys = Arc::new(keys);
                if let Ok(mut slot) = self.keys.write() {
                    *slot = Some((Arc::clone(&keys), Instant::now()));
                }
                tracing::info!(issuer = %self.settings.issuer, keys = keys.len(), "fetched the issuer's signing keys");
                Ok(keys)
            }
            Err(e) => {
                tracing::warn!(issuer = %self.settings.issuer, error = %e, "could not fetch the issuer's signing keys");
                held.map(|(k, _)| k).ok_or(Rejection::Unavailable)
            }
        }
    }

    async fn fetch_keys(&self, fetcher: &Fetcher) -> Result<KeySet, FetchError> {
        let metadata = self.metadata(fetcher).await?;
        let uri = metadata
            .jwks_uri
            .as_ref()
            .ok_or_else(|| FetchError::Failed {
                url: self.settings.issuer.clone(),
                why: "its metadata names no jwks_uri".into(),
            })?;
        let doc = fetcher.get_json(uri, MAX_JWKS_BYTES).await?;
        KeySet::from_json(&serde_json::Value::Object(doc)).map_err(|e| FetchError::Failed {
            url: uri.to_string(),
            why: e.to_string(),
        })
    }

    /// The issuer's metadata, fetched once (a failure is tried again on
    /// the next need).
    pub(crate) async fn metadata(&self, fetcher: &Fetcher) -> Result<&Metadata, FetchError> {
        self.metadata
            .get_or_try_init(|| discover(&self.settings.issuer, fetcher))
            .await
    }
}

/// RFC 8414's well-known URL first (with the issuer's path after it), then
/// OpenID Connect discovery's.
async fn discover(issuer: &str, fetcher: &Fetcher) -> Result<Metadata, FetchError> {
    let url = Url::parse(issuer).map_err(|_| FetchError::Insecure(issuer.to_owned()))?;
    let path = url.path().trim_end_matches('/');
    let origin = url.origin().ascii_serialization();
    let candidates = [
        format!("{origin}/.well-known/oauth-authorization-server{path}"),
        format!(
            "{}/.well-known/openid-configuration",
            issuer.trim_end_matches('/')
        ),
    ];
    let mut last = None;
    for candidate in candidates {
        let Ok(at) = Url::parse(&candidate) else {
            continue;
        };
        match fetcher.get_json(&at, MAX_DOCUMENT_BYTES).await {
            Ok(doc) => {
                if doc.get("issuer").and_then(serde_json::Value::as_str) != Some(issuer) {
                    return Err(FetchError::Failed {
                        url: candidate,
                        why: "its issuer is not the one configured (refused: the mix-up attack)"
                            .into(),
                    });
                }
                let url_of = |name: &str| -> Result<Option<Url>, FetchError> {
                    match doc.get(name).and_then(serde_json::Value::as_str) {
                        None => Ok(None),
                        Some(u) => match Url::parse(u) {
                            Ok(u) if crate::settings::secure(&u) => Ok(Some(u)),
                            _ => Err(FetchError::Insecure(u.to_owned())),
                        },
                    }
                };
                return Ok(Metadata {
                    jwks_uri: url_of("jwks_uri")?,
                    introspection_endpoint: url_of("introspection_endpoint")?,
                    token_endpoint: url_of("token_endpoint")?,
                });
            }
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| FetchError::Failed {
        url: issuer.to_owned(),
        why: "no metadata URL".into(),
    }))
}
