"""Traces: each call's handler runs inside a span that is a child of
toolhost's, through the OpenTelemetry API.

toolhost sends W3C trace context in the gRPC metadata of every call
(``traceparent``, ``tracestate``). The SDK opens an ``execute_tool {tool}``
span under it and makes it current while the handler runs, so a span the
handler opens with ``opentelemetry.trace.get_tracer(...)`` nests inside.

Spans leave the process only when its environment configures OTLP
(``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``,
which toolhost passes to a plugin the operator lets export); the protocol
is ``OTEL_EXPORTER_OTLP_PROTOCOL`` (``grpc``, the default here as in
toolhost, or ``http/protobuf``) and the other standard ``OTEL_*`` variables
apply. The API, SDK and exporter come with ``pip install
'toolhost-plugin[otel]'``; without them the SDK serves as before.

Like toolhost, the SDK never puts an argument or a result on a span.
"""

import contextlib
import os
import sys
from typing import Any, Iterable, Optional, Tuple

try:
    from opentelemetry import trace
    from opentelemetry.trace import SpanKind, Status, StatusCode
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    _PROPAGATOR: Any = TraceContextTextMapPropagator()
except ImportError:  # the [otel] extra is not installed
    trace = None  # type: ignore[assignment]

_KEYS = ("traceparent", "tracestate")
_tracer: Any = None
_provider: Any = None


def install_from_env() -> None:
    """Installs the OTLP export when the environment configures it; a
    tracer provider the plugin set up itself is used as it is."""
    global _tracer, _provider
    if trace is None:
        return
    configured = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or os.environ.get(
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
    )
    if configured:
        protocol = (
            os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
            or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
            or "grpc"
        )
        try:
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor

            if protocol == "http/protobuf":
                from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            else:
                from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
        except ImportError as e:
            print(
                f"toolhost-plugin: traces are not exported ({e}); install toolhost-plugin[otel]",
                file=sys.stderr,
            )
        else:
            provider = TracerProvider(resource=Resource.create())
            provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
            trace.set_tracer_provider(provider)
            _provider = provider
    _tracer = trace.get_tracer("toolhost-plugin")


def shutdown() -> None:
    """Sends what is queued before the process ends."""
    if _provider is not None:
        _provider.shutdown()


def start(metadata: Optional[Iterable[Tuple[str, Any]]], tool: str, invocation_id: str) -> Any:
    """The span of one call, a child of toolhost's; None without the API."""
    if _tracer is None:
        return None
    carrier = {k: v for k, v in (metadata or ()) if k in _KEYS and isinstance(v, str)}
    parent = _PROPAGATOR.extract(carrier)
    return _tracer.start_span(
        f"execute_tool {tool}",
        context=parent,
        kind=SpanKind.SERVER,
        attributes={
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": tool,
            "gen_ai.tool.call.id": invocation_id,
            "rpc.system": "grpc",
        },
    )


def current(span: Any):
    """Makes the span current for what runs inside (tasks created inside
    copy it)."""
    if span is None:
        return contextlib.nullcontext()
    return trace.use_span(span, end_on_exit=False, record_exception=False, set_status_on_exception=False)


def end(span: Any, error: Optional[str]) -> None:
    """Ends a call's span; ``error`` is its ``error.type`` (``tool_error``
    for a tool result with isError)."""
    if span is None:
        return
    if error is not None:
        span.set_attribute("error.type", error)
        span.set_status(Status(StatusCode.ERROR, error))
    span.end()
