//! Connection limits of the admin listeners (Unix socket and TCP).
//!
//! tonic serves any stream of connections; this one admits at most
//! `max_connections` at a time (a connection beyond the cap is closed at
//! once) and wraps each in [`Limited`], which closes it when its peer is
//! silent too long:
//!
//! - until the first [`PREFACE_BYTES`] have arrived (the HTTP/2 preface
//!   and settings), within `header_timeout` of accepting, however slowly
//!   they dribble in;
//! - after that, when nothing at all arrives for `idle_timeout`. The server
//!   pings its peers more often than that, so a live client answers and
//!   stays; a peer that is not speaking HTTP/2 does not.

use futures::Stream;
use futures::StreamExt as _;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};
use tonic::transport::server::Connected;

/// Bytes a connection must send within the header timeout.
pub const PREFACE_BYTES: u64 = 64;

/// Connection-level limits of an admin listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Most connections open at once; more are closed on arrival.
    pub max_connections: usize,
    /// The first [`PREFACE_BYTES`] must arrive within this.
    pub header_timeout: Duration,
    /// A connection on which nothing arrives for this long is closed.
    pub idle_timeout: Duration,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        Self {
            max_connections: 64,
            header_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
        }
    }
}

/// One admitted connection: its slot, and the silence timer.
#[derive(Debug)]
pub struct Limited<T> {
    inner: T,
    _slot: OwnedSemaphorePermit,
    read: u64,
    timer: Pin<Box<Sleep>>,
    idle_timeout: Duration,
}

impl<T: AsyncRead + Unpin> AsyncRead for Limited<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        match Pin::new(&mut self.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                let n = (buf.filled().len() - before) as u64;
                let had_preface = self.read >= PREFACE_BYTES;
                self.read = self.read.saturating_add(n);
                // Until the preface is in, the deadline does not move.
                if n > 0 && (had_preface || self.read >= PREFACE_BYTES) {
                    let next = Instant::now() + self.idle_timeout;
                    self.timer.as_mut().reset(next);
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => match self.timer.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "admin connection silent too long",
                ))),
                Poll::Pending => Poll::Pending,
            },
        }
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Limited<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

impl<T: Connected> Connected for Limited<T> {
    type ConnectInfo = T::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}

/// Admits connections from `incoming` within `limits`.
pub(crate) fn limited<T, E>(
    incoming: impl Stream<Item = Result<T, E>>,
    limits: ConnectionLimits,
) -> impl Stream<Item = Result<Limited<T>, E>> {
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    incoming
        .then(|accepted| async move {
            // tonic retries a failed accept at once; under descriptor
            // pressure (EMFILE) that would spin.
            if accepted.is_err() {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            accepted
        })
        .filter_map(move |accepted| {
            let admitted = match accepted {
                Err(e) => Some(Err(e)),
                Ok(io) => match Arc::clone(&slots).try_acquire_owned() {
                    Ok(slot) => Some(Ok(Limited {
                        inner: io,
                        _slot: slot,
                        read: 0,
                        timer: Box::pin(tokio::time::sleep(limits.header_timeout)),
                        idle_timeout: limits.idle_timeout,
                    })),
                    Err(_) => {
                        tracing::warn!(
                            limit = limits.max_connections,
                            "admin connection limit reached; closing a new connection"
                        );
                        None
                    }
                },
            };
            futures::future::ready(admitted)
        })
}
