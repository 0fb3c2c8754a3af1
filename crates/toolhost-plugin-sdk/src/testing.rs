//! Test a tool with no daemon, and get exactly what an agent would.
//!
//! ```no_run
//! # async fn demo(plugin: toolhost_plugin_sdk::Plugin) -> Result<(), toolhost_plugin_sdk::testing::HarnessError> {
//! use toolhost_plugin_sdk::testing::Harness;
//! let mut h = Harness::start(&plugin, env!("CARGO_MANIFEST_DIR"), &[("api_token", "test")]).await?;
//! let bad = h.call("create_ticket", serde_json::json!({"title": 5})).await?;
//! assert_eq!(bad.error_code(), Some("invalid_arguments"));
//! h.close().await;
//! # Ok(()) }
//! ```
//!
//! The handler runs in the test's own process, and everything around it
//! is toolhost's own: the harness starts `toolhost harness DIR`, which
//! checks each call against the manifest as a daemon does (bounds, the
//! schema with the root closed, the deadline, questions and answers, the
//! output schema, the result's size) and words every refusal as an agent
//! reads it. `toolhost` must be on `PATH` (or named by `TOOLHOST_BIN`).
//!
//! The configuration and the data directory are the process's: the first
//! harness in a test binary gives them (its `config` values, the manifest's
//! defaults, a fresh temporary data directory), and later ones in the same
//! binary share them.

use crate::plugin::Plugin;
use crate::serve::Handler;
use base64::Engine as _;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _};
use toolhost_proto::plugin::AgentToolRequest;
use toolhost_proto::plugin_v2::{self as wire, host_event};

/// Why a harness call could not be made.
#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    /// `toolhost harness` could not be started, or ended.
    #[error("toolhost harness: {0}")]
    Harness(String),
    /// The name is no tool of the manifest on the call's surface (MCP's
    /// protocol error, as an agent gets it).
    #[error("{0}")]
    UnknownTool(String),
    /// A `config` name the manifest does not declare.
    #[error("plugin.toml declares no config item {0}")]
    UnknownConfig(String),
    /// The code and `plugin.toml` disagree: each line names a tool, where,
    /// and the command that writes the code's shapes into the manifest.
    #[error("{}", .0.join("\n"))]
    Drift(Vec<String>),
}

/// What an agent's client received for one call, and what the tool sent
/// its caller on the way.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The MCP `CallToolResult`, as JSON.
    pub result: Value,
    /// Progress updates, in order: `{"progress", "total", "message"}`.
    pub progress: Vec<Value>,
    /// Log messages: `{"level", "logger", "message", "data"}`.
    pub logs: Vec<Value>,
    /// The questions asked: `{"message", "requested_schema"}`.
    pub questions: Vec<Value>,
}

impl Outcome {
    /// The text blocks, joined by newlines: what a text-only agent reads.
    #[must_use]
    pub fn text(&self) -> String {
        self.result["content"]
            .as_array()
            .map(|blocks| {
                blocks
                    .iter()
                    .filter(|b| b["type"] == "text")
                    .filter_map(|b| b["text"].as_str())
                    .collect::<Vec<_>>()
                    .join("\n")
            })
            .unwrap_or_default()
    }

    /// The structured content.
    #[must_use]
    pub fn structured(&self) -> Option<&Value> {
        self.result.get("structuredContent")
    }

    /// MCP's `isError`.
    #[must_use]
    pub fn is_error(&self) -> bool {
        self.result["isError"] == true
    }

    /// toolhost's code when the call failed around the tool.
    #[must_use]
    pub fn error_code(&self) -> Option<&str> {
        self.result
            .pointer("/_meta/error/code")
            .and_then(Value::as_str)
    }
}

/// A plugin's tools, called through toolhost's rules in this process.
pub struct Harness {
    child: tokio::process::Child,
    stdin: tokio::process::ChildStdin,
    lines: tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
    tools: Arc<HashMap<String, Handler>>,
    /// Where handlers run: a thread held to the sandbox's rule for writes.
    handlers: crate::write_rule::HandlerThread,
}

/// The data directory every harness in this test binary gives its
/// handlers (`ToolCall::data_dir()`), made if missing: the one place a
/// handler may write, as under the daemon. A test that builds its plugin
/// around a directory takes it from here, before the harness starts.
///
/// It outlives the test binary (nothing runs at a process's exit to remove
/// it), so the first call also removes the directories that test binaries
/// no longer running left.
#[must_use]
pub fn data_dir() -> std::path::PathBuf {
    let dir = crate::call::DATA_DIR.get_or_init(|| {
        remove_ended_harness_dirs();
        std::env::temp_dir().join(format!("{HARNESS_DIR_PREFIX}{}", std::process::id()))
    });
    let _ = std::fs::create_dir_all(dir);
    dir.clone()
}

const HARNESS_DIR_PREFIX: &str = "toolhost-harness-";

/// Removes `$TMPDIR/toolhost-harness-<pid>` for each `<pid>` no longer
/// running (Linux: no `/proc/<pid>`; elsewhere nothing is removed).
fn remove_ended_harness_dirs() {
    if !Path::new("/proc/self").exists() {
        return;
    }
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.filter_map(Result::ok) {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(HARNESS_DIR_PREFIX))
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
        if is_dir && !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

fn encoded(m: &impl prost::Message) -> String {
    base64::engine::general_purpose::STANDARD.encode(m.encode_to_vec())
}

fn decoded<M: prost::Message + Default>(line: &Value, key: &str) -> Result<M, HarnessError> {
    let text = line[key].as_str().unwrap_or_default();
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text)
        .map_err(|e| HarnessError::Harness(format!("{key}: not base64: {e}")))?;
    M::decode(bytes.as_slice()).map_err(|e| HarnessError::Harness(format!("{key}: {e}")))
}

impl Harness {
    /// Starts the harness for `plugin`, whose `plugin.toml` is in `dir`,
    /// giving its `[[config]]` items these values (the rest their
    /// defaults).
    pub async fn start(
        plugin: &Plugin,
        dir: impl AsRef<Path>,
        config: &[(&str, &str)],
    ) -> Result<Self, HarnessError> {
        let exe = std::env::var_os("TOOLHOST_BIN").unwrap_or_else(|| "toolhost".into());
        Self::start_using(Path::new(&exe), plugin, dir, config).await
    }

    /// [`Harness::start`] with the `toolhost` executable at `toolhost`.
    pub async fn start_using(
        toolhost: &Path,
        plugin: &Plugin,
        dir: impl AsRef<Path>,
        config: &[(&str, &str)],
    ) -> Result<Self, HarnessError> {
        let exe = toolhost;
        let mut child = tokio::process::Command::new(exe)
            .arg("harness")
            .arg(dir.as_ref())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| {
                HarnessError::Harness(format!(
                    "cannot run {}: {e}; put toolhost on PATH or name it in TOOLHOST_BIN",
                    exe.display()
                ))
            })?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(HarnessError::Harness("no pipes to the harness".into()));
        };
        let mut writable = vec![data_dir()];
        // Under the daemon `$TMPDIR` is inside the data directory; here it
        // is the process's, so it stays writable, unless the plugin itself
        // lives there (a checkout under /tmp), where that would let a write
        // beside the code pass.
        let temp = std::env::temp_dir();
        let real = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
        if !real(dir.as_ref()).starts_with(real(&temp)) {
            writable.push(temp);
        }
        let handlers = crate::write_rule::HandlerThread::start(writable).map_err(|e| {
            HarnessError::Harness(format!("cannot start the handlers' thread: {e}"))
        })?;
        let mut h = Self {
            child,
            stdin,
            lines: tokio::io::BufReader::new(stdout).lines(),
            tools: Arc::new(plugin.tools.clone()),
            handlers,
        };
        let first = h.line().await?;
        if first.pointer("/manifest/checks_shapes") == Some(&Value::Bool(true)) {
            // What the code states, compared with the manifest as `toolhost
            // check --start` and the daemon compare them.
            h.send(serde_json::json!({ "shapes": encoded(&plugin.described()) }))
                .await?;
            let answer = h.line().await?;
            let problems: Vec<String> = answer
                .get("drift")
                .and_then(Value::as_array)
                .map(|d| {
                    d.iter()
                        .filter_map(|p| p.as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default();
            if !problems.is_empty() {
                return Err(HarnessError::Drift(problems));
            }
        }
        let Some(items) = first.pointer("/manifest/config").and_then(Value::as_array) else {
            return Err(HarnessError::Harness(format!(
                "unexpected first line: {first}"
            )));
        };
        give_config(items, config)?;
        Ok(h)
    }

    async fn line(&mut self) -> Result<Value, HarnessError> {
        match self.lines.next_line().await {
            Ok(Some(text)) => serde_json::from_str(&text)
                .map_err(|e| HarnessError::Harness(format!("not a JSON line: {e}"))),
            Ok(None) | Err(_) => Err(HarnessError::Harness(
                "it ended (its stderr says why)".into(),
            )),
        }
    }

    async fn send(&mut self, line: Value) -> Result<(), HarnessError> {
        let mut text = line.to_string();
        text.push('\n');
        self.stdin
            .write_all(text.as_bytes())
            .await
            .map_err(|e| HarnessError::Harness(format!("cannot write to it: {e}")))
    }

    /// Calls `tool` (its local name) with `arguments`, as an agent would.
    pub async fn call(&mut self, tool: &str, arguments: Value) -> Result<Outcome, HarnessError> {
        self.call_answering(tool, arguments, Vec::new()).await
    }

    /// [`Harness::call`], answering the tool's questions in order: an
    /// object accepts with those values; `"decline"` and `"cancel"` say no.
    ///
    /// Kept whole on purpose: one loop routes the harness's lines and the
    /// handler's events for the one call in flight.
    pub async fn call_answering(
        &mut self,
        tool: &str,
        arguments: Value,
        answers: Vec<Value>,
    ) -> Result<Outcome, HarnessError> {
        self.send(json!({ "call": { "tool": tool, "arguments": arguments, "answers": answers } }))
            .await?;
        let mut running: Option<crate::serve::RunningCall> = None;
        loop {
            let event = async {
                match running.as_mut() {
                    Some(r) => r.events.recv().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                line = self.line() => {
                    let line = line?;
                    if let Some(result) = line.get("result") {
                        let list = |k: &str| line[k].as_array().cloned().unwrap_or_default();
                        return Ok(Outcome {
                            result: result.clone(),
                            progress: list("progress"),
                            logs: list("logs"),
                            questions: list("questions"),
                        });
                    }
                    if let Some(u) = line.get("unknown_tool") {
                        return Err(HarnessError::UnknownTool(u.as_str().unwrap_or_default().to_owned()));
                    }
                    if let Some(e) = line.get("error") {
                        return Err(HarnessError::Harness(e.as_str().unwrap_or_default().to_owned()));
                    }
                    if line.get("start").is_some() {
                        let first: wire::HostEvent = decoded(&line, "start")?;
                        let Some(host_event::Event::Start(start)) = first.event else {
                            return Err(HarnessError::Harness("a start without its Start".into()));
                        };
                        let name = start.request.as_ref().map(|r| r.name.clone()).unwrap_or_default();
                        match self.tools.get(&name) {
                            Some(handler) => {
                                running = Some(crate::serve::run_call(Arc::clone(handler), start, deadline(&line), None, Some(self.handlers.handle())));
                            }
                            None => {
                                self.send(json!({ "abort": { "code": tonic::Code::NotFound as i32, "message": format!("no tool named {name:?}") } })).await?;
                            }
                        }
                    } else if line.get("answer").is_some() {
                        let event: wire::HostEvent = decoded(&line, "answer")?;
                        if let (Some(host_event::Event::Answer(a)), Some(r)) = (event.event, running.as_ref()) {
                            r.link.answered(a);
                        }
                    } else if line.get("cancel").is_some() {
                        if let Some(r) = running.take() {
                            r.token.cancel();
                        }
                    } else if line.get("invoke").is_some() {
                        let request: AgentToolRequest = decoded(&line, "invoke")?;
                        let reply = self.invoke_v1(request, deadline(&line)).await;
                        self.send(reply).await?;
                    }
                }
                event = event => match event {
                    Some(Ok(e)) => self.send(json!({ "event": encoded(&e) })).await?,
                    Some(Err(status)) => {
                        self.send(json!({ "abort": { "code": status.code() as i32, "message": status.message() } })).await?;
                        running = None;
                    }
                    None => running = None,
                },
            }
        }
    }

    async fn invoke_v1(
        &self,
        request: AgentToolRequest,
        deadline: Option<tokio::time::Instant>,
    ) -> Value {
        let Some(handler) = self.tools.get(&request.name).cloned() else {
            return json!({ "abort": { "code": tonic::Code::NotFound as i32, "message": "no such tool" } });
        };
        let token = tokio_util::sync::CancellationToken::new();
        let call = crate::serve::tool_call(request, deadline, token.clone(), None);
        let ran = self
            .handlers
            .handle()
            .spawn(crate::serve::run_handler(handler, call, token, None))
            .await
            .unwrap_or_else(|e| {
                Err(tonic::Status::internal(format!(
                    "the handler panicked: {e}"
                )))
            });
        match ran {
            Ok(out) => json!({ "response": encoded(&crate::serve::v1_response(&out)) }),
            Err(status) => {
                json!({ "abort": { "code": status.code() as i32, "message": status.message() } })
            }
        }
    }

    /// Stops the harness process.
    pub async fn close(mut self) {
        drop(self.stdin);
        let _ = self.child.wait().await;
    }
}

fn deadline(line: &Value) -> Option<tokio::time::Instant> {
    line["deadline_ms"]
        .as_u64()
        .map(|ms| tokio::time::Instant::now() + std::time::Duration::from_millis(ms))
}

/// The configuration a test gives, over the manifest's defaults; secrets
/// apart, as toolhost delivers them.
fn give_config(items: &[Value], given: &[(&str, &str)]) -> Result<(), HarnessError> {
    for (name, _) in given {
        if !items.iter().any(|i| i["name"] == *name) {
            return Err(HarnessError::UnknownConfig((*name).to_owned()));
        }
    }
    let mut values = serde_json::Map::new();
    let mut secrets = serde_json::Map::new();
    for item in items {
        let name = item["name"].as_str().unwrap_or_default().to_owned();
        let value = match given.iter().find(|(n, _)| *n == name) {
            Some((_, v)) => Value::String((*v).to_owned()),
            None if !item["default"].is_null() => item["default"].clone(),
            None => continue,
        };
        if item["secret"] == true {
            secrets.insert(name, value);
        } else {
            values.insert(name, value);
        }
    }
    let doc = json!({ "config": values, "secrets": secrets });
    crate::config::provide(crate::config::Config::from_json(&doc.to_string()));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_data_dirs_of_ended_test_binaries_are_removed_and_live_ones_kept() {
        if !Path::new("/proc/self").exists() {
            return;
        }
        let Some(ended) =
            (4_000_000u32..4_100_000).find(|p| !Path::new(&format!("/proc/{p}")).exists())
        else {
            panic!("no free pid to stand for an ended process");
        };
        let temp = std::env::temp_dir();
        let left = temp.join(format!("{HARNESS_DIR_PREFIX}{ended}"));
        let live = temp.join(format!("{HARNESS_DIR_PREFIX}{}", std::process::id()));
        for dir in [&left, &live] {
            std::fs::create_dir_all(dir.join("inside")).expect("make");
        }
        remove_ended_harness_dirs();
        assert!(!left.exists(), "an ended binary's directory stayed");
        assert!(
            live.join("inside").exists(),
            "a live binary's directory went"
        );
    }
}
