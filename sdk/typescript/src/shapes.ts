/**
 * Tools from types: a tool's input (and output) stated once in code, as a
 * zod schema (zod 4.1 or later), a TypeBox schema, or plain JSON Schema. The SDK tells
 * toolhost the JSON Schema it stands for (`Describe`), so `toolhost schema
 * sync` writes it into the manifest's schema files and `toolhost check
 * --start` fails when the two drift apart; the manifest stays the
 * contract toolhost checks and serves. A zod schema also parses the
 * arguments, so the handler gets them as its type says (defaults filled
 * in).
 */

import { ToolError } from "./content.js";

/** A zod schema, as far as this SDK needs one. */
export interface ZodLike {
  safeParse(value: unknown): { success: boolean; data?: unknown; error?: { message?: string } };
  _zod?: unknown;
}

/** What a tool's shape is stated in: zod, TypeBox, or a JSON Schema object. */
export type Schema = ZodLike | Record<string, unknown>;

/** The value type a schema stands for: zod's output, TypeBox's `Static`,
 * else any JSON object. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export type Infer<S> = S extends { _output: infer T } ? T : S extends { static: infer T } ? T : Record<string, any>;

/** A typed tool: its description and its shapes. */
export interface ToolSpec<I extends Schema, O extends Schema | undefined = undefined> {
  /** What the tool does, for the model (written into a manifest entry
   * `schema sync` creates). */
  description?: string;
  /** The arguments. */
  input: I;
  /** The structured result; what the handler returns is checked by
   * toolhost against it. */
  output?: O;
}

export function isZod(s: unknown): s is ZodLike {
  return typeof s === "object" && s !== null && typeof (s as ZodLike).safeParse === "function";
}

/** The JSON Schema a schema stands for. */
export async function jsonSchemaOf(s: Schema): Promise<Record<string, unknown>> {
  if (isZod(s)) {
    const own = (s as { toJSONSchema?: (params: Record<string, unknown>) => Record<string, unknown> }).toJSONSchema;
    if (typeof own !== "function") {
      const three = typeof s === "object" && s !== null && "_def" in s && !("_zod" in s);
      throw new Error(
        three
          ? "tools stated in zod need zod 4.1 or later, and this schema is zod 3: npm install zod@^4.1"
          : "tools stated in zod need zod 4.1 or later (a schema's toJSONSchema): npm install zod@^4.1",
      );
    }
    const out = own.call(s, { io: "input", unrepresentable: "throw" });
    delete out.$schema;
    return closed(out);
  }
  // TypeBox's schemas are JSON Schema with symbol keys, which JSON drops.
  return JSON.parse(JSON.stringify(s)) as Record<string, unknown>;
}

/** Every object with declared properties closed to others, as the Python
 * SDK states them: zod's input schemas leave objects open (zod strips
 * unknown keys), and an agent should hear of a misspelt key instead. */
function closed(node: Record<string, unknown>): Record<string, unknown> {
  const walk = (v: unknown): unknown => {
    if (Array.isArray(v)) return v.map(walk);
    if (typeof v !== "object" || v === null) return v;
    const o: Record<string, unknown> = Object.fromEntries(Object.entries(v).map(([k, x]) => [k, walk(x)]));
    if (o.type === "object" && typeof o.properties === "object" && !("additionalProperties" in o)) {
      o.additionalProperties = false;
    }
    return o;
  };
  return walk(node) as Record<string, unknown>;
}

/** The arguments toolhost checked, as the schema's type: a zod schema
 * parses them (defaults filled in); anything else passes them as they are. */
export function parseWith(s: Schema, value: unknown): unknown {
  if (!isZod(s)) return value;
  const parsed = s.safeParse(value);
  if (!parsed.success) {
    // toolhost checked them against the manifest; a difference means the
    // manifest and the code drifted (`toolhost check --start` says where).
    throw new ToolError(
      "the arguments passed toolhost's check but not the tool's own types: its manifest and its code disagree (tell the plugin's author)",
    );
  }
  return parsed.data;
}

/** The first paragraph of a description, on one line. */
export function summary(text: string | undefined): string {
  return (text ?? "").trim().split(/\n\s*\n/)[0].replace(/\s+/g, " ").trim();
}
