//! A plugin: its tools' handlers by local name, and the entry points that
//! serve them.

use crate::call::ToolCall;
use crate::output::{ToolError, ToolOutput};
use crate::serve::{Handler, ServeError};
use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;

/// A plugin: a set of tool handlers by local name.
#[derive(Default, Clone)]
pub struct Plugin {
    pub(crate) tools: HashMap<String, Handler>,
    shapes: Vec<toolhost_proto::plugin_v2::ToolShape>,
}

impl std::fmt::Debug for Plugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut names: Vec<&String> = self.tools.keys().collect();
        names.sort();
        f.debug_struct("Plugin").field("tools", &names).finish()
    }
}

impl Plugin {
    /// A plugin with no tools yet.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// `Describe`'s answer: the tools this code implements and the shapes
    /// it states (the test harness sends it to toolhost too).
    #[cfg(feature = "testing")]
    pub(crate) fn described(&self) -> toolhost_proto::plugin_v2::DescribeResponse {
        let mut tools: Vec<String> = self.tools.keys().cloned().collect();
        tools.sort();
        toolhost_proto::plugin_v2::DescribeResponse {
            tools,
            sdk: concat!("toolhost-plugin-sdk ", env!("CARGO_PKG_VERSION")).to_owned(),
            shapes: self.shapes.clone(),
        }
    }

    /// Registers the handler of the tool declared as `name` in the manifest.
    #[must_use]
    pub fn tool<F, Fut>(mut self, name: impl Into<String>, handler: F) -> Self
    where
        F: Fn(ToolCall) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<ToolOutput, ToolError>> + Send + 'static,
    {
        let handler: Handler = Arc::new(move |call| Box::pin(handler(call)));
        self.tools.insert(name.into(), handler);
        self
    }

    /// States the shape of the tool `name` as the code sees it: its input
    /// schema (and output schema), typically derived from the handler's
    /// argument type. toolhost never serves it: `toolhost schema sync`
    /// writes it into the manifest's schema files, and `toolhost check
    /// --start` fails when the manifest says otherwise.
    #[must_use]
    pub fn shape(
        mut self,
        name: impl Into<String>,
        description: impl Into<String>,
        input: &serde_json::Value,
        output: Option<&serde_json::Value>,
    ) -> Self {
        let name = name.into();
        self.shapes.retain(|s| s.name != name);
        self.shapes.push(toolhost_proto::plugin_v2::ToolShape {
            name,
            input_schema_json: input.to_string(),
            output_schema_json: output.map(ToString::to_string).unwrap_or_default(),
            description: description.into(),
        });
        self
    }

    /// Registers the tool `name` as a function of its arguments as the type
    /// `A`, answering the type `O` as its structured content, and states
    /// both types' JSON Schemas to toolhost (see [`crate::typed`]). The doc
    /// comment of `A` describes the tool (in a manifest entry `schema sync`
    /// creates).
    #[cfg(feature = "types")]
    #[must_use]
    pub fn typed<A, O, F, Fut>(self, name: impl Into<String>, handler: F) -> Self
    where
        A: serde::de::DeserializeOwned + schemars::JsonSchema + Send + 'static,
        O: serde::Serialize + schemars::JsonSchema + 'static,
        F: Fn(A, ToolCall) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<O, ToolError>> + Send + 'static,
    {
        let name = name.into();
        let input = crate::typed::schema_of::<A>();
        // An output schema describes structured content, which is an
        // object: a tool answering a string (or a list) answers text.
        let output = Some(crate::typed::schema_of::<O>())
            .filter(|o| o.get("type").and_then(serde_json::Value::as_str) == Some("object"));
        let structured = output.is_some();
        let description = crate::typed::description_of::<A>().unwrap_or_default();
        let handler = Arc::new(handler);
        self.shape(name.clone(), description, &input, output.as_ref())
            .tool(name, move |call: ToolCall| {
                let handler = Arc::clone(&handler);
                async move {
                    let args: A = serde_json::from_value(serde_json::Value::Object(call.arguments.clone()))
                        .map_err(|_| {
                            // toolhost checked them against the manifest: a
                            // difference means the two drifted.
                            ToolError::new(
                                "the arguments passed toolhost's check but not the tool's own types: its manifest and its code disagree (tell the plugin's author)",
                            )
                        })?;
                    let out = handler(args, call).await?;
                    let value = serde_json::to_value(out)
                        .map_err(|e| ToolError::new(format!("the result cannot be JSON: {e}")))?;
                    Ok(match value {
                        serde_json::Value::Object(o) if structured => ToolOutput::structured(o),
                        serde_json::Value::String(s) => ToolOutput::text(s),
                        other => ToolOutput::text(other.to_string()),
                    })
                }
            })
    }

    /// Serves until SIGTERM or SIGINT. Fails when not started by toolhost
    /// (no magic cookie), when toolhost offers no protocol version this SDK
    /// speaks, or when the socket cannot be served.
    pub async fn serve(self) -> Result<(), ServeError> {
        crate::serve::serve(self.tools, self.shapes).await
    }

    /// Builds a Tokio runtime, serves, and turns the outcome into an exit
    /// status, printing any error on stderr: the whole `main` of a plugin.
    #[must_use]
    pub fn run(self) -> std::process::ExitCode {
        let rt = match tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
        {
            Ok(rt) => rt,
            Err(e) => {
                eprintln!("cannot start the async runtime: {e}");
                return std::process::ExitCode::FAILURE;
            }
        };
        match rt.block_on(self.serve()) {
            Ok(()) => std::process::ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("{e}");
                std::process::ExitCode::FAILURE
            }
        }
    }
}
