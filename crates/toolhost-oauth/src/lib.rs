//! toolhost as an OAuth 2.1 resource server: who an HTTP caller is, from
//! the access token it sends.
//!
//! - [`Verifier`] (`verifier.rs`) takes a bearer token and answers with a
//!   [`Caller`] or a [`Rejection`]. A JWT (`jwt.rs`) is checked on its
//!   issuer's keys (`keys.rs`, fetched and refreshed in `issuers.rs`); an
//!   opaque token is asked about at the issuer's introspection endpoint
//!   (`introspect.rs`). Accepted tokens are kept until they expire.
//! - `exchange.rs` asks the caller's issuer for a token for another
//!   audience (RFC 8693 token exchange), for a plugin that calls another
//!   service on the caller's behalf.
//! - `metadata.rs` writes what clients discover this resource by: the
//!   Protected Resource Metadata (RFC 9728) and the `WWW-Authenticate`
//!   challenges that point to it.
//! - `fetch.rs` is the one HTTP client to the authorization servers.
//!
//! The transport (`toolhost-http`) calls this and turns the caller into a
//! binding; the MCP layer sees only the result.
//!
//! What this crate must not do: accept a token not issued for this
//! resource, pass a caller's token anywhere but its own issuer, or put a
//! token or a claim's value in an error or a log line.

#![forbid(unsafe_code)]

mod caller;
mod exchange;
mod fetch;
mod introspect;
mod issuers;
pub mod jwt;
pub mod keys;
pub mod metadata;
mod rejection;
mod settings;
mod verifier;

pub use caller::Caller;
pub use exchange::{ExchangeError, Exchanged};
pub use fetch::FetchError;
pub use rejection::Rejection;
pub use settings::{BadSettings, ClientCredentials, IssuerSettings, Settings, is_scope_token};
pub use verifier::{MAX_CACHED, SetupError, Verified, Verifier};
