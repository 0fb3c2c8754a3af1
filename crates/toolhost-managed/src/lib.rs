//! The managed catalog: what a backend pushes and how it is kept, below
//! the transports that bring it (the admin API's `PushCatalog`, a fleet's
//! key-value bucket). [`Managed::offer`] is the one door: a pushed
//! snapshot is converted from the wire ([`convert`]), offered to the store
//! under its rules (epoch fencing, a tool that loosens its installed
//! declaration withheld), and, once taken, kept on disk: the fence, so a
//! dead backend's delayed push cannot take over a restarted daemon, and
//! the snapshot itself, served after a restart until the backend pushes
//! again ([`fence`]). Session bindings from the wire are checked here too
//! ([`binding_from_proto`]), and the shape of what a fleet link shows the
//! operator ([`LinkStatus`]).
//!
//! What this crate must not do: serve a transport, or decide what a
//! pushed tool may be (the catalog store decides; this crate keeps what
//! it took).

#![forbid(unsafe_code)]

mod bindings;
pub mod convert;
pub mod fence;
mod link;
mod offer;

pub use bindings::binding_from_proto;
pub use convert::{snapshot_from_proto, snapshot_to_proto};
pub use fence::FenceError;
pub use link::{LinkStatus, LinkView};
pub use offer::Managed;
