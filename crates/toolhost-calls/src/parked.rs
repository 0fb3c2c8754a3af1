//! Calls waiting for a 2026-07-28 client to answer their question.
//!
//! Such a client gets the question as an input-required result and
//! answers it by calling the tool again with the answer and the
//! `requestState` it was given. Until then the call waits here, still one
//! attempt, bounded by its own deadline, under a handle of 128 random
//! bits that names state kept here and nothing else.

use crate::callers::Owner;
use crate::relay::Running;
use crate::reply::Reply;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

/// Calls waiting for an answer, per owner and in all.
const MAX_PARKED_PER_OWNER: usize = 64;
const MAX_PARKED: usize = 4096;

/// A call waiting for a 2026-07-28 client to answer its question.
pub struct Waiting {
    pub(crate) owner: Owner,
    pub(crate) tool: String,
    /// The digest of the arguments the call was made with: an answer
    /// belongs to that call, and a retry with other arguments is another
    /// call.
    pub(crate) arguments: String,
    pub(crate) running: Running,
    pub(crate) reply: Reply,
}

/// Calls waiting for an answer, by the opaque `requestState` handed to
/// the client. The handle is 128 random bits and names state kept here;
/// the client's copy carries nothing else, so it cannot be forged into
/// anything but an unknown handle.
#[derive(Default)]
pub struct Parked {
    calls: Mutex<HashMap<String, Waiting>>,
}

/// Why a call could not be parked.
#[derive(Debug, thiserror::Error)]
pub enum NotParked {
    /// The caps on parked calls, in all and per owner.
    #[error("too many calls are waiting for answers to questions; answer those first")]
    TooMany,
    /// No handle could be made that nobody could guess.
    #[error(
        "the question cannot be delivered: toolhost could not make a handle for it (the system's random number generator failed)"
    )]
    NoRandomness,
}

/// Why no parked call was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotTaken {
    /// No call of this owner's waits under the handle for this tool.
    Unknown,
    /// The call waiting there was made with other arguments: the request
    /// is a new call, and answers nothing.
    OtherArguments,
}

impl Parked {
    /// Parks a call; returns its handle.
    pub(crate) fn park(&self, w: Waiting) -> Result<String, Box<(NotParked, Waiting)>> {
        let mut calls = self
            .calls
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let now = Instant::now();
        // Calls past their deadline have ended by themselves; forget them.
        calls.retain(|_, c| c.running.expires > now);
        let mine = calls.values().filter(|c| c.owner == w.owner).count();
        if calls.len() >= MAX_PARKED || mine >= MAX_PARKED_PER_OWNER {
            return Err(Box::new((NotParked::TooMany, w)));
        }
        let Ok(handle) = toolhost_base::ids::unguessable_id() else {
            return Err(Box::new((NotParked::NoRandomness, w)));
        };
        calls.insert(handle.clone(), w);
        Ok(handle)
    }

    /// Takes the call parked under `handle`, if `owner` parked it for
    /// `tool` with these arguments (their digest). A call of `owner`'s with
    /// other arguments stays parked: the retry is another call. Anything
    /// else looks like an unknown handle.
    pub(crate) fn take(
        &self,
        handle: &str,
        owner: &Owner,
        tool: &str,
        arguments: &str,
    ) -> Result<Waiting, NotTaken> {
        let mut calls = self
            .calls
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match calls.get(handle) {
            Some(w) if w.owner == *owner && w.tool == tool && w.arguments == arguments => {
                calls.remove(handle).ok_or(NotTaken::Unknown)
            }
            Some(w) if w.owner == *owner && w.tool == tool => Err(NotTaken::OtherArguments),
            _ => Err(NotTaken::Unknown),
        }
    }

    /// Puts a taken call back under the same handle (its answer was
    /// malformed, and the client may send it again).
    pub(crate) fn put_back(&self, handle: String, w: Waiting) {
        let mut calls = self
            .calls
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        calls.insert(handle, w);
    }

    /// Calls still waiting for an answer now (for metrics). An entry whose
    /// call has ended by itself is kept until it expires, so a late answer
    /// learns how the call ended, but it waits for nothing.
    pub(crate) fn len(&self) -> usize {
        self.calls.lock().map_or(0, |c| {
            c.values()
                .filter(|w| w.running.task.as_ref().is_none_or(|t| !t.is_finished()))
                .count()
        })
    }
}
