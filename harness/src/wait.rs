//! Waits: polling until something that happens asynchronously has happened.

use std::time::{Duration, Instant};

use crate::client::{int, ok};
use crate::stats::{blocked_clients, info_field};
use crate::Connection;

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

/// Wait (up to 10 s) until `n` clients are blocked.
pub fn wait_blocked(con: &mut Connection, n: i64) {
    assert!(
        eventually(Duration::from_secs(10), || blocked_clients(con) == n),
        "expected {n} blocked clients, have {}",
        blocked_clients(con)
    );
}

/// How long a replica may take to sync: well under a second on an idle machine, but once
/// over 20 s in a soak with both cores busy and a load of 17; 60 s keeps a margin over that.
pub const LINK_UP_WITHIN: Duration = Duration::from_secs(60);

/// Whether the replica on `con` has its link to its master up within `within`.
pub fn link_up_within(con: &mut Connection, within: Duration) -> bool {
    eventually(within, || {
        info_field(con, "replication", "master_link_status") == "up"
    })
}

/// Wait (up to `LINK_UP_WITHIN`) until the replica on `con` has its link to its master up.
pub fn wait_link_up(con: &mut Connection) {
    assert!(
        link_up_within(con, LINK_UP_WITHIN),
        "the replica never synced with its master"
    );
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

/// Wait until the replica acknowledged everything the master on `m` wrote (`WAIT 1 5000`):
/// `WAIT` counts from the connection's last write, so on one that wrote nothing it returns at
/// once, whatever else the master replicated.
pub fn wait_replica_acked(m: &mut Connection) {
    assert_eq!(
        int(&ok(m, &["WAIT", "1", "5000"])),
        1,
        "replica acknowledged"
    );
}

pub fn wait_persistence_idle(con: &mut Connection) {
    assert!(eventually(Duration::from_secs(30), || {
        info_field(con, "persistence", "rdb_bgsave_in_progress") == "0"
            && info_field(con, "persistence", "aof_rewrite_in_progress") == "0"
            && info_field(con, "persistence", "aof_rewrite_scheduled") == "0"
    }));
}
