/**
 * Traces: each call's handler runs inside a span that is a child of
 * toolhost's, through the OpenTelemetry API.
 *
 * toolhost sends W3C trace context in the gRPC metadata of every call
 * (`traceparent`, `tracestate`). The SDK opens an `execute_tool {tool}`
 * span under it and makes it the active span while the handler runs, so a
 * span the handler opens with `trace.getTracer(...)` nests inside.
 *
 * Spans leave the process only when its environment configures OTLP
 * (`OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`,
 * which toolhost passes to a plugin the operator lets export) over gRPC;
 * `OTEL_SERVICE_NAME`, `OTEL_TRACES_SAMPLER_ARG` and
 * `OTEL_BSP_SCHEDULE_DELAY` apply. The OpenTelemetry packages are optional
 * dependencies: without them the SDK serves as before.
 *
 * Like toolhost, the SDK never puts an argument or a result on a span.
 */

import type * as grpc from "@grpc/grpc-js";

/* eslint-disable @typescript-eslint/no-explicit-any */
type Api = typeof import("@opentelemetry/api");

let api: Api | undefined;
let tracer: any;
let propagator: any;
let provider: any;

/** Installs the OTLP export when the environment configures it; a tracer
 * provider the plugin registered itself is used as it is. */
export async function installFromEnv(): Promise<void> {
  try {
    api = await import("@opentelemetry/api");
    const core = await import("@opentelemetry/core");
    propagator = new core.W3CTraceContextPropagator();
  } catch {
    return; // the optional OpenTelemetry packages are not installed
  }
  const env = process.env;
  if (env.OTEL_EXPORTER_OTLP_ENDPOINT || env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) {
    try {
      const [sdk, resources, hooks, grpcExporter] = await Promise.all([
        import("@opentelemetry/sdk-trace"),
        import("@opentelemetry/resources"),
        import("@opentelemetry/context-async-hooks"),
        import("@opentelemetry/exporter-trace-otlp-grpc"),
      ]);
      const ratio = Number(env.OTEL_TRACES_SAMPLER_ARG ?? "1");
      const delay = Number(env.OTEL_BSP_SCHEDULE_DELAY ?? "5000");
      provider = new sdk.TracerProvider({
        resource: resources.resourceFromAttributes({ "service.name": env.OTEL_SERVICE_NAME ?? "toolhost-plugin" }),
        sampler: new sdk.ParentBasedSampler({
          root: new sdk.TraceIdRatioBasedSampler(Number.isFinite(ratio) ? ratio : 1),
        }),
        spanProcessors: [
          new sdk.BatchSpanProcessor({
            exporter: new grpcExporter.OTLPTraceExporter(),
            scheduledDelayMillis: Number.isFinite(delay) && delay > 0 ? delay : 5000,
          }),
        ],
      });
      api.context.setGlobalContextManager(new hooks.AsyncLocalStorageContextManager().enable());
      api.trace.setGlobalTracerProvider(provider);
    } catch (e) {
      console.error(`@toolhost/plugin: traces are not exported: ${e}`);
    }
  }
  tracer = api.trace.getTracer("@toolhost/plugin");
}

/** Sends what is queued before the process ends. */
export async function shutdown(): Promise<void> {
  await provider?.shutdown().catch(() => {});
}

/** The span of one call, a child of toolhost's; undefined without the API. */
export function start(metadata: grpc.Metadata, tool: string, invocationId: string): any {
  if (!api || !tracer) return undefined;
  const carrier: Record<string, string> = {};
  for (const key of ["traceparent", "tracestate"]) {
    const v = metadata.get(key)[0];
    if (typeof v === "string") carrier[key] = v;
  }
  const parent = propagator.extract(api.ROOT_CONTEXT, carrier, api.defaultTextMapGetter);
  return tracer.startSpan(
    `execute_tool ${tool}`,
    {
      kind: api.SpanKind.SERVER,
      attributes: {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": tool,
        "gen_ai.tool.call.id": invocationId,
        "rpc.system": "grpc",
      },
    },
    parent,
  );
}

/** Runs `fn` with `span` active. */
export function within<T>(span: any, fn: () => T): T {
  if (!api || !span) return fn();
  return api.context.with(api.trace.setSpan(api.context.active(), span), fn);
}

/** Ends a call's span; `error` is its `error.type` (`tool_error` for a
 * tool result with isError). */
export function end(span: any, error: string | undefined): void {
  if (!api || !span) return;
  if (error !== undefined) {
    span.setAttribute("error.type", error);
    span.setStatus({ code: api.SpanStatusCode.ERROR, message: error });
  }
  span.end();
}
