//! Processes as /proc shows them: CPU time, resident memory, open
//! descriptors, children, liveness. The one copy, shared by the benchmark
//! and the end-to-end tests.

/// Clock ticks per second (`getconf CLK_TCK`; 100 on Linux).
const TICKS: f64 = 100.0;

/// utime + stime of a process, in seconds.
#[must_use]
pub fn cpu_seconds(pid: u32) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    let Some((_, rest)) = stat.rsplit_once(") ") else {
        return 0.0;
    };
    let f: Vec<&str> = rest.split(' ').collect();
    // Fields 14 and 15 of stat are utime and stime; `rest` starts at field 3.
    let t = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (t(11) + t(12)) / TICKS
}

/// The sum over several processes.
#[must_use]
pub fn cpu_of(pids: &[u32]) -> f64 {
    pids.iter().map(|p| cpu_seconds(*p)).sum()
}

/// Resident memory of a process, in KiB.
#[must_use]
pub fn rss_kib(pid: u32) -> u64 {
    status_kib(pid, "VmRSS:")
}

/// The most resident memory a process has held, KiB (`VmHWM`); 0 if
/// unknown.
#[must_use]
pub fn peak_rss_kib(pid: u32) -> u64 {
    status_kib(pid, "VmHWM:")
}

fn status_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// Direct children of a process.
#[must_use]
pub fn children(pid: u32) -> Vec<u32> {
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    rd.filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()))
        .filter(|p| {
            std::fs::read_to_string(format!("/proc/{p}/stat"))
                .ok()
                .and_then(|s| {
                    s.rsplit_once(") ")
                        .and_then(|(_, r)| r.split(' ').nth(1).and_then(|x| x.parse::<u32>().ok()))
                })
                == Some(pid)
        })
        .collect()
}

/// How many file descriptors a process has open (0 if it is gone).
#[must_use]
pub fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

/// Whether a process with this pid exists and is not a zombie.
#[must_use]
pub fn process_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state is the first field after the parenthesised command.
        Ok(stat) => stat
            .rsplit_once(") ")
            .and_then(|(_, rest)| rest.chars().next())
            .is_some_and(|state| state != 'Z' && state != 'X'),
        Err(_) => false,
    }
}

/// Pids of every process whose command line contains `needle`.
#[must_use]
pub fn pids_with_cmdline(needle: &str) -> Vec<u32> {
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    rd.filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()))
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| String::from_utf8_lossy(&c).contains(needle))
                .unwrap_or(false)
        })
        .collect()
}

/// The paths a checkout's plugins run on outside their own directories, for
/// `[sandbox] read`: the builds under `target` (the `CARGO_TARGET_DIR`),
/// the virtualenv and SDKs of the checkout at `root`, and the Python the
/// virtualenv was made from. Shared by the benchmarks and the tests, which
/// start daemons on the example and SDK plugins as an operator would.
#[must_use]
pub fn sandbox_read_paths(
    root: &std::path::Path,
    target: &std::path::Path,
) -> Vec<std::path::PathBuf> {
    let mut paths = vec![target.to_path_buf(), root.join(".venv"), root.join("sdk")];
    // .venv/bin/python -> <prefix>/bin/python3.x
    if let Some(prefix) = std::fs::canonicalize(root.join(".venv/bin/python"))
        .ok()
        .and_then(|p| {
            p.parent()
                .and_then(std::path::Path::parent)
                .map(std::path::Path::to_path_buf)
        })
    {
        paths.push(prefix);
    }
    paths
}

/// `[sandbox]` with `read` set to [`sandbox_read_paths`], as TOML.
#[must_use]
pub fn sandbox_section(root: &std::path::Path, target: &std::path::Path) -> String {
    let read: Vec<String> = sandbox_read_paths(root, target)
        .iter()
        .map(|p| format!("{:?}", p.display().to_string()))
        .collect();
    format!("\n[sandbox]\nread = [{}]\n", read.join(", "))
}
