//! The server room: redis-server / valkey-server processes on free loopback ports, loaded with
//! the freshly built module and stopped by PID ([`Server`], started through [`ServerBuilder`]),
//! and where they come from (the binary, the module, their directories).

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::client::Link;
use crate::process::Process;
use crate::wait::{link_up_within, LINK_UP_WITHIN};
use crate::{Connection, Value};

static NEXT_DIR: AtomicUsize = AtomicUsize::new(0);

pub fn server_binary() -> String {
    std::env::var("LOCK_TEST_SERVER").unwrap_or_else(|_| "redis-server".to_string())
}

/// How many times slower than a native server the one under test runs: `LOCK_TEST_SLOWDOWN`,
/// 1 unless set (scripts/test-aarch64.sh sets 10 for an arm64 server under qemu-user). Bounds
/// whose only other outcome is much later (a `WAIT` running out) may be scaled by it; a bound
/// that tells two nearby mechanisms apart must not be.
pub fn server_slowdown() -> u32 {
    std::env::var("LOCK_TEST_SLOWDOWN")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n >= 1)
        .unwrap_or(1)
}

pub fn module_path() -> PathBuf {
    let path = std::env::var("LOCK_MODULE")
        .map(PathBuf::from)
        .unwrap_or_else(|_| workspace().join("target/debug/libredis_lock.so"));
    assert!(
        path.exists(),
        "module {} is missing: run `cargo build` (or `make test`) first",
        path.display()
    );
    path
}

/// The repository root (this crate lives in `harness/`).
pub fn workspace() -> PathBuf {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    here.parent().unwrap_or(here).to_path_buf()
}

/// A free loopback port.
pub fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    listener.local_addr().expect("local addr").port()
}

/// A fresh directory for a server under `target/test-servers`.
pub fn fresh_dir(tag: &str) -> PathBuf {
    fresh_dir_under(&workspace().join("target/test-servers"), tag)
}

/// A fresh directory in memory (tmpfs, `/dev/shm`) where there is one, else `fresh_dir`: for a
/// process that a slow `fsync` must not stall. Sentinel flushes its config with `fsync` at each
/// new epoch; behind a busy disk that once took 2.2 s, and a Sentinel stalled over 2 s enters
/// TILT mode and fails nothing over for 30 s (the soak's only fault-suite failure).
pub fn fresh_memory_dir(tag: &str) -> PathBuf {
    let shm = Path::new("/dev/shm");
    if !shm.is_dir() {
        return fresh_dir(tag);
    }
    fresh_dir_under(&shm.join("redis-lock-tests"), tag)
}

fn fresh_dir_under(parent: &Path, tag: &str) -> PathBuf {
    let n = NEXT_DIR.fetch_add(1, Ordering::Relaxed);
    let dir = parent.join(format!("{tag}-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create server dir");
    dir
}

/// A server process owned by one test.
pub struct Server {
    pub port: u16,
    pub dir: PathBuf,
    extra: Vec<String>,
    module_args: Vec<String>,
    env: Vec<(String, String)>,
    /// Load the module (all but the benchmark's yardstick server do).
    with_module: bool,
    /// Another build of the module than `module_path()` (an upgrade test's previous one).
    module: Option<PathBuf>,
    process: Process,
}

impl Server {
    /// A server with the module and the test defaults.
    pub fn start() -> Self {
        Self::builder().start()
    }

    /// A server with more than the defaults: arguments, module arguments, environment, no
    /// module, or as a replica.
    pub fn builder() -> ServerBuilder {
        ServerBuilder {
            server: Server {
                port: 0,
                dir: fresh_dir("srv"),
                extra: Vec::new(),
                module_args: Vec::new(),
                env: Vec::new(),
                with_module: true,
                module: None,
                process: Process::default(),
            },
            master: None,
        }
    }

    fn launch(&mut self) {
        for _attempt in 0..5 {
            if self.port == 0 {
                self.port = free_port();
            }
            let child = self
                .command()
                .spawn()
                .expect("spawn the server (is LOCK_TEST_SERVER right?)");
            self.process = Process::new(child);
            if self.wait_ready() {
                return;
            }
            self.kill9();
            self.port = 0; // the port may have been taken: try another
        }
        panic!("server did not start; log:\n{}", self.log());
    }

    /// The server's command line: this server's port, dir, module and extra arguments.
    fn command(&self) -> Command {
        let mut cmd = Command::new(server_binary());
        cmd.arg("--port")
            .arg(self.port.to_string())
            .args(["--bind", "127.0.0.1", "--daemonize", "no", "--save", ""])
            .arg("--dir")
            .arg(&self.dir)
            .args(["--logfile", "server.log", "--enable-debug-command", "yes"])
            .args(["--repl-diskless-sync-delay", "0", "--protected-mode", "no"]);
        if self.with_module {
            cmd.arg("--loadmodule")
                .arg(self.module.clone().unwrap_or_else(module_path))
                .args(&self.module_args);
        }
        cmd.args(&self.extra)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        cmd
    }

    fn wait_ready(&mut self) -> bool {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if self.process.exited() {
                return false;
            }
            if let Ok(mut con) = self.try_con() {
                if let Ok(Value::SimpleString(s)) = redis::cmd("PING").query::<Value>(&mut con) {
                    if s == "PONG" {
                        return true;
                    }
                }
                // LOADING: keep waiting.
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default()
    }

    pub fn pid(&self) -> i32 {
        self.process.pid()
    }

    /// Its address, waiting up to 5 s to connect.
    fn link(&self) -> Link {
        Link::local(self.port).connect_timeout(Duration::from_secs(5))
    }

    fn try_con(&self) -> redis::RedisResult<Connection> {
        self.link().open()
    }

    /// A RESP2 connection.
    pub fn con(&self) -> Connection {
        let link = self.link().read_timeout(Duration::from_secs(30));
        link.open().expect("connect")
    }

    /// A RESP3 connection.
    pub fn con3(&self) -> Connection {
        let link = Link::local(self.port).resp3();
        link.read_timeout(Duration::from_secs(30))
            .open()
            .expect("connect")
    }

    pub fn signal(&self, sig: i32) {
        self.process.signal(sig);
    }

    /// `kill -9` the server and reap it.
    pub fn kill9(&mut self) {
        self.process.kill9();
    }

    /// Stop gracefully (SIGTERM: Redis saves if persistence is configured) and reap it.
    pub fn stop(&mut self) {
        self.process.terminate(Duration::from_secs(30));
    }

    /// Start again on the same port and directory (with the same options).
    pub fn restart(&mut self) {
        self.kill9();
        self.launch();
    }

    /// Start again on the same port and directory with another build of the module (`None`:
    /// this one), as an operator upgrading in place does (after `SAVE`, or with the AOF).
    pub fn restart_with_module(&mut self, module: Option<PathBuf>) {
        self.kill9();
        self.module = module;
        self.launch();
    }

    /// Whether the server process has exited by itself.
    pub fn exited(&mut self) -> bool {
        self.process.exited()
    }

    /// Start again with other options.
    pub fn restart_with(&mut self, extra: &[&str]) {
        self.kill9();
        self.extra = extra.iter().map(|s| s.to_string()).collect();
        self.launch();
    }

    pub fn is_valkey(&self) -> bool {
        server_binary().contains("valkey")
    }
}

/// How to start a [`Server`]: `Server::builder().args(&["--appendonly", "yes"]).start()`.
pub struct ServerBuilder {
    server: Server,
    /// Start as a replica of the server on this port, returned once its link is up.
    master: Option<u16>,
}

impl ServerBuilder {
    /// Extra `--option value` arguments of the server.
    pub fn args(mut self, extra: &[&str]) -> Self {
        self.server
            .extra
            .extend(extra.iter().map(|s| s.to_string()));
        self
    }

    /// Arguments for the module (`loadmodule path name value ...`).
    pub fn module_args(mut self, args: &[&str]) -> Self {
        let args = args.iter().map(|s| s.to_string());
        self.server.module_args.extend(args);
        self
    }

    /// Environment variables of the server process (e.g. LD_PRELOAD of faketime).
    pub fn env(mut self, env: &[(&str, &str)]) -> Self {
        let env = env.iter().map(|(k, v)| (k.to_string(), v.to_string()));
        self.server.env.extend(env);
        self
    }

    /// Load this build of the module instead of `module_path()`.
    pub fn module(mut self, path: PathBuf) -> Self {
        self.server.module = Some(path);
        self
    }

    /// The same server without the module (the benchmark's yardstick for its cost).
    pub fn without_module(mut self) -> Self {
        self.server.with_module = false;
        self
    }

    /// A replica of `master`.
    pub fn replica_of(mut self, master: &Server) -> Self {
        self.master = Some(master.port);
        self
    }

    pub fn start(mut self) -> Server {
        if let Some(port) = self.master {
            let replicaof = ["--replicaof", "127.0.0.1", &port.to_string()].map(String::from);
            self.server.extra.splice(0..0, replicaof);
        }
        self.server.launch();
        if self.master.is_some() && !link_up_within(&mut self.server.con(), LINK_UP_WITHIN) {
            let log = self.server.log();
            let tail: Vec<&str> = log.lines().rev().take(30).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            panic!(
                "the replica never synced with its master; its log ends:\n{}",
                tail.join("\n")
            );
        }
        self.server
    }

    /// Start a server that must refuse to start (e.g. the module refuses its arguments): its
    /// exit status and log once it exited by itself. Panics if it serves instead.
    pub fn refused_start(self) -> (std::process::ExitStatus, String) {
        let mut server = self.server;
        server.port = free_port();
        let mut child = server.command().spawn().expect("spawn the server");
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = child.try_wait() {
                return (status, server.log());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
        panic!(
            "the server started although it should refuse; log:\n{}",
            server.log()
        );
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill9();
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}
