//! Session holds (`SESSION`): a hold that dies with the connection that was granted it, as a
//! ZooKeeper ephemeral node does, while its lease still bounds it where connections are unknown
//! (replicas, after a failover or restart).

use std::io::Write;
use std::time::{Duration, Instant};

use redis_lock_harness::*;

/// A raw connection that sends `words` (a RESP array) and reads nothing back.
fn raw_send(port: u16, words: &[&str]) -> std::net::TcpStream {
    let mut sock = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    let mut msg = format!("*{}\r\n", words.len());
    for w in words {
        msg.push_str(&format!("${}\r\n{w}\r\n", w.len()));
    }
    sock.write_all(msg.as_bytes()).unwrap();
    sock
}

fn client_id(c: &mut Connection) -> i64 {
    int(&ok(c, &["CLIENT", "ID"]))
}

#[test]
fn a_closed_connection_releases_its_session_hold_and_the_next_waiter_is_granted_at_once() {
    let s = Server::start();
    let mut c = s.con();
    let mut holder = s.con();
    let holder_id = client_id(&mut holder);
    let t = int(&ok(
        &mut holder,
        &["LOCK.ACQUIRE", "job", "h", "60000", "SESSION"],
    ));
    let info = holders(&mut c, "job");
    assert_eq!(map_field(&info[0], "session"), Some(Value::Int(holder_id)));
    let waiter = spawn_wait(&s, "job", "w", 60_000, 0);
    wait_blocked(&mut c, 1);
    let closed = Instant::now();
    drop(holder); // the connection closes (as it does when its process dies)
    let w = match waiter.join().unwrap() {
        Ok(Value::Int(w)) => w,
        other => panic!("{other:?}"),
    };
    let took = closed.elapsed();
    assert!(w > t);
    assert!(
        took < Duration::from_secs(5),
        "granted at once, not at the 60 s TTL: {took:?}"
    );
    assert_eq!(stat(&mut c, "session_releases"), 1.0);
    let info = holders(&mut c, "job");
    assert_eq!(
        map_field(&info[0], "session"),
        Some(Value::Nil),
        "w asked without SESSION"
    );
}

#[test]
fn client_kill_and_quit_end_the_session() {
    let s = Server::start();
    let mut c = s.con();
    let mut a = s.con();
    let a_id = client_id(&mut a);
    ok(&mut a, &["LOCK.ACQUIRE", "k1", "a", "60000", "SESSION"]);
    ok(&mut c, &["CLIENT", "KILL", "ID", &a_id.to_string()]);
    assert!(eventually(Duration::from_secs(5), || fence(&mut c, "k1").is_none()));
    let mut b = s.con();
    ok(
        &mut b,
        &["LOCK.ACQUIRE", "k2", "b", "60000", "SESSION", "SHARED"],
    );
    ok(
        &mut b,
        &["LOCK.ACQUIRE", "k3", "b", "60000", "LIMIT", "2", "SESSION"],
    );
    let _ = cmd(&mut b, &["QUIT"]);
    assert!(eventually(Duration::from_secs(5), || int(&ok(
        &mut c,
        &["EXISTS", "k2", "k3"]
    )) == 0));
    assert_eq!(stat(&mut c, "session_releases"), 3.0);
    // A hold without SESSION outlives its connection.
    let mut d = s.con();
    let t = acquire(&mut d, "k4", "d", 60_000).unwrap();
    drop(d);
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(fence(&mut c, "k4"), Some(t));
}

#[test]
fn a_waiter_granted_by_handoff_is_bound_to_its_own_connection() {
    let s = Server::start();
    let mut c = s.con();
    acquire(&mut c, "job", "first", 60_000).unwrap();
    let waiter = raw_send(
        s.port,
        &["LOCK.ACQUIRE", "job", "w", "60000", "SESSION", "WAIT", "0"],
    );
    wait_blocked(&mut c, 1);
    release(&mut c, "job", "first");
    assert!(eventually(Duration::from_secs(5), || map_field(
        &ok(&mut c, &["LOCK.INFO", "job"]),
        "owner"
    ) == Some(
        Value::BulkString(b"w".to_vec())
    )));
    let third = spawn_wait(&s, "job", "third", 1_000, 0);
    wait_blocked(&mut c, 1);
    drop(waiter); // the granted waiter's connection closes: its hold goes, third is next
    assert!(matches!(third.join().unwrap(), Ok(Value::Int(_))));
    assert_eq!(stat(&mut c, "session_releases"), 1.0);
}

#[test]
fn the_lease_still_bounds_a_session_hold_on_a_replica_after_failover() {
    let m = Server::builder()
        .args(&["--appendonly", "yes", "--appendfsync", "always"])
        .start();
    let r = Server::builder().replica_of(&m).start();
    let mut rc = r.con();
    let mut holder = m.con();
    // 4 s: the failover below takes far less, even on a loaded machine.
    let t = int(&ok(
        &mut holder,
        &["LOCK.ACQUIRE", "job", "h", "4000", "SESSION"],
    ));
    ok(&mut holder, &["WAIT", "1", "5000"]);
    // The replica knows the hold, not the connection.
    assert_eq!(fence(&mut rc, "job"), Some(t));
    ok(&mut rc, &["REPLICAOF", "NO", "ONE"]);
    let mut mc = m.con();
    ok(&mut mc, &["REPLICAOF", "127.0.0.1", &r.port.to_string()]);
    drop(holder); // the old master would release it; the new one knows no connection
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(fence(&mut rc, "job"), Some(t), "lives on to its deadline");
    let ended = eventually(Duration::from_secs(10), || fence(&mut rc, "job").is_none());
    assert!(ended, "the lease ends the hold");
}

#[test]
fn a_released_session_hold_is_replicated_and_logged() {
    let mut m = Server::builder()
        .args(&["--appendonly", "yes", "--appendfsync", "always"])
        .start();
    let r = Server::builder().replica_of(&m).start();
    let mut rc = r.con();
    let mut holder = m.con();
    ok(
        &mut holder,
        &["LOCK.ACQUIRE", "job", "h", "60000", "SESSION"],
    );
    // WAIT counts the writes of the connection that made them.
    ok(&mut holder, &["WAIT", "1", "5000"]);
    assert!(fence(&mut rc, "job").is_some());
    drop(holder);
    assert!(eventually(Duration::from_secs(5), || fence(&mut rc, "job").is_none()));
    m.restart();
    let mut mc = m.con();
    assert_eq!(fence(&mut mc, "job"), None, "the AOF has the release");
}

/// RESET starts a connection afresh; where the server tells the module which client ran it
/// (Redis 7.2+, Valkey), its session holds end. On Redis 7.0 they last until the connection
/// closes (or their lease ends).
#[test]
fn reset_ends_the_session_where_the_server_names_the_client() {
    let s = Server::start();
    let mut c = s.con();
    let mut a = s.con();
    ok(&mut a, &["LOCK.ACQUIRE", "job", "a", "60000", "SESSION"]);
    ok(&mut a, &["RESET"]);
    if is_redis_7_0(&mut c) {
        std::thread::sleep(Duration::from_millis(200));
        assert!(fence(&mut c, "job").is_some());
        drop(a);
    }
    assert!(eventually(Duration::from_secs(5), || fence(&mut c, "job").is_none()));
}

/// After a restart from the AOF, a session hold knows no connection: it lives until its lease
/// ends, like any hold.
#[test]
fn after_a_restart_a_session_hold_lives_until_its_lease_ends() {
    let mut s = Server::builder()
        .args(&["--appendonly", "yes", "--appendfsync", "always"])
        .start();
    let mut holder = s.con();
    let t = int(&ok(
        &mut holder,
        &["LOCK.ACQUIRE", "job", "h", "2000", "SESSION"],
    ));
    s.kill9();
    s.restart();
    let mut c = s.con();
    assert_eq!(fence(&mut c, "job"), Some(t), "reloaded from the AOF");
    let info = ok(&mut c, &["LOCK.INFO", "job"]);
    let Some(Value::Array(holders)) = map_field(&info, "holders") else {
        panic!("{info:?}")
    };
    assert_eq!(map_field(&holders[0], "session"), Some(Value::Nil));
    assert!(eventually(Duration::from_secs(5), || fence(&mut c, "job").is_none()));
}
