//! The one switch: the tracer every span is opened with, set once when
//! telemetry is installed, absent (and every span a no-op) otherwise.

use opentelemetry_sdk::trace::SdkTracer;
use std::sync::OnceLock;

pub(crate) static TRACER: OnceLock<SdkTracer> = OnceLock::new();

/// Whether telemetry was installed: false by default, and then every span
/// here is a no-op.
#[inline]
#[must_use]
pub fn enabled() -> bool {
    TRACER.get().is_some()
}

/// Makes `tracer` the one every span is opened with; once per process.
pub(crate) fn set_tracer(tracer: SdkTracer) -> bool {
    TRACER.set(tracer).is_ok()
}
