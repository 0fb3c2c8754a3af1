//! A secret the operator keeps in a file: read once, its first line, never
//! printed.

use anyhow::{Context as _, Result, bail};
use std::path::Path;

/// The first line of a secret file.
pub fn read_secret(path: &Path) -> Result<String> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read secret file {}", path.display()))?;
    let t = text.lines().next().unwrap_or_default().trim().to_owned();
    if t.is_empty() {
        bail!("secret file {} is empty", path.display());
    }
    Ok(t)
}
