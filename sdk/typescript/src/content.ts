// What a tool answers: content blocks, structured content, errors.
//
// A handler may return a string (one text block), a plain object
// (structured content, checked against the tool's output schema, with its
// JSON as the text), a Content block, an array of strings and blocks, or a
// ToolResult. Binary data stays a Uint8Array: toolhost base64-encodes it
// for MCP, and checks every block (MIME types against the kind, URIs
// parsed).

import { jsonToStruct, type Json } from "./struct.js";

export type Audience = "user" | "assistant";

/** One content block. Build it with the static methods. */
export class Content {
  private constructor(readonly wire: Record<string, unknown>) {}

  /** Text for the model. */
  static text(text: string): Content {
    return new Content({ text: { text } });
  }

  /** An image: raw bytes and an `image/*` MIME type. */
  static image(data: Uint8Array, mimeType: string): Content {
    return new Content({ image: { data: Buffer.from(data), mime_type: mimeType } });
  }

  /** Audio: raw bytes and an `audio/*` MIME type. */
  static audio(data: Uint8Array, mimeType: string): Content {
    return new Content({ audio: { data: Buffer.from(data), mime_type: mimeType } });
  }

  /** A link to a resource the client may fetch (an absolute URI). */
  static link(
    uri: string,
    name: string,
    more: { mimeType?: string; description?: string; title?: string; size?: number } = {},
  ): Content {
    const link: Record<string, unknown> = {
      uri,
      name,
      mime_type: more.mimeType ?? "",
      description: more.description ?? "",
      title: more.title ?? "",
    };
    if (more.size !== undefined) link.size = String(more.size);
    return new Content({ resource_link: link });
  }

  /** A text resource carried inline, such as a Markdown export. */
  static resourceText(uri: string, mimeType: string, text: string): Content {
    return new Content({ resource: { uri, mime_type: mimeType, text } });
  }

  /** A binary resource carried inline. */
  static resourceBlob(uri: string, mimeType: string, data: Uint8Array): Content {
    return new Content({ resource: { uri, mime_type: mimeType, blob: Buffer.from(data) } });
  }

  /** The block with annotations: who it is for, how much it matters (0 to 1). */
  annotated(a: { audience?: Audience[]; priority?: number }): Content {
    const roles = { user: 1, assistant: 2 };
    const annotations: Record<string, unknown> = {
      audience: (a.audience ?? []).map((r) => roles[r]),
    };
    if (a.priority !== undefined) annotations.priority = a.priority;
    return new Content({ ...this.wire, annotations });
  }

  /** How a protocol-1 host, which carries only text, sees this block. */
  v1Text(): string {
    const w = this.wire as Record<string, any>;
    if (w.text) return w.text.text;
    if (w.image) return `[image ${w.image.mime_type}, ${w.image.data.length} bytes]`;
    if (w.audio) return `[audio ${w.audio.mime_type}, ${w.audio.data.length} bytes]`;
    if (w.resource_link) return `[resource ${w.resource_link.name} (${w.resource_link.uri})]`;
    if (w.resource) return w.resource.text ?? `[resource ${w.resource.uri}]`;
    return "";
  }
}

/** A full result: blocks, structured content, and whether the tool failed. */
export class ToolResult {
  constructor(
    readonly content: Content[] = [],
    readonly structured?: { [key: string]: Json },
    readonly isError = false,
  ) {}
}

/**
 * A failure the model should read: throw it with a message that says what
 * went wrong and what to try instead.
 */
export class ToolError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "ToolError";
  }
}

export type Returned =
  | undefined
  | string
  | Content
  | ToolResult
  | Array<string | Content>
  | { [key: string]: Json };

/** Normalizes whatever a handler returned. */
export function toResult(value: Returned): ToolResult {
  if (value instanceof ToolResult) return value;
  if (value === undefined || value === null) return new ToolResult();
  if (typeof value === "string") return new ToolResult([Content.text(value)]);
  if (value instanceof Content) return new ToolResult([value]);
  if (Array.isArray(value)) {
    return new ToolResult(
      value.map((v) => {
        if (typeof v === "string") return Content.text(v);
        if (v instanceof Content) return v;
        throw new TypeError("a tool returns a string, an object, Content, ToolResult, or an array of strings and Content");
      }),
    );
  }
  return new ToolResult([Content.text(JSON.stringify(value))], value);
}

/** A result as the wire's ToolResult. */
export function toWire(r: ToolResult): Record<string, unknown> {
  const out: Record<string, unknown> = { content: r.content.map((c) => c.wire), is_error: r.isError };
  if (r.structured !== undefined) out.structured_content = jsonToStruct(r.structured);
  return out;
}
