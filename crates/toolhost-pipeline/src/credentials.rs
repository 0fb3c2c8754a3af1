//! The seam through which a call gets tokens for the services its plugin
//! calls on the caller's behalf (`[credentials]` in its manifest, granted
//! by the operator), implemented by the HTTP transport's OAuth side.
//!
//! The pipeline asks only when the plugin has audiences and the caller
//! proved who it is (a [`crate::binding::Principal`]); it asks last, right before
//! dispatch, so a token is as fresh as it can be and nothing is exchanged
//! for a call that is refused. A refusal fails the call before dispatch:
//! the plugin never runs without the tokens it was promised.

use crate::binding::Binding;
use crate::port::BoxFuture;
use toolhost_proto::plugin::Credential;

/// Gets a caller's tokens for a plugin's audiences.
pub trait Credentials: Send + Sync + std::fmt::Debug {
    /// A token for each of `audiences`, for `binding`'s caller; or why
    /// not, in words for the model (no token in them).
    fn tokens<'a>(
        &'a self,
        binding: &'a Binding,
        audiences: &'a [String],
    ) -> BoxFuture<'a, Result<Vec<Credential>, String>>;
}
