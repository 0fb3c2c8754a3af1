//! One measurement of one system at one concurrency, and the summaries
//! made of them.

use crate::load::{Run, Session, drive};
use crate::systems::*;
use anyhow::Result;
use std::time::{Duration, Instant};
use toolhost_bench::procs;
use toolhost_proto::plugin::plugin_client::PluginClient;
use toolhost_proto::plugin::{AgentToolContext, AgentToolRequest};

/// One measurement of one system at one concurrency.
#[derive(Debug, Clone, Default)]
pub(crate) struct Measured {
    pub(crate) p50: Duration,
    pub(crate) p99: Duration,
    pub(crate) throughput: f64,
    pub(crate) server_cpu_us: f64,
    /// The system's first process alone (toolhost without its plugin).
    pub(crate) main_cpu_us: f64,
    pub(crate) client_cpu_us: f64,
    pub(crate) errors: u64,
    pub(crate) first_error: Option<String>,
}

pub(crate) async fn measure(
    sys: &System,
    concurrency: usize,
    duration: Duration,
    http: &reqwest::Client,
) -> Result<Measured> {
    let server0 = procs::cpu_of(&sys.pids);
    let main0 = procs::cpu_seconds(sys.main_pid);
    let me = std::process::id();
    let client0 = procs::cpu_seconds(me);
    let (mut run, sessions): (Run, Vec<Session>) = match &sys.target {
        Target::Http(ep) => {
            let (http, ep) = (http.clone(), ep.clone());
            let (run, sessions) = drive(
                concurrency,
                duration,
                || Session::open(http.clone(), ep.clone()),
                |mut s: Session| {
                    Box::pin(async move {
                        let r = s.call(&echo_args()).await;
                        (s, r)
                    })
                },
            )
            .await?;
            (run, sessions)
        }
        Target::Grpc(client) => {
            let client = client.clone();
            let (run, _) = drive(
                concurrency,
                duration,
                || {
                    let c = client.clone();
                    async move { Ok(c) }
                },
                |mut c: PluginClient<tonic::transport::Channel>| {
                    Box::pin(async move {
                        let req = AgentToolRequest {
                            invocation_id: "bench".into(),
                            name: "echo".into(),
                            arguments: echo_args()
                                .as_object()
                                .map(toolhost_proto::json::struct_from_json),
                            context: Some(AgentToolContext {
                                task_id: "t".into(),
                                session_id: "s".into(),
                                workspace_id: String::new(),
                                surface: "chat".into(),
                                credentials: Vec::new(),
                            }),
                        };
                        let r = c
                            .invoke_agent_tool(req)
                            .await
                            .map(|_| ())
                            .map_err(anyhow::Error::from);
                        (c, r)
                    })
                },
            )
            .await?;
            (run, Vec::new())
        }
    };
    let server = procs::cpu_of(&sys.pids) - server0;
    let main = procs::cpu_seconds(sys.main_pid) - main0;
    for s in sessions {
        s.close().await;
    }
    let client = procs::cpu_seconds(me) - client0;
    let calls = run.calls.max(1) as f64;
    Ok(Measured {
        p50: run.percentile(0.50),
        p99: run.percentile(0.99),
        throughput: run.throughput(),
        server_cpu_us: server / calls * 1e6,
        main_cpu_us: main / calls * 1e6,
        client_cpu_us: client / calls * 1e6,
        errors: run.errors,
        first_error: run.first_error.take(),
    })
}

pub(crate) fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

pub(crate) fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// `--profile SECONDS [--json] [--concurrency N]`: one toolhost under load
/// at concurrency N (64 unless given) for SECONDS, its pids printed first,
/// so a profiler can attach:
/// `perf record -p PID -- sleep 20`.
pub(crate) async fn profile_target(
    seconds: u64,
    stateless: bool,
    direct: bool,
    concurrency: usize,
) -> Result<()> {
    let sys = start_toolhost(stateless, direct, 1).await?;
    println!(
        "toolhost pid {}; server pids {:?}; driving concurrency {concurrency} for {seconds} s",
        sys.main_pid, sys.pids
    );
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(128)
        .build()?;
    let idle = procs::rss_kib(sys.main_pid);
    let m = measure(&sys, concurrency, Duration::from_secs(seconds), &http).await?;
    let loaded = procs::rss_kib(sys.main_pid);
    let calm = settled(sys.main_pid).await;
    println!(
        "toolhost RSS idle {:.1} MiB, as the load ends {:.1} MiB, settled {:.1} MiB",
        idle as f64 / 1024.0,
        loaded as f64 / 1024.0,
        calm as f64 / 1024.0
    );
    println!(
        "{:.0} calls/s, p50 {:.3} ms, server CPU {:.0} µs/call (toolhost alone {:.0}), errors {}",
        m.throughput,
        ms(m.p50),
        m.server_cpu_us,
        m.main_cpu_us,
        m.errors
    );
    Ok(())
}

/// The lowest resident memory of `pid` over the next 6 s: what a load
/// leaves behind once the daemon has had its quiet moment (it gives
/// freed memory back on the first quiet tick after a load).
pub(crate) async fn settled(pid: u32) -> u64 {
    let mut lowest = procs::rss_kib(pid);
    let end = Instant::now() + Duration::from_secs(6);
    while Instant::now() < end {
        tokio::time::sleep(Duration::from_millis(250)).await;
        lowest = lowest.min(procs::rss_kib(pid));
    }
    lowest
}
