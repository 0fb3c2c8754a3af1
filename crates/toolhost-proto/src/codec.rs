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
    type Decoder = ProstDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        ProstEncoder::new(settings())
    }

    fn decoder(&mut self) -> Self::Decoder {
        ProstDecoder::new(settings())
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
