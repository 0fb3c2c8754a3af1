/**
 * The plugin's configuration: the values and secrets the operator supplied
 * for the `[[config]]` items its manifest declares.
 *
 * toolhost writes them once per process start to a 0600 file named by
 * `TOOLHOST_PLUGIN_CONFIG`; {@link loadConfig} reads it once and deletes it,
 * so a process the plugin starts later finds nothing to read.
 *
 * Plain values and secrets are apart on purpose: `get` never returns a
 * secret, and a {@link Secret} prints as `Secret(..)` (also in JSON), so
 * logging the configuration or a secret by mistake leaks nothing:
 *
 * ```ts
 * import { config } from "@toolhost/plugin";
 * const site = config.get("base_url") ?? "https://jira.example.com";
 * const token = config.secret("token")?.expose();
 * ```
 */

import { readFileSync, rmSync } from "node:fs";
import { inspect } from "node:util";

export const CONFIG_FILE_KEY = "TOOLHOST_PLUGIN_CONFIG";

export type ConfigValue = string | number | boolean;

/** A secret value: never shown by `toString`, `JSON.stringify` or `console.log`. */
export class Secret {
  readonly #value: string;

  constructor(value: string) {
    this.#value = value;
  }

  /** The value itself. */
  expose(): string {
    return this.#value;
  }

  toString(): string {
    return "Secret(..)";
  }

  toJSON(): string {
    return "Secret(..)";
  }

  [inspect.custom](): string {
    return "Secret(..)";
  }
}

/** The configuration values and secrets toolhost gave this process. */
export class Config {
  #values: Map<string, ConfigValue>;
  #secrets: Map<string, Secret>;

  constructor(values: Record<string, ConfigValue> = {}, secrets: Record<string, string> = {}) {
    this.#values = new Map(Object.entries(values));
    this.#secrets = new Map(Object.entries(secrets).map(([k, v]) => [k, new Secret(v)]));
  }

  /** Replaces the values and secrets: for the test harness, which gives a
   * tool the values a test names. */
  provide(values: Record<string, ConfigValue>, secrets: Record<string, string>): void {
    this.#values = new Map(Object.entries(values));
    this.#secrets = new Map(Object.entries(secrets).map(([k, v]) => [k, new Secret(v)]));
  }

  /** Parses toolhost's document, `{"config": {..}, "secrets": {..}}`; anything else is empty. */
  static fromJson(text: string): Config {
    let doc: unknown;
    try {
      doc = JSON.parse(text);
    } catch {
      return new Config();
    }
    if (typeof doc !== "object" || doc === null) return new Config();
    const pick = (v: unknown): Record<string, ConfigValue> => {
      const out: Record<string, ConfigValue> = {};
      if (typeof v === "object" && v !== null) {
        for (const [k, x] of Object.entries(v)) {
          if (typeof x === "string" || typeof x === "number" || typeof x === "boolean") out[k] = x;
        }
      }
      return out;
    };
    const d = doc as Record<string, unknown>;
    const secrets = Object.fromEntries(Object.entries(pick(d.secrets)).map(([k, v]) => [k, String(v)]));
    return new Config(pick(d.config), secrets);
  }

  /** A plain (non-secret) item's value, or undefined. Never a secret: use `secret`. */
  get(name: string): ConfigValue | undefined {
    return this.#values.get(name);
  }

  /** A secret item's value, or undefined. */
  secret(name: string): Secret | undefined {
    return this.#secrets.get(name);
  }

  toJSON(): object {
    return { values: [...this.#values.keys()], secrets: [...this.#secrets.keys()] };
  }

  [inspect.custom](): string {
    return `Config(values: ${[...this.#values.keys()].join(", ")}; secrets: ${[...this.#secrets.keys()].join(", ")})`;
  }
}

/** Reads (and deletes) the file toolhost wrote; empty without one. */
export function loadConfig(): Config {
  const path = process.env[CONFIG_FILE_KEY];
  if (!path) return new Config();
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (e) {
    process.stderr.write(`cannot read the configuration toolhost gave this plugin: ${(e as Error).message}\n`);
    return new Config();
  } finally {
    rmSync(path, { force: true });
  }
  return Config.fromJson(text);
}

/** This process's configuration, read when the SDK is first imported. */
export const config: Config = loadConfig();
