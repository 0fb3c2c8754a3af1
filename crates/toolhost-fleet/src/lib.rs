//! A fleet of toolhost daemons fed through NATS JetStream key-value.
//!
//! One backend (or `toolhost catalog push --nats`) writes the catalog to a
//! KV bucket; every daemon of a group watches it and offers each revision
//! to its store under exactly the rules of an admin push
//! ([`toolhost_managed::Managed::offer`]: epoch fencing, no loosening,
//! idempotent retries, withheld tools, the fence and last-good snapshot
//! kept), and writes what it applied to its own status entry, the way an
//! xDS proxy ACKs or NACKs, so a backend sees the fleet converge.
//!
//! Each group of daemons has a bucket, `toolhost_<group>` (the prefix is
//! configurable), holding:
//!
//! - `catalog`: a `toolhost.admin.v1.Snapshot`, protobuf bytes: the whole
//!   catalog, or a header naming each plugin's shard (`shards.rs`);
//! - `tools.<plugin>.<hex digest>`: one plugin's tools, a
//!   `toolhost.admin.v1.ToolShard`, read only by daemons that run it;
//! - `bind.<sha256 of a token, hex>`: a `toolhost.admin.v1.SessionBinding`;
//!   deleting the key revokes the token;
//! - `placement`: a `toolhost.admin.v1.Placement`, protobuf: the plugins
//!   every daemon of the group runs, pulled from a registry by digest;
//! - `status.<daemon>`: JSON written by that daemon alone.
//!
//! A bucket per group because NATS grants permissions per subject, and a
//! key-value watch is created on a subject that names the stream but not
//! the key: confining a daemon to its group's keys takes a stream of the
//! group's own.
//!
//! Everything read from the bucket is hostile: a value is size-capped and
//! decoded before anything trusts it, and a bad one is refused with its
//! reason in the daemon's status entry; it never replaces the catalog.
//!
//! It must not: write any key but its own status entry, read any group but
//! its own, or block a call on the engine (the catalog is served from the
//! store whatever NATS does).
//!
//! The link's state (connected, the last error, the last value's outcome)
//! is the fleet's own ([`FleetLink`]); `toolhost status` and `/metrics`
//! read it through `toolhost_managed::LinkStatus`; a permission the daemon's NATS user lacks is
//! named there, from the server's own error, because a refused request is
//! otherwise only a timeout.

#![forbid(unsafe_code)]

mod keys;
mod link;
mod parts;
mod placement;
mod shards;
mod source;
mod status;
mod values;

pub use keys::{FleetKeys, KeyError};
pub use link::FleetLink;
pub use placement::{MAX_PLACEMENT_BYTES, PlacedEntry, PlacedRow, Placer, entry_of};
pub use shards::{MAX_SHARDS, shard_digest, shard_key, shard_snapshot};
pub use source::{FleetConfig, FleetError, FleetParts, NatsAuth, NatsTls, connect, run};
pub use status::{Applied, MAX_WITHHELD_LISTED, StatusEntry};
