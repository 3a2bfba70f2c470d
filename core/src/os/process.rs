//! Process identity and liveness.
//!
//! A process is named by its pid and its start time, so that a recycled pid is not mistaken
//! for the process that registered: Linux reads the start time (clock ticks since boot) from
//! `/proc/<pid>/stat`; Apple systems ask `proc_pidinfo` (seconds and microseconds since the
//! epoch); Windows opens the process and asks `GetProcessTimes` (its creation time). Wherever
//! the answer cannot be had (no `/proc`, a process of another user that may not be looked
//! at), a process counts as alive: its locks then expire instead of being released early,
//! which is slower but never hands a live holder's message to someone else.

/// This process's id: what a store handle records as its opener, so that a `fork()` child,
/// whose id differs, is refused (invariant 11). Windows has no `fork`, and a child process
/// inherits no handles of postbox, so there the check never fires.
///
/// Asked on every call through a binding and for every message a binding hands out, so it is
/// cached where asking costs a system call (see [`pid`]).
pub fn id() -> u32 {
    pid::get()
}

/// The cached pid of Unix systems. `getpid` is a system call (glibc stopped caching it in
/// 2.25), and the fork guard asked it twice per message a C caller received in batches: 41,000
/// calls for 20,000 messages, a few per cent of the batched loop's time. The cache is cleared in
/// a `fork()` child by a `pthread_atfork` handler, registered before the first value is kept,
/// so a child never sees its parent's pid; where the handler cannot be registered nothing is
/// kept and every call asks the system. Registration takes no lock (a `Once` that another
/// thread was running at the moment of a fork would never finish in the child).
#[cfg(unix)]
mod pid {
    use std::sync::atomic::{AtomicU8, AtomicU32, Ordering};

    /// The pid, or 0 when it must be asked (never cached, or cleared in a fork child).
    static CACHED: AtomicU32 = AtomicU32::new(0);
    /// Whether the fork handler is registered: one of the states below.
    static HANDLER: AtomicU8 = AtomicU8::new(UNREGISTERED);
    const UNREGISTERED: u8 = 0;
    const REGISTERING: u8 = 1;
    const REGISTERED: u8 = 2;
    const REFUSED: u8 = 3;

    extern "C" fn forked_child() {
        CACHED.store(0, Ordering::Relaxed);
    }

    pub fn get() -> u32 {
        let cached = CACHED.load(Ordering::Relaxed);
        if cached != 0 {
            return cached;
        }
        let now = std::process::id();
        let state = HANDLER.load(Ordering::Acquire);
        if state == REGISTERED {
            // Kept only once the handler would clear it: a fork between this thread's
            // `getpid` and its store runs the handler in the child before the child runs on,
            // and only the forking thread exists there.
            CACHED.store(now, Ordering::Relaxed);
        } else if state == UNREGISTERED
            && HANDLER
                .compare_exchange(
                    UNREGISTERED,
                    REGISTERING,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                )
                .is_ok()
        {
            // SAFETY: registers a handler with no arguments that only stores to an atomic,
            // which is async-signal-safe as a fork child's handler must be.
            let rc = unsafe { libc::pthread_atfork(None, None, Some(forked_child)) };
            let state = if rc == 0 { REGISTERED } else { REFUSED };
            HANDLER.store(state, Ordering::Release);
        }
        now
    }
}

/// Elsewhere asking is cheap (Windows reads it from the thread's own block) and there is no
/// `fork`.
#[cfg(not(unix))]
mod pid {
    pub fn get() -> u32 {
        std::process::id()
    }
}

/// The pid and start time of the calling process (start time 0 when it cannot be read).
pub fn current() -> (u32, u64) {
    let pid = id();
    let start = match imp::probe(pid) {
        Probe::Running(start) => start,
        Probe::Gone | Probe::Unknown => 0,
    };
    (pid, start)
}

/// Whether the process registered as `(pid, start)` still runs. A start time of 0 means it
/// could not be read at registration: the pid alone is trusted then.
pub fn is_alive(pid: u32, start: u64) -> bool {
    match imp::probe(pid) {
        Probe::Gone => false,
        Probe::Unknown => true,
        Probe::Running(now) => start == 0 || now == start,
    }
}

/// Whether a process `pid` exists (whatever its start time); `None` where the system cannot
/// tell.
pub fn exists(pid: u32) -> Option<bool> {
    match imp::probe(pid) {
        Probe::Gone => Some(false),
        Probe::Running(_) => Some(true),
        Probe::Unknown => None,
    }
}

/// Where this process runs, so that pids are only compared between processes that see the
/// same process table: a hash of the boot id and the PID namespace on Linux, of the host name
/// on Apple systems and of the computer's DNS name on Windows (where start times are absolute,
/// so another boot needs no mark of its own). 0 when unknown.
pub fn scope() -> u64 {
    let Some(text) = imp::scope_text() else {
        return 0;
    };
    // FNV-1a: stable across builds and platforms, unlike `DefaultHasher`.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h.max(1)
}

/// What the system says about a pid.
enum Probe {
    /// No such process (or a zombie, which holds nothing any more).
    Gone,
    /// It runs, started at this time (in the system's own unit).
    Running(u64),
    /// The system cannot tell.
    Unknown,
}

#[cfg(target_os = "linux")]
mod imp {
    use super::Probe;

    pub fn probe(pid: u32) -> Probe {
        if !std::path::Path::new("/proc/self/stat").exists() {
            return Probe::Unknown;
        }
        match start_time(pid) {
            Some(start) => Probe::Running(start),
            None => Probe::Gone,
        }
    }

    /// Field 22 of `/proc/<pid>/stat`: start time in clock ticks since boot. `None` if the
    /// process does not exist or is a zombie.
    fn start_time(pid: u32) -> Option<u64> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // The command name (field 2) may contain spaces and parentheses; fields resume after
        // the last ')'.
        let rest = &stat[stat.rfind(')')? + 1..];
        let mut fields = rest.split_whitespace();
        let state = fields.next()?;
        if state == "Z" || state == "X" {
            return None;
        }
        // `rest` starts at field 3 (state), so field 22 is the 20th of the remaining ones.
        fields.nth(18)?.parse().ok()
    }

    pub fn scope_text() -> Option<Vec<u8>> {
        let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
        let ns = std::fs::read_link("/proc/self/ns/pid")
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default();
        if boot.is_empty() && ns.is_empty() {
            return None;
        }
        let mut text = boot.trim().as_bytes().to_vec();
        text.push(0);
        text.extend_from_slice(ns.as_bytes());
        Some(text)
    }
}

#[cfg(target_vendor = "apple")]
mod imp {
    use super::Probe;

    pub fn probe(pid: u32) -> Probe {
        let Ok(pid) = libc::c_int::try_from(pid) else {
            return Probe::Gone;
        };
        let mut info = std::mem::MaybeUninit::<libc::proc_bsdinfo>::zeroed();
        let size = std::mem::size_of::<libc::proc_bsdinfo>() as libc::c_int;
        // SAFETY: `info` is writable memory of `size` bytes, as many as PROC_PIDTBSDINFO fills;
        // it is read only after the call reported that it filled all of them.
        let got = unsafe {
            libc::proc_pidinfo(
                pid,
                libc::PROC_PIDTBSDINFO,
                0,
                info.as_mut_ptr().cast(),
                size,
            )
        };
        if got != size {
            return match std::io::Error::last_os_error().raw_os_error() {
                Some(libc::ESRCH) => Probe::Gone,
                // EPERM: another user's process, which exists.
                _ => Probe::Unknown,
            };
        }
        // SAFETY: proc_pidinfo filled all `size` bytes (and the struct was zeroed before).
        let info = unsafe { info.assume_init() };
        if info.pbi_status == libc::SZOMB {
            return Probe::Gone;
        }
        Probe::Running(
            info.pbi_start_tvsec
                .saturating_mul(1_000_000)
                .saturating_add(info.pbi_start_tvusec)
                .max(1),
        )
    }

    pub fn scope_text() -> Option<Vec<u8>> {
        let mut buf = [0u8; 256];
        // SAFETY: `buf` is writable for its whole length, which is passed.
        let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
        if rc != 0 {
            return None;
        }
        let len = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        (len > 0).then(|| buf[..len].to_vec())
    }
}

#[cfg(windows)]
mod imp {
    use super::Probe;

    use windows_sys::Win32::Foundation::{
        CloseHandle, ERROR_INVALID_PARAMETER, FILETIME, STILL_ACTIVE,
    };
    use windows_sys::Win32::System::SystemInformation::{
        ComputerNamePhysicalDnsFullyQualified, GetComputerNameExW,
    };
    use windows_sys::Win32::System::Threading::{
        GetExitCodeProcess, GetProcessTimes, OpenProcess, PROCESS_QUERY_LIMITED_INFORMATION,
    };

    pub fn probe(pid: u32) -> Probe {
        // SAFETY: a plain call; the handle it returns is closed below.
        let handle = unsafe { OpenProcess(PROCESS_QUERY_LIMITED_INFORMATION, 0, pid) };
        if handle.is_null() {
            return match std::io::Error::last_os_error().raw_os_error() {
                // The pid names no process.
                Some(e) if e == ERROR_INVALID_PARAMETER as i32 => Probe::Gone,
                // ERROR_ACCESS_DENIED: a protected or another user's process, which exists.
                _ => Probe::Unknown,
            };
        }
        let zero = FILETIME {
            dwLowDateTime: 0,
            dwHighDateTime: 0,
        };
        let (mut created, mut exited, mut kernel, mut user) = (zero, zero, zero, zero);
        let mut code = 0u32;
        // SAFETY: `handle` is a process handle with PROCESS_QUERY_LIMITED_INFORMATION, which
        // both calls need, and every out pointer is to a live local of the right type.
        let (timed, coded) = unsafe {
            (
                GetProcessTimes(handle, &mut created, &mut exited, &mut kernel, &mut user),
                GetExitCodeProcess(handle, &mut code),
            )
        };
        // SAFETY: the handle came from OpenProcess above and is closed once.
        unsafe { CloseHandle(handle) };
        // A process object outlives its process while handles to it are open: an exit code
        // means it ended. (One that exits with STILL_ACTIVE, 259, as its code counts as alive
        // and its locks expire.)
        if coded != 0 && code != STILL_ACTIVE as u32 {
            return Probe::Gone;
        }
        if timed == 0 {
            return Probe::Unknown;
        }
        let start = (u64::from(created.dwHighDateTime) << 32) | u64::from(created.dwLowDateTime);
        Probe::Running(start.max(1))
    }

    pub fn scope_text() -> Option<Vec<u8>> {
        let mut len = 0u32;
        // SAFETY: a NULL buffer with size 0 asks for the size needed, written to `len`.
        unsafe {
            GetComputerNameExW(
                ComputerNamePhysicalDnsFullyQualified,
                std::ptr::null_mut(),
                &mut len,
            )
        };
        if len == 0 {
            return None;
        }
        let mut buf = vec![0u16; len as usize];
        // SAFETY: `buf` holds `len` UTF-16 units, as `len` says.
        let ok = unsafe {
            GetComputerNameExW(
                ComputerNamePhysicalDnsFullyQualified,
                buf.as_mut_ptr(),
                &mut len,
            )
        };
        if ok == 0 {
            return None;
        }
        buf.truncate(len as usize);
        Some(String::from_utf16_lossy(&buf).into_bytes())
    }
}

#[cfg(not(any(target_os = "linux", target_vendor = "apple", windows)))]
mod imp {
    use super::Probe;

    pub fn probe(_pid: u32) -> Probe {
        Probe::Unknown
    }

    pub fn scope_text() -> Option<Vec<u8>> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_alive_and_only_with_its_own_start_time() {
        let (pid, start) = current();
        assert_ne!(start, 0, "the start time of this process is readable");
        assert!(is_alive(pid, start));
        assert!(!is_alive(pid, start + 1));
        assert_eq!(exists(pid), Some(true));
    }

    #[test]
    fn a_process_that_ended_is_gone() {
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .arg("--list")
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let pid = child.id();
        child.wait().unwrap();
        // The child's handle is still open here (on Windows its process object lives on):
        // it ended, so it is dead whatever its start time.
        assert!(!is_alive(pid, 0));
        assert_eq!(exists(pid), Some(false));
    }

    #[test]
    fn the_scope_is_known_and_stable() {
        assert_ne!(scope(), 0);
        assert_eq!(scope(), scope());
    }
}
