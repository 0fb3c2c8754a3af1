//! The catalog: which tools are on offer, as immutable snapshots replaced
//! atomically (docs/CONTRACT.md §2).
//!
//! A [`Snapshot`] is plain data: a generation, a revision and tool
//! [`Descriptor`]s, built from installed manifests or pushed by a backend.
//! The [`Store`] decides whether an offered snapshot replaces the current one
//! ([`Outcome`]: accepted, unchanged, stale, conflict, invalid), compiles what
//! the calls will need, and publishes the result as a [`Catalog`] behind an
//! `ArcSwap`, so readers (every `tools/list`, every `tools/call`) never lock.
//!
//! Compiled schemas are cached by a digest of the canonical schema and shared
//! across revisions: a revision that changes one tool of ten thousand
//! compiles one schema. A descriptor whose schema does not compile is kept as
//! a [`Defect`]: withheld from listings, failing closed when called, and
//! reported, while the rest of the snapshot is served.
//!
//! Each version that becomes current is logged at debug under the target
//! `toolhost::catalog` with the names it added, removed and changed
//! ([`Catalog::changes_since`]), in the order the versions were applied: the
//! history against which a call's audited version can be checked.
//!
//! What this crate must not do: know about processes, sessions or MCP. It
//! answers "what is declared, and is it sound", never "is it running" or
//! "may this caller use it"; those are asked again at call time.

#![forbid(unsafe_code)]

mod catalog;
mod descriptor;
mod grace;
mod installed;
mod json;
mod schema;
mod store;

pub use catalog::{Catalog, Defect, Entry, NameChanges};
pub use descriptor::{CallPolicy, CallRate, Descriptor, Fingerprint, MAX_RATE_BURST, Snapshot};
pub use grace::{Epoch, Grace, Reading};
pub use installed::{HELD_FOR_THE_OPERATOR, Installed};
pub use schema::{Schema, canonical_digest};
pub use store::{
    Absence, Fence, MAX_LISTED, MAX_TOOLS, OfferResult, Outcome, Store, listed_reasons,
};
pub use toolhost_manifest::TaskSupport;
