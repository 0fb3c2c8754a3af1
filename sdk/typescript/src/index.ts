/**
 * Write toolhost plugins in TypeScript.
 *
 * The manifest (`plugin.toml`) declares every tool and its schema; the code
 * implements them, one function each:
 *
 * ```ts
 * import { Plugin } from "@toolhost/plugin";
 *
 * new Plugin()
 *   .tool("word_count", async (call) => `${call.arguments.text.split(/\s+/).length} words`)
 *   .run();
 * ```
 *
 * The handshake, the magic cookie, the health service, keeping stdout clean,
 * graceful stop and cancellation (`call.signal`) are handled here. With
 * `protocol = 2` under `[runtime]` in the manifest, a tool can also report
 * progress (`call.progress`), log to the caller (`call.log`), ask the user
 * (`await call.ask(new Question(...))`) and answer any `Content`.
 *
 * Values and secrets the operator supplies for the manifest's `[[config]]`
 * items are in `config`: `config.get("api_url")`,
 * `config.secret("token")?.expose()`.
 */

export { Answer, AskError, LogLevel, Question, ToolCall, type CallContext } from "./call.js";
export { Config, Secret, config, loadConfig, type ConfigValue } from "./config.js";
export { Content, ToolError, ToolResult, type Audience, type Returned } from "./content.js";
export { Plugin, services, type Handler } from "./plugin.js";
export type { Json } from "./struct.js";
export { type Infer, type Schema, type ToolSpec } from "./shapes.js";
