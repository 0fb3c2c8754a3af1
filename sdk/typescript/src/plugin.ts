// The plugin: tools by name, and everything the wire protocol asks for.
//
// `plugin.run()` checks the magic cookie, picks the protocol version
// toolhost offers, serves kandev.plugin.v1.Plugin, toolhost.plugin.v2.Plugin
// and grpc.health.v1 (service "plugin" SERVING) on a Unix socket in the
// private directory toolhost names, prints the one handshake line, and
// stops gracefully on SIGTERM. Everything else the plugin prints goes to
// stderr, which toolhost turns into log events: stdout is the handshake's.

import * as trace from "./trace.js";
import { type Config, config } from "./config.js";
import * as grpc from "@grpc/grpc-js";
import * as loader from "@grpc/proto-loader";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { timingSafeEqual } from "node:crypto";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { ToolCall, type Link } from "./call.js";
import { Content, ToolError, ToolResult, toResult, toWire, type Returned } from "./content.js";
import { jsonToStruct, structToJson, type WireStruct } from "./struct.js";
import { jsonSchemaOf, parseWith, summary, type Infer, type Schema, type ToolSpec } from "./shapes.js";

export const COOKIE_KEY = "KANDEV_PLUGIN";
export const COOKIE_VALUE = "kandev-plugin-v1";
const VERSIONS_KEY = "PLUGIN_PROTOCOL_VERSIONS";
const SOCKET_DIR_KEY = "KANDEV_PLUGIN_SOCKET_DIR";
/** The file holding the token toolhost presents on every call. */
export const CALL_TOKEN_KEY = "TOOLHOST_PLUGIN_CALL_TOKEN";
/** The gRPC metadata key toolhost sends the call token under. */
export const CALL_TOKEN_METADATA = "toolhost-call-token";
const DATA_DIR_KEY = "KANDEV_PLUGIN_DATA_DIR";

export type Handler = (call: ToolCall) => Returned | Promise<Returned>;

const protoDir = fileURLToPath(new URL("../proto", import.meta.url));
const definition = loader.loadSync(
  ["kandev/plugin/v1/plugin.proto", "toolhost/plugin/v2/plugin.proto", "grpc/health/v1/health.proto"],
  { includeDirs: [protoDir], keepCase: true, longs: String, enums: Number, defaults: true, oneofs: true },
);
// eslint-disable-next-line @typescript-eslint/no-explicit-any
const pkg = grpc.loadPackageDefinition(definition) as any;
/** This SDK's version, told to toolhost by Describe. */
const SDK_VERSION: string = (() => {
  try {
    return JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8")).version ?? "unknown";
  } catch {
    return "unknown";
  }
})();
/** The service definitions, for tests and for hosting the plugin elsewhere. */
export const services = {
  v1: pkg.kandev.plugin.v1.Plugin.service as grpc.ServiceDefinition,
  v2: pkg.toolhost.plugin.v2.Plugin.service as grpc.ServiceDefinition,
  health: pkg.grpc.health.v1.Health.service as grpc.ServiceDefinition,
};

function status(code: grpc.status, details: string): grpc.ServiceError {
  return Object.assign(new Error(details), { code, details, metadata: new grpc.Metadata() });
}

/**
 * A set of tools, each a function of one ToolCall. Cancellation (the agent
 * gave up, or the deadline passed) aborts `call.signal`.
 */
export class Plugin {
  readonly tools = new Map<string, Handler>();
  /** The typed tools' specs, by name (see `shapes.ts`). */
  readonly specs = new Map<string, ToolSpec<Schema, Schema | undefined>>();
  /** Their shapes as Describe tells them, once resolved. */
  private shapes: Record<string, string>[] = [];
  private readonly handshakeOut: (line: string) => void;
  /** The token toolhost presents on every call; undefined under a toolhost
   * that sends none, when nothing is checked. */
  private callToken: string | undefined;

  constructor() {
    const write = process.stdout.write.bind(process.stdout);
    this.handshakeOut = (line) => {
      write(line);
    };
    if (process.env[COOKIE_KEY] === COOKIE_VALUE) {
      // Under toolhost, stdout is the handshake's alone: anything printed
      // from here on goes to stderr (and becomes a log event).
      process.stdout.write = process.stderr.write.bind(process.stderr) as typeof process.stdout.write;
    }
  }

  /**
   * Registers the handler of the tool `name`: a function of the call
   * (reading `call.arguments`, the manifest alone stating the schema), or,
   * with a spec, a function of its arguments as the spec's types, whose
   * shape `toolhost schema sync` writes into the manifest:
   *
   * ```ts
   * plugin.tool("create_ticket", { description: "Opens a ticket.", input: z.object({ title: z.string() }) },
   *   ({ title }, call) => ({ id: 1, title }));
   * ```
   */
  tool(name: string, handler: Handler): this;
  tool<I extends Schema, O extends Schema | undefined = undefined>(
    name: string,
    spec: ToolSpec<I, O>,
    handler: (args: Infer<I>, call: ToolCall) => Returned | Infer<O> | Promise<Returned | Infer<O>>,
  ): this;
  tool(
    name: string,
    specOrHandler: Handler | ToolSpec<Schema, Schema | undefined>,
    typed?: (args: never, call: ToolCall) => unknown,
  ): this {
    if (typeof specOrHandler === "function") {
      this.tools.set(name, specOrHandler);
      return this;
    }
    const spec = specOrHandler;
    const handler = typed as unknown as (args: unknown, call: ToolCall) => Returned | Promise<Returned>;
    this.specs.set(name, spec);
    this.tools.set(name, (call) => handler(parseWith(spec.input, call.arguments), call));
    return this;
  }

  /** The typed tools' shapes as JSON Schema, as Describe tells toolhost. */
  async resolveShapes(): Promise<void> {
    const shapes: Record<string, string>[] = [];
    for (const [name, spec] of [...this.specs].sort(([a], [b]) => a.localeCompare(b))) {
      shapes.push({
        name,
        input_schema_json: JSON.stringify(await jsonSchemaOf(spec.input)),
        output_schema_json: spec.output ? JSON.stringify(await jsonSchemaOf(spec.output)) : "",
        description: summary(spec.description),
      });
    }
    this.shapes = shapes;
  }

  /** The operator's values and secrets (see `config`). */
  get config(): Config {
    return config;
  }

  /** The plugin's data directory: toolhost's (and the test harness's)
   * for this plugin, or the current directory when neither started it. A
   * `string`, so `join(Plugin.dataDir(), "x")` compiles under `strict`. */
  static dataDir(): string {
    return process.env[DATA_DIR_KEY] || process.cwd();
  }

  /** Serves until SIGTERM or SIGINT; exits with status 1 when not started
   * by toolhost. */
  run(): void {
    this.serve().then(
      (code) => process.exit(code),
      (e) => {
        console.error(e);
        process.exit(1);
      },
    );
  }

  /** Reads (and deletes) the call token toolhost left for this process;
   * `serve` does it first. From then on a call without it is refused. */
  loadCallToken(): void {
    const path = process.env[CALL_TOKEN_KEY];
    if (!path) return;
    this.callToken = readFileSync(path, "utf8").trim();
    rmSync(path, { force: true });
  }

  /** Whether a call carries this process's call token: another process of
   * the same user (another plugin among them) can reach the socket, and
   * only toolhost has the token. */
  private fromToolhost(metadata: grpc.Metadata): boolean {
    if (this.callToken === undefined) return true;
    const given = Buffer.from(String(metadata.get(CALL_TOKEN_METADATA)[0] ?? ""));
    const expected = Buffer.from(this.callToken);
    return given.length === expected.length && timingSafeEqual(given, expected);
  }

  /** The gRPC server of this plugin (both protocols), without the
   * handshake: for tests. */
  server(): grpc.Server {
    const server = new grpc.Server();
    server.addService(services.v1, { InvokeAgentTool: this.unary.bind(this) });
    server.addService(services.v2, { Invoke: this.streaming.bind(this), Describe: this.describe.bind(this) });
    server.addService(services.health, {
      Check: (_call: grpc.ServerUnaryCall<unknown, unknown>, done: grpc.sendUnaryData<unknown>) =>
        done(null, { status: 1 }),
    });
    return server;
  }

  async serve(): Promise<number> {
    if (process.env[COOKIE_KEY] !== COOKIE_VALUE) {
      console.error("this is a toolhost plugin, start it with toolhost");
      return 1;
    }
    const offered = (process.env[VERSIONS_KEY] ?? "").split(",").map((v) => v.trim());
    const version = offered.includes("2") ? "2" : offered.includes("1") ? "1" : undefined;
    if (!version) {
      console.error(`toolhost offered plugin protocol versions ${offered.join(",")}; this plugin speaks 1 and 2`);
      return 1;
    }
    this.loadCallToken();
    await this.resolveShapes();
    await trace.installFromEnv();
    // toolhost names a private folder, fresh for this process, where a
    // plugin may make its socket and nothing else: the socket goes straight
    // in. An older host names none.
    const given = process.env[SOCKET_DIR_KEY];
    const dir = given ?? mkdtempSync(join(tmpdir(), "plugin-"));
    const path = join(dir, "plugin.sock");
    const server = this.server();
    await new Promise<void>((resolve, reject) =>
      server.bindAsync(`unix:${path}`, grpc.ServerCredentials.createInsecure(), (e) => (e ? reject(e) : resolve())),
    );
    this.handshakeOut(`1|${version}|unix|${path}|grpc\n`);
    await new Promise<void>((resolve) => {
      process.once("SIGTERM", resolve);
      process.once("SIGINT", resolve);
    });
    await new Promise<void>((resolve) => {
      const force = setTimeout(() => {
        server.forceShutdown();
        resolve();
      }, 2000);
      server.tryShutdown(() => {
        clearTimeout(force);
        resolve();
      });
    });
    if (!given) rmSync(dir, { recursive: true, force: true });
    // The last spans go out before the process ends.
    await trace.shutdown();
    return 0;
  }

  /** Runs one handler and turns its outcome into a result. */
  async call(call: ToolCall): Promise<ToolResult> {
    const handler = this.tools.get(call.name);
    if (!handler) throw new ToolError(`no tool named ${call.name}`);
    try {
      return toResult(await handler(call));
    } catch (e) {
      if (e instanceof ToolError) return new ToolResult([Content.text(e.message)], undefined, true);
      if (call.signal.aborted) throw e;
      console.error(e);
      const kind = e instanceof Error ? e.name : typeof e;
      return new ToolResult([Content.text(`${call.name} failed: ${kind}`)], undefined, true);
    }
  }

  private toolCall(request: Record<string, any>, signal: AbortSignal, link?: Link): ToolCall {
    const c = request.context ?? {};
    return new ToolCall(
      request.invocation_id,
      request.name,
      structToJson(request.arguments as WireStruct),
      {
        taskId: c.task_id ?? "",
        sessionId: c.session_id ?? "",
        workspaceId: c.workspace_id ?? "",
        surface: c.surface ?? "",
        credentials: Object.fromEntries(
          (c.credentials ?? []).map((k: Record<string, any>) => [k.audience ?? "", k.access_token ?? ""]),
        ),
      },
      signal,
      link,
    );
  }

  private abortOnDeadline(deadline: grpc.Deadline, abort: AbortController): () => void {
    const at = deadline instanceof Date ? deadline.getTime() : Number(deadline);
    if (!Number.isFinite(at)) return () => {};
    const timer = setTimeout(() => abort.abort(), Math.max(0, at - Date.now()));
    return () => clearTimeout(timer);
  }

  /** The tools this code implements, for toolhost to compare with the
   * manifest. */
  private describe(call: grpc.ServerUnaryCall<unknown, unknown>, done: grpc.sendUnaryData<unknown>): void {
    if (!this.fromToolhost(call.metadata)) {
      done(status(grpc.status.UNAUTHENTICATED, "this plugin answers only the toolhost that started it"));
      return;
    }
    done(null, this.described());
  }

  /** @internal `Describe`'s answer: what the code implements and the shapes
   * it states (the test harness sends it to toolhost too). */
  described(): Record<string, unknown> {
    return { tools: [...this.tools.keys()].sort(), sdk: `@toolhost/plugin ${SDK_VERSION}`, shapes: this.shapes };
  }

  /** @internal the protocol-1 servicer, for the test harness. */
  unary(
    call: grpc.ServerUnaryCall<Record<string, any>, unknown>,
    done: grpc.sendUnaryData<unknown>,
  ): void {
    if (!this.fromToolhost(call.metadata)) {
      done(status(grpc.status.UNAUTHENTICATED, "this plugin answers only the toolhost that started it"));
      return;
    }
    const request = call.request;
    if (!this.tools.has(request.name)) {
      done(status(grpc.status.NOT_FOUND, `this plugin has no tool named ${JSON.stringify(request.name)}`));
      return;
    }
    const abort = new AbortController();
    call.on("cancelled", () => abort.abort());
    const clear = this.abortOnDeadline(call.getDeadline(), abort);
    const span = trace.start(call.metadata, request.name, request.invocation_id);
    trace.within(span, () => this.call(this.toolCall(request, abort.signal))).then(
      (r) => {
        clear();
        trace.end(span, r.isError ? "tool_error" : undefined);
        done(null, {
          text: r.content.map((c) => c.v1Text()).join("\n"),
          structured_content: r.structured ? jsonToStruct(r.structured) : null,
          is_error: r.isError,
        });
      },
      () => {
        clear();
        trace.end(span, "cancelled");
        done(status(grpc.status.CANCELLED, "the call was cancelled"));
      },
    );
  }

  /** @internal the protocol-2 servicer, for the test harness. */
  streaming(stream: grpc.ServerDuplexStream<Record<string, any>, Record<string, unknown>>): void {
    const fromToolhost = this.fromToolhost(stream.metadata);
    const abort = new AbortController();
    stream.on("cancelled", () => abort.abort());
    stream.on("error", () => abort.abort());
    let link: (Link & { pending?: Record<string, unknown> }) | undefined;
    let clear = () => {};
    const flush = () => {
      if (link?.pending && !stream.writableNeedDrain) {
        stream.write(link.pending);
        link.pending = undefined;
      }
    };
    stream.on("drain", flush);
    stream.on("data", (event: Record<string, any>) => {
      if (link) {
        if (event.event === "answer") {
          const resolve = link.answers.get(event.answer.question_id);
          link.answers.delete(event.answer.question_id);
          if (resolve) {
            link.answersSeen += 1;
            resolve(event.answer);
          }
        }
        return;
      }
      if (!fromToolhost) {
        stream.emit("error", status(grpc.status.UNAUTHENTICATED, "this plugin answers only the toolhost that started it"));
        return;
      }
      if (event.event !== "start") {
        stream.emit("error", status(grpc.status.INVALID_ARGUMENT, "the first event of a call must be `start`"));
        return;
      }
      const start = event.start;
      const request = start.request ?? {};
      if (!this.tools.has(request.name)) {
        stream.emit("error", status(grpc.status.NOT_FOUND, `this plugin has no tool named ${JSON.stringify(request.name)}`));
        return;
      }
      const l: Link & { pending?: Record<string, unknown> } = {
        wantsProgress: Boolean(start.wants_progress),
        logLevel: Number(start.log_level ?? 0),
        canAsk: Boolean(start.can_ask),
        answers: new Map(),
        nextQuestion: 1,
        answersSeen: 0,
        send(e, progress = false) {
          if (abort.signal.aborted) return;
          if (progress && (l.pending || stream.writableNeedDrain)) {
            // Latest wins: the last update is never lost, older ones may be.
            l.pending = e;
            return;
          }
          flush();
          if (!stream.writableNeedDrain) stream.write(e);
        },
        async sendNow(e) {
          flush();
          if (l.pending) {
            stream.write(l.pending);
            l.pending = undefined;
          }
          if (!stream.write(e)) await new Promise((resolve) => stream.once("drain", resolve));
        },
      };
      link = l;
      clear = this.abortOnDeadline(stream.getDeadline(), abort);
      const call = this.toolCall(request, abort.signal, l);
      const span = trace.start(stream.metadata, request.name, request.invocation_id);
      trace.within(span, () => this.call(call)).then(
        async (r) => {
          clear();
          trace.end(span, r.isError ? "tool_error" : undefined);
          if (abort.signal.aborted) return;
          await l.sendNow({ result: toWire(r) });
          stream.end();
        },
        () => {
          clear();
          trace.end(span, "cancelled");
          if (!abort.signal.aborted) stream.emit("error", status(grpc.status.CANCELLED, "the call was cancelled"));
        },
      );
    });
  }
}
