//! The W3C trace context an agent sends (`_meta` or headers): any
//! `traceparent` and `tracestate`, of any size and bytes, is either a
//! context that carries exactly a valid parent on, or ignored; never a
//! panic. A context is carried on only with a well-formed, non-zero
//! trace id.
#![no_main]
use libfuzzer_sys::fuzz_target;
use opentelemetry::trace::TraceContextExt as _;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let (parent, state) = match text.split_once('\n') {
        Some((p, s)) => (p, Some(s)),
        None => (text.as_ref(), None),
    };
    if let Some(cx) = toolhost_telemetry::parent_from(Some(parent), state) {
        let span = cx.span();
        let sc = span.span_context();
        assert!(sc.is_valid(), "a parent carried on must be valid");
        assert!(sc.is_remote());
    }
});
