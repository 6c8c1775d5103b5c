//! The clients of a scenario: writers (acquire -> read-modify-write -> release) and readers
//! (shared acquire -> fenced read -> release), each on its own thread until the run stops.

use std::sync::atomic::{AtomicBool, AtomicU16, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::check::{ReadRecord, Record};
use super::{Pause, GUARDED_COUNTER, LOCK};
use crate::store::{FencedStore, Write};
use crate::*;

/// What every client thread of a run (writer or reader) shares.
#[derive(Clone)]
pub(super) struct Clients {
    pub(super) store_port: u16,
    pub(super) sha: String,
    /// The lock server's port (a failover moves it).
    pub(super) port: Arc<AtomicU16>,
    /// The chaos thread's restart epoch (odd while a fault is being injected).
    pub(super) epoch: Arc<AtomicUsize>,
    pub(super) ttl_ms: i64,
    pub(super) wait_ms: i64,
    pub(super) hold_ms: u64,
    pub(super) pause: Pause,
    pub(super) readers: usize,
    pub(super) guarded: bool,
    pub(super) leases_kept: bool,
    /// Set when the workload is to stop.
    pub(super) done: Arc<AtomicBool>,
}

impl Clients {
    /// A client's connection to the lock server. When it has none: one attempt to connect (and
    /// a pause if that failed), then `None`, so the client's loop goes round again.
    fn lock_con<'a>(&self, lock: &'a mut Option<Connection>) -> Option<&'a mut Connection> {
        if lock.is_none() {
            *lock = connect(self.port.load(Ordering::SeqCst));
            if lock.is_none() {
                std::thread::sleep(Duration::from_millis(20));
            }
            return None;
        }
        lock.as_mut()
    }
}

/// A writer client: acquire (WAIT) -> read-modify-write -> release, until the workload stops.
pub(super) fn write_loop(c: usize, w: &Clients) -> Vec<Record> {
    let mut store = FencedStore::connect(w.store_port, &w.sha);
    let mut lock: Option<Connection> = None;
    let mut records = Vec::new();
    let mut op = 0;
    while !w.done.load(Ordering::Relaxed) {
        op += 1;
        let Some(con) = w.lock_con(&mut lock) else {
            continue;
        };
        let owner = format!("client-{c}-{op}");
        let sent_epoch = w.epoch.load(Ordering::SeqCst);
        let asked = Instant::now();
        let reply = redis::cmd("LOCK.ACQUIRE")
            .arg(LOCK)
            .arg(&owner)
            .arg(w.ttl_ms)
            .arg("WAIT")
            .arg(w.wait_ms + (op % 7) as i64)
            .query::<Value>(con);
        let token = match reply {
            Ok(Value::Int(t)) => t,
            Ok(_) => continue, // timed out waiting
            Err(_) => {
                lock = None; // the server went away: reconnect
                continue;
            }
        };
        let got_epoch = w.epoch.load(Ordering::SeqCst);
        let epoch = (sent_epoch == got_epoch && got_epoch.is_multiple_of(2)).then_some(got_epoch);
        let (write, extended) = if w.guarded {
            let write = guarded_write(con, token, (w.pause)(c, op), w.hold_ms);
            (write, None)
        } else {
            let write = store_write(&mut store, w, token, (c, op));
            (
                write.clone(),
                extend_if_stale(con, &owner, w.ttl_ms, &write),
            )
        };
        if w.leases_kept {
            check_lease_kept(w, &owner, asked, &write);
        }
        let released = redis::cmd("LOCK.RELEASE")
            .arg(LOCK)
            .arg(&owner)
            .query::<i64>(con)
            .ok();
        if released.is_none() {
            lock = None;
        }
        records.push(Record {
            owner,
            token,
            epoch,
            write,
            extended,
            released,
        });
    }
    records
}

/// For `Scenario::leases_kept`: a holder whose write was refused must have outlived its lease.
/// The lock server counts the lease from its grant, after `asked`, so it ends no sooner than
/// `asked` + ttl (2 ms: rounding to the ms); the refusal came from a newer token, granted once
/// the lease ended unless a grant was lost. Only a refusal answered before then proves one
/// was: a holder descheduled past its lease is overtaken rightly.
fn check_lease_kept(w: &Clients, owner: &str, asked: Instant, write: &Write) {
    let refused = match write {
        Write::Stale => true,
        // Skipped: the store refused the read (guarded: the server went away, no refusal).
        Write::Skipped => !w.guarded,
        Write::Accepted(_) => false,
    };
    let lease_ends = asked + Duration::from_millis(w.ttl_ms as u64 - 2);
    assert!(
        !refused || Instant::now() >= lease_ends,
        "{owner}: its write was refused {:?} after it asked for a {} ms lease: a newer token \
         got in while its lease ran (a lost grant)",
        asked.elapsed(),
        w.ttl_ms
    );
}

/// A holder's read-modify-write of the counter in the fenced store, with its pause and its
/// hold between the read and the write. With readers: first a "write in progress" marker, held
/// for a moment, then the value.
fn store_write(store: &mut FencedStore, w: &Clients, token: i64, (c, op): (usize, usize)) -> Write {
    store.increment(token, w.readers > 0, || {
        if let Some(p) = (w.pause)(c, op) {
            std::thread::sleep(p);
        }
        if w.hold_ms > 0 {
            std::thread::sleep(Duration::from_millis(w.hold_ms));
        }
    })
}

/// For a holder whose write the store refused: what LOCK.EXTEND answers right after.
fn extend_if_stale(con: &mut Connection, owner: &str, ttl_ms: i64, write: &Write) -> Option<i64> {
    (*write == Write::Stale)
        .then(|| {
            redis::cmd("LOCK.EXTEND")
                .arg(LOCK)
                .arg(owner)
                .arg(ttl_ms)
                .query::<i64>(con)
                .ok()
        })
        .flatten()
}

/// A holder's read-modify-write of the counter on the lock server: a plain read, then the write
/// through `LOCK.GUARD` (refused with STALE once `token` is no longer the live exclusive hold).
fn guarded_write(con: &mut Connection, token: i64, pause: Option<Duration>, hold_ms: u64) -> Write {
    let current: i64 = match cmd(con, &["GET", GUARDED_COUNTER]) {
        Ok(Value::BulkString(b)) => String::from_utf8_lossy(&b).parse().unwrap_or(0),
        Ok(_) => 0,
        Err(_) => return Write::Skipped,
    };
    if let Some(p) = pause {
        std::thread::sleep(p);
    }
    if hold_ms > 0 {
        std::thread::sleep(Duration::from_millis(hold_ms));
    }
    let next = (current + 1).to_string();
    match cmd(
        con,
        &[
            "LOCK.GUARD",
            LOCK,
            &token.to_string(),
            "SET",
            GUARDED_COUNTER,
            &next,
        ],
    ) {
        Ok(_) => Write::Accepted(current + 1),
        Err(e) if e.starts_with("STALE") => Write::Stale,
        // The server went away mid-write: whether it landed is unknown, so the checker must not
        // count on it; it never does for a write it did not see acknowledged.
        Err(_) => Write::Skipped,
    }
}

/// A reader client: shared acquire (WAIT) -> fenced read -> release, until the workload stops.
pub(super) fn read_loop(r: usize, w: &Clients) -> Vec<ReadRecord> {
    let ttl_ms = w.ttl_ms;
    let mut store = FencedStore::connect(w.store_port, &w.sha);
    let mut lock: Option<Connection> = None;
    let mut reads = Vec::new();
    let mut op = 0;
    while !w.done.load(Ordering::Relaxed) {
        op += 1;
        let Some(con) = w.lock_con(&mut lock) else {
            continue;
        };
        let owner = format!("reader-{r}-{op}");
        let reply = redis::cmd("LOCK.ACQUIRE")
            .arg(LOCK)
            .arg(&owner)
            .arg(ttl_ms)
            .arg("SHARED")
            .arg("WAIT")
            .arg(1000)
            .query::<Value>(con);
        let token = match reply {
            Ok(Value::Int(t)) => t,
            Ok(_) => continue,
            Err(_) => {
                lock = None;
                continue;
            }
        };
        let read = store.read(token);
        std::thread::sleep(Duration::from_millis(1));
        if redis::cmd("LOCK.RELEASE")
            .arg(LOCK)
            .arg(&owner)
            .query::<i64>(con)
            .is_err()
        {
            lock = None;
        }
        reads.push(ReadRecord { owner, token, read });
    }
    reads
}
