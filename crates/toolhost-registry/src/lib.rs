//! Plugin packages in OCI registries: `toolhost push` places a package
//! and its signature in a registry, and `plugins install REF` pulls one
//! by digest into a bounded cache, where the install of an archive takes
//! over, every check included.
//!
//! This crate owns the registry's side only: references ([`reference`]),
//! credentials ([`credentials`]), the bounded distribution client
//! ([`client`]), the artifacts' shape ([`artifact`]), pushing ([`push`])
//! and pulling ([`pull`]). It must not decide trust: a signature is
//! carried to the lifecycle beside the archive, and checked there against
//! the operator's keys and the statement of what was unpacked, exactly
//! as for an archive on disk. Nor may it follow a tag twice, read a body
//! without a bound, or send a credential anywhere but the registry and
//! the token realm it names.

#![forbid(unsafe_code)]

pub mod artifact;
pub mod client;
pub mod credentials;
pub mod pull;
pub mod push;
pub mod reference;
mod requests;

pub use client::{RegistryError, Settings, use_ring_for_tls};
pub use pull::{Cache, Pulled, pull};
pub use push::{Pushed, push};
pub use reference::Reference;
