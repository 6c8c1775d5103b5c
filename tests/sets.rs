//! Lock sets (`LOCK.MACQUIRE`, `LOCK.MRELEASE`): all or nothing at once, waiting in every
//! key's queue without deadlock and without overtaking single-key waiters, timeouts and
//! disconnects that leave every queue, shared sets, session sets, and replication.

use redis_lock_harness::*;
use std::time::{Duration, Instant};

fn tokens(v: &Value) -> Vec<i64> {
    match v {
        Value::Array(items) => items.iter().map(int).collect(),
        other => panic!("not a list of tokens: {other:?}"),
    }
}

fn macquire(c: &mut Connection, keys: &[&str], owner: &str, ttl: i64) -> Option<Vec<i64>> {
    let n = keys.len().to_string();
    let ttl = ttl.to_string();
    let mut words = vec!["LOCK.MACQUIRE", &n];
    words.extend(keys);
    words.extend([owner, &ttl]);
    match ok(c, &words) {
        Value::Nil => None,
        v => Some(tokens(&v)),
    }
}

/// `LOCK.MACQUIRE ... WAIT timeout` on a connection of its own.
fn spawn_set_wait(
    s: &Server,
    keys: &[&str],
    owner: &str,
    ttl: i64,
    timeout: i64,
) -> std::thread::JoinHandle<Result<Value, String>> {
    let (n, ttl, timeout) = (keys.len().to_string(), ttl.to_string(), timeout.to_string());
    let mut words = vec!["LOCK.MACQUIRE", &n];
    words.extend(keys);
    words.extend([owner, &ttl, "WAIT", &timeout]);
    spawn_wait_with(s, &words)
}

fn mrelease(c: &mut Connection, keys: &[&str], owner: &str) -> i64 {
    let n = keys.len().to_string();
    let mut words = vec!["LOCK.MRELEASE", &n];
    words.extend(keys);
    words.push(owner);
    int(&ok(c, &words))
}

#[test]
fn a_set_is_taken_whole_or_not_at_all() {
    let s = Server::start();
    let mut c = s.con();
    let set = macquire(&mut c, &["a", "b", "c"], "me", 60_000).expect("all free");
    assert!(
        set.windows(2).all(|w| w[0] < w[1]),
        "one token per key, in key order: {set:?}"
    );
    for (key, token) in ["a", "b", "c"].iter().zip(&set) {
        assert_eq!(fence(&mut c, key), Some(*token));
    }
    // One member held by someone else: nothing is taken, not even the free keys.
    assert_eq!(macquire(&mut c, &["d", "c", "e"], "you", 60_000), None);
    assert_eq!(int(&ok(&mut c, &["EXISTS", "d", "e"])), 0);
    // The owner again: renewed where it holds, with the same tokens.
    assert_eq!(
        macquire(&mut c, &["a", "b", "c"], "me", 60_000),
        Some(set.clone())
    );
    // Owner `*`: the generated owner, then the tokens.
    let Value::Array(pair) = ok(&mut c, &["LOCK.MACQUIRE", "2", "x", "y", "*", "1000"]) else {
        panic!("owner * answers [owner, tokens]");
    };
    let owner = text(&pair[0]);
    assert_eq!(owner.len(), 36, "a UUID: {owner}");
    assert_eq!(tokens(&pair[1]).len(), 2);
    assert_eq!(
        mrelease(&mut c, &["a", "b", "z"], "me"),
        2,
        "z was never held"
    );
    assert_eq!(
        fence(&mut c, "c"),
        Some(set[2]),
        "a key left out stays held"
    );
    assert_eq!(stat(&mut c, "set_grants"), 2.0);
    assert_eq!(stat(&mut c, "set_keys_granted"), 5.0);
}

#[test]
fn bad_sets_get_clear_errors_and_change_nothing() {
    let s = Server::start();
    let mut c = s.con();
    ok(&mut c, &["RPUSH", "list", "x"]);
    for (words, part) in [
        (
            vec!["LOCK.MACQUIRE", "2", "a", "a", "me", "100"],
            "appears twice",
        ),
        (vec!["LOCK.MACQUIRE", "0", "a", "me", "100"], "numkeys"),
        (vec!["LOCK.MACQUIRE", "-1", "a", "me", "100"], "numkeys"),
        (
            vec!["LOCK.MACQUIRE", "x", "a", "me", "100"],
            "not an integer",
        ),
        (vec!["LOCK.MACQUIRE", "3", "a", "b", "me", "100"], "syntax"),
        (
            vec!["LOCK.MACQUIRE", "1", "a", "me", "100", "LIMIT", "2"],
            "semaphore",
        ),
        (
            vec!["LOCK.MACQUIRE", "2", "a", "list", "me", "100"],
            "WRONGTYPE",
        ),
        (vec!["LOCK.MACQUIRE", "1", "a", "me", "0"], "ttl"),
        (vec!["LOCK.MRELEASE", "2", "a", "list", "me"], "WRONGTYPE"),
        (vec!["LOCK.MRELEASE", "2", "a", "b"], "syntax"),
        (vec!["LOCK.MRELEASE", "1", "a"], "wrong number of arguments"),
    ] {
        let err = cmd(&mut c, &words).unwrap_err();
        assert!(err.contains(part), "{words:?}: {err}");
    }
    ok(&mut c, &["CONFIG", "SET", "lock.max-set-size", "2"]);
    let err = cmd(&mut c, &["LOCK.MACQUIRE", "3", "a", "b", "c", "me", "100"]).unwrap_err();
    assert!(err.contains("lock.max-set-size"), "{err}");
    assert_eq!(int(&ok(&mut c, &["DBSIZE"])), 1, "only the list");
    // The owner holds a member: waiting for the rest would wait for itself.
    acquire(&mut c, "a", "me", 60_000).unwrap();
    acquire(&mut c, "b", "other", 60_000).unwrap();
    let err = cmd(
        &mut c,
        &["LOCK.MACQUIRE", "2", "a", "b", "me", "100", "WAIT", "0"],
    );
    assert!(err.unwrap_err().starts_with("DEADLOCK"));
    assert_eq!(
        macquire(&mut c, &["a", "b"], "me", 100),
        None,
        "without WAIT: nil"
    );
    assert_eq!(blocked_clients(&mut c), 0);
}

#[test]
fn a_waiting_set_gets_all_its_keys_when_the_last_one_frees() {
    let s = Server::start();
    let mut c = s.con();
    acquire(&mut c, "a", "h1", 60_000).unwrap();
    acquire(&mut c, "b", "h2", 60_000).unwrap();
    let set = spawn_set_wait(&s, &["a", "b"], "set", 60_000, 0);
    wait_blocked(&mut c, 1);
    let info = ok(&mut c, &["LOCK.INFO", "a"]);
    assert_eq!(map_field(&info, "waiters").map(|v| int(&v)), Some(1));
    assert_eq!(release(&mut c, "a", "h1"), 1);
    // `a` is free but the set waits for `b`: `a` stays with nobody, and no newcomer takes it.
    assert_eq!(acquire(&mut c, "a", "newcomer", 1_000), None);
    assert_eq!(blocked_clients(&mut c), 1);
    assert_eq!(release(&mut c, "b", "h2"), 1);
    let got = tokens(&set.join().unwrap().unwrap());
    assert_eq!(fence(&mut c, "a"), Some(got[0]));
    assert_eq!(fence(&mut c, "b"), Some(got[1]));
    assert_eq!(stat(&mut c, "acquired_after_wait"), 1.0);
}

#[test]
fn single_key_waiters_keep_their_place_around_a_set() {
    let s = Server::start();
    let mut c = s.con();
    acquire(&mut c, "a", "h", 60_000).unwrap();
    acquire(&mut c, "b", "hb", 60_000).unwrap();
    let first = spawn_wait(&s, "a", "first", 60_000, 0);
    wait_blocked(&mut c, 1);
    let set = spawn_set_wait(&s, &["a", "b"], "set", 60_000, 0);
    wait_blocked(&mut c, 2);
    let last = spawn_wait(&s, "a", "last", 60_000, 0);
    wait_blocked(&mut c, 3);
    assert_eq!(release(&mut c, "a", "h"), 1);
    let t_first = token_of(first.join().unwrap());
    assert_eq!(release(&mut c, "a", "first"), 1);
    // The set heads a's queue now but b is held: `last` stays behind it.
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(fence(&mut c, "a"), None, "nobody overtook the set");
    assert_eq!(blocked_clients(&mut c), 2);
    assert_eq!(release(&mut c, "b", "hb"), 1);
    let got = tokens(&set.join().unwrap().unwrap());
    assert!(got[0] > t_first);
    assert_eq!(mrelease(&mut c, &["a", "b"], "set"), 2);
    let t_last = token_of(last.join().unwrap());
    assert!(t_last > got[1], "served after the set");
}

#[test]
fn sets_taken_in_opposite_orders_do_not_deadlock() {
    let s = Server::start();
    let mut c = s.con();
    acquire(&mut c, "x", "h", 60_000).unwrap();
    acquire(&mut c, "y", "h", 60_000).unwrap();
    let xy = spawn_set_wait(&s, &["x", "y"], "xy", 60_000, 10_000);
    wait_blocked(&mut c, 1);
    let yx = spawn_set_wait(&s, &["y", "x"], "yx", 60_000, 10_000);
    wait_blocked(&mut c, 2);
    assert_eq!(mrelease(&mut c, &["y", "x"], "h"), 2);
    let first = tokens(&xy.join().unwrap().unwrap());
    assert_eq!(
        blocked_clients(&mut c),
        1,
        "the later set waits for the first"
    );
    assert_eq!(mrelease(&mut c, &["x", "y"], "xy"), 2);
    let second = tokens(&yx.join().unwrap().unwrap());
    assert!(
        second.iter().all(|t| *t > first[1]),
        "{first:?} then {second:?}"
    );
    assert_eq!(fence(&mut c, "y"), Some(second[0]));
}

#[test]
fn a_set_that_times_out_or_disconnects_leaves_every_queue() {
    let s = Server::start();
    let mut c = s.con();
    acquire(&mut c, "a", "h", 60_000).unwrap();
    acquire(&mut c, "b", "h", 60_000).unwrap();
    let started = Instant::now();
    let timed_out = spawn_set_wait(&s, &["a", "b"], "late", 60_000, 200);
    wait_blocked(&mut c, 1);
    // Behind the set on b: served as soon as b frees, once the set is gone.
    let behind = spawn_wait(&s, "b", "behind", 60_000, 0);
    wait_blocked(&mut c, 2);
    assert_eq!(timed_out.join().unwrap(), Ok(Value::Nil));
    assert!(started.elapsed() >= Duration::from_millis(190));
    assert_eq!(release(&mut c, "b", "h"), 1);
    token_of(behind.join().unwrap());
    // A set whose connection closes leaves its queues too.
    let ghost = spawn_set_wait(&s, &["a", "c"], "ghost", 60_000, 0);
    wait_blocked(&mut c, 1);
    let killed = ok(
        &mut c,
        &["CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"],
    );
    assert!(int(&killed) >= 1);
    assert!(ghost.join().unwrap().is_err(), "its connection was closed");
    assert!(eventually(Duration::from_secs(5), || blocked_clients(
        &mut c
    ) == 0));
    assert_eq!(release(&mut c, "a", "h"), 1);
    assert_eq!(fence(&mut c, "a"), None, "nobody was left to hand `a` to");
    assert_eq!(int(&ok(&mut c, &["EXISTS", "c"])), 0);
    assert_eq!(stat(&mut c, "waiters"), 0.0);
}

#[test]
fn shared_sets_share_and_a_writer_waits_for_them() {
    let s = Server::start();
    let mut c = s.con();
    let words = |owner: &'static str| ["LOCK.MACQUIRE", "2", "r1", "r2", owner, "60000", "SHARED"];
    let one = tokens(&ok(&mut c, &words("reader1")));
    let two = tokens(&ok(&mut c, &words("reader2")));
    assert!(two[0] > one[1]);
    let writer = spawn_wait(&s, "r2", "writer", 60_000, 0);
    wait_blocked(&mut c, 1);
    // A shared set behind the writer waits too (no overtaking).
    let behind = spawn_wait_with(
        &s,
        &[
            "LOCK.MACQUIRE",
            "1",
            "r2",
            "reader3",
            "60000",
            "SHARED",
            "WAIT",
            "0",
        ],
    );
    wait_blocked(&mut c, 2);
    assert_eq!(mrelease(&mut c, &["r1", "r2"], "reader1"), 2);
    assert_eq!(blocked_clients(&mut c), 2, "reader2 still holds r2");
    assert_eq!(mrelease(&mut c, &["r1", "r2"], "reader2"), 2);
    let w = token_of(writer.join().unwrap());
    assert_eq!(release(&mut c, "r2", "writer"), 1);
    let three = tokens(&behind.join().unwrap().unwrap());
    assert!(three[0] > w);
}

#[test]
fn a_session_set_ends_with_its_connection() {
    let s = Server::start();
    let mut c = s.con();
    let mut holder = s.con();
    ok(
        &mut holder,
        &["LOCK.MACQUIRE", "2", "s1", "s2", "me", "60000", "SESSION"],
    );
    let waiter = spawn_set_wait(&s, &["s2", "s1"], "next", 60_000, 5_000);
    wait_blocked(&mut c, 1);
    drop(holder);
    let got = tokens(&waiter.join().unwrap().unwrap());
    assert_eq!(fence(&mut c, "s1"), Some(got[1]));
}

#[test]
fn a_crashed_holder_frees_every_member_at_its_leases_end() {
    let s = Server::start();
    let mut c = s.con();
    let port = s.port.to_string();
    // A holder process killed with SIGKILL right after it took the set (300 ms leases).
    let mut holder = std::process::Command::new("redis-cli")
        .args(["-p", &port])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("redis-cli");
    use std::io::{BufRead, Write};
    let mut stdin = holder.stdin.take().unwrap();
    writeln!(stdin, "LOCK.MACQUIRE 3 k1 k2 k3 crashed 300").unwrap();
    let mut line = String::new();
    std::io::BufReader::new(holder.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let taken = Instant::now();
    assert!(fence(&mut c, "k3").is_some(), "held: {line}");
    holder.kill().unwrap(); // SIGKILL
    holder.wait().unwrap();
    let waiter = spawn_set_wait(&s, &["k3", "k1", "k2"], "next", 60_000, 10_000);
    let got = tokens(&waiter.join().unwrap().unwrap());
    // Not before the lease's end (a 10 ms margin for the clocks' granularity).
    assert!(
        taken.elapsed() >= Duration::from_millis(290),
        "{:?}",
        taken.elapsed()
    );
    assert_eq!(fence(&mut c, "k2"), Some(got[2]));
}

#[test]
fn replicas_and_the_aof_follow_sets() {
    let mut master = Server::builder()
        .args(&["--appendonly", "yes", "--appendfsync", "always"])
        .start();
    let replica = Server::builder().replica_of(&master).start();
    let mut m = master.con();
    let first = macquire(&mut m, &["a", "b"], "one", 60_000).unwrap();
    acquire(&mut m, "c", "h", 60_000).unwrap();
    let waiting = spawn_set_wait(&master, &["b", "c"], "two", 60_000, 0);
    wait_blocked(&mut m, 1);
    assert_eq!(mrelease(&mut m, &["a", "b"], "one"), 2);
    assert_eq!(release(&mut m, "c", "h"), 1);
    let second = tokens(&waiting.join().unwrap().unwrap());
    assert!(second[0] > first[1]);
    wait_replica_acked(&mut m);
    let mut r = replica.con();
    assert_eq!(fence(&mut r, "a"), None);
    assert_eq!(fence(&mut r, "b"), Some(second[0]));
    assert_eq!(fence(&mut r, "c"), Some(second[1]));
    assert_eq!(
        ok(&mut r, &["DEBUG", "DIGEST"]),
        ok(&mut m, &["DEBUG", "DIGEST"])
    );
    wait_persistence_idle(&mut m);
    master.restart_with(&["--appendonly", "yes"]);
    let mut m = master.con();
    assert_eq!(fence(&mut m, "b"), Some(second[0]));
    assert_eq!(fence(&mut m, "c"), Some(second[1]));
    ok(&mut m, &["DEBUG", "RELOAD"]);
    assert_eq!(fence(&mut m, "c"), Some(second[1]));
}

#[test]
fn a_set_waits_behind_an_old_style_lock_and_fails_on_another_type() {
    let s = Server::start();
    let mut c = s.con();
    // A plain string under a member is another client's `SET NX PX` lock: the set waits on it.
    assert_eq!(
        ok(&mut c, &["SET", "old", "id", "NX", "PX", "60000"]),
        Value::Okay
    );
    assert_eq!(macquire(&mut c, &["new", "old"], "me", 60_000), None);
    let set = spawn_set_wait(&s, &["new", "old"], "me", 60_000, 0);
    wait_blocked(&mut c, 1);
    assert_eq!(fence(&mut c, "new"), None, "nothing taken while it waits");
    ok(&mut c, &["DEL", "old"]);
    let got = tokens(&set.join().unwrap().unwrap());
    assert_eq!(fence(&mut c, "old"), Some(got[1]));
    assert_eq!(mrelease(&mut c, &["new", "old"], "me"), 2);
    // Another type written under a member while the set waits: the set gets WRONGTYPE.
    acquire(&mut c, "b", "h", 60_000).unwrap();
    let set = spawn_set_wait(&s, &["a", "b"], "me", 60_000, 0);
    wait_blocked(&mut c, 1);
    ok(&mut c, &["MULTI"]);
    cmd(&mut c, &["DEL", "b"]).unwrap();
    cmd(&mut c, &["RPUSH", "b", "a list"]).unwrap();
    ok(&mut c, &["EXEC"]);
    assert!(set.join().unwrap().unwrap_err().starts_with("WRONGTYPE"));
    assert_eq!(blocked_clients(&mut c), 0);
    assert_eq!(int(&ok(&mut c, &["EXISTS", "a"])), 0, "nothing taken");
}

#[test]
fn flushall_serves_a_waiting_set_and_demotion_answers_it() {
    let s = Server::start();
    let mut c = s.con();
    acquire(&mut c, "a", "h", 60_000).unwrap();
    acquire(&mut c, "b", "h", 60_000).unwrap();
    let set = spawn_set_wait(&s, &["a", "b"], "me", 60_000, 0);
    wait_blocked(&mut c, 1);
    ok(&mut c, &["FLUSHALL"]);
    let got = tokens(&set.join().unwrap().unwrap());
    assert_eq!(fence(&mut c, "b"), Some(got[1]));
    // A master that becomes a replica answers its waiting sets at once.
    let other = Server::start();
    let set = spawn_set_wait(&s, &["b", "c"], "late", 60_000, 0);
    wait_blocked(&mut c, 1);
    ok(&mut c, &["REPLICAOF", "127.0.0.1", &other.port.to_string()]);
    let err = set.join().unwrap().unwrap_err();
    assert!(err.starts_with("UNBLOCKED"), "{err}");
    assert_eq!(blocked_clients(&mut c), 0);
}
