//! Server CPU time from `/proc/<pid>/stat` (utime + stime).

use std::path::Path;

/// Clock ticks per second (`getconf CLK_TCK`, 100 when it cannot be asked).
pub fn ticks_per_second() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse::<f64>().ok())
        .filter(|t| *t > 0.0)
        .unwrap_or(100.0)
}

fn stat(pid: &str) -> Option<(String, u64)> {
    let s = std::fs::read_to_string(Path::new("/proc").join(pid).join("stat")).ok()?;
    let open = s.find('(')?;
    let close = s.rfind(')')?;
    let comm = s.get(open + 1..close)?.to_owned();
    let rest: Vec<&str> = s.get(close + 2..)?.split_whitespace().collect();
    // After the comm: state is field 3, utime 14 and stime 15 (1-based, whole line).
    let utime: u64 = rest.get(11)?.parse().ok()?;
    let stime: u64 = rest.get(12)?.parse().ok()?;
    Some((comm, utime + stime))
}

/// Which server processes to count.
#[derive(Debug, Clone)]
pub enum Target {
    /// Every process with this command name (summed).
    Name(String),
    /// One process.
    Pid(u32),
}

/// CPU ticks of the target, or `None` when no such process exists.
pub fn ticks(target: &Target) -> Option<u64> {
    match target {
        Target::Pid(pid) => stat(&pid.to_string()).map(|(_, t)| t),
        Target::Name(name) => {
            let mut total = None;
            for e in std::fs::read_dir("/proc").ok()?.flatten() {
                let f = e.file_name();
                let Some(pid) = f.to_str() else { continue };
                if !pid.bytes().all(|b| b.is_ascii_digit()) {
                    continue;
                }
                if let Some((comm, t)) = stat(pid)
                    && comm == *name
                {
                    total = Some(total.unwrap_or(0) + t);
                }
            }
            total
        }
    }
}
