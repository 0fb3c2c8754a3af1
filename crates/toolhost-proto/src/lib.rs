//! The wire contracts of toolhost, generated at build time from `proto/` with
//! protox (no `protoc` needed); the rest of the plugin contract
//! ([`contract`]: environment, handshake, health, the Unix-socket
//! connector); and the one conversion both sides of the plugin hop need:
//! `google.protobuf.Struct` to and from JSON.
//!
//! This crate owns no behaviour. It must not grow logic beyond data
//! conversion: the daemon's crates and the plugin SDK both depend on it, and
//! anything here is paid for by every plugin author.

#![allow(missing_docs)] // generated code carries the .proto comments, not rustdoc on every item

/// `kandev.plugin.v1`: the service every plugin serves (docs/PROTOCOL.md §3 and §4).
pub mod plugin {
    tonic::include_proto!("kandev.plugin.v1");
}

/// `toolhost.admin.v1`: the backend-facing admin API (docs/CONTRACT.md §6).
pub mod admin {
    tonic::include_proto!("toolhost.admin.v1");
}

pub mod contract;
pub mod json;
