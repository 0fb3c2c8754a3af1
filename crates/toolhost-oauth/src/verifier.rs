//! The entry point: an access token in, a [`Verified`] caller out.
//!
//! A token verified once is kept until it expires (bounded: at most
//! [`MAX_CACHED`] tokens), so a client's every request after its first
//! costs one hash lookup, not a signature check. Only accepted tokens are
//! kept; a refused one is checked again each time it is sent.

use crate::caller::Caller;
use crate::exchange::{ExchangeError, Exchanged, exchange};
use crate::fetch::{FetchError, Fetcher};
use crate::introspect::{Expected, introspect};
use crate::issuers::Issuer;
use crate::jwt::{self, Expectations};
use crate::rejection::Rejection;
use crate::settings::{BadSettings, Settings};
use std::any::Any;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

/// The most verified tokens kept at once.
pub const MAX_CACHED: usize = 4096;
/// The most introspection requests in flight at once.
const INTROSPECTIONS_AT_ONCE: usize = 8;
/// The most token exchanges in flight at once.
const EXCHANGES_AT_ONCE: usize = 16;

/// A caller established from a token, and what the transport derived
/// from it (computed once per token, see [`Verified::derived`]).
#[derive(Debug)]
pub struct Verified {
    /// Who the token says is calling.
    pub caller: Caller,
    derived: OnceLock<Arc<dyn Any + Send + Sync>>,
}

impl Verified {
    fn new(caller: Caller) -> Self {
        Self {
            caller,
            derived: OnceLock::new(),
        }
    }

    /// What `make` derives from the caller, made once per verified token
    /// and shared by every request that sends it. `None` if a value of
    /// another type was derived first.
    pub fn derived<T: Any + Send + Sync>(&self, make: impl FnOnce(&Caller) -> T) -> Option<Arc<T>> {
        let v = self.derived.get_or_init(|| Arc::new(make(&self.caller)));
        Arc::clone(v).downcast::<T>().ok()
    }
}

/// Verifies access tokens for one resource.
#[derive(Debug)]
pub struct Verifier {
    settings: Settings,
    issuers: Vec<Issuer>,
    fetcher: Fetcher,
    cache: Mutex<HashMap<Arc<str>, Arc<Verified>>>,
    introspections: tokio::sync::Semaphore,
    exchanges: tokio::sync::Semaphore,
}

/// Why a verifier could not be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SetupError {
    /// The settings break a rule.
    #[error(transparent)]
    Settings(#[from] BadSettings),
    /// The TLS roots could not be loaded.
    #[error("[http.oauth] {0}")]
    Tls(#[from] FetchError),
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl Verifier {
    /// A verifier of these settings; nothing is fetched yet.
    ///
    /// # Errors
    /// The settings break a rule, or a CA file cannot be read.
    pub fn new(settings: Settings) -> Result<Self, SetupError> {
        settings.check()?;
        let fetcher = Fetcher::new(&settings.ca_files)?;
        Ok(Self {
            issuers: settings.issuers.iter().cloned().map(Issuer::new).collect(),
            settings,
            fetcher,
            cache: Mutex::new(HashMap::new()),
            introspections: tokio::sync::Semaphore::new(INTROSPECTIONS_AT_ONCE),
            exchanges: tokio::sync::Semaphore::new(EXCHANGES_AT_ONCE),
        })
    }

    /// The settings.
    #[must_use]
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// The caller `token` stands for, if this resource accepts it.
    ///
    /// # Errors
    /// Why it is refused (or that the authorization server could not be
    /// asked).
    pub async fn verify(&self, token: &str) -> Result<Arc<Verified>, Rejection> {
        if token.len() > jwt::MAX_TOKEN_BYTES {
            return Err(Rejection::TooLarge);
        }
        let now = now();
        if let Some(hit) = self.cached(token, now) {
            return Ok(hit);
        }
        let caller = if jwt::looks_like_jwt(token) {
            self.verify_jwt(token, now).await?
        } else {
            self.verify_opaque(token, now).await?
        };
        let verified = Arc::new(Verified::new(caller));
        self.keep(token, &verified, now);
        Ok(verified)
    }

    fn cached(&self, token: &str, now: u64) -> Option<Arc<Verified>> {
        let cache = self.cache.lock().ok()?;
        cache
            .get(token)
            .filter(|v| v.caller.expires_at > now)
            .cloned()
    }

    fn keep(&self, token: &str, verified: &Arc<Verified>, now: u64) {
        let Ok(mut cache) = self.cache.lock() else {
            return;
        };
        if cache.len() >= MAX_CACHED {
            cache.retain(|_, v| v.caller.expires_at > now);
        }
        if cache.len() >= MAX_CACHED {
            // Full of live tokens: start again rather than grow. Each is
            // verified again on its next use.
            cache.clear();
        }
        cache.insert(Arc::from(token), Arc::clone(verified));
    }

    /// A token for `audience` from `issuer` (the caller's, already
    /// verified), in exchange for the caller's `subject_token`.
    ///
    /// # Errors
    /// No client at that issuer, no token endpoint, the server's refusal,
    /// or no usable answer.
    pub async fn exchange(
        &self,
        issuer: &str,
        subject_token: &str,
        audience: &str,
    ) -> Result<Exchanged, ExchangeError> {
        let issuer = self
            .issuers
            .iter()
            .find(|i| i.settings.issuer == issuer)
            .ok_or(ExchangeError::NoClient)?;
        let client = issuer
            .settings
            .client
            .as_ref()
            .ok_or(ExchangeError::NoClient)?;
        let endpoint = issuer
            .metadata(&self.fetcher)
            .await
            .map_err(|_| ExchangeError::Unavailable(audience.to_owned()))?
            .token_endpoint
            .clone()
            .ok_or(ExchangeError::NoEndpoint)?;
        let _slot = self
            .exchanges
            .acquire()
            .await
            .map_err(|_| ExchangeError::Unavailable(audience.to_owned()))?;
        exchange(
            &self.fetcher,
            &endpoint,
            client,
            subject_token,
            audience,
            now(),
        )
        .await
    }

    async fn verify_jwt(&self, token: &str, now: u64) -> Result<Caller, Rejection> {
        let unverified = jwt::decode(token, &self.settings.algorithms)?;
        let issuer = unverified
            .claimed_issuer()
            .and_then(|iss| self.issuers.iter().find(|i| i.settings.issuer == iss))
            .ok_or(Rejection::Issuer)?;
        let keys = issuer
            .keys_for(&unverified, &self.fetcher, self.settings.jwks_min_refresh)
            .await?;
        unverified.verify(
            &keys,
            &Expectations {
                issuer: &issuer.settings.issuer,
                audience: self.settings.resource.as_str(),
                algorithms: &self.settings.algorithms,
                skew: self.settings.skew.as_secs(),
                now,
            },
        )
    }

    async fn verify_opaque(&self, token: &str, now: u64) -> Result<Caller, Rejection> {
        let Some(issuer) = self.issuers.iter().find(|i| i.settings.introspection) else {
            return Err(Rejection::Opaque);
        };
        let Some(credentials) = &issuer.settings.client else {
            return Err(Rejection::Opaque);
        };
        if token.is_empty() || !token.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(Rejection::Malformed("it holds characters no token has"));
        }
        // The slot first: at most a few requests of any kind (metadata
        // included) go to the server for opaque tokens at once.
        let _slot = self
            .introspections
            .acquire()
            .await
            .map_err(|_| Rejection::Unavailable)?;
        let endpoint = issuer
            .metadata(&self.fetcher)
            .await
            .map_err(|_| Rejection::Unavailable)?
            .introspection_endpoint
            .clone()
            .ok_or(Rejection::Opaque)?;
        introspect(
            &self.fetcher,
            &endpoint,
            credentials,
            token,
            &Expected {
                issuer: &issuer.settings.issuer,
                resource: self.settings.resource.as_str(),
                now,
                max_age: self.settings.introspection_cache.as_secs(),
            },
        )
        .await
    }
}
