// google.protobuf.Struct and Value, as @grpc/proto-loader represents them
// (oneofs as the name of the field set), to and from plain JSON.

export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

export interface WireValue {
  nullValue?: number;
  numberValue?: number;
  stringValue?: string;
  boolValue?: boolean;
  structValue?: WireStruct;
  listValue?: { values?: WireValue[] };
  kind?: string;
}

export interface WireStruct {
  fields?: Record<string, WireValue>;
}

export function valueToJson(v: WireValue | undefined | null): Json {
  if (!v) return null;
  switch (v.kind) {
    case "numberValue":
      return v.numberValue ?? 0;
    case "stringValue":
      return v.stringValue ?? "";
    case "boolValue":
      return v.boolValue ?? false;
    case "structValue":
      return structToJson(v.structValue);
    case "listValue":
      return (v.listValue?.values ?? []).map(valueToJson);
    default:
      return null;
  }
}

export function structToJson(s: WireStruct | undefined | null): { [key: string]: Json } {
  const out: { [key: string]: Json } = {};
  for (const [k, v] of Object.entries(s?.fields ?? {})) out[k] = valueToJson(v);
  return out;
}

export function jsonToValue(j: unknown): WireValue {
  if (j === null || j === undefined) return { nullValue: 0 };
  if (typeof j === "number") return { numberValue: j };
  if (typeof j === "string") return { stringValue: j };
  if (typeof j === "boolean") return { boolValue: j };
  if (Array.isArray(j)) return { listValue: { values: j.map(jsonToValue) } };
  return { structValue: jsonToStruct(j as Record<string, unknown>) };
}

export function jsonToStruct(o: Record<string, unknown>): WireStruct {
  const fields: Record<string, WireValue> = {};
  for (const [k, v] of Object.entries(o)) fields[k] = jsonToValue(v);
  return { fields };
}
