//! Which processes are alive: lets a store release the locks of a process that died at once
//! instead of after `lock_duration`.
//!
//! A process is identified by its pid and its start time, so that a recycled pid is not mistaken
//! for the process that held the locks. On systems without `/proc` every registered process is
//! assumed alive and its locks simply expire.

/// The pid and start time of the calling process.
pub fn current() -> (u32, u64) {
    let pid = std::process::id();
    (pid, start_time(pid).unwrap_or(0))
}

/// Whether the process registered as `(pid, start)` still runs.
pub fn is_alive(pid: u32, start: u64) -> bool {
    if !std::path::Path::new("/proc/self/stat").exists() {
        return true;
    }
    match start_time(pid) {
        None => false,
        // A start time of 0 means it could not be read at registration: trust the pid alone.
        Some(now) => start == 0 || now == start,
    }
}

/// Field 22 of `/proc/<pid>/stat`: start time in clock ticks since boot. `None` if the process
/// does not exist (or is a zombie, which holds no locks any more).
fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may contain spaces and parentheses; fields resume after the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?;
    if state == "Z" || state == "X" {
        return None;
    }
    // `rest` starts at field 3 (state), so field 22 is the 20th of the remaining ones.
    fields.nth(18)?.parse().ok()
}

#[cfg(test)]
mod tests {
    #[test]
    fn this_process_is_alive() {
        let (pid, start) = super::current();
        assert!(super::is_alive(pid, start));
        assert!(!super::is_alive(pid, start + 1) || start == 0);
    }
}
