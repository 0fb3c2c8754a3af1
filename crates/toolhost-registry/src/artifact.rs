//! How a package and its signature look in a registry: OCI 1.1 artifacts
//! with toolhost's own media types.
//!
//! A **package** is an image manifest whose `artifactType` is
//! [`PACKAGE_ARTIFACT`], with a small JSON config ([`PACKAGE_CONFIG`]: the
//! plugin's id and version) and exactly one layer, the package archive as
//! `toolhost pack` wrote it ([`PACKAGE_LAYER`]). A **signature** is an
//! artifact of type [`SIGNATURE_ARTIFACT`] whose `subject` is the
//! package's manifest and whose one layer is the `.minisig` text
//! ([`SIGNATURE_LAYER`]). It is found through the referrers API where the
//! registry has it, else through the referrers tag (`sha256-<hex>` of the
//! package's digest, an index listing the signatures), as cosign does.
//!
//! The minisign signature covers the package's statement, not the
//! manifest: what the registry says never decides trust. A signature's
//! subject must still be the very manifest being installed, or it is
//! not considered at all.
//!
//! What this module must not do: accept a manifest with more layers, or
//! other media types, than these.

use crate::client::RegistryError;
use serde_json::{Value, json};

/// An OCI image manifest.
pub const MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
/// An OCI image index (the referrers list).
pub const INDEX: &str = "application/vnd.oci.image.index.v1+json";
/// A plugin package.
pub const PACKAGE_ARTIFACT: &str = "application/vnd.toolhost.plugin.v1";
/// The package's config: `{"id": …, "version": …}`.
pub const PACKAGE_CONFIG: &str = "application/vnd.toolhost.plugin.config.v1+json";
/// The package archive.
pub const PACKAGE_LAYER: &str = "application/vnd.toolhost.plugin.package.v1.tar+gzip";
/// A signature of a package.
pub const SIGNATURE_ARTIFACT: &str = "application/vnd.toolhost.signature.v1";
/// The signature's text.
pub const SIGNATURE_LAYER: &str = "application/vnd.toolhost.signature.v1.minisig";
/// OCI's empty config, `{}`.
pub const EMPTY_CONFIG: &str = "application/vnd.oci.empty.v1+json";

/// The most a manifest or index may weigh (the distribution
/// specification's recommended minimum a registry must take).
pub const MAX_MANIFEST: u64 = 4 << 20;
/// The most a package's config may weigh.
pub const MAX_CONFIG: u64 = 64 << 10;
/// The most a signature may weigh.
pub const MAX_SIGNATURE: u64 = 4 << 10;
/// The most referrers considered for one package.
pub const MAX_REFERRERS: usize = 64;

/// A descriptor: what a manifest says of one blob.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Descriptor {
    /// Its media type.
    pub media_type: String,
    /// `sha256:HEX`.
    pub digest: String,
    /// Its size in bytes.
    pub size: u64,
}

impl Descriptor {
    pub(crate) fn json(&self) -> Value {
        json!({ "mediaType": self.media_type, "digest": self.digest, "size": self.size })
    }

    fn read(v: &Value, what: &str) -> Result<Self, RegistryError> {
        let bad = |why: &str| RegistryError::Invalid {
            what: what.to_owned(),
            why: why.to_owned(),
        };
        let digest = v
            .get("digest")
            .and_then(Value::as_str)
            .filter(|d| crate::reference::is_digest(d))
            .ok_or_else(|| bad("a descriptor's digest is not sha256 and 64 hex digits"))?;
        Ok(Self {
            media_type: v
                .get("mediaType")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned(),
            digest: digest.to_owned(),
            size: v
                .get("size")
                .and_then(Value::as_u64)
                .ok_or_else(|| bad("a descriptor has no size"))?,
        })
    }
}

/// A manifest's bytes: `serde_json` with a fixed key order, so the same
/// package pushed twice has the same digest.
pub(crate) fn manifest_bytes(
    artifact_type: &str,
    config: &Descriptor,
    layer: &Descriptor,
    subject: Option<&Descriptor>,
    annotations: &[(&str, &str)],
) -> Vec<u8> {
    let mut m = serde_json::Map::new();
    m.insert("schemaVersion".into(), json!(2));
    m.insert("mediaType".into(), json!(MANIFEST));
    m.insert("artifactType".into(), json!(artifact_type));
    m.insert("config".into(), config.json());
    m.insert("layers".into(), json!([layer.json()]));
    if let Some(s) = subject {
        m.insert("subject".into(), s.json());
    }
    if !annotations.is_empty() {
        let a: serde_json::Map<String, Value> = annotations
            .iter()
            .map(|(k, v)| ((*k).to_owned(), json!(v)))
            .collect();
        m.insert("annotations".into(), Value::Object(a));
    }
    serde_json::to_vec(&Value::Object(m)).unwrap_or_default()
}

/// What a pulled manifest says, checked to be a toolhost artifact of
/// `artifact_type` with exactly one layer of `layer_type`.
#[derive(Debug, Clone)]
pub(crate) struct Parsed {
    pub layer: Descriptor,
    pub subject: Option<Descriptor>,
}

pub(crate) fn parse_manifest(
    bytes: &[u8],
    artifact_type: &str,
    layer_type: &str,
    what: &str,
) -> Result<Parsed, RegistryError> {
    let bad = |why: String| RegistryError::Invalid {
        what: what.to_owned(),
        why,
    };
    let v: Value =
        serde_json::from_slice(bytes).map_err(|_| bad("it is not a JSON manifest".to_owned()))?;
    if v.get("schemaVersion").and_then(Value::as_u64) != Some(2)
        || v.get("mediaType")
            .and_then(Value::as_str)
            .is_some_and(|t| t != MANIFEST)
    {
        return Err(bad("it is not an OCI image manifest".to_owned()));
    }
    let config = Descriptor::read(
        v.get("config")
            .ok_or_else(|| bad("it has no config".to_owned()))?,
        what,
    )?;
    let kind = v
        .get("artifactType")
        .and_then(Value::as_str)
        .unwrap_or(config.media_type.as_str());
    if kind != artifact_type {
        return Err(bad(format!(
            "it is not a {} (its type is {})",
            if artifact_type == PACKAGE_ARTIFACT {
                "toolhost package"
            } else {
                "toolhost signature"
            },
            toolhost_base::term::one_line(&kind.chars().take(80).collect::<String>())
        )));
    }
    let layers = v
        .get("layers")
        .and_then(Value::as_array)
        .ok_or_else(|| bad("it has no layers".to_owned()))?;
    let [layer] = layers.as_slice() else {
        return Err(bad(format!(
            "it has {} layers; a toolhost artifact has exactly one",
            layers.len()
        )));
    };
    let layer = Descriptor::read(layer, what)?;
    if layer.media_type != layer_type {
        return Err(bad("its layer is not of toolhost's media type".to_owned()));
    }
    let subject = v
        .get("subject")
        .map(|s| Descriptor::read(s, what))
        .transpose()?;
    Ok(Parsed { layer, subject })
}

/// The signature manifests an index lists (referrers API or tag),
/// newest last, at most [`MAX_REFERRERS`].
pub(crate) fn signatures_in_index(bytes: &[u8]) -> Vec<Descriptor> {
    let Ok(v) = serde_json::from_slice::<Value>(bytes) else {
        return Vec::new();
    };
    v.get("manifests")
        .and_then(Value::as_array)
        .map(|ms| {
            ms.iter()
                .take(MAX_REFERRERS)
                // A copy by a tool that rewrites the index may drop an
                // entry's artifactType: such an entry is a candidate too,
                // and its own manifest says what it is.
                .filter(|m| {
                    m.get("artifactType")
                        .and_then(Value::as_str)
                        .is_none_or(|t| t == SIGNATURE_ARTIFACT)
                })
                .filter_map(|m| Descriptor::read(m, "the referrers index").ok())
                .collect()
        })
        .unwrap_or_default()
}

/// `index` (or a new one) with `entry` added once: the referrers tag's
/// content after a signature is pushed.
pub(crate) fn index_with(index: Option<&[u8]>, entry: &Descriptor) -> Vec<u8> {
    let mut manifests: Vec<Value> = index
        .and_then(|b| serde_json::from_slice::<Value>(b).ok())
        .and_then(|v| v.get("manifests").and_then(Value::as_array).cloned())
        .unwrap_or_default();
    manifests.retain(|m| m.get("digest").and_then(Value::as_str) != Some(entry.digest.as_str()));
    let mut e = entry.json();
    e["artifactType"] = json!(SIGNATURE_ARTIFACT);
    manifests.push(e);
    serde_json::to_vec(&json!({ "schemaVersion": 2, "mediaType": INDEX, "manifests": manifests }))
        .unwrap_or_default()
}

/// The referrers tag of `digest`: `sha256-HEX`.
pub(crate) fn referrers_tag(digest: &str) -> String {
    digest.replacen(':', "-", 1)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn d(n: u8) -> Descriptor {
        Descriptor {
            media_type: PACKAGE_LAYER.into(),
            digest: format!("sha256:{}", format!("{n:02x}").repeat(32)),
            size: 10,
        }
    }

    #[test]
    fn a_package_manifest_reads_back_and_is_stable() {
        let cfg = Descriptor {
            media_type: PACKAGE_CONFIG.into(),
            ..d(1)
        };
        let a = manifest_bytes(PACKAGE_ARTIFACT, &cfg, &d(2), None, &[("k", "v")]);
        assert_eq!(
            a,
            manifest_bytes(PACKAGE_ARTIFACT, &cfg, &d(2), None, &[("k", "v")])
        );
        let p = parse_manifest(&a, PACKAGE_ARTIFACT, PACKAGE_LAYER, "m").unwrap();
        assert_eq!(p.layer, d(2));
        assert!(p.subject.is_none());
        let e = parse_manifest(&a, SIGNATURE_ARTIFACT, SIGNATURE_LAYER, "m").unwrap_err();
        assert!(e.to_string().contains("not a toolhost signature"), "{e}");
    }

    #[test]
    fn manifests_that_are_not_packages_are_named() {
        let two = json!({"schemaVersion": 2, "mediaType": MANIFEST, "artifactType": PACKAGE_ARTIFACT,
            "config": d(1).json(), "layers": [d(2).json(), d(3).json()]});
        let e = parse_manifest(
            &serde_json::to_vec(&two).unwrap(),
            PACKAGE_ARTIFACT,
            PACKAGE_LAYER,
            "m",
        );
        assert!(e.unwrap_err().to_string().contains("2 layers"));
        let bad_digest = json!({"schemaVersion": 2, "artifactType": PACKAGE_ARTIFACT,
            "config": d(1).json(), "layers": [{"mediaType": PACKAGE_LAYER, "digest": "sha256:../../x", "size": 1}]});
        let e = parse_manifest(
            &serde_json::to_vec(&bad_digest).unwrap(),
            PACKAGE_ARTIFACT,
            PACKAGE_LAYER,
            "m",
        );
        assert!(e.unwrap_err().to_string().contains("64 hex"));
        assert!(parse_manifest(b"[]", PACKAGE_ARTIFACT, PACKAGE_LAYER, "m").is_err());
    }

    #[test]
    fn the_referrers_tag_index_gains_each_signature_once() {
        let s = Descriptor {
            media_type: MANIFEST.into(),
            ..d(4)
        };
        let one = index_with(None, &s);
        let again = index_with(Some(&one), &s);
        assert_eq!(signatures_in_index(&again), vec![s.clone()]);
        let t = Descriptor {
            media_type: MANIFEST.into(),
            ..d(5)
        };
        assert_eq!(
            signatures_in_index(&index_with(Some(&again), &t)),
            vec![s, t]
        );
        assert_eq!(
            referrers_tag(&d(1).digest),
            format!("sha256-{}", "01".repeat(32))
        );
    }
}
