//! The wire contracts of toolhost, generated at build time from `proto/` with
//! protox (no `protoc` needed); the rest of the plugin contract
//! ([`contract`]: environment, handshake, health, the Unix-socket
//! connector); and the one conversion both sides of the plugin hop need:
//! `google.protobuf.Struct` to and from JSON.
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

// Generated code names other packages by relative paths
// (`super::super::super::kandev::plugin::v1`), so each package lives at its
// own path; the short names below are what the rest of toolhost uses.
#[doc(hidden)]
pub mod kandev {
    pub mod plugin {
        pub mod v1 {
            tonic::include_proto!("kandev.plugin.v1");
        }
    }
}
#[doc(hidden)]
pub mod toolhost {
    pub mod plugin {
        pub mod v2 {
            tonic::include_proto!("toolhost.plugin.v2");
        }
    }
    pub mod admin {
        // An event carries a whole plugin status; boxing it would change
        // the generated API for no gain on a rare, small stream.
        #[allow(clippy::large_enum_variant)]
        pub mod v1 {
            tonic::include_proto!("toolhost.admin.v1");
        }
    }
}

/// `kandev.plugin.v1`: the service every plugin serves (docs/PROTOCOL.md §3 and §4).
pub use kandev::plugin::v1 as plugin;
/// `toolhost.admin.v1`: the backend-facing admin API (docs/CONTRACT.md §6).
pub use toolhost::admin::v1 as admin;
/// `toolhost.plugin.v2`: the streaming call of plugin protocol v2
/// (docs/PROTOCOL.md §7), served by plugins that declare `protocol = 2`.
pub use toolhost::plugin::v2 as plugin_v2;

pub mod codec;
pub mod contract;
pub mod json;
pub mod strict;
