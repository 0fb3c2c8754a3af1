//! The attribute names toolhost sets, from OpenTelemetry's semantic
//! conventions (MCP in the GenAI conventions, RPC, network, error), in one
//! place so a rename in the conventions is a one-line change.
//!
//! The conventions' opt-in attributes that would carry a tool's arguments
//! or result (`gen_ai.tool.call.arguments`, `gen_ai.tool.call.result`) are
//! deliberately absent: toolhost never exports a value.

/// The JSON-RPC method, e.g. `tools/call`.
pub const MCP_METHOD_NAME: &str = "mcp.method.name";
/// The MCP session id (streamable HTTP sessions only).
pub const MCP_SESSION_ID: &str = "mcp.session.id";
/// The negotiated (or requested) MCP protocol version.
pub const MCP_PROTOCOL_VERSION: &str = "mcp.protocol.version";
/// The exposed name of the tool a `tools/call` runs.
pub const GEN_AI_TOOL_NAME: &str = "gen_ai.tool.name";
/// `execute_tool` on a `tools/call`.
pub const GEN_AI_OPERATION_NAME: &str = "gen_ai.operation.name";
/// The value of [`GEN_AI_OPERATION_NAME`] on a tool call.
pub const EXECUTE_TOOL: &str = "execute_tool";
/// The JSON-RPC request id, as a string.
pub const JSONRPC_REQUEST_ID: &str = "jsonrpc.request.id";
/// The JSON-RPC error code of a request answered with an error.
pub const RPC_RESPONSE_STATUS_CODE: &str = "rpc.response.status_code";
/// `pipe` for stdio, `tcp` for HTTP, `unix` for a plugin's socket.
pub const NETWORK_TRANSPORT: &str = "network.transport";
/// `http` for streamable HTTP.
pub const NETWORK_PROTOCOL_NAME: &str = "network.protocol.name";
/// What went wrong: `tool_error` for a tool result with `isError`, the
/// JSON-RPC code for a protocol error, toolhost's outcome code on the
/// pipeline's own spans.
pub const ERROR_TYPE: &str = "error.type";
/// The value of [`ERROR_TYPE`] on a tool result with `isError: true`.
pub const TOOL_ERROR: &str = "tool_error";
/// `grpc` on the CLIENT spans of toolhost's gRPC calls.
pub const RPC_SYSTEM: &str = "rpc.system";
/// The full gRPC service name, e.g. `kandev.plugin.v1.Plugin`.
pub const RPC_SERVICE: &str = "rpc.service";
/// The gRPC method, e.g. `InvokeAgentTool`.
pub const RPC_METHOD: &str = "rpc.method";
/// The numeric gRPC status code of a finished call.
pub const RPC_GRPC_STATUS_CODE: &str = "rpc.grpc.status_code";

/// toolhost's outcome code of a tool call (`ok`, `invalid_arguments`,
/// `timeout`, ...), on the SERVER span beside the conventions' `error.type`.
pub const TOOLHOST_OUTCOME: &str = "toolhost.call.outcome";
/// The plugin a call went to.
pub const TOOLHOST_PLUGIN_ID: &str = "toolhost.plugin.id";
/// The plugin protocol spoken (1 or 2).
pub const TOOLHOST_PLUGIN_PROTOCOL: &str = "toolhost.plugin.protocol";
/// The MCP task a call runs as, when it runs as one.
pub const MCP_TASK_ID: &str = "mcp.task.id";
