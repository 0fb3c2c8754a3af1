//! The plugin package format, one place for everyone who reads or writes
//! it: `toolhost pack` and `pack --sign` (the author's side), the
//! lifecycle's install and upgrade (the operator's), and whatever brings a
//! package from elsewhere.
//!
//! - [`archive`]: the `.tar.gz` reader, every header bounded before it is
//!   read, and the check of what `pack` writes;
//! - [`statement`]: what a package says it is (every file's digest, every
//!   tool's contract, every ask of the sandbox), compared with what was
//!   unpacked, and bounded before it is read;
//! - its minisign signature, and the keys it is checked against, each
//!   known by its whole key (`keys.rs`).
//!
//! What this crate must not do: place anything (it reads, checks and
//! names; the lifecycle moves files into place), or show a byte of a
//! package's contents in an error.

#![forbid(unsafe_code)]

pub mod archive;
mod keys;
pub mod statement;

pub use archive::ArchiveLimits;
