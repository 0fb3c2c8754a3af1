// One tool call as the handler sees it: arguments, context, cancellation
// (an AbortSignal), and (plugin protocol 2) progress, log messages and
// questions to the user.

import { jsonToStruct, jsonToValue, structToJson, type Json, type WireStruct } from "./struct.js";

/** MCP's log levels, lowest first (the wire's numbers). */
export enum LogLevel {
  Debug = 1,
  Info = 2,
  Notice = 3,
  Warning = 4,
  Error = 5,
  Critical = 6,
  Alert = 7,
  Emergency = 8,
}

/** A question got no answer: the caller cannot answer questions (or the
 * plugin runs under protocol 1), or the call ended while waiting. */
export class AskError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "AskError";
  }
}

/**
 * A question for the user: a message and flat fields.
 *
 * `new Question("Delete 3 notes?").boolean("confirm", "Delete them").require("confirm")`
 */
export class Question {
  readonly properties: Record<string, Record<string, Json>> = {};
  readonly required: string[] = [];

  constructor(readonly message: string) {}

  private field(name: string, schema: Record<string, Json>): this {
    this.properties[name] = schema;
    return this;
  }

  /** A yes/no field. */
  boolean(name: string, title: string): this {
    return this.field(name, { type: "boolean", title });
  }

  /** A text field. */
  string(name: string, title: string): this {
    return this.field(name, { type: "string", title });
  }

  /** A whole-number field. */
  integer(name: string, title: string): this {
    return this.field(name, { type: "integer", title });
  }

  /** A number field. */
  number(name: string, title: string): this {
    return this.field(name, { type: "number", title });
  }

  /** A choice among `options`. */
  choice(name: string, title: string, options: string[]): this {
    return this.field(name, { type: "string", title, enum: options });
  }

  /** Marks fields as required. */
  require(...names: string[]): this {
    this.required.push(...names);
    return this;
  }

  schema(): Record<string, Json> {
    const s: Record<string, Json> = { type: "object", properties: this.properties };
    if (this.required.length > 0) s.required = this.required;
    return s;
  }
}

/** The user's answer, already checked by toolhost against the fields. */
export class Answer {
  constructor(
    readonly action: "accept" | "decline" | "cancel",
    readonly values: { [key: string]: Json },
  ) {}

  /** Whether the user accepted. */
  get accepted(): boolean {
    return this.action === "accept";
  }

  /** An accepted boolean field (false otherwise). */
  flag(name: string): boolean {
    return this.accepted && this.values[name] === true;
  }
}

/** The context of a call: who is calling. */
export interface CallContext {
  taskId: string;
  sessionId: string;
  workspaceId: string;
  surface: string;
  /** Tokens by audience (see {@link ToolCall.tokenFor}). */
  credentials?: { [audience: string]: string };
}

/** The protocol-2 side of a call. */
export interface Link {
  wantsProgress: boolean;
  logLevel: number;
  canAsk: boolean;
  /** Sends an event now (or coalesces progress). */
  send(event: Record<string, unknown>, progress?: boolean): void;
  /** Sends an event, waiting for room. */
  sendNow(event: Record<string, unknown>): Promise<void>;
  answers: Map<number, (answer: Record<string, any>) => void>;
  nextQuestion: number;
  /** Answers received: sent with each question, so toolhost can tell a
   * question asked while another is open, whatever the timing. */
  answersSeen: number;
}

/** One call. */
export class ToolCall {
  /** Validated by toolhost against the tool's input schema. */
  readonly arguments: { [key: string]: any };

  constructor(
    readonly invocationId: string,
    readonly name: string,
    args: { [key: string]: any },
    readonly context: CallContext,
    /** Aborted when the call is cancelled or its deadline passes. */
    readonly signal: AbortSignal,
    private readonly link?: Link,
  ) {
    this.arguments = args;
  }

  /** The token to call `audience` with on the caller's behalf: one the
   * manifest declares under `[credentials]` and the operator granted,
   * exchanged by toolhost from the caller's own (which a plugin never sees).
   * `undefined` when the caller proved no identity (a static token, stdio)
   * or the audience was not granted. */
  tokenFor(audience: string): string | undefined {
    return this.context.credentials?.[audience];
  }

  /** Whether the caller asked for progress. */
  get wantsProgress(): boolean {
    return this.link?.wantsProgress ?? false;
  }

  /** Whether the caller can answer a question; when it cannot, asking ends
   * the call with an error that says so. */
  get canAsk(): boolean {
    return this.link?.canAsk ?? false;
  }

  /** Reports progress (increasing). Never blocks; a no-op when nobody
   * listens or under protocol 1. */
  progress(progress: number, total?: number, message = ""): void {
    if (!this.link?.wantsProgress) return;
    const p: Record<string, unknown> = { progress, message };
    if (total !== undefined) p.total = total;
    this.link.send({ progress: p }, true);
  }

  /** Sends a log message to the caller, if it wants this level. */
  log(level: LogLevel, message: string, data?: Json): void {
    const link = this.link;
    if (!link || link.logLevel === 0 || level < link.logLevel) return;
    const log: Record<string, unknown> = { level, message, logger: "" };
    if (data !== undefined) log.data = jsonToValue(data);
    link.send({ log });
  }

  /** Asks the user and waits (within the call's deadline) for the answer. */
  async ask(question: Question): Promise<Answer> {
    const link = this.link;
    if (!link) throw new AskError("this caller cannot answer questions (plugin protocol 1)");
    const id = link.nextQuestion++;
    const answered = new Promise<Record<string, any>>((resolve, reject) => {
      link.answers.set(id, resolve);
      this.signal.addEventListener("abort", () => reject(new AskError("the call ended before the question was answered")), {
        once: true,
      });
    });
    await link.sendNow({
      question: {
        id,
        message: question.message,
        requested_schema: jsonToStruct(question.schema()),
        answers_seen: link.answersSeen,
      },
    });
    const a = await answered;
    const action = a.action === 1 ? "accept" : a.action === 2 ? "decline" : "cancel";
    return new Answer(action, action === "accept" ? structToJson(a.content as WireStruct) : {});
  }
}
