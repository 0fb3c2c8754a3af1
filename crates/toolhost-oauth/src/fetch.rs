//! HTTP to the authorization servers: bounded in time and size, HTTPS
//! unless the host is loopback, and no redirects (a metadata document or a
//! key set that moves is refused, not followed somewhere else).

use crate::settings::secure;
use std::path::PathBuf;
use std::time::Duration;
use url::Url;

/// The largest metadata document or introspection answer read.
pub(crate) const MAX_DOCUMENT_BYTES: u64 = 64 * 1024;

/// A request to an authorization server that did not give a usable answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FetchError {
    /// The URL is not HTTPS (and not loopback).
    #[error("{0} is not an https URL (plain http is allowed only on loopback)")]
    Insecure(String),
    /// No answer, or not a 2xx.
    #[error("{url} did not answer: {why}")]
    Failed {
        /// The URL asked.
        url: String,
        /// What happened.
        why: String,
    },
    /// An answer over the size bound.
    #[error("{0} answered with more than toolhost reads")]
    TooLarge(String),
    /// Not JSON.
    #[error("{0} did not answer with a JSON object")]
    NotJson(String),
    /// TLS roots could not be loaded.
    #[error("TLS roots: {0}")]
    Tls(String),
}

/// The client every request to the authorization servers goes through.
#[derive(Debug, Clone)]
pub(crate) struct Fetcher {
    client: reqwest::Client,
}

impl Fetcher {
    pub(crate) fn new(ca_files: &[PathBuf]) -> Result<Self, FetchError> {
        use rustls::pki_types::pem::PemObject as _;
        let mut roots = rustls::RootCertStore::empty();
        for cert in rustls_native_certs::load_native_certs().certs {
            let _ = roots.add(cert);
        }
        for file in ca_files {
            let tls =
                |e: &dyn std::fmt::Display| FetchError::Tls(format!("{}: {e}", file.display()));
            for cert in
                rustls::pki_types::CertificateDer::pem_file_iter(file).map_err(|e| tls(&e))?
            {
                roots.add(cert.map_err(|e| tls(&e))?).map_err(|e| tls(&e))?;
            }
        }
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| FetchError::Tls(e.to_string()))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        let client = reqwest::Client::builder()
            .tls_backend_preconfigured(tls)
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(Duration::from_secs(5))
            .timeout(Duration::from_secs(10))
            .user_agent(concat!("toolhost/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| FetchError::Tls(e.to_string()))?;
        Ok(Self { client })
    }

    /// GET a JSON object.
    pub(crate) async fn get_json(
        &self,
        url: &Url,
        limit: u64,
    ) -> Result<serde_json::Map<String, serde_json::Value>, FetchError> {
        if !secure(url) {
            return Err(FetchError::Insecure(url.to_string()));
        }
        let request = self
            .client
            .get(url.clone())
            .header("accept", "application/json");
        self.json(url, request, limit).await
    }

    /// POST a form with HTTP Basic client authentication; the JSON answer.
    pub(crate) async fn post_form(
        &self,
        url: &Url,
        form: &[(&str, &str)],
        basic: (&str, &str),
        limit: u64,
    ) -> Result<serde_json::Map<String, serde_json::Value>, FetchError> {
        match self.post_form_answer(url, form, basic, limit).await? {
            (status, body) if (200..300).contains(&status) => Ok(body),
            (status, _) => Err(FetchError::Failed {
                url: url.to_string(),
                why: format!("status {status}"),
            }),
        }
    }

    async fn json(
        &self,
        url: &Url,
        request: reqwest::RequestBuilder,
        limit: u64,
    ) -> Result<serde_json::Map<String, serde_json::Value>, FetchError> {
        match self.answer(url, request, limit).await? {
            (status, body) if (200..300).contains(&status) => Ok(body),
            (status, _) => Err(FetchError::Failed {
                url: url.to_string(),
                why: format!("status {status}"),
            }),
        }
    }

    /// POST a form with HTTP Basic client authentication; the status and
    /// the JSON answer, whatever the status (an OAuth error is JSON too).
    pub(crate) async fn post_form_answer(
        &self,
        url: &Url,
        form: &[(&str, &str)],
        basic: (&str, &str),
        limit: u64,
    ) -> Result<(u16, serde_json::Map<String, serde_json::Value>), FetchError> {
        if !secure(url) {
            return Err(FetchError::Insecure(url.to_string()));
        }
        let body = url::form_urlencoded::Serializer::new(String::new())
            .extend_pairs(form)
            .finish();
        // RFC 6749 §2.3.1: the id and secret are form-encoded before Basic.
        let encode =
            |s: &str| url::form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>();
        let request = self
            .client
            .post(url.clone())
            .header("content-type", "application/x-www-form-urlencoded")
            .header("accept", "application/json")
            .basic_auth(encode(basic.0), Some(encode(basic.1)))
            .body(body);
        self.answer(url, request, limit).await
    }

    /// The status and the JSON object of an answer, read within `limit`.
    async fn answer(
        &self,
        url: &Url,
        request: reqwest::RequestBuilder,
        limit: u64,
    ) -> Result<(u16, serde_json::Map<String, serde_json::Value>), FetchError> {
        let failed = |why: String| FetchError::Failed {
            url: url.to_string(),
            why: toolhost_base::term::one_line(&why).into_owned(),
        };
        let mut resp = request.send().await.map_err(|e| failed(e.to_string()))?;
        let status = resp.status().as_u16();
        if resp.content_length().is_some_and(|n| n > limit) {
            return Err(FetchError::TooLarge(url.to_string()));
        }
        let mut body = Vec::new();
        while let Some(chunk) = resp.chunk().await.map_err(|e| failed(e.to_string()))? {
            if body.len() as u64 + chunk.len() as u64 > limit {
                return Err(FetchError::TooLarge(url.to_string()));
            }
            body.extend_from_slice(&chunk);
        }
        match serde_json::from_slice(&body) {
            Ok(serde_json::Value::Object(m)) => Ok((status, m)),
            _ => Err(FetchError::NotJson(url.to_string())),
        }
    }
}
