//! Which processes are alive: lets a store release the locks of a process that died at once
//! instead of after `lock_duration`.
//!
//! A process is identified by its pid and its start time, so that a recycled pid is not mistaken
//! for the process that held the locks. On systems without `/proc` every registered process is
//! assumed alive and its locks simply expire.

/// Where this process runs: a hash of the boot id and the PID namespace, so that pids are only
/// compared between processes that see the same process table. 0 when unknown.
pub fn current_scope() -> u64 {
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
    let ns = std::fs::read_link("/proc/self/ns/pid")
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default();
    if boot.is_empty() && ns.is_empty() {
        return 0;
    }
    // FNV-1a: stable across builds and platforms, unlike `DefaultHasher`.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in boot.trim().bytes().chain([0]).chain(ns.bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h.max(1)
}

/// Whether an owner registered with `(pid, start, scope)` is alive, judged from `my_scope`.
///
/// A process in another scope (another container's PID namespace, or another boot) cannot be
/// checked: its pid means nothing here. It is assumed alive and its locks simply expire —
/// releasing a live holder's locks would break "one holder at a time".
pub fn owner_alive(pid: u32, start: u64, scope: u64, my_scope: u64) -> bool {
    if scope != 0 && scope != my_scope {
        return true;
    }
    is_alive(pid, start)
}

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

    #[test]
    fn owners_from_another_scope_are_never_judged_dead() {
        let me = super::current_scope();
        // A pid that cannot exist: dead when local, presumed alive when registered elsewhere.
        let (pid, start) = (u32::MAX - 1, 1);
        if std::path::Path::new("/proc/self/stat").exists() {
            assert!(!super::owner_alive(pid, start, me, me));
            assert!(!super::owner_alive(pid, start, 0, me));
        }
        assert!(super::owner_alive(
            pid,
            start,
            me.wrapping_add(1).max(1),
            me
        ));
    }
}
