//! Test support for redis-lock, shared by the integration tests, the fault suite and the
//! benchmark: real redis-server / valkey-server processes on free loopback ports, loaded with the
//! freshly built module and stopped by PID (`Server`); clients and small helpers; a Redis Cluster
//! (`cluster`); the fault-injection engine with its history checker (`scenario`); network
//! namespaces for real partitions (`netns`) and Sentinel deployments with their workload
//! (`sentinel`); throwaway PostgreSQL and MariaDB servers for the fenced-write tests
//! (`database`).
//!
//! `LOCK_TEST_SERVER` picks the server binary (default `redis-server`); `LOCK_MODULE` the module
//! (default `target/debug/libredis_lock.so`, built by `make test`).

pub mod cluster;
pub mod database;
pub mod netns;
pub mod scenario;
pub mod sentinel;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

pub use redis::{Connection, Value};

static NEXT_DIR: AtomicUsize = AtomicUsize::new(0);

pub fn server_binary() -> String {
    std::env::var("LOCK_TEST_SERVER").unwrap_or_else(|_| "redis-server".to_string())
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
    let n = NEXT_DIR.fetch_add(1, Ordering::Relaxed);
    let dir = workspace()
        .join("target/test-servers")
        .join(format!("{tag}-{}-{n}", std::process::id()));
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
    child: Option<Child>,
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
                child: None,
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
            self.child = Some(child);
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
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(_)) = child.try_wait() {
                    return false;
                }
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
        self.child.as_ref().map_or(0, |c| c.id() as i32)
    }

    fn try_con(&self) -> redis::RedisResult<Connection> {
        let client = redis::Client::open(format!("redis://127.0.0.1:{}/", self.port))?;
        client.get_connection_with_timeout(Duration::from_secs(5))
    }

    /// A RESP2 connection.
    pub fn con(&self) -> Connection {
        let con = self.try_con().expect("connect");
        con.set_read_timeout(Some(Duration::from_secs(30)))
            .expect("timeout");
        con
    }

    /// A RESP3 connection.
    pub fn con3(&self) -> Connection {
        let client =
            redis::Client::open(format!("redis://127.0.0.1:{}/?protocol=resp3", self.port))
                .expect("client");
        let con = client.get_connection().expect("connect");
        con.set_read_timeout(Some(Duration::from_secs(30)))
            .expect("timeout");
        con
    }

    pub fn signal(&self, sig: i32) {
        signal_pid(self.pid(), sig);
    }

    /// `kill -9` the server and reap it.
    pub fn kill9(&mut self) {
        kill_and_reap(&mut self.child);
    }

    /// Stop gracefully (SIGTERM: Redis saves if persistence is configured) and reap it.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SAFETY: signalling our own child.
            unsafe {
                libc::kill(child.id() as i32, libc::SIGTERM);
            }
            let deadline = Instant::now() + Duration::from_secs(30);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
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
        self.child
            .as_mut()
            .is_none_or(|c| matches!(c.try_wait(), Ok(Some(_))))
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
        if self.master.is_some() {
            wait_link_up(&mut self.server.con());
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

/// Run a command; server errors come back as `Err("CODE detail")`, a lost connection as `Err("IO ...")`.
/// Send `sig` to the child process `pid` (nothing for 0: no process).
pub fn signal_pid(pid: i32, sig: i32) {
    if pid > 0 {
        // SAFETY: sending a signal to our own child process by PID.
        unsafe {
            libc::kill(pid, sig);
        }
    }
}

/// `kill -9` a child process, if there is one, and reap it.
pub fn kill_and_reap(child: &mut Option<Child>) {
    if let Some(mut child) = child.take() {
        let _ = child.kill();
        let _ = child.wait();
    }
}

pub fn run(con: &mut Connection, args: &[&[u8]]) -> Result<Value, String> {
    let mut cmd = redis::cmd(std::str::from_utf8(args[0]).expect("command name"));
    for a in &args[1..] {
        cmd.arg(*a);
    }
    match cmd.query::<Value>(con) {
        Ok(Value::ServerError(e)) => Err(format!("{} {}", e.code(), e.details().unwrap_or(""))),
        Ok(v) => Ok(v),
        Err(e) => match (e.code(), e.detail()) {
            (Some(code), Some(detail)) => Err(format!("{code} {detail}")),
            (Some(code), None) => Err(code.to_string()),
            _ => Err(format!("IO {e}")),
        },
    }
}

/// Run a command given as text words.
pub fn cmd(con: &mut Connection, words: &[&str]) -> Result<Value, String> {
    let args: Vec<&[u8]> = words.iter().map(|w| w.as_bytes()).collect();
    run(con, &args)
}

/// Run and expect success.
pub fn ok(con: &mut Connection, words: &[&str]) -> Value {
    cmd(con, words).unwrap_or_else(|e| panic!("{words:?} failed: {e}"))
}

pub fn int(v: &Value) -> i64 {
    match v {
        Value::Int(i) => *i,
        other => panic!("expected an integer, got {other:?}"),
    }
}

/// `LOCK.ACQUIRE key owner ttl` → Some(token) or None.
pub fn acquire(con: &mut Connection, key: &str, owner: &str, ttl: i64) -> Option<i64> {
    match ok(con, &["LOCK.ACQUIRE", key, owner, &ttl.to_string()]) {
        Value::Int(t) => Some(t),
        Value::Nil => None,
        other => panic!("unexpected acquire reply {other:?}"),
    }
}

pub fn release(con: &mut Connection, key: &str, owner: &str) -> i64 {
    int(&ok(con, &["LOCK.RELEASE", key, owner]))
}

pub fn fence(con: &mut Connection, key: &str) -> Option<i64> {
    match ok(con, &["LOCK.FENCE", key]) {
        Value::Int(t) => Some(t),
        Value::Nil => None,
        other => panic!("unexpected fence reply {other:?}"),
    }
}

/// Poll `cond` until it holds or `timeout` passes (for things that happen asynchronously).
pub fn eventually(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Number of clients blocked on the server (from INFO clients).
pub fn blocked_clients(con: &mut Connection) -> i64 {
    info_field(con, "clients", "blocked_clients")
        .parse()
        .unwrap_or(-1)
}

pub fn info_field(con: &mut Connection, section: &str, field: &str) -> String {
    try_info_field(con, section, field)
        .unwrap_or_else(|e| panic!("[\"INFO\", {section:?}] failed: {e}"))
}

/// `info_field`, with a failed INFO as an error: for a server that may close the connection
/// meanwhile (Sentinel kills a demoted master's clients).
pub fn try_info_field(con: &mut Connection, section: &str, field: &str) -> Result<String, String> {
    let info = match cmd(con, &["INFO", section])? {
        Value::BulkString(b) => String::from_utf8_lossy(&b).into_owned(),
        Value::VerbatimString { text, .. } => text,
        other => panic!("unexpected INFO reply {other:?}"),
    };
    Ok(info
        .lines()
        .find_map(|l| {
            l.strip_prefix(&format!("{field}:"))
                .map(|v| v.trim().to_string())
        })
        .unwrap_or_default())
}

/// Start `LOCK.ACQUIRE key owner ttl WAIT timeout` on its own connection and thread.
pub fn spawn_wait(
    server: &Server,
    key: &str,
    owner: &str,
    ttl: i64,
    timeout: i64,
) -> std::thread::JoinHandle<Result<Value, String>> {
    let mut con = server.con();
    let args: Vec<String> = [
        "LOCK.ACQUIRE",
        key,
        owner,
        &ttl.to_string(),
        "WAIT",
        &timeout.to_string(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    std::thread::spawn(move || {
        let words: Vec<&str> = args.iter().map(String::as_str).collect();
        cmd(&mut con, &words)
    })
}

/// Wait until `n` clients are blocked.
/// The token of a granted `LOCK.ACQUIRE` reply (panics on anything else).
pub fn token_of(reply: Result<Value, String>) -> i64 {
    match reply {
        Ok(Value::Int(t)) => t,
        other => panic!("expected a token, got {other:?}"),
    }
}

/// `LOCK.INFO key`'s list of live holds (each a map), empty for a free lock.
pub fn holders(con: &mut Connection, key: &str) -> Vec<Value> {
    match map_field(&ok(con, &["LOCK.INFO", key]), "holders") {
        Some(Value::Array(list)) => list,
        _ => Vec::new(),
    }
}

/// The (owner, token) of each live hold of `key`, in `LOCK.INFO`'s order.
pub fn holder_tokens(con: &mut Connection, key: &str) -> Vec<(String, i64)> {
    holders(con, key)
        .iter()
        .map(|h| {
            let owner = match map_field(h, "owner") {
                Some(Value::BulkString(b)) => String::from_utf8_lossy(&b).into_owned(),
                other => panic!("{other:?}"),
            };
            (owner, int(&map_field(h, "token").unwrap()))
        })
        .collect()
}

/// Run `args` (binary) on a connection of its own in a thread.
pub fn spawn_run(
    server: &Server,
    args: &[&[u8]],
) -> std::thread::JoinHandle<Result<Value, String>> {
    let mut con = server.con();
    let args: Vec<Vec<u8>> = args.iter().map(|a| a.to_vec()).collect();
    std::thread::spawn(move || {
        let args: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
        run(&mut con, &args)
    })
}

/// Run `words` on a connection of its own in a thread (for a blocking `LOCK.ACQUIRE ... WAIT`
/// with any options).
pub fn spawn_wait_with(
    server: &Server,
    words: &[&str],
) -> std::thread::JoinHandle<Result<Value, String>> {
    let mut con = server.con();
    let words: Vec<String> = words.iter().map(|w| w.to_string()).collect();
    std::thread::spawn(move || {
        let words: Vec<&str> = words.iter().map(String::as_str).collect();
        cmd(&mut con, &words)
    })
}

pub fn wait_blocked(con: &mut Connection, n: i64) {
    assert!(
        eventually(Duration::from_secs(10), || blocked_clients(con) == n),
        "expected {n} blocked clients, have {}",
        blocked_clients(con)
    );
}

/// CRC-64/Jones as DUMP payloads use it (reflected, poly 0xad93d23594c935a9).
pub fn crc64(data: &[u8]) -> u64 {
    let mut crc = 0u64;
    for &b in data {
        crc ^= u64::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0x95AC_9329_AC4B_C9B5
            } else {
                crc >> 1
            };
        }
    }
    crc
}

/// Re-seal a DUMP payload whose body was edited: recompute the trailing CRC.
pub fn reseal(mut payload: Vec<u8>) -> Vec<u8> {
    let body = payload.len() - 8;
    let crc = crc64(&payload[..body]);
    payload[body..].copy_from_slice(&crc.to_le_bytes());
    payload
}

pub fn dump(con: &mut Connection, key: &str) -> Vec<u8> {
    match ok(con, &["DUMP", key]) {
        Value::BulkString(b) => {
            let body = b.len() - 8;
            assert_eq!(
                crc64(&b[..body]).to_le_bytes(),
                b[body..],
                "crc64 helper agrees with the server"
            );
            b
        }
        other => panic!("DUMP gave {other:?}"),
    }
}

/// A field of a module value in a DUMP payload.
pub enum RdbField<'a> {
    Uint(u64),
    Str(&'a [u8]),
}

/// Redis's length encoding (`rdbSaveLen`).
fn rdb_len(out: &mut Vec<u8>, n: u64) {
    match n {
        0..64 => out.push(n as u8),
        64..16384 => out.extend_from_slice(&(0x4000 | n as u16).to_be_bytes()),
        16384..=0xffff_ffff => {
            out.push(0x80);
            out.extend_from_slice(&(n as u32).to_be_bytes());
        }
        _ => {
            out.push(0x81);
            out.extend_from_slice(&n.to_be_bytes());
        }
    }
}

/// A DUMP payload of a lock value written field by field at encoding `version` (what that
/// version of the module would have written), with the type and RDB version of `template` (a
/// DUMP of a lock on this server).
pub fn lock_payload(template: &[u8], version: u64, fields: &[RdbField]) -> Vec<u8> {
    const OPCODE_UINT: u8 = 2;
    const OPCODE_STRING: u8 = 5;
    assert_eq!(template[1], 0x81, "64-bit module id encoding");
    let mut id = u64::from_be_bytes(template[2..10].try_into().unwrap());
    id = (id & !0x3ff) | version;
    let mut out = vec![template[0], 0x81];
    out.extend_from_slice(&id.to_be_bytes());
    for field in fields {
        match field {
            RdbField::Uint(v) => {
                out.push(OPCODE_UINT);
                rdb_len(&mut out, *v);
            }
            RdbField::Str(b) => {
                out.push(OPCODE_STRING);
                rdb_len(&mut out, b.len() as u64);
                out.extend_from_slice(b);
            }
        }
    }
    out.push(0); // EOF
    out.extend_from_slice(&template[template.len() - 10..]); // RDB version, CRC
    reseal(out)
}

/// The time left of `key`'s lease, from `LOCK.INFO` (lock keys carry no TTL of Redis's own:
/// `PTTL` answers -1). `None` when nobody holds it.
pub fn lease_left(con: &mut Connection, key: &str) -> Option<i64> {
    let info = ok(con, &["LOCK.INFO", key]);
    map_field(&info, "ttl").map(|v| int(&v))
}

/// Put a lock on `key` whose token is `token` (possibly far ahead of the clock), by editing a
/// DUMP payload: the server's only way in for such a token is loading it.
pub fn restore_lock_with_token(con: &mut Connection, key: &str, token: i64) {
    let tmp = format!("{key}:tmp-for-dump");
    let real = acquire(con, &tmp, "forged", 600_000).expect("tmp lock");
    let payload = dump(con, &tmp);
    release(con, &tmp, "forged");
    let needle = real.to_be_bytes();
    let at = payload
        .windows(8)
        .position(|w| w == needle)
        .expect("the token is in the payload");
    let mut edited = payload.clone();
    edited[at..at + 8].copy_from_slice(&token.to_be_bytes());
    let edited = reseal(edited);
    let r = run(
        con,
        &[b"RESTORE", key.as_bytes(), b"0", &edited, b"REPLACE"],
    );
    assert_eq!(r, Ok(Value::Okay), "restore the forged lock");
}

/// A file that sets a server's clock offset (libfaketime), removed when dropped.
pub struct ClockFile(PathBuf);

impl ClockFile {
    pub fn new(tag: &str, offset: &str) -> Self {
        let path = std::env::temp_dir().join(format!(
            "lock-clock-{tag}-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        std::fs::write(&path, offset).unwrap();
        Self(path)
    }

    pub fn set(&self, offset: &str) {
        std::fs::write(&self.0, offset).unwrap();
    }

    /// The server environment for this clock, or `None` where libfaketime cannot run.
    pub fn env(&self) -> Option<Vec<(String, String)>> {
        faketime_env(&self.0)
    }
}

impl Drop for ClockFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

pub fn pairs(env: &[(String, String)]) -> Vec<(&str, &str)> {
    env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
}

/// libfaketime, which moves a server's wall clock (never its monotonic clock).
pub const FAKETIME_LIB: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

/// The environment that runs a server with its wall clock offset by what `offset_file` says
/// (`+0`, `-30`, `+1h`, ...; read on every clock read, so a test can move it), or `None` where
/// that cannot work: a jemalloc build (libfaketime recurses into itself when jemalloc reads
/// the clock at start-up: Debian's Redis; Valkey's libc build works) or no libfaketime.
pub fn faketime_env(offset_file: &Path) -> Option<Vec<(String, String)>> {
    let version = Command::new(server_binary())
        .arg("--version")
        .output()
        .ok()?;
    if String::from_utf8_lossy(&version.stdout).contains("malloc=jemalloc")
        || !Path::new(FAKETIME_LIB).exists()
    {
        return None;
    }
    let pairs = [
        ("LD_PRELOAD", FAKETIME_LIB.to_string()),
        ("FAKETIME_TIMESTAMP_FILE", offset_file.display().to_string()),
        ("FAKETIME_NO_CACHE", "1".to_string()),
        ("FAKETIME_DONT_FAKE_MONOTONIC", "1".to_string()),
    ];
    Some(pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
}

/// Wait until the master streams to its replica: after a diskless full sync it does so only once
/// the replica first acks (up to a second later), so a write and a `WAIT` for it.
pub fn wait_streaming(master: &mut Connection) {
    ok(master, &["SET", "lock-test:streaming", "1"]);
    assert_eq!(
        int(&ok(master, &["WAIT", "1", "5000"])),
        1,
        "the replica acknowledged"
    );
    ok(master, &["DEL", "lock-test:streaming"]);
}

/// Wait (up to 20 s) until the replica on `con` has its link to its master up.
pub fn wait_link_up(con: &mut Connection) {
    assert!(
        eventually(Duration::from_secs(20), || info_field(
            con,
            "replication",
            "master_link_status"
        ) == "up"),
        "the replica never synced with its master"
    );
}

/// The epoch of a token (its high bits: see `src/core/fencing.rs`).
pub fn epoch_of(token: i64) -> i64 {
    token >> 32
}

/// The fencing epoch stored in a server's epoch file (0 if there is none).
pub fn stored_epoch(server: &Server) -> i64 {
    std::fs::read_to_string(server.dir.join("dump.rdb.lock-epoch"))
        .ok()
        .and_then(|text| text.trim().parse().ok())
        .unwrap_or(0)
}

/// Microseconds since the epoch (the scale tokens live on).
pub fn now_us() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0)
}

/// A token far ahead of any clock-derived one, so only persisted state can explain later tokens.
pub fn future_token() -> i64 {
    now_us() + 10_000_000_000_000
}

pub fn wait_persistence_idle(con: &mut Connection) {
    assert!(eventually(Duration::from_secs(30), || {
        info_field(con, "persistence", "rdb_bgsave_in_progress") == "0"
            && info_field(con, "persistence", "aof_rewrite_in_progress") == "0"
            && info_field(con, "persistence", "aof_rewrite_scheduled") == "0"
    }));
}

/// Ids of the clients currently blocked, oldest first.
pub fn blocked_ids(c: &mut Connection) -> Vec<u64> {
    let list = match ok(c, &["CLIENT", "LIST"]) {
        Value::BulkString(b) => String::from_utf8(b).unwrap(),
        Value::VerbatimString { text, .. } => text,
        other => panic!("{other:?}"),
    };
    let mut ids: Vec<u64> = list
        .lines()
        .filter(|l| l.contains("flags=b"))
        .filter_map(|l| l.split(' ').find_map(|f| f.strip_prefix("id=")))
        .filter_map(|id| id.parse().ok())
        .collect();
    ids.sort_unstable();
    ids
}

/// A field of a map reply (RESP3 map or RESP2 flat array).
pub fn map_field(v: &Value, field: &str) -> Option<Value> {
    let matches = |k: &Value| match k {
        Value::SimpleString(s) => s == field,
        Value::BulkString(b) => b == field.as_bytes(),
        _ => false,
    };
    match v {
        Value::Map(pairs) => pairs
            .iter()
            .find(|(k, _)| matches(k))
            .map(|(_, v)| v.clone()),
        Value::Array(items) => items
            .chunks(2)
            .find(|p| matches(&p[0]))
            .map(|p| p[1].clone()),
        _ => None,
    }
}

/// An INFO lock field as a number.
pub fn stat(con: &mut Connection, field: &str) -> f64 {
    let v = info_field(con, "lock", &format!("lock_{field}"));
    v.parse()
        .unwrap_or_else(|_| panic!("INFO lock has no numeric lock_{field}: {v:?}"))
}

/// `redis_version` of INFO server as (major, minor) (Valkey reports its Redis compatibility
/// version, 7.2).
pub fn redis_version(con: &mut Connection) -> (u32, u32) {
    let v = info_field(con, "server", "redis_version");
    let mut parts = v.split('.').map(|p| p.parse().unwrap_or(0));
    (parts.next().unwrap_or(0), parts.next().unwrap_or(0))
}

/// Redis 7.0 (older than 7.2), whose module API lacks a few things the README names.
pub fn is_redis_7_0(con: &mut Connection) -> bool {
    redis_version(con) < (7, 2)
}
