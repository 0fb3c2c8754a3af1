//! The harness's command line.

/// The modes and their options.
#[derive(Debug, clap::Parser)]
#[command(about = "toolhost's costs next to the floor and a peer, in one run")]
pub(crate) struct Args {
    /// The CI form: one short round.
    #[arg(long)]
    pub(crate) quick: bool,
    /// Leave out the FastMCP peer.
    #[arg(long)]
    pub(crate) no_peer: bool,
    /// Only a live upgrade under load.
    #[arg(long)]
    pub(crate) upgrade: bool,
    /// Only a soak of this many seconds.
    #[arg(long, value_name = "SECONDS")]
    pub(crate) soak: Option<u64>,
    /// Only one toolhost under load for this many seconds, for a profiler.
    #[arg(long, value_name = "SECONDS")]
    pub(crate) profile: Option<u64>,
    /// With --profile: stateless JSON mode.
    #[arg(long)]
    pub(crate) json: bool,
    /// With --profile --json: every request through rmcp (`direct_calls =
    /// false`), to compare with toolhost's direct path.
    #[arg(long)]
    pub(crate) through_rmcp: bool,
    /// With --profile: how many calls at once.
    #[arg(long, default_value_t = 64)]
    pub(crate) concurrency: usize,
    /// Only progress forwarding, with this many updates.
    #[arg(long, value_name = "STEPS")]
    pub(crate) progress: Option<u64>,
    /// Only a call's cost through each SDK's plugin.
    #[arg(long)]
    pub(crate) sdks: bool,
    /// Only the catalog at scale (revisions, listing, fan-out).
    #[arg(long)]
    pub(crate) scale: bool,
    /// Only a daemon's resident memory with this many pushed tools, then
    /// after a revision of 8.
    #[arg(long, value_name = "TOOLS")]
    pub(crate) rss_tools: Option<usize>,
    /// Only one daemon's work for a pushed revision of this many tools it
    /// does not have (decode, judge, keep), in-process.
    #[arg(long, value_name = "TOOLS")]
    pub(crate) judge: Option<usize>,
    /// Only a daemon's idle memory with each optional part (telemetry,
    /// the fleet) configured and not.
    #[arg(long)]
    pub(crate) features: bool,
    /// Only argument checking against jsonschema's `is_valid`.
    #[arg(long)]
    pub(crate) argcheck: bool,
    /// Only a fleet of this many daemons fed through NATS JetStream (a
    /// list runs each: `--fleet 50,100,200`).
    #[arg(long, value_name = "N", value_delimiter = ',')]
    pub(crate) fleet: Vec<usize>,
    /// Only the fleet's large revision with its plugins installed on every
    /// daemon and its tools served (a list runs each: `--fleet-served 1,4`).
    #[arg(long, value_name = "N", value_delimiter = ',')]
    pub(crate) fleet_served: Vec<usize>,
    /// Only a placement of three plugins from a registry onto this many
    /// daemons of one group, uncached and cached (`--placement 20`).
    #[arg(long, value_name = "N")]
    pub(crate) placement: Option<usize>,
    /// Only many plugins in one daemon: start to ready, memory, stop (a
    /// list runs each: `--plugins 250,500,1000`).
    #[arg(long, value_name = "N", value_delimiter = ',')]
    pub(crate) plugins: Vec<usize>,
    /// Only operating a large daemon: `status`, `plugins list`, `plugins
    /// show` and `/metrics` at this many plugins of 32 tools each, bytes
    /// and the daemon's CPU per call.
    #[arg(long, value_name = "N")]
    pub(crate) operate: Option<usize>,
    /// Only tool calls as MCP tasks: this many of each kind, and as many
    /// tasks left waiting for an answer.
    #[arg(long, value_name = "N")]
    pub(crate) tasks: Option<usize>,
    /// Only what tracing costs a call: this many calls with telemetry
    /// off, sampling at 0 % and at 100 % to a live OTLP receiver.
    #[arg(long, value_name = "N")]
    pub(crate) telemetry: Option<usize>,
    /// Only what the operator's policy costs a call: this many calls with
    /// no policy, with rate limits, and with one CEL argument rule.
    #[arg(long, value_name = "N")]
    pub(crate) policy: Option<usize>,
    /// Only what an access token from an authorization server costs a
    /// call: this many calls with a static token, a JWT (verification
    /// cached) and a JWT whose plugin gets an exchanged token (cached).
    #[arg(long, value_name = "N")]
    pub(crate) oauth: Option<usize>,
}
