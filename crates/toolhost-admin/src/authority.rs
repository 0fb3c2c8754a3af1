//! Standard gRPC clients on the admin Unix socket, as they are.
//!
//! gRPC's C core (grpcio for Python, Ruby, PHP, C++) names a Unix socket
//! in the HTTP/2 `:authority` pseudo-header as its percent-encoded path,
//! `tmp%2Ftoolhost%2Fadmin.sock`. The `http` crate, and so `h2` under
//! tonic, accepts a `%` in an authority only inside userinfo, so every such
//! request is reset (`RST_STREAM`, protocol error) before any code of ours
//! runs: the client would have to know to pass
//! `grpc.default_authority=localhost`.
//!
//! The authority means nothing on a Unix socket. So each admin connection
//! is relayed through [`relay`], which reads the client's HTTP/2 frames,
//! decodes every header block with HPACK (as the server would, keeping the
//! same dynamic table), and when a block's `:authority` is not one `h2`
//! accepts, replaces it with `localhost`. Blocks are passed on byte for
//! byte until one needs that; from then on every block of the connection
//! is re-encoded as literals that touch no dynamic table, so the server's
//! table never disagrees with what it is sent. Every other frame, and the
//! whole server-to-client direction, pass through untouched. A header
//! block this module cannot decode is passed on as it is, and the relay
//! stops looking: `h2` then judges it, as it would have.
//!
//! It must not: change anything but an authority `h2` would refuse,
//! buffer more than one header block (at most [`MAX_HEADER_BLOCK`] bytes),
//! or outlive either side of the connection.

use std::io;
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};

/// The client connection preface (RFC 9113 §3.4).
const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

const HEADERS: u8 = 0x1;
const CONTINUATION: u8 = 0x9;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY: u8 = 0x20;

/// The most a header block may take, across its frames. An admin request's
/// headers are a few hundred bytes.
pub const MAX_HEADER_BLOCK: usize = MAX_HEADER_LIST + 1024;

/// The most a header list may decode to (RFC 9113 §6.5.2's measure), here
/// and in the server behind the relay (`SETTINGS_MAX_HEADER_LIST_SIZE`).
/// A connection that sends more is closed before anything else is read.
pub const MAX_HEADER_LIST: usize = 16 * 1024;

/// The dynamic table a client may ask for: the server's default
/// `SETTINGS_HEADER_TABLE_SIZE`, which the relay never raises.
const MAX_TABLE: usize = 4096;

/// Re-encoded blocks are cut into frames no larger than the smallest
/// maximum frame size a peer may set (RFC 9113 §4.2).
const FRAME_PAYLOAD: usize = 16_384;

/// Relays one admin connection: `client` is the accepted socket, `server`
/// the end tonic serves. Returns when either side closes.
pub async fn relay<C, S>(client: C, server: S) -> io::Result<()>
where
    C: AsyncRead + AsyncWrite + Unpin,
    S: AsyncRead + AsyncWrite + Unpin,
{
    let (mut client_read, mut client_write) = tokio::io::split(client);
    let (mut server_read, mut server_write) = tokio::io::split(server);
    let upstream = async {
        let r = rewrite(&mut client_read, &mut server_write).await;
        let _ = server_write.shutdown().await;
        r
    };
    let downstream = async {
        let r = tokio::io::copy(&mut server_read, &mut client_write).await;
        let _ = client_write.shutdown().await;
        r.map(|_| ())
    };
    // Either side closing ends the connection.
    tokio::select! {
        r = upstream => r,
        r = downstream => r,
    }
}

/// The client-to-server direction, frame by frame.
///
/// Kept whole on purpose: one frame's states (preface, headers, continuation,
/// data) share the buffers and the byte counts, and reading them as one loop is
/// how the relay is audited.
async fn rewrite<R, W>(from: &mut R, to: &mut W) -> io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut preface = [0u8; 24];
    from.read_exact(&mut preface).await?;
    to.write_all(&preface).await?;
    if &preface != PREFACE {
        // Not HTTP/2 with prior knowledge: nothing to look at.
        tokio::io::copy(from, to).await?;
        return Ok(());
    }
    let mut fixer = Fixer::default();
    // The frames of the header block being read: raw, and its fragment.
    let mut raw = Vec::new();
    let mut block = Vec::new();
    let mut first: Option<FirstFrame> = None;
    loop {
        let mut head = [0u8; 9];
        match from.read_exact(&mut head).await {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(e),
        }
        let len = usize::from(head[0]) << 16 | usize::from(head[1]) << 8 | usize::from(head[2]);
        let (kind, flags) = (head[3], head[4]);
        let in_block = first.is_some();
        if kind != HEADERS && kind != CONTINUATION && !in_block {
            to.write_all(&head).await?;
            let copied = tokio::io::copy(&mut (&mut *from).take(len as u64), to).await?;
            if copied != len as u64 {
                return Ok(());
            }
            to.flush().await?;
            continue;
        }
        if raw.len() + 9 + len > MAX_HEADER_BLOCK {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "a header block over 17 KiB on the admin socket",
            ));
        }
        let mut payload = vec![0u8; len];
        from.read_exact(&mut payload).await?;
        raw.extend_from_slice(&head);
        raw.extend_from_slice(&payload);
        match (kind, &first) {
            (HEADERS, None) => {
                let frame = FirstFrame::parse(&head, &payload)?;
                block.extend_from_slice(frame.fragment(&payload));
                first = Some(frame);
            }
            (CONTINUATION, Some(_)) => block.extend_from_slice(&payload),
            // Anything else inside a block is the server's to refuse.
            _ => {
                to.write_all(&raw).await?;
                raw.clear();
                block.clear();
                first = None;
                fixer.give_up();
                continue;
            }
        }
        if flags & END_HEADERS == 0 {
            continue;
        }
        let Some(frame) = first.take() else { continue };
        match fixer.fix(&block) {
            Ok(Some(encoded)) => to.write_all(&frame.reframe(&encoded)).await?,
            Ok(None) => to.write_all(&raw).await?,
            Err(TooLarge) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "a header list over 16 KiB on the admin socket",
                ));
            }
        }
        to.flush().await?;
        raw.clear();
        block.clear();
    }
}

/// What a block's HEADERS frame says besides its fragment.
#[derive(Debug, Clone, Copy)]
struct FirstFrame {
    stream: [u8; 4],
    end_stream: bool,
    /// The priority fields, when the frame has them.
    priority: Option<[u8; 5]>,
    /// Where the fragment is in the payload: after padding length and
    /// priority, before padding.
    start: usize,
    end: usize,
}

impl FirstFrame {
    fn parse(head: &[u8; 9], payload: &[u8]) -> io::Result<Self> {
        let flags = head[4];
        let malformed = || io::Error::new(io::ErrorKind::InvalidData, "a malformed HEADERS frame");
        let (mut start, mut end) = (0, payload.len());
        if flags & PADDED != 0 {
            let pad = usize::from(*payload.first().ok_or_else(malformed)?);
            start = 1;
            end = end.checked_sub(pad).ok_or_else(malformed)?;
        }
        let priority = if flags & PRIORITY != 0 {
            let fields: [u8; 5] = payload
                .get(start..start + 5)
                .and_then(|p| p.try_into().ok())
                .ok_or_else(malformed)?;
            start += 5;
            Some(fields)
        } else {
            None
        };
        if start > end {
            return Err(malformed());
        }
        let mut stream = [0u8; 4];
        stream.copy_from_slice(&head[5..9]);
        Ok(Self {
            stream,
            end_stream: flags & END_STREAM != 0,
            priority,
            start,
            end,
        })
    }

    fn fragment<'a>(&self, payload: &'a [u8]) -> &'a [u8] {
        &payload[self.start..self.end]
    }

    /// `block` as a HEADERS frame and as many CONTINUATION frames as it
    /// needs, on the same stream, with the same end-of-stream and priority.
    fn reframe(&self, block: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(block.len() + 32);
        let mut first = Vec::new();
        if let Some(p) = self.priority {
            first.extend_from_slice(&p);
        }
        let room = FRAME_PAYLOAD - first.len();
        let (head_part, mut rest) = block.split_at(block.len().min(room));
        first.extend_from_slice(head_part);
        let mut flags = 0;
        if self.end_stream {
            flags |= END_STREAM;
        }
        if self.priority.is_some() {
            flags |= PRIORITY;
        }
        if rest.is_empty() {
            flags |= END_HEADERS;
        }
        push_frame(&mut out, HEADERS, flags, self.stream, &first);
        while !rest.is_empty() {
            let (part, after) = rest.split_at(rest.len().min(FRAME_PAYLOAD));
            rest = after;
            let flags = if rest.is_empty() { END_HEADERS } else { 0 };
            push_frame(&mut out, CONTINUATION, flags, self.stream, part);
        }
        out
    }
}

fn push_frame(out: &mut Vec<u8>, kind: u8, flags: u8, stream: [u8; 4], payload: &[u8]) {
    let len = payload.len();
    out.extend_from_slice(&[(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags]);
    out.extend_from_slice(&stream);
    out.extend_from_slice(payload);
}

/// The decoding side's state for one connection.
struct Fixer {
    decoder: Option<loona_hpack::Decoder<'static>>,
    /// Once a block has been re-encoded, every later one is too.
    reencoding: bool,
}

impl Default for Fixer {
    fn default() -> Self {
        Self {
            decoder: Some({
                let mut decoder = loona_hpack::Decoder::new();
                decoder.set_max_allowed_table_size(MAX_TABLE);
                decoder
            }),
            reencoding: false,
        }
    }
}

impl Fixer {
    /// Stops looking: what follows is passed on as it is.
    fn give_up(&mut self) {
        if !self.reencoding {
            self.decoder = None;
        }
    }

    /// The block to send instead of `block`, or `None` to send it as is.
    fn fix(&mut self, block: &[u8]) -> Result<Option<Vec<u8>>, TooLarge> {
        let Some(decoder) = self.decoder.as_mut() else {
            return Ok(None);
        };
        let Ok(decoded) = decode_bounded(decoder, block) else {
            // Our decoder and the client disagree; the server decides.
            self.decoder = None;
            return Ok(None);
        };
        let mut headers = decoded.ok_or(TooLarge)?;
        let mut changed = false;
        for (name, value) in &mut headers {
            if name.as_slice() == b":authority"
                && http::uri::Authority::try_from(value.as_slice()).is_err()
            {
                *value = b"localhost".to_vec();
                changed = true;
            }
        }
        if !changed && !self.reencoding {
            return Ok(None);
        }
        self.reencoding = true;
        Ok(Some(literal_block(&headers)))
    }
}

/// A header block that decodes to more than [`MAX_HEADER_LIST`].
#[derive(Debug, Clone, Copy)]
struct TooLarge;

/// Decodes `block`, counting each field as RFC 9113 §6.5.2 does (name,
/// value and 32 bytes); `Ok(None)` once the list passes
/// [`MAX_HEADER_LIST`]. Nothing past the limit is kept: a field repeated
/// from the dynamic table costs a byte to send and its whole length to
/// copy, so a 64 KiB block can decode to hundreds of megabytes.
#[allow(clippy::type_complexity)]
fn decode_bounded(
    decoder: &mut loona_hpack::Decoder<'static>,
    block: &[u8],
) -> Result<Option<Vec<(Vec<u8>, Vec<u8>)>>, loona_hpack::decoder::DecoderError> {
    let mut headers = Some(Vec::new());
    let mut size = 0usize;
    decoder.decode_with_cb(block, |name, value| {
        size = size.saturating_add(name.len() + value.len() + 32);
        if size > MAX_HEADER_LIST {
            headers = None;
        } else if let Some(list) = headers.as_mut() {
            list.push((name.into_owned(), value.into_owned()));
        }
    })?;
    Ok(headers)
}

/// A header block of literals without indexing and without Huffman
/// coding: it changes no dynamic table.
fn literal_block(headers: &[(Vec<u8>, Vec<u8>)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, value) in headers {
        out.push(0x00);
        for text in [name, value] {
            // Writing into a Vec cannot fail.
            let _ = loona_hpack::encoder::encode_integer_into(text.len(), 7, 0, &mut out);
            out.extend_from_slice(text);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers_frame(stream: u8, flags: u8, block: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        push_frame(&mut out, HEADERS, flags, [0, 0, 0, stream], block);
        out
    }

    /// Runs `input` (after the preface) through the rewrite; returns what
    /// the server would read, after the preface.
    async fn through(input: &[u8]) -> Vec<u8> {
        let mut from = PREFACE.to_vec();
        from.extend_from_slice(input);
        let mut to = Vec::new();
        rewrite(&mut from.as_slice(), &mut to).await.unwrap();
        to.split_off(24)
    }

    fn decoded(frames: &[u8]) -> Vec<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut decoder = loona_hpack::Decoder::new();
        let mut out = Vec::new();
        let mut rest = frames;
        let mut block = Vec::new();
        while rest.len() >= 9 {
            let len = usize::from(rest[0]) << 16 | usize::from(rest[1]) << 8 | usize::from(rest[2]);
            let (kind, flags) = (rest[3], rest[4]);
            let payload = &rest[9..9 + len];
            if kind == HEADERS || kind == CONTINUATION {
                let head: [u8; 9] = rest[..9].try_into().unwrap();
                let frag = if kind == HEADERS {
                    let f = FirstFrame::parse(&head, payload).unwrap();
                    f.fragment(payload).to_vec()
                } else {
                    payload.to_vec()
                };
                block.extend_from_slice(&frag);
                if flags & END_HEADERS != 0 {
                    out.push(decoder.decode(&block).unwrap());
                    block.clear();
                }
            }
            rest = &rest[9 + len..];
        }
        out
    }

    fn request(authority: &str) -> Vec<(Vec<u8>, Vec<u8>)> {
        [
            (":method", "POST"),
            (":scheme", "http"),
            (":path", "/toolhost.admin.v1.Admin/GetStatus"),
            (":authority", authority),
            ("te", "trailers"),
        ]
        .iter()
        .map(|(n, v)| (n.as_bytes().to_vec(), v.as_bytes().to_vec()))
        .collect()
    }

    #[tokio::test]
    async fn a_percent_encoded_authority_becomes_localhost_and_nothing_else_changes() {
        // As grpc's C core sends it, indexed into its dynamic table.
        let mut encoder = loona_hpack::Encoder::new();
        let pairs = request("tmp%2Ftoolhost%2Fadmin.sock");
        let block = encoder.encode(pairs.iter().map(|(n, v)| (n.as_slice(), v.as_slice())));
        let mut input = headers_frame(1, END_HEADERS, &block);
        // A DATA frame passes untouched.
        push_frame(&mut input, 0x0, END_STREAM, [0, 0, 0, 1], b"\0\0\0\0\0");
        // A second request on the same connection uses the dynamic table.
        let again = encoder.encode(pairs.iter().map(|(n, v)| (n.as_slice(), v.as_slice())));
        input.extend(headers_frame(3, END_HEADERS | END_STREAM, &again));
        let out = through(&input).await;
        let blocks = decoded(&out);
        assert_eq!(blocks.len(), 2);
        for b in &blocks {
            assert_eq!(*b, request("localhost"));
        }
        assert!(
            out.windows(14)
                .any(|w| w == [0, 0, 5, 0, END_STREAM, 0, 0, 0, 1, 0, 0, 0, 0, 0]),
            "the DATA frame is passed on as it was"
        );
    }

    #[tokio::test]
    async fn a_valid_authority_is_passed_on_byte_for_byte() {
        let mut encoder = loona_hpack::Encoder::new();
        let pairs = request("localhost");
        let block = encoder.encode(pairs.iter().map(|(n, v)| (n.as_slice(), v.as_slice())));
        let input = headers_frame(
            1,
            END_HEADERS | PRIORITY,
            &[[0, 0, 0, 0, 15].as_slice(), &block].concat(),
        );
        assert_eq!(through(&input).await, input);
    }

    #[tokio::test]
    async fn a_long_block_is_cut_into_continuations_and_an_undecodable_one_passes_as_is() {
        let long = literal_block(&[(b"x-long".to_vec(), vec![b'v'; 40_000])]);
        let frame = FirstFrame::parse(&[0, 0, 0, HEADERS, END_HEADERS, 0, 0, 0, 1], &[]).unwrap();
        let out = frame.reframe(&long);
        assert_eq!(out[3], HEADERS);
        assert_eq!(decoded(&out)[0][0].1.len(), 40_000);

        let garbage = headers_frame(1, END_HEADERS, &[0xff, 0xff, 0xff, 0xff]);
        assert_eq!(through(&garbage).await, garbage);
    }

    /// Sends `input` after the preface; the rewrite's error, if any.
    async fn refused(input: &[u8]) -> Option<io::Error> {
        let mut from = PREFACE.to_vec();
        from.extend_from_slice(input);
        let mut to = Vec::new();
        rewrite(&mut from.as_slice(), &mut to).await.err()
    }

    #[tokio::test]
    async fn a_header_list_that_decodes_past_16_kib_closes_the_connection() {
        // The bomb: one 4 KiB field in the dynamic table, then a block of
        // one-byte references to it.
        let mut encoder = loona_hpack::Encoder::new();
        let mut pairs = request("localhost");
        pairs.push((b"x-big".to_vec(), vec![b'v'; 4000]));
        let block = encoder.encode(pairs.iter().map(|(n, v)| (n.as_slice(), v.as_slice())));
        let mut input = headers_frame(1, END_HEADERS | END_STREAM, &block);
        let again = encoder.encode(
            std::iter::repeat_n((b"x-big".as_slice(), [b'v'; 4000].as_slice()), 10_000)
                .chain(pairs.iter().map(|(n, v)| (n.as_slice(), v.as_slice()))),
        );
        assert!(again.len() < MAX_HEADER_BLOCK, "{}", again.len());
        input.extend(headers_frame(3, END_HEADERS | END_STREAM, &again));
        let err = refused(&input).await.expect("refused");
        assert!(err.to_string().contains("over 16 KiB"), "{err}");

        // And a block over the encoded cap, before it is decoded at all.
        let literal = literal_block(&[(b"x-long".to_vec(), vec![b'v'; 40_000])]);
        let err = refused(&headers_frame(1, END_HEADERS, &literal))
            .await
            .expect("refused");
        assert!(err.to_string().contains("header block over"), "{err}");
    }

    #[tokio::test]
    async fn a_client_may_not_grow_the_dynamic_table_past_the_servers_default() {
        // A size update to 1 MiB: our decoder refuses it and stops looking,
        // and the block is passed on for the server to refuse as well.
        let mut block = Vec::new();
        loona_hpack::encoder::encode_integer_into(1 << 20, 5, 0x20, &mut block).unwrap();
        block.push(0x82); // :method GET, indexed
        let input = headers_frame(1, END_HEADERS, &block);
        assert_eq!(through(&input).await, input);
    }
}
