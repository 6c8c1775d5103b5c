//! The client room: the one way the harness connects ([`Link`]), running commands
//! ([`run`], [`cmd`], [`ok`]) and reading their replies, and the lock commands tests use most.

use std::time::Duration;

use crate::server::Server;
use crate::{Connection, Value};

/// Where and how to connect: every connection the harness opens is one of these. No timeout
/// unless one is set (connecting then waits as long as the system lets it, a reply forever).
#[derive(Clone, Debug)]
pub struct Link {
    host: String,
    port: u16,
    resp3: bool,
    connect: Option<Duration>,
    read: Option<Duration>,
    write: Option<Duration>,
}

impl Link {
    /// A RESP2 connection to `host:port`.
    pub fn to(host: &str, port: u16) -> Self {
        Self {
            host: host.to_string(),
            port,
            resp3: false,
            connect: None,
            read: None,
            write: None,
        }
    }

    /// A RESP2 connection to `port` on loopback.
    pub fn local(port: u16) -> Self {
        Self::to("127.0.0.1", port)
    }

    /// Speak RESP3.
    pub fn resp3(mut self) -> Self {
        self.resp3 = true;
        self
    }

    /// How long connecting may take.
    pub fn connect_timeout(mut self, d: Duration) -> Self {
        self.connect = Some(d);
        self
    }

    /// How long a reply may take.
    pub fn read_timeout(mut self, d: Duration) -> Self {
        self.read = Some(d);
        self
    }

    /// How long sending may take.
    pub fn write_timeout(mut self, d: Duration) -> Self {
        self.write = Some(d);
        self
    }

    pub fn open(&self) -> redis::RedisResult<Connection> {
        let protocol = if self.resp3 { "?protocol=resp3" } else { "" };
        let url = format!("redis://{}:{}/{protocol}", self.host, self.port);
        let client = redis::Client::open(url)?;
        let con = match self.connect {
            Some(timeout) => client.get_connection_with_timeout(timeout)?,
            None => client.get_connection()?,
        };
        if self.read.is_some() {
            con.set_read_timeout(self.read)?;
        }
        if self.write.is_some() {
            con.set_write_timeout(self.write)?;
        }
        Ok(con)
    }
}

/// A connection to `port` on loopback with short timeouts (1 s to connect, 10 s for a reply),
/// `None` if the server is down: what the fault scenarios' clients use.
pub fn connect(port: u16) -> Option<Connection> {
    let link = Link::local(port).connect_timeout(Duration::from_secs(1));
    link.read_timeout(Duration::from_secs(10)).open().ok()
}

/// Run a command; server errors come back as `Err("CODE detail")`, a lost connection as `Err("IO ...")`.
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

/// A reply as text (bulk, simple or verbatim string; anything else as its debug form).
pub fn text(v: &Value) -> String {
    match v {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::SimpleString(s) => s.clone(),
        Value::VerbatimString { text, .. } => text.clone(),
        other => format!("{other:?}"),
    }
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

/// The token of a granted `LOCK.ACQUIRE` reply (panics on anything else).
pub fn token_of(reply: Result<Value, String>) -> i64 {
    match reply {
        Ok(Value::Int(t)) => t,
        other => panic!("expected a token, got {other:?}"),
    }
}

/// The time left of `key`'s lease, from `LOCK.INFO` (lock keys carry no TTL of Redis's own:
/// `PTTL` answers -1). `None` when nobody holds it.
pub fn lease_left(con: &mut Connection, key: &str) -> Option<i64> {
    let info = ok(con, &["LOCK.INFO", key]);
    map_field(&info, "ttl").map(|v| int(&v))
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
