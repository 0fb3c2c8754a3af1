//! The wire contracts of toolhost, generated at build time from `proto/` with
//! protox (no `protoc` needed); the rest of the plugin contract
//! ([`contract`]: environment, handshake, health, the Unix-socket
//! connector); the one conversion both sides of the plugin hop need:
//! `google.protobuf.Struct` to and from JSON; the daemon's request to a
//! plugin ([`request`]), encoded from that JSON without building the
//! message first; and a plugin's answer ([`answer`]), decoded into JSON
//! without building it either.
//!
//! Its one behaviour is the contract both ends of the plugin hop must read
//! alike: [`contract`] parses and writes the handshake line and connects to
//! a Unix socket, so the daemon and the SDK cannot disagree on either; and
//! [`codec`] is the protobuf codec every generated client and server uses.
//!
//! What this crate must not do: grow logic beyond the wire contract and
//! data conversion. The daemon's crates and the plugin SDK both depend on
//! it, and anything here is paid for by every plugin author.

#![allow(missing_docs)] // generated code carries the .proto comments, not rustdoc on every item
#![forbid(unsafe_code)]

#[doc(hidden)]
pub use generated::{kandev, toolhost};

/// `kandev.plugin.v1`: the service every plugin serves (docs/PROTOCOL.md §3 and §4).
pub use generated::kandev::plugin::v1 as plugin;
/// `toolhost.admin.v1`: the backend-facing admin API (docs/CONTRACT.md §6).
pub use generated::toolhost::admin::v1 as admin;
/// `toolhost.plugin.v2`: the streaming call of plugin protocol v2
/// (docs/PROTOCOL.md §7), served by plugins that declare `protocol = 2`.
pub use generated::toolhost::plugin::v2 as plugin_v2;

pub mod answer;
#[cfg(test)]
mod arbitrary;
pub mod codec;
pub mod contract;
pub mod generated;
pub mod json;
pub mod request;
pub mod strict;
