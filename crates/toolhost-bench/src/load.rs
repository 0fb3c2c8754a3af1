//! A minimal MCP streamable-HTTP client for load: one session per worker
//! (or none, for session-less JSON servers), `tools/call` in a loop.
//!
//! It speaks the wire format directly (JSON-RPC in a POST, the answer as
//! JSON or as an SSE `data:` line) so that its own cost per request stays
//! small and measurable; the harness reports it.

use anyhow::{Context as _, Result, bail};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// One MCP endpoint to drive.
#[derive(Debug, Clone)]
pub struct Endpoint {
    pub url: String,
    pub token: Option<String>,
    pub tool: String,
    /// Whether to open a session first (initialize + initialized).
    pub session: bool,
}

/// A worker's connection state.
pub struct Session {
    http: reqwest::Client,
    ep: Endpoint,
    id: Option<String>,
    next: u64,
}

fn answer(body: &str) -> Result<Value> {
    // JSON, or SSE: take the last `data:` line that parses.
    if let Ok(v) = serde_json::from_str::<Value>(body) {
        return Ok(v);
    }
    body.lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
        .find(|v| v.get("id").is_some())
        .context("no JSON-RPC answer in the response")
}

impl Session {
    pub async fn open(http: reqwest::Client, ep: Endpoint) -> Result<Self> {
        let mut s = Self {
            http,
            ep,
            id: None,
            next: 1,
        };
        if s.ep.session {
            let init = json!({ "jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": { "name": "toolhost-bench", "version": "1" } } });
            let r = s.post(&init).await?;
            s.id = r
                .headers()
                .get("mcp-session-id")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            let _ = r.text().await?;
            let done = json!({ "jsonrpc": "2.0", "method": "notifications/initialized" });
            let _ = s.post(&done).await?.text().await?;
        }
        Ok(s)
    }

    async fn post(&self, body: &Value) -> Result<reqwest::Response> {
        let mut req = self
            .http
            .post(&self.ep.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-11-25")
            .body(body.to_string());
        if let Some(t) = &self.ep.token {
            req = req.header("authorization", format!("Bearer {t}"));
        }
        if let Some(id) = &self.id {
            req = req.header("mcp-session-id", id);
        }
        Ok(req.send().await?)
    }

    /// Ends the session as a well-behaved client does (`DELETE`), so that
    /// memory measured after a load is the load's, not abandoned sessions
    /// waiting for their idle timeout.
    pub async fn close(self) {
        let Some(id) = &self.id else {
            return;
        };
        let mut req = self
            .http
            .delete(&self.ep.url)
            .header("mcp-session-id", id)
            .header("mcp-protocol-version", "2025-11-25");
        if let Some(t) = &self.ep.token {
            req = req.header("authorization", format!("Bearer {t}"));
        }
        let _ = req.send().await;
    }

    /// One `tools/call` with any arguments; answers the outcome word: `ok`,
    /// the pipeline's error code, `unknown_tool`, or `http_<status>`.
    pub async fn outcome(&mut self, tool: &str, arguments: &Value) -> Result<String> {
        self.next += 1;
        let body = json!({ "jsonrpc": "2.0", "id": self.next, "method": "tools/call",
            "params": { "name": tool, "arguments": arguments } });
        let r = self.post(&body).await?;
        let status = r.status();
        let text = r.text().await?;
        if !status.is_success() {
            return Ok(format!("http_{}", status.as_u16()));
        }
        let v = answer(&text)?;
        if v.get("error").is_some() {
            return Ok("unknown_tool".to_owned());
        }
        Ok(v.pointer("/result/_meta/error/code")
            .or_else(|| v.pointer("/result/structuredContent/error/code"))
            .and_then(Value::as_str)
            .unwrap_or("ok")
            .to_owned())
    }

    /// One `tools/call`; the error says what was wrong with the answer.
    pub async fn call(&mut self, arguments: &Value) -> Result<()> {
        self.next += 1;
        let body = json!({ "jsonrpc": "2.0", "id": self.next, "method": "tools/call",
            "params": { "name": self.ep.tool, "arguments": arguments } });
        let r = self.post(&body).await?;
        let status = r.status();
        let text = r.text().await?;
        if !status.is_success() {
            bail!(
                "HTTP {status}: {}",
                text.chars().take(200).collect::<String>()
            );
        }
        let v = answer(&text)?;
        if v.get("error").is_some() || v.pointer("/result/isError") == Some(&Value::Bool(true)) {
            bail!(
                "call failed: {}",
                v.to_string().chars().take(300).collect::<String>()
            );
        }
        Ok(())
    }
}

/// What one run measured.
#[derive(Debug, Default, Clone)]
pub struct Run {
    pub calls: u64,
    pub errors: u64,
    pub first_error: Option<String>,
    pub latencies: Vec<Duration>,
    pub elapsed: Duration,
}

impl Run {
    pub fn merge(&mut self, other: Self) {
        self.calls += other.calls;
        self.errors += other.errors;
        if self.first_error.is_none() {
            self.first_error = other.first_error;
        }
        self.latencies.extend(other.latencies);
    }

    pub fn percentile(&mut self, p: f64) -> Duration {
        if self.latencies.is_empty() {
            return Duration::ZERO;
        }
        self.latencies.sort_unstable();
        let i = ((self.latencies.len() as f64 - 1.0) * p).round() as usize;
        self.latencies[i.min(self.latencies.len() - 1)]
    }

    pub fn throughput(&self) -> f64 {
        self.calls as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// Drives `concurrency` workers for `duration` with an async closure per
/// call (so HTTP and gRPC share the loop); answers what was measured and
/// each worker's state, for the caller to close.
pub async fn drive<F, Fut, S>(
    concurrency: usize,
    duration: Duration,
    mut make: impl FnMut() -> Fut,
    call: F,
) -> Result<(Run, Vec<S>)>
where
    Fut: std::future::Future<Output = Result<S>>,
    S: Send + 'static,
    F: Fn(S) -> std::pin::Pin<Box<dyn std::future::Future<Output = (S, Result<()>)> + Send>>
        + Send
        + Sync
        + Copy
        + 'static,
{
    let mut states = Vec::with_capacity(concurrency);
    for _ in 0..concurrency {
        states.push(make().await?);
    }
    let start = Instant::now();
    let deadline = start + duration;
    let mut tasks = tokio::task::JoinSet::new();
    for mut state in states {
        tasks.spawn(async move {
            let mut run = Run::default();
            while Instant::now() < deadline {
                let t = Instant::now();
                let (s, r) = call(state).await;
                state = s;
                run.latencies.push(t.elapsed());
                run.calls += 1;
                if let Err(e) = r {
                    run.errors += 1;
                    if run.first_error.is_none() {
                        run.first_error = Some(e.to_string());
                    }
                }
            }
            (run, state)
        });
    }
    let mut total = Run::default();
    let mut states = Vec::with_capacity(concurrency);
    while let Some(r) = tasks.join_next().await {
        let (run, state) = r?;
        total.merge(run);
        states.push(state);
    }
    total.elapsed = start.elapsed();
    Ok((total, states))
}
