//! What a lifecycle request carries, bounded and checked before the
//! lifecycle sees it: the configuration values given with it, and what it
//! names (a path or a registry reference, exactly one).

use tonic::Status;

/// Values given with an install or upgrade, bounded before anything names
/// them: at most 128 items, names of at most 64 bytes.
pub(crate) fn bounded_values(
    values: std::collections::HashMap<String, String>,
) -> Result<std::collections::BTreeMap<String, String>, Status> {
    if values.len() > 128 || values.keys().any(|n| n.len() > 64) {
        return Err(Status::invalid_argument(
            "item names are at most 64 bytes, and at most 128 items per call",
        ));
    }
    Ok(values.into_iter().collect())
}

/// What a lifecycle request names: a path on the daemon's file system, or
/// a registry reference.
pub(crate) enum Source {
    Path(std::path::PathBuf),
    Reference(String),
}

/// Exactly one of `path` and `reference`.
pub(crate) fn source_of(path: &str, reference: &str) -> Result<Source, Status> {
    match (path.is_empty(), reference.is_empty()) {
        (false, true) => Ok(Source::Path(std::path::PathBuf::from(path))),
        (true, false) if reference.len() <= 512 => Ok(Source::Reference(reference.to_owned())),
        (true, false) => Err(Status::invalid_argument(
            "the reference is longer than 512 characters",
        )),
        _ => Err(Status::invalid_argument(
            "name exactly one of path (a plugin directory or archive) and reference (REGISTRY/REPO:TAG or REGISTRY/REPO@sha256:DIGEST)",
        )),
    }
}
