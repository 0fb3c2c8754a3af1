//! `toolhost push ARCHIVE REF`: a package and its signature into a
//! registry.
//!
//! The archive is checked to be a plugin package first (it unpacks within
//! the archive limits and holds a `plugin.toml`), so a registry never
//! holds something `plugins install` would refuse for its shape. The
//! blobs go up before the manifest that names them; the signature (the
//! `.minisig` beside the archive, when there is one) goes up as an
//! artifact whose subject is the package, and is listed in the referrers
//! tag unless the registry keeps referrers itself.

use crate::artifact::{self, Descriptor};
use crate::client::{Registry, RegistryError, Settings, sha256_digest};
use crate::reference::Reference;
use std::path::Path;
use toolhost_package::ArchiveLimits;

/// What a push placed.
#[derive(Debug, Clone)]
pub struct Pushed {
    /// The plugin's id and version.
    pub id: String,
    /// Its version.
    pub version: String,
    /// The package manifest's digest.
    pub digest: String,
    /// Whether a signature went up with it.
    pub signed: bool,
}

fn io(what: String) -> impl FnOnce(std::io::Error) -> RegistryError {
    move |source| RegistryError::Io { what, source }
}

/// The id and version of the package at `archive`, read by unpacking it
/// within `limits` into a scratch folder.
fn identify(archive: &Path, limits: ArchiveLimits) -> Result<(String, String), RegistryError> {
    let not_package = |why: String| RegistryError::Invalid {
        what: archive.display().to_string(),
        why,
    };
    let scratch = tempfile::tempdir().map_err(io("cannot make a scratch folder".into()))?;
    toolhost_package::archive::unpack(archive, scratch.path(), limits)
        .map_err(|e| not_package(format!("it is not a package archive ({e})")))?;
    let root = if scratch.path().join("plugin.toml").is_file() {
        scratch.path().to_path_buf()
    } else {
        let dirs: Vec<_> = std::fs::read_dir(scratch.path())
            .map_err(io("cannot read the unpacked archive".into()))?
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.join("plugin.toml").is_file())
            .collect();
        match dirs.as_slice() {
            [one] => one.clone(),
            _ => return Err(not_package("it holds no plugin.toml".to_owned())),
        }
    };
    let m = toolhost_manifest::Manifest::load(&root).map_err(|problems| {
        not_package(format!(
            "its plugin.toml is not valid ({} problem{}: run `toolhost check` on the plugin)",
            problems.len(),
            if problems.len() == 1 { "" } else { "s" }
        ))
    })?;
    Ok((m.id.clone(), m.version.to_string()))
}

/// Pushes the package at `archive` (and `ARCHIVE.minisig`, if it exists)
/// to `reference`, which names a tag.
///
/// # Errors
/// [`RegistryError`]: the archive is not a package, the registry refused
/// or could not be reached.
pub async fn push(
    archive: &Path,
    reference: &Reference,
    settings: &Settings,
    limits: ArchiveLimits,
) -> Result<Pushed, RegistryError> {
    let Some(tag) = reference.tag.clone().filter(|_| reference.digest.is_none()) else {
        return Err(RegistryError::Invalid {
            what: reference.to_string(),
            why: "a push names a tag (REGISTRY/REPO:TAG), not a digest".to_owned(),
        });
    };
    let (id, version) = {
        let archive = archive.to_path_buf();
        tokio::task::spawn_blocking(move || identify(&archive, limits))
            .await
            .map_err(|e| RegistryError::Io {
                what: "reading the archive".into(),
                source: std::io::Error::other(e.to_string()),
            })??
    };
    let bytes = tokio::fs::read(archive)
        .await
        .map_err(io(format!("cannot read {}", archive.display())))?;
    let signature = toolhost_package::statement::signature_beside(archive).map_err(|e| {
        RegistryError::Invalid {
            what: format!("the signature beside {}", archive.display()),
            why: e.to_string(),
        }
    })?;
    let registry = Registry::connect(reference, settings)?;
    let repo = reference.repository.as_str();
    let config_bytes = serde_json::to_vec(&serde_json::json!({ "id": id, "version": version }))
        .unwrap_or_default();
    let config = Descriptor {
        media_type: artifact::PACKAGE_CONFIG.into(),
        size: config_bytes.len() as u64,
        digest: registry.put_blob(repo, config_bytes).await?,
    };
    let layer = Descriptor {
        media_type: artifact::PACKAGE_LAYER.into(),
        size: bytes.len() as u64,
        digest: registry.put_blob(repo, bytes).await?,
    };
    let manifest = artifact::manifest_bytes(
        artifact::PACKAGE_ARTIFACT,
        &config,
        &layer,
        None,
        &[
            ("org.opencontainers.image.title", &id),
            ("org.opencontainers.image.version", &version),
        ],
    );
    let digest = sha256_digest(&manifest);
    let subject = Descriptor {
        media_type: artifact::MANIFEST.into(),
        size: manifest.len() as u64,
        digest: digest.clone(),
    };
    registry
        .put_manifest(repo, &tag, manifest, artifact::MANIFEST)
        .await?;
    let signed = signature.is_some();
    if let Some(text) = signature {
        push_signature(&registry, repo, &subject, text.into_bytes()).await?;
    }
    Ok(Pushed {
        id,
        version,
        digest,
        signed,
    })
}

/// The signature as an artifact referring to `subject`, and listed in the
/// referrers tag where the registry does not keep referrers itself.
async fn push_signature(
    registry: &Registry,
    repo: &str,
    subject: &Descriptor,
    text: Vec<u8>,
) -> Result<(), RegistryError> {
    let empty = Descriptor {
        media_type: artifact::EMPTY_CONFIG.into(),
        size: 2,
        digest: registry.put_blob(repo, b"{}".to_vec()).await?,
    };
    let layer = Descriptor {
        media_type: artifact::SIGNATURE_LAYER.into(),
        size: text.len() as u64,
        digest: registry.put_blob(repo, text).await?,
    };
    let manifest = artifact::manifest_bytes(
        artifact::SIGNATURE_ARTIFACT,
        &empty,
        &layer,
        Some(subject),
        &[],
    );
    let entry = Descriptor {
        media_type: artifact::MANIFEST.into(),
        size: manifest.len() as u64,
        digest: sha256_digest(&manifest),
    };
    let kept = registry
        .put_manifest(repo, &entry.digest, manifest, artifact::MANIFEST)
        .await?;
    if kept {
        return Ok(());
    }
    let tag = artifact::referrers_tag(&subject.digest);
    let before = registry
        .manifest(repo, &tag, &[artifact::INDEX], artifact::MAX_MANIFEST)
        .await?;
    let index = artifact::index_with(before.as_ref().map(|(b, _, _)| b.as_slice()), &entry);
    registry
        .put_manifest(repo, &tag, index, artifact::INDEX)
        .await?;
    Ok(())
}
