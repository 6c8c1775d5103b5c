//! `LOCK.WATCH key [AFTER cursor] [WAIT timeout-ms]`: a watcher is answered at once when the
//! lock differs from what it saw, and otherwise wakes on the change, whatever the change: a
//! grant, a release, a handoff, a lease's end, a session's end, a forced release, a plain
//! string set or deleted or run out, RENAME, MOVE, RESTORE, FLUSHALL, SWAPDB. It never blocks
//! in MULTI or Lua, follows the master on a replica, and is answered at once after a failover
//! when the new master's holder is not the one it saw.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use redis_lock_harness::*;

/// The bound on a wake-up: it happens on the server's next turn of its event loop (a
/// millisecond or less, see the bench), and 500 ms leaves 500x that for a loaded machine. An
/// emulated server is slower still (CI saw 628 ms under qemu with both cores busy), so the
/// bound grows with `server_slowdown()`: 5 s under qemu, still 4x below `WAIT_MS`, the only
/// other way a watcher here is answered (and then with nil, not news).
fn wakes_within() -> Duration {
    Duration::from_millis(500) * server_slowdown()
}

/// How long a watcher in these tests waits at most (a failing test ends, not hangs).
const WAIT_MS: &str = "20000";

fn field(v: &Value, name: &str) -> Value {
    map_field(v, name).unwrap_or_else(|| panic!("no {name} in {v:?}"))
}

fn cursor(v: &Value) -> String {
    text(&field(v, "cursor"))
}

fn mode(v: &Value) -> String {
    text(&field(v, "mode"))
}

fn owners(v: &Value) -> Vec<String> {
    match field(v, "holders") {
        Value::Array(holders) => holders.iter().map(|h| text(&field(h, "owner"))).collect(),
        other => panic!("holders: {other:?}"),
    }
}

/// `LOCK.WATCH key [AFTER after]` without waiting.
fn look(c: &mut Connection, key: &str, after: Option<&str>) -> Value {
    match after {
        Some(after) => ok(c, &["LOCK.WATCH", key, "AFTER", after]),
        None => ok(c, &["LOCK.WATCH", key]),
    }
}

/// A watcher blocked on its own connection: its reply and when it came.
struct Watcher(JoinHandle<(Result<Value, String>, Instant)>);

impl Watcher {
    /// Watch `key` after `after` (waits until the server has it blocked).
    fn start(s: &Server, key: &str, after: &str) -> Watcher {
        let mut con = s.con();
        let mut admin = s.con();
        let before = blocked_clients(&mut admin);
        let words = ["LOCK.WATCH", key, "AFTER", after, "WAIT", WAIT_MS].map(String::from);
        let handle = std::thread::spawn(move || {
            let words: Vec<&str> = words.iter().map(String::as_str).collect();
            let reply = cmd(&mut con, &words);
            (reply, Instant::now())
        });
        wait_blocked(&mut admin, before + 1);
        Watcher(handle)
    }

    /// Its reply, and how long after `since` it came.
    fn reply(self, since: Instant) -> (Value, Duration) {
        let (reply, at) = self.0.join().expect("watcher thread");
        (
            reply.expect("LOCK.WATCH answered"),
            at.saturating_duration_since(since),
        )
    }
}

/// Watch `key` from its current state, make `change`, and return the news and how soon it
/// came after the change.
fn news_of(s: &Server, key: &str, change: impl FnOnce()) -> (Value, Duration) {
    let mut c = s.con();
    let seen = cursor(&look(&mut c, key, None));
    let watcher = Watcher::start(s, key, &seen);
    let since = Instant::now();
    change();
    let (news, took) = watcher.reply(since);
    assert_ne!(cursor(&news), seen, "the news differs from what was seen");
    (news, took)
}

fn assert_prompt(what: &str, took: Duration) {
    assert!(took < wakes_within(), "{what}: woke after {took:?}");
}

#[test]
fn answers_at_once_what_differs_and_nil_for_what_does_not() {
    let s = Server::start();
    let mut c = s.con();
    let free = look(&mut c, "job", None);
    assert_eq!((cursor(&free), mode(&free)), ("free".into(), "free".into()));
    assert_eq!(field(&free, "token"), Value::Nil);
    assert_eq!(look(&mut c, "job", Some("free")), Value::Nil);
    let t1 = acquire(&mut c, "job", "alice", 60_000).expect("granted");
    let held = look(&mut c, "job", Some("free"));
    assert_eq!(cursor(&held), format!("{t1}-1"));
    assert_eq!(
        (mode(&held), owners(&held)),
        ("exclusive".into(), vec!["alice".into()])
    );
    assert_eq!(int(&field(&held, "token")), t1);
    assert_eq!(
        look(&mut c, "job", Some(&t1.to_string())),
        Value::Nil,
        "a bare token is <token>-1"
    );
    assert_eq!(look(&mut c, "job", Some(&format!("{t1}-1"))), Value::Nil);
    release(&mut c, "job", "alice");
    let t2 = acquire(&mut c, "job", "bob", 60_000).expect("granted");
    let newer = look(&mut c, "job", Some(&t1.to_string()));
    assert_eq!(
        int(&field(&newer, "token")),
        t2,
        "after an older token: at once"
    );
    assert_eq!(owners(&newer), ["bob"]);
    let started = Instant::now();
    let waited = cmd(
        &mut c,
        &["LOCK.WATCH", "job", "AFTER", &t2.to_string(), "WAIT", "150"],
    );
    assert_eq!(waited, Ok(Value::Nil), "nothing new within WAIT: nil");
    assert!(started.elapsed() >= Duration::from_millis(150));
}

#[test]
fn shared_holders_leaving_one_by_one_are_each_news() {
    let s = Server::start();
    let mut c = s.con();
    for reader in ["r1", "r2", "r3"] {
        ok(
            &mut c,
            &["LOCK.ACQUIRE", "report", reader, "60000", "SHARED"],
        );
    }
    let three = look(&mut c, "report", None);
    assert_eq!(
        (mode(&three), owners(&three)),
        ("shared".into(), vec!["r1".into(), "r2".into(), "r3".into()])
    );
    let mut r = s.con();
    let (two, took) = news_of(&s, "report", || {
        release(&mut r, "report", "r1");
    });
    assert_prompt("a reader left", took);
    assert_eq!(owners(&two), ["r2", "r3"]);
    assert_eq!(
        cursor(&two).split('-').next(),
        cursor(&three).split('-').next(),
        "the newest token is the same: the count tells the states apart"
    );
}

#[test]
fn a_watcher_wakes_on_every_kind_of_change_to_holders() {
    let s = Server::start();
    let mut c = s.con();

    let (granted, took) = news_of(&s, "k", || {
        acquire(&mut c, "k", "alice", 60_000);
    });
    assert_prompt("a grant", took);
    assert_eq!(owners(&granted), ["alice"]);

    let waiter = spawn_wait(&s, "k", "bob", 60_000, 20_000);
    wait_blocked(&mut c, 1);
    let (handed, took) = news_of(&s, "k", || {
        release(&mut c, "k", "alice");
    });
    assert_prompt("a handoff", took);
    let bob = token_of(waiter.join().expect("waiter"));
    assert_eq!(
        (owners(&handed), int(&field(&handed, "token"))),
        (vec!["bob".into()], bob)
    );

    let (released, took) = news_of(&s, "k", || {
        release(&mut c, "k", "bob");
    });
    assert_prompt("a release", took);
    assert_eq!(mode(&released), "free");

    acquire(&mut c, "k", "carol", 60_000);
    let (forced, took) = news_of(&s, "k", || {
        ok(&mut c, &["LOCK.FORCERELEASE", "k"]);
    });
    assert_prompt("a forced release", took);
    assert_eq!(mode(&forced), "free");

    let mut session = s.con();
    ok(
        &mut session,
        &["LOCK.ACQUIRE", "k", "dave", "60000", "SESSION"],
    );
    let (ended, took) = news_of(&s, "k", move || drop(session));
    assert_prompt("a session's end", took);
    assert_eq!(mode(&ended), "free");
}

#[test]
fn a_watcher_wakes_when_the_lease_runs_out() {
    let s = Server::start();
    let mut c = s.con();
    // The lease starts after this instant (the server reads its clock once the command came).
    let sent = Instant::now();
    acquire(&mut c, "k", "sleepy", 300).expect("granted");
    let seen = cursor(&look(&mut c, "k", None));
    let watcher = Watcher::start(&s, "k", &seen);
    let (news, took) = watcher.reply(sent);
    assert_eq!(mode(&news), "free");
    assert!(
        took >= Duration::from_millis(300),
        "not before the lease's end: {took:?}"
    );
    assert_prompt("the lease's end", took - Duration::from_millis(300));
}

#[test]
fn plain_strings_of_old_style_clients_are_holders_too() {
    let s = Server::start();
    let mut c = s.con();
    let (set, took) = news_of(&s, "k", || {
        ok(&mut c, &["SET", "k", "old-client", "NX", "PX", "60000"]);
    });
    assert_prompt("a string set", took);
    assert_eq!(
        (cursor(&set), mode(&set)),
        ("foreign".into(), "foreign".into())
    );
    let (deleted, took) = news_of(&s, "k", || {
        ok(&mut c, &["DEL", "k"]);
    });
    assert_prompt("a string deleted", took);
    assert_eq!(mode(&deleted), "free");

    let set_at = Instant::now();
    ok(&mut c, &["SET", "k", "old-client", "NX", "PX", "300"]);
    let watcher = Watcher::start(&s, "k", "foreign");
    let (ran_out, took) = watcher.reply(set_at);
    assert_eq!(mode(&ran_out), "free");
    assert_prompt(
        "a string's TTL",
        took.saturating_sub(Duration::from_millis(300)),
    );

    ok(&mut c, &["HSET", "k", "f", "v"]);
    assert_eq!(
        cmd(&mut c, &["LOCK.WATCH", "k"]),
        Err("WRONGTYPE Operation against a key holding the wrong kind of value".into())
    );
}

#[test]
fn renames_moves_restores_flushes_and_swaps_are_news() {
    let s = Server::start();
    let mut c = s.con();
    acquire(&mut c, "a", "alice", 60_000).expect("granted");
    let b_watcher = Watcher::start(&s, "b", "free");
    let (gone, took) = news_of(&s, "a", || {
        ok(&mut c, &["RENAME", "a", "b"]);
    });
    assert_prompt("renamed away", took);
    assert_eq!(mode(&gone), "free");
    let (arrived, _) = b_watcher.reply(Instant::now());
    assert_eq!(
        owners(&arrived),
        ["alice"],
        "the destination's watcher sees it arrive"
    );

    let (moved, took) = news_of(&s, "b", || {
        ok(&mut c, &["MOVE", "b", "3"]);
    });
    assert_prompt("moved", took);
    assert_eq!(mode(&moved), "free");
    ok(&mut c, &["SELECT", "3"]);
    let dump = match ok(&mut c, &["DUMP", "b"]) {
        Value::BulkString(payload) => payload,
        other => panic!("{other:?}"),
    };
    ok(&mut c, &["DEL", "b"]);
    ok(&mut c, &["SELECT", "0"]);
    let (restored, took) = news_of(&s, "r", || {
        run(&mut c, &[b"RESTORE", b"r", b"0", &dump]).expect("restored");
    });
    assert_prompt("restored", took);
    assert_eq!(owners(&restored), ["alice"]);

    let (copied, took) = news_of(&s, "r2", || {
        ok(&mut c, &["COPY", "r", "r2"]);
    });
    assert_prompt("copied onto", took);
    assert_eq!(owners(&copied), ["alice"]);

    let (flushed, took) = news_of(&s, "r", || {
        ok(&mut c, &["FLUSHALL"]);
    });
    assert_prompt("flushed", took);
    assert_eq!(mode(&flushed), "free");

    let mut db1 = s.con();
    ok(&mut db1, &["SELECT", "1"]);
    acquire(&mut db1, "s", "in-db-1", 60_000).expect("granted");
    let (swapped, took) = news_of(&s, "s", || {
        ok(&mut c, &["SWAPDB", "0", "1"]);
    });
    assert_prompt("swapped", took);
    assert_eq!(owners(&swapped), ["in-db-1"]);
}

#[test]
fn never_blocks_in_multi_or_lua_and_leaves_no_trace_when_it_goes() {
    let s = Server::start();
    let mut c = s.con();
    let t = acquire(&mut c, "k", "alice", 60_000)
        .expect("granted")
        .to_string();
    ok(&mut c, &["MULTI"]);
    cmd(&mut c, &["LOCK.WATCH", "k", "AFTER", &t, "WAIT", "0"]).expect("queued");
    assert_eq!(ok(&mut c, &["EXEC"]), Value::Array(vec![Value::Nil]));
    let script = "return redis.call('LOCK.WATCH', KEYS[1], 'AFTER', ARGV[1], 'WAIT', 0)";
    assert_eq!(ok(&mut c, &["EVAL", script, "1", "k", &t]), Value::Nil);

    let watcher = Watcher::start(&s, "k", &t);
    assert_eq!(stat(&mut c, "watchers"), 1.0);
    let id = blocked_ids(&mut c)
        .into_iter()
        .max()
        .expect("the watcher is blocked");
    ok(&mut c, &["CLIENT", "KILL", "ID", &id.to_string()]);
    assert!(
        watcher.0.join().expect("thread").0.is_err(),
        "its connection was closed"
    );
    assert!(eventually(Duration::from_secs(5), || stat(
        &mut c, "watchers"
    ) == 0.0));
    release(&mut c, "k", "alice");
    let before = stat(&mut c, "watch_news");
    look(&mut c, "k", None);
    assert_eq!(
        stat(&mut c, "watch_news"),
        before + 1.0,
        "INFO lock counts the news told"
    );
}

#[test]
fn a_replica_tells_its_watchers_what_the_master_did() {
    let master = Server::start();
    let replica = Server::builder().replica_of(&master).start();
    let mut r = replica.con();
    wait_link_up(&mut r);
    let mut m = master.con();
    wait_streaming(&mut m);
    acquire(&mut m, "leader", "node-1", 60_000).expect("granted");
    wait_replica_acked(&mut m);
    let (released, took) = news_of(&replica, "leader", || {
        release(&mut m, "leader", "node-1");
    });
    assert_eq!(mode(&released), "free");
    assert_prompt("a release replicated", took);
}

#[test]
fn after_a_failover_the_new_masters_holder_is_news_at_once() {
    let mut master = Server::start();
    let replica = Server::builder().replica_of(&master).start();
    let mut r = replica.con();
    wait_link_up(&mut r);
    let mut m = master.con();
    wait_streaming(&mut m);
    let t1 = acquire(&mut m, "leader", "node-1", 2_000).expect("granted");
    wait_replica_acked(&mut m);
    master.kill9();
    ok(&mut r, &["REPLICAOF", "NO", "ONE"]);
    // Its holder is still the one watchers saw: nothing new for them.
    assert_eq!(look(&mut r, "leader", Some(&t1.to_string())), Value::Nil);
    let t2 = spawn_wait(&replica, "leader", "node-2", 60_000, 20_000);
    let t2 = token_of(t2.join().expect("waiter"));
    assert!(t2 > t1);
    let news = look(&mut r, "leader", Some(&t1.to_string()));
    assert_eq!(
        (owners(&news), int(&field(&news, "token"))),
        (vec!["node-2".into()], t2)
    );
}

/// Open `n` connections that each send `LOCK.WATCH key AFTER after WAIT 0` (raw RESP, so no
/// thread per watcher).
fn raw_watchers(port: u16, key: &str, after: &str, n: usize) -> Vec<TcpStream> {
    let words = ["LOCK.WATCH", key, "AFTER", after, "WAIT", "0"];
    let mut command = format!("*{}\r\n", words.len());
    for w in words {
        command.push_str(&format!("${}\r\n{w}\r\n", w.len()));
    }
    (0..n)
        .map(|_| {
            let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
            s.write_all(command.as_bytes()).expect("send");
            s
        })
        .collect()
}

#[test]
fn a_thousand_watchers_of_one_lock_all_wake_on_one_release() {
    const N: usize = 1_000;
    let s = Server::builder().args(&["--maxclients", "2000"]).start();
    let mut c = s.con();
    let t = acquire(&mut c, "hot", "alice", 600_000).expect("granted");
    let mut watchers = raw_watchers(s.port, "hot", &t.to_string(), N);
    assert!(
        eventually(Duration::from_secs(60), || stat(&mut c, "watchers")
            == N as f64),
        "all {N} watch"
    );
    let released = Instant::now();
    release(&mut c, "hot", "alice");
    for w in &mut watchers {
        w.set_read_timeout(Some(Duration::from_secs(30)))
            .expect("timeout");
        let mut buf = [0u8; 64];
        let n = w.read(&mut buf).expect("news");
        assert!(
            String::from_utf8_lossy(&buf[..n]).contains("free"),
            "told the lock is free"
        );
    }
    eprintln!("{N} watchers woken in {:?}", released.elapsed());
    assert_eq!(stat(&mut c, "watchers"), 0.0);
}

#[test]
fn bad_arguments_get_clear_errors() {
    let s = Server::start();
    let mut c = s.con();
    for (words, error) in [
        (&["LOCK.WATCH", "k", "AFTER"][..], "ERR syntax error"),
        (&["LOCK.WATCH", "k", "AFTER", "x"], "ERR invalid cursor"),
        (&["LOCK.WATCH", "k", "AFTER", "5-0"], "ERR invalid cursor"),
        (
            &["LOCK.WATCH", "k", "WAIT", "-1"],
            "ERR timeout is negative",
        ),
        (
            &["LOCK.WATCH", "k", "WAIT", "1", "WAIT", "1"],
            "ERR syntax error",
        ),
        (&["LOCK.WATCH"], "ERR wrong number of arguments"),
    ] {
        let err = cmd(&mut c, words).expect_err("refused");
        assert!(err.starts_with(error), "{words:?}: {err}");
    }
}

#[test]
fn a_reload_is_no_news_and_a_string_without_foreign_holds_is_wrongtype() {
    let s = Server::start();
    let mut c = s.con();
    let t = acquire(&mut c, "k", "alice", 60_000).expect("granted");
    let watcher = Watcher::start(&s, "k", &t.to_string());
    ok(&mut c, &["DEBUG", "RELOAD"]);
    // Still blocked: the same holder came back from the RDB.
    wait_blocked(&mut c, 1);
    let (released, took) = {
        let since = Instant::now();
        release(&mut c, "k", "alice");
        watcher.reply(since)
    };
    assert_eq!(mode(&released), "free", "told the release, not the reload");
    assert_prompt("a release after a reload", took);

    ok(&mut c, &["CONFIG", "SET", "lock.foreign-holds", "no"]);
    let watcher = Watcher::start(&s, "k", "free");
    ok(&mut c, &["SET", "k", "a plain string"]);
    let (reply, _) = watcher.0.join().expect("thread");
    assert_eq!(
        reply,
        Err("WRONGTYPE Operation against a key holding the wrong kind of value".into()),
        "another type under the name is an error once foreign holds are off"
    );
}
