// The SDK against a real gRPC client, in process: both protocols, every v2
// event, cancellation and the error path. (The end-to-end tests in the
// repository's tests/ run it under the real daemon.)

import { test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, mkdtempSync, writeFileSync } from "node:fs";
import { inspect } from "node:util";
import { tmpdir } from "node:os";
import { join } from "node:path";
import * as grpc from "@grpc/grpc-js";
import { Config, Content, LogLevel, Plugin, Question, Secret, ToolError, loadConfig, services } from "../dist/index.js";

const seen = {};
const plugin = new Plugin()
  .tool("hello", async (call) => `hello, ${call.arguments.who ?? "world"} (${call.context.taskId})`)
  .tool("token", async (call) => `${call.tokenFor("https://api.test") ?? "none"} ${call.tokenFor("https://other.test") ?? "none"}`)
  .tool("count", (call) => ({ words: call.arguments.text.split(/\s+/).length }))
  .tool("fails", async () => {
    throw new ToolError("the thing is missing; create it first");
  })
  .tool("breaks", async () => {
    throw new RangeError("SECRET-IN-AN-EXCEPTION");
  })
  .tool("rich", async (call) => {
    for (let i = 1; i <= 3; i++) call.progress(i, 3, `step ${i}`);
    call.log(LogLevel.Warning, "careful", { n: 1 });
    call.log(LogLevel.Debug, "too quiet to send");
    const answer = await call.ask(new Question("Proceed?").boolean("ok", "OK").require("ok"));
    return [
      answer.flag("ok") && answer.accepted ? "done" : "stopped",
      Content.image(new Uint8Array([0x89, 0x50]), "image/png").annotated({ audience: ["user"], priority: 0.5 }),
      Content.resourceText("notes://a.md", "text/markdown", "# A"),
    ];
  })
  .tool("sleepy", (call) =>
    new Promise((resolve, reject) => {
      const timer = setTimeout(() => resolve("woke"), 30_000);
      call.signal.addEventListener("abort", () => {
        clearTimeout(timer);
        seen.cancelled = true;
        reject(new Error("cancelled"));
      });
    }),
  );

const V1 = grpc.makeGenericClientConstructor(services.v1, "Plugin");
const V2 = grpc.makeGenericClientConstructor(services.v2, "Plugin");

async function serve() {
  const path = join(mkdtempSync(join(tmpdir(), "sdk-")), "p.sock");
  const server = plugin.server();
  await new Promise((resolve, reject) =>
    server.bindAsync(`unix:${path}`, grpc.ServerCredentials.createInsecure(), (e) => (e ? reject(e) : resolve())),
  );
  return { server, address: `unix:${path}` };
}

const { server, address } = await serve();
const v1 = new V1(address, grpc.credentials.createInsecure());
const v2 = new V2(address, grpc.credentials.createInsecure());
test.after(() => {
  v1.close();
  v2.close();
  server.forceShutdown();
});

const struct = (o) => ({
  fields: Object.fromEntries(Object.entries(o).map(([k, v]) => [k, typeof v === "string" ? { stringValue: v } : { boolValue: v }])),
});
const request = (name, args = {}) => ({ invocation_id: "i1", name, arguments: struct(args), context: { task_id: "t1" } });
const invoke = (req, options = {}) =>
  new Promise((resolve, reject) => v1.InvokeAgentTool(req, options, (e, r) => (e ? reject(e) : resolve(r))));

test("a handler reads the token toolhost exchanged for an audience in one call", async () => {
  const withToken = request("token");
  withToken.context.credentials = [{ audience: "https://api.test", access_token: "tok-1", expires_at_unix_s: 9 }];
  assert.equal((await invoke(withToken)).text, "tok-1 none");
  assert.equal((await invoke(request("token"))).text, "none none");
});

test("protocol 1 calls answer text, structured content and errors", async () => {
  let r = await invoke(request("hello", { who: "ada" }));
  assert.equal(r.text, "hello, ada (t1)");
  assert.equal(r.is_error, false);
  r = await invoke(request("count", { text: "a b c" }));
  assert.equal(r.structured_content.fields.words.numberValue, 3);
  r = await invoke(request("fails"));
  assert.deepEqual([r.text, r.is_error], ["the thing is missing; create it first", true]);
  r = await invoke(request("breaks"));
  assert.ok(r.is_error && r.text.includes("RangeError") && !r.text.includes("SECRET"));
  await assert.rejects(invoke(request("nope")), (e) => e.code === grpc.status.NOT_FOUND);
});

test("protocol 2 carries progress, logs, a question and blocks", async () => {
  const call = v2.Invoke();
  call.write({ start: { request: request("rich"), can_ask: true, wants_progress: true, log_level: 2 } });
  const kinds = [];
  const result = await new Promise((resolve, reject) => {
    call.on("error", reject);
    call.on("data", (event) => {
      kinds.push(event.event);
      if (event.event === "log") {
        assert.equal(event.log.level, 4);
        assert.equal(event.log.message, "careful");
      }
      if (event.event === "question") {
        assert.equal(event.question.message, "Proceed?");
        assert.equal(event.question.requested_schema.fields.properties.structValue.fields.ok.structValue.fields.type.stringValue, "boolean");
        call.write({ answer: { question_id: event.question.id, action: 1, content: struct({ ok: true }) } });
      }
      if (event.event === "result") resolve(event.result);
    });
  });
  call.end();
  assert.equal(kinds.filter((k) => k === "progress").length, 3, kinds.join());
  assert.equal(kinds.filter((k) => k === "log").length, 1);
  assert.equal(result.content[0].text.text, "done");
  assert.equal(result.content[1].image.mime_type, "image/png");
  assert.deepEqual(result.content[1].annotations.audience, [1]);
  assert.equal(result.content[2].resource.text, "# A");
});

test("nothing is sent to a caller that did not ask", async () => {
  const call = v2.Invoke();
  call.write({ start: { request: request("rich"), can_ask: true } });
  const kinds = [];
  const result = await new Promise((resolve, reject) => {
    call.on("error", reject);
    call.on("data", (event) => {
      kinds.push(event.event);
      if (event.event === "question") call.write({ answer: { question_id: event.question.id, action: 2 } });
      if (event.event === "result") resolve(event.result);
    });
  });
  call.end();
  assert.deepEqual(kinds, ["question", "result"]);
  assert.equal(result.content[0].text.text, "stopped");
});

test("cancellation and deadlines reach the handler", async () => {
  delete seen.cancelled;
  const call = v2.Invoke();
  call.on("error", () => {});
  call.write({ start: { request: request("sleepy") } });
  await new Promise((r) => setTimeout(r, 200));
  call.cancel();
  for (let i = 0; i < 100 && !seen.cancelled; i++) await new Promise((r) => setTimeout(r, 20));
  assert.equal(seen.cancelled, true);

  delete seen.cancelled;
  await assert.rejects(invoke(request("sleepy"), { deadline: Date.now() + 300 }), (e) => e.code === grpc.status.DEADLINE_EXCEEDED);
  for (let i = 0; i < 100 && !seen.cancelled; i++) await new Promise((r) => setTimeout(r, 20));
  assert.equal(seen.cancelled, true);
});

test("run by hand, it refuses", async () => {
  delete process.env.KANDEV_PLUGIN;
  assert.equal(await new Plugin().serve(), 1);
});

test("config is read once, deleted, and secrets never print", () => {
  const dir = mkdtempSync(join(tmpdir(), "cfg-"));
  const file = join(dir, "config.json");
  writeFileSync(file, JSON.stringify({ config: { api_url: "https://x", page: 3, on: true }, secrets: { token: "s3cr3t" } }));
  process.env.TOOLHOST_PLUGIN_CONFIG = file;
  const cfg = loadConfig();
  delete process.env.TOOLHOST_PLUGIN_CONFIG;
  assert.equal(existsSync(file), false);
  assert.equal(cfg.get("api_url"), "https://x");
  assert.equal(cfg.get("page"), 3);
  assert.equal(cfg.get("on"), true);
  assert.equal(cfg.get("token"), undefined);
  const token = cfg.secret("token");
  assert.ok(token instanceof Secret);
  assert.equal(token.expose(), "s3cr3t");
  const printed = [String(token), JSON.stringify(token), JSON.stringify(cfg), inspect(token), inspect(cfg), `${token}`].join(" ");
  assert.equal(printed.includes("s3cr3t"), false);
  assert.equal(Config.fromJson("not json").get("api_url"), undefined);
});

test("Describe names the tools with handlers", async () => {
  const answer = await new Promise((resolve, reject) => v2.Describe({}, (e, r) => (e ? reject(e) : resolve(r))));
  assert.deepEqual(answer.tools, [...plugin.tools.keys()].sort());
  assert.match(answer.sdk, /^@toolhost\/plugin \d/);
});

test("a call without the call token is refused", async () => {
  const guarded = new Plugin().tool("hello", async () => "hello");
  const file = join(mkdtempSync(join(tmpdir(), "sdk-token-")), "call-token");
  writeFileSync(file, "0123456789abcdef0123456789abcdef\n");
  process.env.TOOLHOST_PLUGIN_CALL_TOKEN = file;
  try {
    guarded.loadCallToken();
  } finally {
    delete process.env.TOOLHOST_PLUGIN_CALL_TOKEN;
  }
  assert.equal(existsSync(file), false, "the token file is deleted once read");
  const path = join(mkdtempSync(join(tmpdir(), "sdk-")), "g.sock");
  const s = guarded.server();
  await new Promise((resolve, reject) =>
    s.bindAsync(`unix:${path}`, grpc.ServerCredentials.createInsecure(), (e) => (e ? reject(e) : resolve())),
  );
  const c1 = new V1(`unix:${path}`, grpc.credentials.createInsecure());
  const c2 = new V2(`unix:${path}`, grpc.credentials.createInsecure());
  try {
    const call = (metadata) =>
      new Promise((resolve, reject) => c1.InvokeAgentTool(request("hello"), metadata, (e, r) => (e ? reject(e) : resolve(r))));
    const with_ = (token) => {
      const m = new grpc.Metadata();
      if (token !== undefined) m.set("toolhost-call-token", token);
      return m;
    };
    await assert.rejects(call(with_()), (e) => e.code === grpc.status.UNAUTHENTICATED);
    await assert.rejects(call(with_("0".repeat(32))), (e) => e.code === grpc.status.UNAUTHENTICATED);
    const ok = await call(with_("0123456789abcdef0123456789abcdef"));
    assert.equal(ok.text, "hello");
    const stream = c2.Invoke(with_("wrong"));
    const refused = await new Promise((resolve) => {
      stream.on("error", resolve);
      stream.on("data", () => {});
      stream.write({ start: { request: request("hello") } });
    });
    assert.equal(refused.code, grpc.status.UNAUTHENTICATED);
    await assert.rejects(
      new Promise((resolve, reject) => c2.Describe({}, with_("wrong"), (e, r) => (e ? reject(e) : resolve(r)))),
      (e) => e.code === grpc.status.UNAUTHENTICATED,
    );
  } finally {
    c1.close();
    c2.close();
    s.forceShutdown();
  }
});

test("a tool stated in zod 3 fails the harness at once, naming the version it needs", async () => {
  const { Harness } = await import("../dist/testing.js");
  const zod3 = { safeParse: () => ({ success: true }), _def: { typeName: "ZodObject" } };
  const old = new Plugin().tool("t", { description: "A tool.", input: zod3 }, () => "ok");
  await assert.rejects(Harness.start(old, tmpdir()), /zod 4\.1 or later, and this schema is zod 3/);
});

test("the same constraints give the same schema in every SDK (sdk/constraints.schema.json)", async () => {
  const { z } = await import("zod");
  const { readFileSync } = await import("node:fs");
  const shared = JSON.parse(readFileSync(new URL("../../constraints.schema.json", import.meta.url), "utf8"));
  const p = new Plugin().tool(
    "constraints",
    {
      description: "Every kind of bound.",
      input: z.object({
        limit: z.number().int().min(1).max(100),
        ratio: z.number().gt(0).lt(1),
        title: z.string().min(1).max(80),
        slug: z.string().regex(/^[a-z]+$/),
        tags: z.array(z.string()).min(1).max(5),
      }),
    },
    () => "ok",
  );
  await p.resolveShapes();
  const stated = JSON.parse(p.described().shapes[0].input_schema_json);
  // `format` is an annotation, not a rule; the SDKs may differ in it.
  const sorted = (v) =>
    Array.isArray(v)
      ? v.map(sorted)
      : typeof v === "object" && v !== null
        ? Object.fromEntries(Object.keys(v).filter((k) => k !== "format").sort().map((k) => [k, sorted(v[k])]))
        : v;
  stated.required = [...stated.required].sort();
  assert.deepEqual(sorted(stated), sorted(shared));
});
