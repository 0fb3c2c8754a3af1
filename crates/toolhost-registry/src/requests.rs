//! The requests themselves, each bounded: manifests and small blobs
//! read whole up to a limit, package blobs streamed to a file and hashed
//! as they are written, uploads in one piece. Authentication, TLS and
//! the body bound live in [`crate::client`].

use crate::artifact::INDEX;
use crate::client::{Access, Registry, RegistryError, read_bounded, sha256_digest};
use sha2::{Digest as _, Sha256};
use tokio::io::AsyncWriteExt as _;

impl Registry {
    /// Fetches a manifest (by tag or digest) of at most `limit` bytes:
    /// its bytes, its media type, and the digest computed of the bytes.
    /// Asked by digest, bytes of another digest are refused.
    pub(crate) async fn manifest(
        &self,
        repository: &str,
        reference: &str,
        accept: &[&str],
        limit: u64,
    ) -> Result<Option<(Vec<u8>, String, String)>, RegistryError> {
        let what = format!("the manifest {}/{repository}:{reference}", self.registry);
        let path = format!("/v2/{repository}/manifests/{reference}");
        let resp = self
            .send(
                reqwest::Method::GET,
                &path,
                repository,
                Access::Pull,
                accept,
                &None,
            )
            .await?;
        if resp.status() == reqwest::StatusCode::NOT_FOUND {
            return Ok(None);
        }
        if !resp.status().is_success() {
            return Err(self.status_error(resp, &what).await);
        }
        let kind = resp
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        let bytes = read_bounded(resp, limit, &what).await?;
        let digest = sha256_digest(&bytes);
        if reference.starts_with("sha256:") && digest != reference {
            return Err(RegistryError::DigestMismatch {
                what,
                expected: reference.to_owned(),
                actual: digest,
            });
        }
        Ok(Some((bytes, kind, digest)))
    }

    /// Fetches a blob into `to` (created new), hashing as it is written:
    /// refused, and `to` removed, past `size` bytes or on another digest.
    pub(crate) async fn blob_to_file(
        &self,
        repository: &str,
        digest: &str,
        size: u64,
        to: &std::path::Path,
    ) -> Result<(), RegistryError> {
        let what = format!("the blob {digest} of {}/{repository}", self.registry);
        let path = format!("/v2/{repository}/blobs/{digest}");
        let mut resp = self
            .send(
                reqwest::Method::GET,
                &path,
                repository,
                Access::Pull,
                &[],
                &None,
            )
            .await?;
        if !resp.status().is_success() {
            return Err(self.status_error(resp, &what).await);
        }
        if resp.content_length().is_some_and(|n| n > size) {
            return Err(RegistryError::TooLarge { what, limit: size });
        }
        let io = |e| RegistryError::Io {
            what: format!("cannot write {}", to.display()),
            source: e,
        };
        let mut file = tokio::fs::File::create_new(to).await.map_err(io)?;
        let outcome = async {
            let mut hash = Sha256::new();
            let mut got = 0u64;
            while let Some(chunk) = resp.chunk().await.map_err(|e| self.unreachable(&e))? {
                got += chunk.len() as u64;
                if got > size {
                    return Err(RegistryError::TooLarge {
                        what: what.clone(),
                        limit: size,
                    });
                }
                hash.update(&chunk);
                file.write_all(&chunk).await.map_err(io)?;
            }
            file.sync_all().await.map_err(io)?;
            let actual = format!("sha256:{:x}", hash.finalize());
            if actual != digest || got != size {
                return Err(RegistryError::DigestMismatch {
                    what: what.clone(),
                    expected: format!("{digest} ({size} bytes)"),
                    actual: format!("{actual} ({got} bytes)"),
                });
            }
            Ok(())
        }
        .await;
        if outcome.is_err() {
            let _ = tokio::fs::remove_file(to).await;
        }
        outcome
    }

    /// Fetches a small blob whole (a signature, a config), checked.
    pub(crate) async fn small_blob(
        &self,
        repository: &str,
        digest: &str,
        size: u64,
        limit: u64,
    ) -> Result<Vec<u8>, RegistryError> {
        let what = format!("the blob {digest} of {}/{repository}", self.registry);
        if size > limit {
            return Err(RegistryError::TooLarge { what, limit });
        }
        let path = format!("/v2/{repository}/blobs/{digest}");
        let resp = self
            .send(
                reqwest::Method::GET,
                &path,
                repository,
                Access::Pull,
                &[],
                &None,
            )
            .await?;
        if !resp.status().is_success() {
            return Err(self.status_error(resp, &what).await);
        }
        let bytes = read_bounded(resp, size, &what).await?;
        let actual = sha256_digest(&bytes);
        if actual != digest || bytes.len() as u64 != size {
            return Err(RegistryError::DigestMismatch {
                what,
                expected: digest.to_owned(),
                actual,
            });
        }
        Ok(bytes)
    }

    /// Uploads `bytes` as a blob unless the registry has it (one POST and
    /// one PUT: the monolithic upload every registry takes).
    pub(crate) async fn put_blob(
        &self,
        repository: &str,
        bytes: Vec<u8>,
    ) -> Result<String, RegistryError> {
        let digest = sha256_digest(&bytes);
        let what = format!(
            "the upload of blob {digest} to {}/{repository}",
            self.registry
        );
        let head = self
            .send(
                reqwest::Method::HEAD,
                &format!("/v2/{repository}/blobs/{digest}"),
                repository,
                Access::Push,
                &[],
                &None,
            )
            .await?;
        if head.status().is_success() {
            return Ok(digest);
        }
        let start = self
            .send(
                reqwest::Method::POST,
                &format!("/v2/{repository}/blobs/uploads/"),
                repository,
                Access::Push,
                &[],
                &None,
            )
            .await?;
        if start.status() != reqwest::StatusCode::ACCEPTED {
            return Err(self.status_error(start, &what).await);
        }
        let location = start
            .headers()
            .get(reqwest::header::LOCATION)
            .and_then(|v| v.to_str().ok())
            .ok_or_else(|| RegistryError::Invalid {
                what: what.clone(),
                why: "the registry gave no upload location".to_owned(),
            })?;
        let base = reqwest::Url::parse(self.base().await?).map_err(|_| RegistryError::Invalid {
            what: what.clone(),
            why: "no base URL".to_owned(),
        })?;
        let mut url = base.join(location).map_err(|_| RegistryError::Invalid {
            what: what.clone(),
            why: "the upload location is not a URL".to_owned(),
        })?;
        if url.host_str() != base.host_str()
            || url.port_or_known_default() != base.port_or_known_default()
        {
            return Err(RegistryError::Invalid {
                what,
                why: "the upload location is on another host; nothing is sent there".to_owned(),
            });
        }
        url.query_pairs_mut().append_pair("digest", &digest);
        let put = self
            .send(
                reqwest::Method::PUT,
                url.as_str(),
                repository,
                Access::Push,
                &[],
                &Some((bytes, "application/octet-stream")),
            )
            .await?;
        if put.status() != reqwest::StatusCode::CREATED {
            return Err(self.status_error(put, &what).await);
        }
        Ok(digest)
    }

    /// Puts a manifest at `reference` (a tag or its digest); whether the
    /// registry keeps referrers itself (it answered `OCI-Subject`).
    pub(crate) async fn put_manifest(
        &self,
        repository: &str,
        reference: &str,
        bytes: Vec<u8>,
        media_type: &'static str,
    ) -> Result<bool, RegistryError> {
        let what = format!("the manifest {}/{repository}:{reference}", self.registry);
        let resp = self
            .send(
                reqwest::Method::PUT,
                &format!("/v2/{repository}/manifests/{reference}"),
                repository,
                Access::Push,
                &[],
                &Some((bytes, media_type)),
            )
            .await?;
        if resp.status() != reqwest::StatusCode::CREATED {
            return Err(self.status_error(resp, &what).await);
        }
        Ok(resp.headers().contains_key("oci-subject"))
    }

    /// The referrers API's index for `digest`, or `None` where the
    /// registry does not have the API (404).
    pub(crate) async fn referrers_api(
        &self,
        repository: &str,
        digest: &str,
        limit: u64,
    ) -> Result<Option<Vec<u8>>, RegistryError> {
        let what = format!("the referrers of {}/{repository}@{digest}", self.registry);
        let resp = self
            .send(
                reqwest::Method::GET,
                &format!("/v2/{repository}/referrers/{digest}"),
                repository,
                Access::Pull,
                &[INDEX],
                &None,
            )
            .await?;
        if resp.status() == reqwest::StatusCode::NOT_FOUND {
            return Ok(None);
        }
        if !resp.status().is_success() {
            return Err(self.status_error(resp, &what).await);
        }
        read_bounded(resp, limit, &what).await.map(Some)
    }
}
