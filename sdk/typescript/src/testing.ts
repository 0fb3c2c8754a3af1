/**
 * Test a tool with no daemon, and get exactly what an agent would.
 *
 * ```ts
 * import { Harness } from "@toolhost/plugin/testing";
 * const h = await Harness.start(plugin, import.meta.dirname, { config: { api_token: "test" } });
 * const bad = await h.call("create_ticket", { title: 5 });
 * assert.equal(bad.errorCode, "invalid_arguments");
 * await h.close();
 * ```
 *
 * The handler runs here, in the test's own process, and everything around
 * it is toolhost's own: the harness starts `toolhost harness DIR`, which
 * checks each call against the manifest as a daemon does (bounds, the
 * schema with the root closed, the deadline, questions and answers, the
 * output schema, the result's size) and words every refusal as an agent
 * reads it. `toolhost` must be on PATH (or named by TOOLHOST_BIN).
 *
 * A question is answered from `answers` (an object accepts with those
 * values; "decline" and "cancel" say no), checked against the question
 * first, as a client's answer is. Progress and log messages are recorded.
 * `config` gives the values and secrets the manifest's `[[config]]` items
 * declare (their defaults otherwise); the data directory is a fresh
 * temporary one.
 */

import { AsyncLocalStorage } from "node:async_hooks";
import { spawn, type ChildProcessWithoutNullStreams } from "node:child_process";
import { EventEmitter } from "node:events";
import fs, { mkdirSync, mkdtempSync, realpathSync, rmSync } from "node:fs";
import { syncBuiltinESMExports } from "node:module";
import { tmpdir } from "node:os";
import { basename, dirname, join, resolve, sep } from "node:path";
import { fileURLToPath } from "node:url";
import { createInterface, type Interface } from "node:readline";
import * as grpc from "@grpc/grpc-js";
import { config } from "./config.js";
import { services, type Plugin } from "./plugin.js";

/** The directory a handler may write in while the harness runs it: the
 * data directory, as under the daemon's sandbox. Unset outside a handler,
 * so the test's own code writes where it likes. */
const writable = new AsyncLocalStorage<string>();
let ruleInstalled = false;

/** The path a write names, with every link in its existing part resolved
 * (a file not yet made resolves through its folder). */
function realTarget(p: unknown): string | undefined {
  let path: string;
  if (typeof p === "string") path = p;
  else if (Buffer.isBuffer(p)) path = p.toString();
  else if (p instanceof URL) path = fileURLToPath(p);
  else return undefined; // a file descriptor or handle: opened already
  let at = resolve(path);
  const rest: string[] = [];
  for (;;) {
    try {
      return join(realpathSync(at), ...rest);
    } catch {
      const up = dirname(at);
      if (up === at) return join(at, ...rest);
      rest.unshift(basename(at));
      at = up;
    }
  }
}

function refusal(path: unknown, allowed: string): NodeJS.ErrnoException {
  const shown = String(path instanceof URL ? fileURLToPath(path) : path);
  const e: NodeJS.ErrnoException = new Error(
    `EACCES: under toolhost's sandbox a plugin writes only in its data directory (${allowed}, Plugin.dataDir()); ` +
      `this write would fail there too: '${shown}'`,
  );
  e.code = "EACCES";
  e.errno = -13;
  e.path = shown;
  return e;
}

/** Whether `flags` (an open's) write. */
function writes(flags: unknown): boolean {
  if (typeof flags === "string") return /[wax+]/.test(flags);
  if (typeof flags === "number") {
    const c = fs.constants;
    return (flags & (c.O_WRONLY | c.O_RDWR | c.O_CREAT | c.O_APPEND | c.O_TRUNC)) !== 0;
  }
  return false;
}

/** Holds a handler the harness runs to the sandbox's rule for writes: fs's
 * writing functions (callback, sync and promise forms) refuse, naming the
 * path, what the daemon's sandbox would refuse; its log is all the author
 * would see there. Installed once; a no-op outside a handler. */
function installWriteRule(): void {
  if (ruleInstalled) return;
  ruleInstalled = true;
  // name: the argument positions that are paths written; "open" checks flags.
  const rules: Record<string, number[] | "open"> = {
    writeFile: [0], appendFile: [0], mkdir: [0], mkdtemp: [0], rm: [0], rmdir: [0], unlink: [0],
    rename: [0, 1], copyFile: [1], cp: [1], truncate: [0], symlink: [1], link: [1], chmod: [0],
    chown: [0], lchown: [0], utimes: [0], lutimes: [0], open: "open", createWriteStream: [0],
  };
  const guard = (target: Record<string, any>, name: string, style: "callback" | "sync" | "promise") => {
    const original = target[name];
    const rule = rules[name.replace(/Sync$/, "")];
    if (typeof original !== "function" || rule === undefined) return;
    target[name] = function (this: unknown, ...args: unknown[]) {
      const allowed = writable.getStore();
      if (allowed !== undefined) {
        const paths = rule === "open" ? (writes(args[1]) ? [args[0]] : []) : rule.map((i) => args[i]);
        for (const p of paths) {
          const real = realTarget(p);
          if (real !== undefined && real !== allowed && !real.startsWith(allowed + sep)) {
            const e = refusal(p, allowed);
            if (style === "promise") return Promise.reject(e);
            const callback = args[args.length - 1];
            if (style === "callback" && typeof callback === "function") {
              process.nextTick(callback as (e: Error) => void, e);
              return undefined;
            }
            throw e;
          }
        }
      }
      return original.apply(this, args);
    };
  };
  const mutable = fs as unknown as Record<string, any>;
  for (const name of Object.keys(rules)) {
    guard(mutable, name, name === "createWriteStream" ? "sync" : "callback");
    guard(mutable, `${name}Sync`, "sync");
    guard(mutable.promises, name, "promise");
  }
  // `import { writeFileSync } from "node:fs"` binds the module's exports
  // as they were; this brings them up to date.
  syncBuiltinESMExports();
}

/** What an agent's client received for one call, and what the tool sent
 * its caller on the way. */
export class Outcome {
  constructor(
    /** The MCP CallToolResult, as JSON. */
    readonly result: Record<string, any>,
    readonly progress: Record<string, unknown>[] = [],
    readonly logs: Record<string, unknown>[] = [],
    readonly questions: Record<string, unknown>[] = [],
  ) {}

  get isError(): boolean {
    return Boolean(this.result.isError);
  }

  /** The text blocks, joined by newlines: what a text-only agent reads. */
  get text(): string {
    return (this.result.content ?? [])
      .filter((b: Record<string, unknown>) => b.type === "text")
      .map((b: Record<string, unknown>) => b.text)
      .join("\n");
  }

  get structured(): unknown {
    return this.result.structuredContent;
  }

  /** toolhost's code when the call failed around the tool
   * (`invalid_arguments`, `timeout`, `plugin_error`, ...). */
  get errorCode(): string | undefined {
    return this.result._meta?.error?.code;
  }
}

/** The name is no tool of the manifest on the call's surface. */
export class UnknownTool extends Error {}

/** The code and plugin.toml disagree: each line names a tool, where, and
 * the command that writes the code's shapes into the manifest. */
export class Drift extends Error {}

export interface CallOptions {
  answers?: unknown[];
  canAsk?: boolean;
  progress?: boolean;
  surface?: string;
}

/** The part of a gRPC stream the SDK's servicers use, wired to the harness
 * process instead of a socket. */
class TestStream extends EventEmitter {
  readonly metadata = new grpc.Metadata();
  readonly writableNeedDrain = false;
  constructor(
    private readonly deadline: number,
    private readonly send: (line: Record<string, unknown>) => void,
  ) {
    super();
    this.on("error", (e: grpc.ServiceError) => this.send({ abort: { code: e.code ?? 2, message: e.details ?? e.message } }));
  }
  getDeadline(): number {
    return this.deadline;
  }
  write(event: Record<string, unknown>): boolean {
    const bytes = (services.v2.Invoke.responseSerialize as (v: unknown) => Buffer)(event);
    this.send({ event: bytes.toString("base64") });
    return true;
  }
  end(): void {}
}

/** A plugin's tools, called through toolhost's rules in this process. */
export class Harness {
  private readonly lines: Interface;
  private readonly waiting: ((line: Record<string, any>) => void)[] = [];
  private readonly queued: Record<string, any>[] = [];
  private stderr = "";
  private ended = false;

  private constructor(
    readonly plugin: Plugin,
    private readonly proc: ChildProcessWithoutNullStreams,
    private readonly scratch: string,
  ) {
    this.lines = createInterface({ input: proc.stdout });
    this.lines.on("line", (text) => {
      const line = JSON.parse(text) as Record<string, any>;
      const next = this.waiting.shift();
      if (next) next(line);
      else this.queued.push(line);
    });
    proc.stderr.on("data", (d: Buffer) => {
      this.stderr += d.toString();
    });
    proc.on("exit", () => {
      this.ended = true;
      for (const w of this.waiting.splice(0)) w({ error: `toolhost harness ended: ${this.stderr.trim() || "no output"}` });
    });
  }

  /** Starts the harness for the plugin whose plugin.toml is in `directory`. */
  static async start(plugin: Plugin, directory: string, options: { config?: Record<string, unknown> } = {}): Promise<Harness> {
    // The code's shapes first: a schema the SDK cannot read (zod 3, say)
    // fails the test here, before a harness process could keep it alive.
    await plugin.resolveShapes();
    const exe = process.env.TOOLHOST_BIN ?? "toolhost";
    const scratch = mkdtempSync(join(tmpdir(), "toolhost-harness-"));
    process.env.KANDEV_PLUGIN_DATA_DIR = scratch;
    installWriteRule();
    const proc = spawn(exe, ["harness", resolve(directory)], { stdio: ["pipe", "pipe", "pipe"] });
    await new Promise<void>((ok, fail) => {
      proc.once("spawn", () => ok());
      proc.once("error", (e) =>
        fail(new Error(`the harness runs \`toolhost harness\`: put toolhost on PATH or name it in TOOLHOST_BIN (${e.message})`)),
      );
    });
    const h = new Harness(plugin, proc, scratch);
    const first = await h.next();
    if (!first.manifest) {
      await h.close();
      throw new Error(`toolhost harness: ${first.error ?? JSON.stringify(first)}`);
    }
    try {
      h.giveConfig(first.manifest.config, options.config ?? {});
    } catch (e) {
      await h.close();
      throw e;
    }
    if (first.manifest.checks_shapes) {
      // What the code states, compared with the manifest as `toolhost
      // check --start` and the daemon compare them: a drifted type, a
      // forgotten `schema sync` or a hand-edited schema fails here.
      const bytes = (services.v2.Describe.responseSerialize as (v: unknown) => Buffer)(plugin.described());
      h.send({ shapes: bytes.toString("base64") });
      const answer = await h.next();
      const problems: string[] = answer.drift ?? [];
      if (problems.length) {
        await h.close();
        throw new Drift(problems.join("\n"));
      }
    }
    return h;
  }

  private giveConfig(items: { name: string; secret: boolean; default: unknown }[], given: Record<string, unknown>): void {
    const unknown = Object.keys(given).filter((k) => !items.some((i) => i.name === k));
    if (unknown.length) throw new Error(`plugin.toml declares no config item ${unknown.join(", ")}`);
    const values: Record<string, string | number | boolean> = {};
    const secrets: Record<string, string> = {};
    for (const item of items) {
      const value = given[item.name] ?? item.default;
      if (value === undefined || value === null) continue;
      if (item.secret) secrets[item.name] = String(value);
      else values[item.name] = value as string | number | boolean;
    }
    config.provide(values, secrets);
  }

  private next(): Promise<Record<string, any>> {
    const queued = this.queued.shift();
    if (queued) return Promise.resolve(queued);
    if (this.ended) return Promise.resolve({ error: `toolhost harness ended: ${this.stderr.trim() || "no output"}` });
    return new Promise((ok) => this.waiting.push(ok));
  }

  private send(line: Record<string, unknown>): void {
    this.proc.stdin.write(`${JSON.stringify(line)}\n`);
  }

  /** Calls `tool` (its local name) with `args`, as an agent would. The
   * handler is held to the sandbox's rule for writes: anywhere but the
   * data directory fails with EACCES naming the path. `os.tmpdir()` is
   * inside the data directory while it runs, as `$TMPDIR` is under the
   * daemon (the test's own code does not run meanwhile: it awaits this). */
  async call(tool: string, args?: Record<string, unknown>, options: CallOptions = {}): Promise<Outcome> {
    const temporary = join(this.scratch, ".tmp");
    mkdirSync(temporary, { recursive: true });
    const before = process.env.TMPDIR;
    process.env.TMPDIR = temporary;
    try {
      return await writable.run(realpathSync(this.scratch), () => this.callUnderRule(tool, args, options));
    } finally {
      if (before === undefined) delete process.env.TMPDIR;
      else process.env.TMPDIR = before;
    }
  }

  private async callUnderRule(tool: string, args: Record<string, unknown> | undefined, options: CallOptions): Promise<Outcome> {
    const request: Record<string, unknown> = {
      tool,
      arguments: args ?? null,
      answers: options.answers ?? [],
      can_ask: options.canAsk ?? true,
      progress: options.progress ?? true,
    };
    if (options.surface !== undefined) request.surface = options.surface;
    this.send({ call: request });
    let stream: TestStream | undefined;
    for (;;) {
      const line = await this.next();
      if (line.result) return new Outcome(line.result, line.progress, line.logs, line.questions);
      if (line.unknown_tool) throw new UnknownTool(line.unknown_tool);
      if (line.error) throw new Error(`toolhost harness: ${line.error}`);
      if (line.start) {
        stream = new TestStream(Date.now() + Number(line.deadline_ms), (l) => this.send(l));
        const event = (services.v2.Invoke.requestDeserialize as (b: Buffer) => unknown)(Buffer.from(line.start, "base64"));
        this.plugin.streaming(stream as unknown as grpc.ServerDuplexStream<Record<string, any>, Record<string, unknown>>);
        stream.emit("data", event);
      } else if (line.answer && stream) {
        const event = (services.v2.Invoke.requestDeserialize as (b: Buffer) => unknown)(Buffer.from(line.answer, "base64"));
        stream.emit("data", event);
      } else if (line.cancel && stream) {
        stream.emit("cancelled");
      } else if (line.invoke) {
        const request = (services.v1.InvokeAgentTool.requestDeserialize as (b: Buffer) => unknown)(
          Buffer.from(line.invoke, "base64"),
        );
        const unary = new EventEmitter() as EventEmitter & Record<string, unknown>;
        unary.request = request;
        unary.metadata = new grpc.Metadata();
        unary.getDeadline = () => Date.now() + Number(line.deadline_ms);
        this.plugin.unary(unary as unknown as grpc.ServerUnaryCall<Record<string, any>, unknown>, (e, response) => {
          if (e) this.send({ abort: { code: (e as grpc.ServiceError).code ?? 2, message: (e as grpc.ServiceError).details ?? "" } });
          else {
            const bytes = (services.v1.InvokeAgentTool.responseSerialize as (v: unknown) => Buffer)(response);
            this.send({ response: bytes.toString("base64") });
          }
        });
      }
    }
  }

  /** Stops the harness process and removes the scratch data directory. */
  async close(): Promise<void> {
    if (!this.ended) {
      this.proc.stdin.end();
      await new Promise<void>((ok) => {
        if (this.ended) ok();
        else this.proc.once("exit", () => ok());
      });
    }
    this.lines.close();
    rmSync(this.scratch, { recursive: true, force: true });
  }
}
