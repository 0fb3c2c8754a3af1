//! The part of the OCI distribution API toolhost speaks, bounded.
//!
//! Five requests carry everything: fetch and put a manifest, fetch, check
//! and upload a blob, and list an artifact's referrers. They are written
//! here on `reqwest` rather than taken from an OCI client crate because
//! the crates read a manifest, a referrers index and a token response
//! whole, with no bound: a hostile registry could make the daemon
//! allocate whatever it sends. Here every body has a limit checked
//! against its declared length first and against what arrives after, and
//! a blob is hashed while it is written and refused the moment it passes
//! its size.
//!
//! Authentication follows the registry's challenge: `Basic` with the
//! credentials found ([`crate::credentials`]), or the token flow (`Bearer
//! realm=…,service=…,scope=…`: a token asked of the realm with those
//! credentials, kept per scope). Plain HTTP is used only where it is
//! allowed (loopback, or a registry the operator lists) and only after
//! HTTPS could not connect; a redirect never goes from HTTPS to HTTP, and
//! credentials are never sent to another host (the token realm is the
//! registry's to name, so it must be HTTPS too unless it is loopback).
//!
//! What this module must not do: put an unchecked name in a URL, echo a
//! registry's body or a credential, or trust a digest the registry states
//! instead of one it computed.

use crate::credentials::{self, Basic, Found};
use crate::reference::{Reference, is_loopback};
use sha2::{Digest as _, Sha256};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How a daemon or the CLI reaches registries.
#[derive(Debug, Clone, Default)]
pub struct Settings {
    /// PEM files of certificate authorities trusted besides the system's.
    pub ca_files: Vec<PathBuf>,
    /// Registries (`host[:port]`) that may be reached over plain HTTP
    /// besides loopback ones.
    pub plain_http: Vec<String>,
}

/// Why a registry operation failed. Texts from the registry are cut and
/// escaped; no credential is ever part of one.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// The registry could not be reached.
    #[error("registry {registry} could not be reached: {why}")]
    Unreachable {
        /// `host[:port]`.
        registry: String,
        /// The transport's reason.
        why: String,
    },
    /// The registry refused the credentials, or asked for some and none
    /// were found.
    #[error(
        "registry {registry} refused access ({status}); credentials were looked for in {looked_in}"
    )]
    Unauthorized {
        /// `host[:port]`.
        registry: String,
        /// 401 or 403.
        status: u16,
        /// Where credentials were looked for.
        looked_in: String,
    },
    /// The registry answered an error.
    #[error("registry {registry} answered {status} to {what}{code}")]
    Status {
        /// `host[:port]`.
        registry: String,
        /// What was asked.
        what: String,
        /// The HTTP status.
        status: u16,
        /// The OCI error code, when it gave one (`: MANIFEST_UNKNOWN`).
        code: String,
    },
    /// A body was larger than its limit.
    #[error("{what} is larger than its limit of {limit} bytes: refused")]
    TooLarge {
        /// What was read.
        what: String,
        /// The limit.
        limit: u64,
    },
    /// What arrived does not hash to the digest it was asked for by.
    #[error(
        "{what} does not match its digest (wanted {expected}, got {actual}): refused, nothing was kept"
    )]
    DigestMismatch {
        /// What was read.
        what: String,
        /// The digest asked for.
        expected: String,
        /// The digest of what arrived.
        actual: String,
    },
    /// The artifact is not what toolhost reads.
    #[error("{what}: {why}")]
    Invalid {
        /// What was read.
        what: String,
        /// What is wrong with it.
        why: String,
    },
    /// Plain HTTP was needed and is not allowed.
    #[error(
        "registry {registry} does not answer HTTPS, and plain HTTP is allowed only to loopback or to a registry listed in [registry] plain_http"
    )]
    PlainRefused {
        /// `host[:port]`.
        registry: String,
    },
    /// A local file could not be read or written.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The certificate authorities could not be read.
    #[error("the registry TLS settings: {0}")]
    Tls(String),
}

impl RegistryError {
    /// Whether the registry could not be reached at all (the cache may
    /// stand in), as opposed to answering something wrong.
    #[must_use]
    pub fn is_unreachable(&self) -> bool {
        matches!(self, Self::Unreachable { .. })
    }
}

/// Which access a request needs: the token flow asks for a scope.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    Pull,
    Push,
}

/// A body to send, cheap to send again after a challenge.
pub(crate) type Body = Option<(Vec<u8>, &'static str)>;

const MAX_TOKEN_RESPONSE: u64 = 64 << 10;
const MAX_ERROR_BODY: u64 = 16 << 10;

/// A connection to one registry.
pub struct Registry {
    http: reqwest::Client,
    pub(crate) registry: String,
    plain_allowed: bool,
    base: tokio::sync::OnceCell<String>,
    creds: Found,
    auth: Mutex<HashMap<String, Arc<str>>>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("registry", &self.registry)
            .finish_non_exhaustive()
    }
}

/// The HTTP client every registry connection shares the settings of.
fn http_client(settings: &Settings) -> Result<reqwest::Client, RegistryError> {
    use rustls::pki_types::pem::PemObject as _;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_native_certs::load_native_certs().certs {
        let _ = roots.add(cert);
    }
    for file in &settings.ca_files {
        let certs = rustls::pki_types::CertificateDer::pem_file_iter(file)
            .map_err(|e| RegistryError::Tls(format!("{}: {e}", file.display())))?;
        let mut any = false;
        for cert in certs {
            let cert = cert.map_err(|e| RegistryError::Tls(format!("{}: {e}", file.display())))?;
            roots
                .add(cert)
                .map_err(|e| RegistryError::Tls(format!("{}: {e}", file.display())))?;
            any = true;
        }
        if !any {
            return Err(RegistryError::Tls(format!(
                "{} holds no PEM certificate",
                file.display()
            )));
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| RegistryError::Tls(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    tls.alpn_protocols = vec![b"http/1.1".to_vec()];
    let redirects = reqwest::redirect::Policy::custom(|attempt| {
        let downgrade = attempt.url().scheme() == "http"
            && attempt.previous().iter().any(|u| u.scheme() == "https")
            && !attempt.url().host_str().is_some_and(is_loopback);
        if downgrade || attempt.previous().len() >= 5 {
            attempt.error("a registry redirect to plain HTTP, or more than 5")
        } else {
            attempt.follow()
        }
    });
    reqwest::Client::builder()
        .tls_backend_preconfigured(tls)
        .redirect(redirects)
        .connect_timeout(Duration::from_secs(10))
        .read_timeout(Duration::from_secs(30))
        .user_agent(concat!("toolhost/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| RegistryError::Tls(e.to_string()))
}

impl Registry {
    /// A connection to `reference`'s registry; nothing is sent yet.
    ///
    /// # Errors
    /// [`RegistryError::Tls`] when a CA file cannot be read.
    pub fn connect(reference: &Reference, settings: &Settings) -> Result<Self, RegistryError> {
        let plain_allowed =
            is_loopback(reference.host()) || settings.plain_http.contains(&reference.registry);
        Ok(Self {
            http: http_client(settings)?,
            registry: reference.registry.clone(),
            plain_allowed,
            base: tokio::sync::OnceCell::new(),
            creds: credentials::lookup(&reference.registry),
            auth: Mutex::new(HashMap::new()),
        })
    }

    pub(crate) fn unreachable(&self, e: &reqwest::Error) -> RegistryError {
        let mut why = e.to_string();
        let mut src = std::error::Error::source(e);
        while let Some(s) = src {
            why = format!("{why}: {s}");
            src = s.source();
        }
        RegistryError::Unreachable {
            registry: self.registry.clone(),
            why: toolhost_base::term::one_line(&why.chars().take(300).collect::<String>())
                .into_owned(),
        }
    }

    /// `https://host` or, where allowed and HTTPS does not connect,
    /// `http://host`; decided once.
    pub(crate) async fn base(&self) -> Result<&str, RegistryError> {
        self.base
            .get_or_try_init(|| async {
                let https = format!("https://{}", self.registry);
                match self.http.get(format!("{https}/v2/")).send().await {
                    Ok(_) => Ok(https),
                    // Plain HTTP only where it is allowed, and only when
                    // the port answers it as a registry does (200 or 401
                    // to /v2/): a TLS port refusing our certificate check
                    // answers plain HTTP with 400, and its TLS error is
                    // what is reported.
                    Err(e) if self.plain_allowed => {
                        let http = format!("http://{}", self.registry);
                        match self.http.get(format!("{http}/v2/")).send().await {
                            Ok(r) if matches!(r.status().as_u16(), 200 | 401) => Ok(http),
                            _ => Err(self.unreachable(&e)),
                        }
                    }
                    Err(e) => Err(self.unreachable(&e)),
                }
            })
            .await
            .map(String::as_str)
    }

    fn scope(repository: &str, access: Access) -> String {
        match access {
            Access::Pull => format!("repository:{repository}:pull"),
            Access::Push => format!("repository:{repository}:pull,push"),
        }
    }

    /// Sends one request, answering the registry's challenge once.
    /// `path` starts with `/v2/`, made of checked names only.
    pub(crate) async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        repository: &str,
        access: Access,
        accept: &[&str],
        body: &Body,
    ) -> Result<reqwest::Response, RegistryError> {
        let url = if path.starts_with("http://") || path.starts_with("https://") {
            path.to_owned()
        } else {
            format!("{}{path}", self.base().await?)
        };
        let scope = Self::scope(repository, access);
        let mut answered = false;
        loop {
            let mut req = self.http.request(method.clone(), &url);
            for a in accept {
                req = req.header(reqwest::header::ACCEPT, *a);
            }
            if let Some((bytes, kind)) = body {
                req = req
                    .header(reqwest::header::CONTENT_TYPE, *kind)
                    .body(bytes.clone());
            } else if method == reqwest::Method::PUT || method == reqwest::Method::POST {
                req = req.body(Vec::new());
            }
            let held = self
                .auth
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .get(&scope)
                .cloned();
            if let Some(h) = held {
                req = req.header(reqwest::header::AUTHORIZATION, &*h);
            }
            let resp = req.send().await.map_err(|e| self.unreachable(&e))?;
            let status = resp.status().as_u16();
            if status != 401 || answered {
                if status == 401 || status == 403 {
                    return Err(RegistryError::Unauthorized {
                        registry: self.registry.clone(),
                        status,
                        looked_in: self.creds.looked_in(),
                    });
                }
                return Ok(resp);
            }
            answered = true;
            let challenge = resp
                .headers()
                .get(reqwest::header::WWW_AUTHENTICATE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_owned();
            let header = self.answer(&challenge, &scope).await?;
            self.auth
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .insert(scope.clone(), Arc::from(header));
        }
    }

    /// The `Authorization` header that answers `challenge`.
    async fn answer(&self, challenge: &str, scope: &str) -> Result<String, RegistryError> {
        let refused = || RegistryError::Unauthorized {
            registry: self.registry.clone(),
            status: 401,
            looked_in: self.creds.looked_in(),
        };
        let (kind, params) = parse_challenge(challenge);
        if kind.eq_ignore_ascii_case("basic") {
            let b = self.creds.basic.as_ref().ok_or_else(refused)?;
            return Ok(basic_header(b));
        }
        if !kind.eq_ignore_ascii_case("bearer") {
            return Err(refused());
        }
        let realm = params.get("realm").ok_or_else(refused)?;
        let mut url = reqwest::Url::parse(realm).map_err(|_| RegistryError::Invalid {
            what: format!("registry {}'s token realm", self.registry),
            why: "it is not a URL".to_owned(),
        })?;
        let realm_host = url.host_str().unwrap_or("").to_owned();
        let plain_ok = is_loopback(&realm_host)
            || (self.plain_allowed && self.registry.split(':').next() == Some(realm_host.as_str()));
        if url.scheme() != "https" && !(url.scheme() == "http" && plain_ok) {
            return Err(RegistryError::Invalid {
                what: format!("registry {}'s token realm", self.registry),
                why: "it is not HTTPS; no credential is sent to it".to_owned(),
            });
        }
        {
            let mut q = url.query_pairs_mut();
            if let Some(s) = params.get("service") {
                q.append_pair("service", s);
            }
            q.append_pair("scope", scope);
        }
        let mut req = self.http.get(url);
        if let Some(b) = &self.creds.basic {
            req = req.header(reqwest::header::AUTHORIZATION, basic_header(b));
        }
        let resp = req.send().await.map_err(|e| self.unreachable(&e))?;
        if !resp.status().is_success() {
            return Err(RegistryError::Unauthorized {
                registry: self.registry.clone(),
                status: resp.status().as_u16(),
                looked_in: self.creds.looked_in(),
            });
        }
        let body = read_bounded(resp, MAX_TOKEN_RESPONSE, "the token response").await?;
        let v: serde_json::Value =
            serde_json::from_slice(&body).map_err(|_| RegistryError::Invalid {
                what: "the token response".to_owned(),
                why: "it is not JSON".to_owned(),
            })?;
        let token = v
            .get("token")
            .or_else(|| v.get("access_token"))
            .and_then(serde_json::Value::as_str)
            .filter(|t| {
                !t.is_empty() && t.len() < 16 << 10 && t.bytes().all(|b| b.is_ascii_graphic())
            })
            .ok_or_else(|| RegistryError::Invalid {
                what: "the token response".to_owned(),
                why: "it holds no usable token".to_owned(),
            })?;
        Ok(format!("Bearer {token}"))
    }

    /// A registry error for a response that was not a success.
    pub(crate) async fn status_error(&self, resp: reqwest::Response, what: &str) -> RegistryError {
        let status = resp.status().as_u16();
        let code = read_bounded(resp, MAX_ERROR_BODY, "an error body")
            .await
            .ok()
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
            .and_then(|v| {
                v.get("errors")?
                    .get(0)?
                    .get("code")?
                    .as_str()
                    .map(|c| c.chars().take(40).collect::<String>())
            })
            .filter(|c| c.bytes().all(|b| b.is_ascii_uppercase() || b == b'_'))
            .map(|c| format!(": {c}"))
            .unwrap_or_default();
        RegistryError::Status {
            registry: self.registry.clone(),
            what: what.to_owned(),
            status,
            code,
        }
    }
}

/// `sha256:HEX` of `bytes`.
#[must_use]
pub fn sha256_digest(bytes: &[u8]) -> String {
    format!("sha256:{:x}", Sha256::digest(bytes))
}

fn basic_header(b: &Basic) -> String {
    use base64::Engine as _;
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("{}:{}", b.user, b.password))
    )
}

/// Reads a body of at most `limit` bytes: refused on a declared length
/// over it before a byte is read, and the moment more arrives.
pub(crate) async fn read_bounded(
    mut resp: reqwest::Response,
    limit: u64,
    what: &str,
) -> Result<Vec<u8>, RegistryError> {
    let too_large = || RegistryError::TooLarge {
        what: what.to_owned(),
        limit,
    };
    if resp.content_length().is_some_and(|n| n > limit) {
        return Err(too_large());
    }
    let mut out = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(|e| RegistryError::Unreachable {
        registry: resp.url().host_str().unwrap_or("").to_owned(),
        why: toolhost_base::term::one_line(&e.to_string()).into_owned(),
    })? {
        if out.len() as u64 + chunk.len() as u64 > limit {
            return Err(too_large());
        }
        out.extend_from_slice(&chunk);
    }
    Ok(out)
}

/// `Bearer realm="…",service="…"` → ("Bearer", {realm, service}).
pub(crate) fn parse_challenge(header: &str) -> (String, HashMap<String, String>) {
    let header = header.trim();
    let (kind, rest) = header.split_once(' ').unwrap_or((header, ""));
    let mut params = HashMap::new();
    let mut chars = rest.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| *c == ',' || c.is_whitespace()) {
            chars.next();
        }
        let key: String = chars.by_ref().take_while(|c| *c != '=').collect();
        if key.is_empty() {
            break;
        }
        let mut value = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            while let Some(c) = chars.next() {
                match c {
                    '\\' => value.extend(chars.next()),
                    '"' => break,
                    c => value.push(c),
                }
            }
        } else {
            while let Some(c) = chars.peek().copied() {
                if c == ',' {
                    break;
                }
                value.push(c);
                chars.next();
            }
        }
        if params.len() < 16 {
            params.insert(key.trim().to_ascii_lowercase(), value);
        }
    }
    (kind.to_owned(), params)
}

/// Makes ring the process's TLS crypto provider, once; later calls do
/// nothing. reqwest, built with rustls and no provider of its own (the
/// other, aws-lc, is a C build), asks the process for one whenever a
/// client is built, anywhere in the process: the binaries and the tests
/// call this first.
pub fn use_ring_for_tls() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn challenges_as_registries_send_them() {
        let (k, p) = parse_challenge(
            r#"Bearer realm="https://auth.example.com/token",service="registry.example.com",scope="repository:a/b:pull""#,
        );
        assert_eq!(k, "Bearer");
        assert_eq!(p["realm"], "https://auth.example.com/token");
        assert_eq!(p["service"], "registry.example.com");
        assert_eq!(p["scope"], "repository:a/b:pull");
        let (k, p) = parse_challenge(r#"Basic realm="toolhost-test""#);
        assert_eq!(
            (k.as_str(), p["realm"].as_str()),
            ("Basic", "toolhost-test")
        );
        let (_, p) = parse_challenge(r#"Bearer realm=x, error="a\"b""#);
        assert_eq!((p["realm"].as_str(), p["error"].as_str()), ("x", "a\"b"));
    }

    #[test]
    fn a_hostile_challenge_is_bounded() {
        let many: String = (0..1000).map(|i| format!("k{i}=v,")).collect();
        let (_, p) = parse_challenge(&format!("Bearer {many}"));
        assert!(p.len() <= 16);
        let (_, p) = parse_challenge("Bearer realm=\"unterminated");
        assert_eq!(p["realm"], "unterminated");
    }
}
