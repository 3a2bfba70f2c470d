//! Which processes are alive: lets a store release the locks of a process that died at once
//! instead of after `lock_duration`.
//!
//! A process is identified by its pid and its start time, so that a recycled pid is not mistaken
//! for the process that held the locks (`os::process`). Where the system cannot tell whether a
//! process runs, it is assumed alive and its locks simply expire.

use crate::os::process;

/// Where this process runs (`os::process::scope`): pids are only compared between processes
/// that see the same process table. 0 when unknown.
pub fn current_scope() -> u64 {
    process::scope()
}

/// Whether an owner registered with `(pid, start, scope)` is alive, judged from `my_scope`.
///
/// A process in another scope (another container's PID namespace, another boot, another
/// machine) cannot be checked: its pid means nothing here. It is assumed alive and its locks
/// simply expire — releasing a live holder's locks would break "one holder at a time".
pub fn owner_alive(pid: u32, start: u64, scope: u64, my_scope: u64) -> bool {
    if scope != 0 && scope != my_scope {
        return true;
    }
    process::is_alive(pid, start)
}

/// The pid and start time of the calling process.
pub fn current() -> (u32, u64) {
    process::current()
}

#[cfg(test)]
mod tests {
    #[test]
    fn owners_from_another_scope_are_never_judged_dead() {
        let me = super::current_scope();
        // A process that ran and ended: dead when local, presumed alive when registered
        // elsewhere.
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .arg("--list")
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let pid = child.id();
        child.wait().unwrap();
        assert!(!super::owner_alive(pid, 1, me, me));
        assert!(!super::owner_alive(pid, 1, 0, me));
        assert!(super::owner_alive(pid, 1, me.wrapping_add(1).max(1), me));
    }
}
