//! `testplug`: a plugin that misbehaves on demand, for the end-to-end tests.
//!
//! Start-up behaviour comes from `--mode` (or `TESTPLUG_MODE`):
//! `normal`; `once` (normal on the first start, hangs before the handshake on
//! every later one); `exit-early` (exits before the handshake); `silent` (never
//! prints one); `malformed`, `version`, `answers-2`, `tcp` (prints a bad handshake
//! line);
//! `never-healthy` (serves the tool service but no health service);
//! `slow-start` (normal, after 1.5 s before the handshake).
//!
//! Tools (normal mode): `echo` and `echo_report` return their arguments and
//! context; `slow` (and `nap`, declared with a short deadline)
//! waits `ms` milliseconds or until cancelled; `crash` exits the process
//! mid-call; `count` says how many calls it has seen; `big` answers `bytes`
//! bytes of text; `bad_output` answers structured content of the wrong shape;
//! `flood` prints `lines` lines on stdout and stderr (some very long);
//! `env` answers its environment, its open descriptors and how many
//! connections it accepted and holds (`accepted`); `config` answers
//! the configuration items named in `names` (secrets as fingerprints).
//!
//! Sandbox probes, each answering what happened (never file content):
//! `read_file`, `write_file` (`path`), `spawn_many` (starts up to `max`
//! processes), `alloc` (`mb` MiB), `connect` (TCP to 127.0.0.1:`port`), `connect_unix` (`path`),
//! `caps` (its capability sets), `mknod` (a character device at `path`),
//! `call_socket` (calls another plugin's socket at `path` as if it were toolhost),
//! `hog` (a writer of bytes or inodes that never stops, in a thread or a
//! detached grandchild), `links` (one file and `count` hard links to it).
//!
//! Protocol-2 tools (served when the manifest says `protocol = 2`):
//! `media` answers one block of every kind; `steps` reports `steps`
//! progress updates `pause_ms` apart and logs one message per level;
//! `confirm` asks the user a question and says what came back; `bad_block`
//! answers an image with a text MIME type; `rolling` sleeps `ms`
//! milliseconds reporting progress every 100 ms; `bad_question` asks with a
//! nested schema; `two_questions` asks two at once; `huge` answers `bytes`
//! bytes of image.
//!
//! Every invocation and every cancellation is appended to `events.log` in
//! the data directory, one line each, so tests can count what the plugin
//! really saw.

#![forbid(unsafe_code)]

use serde_json::{Map, Value, json};
use std::io::Write as _;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use toolhost_plugin_sdk::{
    Answer, AskError, Audience, Content, LogLevel, Plugin, Question, ToolCall, ToolError,
    ToolOutput,
};

static CALLS: AtomicU64 = AtomicU64::new(0);

fn event(line: &str) {
    let Some(dir) = ToolCall::data_dir() else {
        return;
    };
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("events.log"))
    {
        // One write per line: O_APPEND keeps concurrent lines whole.
        let _ = f.write_all(format!("{line}\n").as_bytes());
    }
}

/// A whole-number argument, or `default`.
fn number(call: &ToolCall, name: &str, default: u64) -> u64 {
    call.arguments
        .get(name)
        .and_then(Value::as_u64)
        .unwrap_or(default)
}

fn record(call: &ToolCall) {
    CALLS.fetch_add(1, Ordering::SeqCst);
    event(&format!(
        "invoked {} {} task={} session={} surface={}",
        call.name,
        call.invocation_id,
        call.context.task_id,
        call.context.session_id,
        call.context.surface
    ));
}

async fn echo(call: ToolCall) -> Result<ToolOutput, ToolError> {
    record(&call);
    let mut out = Map::new();
    out.insert("arguments".into(), Value::Object(call.arguments.clone()));
    out.insert(
        "context".into(),
        json!({
            "task_id": call.context.task_id, "session_id": call.context.session_id,
            "workspace_id": call.context.workspace_id, "surface": call.context.surface,
        }),
    );
    out.insert("invocation_id".into(), json!(call.invocation_id));
    Ok(ToolOutput::structured(out).with_text("echoed"))
}

async fn slow(call: ToolCall) -> Result<ToolOutput, ToolError> {
    record(&call);
    let ms = number(&call, "ms", 60_000);
    tokio::select! {
        () = call.cancelled() => {
            event(&format!("cancelled {} {}", call.name, call.invocation_id));
            Err(ToolError::new("cancelled"))
        }
        () = tokio::time::sleep(Duration::from_millis(ms)) => Ok(ToolOutput::text(format!("slept {ms} ms"))),
    }
}

async fn crash(call: ToolCall) -> Result<ToolOutput, ToolError> {
    record(&call);
    std::process::exit(42);
}

async fn count(call: ToolCall) -> Result<ToolOutput, ToolError> {
    record(&call);
    Ok(ToolOutput::text(CALLS.load(Ordering::SeqCst).to_string()))
}

async fn big(call: ToolCall) -> Result<ToolOutput, ToolError> {
    record(&call);
    let n = number(&call, "bytes", 2 << 20);
    Ok(ToolOutput::text(
        "x".repeat(usize::try_from(n).unwrap_or(0)),
    ))
}

async fn flood(call: ToolCall) -> Result<ToolOutput, ToolError> {
    record(&call);
    let lines = number(&call, "lines", 10_000);
    let long = "z".repeat(10_000);
    for i in 0..lines {
        println!(
            "flood line {i} {}",
            if i % 100 == 0 { long.as_str() } else { "" }
        );
        eprintln!("{{\"level\":\"debug\",\"msg\":\"flood {i}\"}}");
    }
    Ok(ToolOutput::text(format!("printed {lines} lines")))
}

async fn bad_output(call: ToolCall) -> Result<ToolOutput, ToolError> {
    record(&call);
    let mut out = Map::new();
    out.insert("count".into(), json!("not a number"));
    Ok(ToolOutput::structured(out))
}

/// Serves the tool service without any health service.
async fn never_healthy() -> ExitCode {
    let dir = std::env::temp_dir().join(format!("testplug-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let path = dir.join("p.sock");
    let _ = std::fs::remove_file(&path);
    let Ok(listener) = tokio::net::UnixListener::bind(&path) else {
        return ExitCode::FAILURE;
    };
    println!("1|1|unix|{}|grpc", path.display());
    let _ = std::io::stdout().flush();
    let svc = toolhost_proto::plugin::plugin_server::PluginServer::new(NoTools);
    let _ = tonic::transport::Server::builder()
        .add_service(svc)
        .serve_with_incoming(tokio_stream::wrappers::UnixListenerStream::new(listener))
        .await;
    ExitCode::SUCCESS
}

struct NoTools;

#[tonic::async_trait]
impl toolhost_proto::plugin::plugin_server::Plugin for NoTools {
    async fn invoke_agent_tool(
        &self,
        _: tonic::Request<toolhost_proto::plugin::AgentToolRequest>,
    ) -> Result<tonic::Response<toolhost_proto::plugin::AgentToolResponse>, tonic::Status> {
        Err(tonic::Status::unavailable("not ready"))
    }
}

fn main() -> ExitCode {
    if let Ok(role) = std::env::var("TESTPLUG_ADMIN_HELPER") {
        return admin_helper(&role);
    }
    let args: Vec<String> = std::env::args().collect();
    if let [_, flag, dir, kind] = args.as_slice()
        && flag == "--writer"
    {
        keep_writing(std::path::Path::new(dir), kind);
    }
    let mode = args
        .iter()
        .position(|a| a == "--mode")
        .and_then(|i| args.get(i + 1).cloned())
        .or_else(|| std::env::var("TESTPLUG_MODE").ok())
        .unwrap_or_else(|| "normal".to_owned());
    event(&format!("started {} {mode}", std::process::id()));
    let hang = || loop {
        std::thread::sleep(Duration::from_secs(3600));
    };
    match mode.as_str() {
        "exit-early" => {
            eprintln!("testplug: exiting before the handshake, as asked");
            ExitCode::from(3)
        }
        "silent" => hang(),
        "malformed" | "version" | "answers-2" | "tcp" | "foreign" => {
            let foreign = format!(
                "1|1|unix|{}|grpc",
                std::env::var("TESTPLUG_SOCKET").unwrap_or_default()
            );
            let line = match mode.as_str() {
                "malformed" => "hello from a confused plugin",
                "version" => "1|7|unix|/tmp/x.sock|grpc",
                "answers-2" => "1|2|unix|/tmp/x.sock|grpc",
                "foreign" => foreign.as_str(),
                _ => "1|1|tcp|127.0.0.1:4000|grpc",
            };
            println!("{line}");
            let _ = std::io::stdout().flush();
            hang()
        }
        "slow-start" => {
            // Takes its time before the handshake, as a big runtime would.
            std::thread::sleep(Duration::from_millis(1500));
            tools().run()
        }
        "never-healthy" => match tokio::runtime::Runtime::new() {
            Ok(rt) => rt.block_on(never_healthy()),
            Err(_) => ExitCode::FAILURE,
        },
        "once" => {
            // Serves normally on the first start; every later start hangs
            // before the handshake, so the plugin stays starting/restarting.
            let marker = ToolCall::data_dir().map(|d| d.join("started-once"));
            if marker.as_ref().is_some_and(|m| m.exists()) {
                return hang();
            }
            if let Some(m) = marker {
                let _ = std::fs::write(m, b"");
            }
            tools().run()
        }
        _ => tools().run(),
    }
}

async fn env(call: ToolCall) -> Result<ToolOutput, ToolError> {
    record(&call);
    let vars: Map<String, Value> = std::env::vars_os()
        .map(|(k, v)| (k.to_string_lossy().into_owned(), json!(v.to_string_lossy())))
        .collect();
    // Where each open descriptor leads (the plugin's own included).
    let fds: Vec<String> = std::fs::read_dir("/proc/self/fd")
        .map(|d| {
            d.filter_map(Result::ok)
                .filter_map(|e| std::fs::read_link(e.path()).ok())
                .map(|t| t.display().to_string())
                .collect()
        })
        .unwrap_or_default();
    let mut out = Map::new();
    out.insert("vars".into(), Value::Object(vars));
    out.insert("accepted".into(), json!(accepted_connections(&fds)));
    out.insert("fds".into(), json!(fds));
    Ok(ToolOutput::structured(out))
}

/// How many connections this process accepted and holds open, among its
/// descriptors `fds` (as `/proc/self/fd` links them): `/proc/net/unix` shows
/// an accepted socket with its listener's path, connected (state 03). `None`
/// when that table cannot be read.
fn accepted_connections(fds: &[String]) -> Option<usize> {
    let table = std::fs::read_to_string("/proc/net/unix").ok()?;
    let mine: std::collections::HashSet<&str> = fds
        .iter()
        .filter_map(|f| f.strip_prefix("socket:[")?.strip_suffix(']'))
        .collect();
    Some(
        table
            .lines()
            .skip(1)
            .filter(|line| {
                let cols: Vec<&str> = line.split_whitespace().collect();
                // Num RefCount Protocol Flags Type St Inode Path
                cols.len() >= 8 && cols[5] == "03" && mine.contains(cols[6])
            })
            .count(),
    )
}

async fn media(call: ToolCall) -> Result<ToolOutput, ToolError> {
    record(&call);
    let bytes: Vec<u8> = (0..=255).collect();
    let mut structured = Map::new();
    structured.insert("blocks".into(), json!(7));
    Ok(ToolOutput::blocks([
        Content::text("every kind")
            .for_audience(&[Audience::Assistant])
            .with_priority(0.25),
        Content::image(bytes.clone(), "image/png"),
        Content::audio(bytes.clone(), "audio/wav"),
        Content::link("https://example.com/report.pdf", "report")
            .with_mime_type("application/pdf")
            .with_description("the full report")
            .with_title("Report")
            .with_size(1234),
        Content::resource_text(
            "notes://export/all.md",
            "text/markdown",
            "# Notes\n\n- one\n",
        ),
        Content::resource_blob("blob://data.bin", "application/octet-stream", bytes),
        Content::text("end").for_audience(&[Audience::User]),
    ])
    .with_structured(structured))
}

async fn steps(call: ToolCall) -> Result<ToolOutput, ToolError> {
    record(&call);
    let n = number(&call, "steps", 5);
    let pause = number(&call, "pause_ms", 0);
    let note = call
        .arguments
        .get("note")
        .and_then(Value::as_str)
        .unwrap_or("");
    for level in [
        LogLevel::Debug,
        LogLevel::Info,
        LogLevel::Warning,
        LogLevel::Error,
    ] {
        call.log_with(
            level,
            format!("{level:?} message {note}"),
            Some(json!({"level": format!("{level:?}")})),
        );
    }
    for i in 1..=n {
        #[allow(clippy::cast_precision_loss)]
        call.progress(i as f64, Some(n as f64), format!("step {i} of {n}"));
        if pause > 0 {
            tokio::select! {
                () = call.cancelled() => return Err(ToolError::new("cancelled")),
                () = tokio::time::sleep(Duration::from_millis(pause)) => {}
            }
        }
    }
    Ok(ToolOutput::text(format!("{n} steps done")))
}

async fn confirm(call: ToolCall) -> Result<ToolOutput, ToolError> {
    record(&call);
    let q = Question::new("Delete the notes?")
        .boolean("confirm", "Delete them for good")
        .string("reason", "Why")
        .required("confirm");
    event(&format!("asking {}", call.invocation_id));
    let answer = call.ask(q).await;
    let said = match &answer {
        Ok(Answer::Accept(v)) => format!("accepted {}", Value::Object(v.clone())),
        Ok(Answer::Decline) => "declined".to_owned(),
        Ok(Answer::Cancel) => "cancelled by the user".to_owned(),
        Err(AskError::CannotAsk) => "cannot ask".to_owned(),
        Err(AskError::Ended) => "ended".to_owned(),
    };
    event(&format!("answered {} {said}", call.invocation_id));
    if call.is_cancelled() {
        event(&format!("cancelled {} {}", call.name, call.invocation_id));
    }
    answer?;
    Ok(ToolOutput::text(said))
}

async fn bad_block(call: ToolCall) -> Result<ToolOutput, ToolError> {
    record(&call);
    Ok(ToolOutput::blocks([Content::image(
        b"SECRET-BLOCK-BYTES".to_vec(),
        "text/plain",
    )]))
}

async fn bad_question(call: ToolCall) -> Result<ToolOutput, ToolError> {
    record(&call);
    let mut nested = Map::new();
    nested.insert("type".into(), json!("object"));
    let q = Question::new("Where?").field_schema("address", nested);
    let _ = call.ask(q).await;
    Ok(ToolOutput::text("asked"))
}

async fn two_questions(call: ToolCall) -> Result<ToolOutput, ToolError> {
    record(&call);
    let (a, b) = tokio::join!(
        call.ask(Question::new("First?").boolean("ok", "OK")),
        call.ask(Question::new("Second?").boolean("ok", "OK")),
    );
    Ok(ToolOutput::text(format!("{} {}", a.is_ok(), b.is_ok())))
}

async fn huge(call: ToolCall) -> Result<ToolOutput, ToolError> {
    record(&call);
    let n = number(&call, "bytes", 2 << 20);
    Ok(ToolOutput::blocks([Content::image(
        vec![7; usize::try_from(n).unwrap_or(0)],
        "image/png",
    )]))
}

async fn rolling(call: ToolCall) -> Result<ToolOutput, ToolError> {
    record(&call);
    let ms = number(&call, "ms", 1000);
    let started = tokio::time::Instant::now();
    let mut i = 0.0;
    while started.elapsed() < Duration::from_millis(ms) {
        i += 1.0;
        call.progress(i, None, "");
        tokio::select! {
            () = call.cancelled() => {
                event(&format!("cancelled {} {}", call.name, call.invocation_id));
                return Err(ToolError::new("cancelled"));
            }
            () = tokio::time::sleep(Duration::from_millis(100)) => {}
        }
    }
    Ok(ToolOutput::text(format!("rolled {ms} ms")))
}

/// Every tool, or with `TESTPLUG_TOOLS=a,b,...` only those named: a
/// benchmark's plugin that serves exactly the tools its manifest declares.
fn tools() -> Plugin {
    let only: Option<Vec<String>> = std::env::var("TESTPLUG_TOOLS")
        .ok()
        .map(|v| v.split(',').map(str::to_owned).collect());
    let keep = |name: &str| only.as_ref().is_none_or(|o| o.iter().any(|n| n == name));
    let mut plugin = Plugin::new();
    macro_rules! serve {
        ($($name:literal => $handler:expr),* $(,)?) => {
            $(if keep($name) {
                plugin = plugin.tool($name, $handler);
            })*
        };
    }
    serve!(
        "env" => env,
        "echo" => echo,
        "echo_report" => echo,
        "nap" => slow,
        "only_task" => count,
        "flood" => flood,
        "slow" => slow,
        "crash" => crash,
        "count" => count,
        "big" => big,
        "bad_output" => bad_output,
        "media" => media,
        "steps" => steps,
        "confirm" => confirm,
        "bad_block" => bad_block,
        "rolling" => rolling,
        "still" => rolling,
        "bad_question" => bad_question,
        "two_questions" => two_questions,
        "huge" => huge,
        "config" => config,
        "read_file" => read_file,
        "write_file" => write_file,
        "fill" => fill,
        "hog" => hog,
        "links" => links,
        "serve_unix" => serve_unix,
        "stderr_bytes" => stderr_bytes,
        "call_api" => call_api,
        "spawn_many" => spawn_many,
        "alloc" => alloc,
        "connect" => connect,
        "connect_unix" => connect_unix,
        "caps" => caps,
        "mknod" => mknod,
        "call_socket" => call_socket,
        "net_probe" => net_probe,
        "admin_attack" => admin_attack,
    );
    plugin
}

/// Attacks the admin socket at `path` the ways a plugin gets past a peer
/// check that goes by pid, by `kind`: `direct`; `reaped` (a child
/// connects, hands the connection over, exits and is reaped before the
/// connection is used); `grandchild` (a double-forked process in a
/// session of its own connects and calls). Says how `GetStatus` was
/// answered: refused `closed` (at the door), refused `unauthenticated`
/// (by the token), or `answered`.
async fn admin_attack(call: ToolCall) -> Result<ToolOutput, ToolError> {
    use std::os::fd::OwnedFd;
    record(&call);
    let path = text_arg(&call, "path").to_owned();
    let fail = |e: std::io::Error| ToolError::new(format!("the attack could not run: {e}"));
    let exe = std::env::current_exe().map_err(fail)?;
    let outcome = match text_arg(&call, "kind") {
        "direct" => match tokio::net::UnixStream::connect(&path).await {
            Ok(s) => admin_get_status(s).await,
            Err(_) => "closed",
        },
        "reaped" => {
            let (mine, theirs) = std::os::unix::net::UnixStream::pair().map_err(fail)?;
            let mut child = std::process::Command::new(&exe)
                .env("TESTPLUG_ADMIN_HELPER", "handover")
                .env("TESTPLUG_ADMIN_PATH", &path)
                .stdin(OwnedFd::from(theirs))
                .stdout(std::process::Stdio::null())
                .spawn()
                .map_err(fail)?;
            let handed = tokio::task::spawn_blocking(move || receive_fd(&mine))
                .await
                .map_err(|e| fail(std::io::Error::other(e)))?;
            let _ = child.wait();
            match handed {
                Some(fd) => {
                    let s = std::os::unix::net::UnixStream::from(fd);
                    s.set_nonblocking(true).map_err(fail)?;
                    admin_get_status(tokio::net::UnixStream::from_std(s).map_err(fail)?).await
                }
                None => "closed",
            }
        }
        "grandchild" => {
            let out = tokio::process::Command::new(&exe)
                .env("TESTPLUG_ADMIN_HELPER", "double-fork")
                .env("TESTPLUG_ADMIN_PATH", &path)
                .stdin(std::process::Stdio::null())
                .output()
                .await
                .map_err(fail)?;
            match String::from_utf8_lossy(&out.stdout).trim() {
                "answered" => "answered",
                "unauthenticated" => "unauthenticated",
                _ => "closed",
            }
        }
        other => return Err(ToolError::new(format!("no attack {other:?}"))),
    };
    if outcome == "answered" {
        Ok(ToolOutput::text("answered"))
    } else {
        Err(ToolError::new(format!("refused: {outcome}")))
    }
}

/// The helper processes of `admin_attack`, run as this same binary:
/// `handover` connects and passes the connection to its parent on stdin,
/// then exits; `double-fork` starts a `call` in a new session and exits
/// at once; `call` connects, calls and prints the outcome.
fn admin_helper(role: &str) -> ExitCode {
    let path = std::env::var("TESTPLUG_ADMIN_PATH").unwrap_or_default();
    match role {
        "handover" => {
            use std::os::fd::AsFd as _;
            let Ok(conn) = std::os::unix::net::UnixStream::connect(&path) else {
                return ExitCode::FAILURE;
            };
            let stdin = std::io::stdin();
            let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
            let mut control = rustix::net::SendAncillaryBuffer::new(&mut space);
            let fds = [conn.as_fd()];
            control.push(rustix::net::SendAncillaryMessage::ScmRights(&fds));
            let sent = rustix::net::sendmsg(
                stdin.as_fd(),
                &[std::io::IoSlice::new(b"x")],
                &mut control,
                rustix::net::SendFlags::empty(),
            );
            if sent.is_ok() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        "double-fork" => {
            let Ok(exe) = std::env::current_exe() else {
                return ExitCode::FAILURE;
            };
            // setsid(1) forks when its caller leads a process group; this
            // process does not, so the call runs in a new session, and
            // this process exits without waiting for it.
            let started = std::process::Command::new("setsid")
                .arg(exe)
                .env("TESTPLUG_ADMIN_HELPER", "call")
                .spawn();
            if started.is_ok() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        "call" => {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return ExitCode::FAILURE;
            };
            let outcome = rt.block_on(async {
                match tokio::net::UnixStream::connect(&path).await {
                    Ok(s) => admin_get_status(s).await,
                    Err(_) => "closed",
                }
            });
            println!("{outcome}");
            ExitCode::SUCCESS
        }
        _ => ExitCode::FAILURE,
    }
}

/// One descriptor passed over `sock`, or none.
fn receive_fd(sock: &std::os::unix::net::UnixStream) -> Option<std::os::fd::OwnedFd> {
    let mut byte = [0u8; 1];
    let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = rustix::net::RecvAncillaryBuffer::new(&mut space);
    rustix::net::recvmsg(
        sock,
        &mut [std::io::IoSliceMut::new(&mut byte)],
        &mut control,
        rustix::net::RecvFlags::empty(),
    )
    .ok()?;
    control.drain().find_map(|m| match m {
        rustix::net::RecvAncillaryMessage::ScmRights(mut fds) => fds.next(),
        _ => None,
    })
}

/// `GetStatus` over an admin connection made already, without a token.
async fn admin_get_status(stream: tokio::net::UnixStream) -> &'static str {
    use toolhost_proto::admin::{GetStatusRequest, admin_client::AdminClient};
    let slot = std::sync::Arc::new(std::sync::Mutex::new(Some(stream)));
    let channel = tonic::transport::Endpoint::from_static("http://admin.invalid")
        .connect_with_connector(tower::service_fn(move |_: tonic::transport::Uri| {
            let taken = slot.lock().ok().and_then(|mut s| s.take());
            async move {
                taken
                    .map(hyper_util::rt::TokioIo::new)
                    .ok_or_else(|| std::io::Error::other("one connection only"))
            }
        }))
        .await;
    let Ok(channel) = channel else {
        return "closed";
    };
    match AdminClient::new(channel)
        .get_status(GetStatusRequest {})
        .await
    {
        Ok(_) => "answered",
        Err(s) if s.code() == tonic::Code::Unauthenticated => "unauthenticated",
        Err(_) => "closed",
    }
}

/// One way around TCP rules, by `kind`, towards 127.0.0.1:`port`: `mptcp`
/// (an MPTCP connection), `tfo` (TCP Fast Open), `listen` (a listener on
/// an unbound TCP socket), `udp` (a datagram), `raw` (a raw ICMP socket),
/// `packet` (a packet socket).
async fn net_probe(call: ToolCall) -> Result<ToolOutput, ToolError> {
    use rustix::net::{AddressFamily, SendFlags, SocketType, ipproto, socket};
    record(&call);
    let port = u16::try_from(number(&call, "port", 1)).unwrap_or(1);
    let target = std::net::SocketAddrV4::new(std::net::Ipv4Addr::LOCALHOST, port);
    let fastopen = SendFlags::from_bits_retain(0x2000_0000);
    let done: Result<&str, rustix::io::Errno> = match text_arg(&call, "kind") {
        "mptcp" => socket(
            AddressFamily::INET,
            SocketType::STREAM,
            Some(ipproto::MPTCP),
        )
        .and_then(|s| rustix::net::connect(&s, &target))
        .map(|()| "connected"),
        "tfo" => socket(AddressFamily::INET, SocketType::STREAM, None)
            .and_then(|s| rustix::net::sendto(&s, b"x", fastopen, &target))
            .map(|_| "sent"),
        "listen" => socket(AddressFamily::INET, SocketType::STREAM, None)
            .and_then(|s| rustix::net::listen(&s, 1))
            .map(|()| "listening"),
        "udp" => socket(AddressFamily::INET, SocketType::DGRAM, None)
            .and_then(|s| rustix::net::sendto(&s, b"x", SendFlags::empty(), &target))
            .map(|_| "sent"),
        "raw" => {
            socket(AddressFamily::INET, SocketType::RAW, Some(ipproto::ICMP)).map(|_| "opened")
        }
        "packet" => socket(AddressFamily::PACKET, SocketType::RAW, None).map(|_| "opened"),
        other => return Err(ToolError::new(format!("no probe {other:?}"))),
    };
    match done {
        Ok(what) => Ok(ToolOutput::text(what)),
        Err(e) => Err(ToolError::new(format!("refused: {e}"))),
    }
}

/// Calls `count` on the plugin socket at `path` as if it were toolhost,
/// with a forged task: what one plugin would try against another.
async fn call_socket(call: ToolCall) -> Result<ToolOutput, ToolError> {
    use toolhost_proto::plugin::{AgentToolContext, AgentToolRequest, plugin_client::PluginClient};
    record(&call);
    let channel = toolhost_proto::contract::connect_unix(
        tonic::transport::Endpoint::from_static("http://plugin.invalid"),
        std::path::PathBuf::from(text_arg(&call, "path")),
    )
    .await
    .map_err(|e| ToolError::new(format!("refused: cannot connect: {e}")))?;
    let forged = AgentToolRequest {
        invocation_id: "forged".into(),
        name: "count".into(),
        arguments: None,
        context: Some(AgentToolContext {
            task_id: "forged-task".into(),
            ..AgentToolContext::default()
        }),
    };
    match PluginClient::new(channel).invoke_agent_tool(forged).await {
        Ok(r) => Ok(ToolOutput::text(format!(
            "answered: {}",
            r.into_inner().text
        ))),
        Err(s) => Err(ToolError::new(format!("refused: {:?}", s.code()))),
    }
}

/// The capability sets of this process, as `/proc/self/status` has them
/// (hex strings), under their names there (`CapEff`, ...), and its `Uid`,
/// `Gid` and `Groups` lines.
async fn caps(call: ToolCall) -> Result<ToolOutput, ToolError> {
    record(&call);
    let status = std::fs::read_to_string("/proc/self/status")
        .map_err(|e| ToolError::new(format!("refused: {e}")))?;
    let mut out = Map::new();
    for line in status.lines() {
        if let Some((name, value)) = line.split_once(':')
            && (name.starts_with("Cap") || ["Uid", "Gid", "Groups"].contains(&name))
        {
            out.insert(name.to_owned(), json!(value.trim()));
        }
    }
    Ok(ToolOutput::structured(out))
}

/// Makes a character device at `path` with /dev/kmsg's numbers (1, 11):
/// through it a plugin would read the kernel log.
async fn mknod(call: ToolCall) -> Result<ToolOutput, ToolError> {
    record(&call);
    let made = rustix::fs::mknodat(
        rustix::fs::CWD,
        text_arg(&call, "path"),
        rustix::fs::FileType::CharacterDevice,
        rustix::fs::Mode::from_raw_mode(0o600),
        rustix::fs::makedev(1, 11),
    );
    match made {
        Ok(()) => Ok(ToolOutput::text("made a device node")),
        Err(e) => Err(ToolError::new(format!("refused: {e}"))),
    }
}

/// FNV-1a, 64 bits: lets a test check a secret arrived without the plugin
/// ever answering it.
fn fingerprint(s: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{h:016x}")
}

fn text_arg<'a>(call: &'a ToolCall, name: &str) -> &'a str {
    call.arguments
        .get(name)
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// The values of the items named in `names`; secrets as fingerprints.
async fn config(call: ToolCall) -> Result<ToolOutput, ToolError> {
    record(&call);
    let cfg = toolhost_plugin_sdk::config();
    let mut values = Map::new();
    let mut secrets = Map::new();
    for name in call
        .arguments
        .get("names")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
    {
        if let Some(v) = cfg.get(name) {
            values.insert(name.to_owned(), v.clone());
        }
        if let Some(s) = cfg.secret(name) {
            secrets.insert(name.to_owned(), json!(fingerprint(s.expose())));
        }
    }
    let mut out = Map::new();
    out.insert("values".into(), Value::Object(values));
    out.insert("secrets".into(), Value::Object(secrets));
    out.insert(
        "file_left".into(),
        json!(
            std::env::var_os("TOOLHOST_PLUGIN_CONFIG")
                .is_some_and(|p| std::path::Path::new(&p).exists())
        ),
    );
    out.insert("pid".into(), json!(std::process::id()));
    Ok(ToolOutput::structured(out))
}

/// Reads `path` (a file, or a directory's listing): how many bytes or
/// entries, or the error. Never the content.
async fn read_file(call: ToolCall) -> Result<ToolOutput, ToolError> {
    record(&call);
    let path = text_arg(&call, "path");
    let read = std::fs::read(path).map(|b| b.len()).or_else(|e| {
        if e.raw_os_error() == Some(libc::EISDIR) {
            std::fs::read_dir(path).map(Iterator::count)
        } else {
            Err(e)
        }
    });
    match read {
        Ok(n) => Ok(ToolOutput::text(format!("read {n}"))),
        Err(e) => Err(ToolError::new(format!("refused: {e}"))),
    }
}

async fn write_file(call: ToolCall) -> Result<ToolOutput, ToolError> {
    record(&call);
    match std::fs::write(text_arg(&call, "path"), b"written by a plugin") {
        Ok(()) => Ok(ToolOutput::text("wrote")),
        Err(e) => Err(ToolError::new(format!("refused: {e}"))),
    }
}

/// Writes `mb` MiB into `dir` (default: the data directory) as `files`
/// files, a MiB at a time, until done or refused; says how far it got.
async fn fill(call: ToolCall) -> Result<ToolOutput, ToolError> {
    use std::io::Write as _;
    record(&call);
    let dir = match text_arg(&call, "dir") {
        "" => ToolCall::data_dir().unwrap_or_default(),
        d => std::path::PathBuf::from(d),
    };
    if call.arguments.get("clear").and_then(Value::as_bool) == Some(true) {
        let mut removed = 0;
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            if entry.file_name().to_string_lossy().starts_with("fill-")
                && std::fs::remove_file(entry.path()).is_ok()
            {
                removed += 1;
            }
        }
        return Ok(ToolOutput::text(format!("removed {removed}")));
    }
    let mb = number(&call, "mb", 1);
    let files = number(&call, "files", 1).max(1);
    let per_file = mb.div_ceil(files);
    let chunk = vec![0x5au8; 1 << 20];
    let mut written = 0u64;
    for i in 0..files {
        let path = dir.join(format!("fill-{i}"));
        let result = std::fs::File::create(&path).and_then(|mut f| {
            for _ in 0..per_file {
                if written >= mb {
                    break;
                }
                f.write_all(&chunk)?;
                written += 1;
            }
            f.sync_all()
        });
        if let Err(e) = result {
            // What is left after a MiB no longer fits, a page at a time,
            // so a full disk is full to the last block.
            if let Ok(mut f) = std::fs::OpenOptions::new().append(true).open(&path) {
                while f
                    .write_all(&chunk[..4096])
                    .and_then(|()| f.sync_data())
                    .is_ok()
                {}
            }
            return Ok(ToolOutput::text(format!("wrote {written} MiB, then: {e}")));
        }
    }
    Ok(ToolOutput::text(format!("wrote {written} MiB")))
}

/// Starts a writer that never stops: `kind` `bytes` writes 256 KiB at a
/// time, `inodes` makes empty files; either, refused, tries again at once
/// (so it takes whatever is freed). In `dir` (default: the data
/// directory). With `detach`, the writer is a grandchild in a session of
/// its own whose parent has exited (`setsid --fork`), as a plugin that
/// hides a helper would make it; else a thread of the plugin. The writer
/// writes its pid to `writer-<kind>.pid` in `dir` first.
async fn hog(call: ToolCall) -> Result<ToolOutput, ToolError> {
    record(&call);
    let dir = match text_arg(&call, "dir") {
        "" => ToolCall::data_dir().unwrap_or_default(),
        d => std::path::PathBuf::from(d),
    };
    let kind = match text_arg(&call, "kind") {
        "inodes" => "inodes",
        _ => "bytes",
    };
    if call.arguments.get("detach").and_then(Value::as_bool) == Some(true) {
        let exe = std::env::current_exe().map_err(|e| ToolError::new(format!("refused: {e}")))?;
        let status = std::process::Command::new("setsid")
            .arg("--fork")
            .arg(exe)
            .arg("--writer")
            .arg(&dir)
            .arg(kind)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .map_err(|e| ToolError::new(format!("refused: {e}")))?;
        return Ok(ToolOutput::text(format!(
            "detached writer started ({status})"
        )));
    }
    let kind = kind.to_owned();
    std::thread::spawn(move || keep_writing(&dir, &kind));
    Ok(ToolOutput::text("writer started"))
}

/// The writer [`hog`] starts; never returns.
fn keep_writing(dir: &std::path::Path, kind: &str) -> ! {
    let _ = std::fs::write(
        dir.join(format!("writer-{kind}.pid")),
        std::process::id().to_string(),
    );
    let chunk = vec![0x5au8; 256 << 10];
    let mut n = 0u64;
    let mut file: Option<std::fs::File> = None;
    loop {
        let wrote = if kind == "inodes" {
            std::fs::File::create(dir.join(format!("n-{}-{n}", std::process::id()))).map(|_| ())
        } else {
            let f = match file.take() {
                Some(f) => Ok(f),
                None => std::fs::File::create(dir.join(format!("b-{}-{n}", std::process::id()))),
            };
            f.and_then(|mut f| {
                // A full chunk, else what is left a page at a time: every
                // freed block is taken.
                let r = f.write_all(&chunk).or_else(|_| f.write_all(&chunk[..4096]));
                if r.is_ok() && f.metadata().is_ok_and(|m| m.len() < (16 << 20)) {
                    file = Some(f);
                }
                r
            })
        };
        match wrote {
            Ok(()) => n += 1,
            Err(_) => std::thread::yield_now(),
        }
    }
}

/// Makes a file of `mb` MiB and `count` hard links to it in `links/` of
/// the data directory; says how many links were made.
async fn links(call: ToolCall) -> Result<ToolOutput, ToolError> {
    record(&call);
    let dir = ToolCall::data_dir().unwrap_or_default().join("links");
    let count = number(&call, "count", 1);
    let mb = number(&call, "mb", 1);
    let made = std::fs::create_dir_all(&dir).and_then(|()| {
        let mut f = std::fs::File::create(dir.join("target"))?;
        for _ in 0..mb {
            f.write_all(&[7u8; 1 << 20])?;
        }
        f.sync_all()
    });
    if let Err(e) = made {
        return Err(ToolError::new(format!("refused: {e}")));
    }
    let mut linked = 0;
    for i in 0..count {
        if std::fs::hard_link(dir.join("target"), dir.join(format!("l{i}"))).is_err() {
            break;
        }
        linked += 1;
    }
    Ok(ToolOutput::text(format!("linked {linked}")))
}

/// Listens on a Unix socket at `path` and accepts (and keeps) connections
/// for as long as the process lives, so a client can ask the kernel who
/// the listener is.
async fn serve_unix(call: ToolCall) -> Result<ToolOutput, ToolError> {
    record(&call);
    let path = text_arg(&call, "path").to_owned();
    let listener = std::os::unix::net::UnixListener::bind(&path)
        .map_err(|e| ToolError::new(format!("refused: {e}")))?;
    std::thread::spawn(move || {
        let mut kept = Vec::new();
        for stream in listener.incoming().flatten() {
            kept.push(stream);
        }
    });
    Ok(ToolOutput::text("listening"))
}

/// Writes bytes that are not UTF-8 (and an escape sequence) to stderr,
/// then a marker line, then more lines: says whether any write failed
/// (a reader that stopped would make them `EPIPE`).
async fn stderr_bytes(call: ToolCall) -> Result<ToolOutput, ToolError> {
    record(&call);
    let mut err = std::io::stderr().lock();
    let mut wrote = || -> std::io::Result<()> {
        err.write_all(b"\xff\xfe not utf-8 \x1b[8m hidden\n")?;
        err.write_all(b"MARKER-AFTER-BYTES\n")?;
        for i in 0..50 {
            writeln!(err, "after-{i}")?;
        }
        err.flush()
    };
    match wrote() {
        Ok(()) => Ok(ToolOutput::text("written")),
        Err(e) => Err(ToolError::new(format!("stderr failed: {e}"))),
    }
}

/// Starts up to `max` processes (each sleeps), counting until the kernel
/// refuses one; then kills them all.
async fn spawn_many(call: ToolCall) -> Result<ToolOutput, ToolError> {
    record(&call);
    let max = number(&call, "max", 100);
    let mut children = Vec::new();
    let mut refusal = None;
    for _ in 0..max {
        match std::process::Command::new("/bin/sleep")
            .arg("30")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
        {
            Ok(c) => children.push(c),
            Err(e) => {
                refusal = Some(e.to_string());
                break;
            }
        }
    }
    let started = children.len();
    for mut c in children {
        let _ = c.kill();
        let _ = c.wait();
    }
    let mut out = Map::new();
    out.insert("started".into(), json!(started));
    out.insert("refusal".into(), json!(refusal));
    Ok(ToolOutput::structured(out))
}

/// Reserves and touches `mb` MiB, then frees them.
async fn alloc(call: ToolCall) -> Result<ToolOutput, ToolError> {
    record(&call);
    let bytes = usize::try_from(number(&call, "mb", 1) << 20).unwrap_or(usize::MAX);
    let mut v: Vec<u8> = Vec::new();
    match v.try_reserve_exact(bytes) {
        Ok(()) => {
            v.resize(bytes, 1);
            Ok(ToolOutput::text(format!("allocated {}", v.len())))
        }
        Err(e) => Err(ToolError::new(format!("refused: {e}"))),
    }
}

async fn connect_unix(call: ToolCall) -> Result<ToolOutput, ToolError> {
    record(&call);
    match tokio::net::UnixStream::connect(text_arg(&call, "path")).await {
        Ok(_) => Ok(ToolOutput::text("connected")),
        Err(e) => Err(ToolError::new(format!("refused: {e}"))),
    }
}

/// Calls the HTTP service on `port` as the caller, with the token toolhost
/// exchanged for `audience`; answers with the service's body.
async fn call_api(call: ToolCall) -> Result<ToolOutput, ToolError> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    record(&call);
    let audience = text_arg(&call, "audience");
    let Some(token) = call.token_for(audience) else {
        return Err(ToolError::new(format!("no token for {audience}")));
    };
    let port = u16::try_from(number(&call, "port", 0)).unwrap_or(0);
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .map_err(|e| ToolError::new(format!("refused: {e}")))?;
    let request = format!(
        "GET /whoami HTTP/1.1\r\nHost: api\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n"
    );
    stream
        .write_all(request.as_bytes())
        .await
        .map_err(|e| ToolError::new(format!("write: {e}")))?;
    let mut answer = String::new();
    stream
        .read_to_string(&mut answer)
        .await
        .map_err(|e| ToolError::new(format!("read: {e}")))?;
    let body = answer.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    Ok(ToolOutput::text(body.to_owned()))
}

async fn connect(call: ToolCall) -> Result<ToolOutput, ToolError> {
    record(&call);
    let port = u16::try_from(number(&call, "port", 0)).unwrap_or(0);
    match tokio::net::TcpStream::connect(("127.0.0.1", port)).await {
        Ok(_) => Ok(ToolOutput::text("connected")),
        Err(e) => Err(ToolError::new(format!("refused: {e}"))),
    }
}
