//! What the operator's word over calls costs a call that passes it:
//! toolhost's CPU per plain `tools/call` with no policy (the default), with
//! rate limits per token and per tool that never refuse, and with one CEL
//! argument rule that allows the call.
//!
//! Each setting is its own daemon serving the protocol-2 bench plugin, as
//! in the telemetry series (`telemetry::series`): calls one at a time, CPU
//! read from `/proc` around the series. The first setting runs again last,
//! so the table shows the noise next to the differences. Approvals are not
//! here: a call that needs one waits for a person, which dwarfs any cost of
//! asking.

use anyhow::Result;

/// Prints the table: `n` calls per setting.
pub async fn report(n: usize) -> Result<()> {
    println!(
        "{n} plain stateless `tools/call`s of `kandev_bench_count` per setting, one at a time (plugin protocol 2, toolhost's direct path).\n"
    );
    println!("| policy | p50 latency ms | toolhost CPU µs per call |\n|---|---|---|");
    let limiter = "[rate_limits]\nbinding = { per_minute = 1000000, burst = 1000000 }\n\
                   [rate_limits.tools]\nkandev_bench_count = { per_minute = 1000000, burst = 1000000 }\n";
    let rule = "[[rules]]\ntool = \"kandev_bench_count\"\n\
                when = 'size(args) <= 4 && (!has(args.path) || args.path.startsWith(\"/workspace/\"))'\n\
                message = \"at most four arguments, and a path under /workspace\"\n";
    let rows = [
        ("none (the default)", ""),
        (
            "rate limits per token and per tool (never reached)",
            limiter,
        ),
        ("one CEL argument rule (allows the call)", rule),
        ("none again (the noise)", ""),
    ];
    for (name, config) in rows {
        let (p50, cpu) = crate::telemetry::series(n, config).await?;
        println!("| {name} | {p50:.3} | {cpu:.0} |");
    }
    println!(
        "\nThe CPU of a series is read from /proc around it (a tick is 10 ms, so over {n} calls it is good to about {:.0} µs).",
        10_000.0 / n.max(1) as f64
    );
    Ok(())
}
