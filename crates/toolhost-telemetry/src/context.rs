//! W3C trace context: read from what an agent sends, written into what
//! toolhost sends.
//!
//! An agent names its trace in the request's `params._meta` (`traceparent`,
//! `tracestate`, unprefixed keys, as the MCP semantic conventions and the
//! 2026-07-28 specification say) or, over HTTP, in the headers of the same
//! name. Both are the agent's text: a malformed `traceparent` is ignored
//! (the call starts a trace of its own), and a `tracestate` longer than
//! [`MAX_TRACESTATE`] bytes is dropped, so an agent cannot make toolhost
//! carry a large blob to every plugin.
//!
//! Outgoing, every gRPC call toolhost makes inside a span carries that
//! span's `traceparent` (and the `tracestate` it inherited) in its
//! metadata, under the same two keys, which is what every OpenTelemetry
//! gRPC instrumentation reads.

use crate::switch::enabled;
use opentelemetry::Context;
use opentelemetry::propagation::{Extractor, TextMapPropagator as _};
use opentelemetry::trace::TraceContextExt as _;
use opentelemetry_sdk::propagation::TraceContextPropagator;

/// The W3C header (and `_meta` key, and gRPC metadata key) of the parent.
pub const TRACEPARENT: &str = "traceparent";
/// The W3C header (and `_meta` key, and gRPC metadata key) of vendor state.
pub const TRACESTATE: &str = "tracestate";
/// The longest `tracestate` carried on; W3C asks that at least 512 bytes
/// be propagated, and toolhost carries no more.
pub const MAX_TRACESTATE: usize = 512;

struct Pair<'a> {
    parent: &'a str,
    state: Option<&'a str>,
}

impl Extractor for Pair<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        match key {
            TRACEPARENT => Some(self.parent),
            TRACESTATE => self.state,
            _ => None,
        }
    }

    fn keys(&self) -> Vec<&str> {
        vec![TRACEPARENT, TRACESTATE]
    }
}

/// The remote parent a `traceparent` (with its `tracestate`) names, or
/// `None` when there is none or it is malformed.
#[must_use]
pub fn parent_from(traceparent: Option<&str>, tracestate: Option<&str>) -> Option<Context> {
    let parent = traceparent?.trim();
    // 55 bytes is version 00; later versions may append fields, but not
    // without bound.
    if parent.is_empty() || parent.len() > 128 {
        return None;
    }
    let state = tracestate.filter(|s| s.len() <= MAX_TRACESTATE);
    let cx = TraceContextPropagator::new().extract(&Pair { parent, state });
    cx.span().span_context().is_valid().then_some(cx)
}

/// Writes the current span's `traceparent` and `tracestate` into outgoing
/// gRPC metadata; nothing when telemetry is off or there is no span.
pub fn inject(metadata: &mut tonic::metadata::MetadataMap) {
    if !enabled() {
        return;
    }
    Context::map_current(|cx| inject_context(cx, metadata));
}

/// [`inject`] for a given context.
pub fn inject_context(cx: &Context, metadata: &mut tonic::metadata::MetadataMap) {
    let span = cx.span();
    let sc = span.span_context();
    if !sc.is_valid() {
        return;
    }
    let parent = format!(
        "00-{:032x}-{:016x}-{:02x}",
        sc.trace_id(),
        sc.span_id(),
        sc.trace_flags().to_u8() & 1
    );
    if let Ok(v) = parent.parse() {
        metadata.insert(TRACEPARENT, v);
    }
    let state = sc.trace_state().header();
    if !state.is_empty()
        && let Ok(v) = state.parse()
    {
        metadata.insert(TRACESTATE, v);
    }
}

/// The current trace's id (32 hex digits), for the audit line; `None`
/// when telemetry is off or nothing is traced.
#[must_use]
pub fn trace_id() -> Option<String> {
    if !enabled() {
        return None;
    }
    Context::map_current(|cx| {
        let span = cx.span();
        let sc = span.span_context();
        sc.is_valid().then(|| format!("{:032x}", sc.trace_id()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const PARENT: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

    #[test]
    fn a_well_formed_traceparent_names_a_remote_sampled_parent() {
        let cx = parent_from(Some(PARENT), Some("vendor=abc")).expect("parent");
        let span = cx.span();
        let sc = span.span_context();
        assert!(sc.is_remote());
        assert!(sc.is_sampled());
        assert_eq!(
            format!("{:032x}", sc.trace_id()),
            "0af7651916cd43dd8448eb211c80319c"
        );
        assert_eq!(sc.trace_state().header(), "vendor=abc");
    }

    #[test]
    fn malformed_or_absent_traceparents_name_no_parent() {
        for bad in [
            "",
            "garbage",
            "00-00000000000000000000000000000000-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
            "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01x",
        ] {
            assert!(parent_from(Some(bad), None).is_none(), "{bad}");
        }
        assert!(parent_from(None, Some("a=b")).is_none());
    }

    #[test]
    fn an_oversized_tracestate_is_dropped_and_the_parent_kept() {
        let state = format!("k={}", "v".repeat(MAX_TRACESTATE));
        let cx = parent_from(Some(PARENT), Some(&state)).expect("parent");
        assert_eq!(cx.span().span_context().trace_state().header(), "");
    }

    #[test]
    fn injection_writes_the_span_context_back_in_w3c_form() {
        let cx = parent_from(Some(PARENT), Some("vendor=abc")).expect("parent");
        let mut md = tonic::metadata::MetadataMap::new();
        inject_context(&cx, &mut md);
        assert_eq!(
            md.get(TRACEPARENT).and_then(|v| v.to_str().ok()),
            Some(PARENT)
        );
        assert_eq!(
            md.get(TRACESTATE).and_then(|v| v.to_str().ok()),
            Some("vendor=abc")
        );
    }

    proptest! {
        /// Whatever an agent sends, parsing neither panics nor yields an
        /// invalid parent, and what is injected again is well formed.
        #[test]
        fn any_text_parses_to_nothing_or_a_valid_parent(
            parent in "[0-9a-f-]{0,70}|.{0,80}",
            state in proptest::option::of(".{0,600}"),
        ) {
            if let Some(cx) = parent_from(Some(&parent), state.as_deref()) {
                let mut md = tonic::metadata::MetadataMap::new();
                inject_context(&cx, &mut md);
                let out = md.get(TRACEPARENT).and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
                prop_assert_eq!(out.len(), 55);
                prop_assert!(md.get(TRACESTATE).is_none_or(|v| v.len() <= MAX_TRACESTATE));
            }
        }
    }
}
