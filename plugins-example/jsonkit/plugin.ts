// jsonkit: a toolhost plugin in TypeScript, on the TypeScript SDK
// (sdk/typescript). The manifest (plugin.toml) declares the tools and their
// schemas; this file implements them.

import { Content, Plugin, ToolError, config, type Json } from "@toolhost/plugin";

function parse(text: string): Json {
  try {
    return JSON.parse(text) as Json;
  } catch (e) {
    throw new ToolError(`the text is not valid JSON (${(e as Error).message}); check quotes and commas`);
  }
}

function stats(v: Json, depth = 1): { objects: number; arrays: number; keys: number; values: number; depth: number } {
  const s = { objects: 0, arrays: 0, keys: 0, values: 0, depth };
  const children: Json[] = Array.isArray(v) ? v : v !== null && typeof v === "object" ? Object.values(v) : [];
  if (Array.isArray(v)) s.arrays++;
  else if (v !== null && typeof v === "object") {
    s.objects++;
    s.keys += Object.keys(v).length;
  } else s.values++;
  for (const c of children) {
    const cs = stats(c, depth + 1);
    s.objects += cs.objects;
    s.arrays += cs.arrays;
    s.keys += cs.keys;
    s.values += cs.values;
    s.depth = Math.max(s.depth, cs.depth);
  }
  return s;
}

new Plugin()
  .tool("pretty", (call) => {
    // The operator's default ([[config]] default_indent), or the manifest's.
    const fallback = Number(config.get("default_indent") ?? 2);
    const text = JSON.stringify(parse(call.arguments.json), null, call.arguments.indent ?? fallback);
    return ["Formatted.", Content.resourceText("json://pretty.json", "application/json", text)];
  })
  .tool("stats", (call) => stats(parse(call.arguments.json)))
  .run();
