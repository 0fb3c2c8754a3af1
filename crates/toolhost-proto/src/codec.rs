//! The gRPC codec of every toolhost service: prost's, with small first
//! buffers.
//!
//! tonic starts each call's encoder and decoder with an 8 KiB buffer. glibc
//! serves requests of up to about 1 KiB from a per-thread cache, and larger
//! ones through its slow path, which on a busy daemon first merges the free
//! chunks (`malloc_consolidate`): profiled at about 3% of toolhost's CPU on
//! the call path, for buffers that hold a few hundred bytes. A buffer grows
//! to fit what it holds (the decoder reserves each message's announced
//! length; the encoder grows as prost writes), so starting small costs a
//! large message a few regrowths and nothing else.
//!
//! `build.rs` names [`Codec`] as the codec of the generated clients and
//! servers, so the daemon, the admin API and the Rust SDK all use it.
//!
//! It is also where a pushed catalog (`PushCatalogRequest`) is checked for
//! fields this toolhost does not know before prost decodes it (and would
//! drop them): such a request is refused `INVALID_ARGUMENT`, naming them
//! (`strict.rs`).

use std::marker::PhantomData;
use tonic::codec::BufferSettings;
use tonic_prost::{ProstDecoder, ProstEncoder};

/// The first size of a call's encode and decode buffers: within glibc's
/// per-thread cache (requests up to 1,032 bytes).
pub const FIRST_BUFFER_BYTES: usize = 1024;

/// How much an encoder buffers before it hands bytes on: tonic's default.
const YIELD_THRESHOLD: usize = 32 * 1024;

fn settings() -> BufferSettings {
    BufferSettings::new(FIRST_BUFFER_BYTES, YIELD_THRESHOLD)
}

/// prost encoding with [`FIRST_BUFFER_BYTES`] buffers.
#[derive(Debug, Clone)]
pub struct Codec<T, U>(PhantomData<(T, U)>);

impl<T, U> Default for Codec<T, U> {
    fn default() -> Self {
        Self(PhantomData)
    }
}

impl<T, U> tonic::codec::Codec for Codec<T, U>
where
    T: prost::Message + Send + 'static,
    U: prost::Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ProstEncoder<T>;
    type Decoder = Strict<U>;

    fn encoder(&mut self) -> Self::Encoder {
        ProstEncoder::new(settings())
    }

    fn decoder(&mut self) -> Self::Decoder {
        Strict(ProstDecoder::new(settings()))
    }
}

/// The messages whose unknown fields are refused, not dropped: what a
/// backend asks of the daemon's catalog.
fn strict_name<U: 'static>() -> Option<&'static str> {
    // By the generated type's path (this module cannot name the generated
    // types, which live in the crate root): `toolhost.admin.v1` is
    // generated as `toolhost::admin::v1`.
    std::any::type_name::<U>()
        .ends_with("::toolhost::admin::v1::PushCatalogRequest")
        .then_some("toolhost.admin.v1.PushCatalogRequest")
}

/// prost's decoder, refusing a strict message's unknown fields first.
#[derive(Debug)]
pub struct Strict<U>(ProstDecoder<U>);

impl<U: prost::Message + Default + 'static> tonic::codec::Decoder for Strict<U> {
    type Item = U;
    type Error = tonic::Status;

    fn decode(
        &mut self,
        buf: &mut tonic::codec::DecodeBuf<'_>,
    ) -> Result<Option<Self::Item>, Self::Error> {
        if let Some(name) = strict_name::<U>() {
            use prost::bytes::Buf as _;
            let bytes = buf.copy_to_bytes(buf.remaining());
            let unknown = crate::strict::unknown_fields(name, &bytes)
                .map_err(|e| tonic::Status::invalid_argument(format!("not a {name}: {e}")))?;
            if !unknown.is_empty() {
                return Err(tonic::Status::invalid_argument(format!(
                    "the request has fields this toolhost does not know ({}); nothing was changed. A newer \
                     backend's field, or a misspelt one: check docs/CONTRACT.md §2 for the fields a descriptor has",
                    unknown.join(", ")
                )));
            }
            return U::decode(bytes)
                .map(Some)
                .map_err(|e| tonic::Status::internal(e.to_string()));
        }
        self.0.decode(buf)
    }

    fn buffer_settings(&self) -> BufferSettings {
        self.0.buffer_settings()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::codec::{Codec as _, Decoder as _, Encoder as _};

    // Messages larger than the first buffer cross the real hop in the
    // end-to-end tests (a 300,000-byte result in tests/stateless.rs, the
    // result limits in tests/hostile.rs).
    #[test]
    fn a_pushed_catalog_is_read_strictly_and_nothing_else_is() {
        use crate::toolhost::admin::v1 as pb;
        assert_eq!(
            strict_name::<pb::PushCatalogRequest>(),
            Some("toolhost.admin.v1.PushCatalogRequest")
        );
        assert_eq!(strict_name::<pb::GetStatusRequest>(), None);
    }

    #[test]
    fn both_directions_start_with_the_small_buffer() {
        // BufferSettings shows its fields only through Debug.
        let small = format!(
            "{:?}",
            BufferSettings::new(FIRST_BUFFER_BYTES, YIELD_THRESHOLD)
        );
        assert_ne!(small, format!("{:?}", BufferSettings::default()));
        let mut codec = Codec::<prost_types::Value, prost_types::Value>::default();
        assert_eq!(format!("{:?}", codec.encoder().buffer_settings()), small);
        assert_eq!(format!("{:?}", codec.decoder().buffer_settings()), small);
    }
}
