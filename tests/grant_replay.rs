//! A fresh grant (a free name, nobody waiting, the owner given) goes to the replicas and the AOF
//! as the command itself, and their replay issues the master's token (`fencing::replay_issue`);
//! every other write carries its tokens. Mixed histories of both kinds leave replicas, and
//! servers restarted from their AOF, with the master's tokens and digest, with or without an
//! RDB preamble in the AOF's base.

use redis::Connection;
use redis_lock_harness::*;

const TTL: i64 = 600_000;

/// Grants of every kind, each followed by fresh ones: given and generated owners, shared and
/// semaphore holds, a renewal, releases and deletions, a restored key with a token far ahead,
/// a lock set, a handoff to a waiter. The names it leaves.
fn history(server: &Server, m: &mut Connection, round: &str) -> Vec<String> {
    let k = |name: &str| format!("{round}:{name}");
    let mut keys = Vec::new();
    let mut grant = |m: &mut Connection, name: &str, extra: &[&str]| {
        let key = k(name);
        let mut args = vec!["LOCK.ACQUIRE", &key, "owner-1", "600000"];
        args.extend_from_slice(extra);
        assert_ne!(ok(m, &args), redis::Value::Nil, "{key} granted");
        keys.push(key);
    };
    grant(m, "a1", &[]);
    grant(m, "a2", &[]);
    grant(m, "shared", &["SHARED"]);
    ok(
        m,
        &["LOCK.ACQUIRE", &k("shared"), "owner-2", "600000", "SHARED"],
    );
    grant(m, "sem", &["LIMIT", "3", "PERMITS", "2"]);
    grant(m, "session", &["SESSION"]);
    ok(m, &["LOCK.ACQUIRE", &k("generated"), "*", "600000"]);
    grant(m, "a3", &[]);
    assert!(acquire(m, &k("a1"), "owner-1", TTL).is_some(), "renewed");
    release(m, &k("a2"), "owner-1");
    grant(m, "a4", &[]);
    restore_lock_with_token(m, &k("restored"), future_token());
    grant(m, "after-restore", &[]);
    ok(
        m,
        &[
            "LOCK.MACQUIRE",
            "2",
            &k("{s}1"),
            &k("{s}2"),
            "owner-1",
            "600000",
        ],
    );
    grant(m, "after-set", &[]);
    ok(m, &["DEL", &k("a3")]);
    grant(m, "a3", &[]);
    grant(m, "contended", &[]);
    let waiter = spawn_wait(server, &k("contended"), "owner-2", TTL, 0);
    wait_blocked(m, 1);
    release(m, &k("contended"), "owner-1");
    assert!(int(&waiter.join().unwrap().unwrap()) > 0, "handed over");
    grant(m, "after-handoff", &[]);
    keys.extend(["shared", "generated", "restored", "{s}1", "{s}2"].map(k));
    keys
}

/// Three fresh grants that nothing touches afterwards.
fn untouched_grants(m: &mut Connection, round: &str) -> Vec<String> {
    let keys: Vec<String> = (1..=3).map(|i| format!("{round}:untouched-{i}")).collect();
    for key in &keys {
        acquire(m, key, "owner-1", TTL).unwrap();
    }
    keys
}

/// Each name's holders (owner, token), and the dataset's digest.
type Picture = (Vec<Vec<(String, i64)>>, redis::Value);

fn picture(con: &mut Connection, keys: &[String]) -> Picture {
    let holds = keys.iter().map(|key| holder_tokens(con, key)).collect();
    (holds, ok(con, &["DEBUG", "DIGEST"]))
}

#[test]
fn replicas_and_the_aof_replay_fresh_grants_to_the_masters_tokens() {
    let aof = ["--appendonly", "yes", "--appendfsync", "always"];
    let mut master = Server::builder().args(&aof).start();
    let mut replica = Server::builder().replica_of(&master).args(&aof).start();
    let mut m = master.con();
    wait_persistence_idle(&mut replica.con()); // its AOF rewrite after the full sync
    let mut keys = history(&master, &mut m, "one");
    keys.extend(untouched_grants(&mut m, "one"));
    wait_replica_acked(&mut m);
    let on_master = picture(&mut m, &keys);
    let held = on_master.0.iter().filter(|h| !h.is_empty()).count();
    assert_eq!(
        held,
        keys.len() - 1,
        "all but the released name: {on_master:?}"
    );
    let mut r = replica.con();
    let replayed = info_field(&mut r, "commandstats", "cmdstat_lock.acquire");
    assert!(
        replayed.starts_with("calls=") && !replayed.starts_with("calls=0,"),
        "grants reached the replica as LOCK.ACQUIRE: {replayed}"
    );
    assert_eq!(picture(&mut r, &keys), on_master, "the replica");

    replica.restart_with(&["--appendonly", "yes"]); // standalone, from its own AOF
    assert_eq!(
        picture(&mut replica.con(), &keys),
        on_master,
        "the replica's AOF"
    );
    master.restart_with(&aof);
    assert_eq!(
        picture(&mut master.con(), &keys),
        on_master,
        "the master's AOF"
    );
}

#[test]
fn without_an_rdb_preamble_the_aof_replays_the_same_tokens() {
    let aof = [
        "--appendonly",
        "yes",
        "--appendfsync",
        "always",
        "--aof-use-rdb-preamble",
        "no",
    ];
    let mut master = Server::builder().args(&aof).start();
    let mut m = master.con();
    let mut keys = history(&master, &mut m, "before");
    // The last token leaves with its lock: the rewritten base (the live locks, no auxiliary
    // data) does not hold it.
    acquire(&mut m, "gone", "owner-1", TTL).unwrap();
    release(&mut m, "gone", "owner-1");
    ok(&mut m, &["BGREWRITEAOF"]);
    wait_persistence_idle(&mut m);
    // Grants right after it, left as they are (later writes carry tokens and would hide a
    // replay that started from the wrong one).
    keys.extend(untouched_grants(&mut m, "after"));
    keys.extend(history(&master, &mut m, "after"));
    let before = picture(&mut m, &keys);
    master.restart_with(&aof);
    let mut m = master.con();
    assert_eq!(
        picture(&mut m, &keys),
        before,
        "grants after a base without the last token"
    );

    // With the preamble from now on: grants after the first may go as commands again, into
    // the AOF that still follows the base without one.
    ok(&mut m, &["CONFIG", "SET", "aof-use-rdb-preamble", "yes"]);
    keys.extend(untouched_grants(&mut m, "with"));
    keys.extend(history(&master, &mut m, "with"));
    let before = picture(&mut m, &keys);
    master.restart_with(&aof);
    assert_eq!(
        picture(&mut master.con(), &keys),
        before,
        "after the setting changed"
    );

    // Started with it, then off at run time: the next rewrite's base lacks the last token.
    master.restart_with(&aof[..4]);
    let mut m = master.con();
    keys.extend(untouched_grants(&mut m, "on"));
    ok(&mut m, &["CONFIG", "SET", "aof-use-rdb-preamble", "no"]);
    acquire(&mut m, "gone", "owner-1", TTL).unwrap();
    release(&mut m, "gone", "owner-1");
    ok(&mut m, &["BGREWRITEAOF"]);
    wait_persistence_idle(&mut m);
    keys.extend(untouched_grants(&mut m, "off"));
    let before = picture(&mut m, &keys);
    master.restart_with(&aof);
    assert_eq!(
        picture(&mut master.con(), &keys),
        before,
        "after it was turned off"
    );
}

/// A replica whose own last token is far above its master's (it issued and restored tokens as
/// a master of its own) counts the grants it replays from the master's, which the full sync
/// gave it.
#[test]
fn a_replica_ahead_of_its_master_counts_from_the_masters_last_token() {
    let master = Server::start();
    let replica = Server::start(); // standalone first: it starts an epoch of its own
    let mut r = replica.con();
    acquire(&mut r, "own", "owner-1", TTL).unwrap();
    restore_lock_with_token(&mut r, "ahead", future_token());
    ok(&mut r, &["DEL", "own", "ahead"]);
    ok(
        &mut r,
        &["REPLICAOF", "127.0.0.1", &master.port.to_string()],
    );
    wait_link_up(&mut r);
    let mut m = master.con();
    let mut keys = untouched_grants(&mut m, "after-sync");
    keys.extend(history(&master, &mut m, "after-sync"));
    wait_replica_acked(&mut m);
    assert_eq!(picture(&mut r, &keys), picture(&mut m, &keys));
}

/// `DEBUG LOADAOF` replays the AOF from the data it loads, not from the tokens issued before.
#[test]
fn debug_loadaof_replays_the_same_tokens() {
    let aof = ["--appendonly", "yes", "--appendfsync", "always"];
    let master = Server::builder().args(&aof).start();
    let mut m = master.con();
    wait_persistence_idle(&mut m);
    let mut keys = untouched_grants(&mut m, "before");
    keys.extend(history(&master, &mut m, "before"));
    let before = picture(&mut m, &keys);
    ok(&mut m, &["DEBUG", "LOADAOF"]);
    assert_eq!(picture(&mut m, &keys), before, "reloaded");
    // And its next grants reach a new replica with the same tokens.
    let replica = Server::builder().replica_of(&master).start();
    let mut r = replica.con();
    wait_link_up(&mut r);
    keys.extend(untouched_grants(&mut m, "after"));
    wait_replica_acked(&mut m);
    assert_eq!(
        picture(&mut r, &keys),
        picture(&mut m, &keys),
        "the replica"
    );
}

/// A replica whose AOF rewrites have no RDB preamble logs the grants it replays with their
/// tokens (its base would not hold the last one); restarted from that AOF, it has the master's.
#[test]
fn a_replica_without_an_rdb_preamble_logs_grants_with_their_tokens() {
    let master = Server::start();
    let aof = [
        "--appendonly",
        "yes",
        "--appendfsync",
        "always",
        "--aof-use-rdb-preamble",
        "no",
    ];
    let mut replica = Server::builder().replica_of(&master).args(&aof).start();
    let mut m = master.con();
    wait_persistence_idle(&mut replica.con());
    acquire(&mut m, "gone", "owner-1", TTL).unwrap();
    release(&mut m, "gone", "owner-1");
    wait_replica_acked(&mut m);
    ok(&mut replica.con(), &["BGREWRITEAOF"]);
    wait_persistence_idle(&mut replica.con());
    let keys = untouched_grants(&mut m, "after");
    wait_replica_acked(&mut m);
    let on_master = picture(&mut m, &keys);
    replica.restart_with(&aof[..4]); // standalone, from its own AOF
    assert_eq!(picture(&mut replica.con(), &keys).0, on_master.0);
}

/// A server that starts as a master and becomes a replica at run time replays its new master's
/// fresh grants with the master's tokens (the module learns its role from the role-change
/// event, not from each command), and grants again, above them, once promoted.
#[test]
fn a_master_made_a_replica_at_run_time_replays_its_new_masters_grants() {
    let master = Server::start();
    let follower = Server::start();
    let mut f = follower.con();
    acquire(&mut f, "own:before", "owner-9", TTL).unwrap(); // a grant of its own, as a master
    let port = master.port.to_string();
    ok(&mut f, &["REPLICAOF", "127.0.0.1", &port]);
    wait_link_up(&mut f);
    let mut m = master.con();
    wait_streaming(&mut m);
    let mut keys = history(&master, &mut m, "two");
    keys.extend(untouched_grants(&mut m, "two"));
    wait_replica_acked(&mut m);
    let on_master = picture(&mut m, &keys);
    assert_eq!(picture(&mut f, &keys), on_master, "the demoted master");
    ok(&mut f, &["REPLICAOF", "NO", "ONE"]);
    let last = on_master.0.iter().flatten().map(|(_, t)| *t).max().unwrap();
    let next = acquire(&mut f, "own:after", "owner-9", TTL).unwrap();
    assert!(
        next > last,
        "promoted, it grants above its master: {next} > {last}"
    );
}
