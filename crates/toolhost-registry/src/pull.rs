//! `plugins install REGISTRY/REPO:TAG`: a package out of a registry, by
//! digest, into a bounded cache.
//!
//! A tag is resolved once: the manifest fetched by tag is hashed, and
//! from then on everything is fetched by that digest (the manifest's
//! blobs, its signature's subject), so a tag moved meanwhile is never
//! followed. The package's layer is hashed while it is written and
//! refused past its declared size; the signature must name this very
//! manifest as its subject. What is pulled is kept by digest in
//! `<state>/registry/packages/<hex>/` (the archive and the signature
//! beside it, as an operator would have them on disk), so the install
//! that follows is the install of an archive, every check included, and a
//! re-install needs no network. A tag's last digest is kept too, used
//! only when the registry cannot be reached.
//!
//! What this module must not do: use anything from the cache that does
//! not hash to the digest it is kept under, or leave a partial entry.

use crate::artifact;
use crate::client::{Registry, RegistryError, Settings, sha256_digest};
use crate::reference::Reference;
use sha2::Digest as _;
use std::io::Read as _;
use std::path::{Path, PathBuf};

/// The archive's name in a cache entry.
pub const ARCHIVE: &str = "package.tar.gz";

/// Where pulled packages are kept, and how much of them.
#[derive(Debug, Clone)]
pub struct Cache {
    /// `<state>/registry`.
    pub root: PathBuf,
    /// The most its packages may weigh together; the least recently
    /// used go first.
    pub limit_bytes: u64,
}

/// A package pulled (or found in the cache).
#[derive(Debug, Clone)]
pub struct Pulled {
    /// The archive, with its signature beside it when it has one.
    pub archive: PathBuf,
    /// The reference pinned to the manifest's digest.
    pub pinned: Reference,
    /// Whether the registry was not asked (or could not be reached and
    /// the cache answered).
    pub from_cache: bool,
    /// Whether a signature came with it.
    pub signed: bool,
}

fn io(what: String) -> impl FnOnce(std::io::Error) -> RegistryError {
    move |source| RegistryError::Io { what, source }
}

impl Cache {
    fn entry(&self, digest: &str) -> PathBuf {
        self.root
            .join("packages")
            .join(digest.trim_start_matches("sha256:"))
    }

    fn tags_file(&self) -> PathBuf {
        self.root.join("tags.json")
    }

    /// The digest a tag last resolved to.
    fn last_digest(&self, reference: &Reference) -> Option<String> {
        let text = std::fs::read(self.tags_file()).ok()?;
        let v: serde_json::Value = serde_json::from_slice(&text).ok()?;
        v.get(reference.to_string())?
            .as_str()
            .filter(|d| crate::reference::is_digest(d))
            .map(str::to_owned)
    }

    fn remember(&self, reference: &Reference, digest: &str) {
        let mut v: serde_json::Map<String, serde_json::Value> = std::fs::read(self.tags_file())
            .ok()
            .and_then(|t| serde_json::from_slice(&t).ok())
            .unwrap_or_default();
        v.insert(reference.to_string(), serde_json::json!(digest));
        while v.len() > 1024 {
            let Some(k) = v.keys().next().cloned() else {
                break;
            };
            v.remove(&k);
        }
        let _ = toolhost_base::files::write_private(
            &self.tags_file(),
            &serde_json::to_vec_pretty(&v).unwrap_or_default(),
        );
    }

    /// The entry for `digest`, if it is whole and hashes to what it is
    /// kept under.
    fn found(&self, reference: &Reference, digest: &str, max_package: u64) -> Option<Pulled> {
        let dir = self.entry(digest);
        let manifest = std::fs::read(dir.join("manifest.json")).ok()?;
        if sha256_digest(&manifest) != digest {
            return None;
        }
        let parsed = artifact::parse_manifest(
            &manifest,
            artifact::PACKAGE_ARTIFACT,
            artifact::PACKAGE_LAYER,
            "the cached manifest",
        )
        .ok()?;
        if parsed.layer.size > max_package || !hashes_to(&dir.join(ARCHIVE), &parsed.layer) {
            return None;
        }
        // Touched: the least recently used entries go first.
        let _ = std::fs::File::open(dir.join("manifest.json"))
            .and_then(|f| f.set_modified(std::time::SystemTime::now()));
        let signed = dir.join(format!("{ARCHIVE}.minisig")).is_file();
        Some(Pulled {
            archive: dir.join(ARCHIVE),
            pinned: reference.pinned(digest),
            from_cache: true,
            signed,
        })
    }

    /// Removes the least recently used entries past the limit, never
    /// `keep`.
    fn trim(&self, keep: &Path) {
        let Ok(rd) = std::fs::read_dir(self.root.join("packages")) else {
            return;
        };
        let mut entries: Vec<(std::time::SystemTime, u64, PathBuf)> = rd
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p != keep)
            .map(|p| {
                let used = std::fs::metadata(p.join("manifest.json"))
                    .and_then(|m| m.modified())
                    .unwrap_or(std::time::UNIX_EPOCH);
                let size = std::fs::metadata(p.join(ARCHIVE)).map_or(0, |m| m.len());
                (used, size, p)
            })
            .collect();
        let kept = std::fs::metadata(keep.join(ARCHIVE)).map_or(0, |m| m.len());
        let mut total: u64 = kept + entries.iter().map(|e| e.1).sum::<u64>();
        entries.sort();
        for (_, size, path) in entries {
            if total <= self.limit_bytes {
                break;
            }
            if std::fs::remove_dir_all(&path).is_ok() {
                total = total.saturating_sub(size);
            }
        }
    }
}

/// Whether the file at `path` is `d.size` bytes hashing to `d.digest`.
fn hashes_to(path: &Path, d: &artifact::Descriptor) -> bool {
    let Ok(mut f) = std::fs::File::open(path) else {
        return false;
    };
    if f.metadata().map_or(true, |m| m.len() != d.size) {
        return false;
    }
    let mut hash = sha2::Sha256::new();
    let mut buf = vec![0u8; 64 << 10];
    loop {
        match f.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => hash.update(&buf[..n]),
            Err(_) => return false,
        }
    }
    format!("sha256:{:x}", hash.finalize()) == d.digest
}

/// Pulls `reference` (or finds it in `cache`): the package's archive by
/// digest, with its signature beside it.
///
/// # Errors
/// [`RegistryError`], naming what was refused; nothing is kept of a
/// refused package.
pub async fn pull(
    reference: &Reference,
    settings: &Settings,
    cache: &Cache,
    max_package: u64,
) -> Result<Pulled, RegistryError> {
    if let Some(d) = &reference.digest
        && let Some(hit) = cache.found(reference, d, max_package)
    {
        return Ok(hit);
    }
    let registry = Registry::connect(reference, settings)?;
    let repo = reference.repository.as_str();
    let asked = reference
        .digest
        .clone()
        .or_else(|| reference.tag.clone())
        .unwrap_or_else(|| "latest".to_owned());
    let fetched = registry
        .manifest(repo, &asked, &[artifact::MANIFEST], artifact::MAX_MANIFEST)
        .await;
    let (manifest, digest) = match fetched {
        Ok(Some((bytes, _, digest))) => (bytes, digest),
        Ok(None) => {
            return Err(RegistryError::Invalid {
                what: reference.to_string(),
                why: "the registry has no such tag or digest".to_owned(),
            });
        }
        Err(e) if e.is_unreachable() && reference.digest.is_none() => {
            // The registry is down: the tag's last digest, if it is kept.
            let Some(d) = cache.last_digest(reference) else {
                return Err(e);
            };
            let Some(hit) = cache.found(reference, &d, max_package) else {
                return Err(e);
            };
            tracing::warn!(reference = %reference, digest = %d, "the registry cannot be reached: installing the digest this tag last resolved to, from the cache");
            return Ok(hit);
        }
        Err(e) => return Err(e),
    };
    if let Some(mut hit) = cache.found(reference, &digest, max_package) {
        cache.remember(reference, &digest);
        hit.from_cache = false;
        return Ok(hit);
    }
    fetch_package(&registry, reference, cache, &manifest, &digest, max_package).await
}

/// The package of the manifest `manifest` (of `digest`): its layer and
/// signature fetched into a staging folder, then renamed into the cache
/// whole.
async fn fetch_package(
    registry: &Registry,
    reference: &Reference,
    cache: &Cache,
    manifest: &[u8],
    digest: &str,
    max_package: u64,
) -> Result<Pulled, RegistryError> {
    let repo = reference.repository.as_str();
    let what = format!("{}@{digest}", reference.repo_name());
    let parsed = artifact::parse_manifest(
        manifest,
        artifact::PACKAGE_ARTIFACT,
        artifact::PACKAGE_LAYER,
        &what,
    )?;
    if parsed.layer.size > max_package {
        return Err(RegistryError::TooLarge {
            what: format!("the package {what}"),
            limit: max_package,
        });
    }
    let packages = cache.root.join("packages");
    toolhost_base::files::private_dir(&packages)
        .map_err(io(format!("cannot make {}", packages.display())))?;
    let staging = tempfile::Builder::new()
        .prefix(".pull-")
        .tempdir_in(&packages)
        .map_err(io(format!("cannot stage in {}", packages.display())))?;
    registry
        .blob_to_file(
            repo,
            &parsed.layer.digest,
            parsed.layer.size,
            &staging.path().join(ARCHIVE),
        )
        .await?;
    let signature = find_signature(registry, repo, digest).await?;
    if let Some(text) = &signature {
        std::fs::write(staging.path().join(format!("{ARCHIVE}.minisig")), text)
            .map_err(io("cannot keep the signature".into()))?;
    }
    std::fs::write(staging.path().join("manifest.json"), manifest)
        .map_err(io("cannot keep the manifest".into()))?;
    let entry = cache.entry(digest);
    let _ = std::fs::remove_dir_all(&entry);
    let staged = staging.keep();
    std::fs::rename(&staged, &entry).map_err(|e| {
        let _ = std::fs::remove_dir_all(&staged);
        RegistryError::Io {
            what: format!("cannot keep {}", entry.display()),
            source: e,
        }
    })?;
    if reference.digest.is_none() {
        cache.remember(reference, digest);
    }
    cache.trim(&entry);
    Ok(Pulled {
        archive: entry.join(ARCHIVE),
        pinned: reference.pinned(digest),
        from_cache: false,
        signed: signature.is_some(),
    })
}

/// The newest signature whose subject is `digest`: through the referrers
/// API, else the referrers tag. Signatures of another subject, or that are
/// not toolhost signatures, are passed over.
async fn find_signature(
    registry: &Registry,
    repo: &str,
    digest: &str,
) -> Result<Option<String>, RegistryError> {
    let index = match registry
        .referrers_api(repo, digest, artifact::MAX_MANIFEST)
        .await?
    {
        Some(i) => Some(i),
        None => registry
            .manifest(
                repo,
                &artifact::referrers_tag(digest),
                &[artifact::INDEX],
                artifact::MAX_MANIFEST,
            )
            .await?
            .map(|(b, _, _)| b),
    };
    let Some(index) = index else {
        return Ok(None);
    };
    for candidate in artifact::signatures_in_index(&index).iter().rev().take(8) {
        let Some((bytes, _, _)) = registry
            .manifest(
                repo,
                &candidate.digest,
                &[artifact::MANIFEST],
                artifact::MAX_MANIFEST,
            )
            .await?
        else {
            continue;
        };
        let Ok(sig) = artifact::parse_manifest(
            &bytes,
            artifact::SIGNATURE_ARTIFACT,
            artifact::SIGNATURE_LAYER,
            "a signature",
        ) else {
            continue;
        };
        if sig.subject.as_ref().map(|s| s.digest.as_str()) != Some(digest) {
            tracing::warn!(signature = %candidate.digest, "a signature listed for this package names another subject: passed over");
            continue;
        }
        let text = registry
            .small_blob(
                repo,
                &sig.layer.digest,
                sig.layer.size,
                artifact::MAX_SIGNATURE,
            )
            .await?;
        if let Ok(text) = String::from_utf8(text) {
            return Ok(Some(text));
        }
    }
    Ok(None)
}
