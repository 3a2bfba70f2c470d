//! Real RabbitMQ nodes for tests, each fully private: its own node name, AMQP and distribution
//! ports on 127.0.0.1, Erlang cookie, data, log and config directory, so that several tests of
//! one binary can run nodes side by side without seeing each other. Only epmd, the Erlang port
//! mapper, is shared with whatever else runs on the machine.
//!
//! Unlike the rest of the testkit, everything here returns `Result<_, String>`: a broker that
//! cannot start is an environment problem the caller should report (or skip on, see
//! [`available`]), not a panic deep inside a helper.

use std::collections::{HashMap, HashSet};
use std::fs;
use std::hash::{BuildHasher, Hasher, RandomState};
use std::io::Read;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use tempfile::TempDir;

/// Environment variable naming the directory that holds `rabbitmq-server` and `rabbitmqctl`.
pub const BIN_DIR_ENV: &str = "POSTBOX_RABBITMQ_BIN_DIR";

/// How long [`Node::start`] and [`Node::restart`] wait for a node to come up.
pub const START_TIMEOUT: Duration = Duration::from_secs(90);

/// How long one `rabbitmqctl` call may take before it is killed.
const CTL_TIMEOUT: Duration = Duration::from_secs(60);

/// How long [`Node::stop`] waits for a graceful shutdown before killing the VM.
const STOP_TIMEOUT: Duration = Duration::from_secs(30);

/// Debian's `/usr/sbin/rabbitmq-*` are a wrapper that re-runs the real script as the `rabbitmq`
/// user with HOME reset, which would lose every private setting; the real scripts live here.
const DEBIAN_BIN_DIR: &str = "/usr/lib/rabbitmq/bin";

/// Whether a RabbitMQ installation can be used: `Ok` when `rabbitmq-server` and `rabbitmqctl`
/// are found (in `POSTBOX_RABBITMQ_BIN_DIR`, `/usr/lib/rabbitmq/bin`, `PATH` or `/usr/sbin`).
///
/// `POSTBOX_BROKER_TESTS=skip` says no: the Rust concern of CI sets it, because the broker
/// tests run in the bridge concern (`.ci/bridge.sh`), once RabbitMQ is installed.
///
/// # Errors
/// Says where it looked when the scripts are missing, or that the tests were told to skip.
pub fn available() -> Result<(), String> {
    if std::env::var_os(SKIP_ENV).is_some_and(|v| v == "skip") {
        return Err(format!(
            "{SKIP_ENV}=skip (the broker tests run in .ci/bridge.sh)"
        ));
    }
    bin_dir().map(|_| ())
}

/// Set to `skip` to make [`available`] refuse.
pub const SKIP_ENV: &str = "POSTBOX_BROKER_TESTS";

/// The directory holding the real `rabbitmq-server` and `rabbitmqctl` scripts.
///
/// # Errors
/// Lists the directories searched when none holds both scripts.
pub fn bin_dir() -> Result<PathBuf, String> {
    let mut candidates = Vec::new();
    if let Some(dir) = std::env::var_os(BIN_DIR_ENV) {
        let dir = PathBuf::from(dir);
        // An explicit choice that is wrong should fail loudly rather than silently fall back.
        return if has_scripts(&dir) {
            Ok(dir)
        } else {
            Err(format!(
                "{BIN_DIR_ENV}={} does not hold executable rabbitmq-server and rabbitmqctl",
                dir.display()
            ))
        };
    }
    candidates.push(PathBuf::from(DEBIAN_BIN_DIR));
    if let Some(path) = std::env::var_os("PATH") {
        candidates.extend(std::env::split_paths(&path));
    }
    candidates.push(PathBuf::from("/usr/sbin"));
    candidates.push(PathBuf::from("/usr/local/sbin"));
    for dir in &candidates {
        if has_scripts(dir) && !is_debian_wrapper(&dir.join("rabbitmq-server")) {
            return Ok(dir.clone());
        }
    }
    let searched: Vec<String> = candidates.iter().map(|d| d.display().to_string()).collect();
    Err(format!(
        "rabbitmq-server and rabbitmqctl not found in {BIN_DIR_ENV}, {}",
        searched.join(", ")
    ))
}

fn has_scripts(dir: &Path) -> bool {
    ["rabbitmq-server", "rabbitmqctl"].iter().all(|name| {
        fs::metadata(dir.join(name))
            .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            .unwrap_or(false)
    })
}

fn is_debian_wrapper(script: &Path) -> bool {
    fs::canonicalize(script)
        .map(|p| {
            p.file_name()
                .is_some_and(|n| n == "rabbitmq-script-wrapper")
        })
        .unwrap_or(false)
}

/// A value different in every call, across processes too, for names, ports and cookies.
fn random_u64() -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    h.write_u32(std::process::id());
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    h.finish()
}

/// Ports this process has handed out, so two nodes started at the same moment never get the
/// same one even before either binds it.
fn taken_ports() -> MutexGuard<'static, HashSet<u16>> {
    static TAKEN: OnceLock<Mutex<HashSet<u16>>> = OnceLock::new();
    TAKEN
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

/// A port free on 127.0.0.1. Drawn below Linux's ephemeral range (32768 and up) rather than
/// asked of the kernel with port 0: a port in the ephemeral range is soon reused by some
/// outgoing connection, and a node must get its ports back when it is restarted.
fn free_port() -> Result<u16, String> {
    let mut taken = taken_ports();
    for _ in 0..500 {
        let port = 20000 + (random_u64() % 12000) as u16;
        if taken.contains(&port) {
            continue;
        }
        if TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_ok() {
            taken.insert(port);
            return Ok(port);
        }
    }
    Err("no free TCP port found in 20000..32000 on 127.0.0.1".into())
}

/// The last `lines` lines of a file, or a note that it could not be read.
fn tail(path: &Path, lines: usize) -> String {
    match fs::read(path) {
        Ok(bytes) => {
            let text = String::from_utf8_lossy(&bytes);
            let all: Vec<&str> = text.lines().collect();
            all[all.len().saturating_sub(lines)..].join("\n")
        }
        Err(e) => format!("({}: {e})", path.display()),
    }
}

/// Children, by parent, of every process on the machine (from /proc).
fn process_children() -> HashMap<u32, Vec<u32>> {
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    for pid in all_pids() {
        if let Some(ppid) = parent_of(pid) {
            children.entry(ppid).or_default().push(pid);
        }
    }
    children
}

/// Every pid under /proc now (none where /proc cannot be read).
fn all_pids() -> Vec<u32> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse().ok()))
        .collect()
}

/// The parent pid of a process; `None` once it is gone.
fn parent_of(pid: u32) -> Option<u32> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may itself contain spaces or parentheses.
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split(' ').nth(1)?.parse().ok()
}

/// Whether a process exists and is not a zombie (a zombie holds no port, file or memory; it
/// only waits for a parent to collect it, which a container's init may never do).
///
/// Every thread counts: the main thread of a killed multi-threaded VM turns zombie while its
/// other threads still exit, and the sockets close only with the last of them.
fn is_live(pid: u32) -> bool {
    let live_state = |stat: String| {
        stat.rfind(')')
            .and_then(|i| stat[i + 1..].trim_start().chars().next())
            .is_some_and(|state| state != 'Z' && state != 'X')
    };
    match fs::read_dir(format!("/proc/{pid}/task")) {
        Ok(tasks) => tasks
            .flatten()
            .any(|task| fs::read_to_string(task.path().join("stat")).is_ok_and(live_state)),
        Err(_) => false,
    }
}

fn descendants(root: u32) -> Vec<u32> {
    let children = process_children();
    let mut found = Vec::new();
    let mut todo = vec![root];
    while let Some(pid) = todo.pop() {
        for &child in children.get(&pid).map(Vec::as_slice).unwrap_or(&[]) {
            found.push(child);
            todo.push(child);
        }
    }
    found
}

fn comm_of(pid: u32) -> String {
    fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

fn sigkill(pids: &[u32]) {
    if pids.is_empty() {
        return;
    }
    // std offers no kill(2) for processes that are not our direct children.
    let _ = Command::new("kill")
        .arg("-KILL")
        .args(pids.iter().map(u32::to_string))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// Waits for a child with a deadline; `true` if it exited.
fn wait_until(child: &mut Child, deadline: Instant) -> bool {
    loop {
        match child.try_wait() {
            Ok(Some(_)) | Err(_) => return true,
            Ok(None) if Instant::now() >= deadline => return false,
            Ok(None) => thread::sleep(Duration::from_millis(50)),
        }
    }
}

fn can_connect(port: u16) -> bool {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    TcpStream::connect_timeout(&addr, Duration::from_millis(500)).is_ok()
}

/// The running node of one `Node`, with the state its kill needs.
struct Running {
    /// The `rabbitmq-server` shell script, parent of the Erlang VM.
    script: Child,
    /// Kills the node's process group once the test process is gone: Drop does not run when a
    /// test run is interrupted or killed, and the VM ignores SIGINT.
    watchdog: Option<Child>,
}

impl Running {
    fn kill(&mut self) {
        if let Some(mut watchdog) = self.watchdog.take() {
            let _ = watchdog.kill();
            let _ = watchdog.wait();
        }
        kill_tree(&mut self.script);
    }
}

/// How to start one node; [`Node::start`] uses the defaults.
#[derive(Clone, Debug)]
pub struct NodeOptions {
    /// Erlang cookie; members of one cluster must share it.
    pub cookie: String,
    /// Lines appended to the node's `rabbitmq.conf` (new-style sysctl format).
    pub extra_config: Vec<String>,
}

impl Default for NodeOptions {
    fn default() -> Self {
        NodeOptions {
            cookie: format!("POSTBOX{:016X}", random_u64()),
            extra_config: Vec::new(),
        }
    }
}

/// One private RabbitMQ node, killed and its directory removed on drop.
///
/// Methods take `&self` so that a test can kill one node of a [`Cluster`] while it holds
/// references to the others.
pub struct Node {
    name: String,
    port: u16,
    dist_port: u16,
    bin: PathBuf,
    dir: TempDir,
    running: Mutex<Option<Running>>,
}

impl Node {
    /// Starts a standalone node and returns once it accepts AMQP connections.
    ///
    /// # Errors
    /// When RabbitMQ is missing, a port or the directory cannot be had, or the node is not up
    /// within [`START_TIMEOUT`]; the message then ends with the tail of the node's logs.
    pub fn start() -> Result<Node, String> {
        Node::start_with(NodeOptions::default())
    }

    /// Starts a node with the given options and returns once it accepts AMQP connections.
    ///
    /// # Errors
    /// As [`Node::start`].
    pub fn start_with(options: NodeOptions) -> Result<Node, String> {
        let node = Node::create(options)?;
        node.launch()?;
        node.wait_ready()?;
        Ok(node)
    }

    /// Prepares the directory, name and ports of a node without starting it.
    fn create(options: NodeOptions) -> Result<Node, String> {
        let bin = bin_dir()?;
        let dir = tempfile::Builder::new()
            .prefix("postbox-rabbitmq-")
            .tempdir()
            .map_err(|e| format!("cannot create the node's temporary directory: {e}"))?;
        let name = format!("pbx{:012x}@localhost", random_u64() & 0xffff_ffff_ffff);
        let port = free_port()?;
        let dist_port = free_port()?;
        let root = dir.path();
        let write = |file: &str, contents: &str| {
            fs::write(root.join(file), contents)
                .map_err(|e| format!("cannot write {}: {e}", root.join(file).display()))
        };
        // Both the server and the CLI read the cookie from $HOME; the VM refuses a cookie file
        // that others can read.
        let cookie = root.join(".erlang.cookie");
        write(".erlang.cookie", &options.cookie)?;
        fs::set_permissions(&cookie, fs::Permissions::from_mode(0o400))
            .map_err(|e| format!("cannot chmod {}: {e}", cookie.display()))?;
        // No plugins: no management UI to wait for, and the node boots in a few seconds.
        write("enabled_plugins", "[].\n")?;
        // Replaces /etc/rabbitmq/rabbitmq-env.conf, which could rename the node or move ports.
        write("rabbitmq-env.conf", "")?;
        let mut config = vec![
            "loopback_users.guest = true".to_string(),
            format!("listeners.tcp.default = 127.0.0.1:{port}"),
            // A nearly full CI disk must not block publishers behind a disk alarm.
            "disk_free_limit.absolute = 1MB".to_string(),
        ];
        config.extend(options.extra_config);
        write("rabbitmq.conf", &(config.join("\n") + "\n"))?;
        Ok(Node {
            name,
            port,
            dist_port,
            bin,
            dir,
            running: Mutex::new(None),
        })
    }

    /// The node name, `pbx…@localhost`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The AMQP port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The Erlang distribution port on 127.0.0.1 (clustering and CLI tools).
    pub fn dist_port(&self) -> u16 {
        self.dist_port
    }

    /// `amqp://guest:guest@127.0.0.1:PORT/%2f`, the default virtual host as guest.
    pub fn amqp_uri(&self) -> String {
        format!("amqp://guest:guest@127.0.0.1:{}/%2f", self.port)
    }

    /// The node's private directory (cookie, config, data under `mnesia/`, logs under `log/`).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The node's data directory, kept across [`Node::kill`] and [`Node::restart`].
    pub fn data_dir(&self) -> PathBuf {
        self.dir().join("mnesia").join(&self.name)
    }

    /// The node's main log file.
    pub fn log_file(&self) -> PathBuf {
        self.dir().join("log").join(format!("{}.log", self.name))
    }

    fn running(&self) -> MutexGuard<'_, Option<Running>> {
        self.running.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether the node's Erlang VM (or its start script) is alive as far as this handle knows.
    pub fn is_running(&self) -> bool {
        let mut running = self.running();
        match running.as_mut() {
            Some(r) => matches!(r.script.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// Pids of the live processes this node started: the start script, the Erlang VM
    /// (`beam.smp`) and the VM's helpers (`erl_child_setup`, `inet_gethost`).
    pub fn pids(&self) -> Vec<u32> {
        let running = self.running();
        match running.as_ref() {
            Some(r) => {
                let root = r.script.id();
                let mut pids = vec![root];
                pids.extend(descendants(root));
                pids.retain(|&p| is_live(p));
                pids
            }
            None => Vec::new(),
        }
    }

    /// Pids of live `beam.smp` processes on the machine whose command line names this node's
    /// directory; found without this handle's bookkeeping, so a test can check that a kill
    /// left nothing behind. The CLI tools' own short-lived VMs are not counted.
    pub fn vm_pids_on_machine(&self) -> Vec<u32> {
        let home = self.dir().as_os_str().as_encoded_bytes().to_vec();
        let mut pids = Vec::new();
        for pid in all_pids() {
            if comm_of(pid) != "beam.smp" || !is_live(pid) {
                continue;
            }
            let Ok(cmdline) = fs::read(format!("/proc/{pid}/cmdline")) else {
                continue;
            };
            let args: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
            let ours = args
                .windows(2)
                .any(|w| w[0] == b"-home" && w[1] == home.as_slice());
            let is_server = args.windows(2).any(|w| w[0] == b"-s" && w[1] == b"rabbit");
            if ours && is_server {
                pids.push(pid);
            }
        }
        pids
    }

    /// The environment every RabbitMQ script of this node runs with.
    fn command(&self, script: &str) -> Command {
        let root = self.dir();
        let mut cmd = Command::new(self.bin.join(script));
        // Settings inherited from the caller's environment must not redirect a private node.
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("RABBITMQ_") {
                cmd.env_remove(key);
            }
        }
        let path = |p: &str| root.join(p);
        cmd.current_dir(root)
            .env("HOME", root)
            .env("LANG", "C.UTF-8")
            .env("LC_ALL", "C.UTF-8")
            .env("RABBITMQ_NODENAME", &self.name)
            .env("RABBITMQ_USE_LONGNAME", "false")
            .env("RABBITMQ_NODE_IP_ADDRESS", "127.0.0.1")
            .env("RABBITMQ_NODE_PORT", self.port.to_string())
            .env("RABBITMQ_DIST_PORT", self.dist_port.to_string())
            .env("RABBITMQ_CONF_ENV_FILE", path("rabbitmq-env.conf"))
            .env("RABBITMQ_CONFIG_FILE", path("rabbitmq.conf"))
            .env("RABBITMQ_ADVANCED_CONFIG_FILE", path("advanced.config"))
            .env("RABBITMQ_ENABLED_PLUGINS_FILE", path("enabled_plugins"))
            .env("RABBITMQ_MNESIA_BASE", path("mnesia"))
            .env("RABBITMQ_MNESIA_DIR", self.data_dir())
            .env("RABBITMQ_PLUGINS_EXPAND_DIR", path("plugins-expand"))
            .env("RABBITMQ_LOG_BASE", path("log"))
            .env("RABBITMQ_PID_FILE", path("rabbitmq.pid"))
            // Without this the distribution port listens on every interface.
            .env(
                "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS",
                "-kernel inet_dist_use_interface {127,0,0,1}",
            )
            // The CLI's default range has 11 ports shared by every CLI call on the machine; many
            // tests polling nodes at once would run out of them.
            .env("RABBITMQ_CTL_DIST_PORT_MIN", "35672")
            .env("RABBITMQ_CTL_DIST_PORT_MAX", "36671")
            // Only applies when this node is the one that starts epmd.
            .env("ERL_EPMD_ADDRESS", "127.0.0.1")
            .stdin(Stdio::null());
        cmd
    }

    /// Spawns `rabbitmq-server` without waiting for it.
    fn launch(&self) -> Result<(), String> {
        let mut running = self.running();
        if let Some(r) = running.as_mut()
            && matches!(r.script.try_wait(), Ok(None))
        {
            return Err(format!("node {} is already running", self.name));
        }
        let open = |file: &str| {
            fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(self.dir().join(file))
                .map_err(|e| format!("cannot open {file}: {e}"))
        };
        let script = self
            .command("rabbitmq-server")
            .stdout(open("server.stdout")?)
            .stderr(open("server.stderr")?)
            // Its own process group, which the watchdog kills as a whole; the VM's helpers
            // start sessions of their own but exit when the VM does.
            .process_group(0)
            .spawn()
            .map_err(|e| {
                format!(
                    "cannot run {}: {e}",
                    self.bin.join("rabbitmq-server").display()
                )
            })?;
        let group = script.id();
        // A test process whose parent died too is a zombie no one collects, so "gone" means
        // no /proc entry or state Z. dash's kill takes only `-s KILL` before a negative pid.
        let watchdog = Command::new("sh")
            .arg("-c")
            .arg(format!(
                "while s=$(sed 's/.*) //' /proc/{}/stat 2>/dev/null) && [ \"${{s%% *}}\" != Z ]; \
                 do sleep 1; done; kill -s KILL -- -{group} 2>/dev/null",
                std::process::id()
            ))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            // Out of the test's process group, so the Ctrl-C that ends the test spares it.
            .process_group(0)
            .spawn()
            // Without it only an interrupted run leaks the node; not worth failing a start.
            .ok();
        *running = Some(Running { script, watchdog });
        Ok(())
    }

    /// What the node printed and logged last, for error messages.
    fn logs(&self) -> String {
        format!(
            "--- {} (tail) ---\n{}\n--- server stdout (tail) ---\n{}\n--- server stderr (tail) ---\n{}",
            self.log_file().display(),
            tail(&self.log_file(), 30),
            tail(&self.dir().join("server.stdout"), 40),
            tail(&self.dir().join("server.stderr"), 15),
        )
    }

    /// Waits until the node has booted and its AMQP port accepts connections.
    fn wait_ready(&self) -> Result<(), String> {
        let started = Instant::now();
        let deadline = started + START_TIMEOUT;
        let fail = |why: String| -> Result<(), String> {
            Err(format!(
                "RabbitMQ node {} (AMQP port {}, distribution port {}) did not start: {why}\n{}",
                self.name,
                self.port,
                self.dist_port,
                self.logs()
            ))
        };
        let mut last_ctl_error = String::new();
        loop {
            if !self.is_running() {
                return fail("rabbitmq-server exited".into());
            }
            // The distribution port opens before the broker boots; until then every CLI call
            // fails at once, and each costs a VM start, so poll the cheap thing first.
            if can_connect(self.dist_port) {
                let left = deadline
                    .saturating_duration_since(Instant::now())
                    .as_secs()
                    .max(1);
                match self.ctl(&["await_startup", "--timeout", &left.to_string()]) {
                    Ok(_) if can_connect(self.port) => return Ok(()),
                    Ok(_) => last_ctl_error = "booted but the AMQP port is closed".into(),
                    Err(e) => last_ctl_error = e,
                }
            }
            if Instant::now() >= deadline {
                return fail(format!(
                    "not up after {:?}; last check: {}",
                    started.elapsed(),
                    if last_ctl_error.is_empty() {
                        "distribution port never opened"
                    } else {
                        &last_ctl_error
                    }
                ));
            }
            thread::sleep(Duration::from_millis(200));
        }
    }

    /// Runs `rabbitmqctl -n NAME ARGS…` with the node's environment (cookie, names) and
    /// returns its standard output.
    ///
    /// # Errors
    /// When rabbitmqctl cannot run, exits non-zero (with its output), or takes over a minute.
    pub fn ctl(&self, args: &[&str]) -> Result<String, String> {
        self.run_cli("rabbitmqctl", args)
    }

    /// Runs another CLI tool of the node (`rabbitmq-diagnostics`, `rabbitmq-queues`, …) with
    /// `-n NAME ARGS…`, like [`Node::ctl`].
    ///
    /// # Errors
    /// As [`Node::ctl`].
    pub fn run_cli(&self, tool: &str, args: &[&str]) -> Result<String, String> {
        let shown = format!("{tool} -n {} {}", self.name, args.join(" "));
        let mut child = self
            .command(tool)
            .arg("-n")
            .arg(&self.name)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot run {shown}: {e}"))?;
        // Read both pipes while waiting, or a chatty command blocks on a full pipe.
        let reader = |pipe: Option<Box<dyn Read + Send>>| {
            thread::spawn(move || {
                let mut out = Vec::new();
                if let Some(mut pipe) = pipe {
                    let _ = pipe.read_to_end(&mut out);
                }
                String::from_utf8_lossy(&out).into_owned()
            })
        };
        let stdout = reader(
            child
                .stdout
                .take()
                .map(|p| Box::new(p) as Box<dyn Read + Send>),
        );
        let stderr = reader(
            child
                .stderr
                .take()
                .map(|p| Box::new(p) as Box<dyn Read + Send>),
        );
        let finished = wait_until(&mut child, Instant::now() + CTL_TIMEOUT);
        if !finished {
            let _ = child.kill();
        }
        let status = child.wait().map_err(|e| format!("{shown}: {e}"))?;
        let stdout = stdout.join().unwrap_or_default();
        let stderr = stderr.join().unwrap_or_default();
        if !finished {
            return Err(format!(
                "{shown} timed out after {CTL_TIMEOUT:?}\n{stdout}{stderr}"
            ));
        }
        if !status.success() {
            return Err(format!("{shown} failed ({status}):\n{stdout}{stderr}"));
        }
        Ok(stdout)
    }

    /// SIGKILLs the node's Erlang VM and every process it started, and waits until they are
    /// gone; the data directory stays for [`Node::restart`]. Does nothing if not running.
    pub fn kill(&self) {
        let mut running = self.running();
        if let Some(mut r) = running.take() {
            r.kill();
            self.wait_ports_closed();
        }
    }

    /// Waits (briefly) until the node's ports refuse connections, so that a caller checking
    /// right after a kill or stop sees the node gone.
    fn wait_ports_closed(&self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while (can_connect(self.port) || can_connect(self.dist_port)) && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// Stops the node gracefully (`rabbitmqctl stop`), killing it if that fails or takes over
    /// 30 s; the data directory stays for [`Node::restart`].
    ///
    /// # Errors
    /// When the graceful stop failed; the node has been killed even then.
    pub fn stop(&self) -> Result<(), String> {
        if !self.is_running() {
            self.kill();
            return Ok(());
        }
        let result = self.ctl(&["stop"]).map(|_| ());
        let mut running = self.running();
        if let Some(mut r) = running.take() {
            if !wait_until(&mut r.script, Instant::now() + STOP_TIMEOUT) {
                r.kill();
                self.wait_ports_closed();
                return result.and(Err(format!(
                    "node {} still running {STOP_TIMEOUT:?} after rabbitmqctl stop; killed",
                    self.name
                )));
            }
            // Helpers the VM left behind would otherwise outlive the node.
            r.kill();
            self.wait_ports_closed();
        }
        result
    }

    /// Starts the node again, after [`Node::kill`] or [`Node::stop`], with the same name,
    /// ports, cookie and data directory, and waits until it accepts AMQP connections. A node
    /// still running is killed first.
    ///
    /// # Errors
    /// As [`Node::start`].
    pub fn restart(&self) -> Result<(), String> {
        self.kill();
        self.launch()?;
        self.wait_ready()
    }

    /// The names of the cluster's running nodes, as this node sees them (`cluster_status`).
    ///
    /// # Errors
    /// When rabbitmqctl fails or its output has no running nodes.
    pub fn running_nodes(&self) -> Result<Vec<String>, String> {
        let json = self.ctl(&["cluster_status", "--formatter", "json"])?;
        json_string_list(&json, "running_nodes")
            .ok_or_else(|| format!("no running_nodes in cluster_status output: {json}"))
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill();
    }
}

/// SIGKILLs a start script's whole process tree and collects the script.
fn kill_tree(script: &mut Child) {
    // The helpers run in sessions of their own, so a process-group kill would miss them; take
    // the tree before killing, as the dying VM's children are reparented away from it. Once
    // the script has been collected its pid may belong to another process: no tree then.
    let mut tree = match script.try_wait() {
        Ok(None) => descendants(script.id()),
        _ => Vec::new(),
    };
    // The VM first: the script is waiting for it and so collects it rather than leaving a
    // zombie for init.
    tree.sort_by_key(|&p| comm_of(p) != "beam.smp");
    sigkill(&tree);
    let _ = script.kill();
    let _ = script.wait();
    let deadline = Instant::now() + Duration::from_secs(10);
    while tree.iter().any(|&p| is_live(p)) && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(20));
        let left: Vec<u32> = tree.iter().copied().filter(|&p| is_live(p)).collect();
        sigkill(&left);
    }
}

/// The strings of the JSON array under `"key"` in RabbitMQ's JSON output. Node names contain
/// no quotes or escapes, so this small reader avoids a JSON dependency.
fn json_string_list(json: &str, key: &str) -> Option<Vec<String>> {
    let start = json.find(&format!("\"{key}\":["))? + key.len() + 4;
    let end = start + json[start..].find(']')?;
    Some(
        json[start..end]
            .split(',')
            .map(|s| s.trim().trim_matches('"').to_string())
            .filter(|s| !s.is_empty())
            .collect(),
    )
}

/// RabbitMQ nodes joined into one cluster, all killed on drop.
pub struct Cluster {
    nodes: Vec<Node>,
}

impl Cluster {
    /// Starts `n` nodes (at least one) sharing a cookie, joined into one cluster, and returns
    /// once every node reports all `n` as running, so quorum queues can be declared at once.
    ///
    /// All nodes start together; the others join the first through classic config peer
    /// discovery, which only acts on a blank node, so a restarted member simply rejoins.
    ///
    /// # Errors
    /// When a node cannot start (see [`Node::start`]) or the cluster does not form within
    /// [`START_TIMEOUT`].
    pub fn start(n: usize) -> Result<Cluster, String> {
        if n == 0 {
            return Err("a cluster needs at least one node".into());
        }
        let cookie = NodeOptions::default().cookie;
        let seed = Node::create(NodeOptions {
            cookie: cookie.clone(),
            extra_config: Vec::new(),
        })?;
        let join = vec![
            "cluster_formation.peer_discovery_backend = classic_config".to_string(),
            format!("cluster_formation.classic_config.nodes.1 = {}", seed.name()),
            // The seed boots at the same time; a joiner that gives up on it would boot as a
            // cluster of its own, so it keeps trying for as long as a start may take.
            format!(
                "cluster_formation.discovery_retry_limit = {}",
                START_TIMEOUT.as_millis() / 500
            ),
            "cluster_formation.discovery_retry_interval = 500".to_string(),
        ];
        let mut nodes = vec![seed];
        for _ in 1..n {
            nodes.push(Node::create(NodeOptions {
                cookie: cookie.clone(),
                extra_config: join.clone(),
            })?);
        }
        // Nodes are dropped (killed) on every early return below.
        for node in &nodes {
            node.launch()?;
        }
        thread::scope(|s| {
            let waits: Vec<_> = nodes
                .iter()
                .map(|node| s.spawn(|| node.wait_ready()))
                .collect();
            waits
                .into_iter()
                .map(|w| {
                    w.join()
                        .unwrap_or_else(|_| Err("readiness check panicked".into()))
                })
                .collect::<Result<Vec<()>, String>>()
        })?;
        let cluster = Cluster { nodes };
        cluster.wait_for_members(n)?;
        Ok(cluster)
    }

    /// All members, in start order; the first is the one the others joined.
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// Member `i` (0-based).
    ///
    /// # Panics
    /// If `i` is out of range, a bug in the test.
    pub fn node(&self, i: usize) -> &Node {
        &self.nodes[i]
    }

    /// The AMQP URIs of all members, in start order.
    pub fn uris(&self) -> Vec<String> {
        self.nodes.iter().map(Node::amqp_uri).collect()
    }

    /// SIGKILLs member `i` (see [`Node::kill`]); the others keep running.
    ///
    /// # Panics
    /// If `i` is out of range.
    pub fn kill(&self, i: usize) {
        self.node(i).kill();
    }

    /// Restarts member `i` on its name, ports and data (see [`Node::restart`]); it rejoins.
    ///
    /// # Errors
    /// As [`Node::restart`].
    ///
    /// # Panics
    /// If `i` is out of range.
    pub fn restart(&self, i: usize) -> Result<(), String> {
        self.node(i).restart()
    }

    /// The running members as seen by the first running member (`cluster_status`), sorted.
    ///
    /// # Errors
    /// When no member is running or none answers.
    pub fn running_nodes(&self) -> Result<Vec<String>, String> {
        let mut last = String::from("no member is running");
        for node in self.nodes.iter().filter(|n| n.is_running()) {
            match node.running_nodes() {
                Ok(mut names) => {
                    names.sort();
                    return Ok(names);
                }
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// Waits until every running member reports exactly `n` running nodes (polling
    /// `cluster_status`; each poll is a CLI call, about half a second).
    ///
    /// # Errors
    /// When that is not so within [`START_TIMEOUT`]; says what each member last reported.
    pub fn wait_for_members(&self, n: usize) -> Result<(), String> {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let views: Vec<(&str, Result<Vec<String>, String>)> = self
                .nodes
                .iter()
                .filter(|node| node.is_running())
                .map(|node| (node.name(), node.running_nodes()))
                .collect();
            if !views.is_empty()
                && views
                    .iter()
                    .all(|(_, v)| v.as_ref().is_ok_and(|v| v.len() == n))
            {
                return Ok(());
            }
            if Instant::now() >= deadline {
                let report: Vec<String> = views
                    .iter()
                    .map(|(name, view)| format!("{name}: {view:?}"))
                    .collect();
                return Err(format!(
                    "cluster did not reach {n} running nodes within {START_TIMEOUT:?}:\n{}\n{}",
                    report.join("\n"),
                    self.nodes.first().map(Node::logs).unwrap_or_default()
                ));
            }
            thread::sleep(Duration::from_millis(300));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::json_string_list;

    #[test]
    fn reads_running_nodes_from_cluster_status_json() {
        let json = r#"{"disk_nodes":["a@localhost"],"running_nodes":["b@localhost","a@localhost"],"x":[]}"#;
        assert_eq!(
            json_string_list(json, "running_nodes").unwrap(),
            ["b@localhost", "a@localhost"]
        );
        assert_eq!(
            json_string_list(r#"{"running_nodes":[]}"#, "running_nodes").unwrap(),
            Vec::<String>::new()
        );
        assert!(json_string_list("{}", "running_nodes").is_none());
    }
}
