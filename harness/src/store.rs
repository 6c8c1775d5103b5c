//! The fenced store: a server of its own running `lua/fenced_store.lua` (never faulted), which
//! takes a write only under a token at least as new as every token it has seen. Both workloads
//! write to it, the fault scenarios' (`scenario`) and the Sentinel one (`sentinel::workload`):
//! a holder's read-modify-write of one counter under its token ([`FencedStore::increment`]).

use crate::client::ok;
use crate::server::Server;
use crate::{Connection, Value};

/// The fenced store's script.
pub const FENCED_STORE: &str = include_str!("../../lua/fenced_store.lua");
/// The counter the clients increment in the fenced store.
pub const COUNTER: &str = "stock";

/// What became of a holder's write.
#[derive(Clone, Debug, PartialEq)]
pub enum Write {
    Accepted(i64),
    Stale,
    Skipped,
}

/// What a reader saw under its shared hold.
#[derive(Clone, Debug, PartialEq)]
pub enum Read {
    /// A committed value (0: none yet).
    Value(i64),
    /// A writer's "write in progress" marker. Allowed only when that writer's value was then
    /// refused (its lease ran out between marker and value, so the write was abandoned);
    /// otherwise a writer held the lock beside this reader.
    InProgress { writer: i64 },
    /// The store refused the read: a newer token had touched it (the reader's lease ran out).
    Stale,
}

/// The store's server, with its script loaded.
pub struct StoreServer {
    pub server: Server,
    /// The script's SHA for `EVALSHA`.
    pub sha: String,
}

impl StoreServer {
    pub fn start() -> Self {
        let server = Server::start();
        let sha: String = redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(FENCED_STORE)
            .query(&mut server.con())
            .expect("load the fenced store");
        Self { server, sha }
    }

    pub fn port(&self) -> u16 {
        self.server.port
    }

    /// The counter's committed value at the end (0: never written).
    pub fn counter(&self) -> i64 {
        match ok(&mut self.server.con(), &["HGET", COUNTER, "value"]) {
            Value::BulkString(b) => String::from_utf8_lossy(&b).parse().unwrap_or(0),
            _ => 0,
        }
    }
}

/// A client of the fenced store (on the connection `connect` opens: see `client::connect`).
pub struct FencedStore {
    con: Connection,
    sha: String,
}

impl FencedStore {
    /// A client of the store on `port` whose script is `sha`.
    pub fn connect(port: u16, sha: &str) -> Self {
        Self {
            con: crate::client::connect(port).expect("the fenced store"),
            sha: sha.to_string(),
        }
    }

    /// What the counter holds, read under `token` (a reader's view).
    pub fn read(&mut self, token: i64) -> Read {
        match fenced(&mut self.con, &self.sha, "GET", token, None) {
            Ok(v) => match Stored::parse(&v) {
                Stored::Committed(v) => Read::Value(v),
                Stored::Pending { writer, .. } => Read::InProgress { writer },
            },
            Err(e) if e.contains("STALE") => Read::Stale,
            Err(e) => panic!("store: {e}"),
        }
    }

    /// A holder's read-modify-write of the counter under `token`: read, then `work` (what the
    /// holder does under the lock: pauses, holding), then write the value plus one. With
    /// `marker`, first a "write in progress" marker, held for a moment, then the value (so a
    /// reader beside a writer sees the marker). A refused read skips the write.
    pub fn increment(&mut self, token: i64, marker: bool, work: impl FnOnce()) -> Write {
        let (store, sha) = (&mut self.con, self.sha.as_str());
        let current = match fenced(store, sha, "GET", token, None) {
            Ok(v) => Stored::parse(&v).committed(),
            Err(e) if e.contains("STALE") => return Write::Skipped,
            Err(e) => panic!("store: {e}"),
        };
        work();
        let marker = if marker {
            let m = fenced(
                store,
                sha,
                "SET",
                token,
                Some(Stored::marker(token, current)),
            );
            std::thread::sleep(std::time::Duration::from_millis(1));
            m.map(|_| ())
        } else {
            Ok(())
        };
        match marker
            .and_then(|()| fenced(store, sha, "SET", token, Some((current + 1).to_string())))
        {
            Ok(_) => Write::Accepted(current + 1),
            Err(e) if e.contains("STALE") => Write::Stale,
            Err(e) => panic!("store: {e}"),
        }
    }
}

/// Run the fenced store's `op` (GET or SET) under `token`.
pub fn fenced(
    store: &mut Connection,
    sha: &str,
    op: &str,
    token: i64,
    value: Option<String>,
) -> Result<Value, String> {
    let mut c = redis::cmd("EVALSHA");
    c.arg(sha).arg(1).arg(COUNTER).arg(op).arg(token);
    if let Some(v) = value {
        c.arg(v);
    }
    c.query::<Value>(store).map_err(|e| e.to_string())
}

/// What the fenced store's counter holds.
#[derive(Clone, Debug, PartialEq)]
enum Stored {
    /// A committed value (0: none yet).
    Committed(i64),
    /// The marker `pending <writer token> <committed value>` of a two-step write. It stays when
    /// its writer's lease ran out between marker and value (the store then refuses the value):
    /// the next writer starts again from the committed value, as a real application must.
    Pending { writer: i64, committed: i64 },
}

impl Stored {
    fn marker(writer: i64, committed: i64) -> String {
        format!("pending {writer} {committed}")
    }

    fn parse(reply: &Value) -> Self {
        let Value::BulkString(b) = reply else {
            return Self::Committed(0);
        };
        let text = String::from_utf8_lossy(b);
        let mut words = text.split(' ');
        let parsed = match (words.next(), words.next(), words.next()) {
            (Some("pending"), Some(w), Some(c)) => w.parse().ok().zip(c.parse().ok()),
            _ => None,
        };
        match parsed {
            Some((writer, committed)) => Self::Pending { writer, committed },
            None => Self::Committed(text.parse().unwrap_or(0)),
        }
    }

    fn committed(&self) -> i64 {
        match *self {
            Self::Committed(v) | Self::Pending { committed: v, .. } => v,
        }
    }
}
