//! `toolhost push ARCHIVE REF` (and `pack --push REF`): a package and its
//! signature into an OCI registry, where `plugins install REF` finds them.
//!
//! Credentials come from where the container tools keep them
//! (`REGISTRY_AUTH_FILE`, `DOCKER_CONFIG`, `~/.docker/config.json`); TLS
//! trusts the system's authorities and those given with `--ca-file`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use toolhost_base::outln;

pub use toolhost_registry::use_ring_for_tls;

/// How the CLI reaches a registry.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct RegistryArgs {
    /// A PEM file of a certificate authority to trust besides the
    /// system's (repeatable).
    #[arg(long = "ca-file", value_name = "PEM")]
    pub ca_files: Vec<PathBuf>,
    /// A registry (host:port) that may be reached over plain HTTP when it
    /// does not answer HTTPS (repeatable; loopback always may be).
    #[arg(long = "plain-http", value_name = "HOST:PORT")]
    pub plain_http: Vec<String>,
}

/// `toolhost push`.
#[derive(Debug, Clone, clap::Args)]
pub struct PushArgs {
    /// The package archive (`toolhost pack` writes one); its signature,
    /// ARCHIVE.minisig, goes with it when it is there.
    pub archive: PathBuf,
    /// Where to push it: REGISTRY/REPO:TAG.
    pub reference: String,
    /// How to reach the registry.
    #[command(flatten)]
    pub registry: RegistryArgs,
}

/// Pushes `archive` to `reference`; prints the digest to install it by.
///
/// # Errors
/// A reference that is not one, or a registry that refused.
pub async fn push(
    archive: &Path,
    reference: &str,
    registry: &RegistryArgs,
) -> anyhow::Result<ExitCode> {
    let parsed = toolhost_registry::Reference::parse(reference)?;
    let settings = toolhost_registry::Settings {
        ca_files: registry.ca_files.clone(),
        plain_http: registry.plain_http.clone(),
    };
    let pushed = toolhost_registry::push(
        archive,
        &parsed,
        &settings,
        toolhost_package::ArchiveLimits::default(),
    )
    .await?;
    let pinned = parsed.pinned(&pushed.digest);
    outln!(
        "pushed {} {} to {parsed} ({})",
        pushed.id,
        pushed.version,
        if pushed.signed {
            "with its signature"
        } else {
            "unsigned: sign it with `toolhost pack --sign KEY` to install where keys are trusted"
        }
    );
    outln!("digest: {}", pushed.digest);
    outln!("install it: toolhost plugins install {pinned}");
    Ok(ExitCode::SUCCESS)
}

/// What `plugins install|upgrade` names: a path that exists, or else a
/// registry reference when it reads as one.
pub(crate) enum Source {
    Path(PathBuf),
    Reference(String),
}

impl Source {
    pub(crate) fn of(given: &Path) -> Self {
        let text = given.to_string_lossy();
        if !given.exists() && toolhost_registry::Reference::looks_like(&text) {
            return Self::Reference(text.into_owned());
        }
        Self::Path(std::path::absolute(given).unwrap_or_else(|_| given.to_path_buf()))
    }
}
