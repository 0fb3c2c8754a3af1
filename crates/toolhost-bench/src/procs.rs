//! CPU time and resident memory of processes, from /proc.

/// Clock ticks per second (`getconf CLK_TCK`; 100 on Linux).
const TICKS: f64 = 100.0;

/// utime + stime of a process, in seconds.
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
pub fn cpu_of(pids: &[u32]) -> f64 {
    pids.iter().map(|p| cpu_seconds(*p)).sum()
}

/// Resident memory of a process, in KiB.
pub fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// Direct children of a process.
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
