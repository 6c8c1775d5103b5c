//! Nothing lost: RDB (SAVE, BGSAVE, restart, DEBUG RELOAD), AOF (appendfsync always + kill -9,
//! rewrite with and without the RDB preamble), DUMP/RESTORE, and corrupt or newer payloads.

use redis_lock_harness::*;

fn pttl(c: &mut Connection, key: &str) -> i64 {
    lease_left(c, key).unwrap_or(-2)
}

#[test]
fn rdb_restart_keeps_owner_token_and_deadline() {
    let mut s = Server::start();
    let mut c = s.con();
    let t = acquire(&mut c, "order:7", "alice", 60_000).unwrap();
    let bin = run(&mut c, &[b"LOCK.ACQUIRE", b"bin", b"\x00\xff", b"60000"]).unwrap();
    ok(&mut c, &["SAVE"]);
    s.restart();
    let mut c = s.con();
    assert_eq!(fence(&mut c, "order:7"), Some(t));
    let left = pttl(&mut c, "order:7");
    assert!(
        left > 50_000 && left <= 60_000,
        "absolute deadline kept: {left}"
    );
    assert_eq!(release(&mut c, "order:7", "bob"), 0);
    assert_eq!(release(&mut c, "order:7", "alice"), 1, "owner kept");
    assert_eq!(
        run(&mut c, &[b"LOCK.ACQUIRE", b"bin", b"\x00\xff", b"60000"]),
        Ok(bin)
    );
    assert!(acquire(&mut c, "order:7", "carol", 1_000).unwrap() > t);
}

#[test]
fn bgsave_and_debug_reload_keep_locks() {
    let mut s = Server::start();
    let mut c = s.con();
    let t = acquire(&mut c, "k", "a", 60_000).unwrap();
    ok(&mut c, &["DEBUG", "RELOAD"]);
    assert_eq!(fence(&mut c, "k"), Some(t));
    ok(&mut c, &["BGSAVE"]);
    wait_persistence_idle(&mut c);
    assert_eq!(
        info_field(&mut c, "persistence", "rdb_last_bgsave_status"),
        "ok"
    );
    s.restart();
    let mut c = s.con();
    assert_eq!(fence(&mut c, "k"), Some(t));
}

/// The last token is auxiliary RDB data: even with no lock left in the keyspace and a token
/// far ahead of the clock, the next token after a restart or DEBUG RELOAD is larger.
#[test]
fn tokens_keep_increasing_across_rdb_restart_and_reload_without_any_key() {
    let mut s = Server::start();
    let mut c = s.con();
    let future = future_token();
    restore_lock_with_token(&mut c, "forged", future);
    let next = acquire(&mut c, "k", "a", 60_000).unwrap();
    assert!(next > future, "loading a lock raises the token floor");
    ok(&mut c, &["FLUSHALL"]);
    ok(&mut c, &["DEBUG", "RELOAD"]);
    let after_reload = acquire(&mut c, "k", "a", 60_000).unwrap();
    assert!(after_reload > next, "{after_reload} > {next}");
    ok(&mut c, &["FLUSHALL"]);
    ok(&mut c, &["SAVE"]);
    s.restart();
    let mut c = s.con();
    assert_eq!(int(&ok(&mut c, &["DBSIZE"])), 0);
    let after_restart = acquire(&mut c, "k", "a", 60_000).unwrap();
    assert!(
        after_restart > after_reload,
        "{after_restart} > {after_reload}"
    );
}

#[test]
fn aof_always_survives_kill9_with_every_grant_release_and_handoff() {
    let mut s = Server::builder()
        .args(&["--appendonly", "yes", "--appendfsync", "always"])
        .start();
    let mut c = s.con();
    let future = future_token();
    restore_lock_with_token(&mut c, "forged", future);
    ok(&mut c, &["DEL", "forged"]);
    // Tokens issued now come from the counter (ahead of the clock): only the AOF's explicit
    // tokens can restore it.
    let t1 = acquire(&mut c, "a", "alice", 60_000).unwrap();
    assert!(t1 > future);
    let w = spawn_wait(&s, "a", "bob", 60_000, 0);
    wait_blocked(&mut c, 1);
    assert_eq!(release(&mut c, "a", "alice"), 1);
    let t2 = int(&w.join().unwrap().unwrap());
    let t3 = acquire(&mut c, "b", "carol", 60_000).unwrap();
    assert_eq!(
        int(&ok(&mut c, &["LOCK.EXTEND", "b", "carol", "120000"])),
        1
    );
    let t4 = acquire(&mut c, "c", "dave", 60_000).unwrap();
    assert_eq!(release(&mut c, "c", "dave"), 1);
    s.signal(libc::SIGKILL);
    s.restart();
    let mut c = s.con();
    assert_eq!(fence(&mut c, "a"), Some(t2), "handoff survived");
    assert_eq!(release(&mut c, "a", "alice"), 0);
    assert_eq!(fence(&mut c, "b"), Some(t3));
    assert!(pttl(&mut c, "b") > 100_000, "extend survived");
    assert_eq!(fence(&mut c, "c"), None, "release survived");
    let next = acquire(&mut c, "d", "erin", 1_000).unwrap();
    assert!(
        next > t4,
        "{next} > {t4}: the AOF's explicit tokens restore the counter"
    );
}

/// A release that frees an exclusive lock goes to the AOF as the command itself and replays as
/// the key's deletion, even when the lease it released has long run out by replay time (an
/// expiry, not a release, would count in `expired_keys`). Other releases keep their holds.
#[test]
fn a_release_in_the_aof_replays_as_the_deletion_whatever_the_clock() {
    let mut s = Server::builder()
        .args(&["--appendonly", "yes", "--appendfsync", "always"])
        .start();
    let mut c = s.con();
    let t = acquire(&mut c, "short", "alice", 300).unwrap();
    assert_eq!(
        int(&ok(
            &mut c,
            &["LOCK.RELEASE", "short", "alice", "TOKEN", &t.to_string()]
        )),
        1
    );
    acquire(&mut c, "plain", "bob", 300).unwrap();
    assert_eq!(release(&mut c, "plain", "bob"), 1);
    ok(&mut c, &["LOCK.ACQUIRE", "rw", "r1", "60000", "SHARED"]);
    ok(&mut c, &["LOCK.ACQUIRE", "rw", "r2", "60000", "SHARED"]);
    assert_eq!(release(&mut c, "rw", "r1"), 1);
    let aof = std::fs::read_dir(s.dir.join("appendonlydir"))
        .expect("the AOF directory")
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().contains(".incr."))
        .map(|e| std::fs::read(e.path()).expect("the AOF"))
        .next()
        .expect("an incremental AOF file");
    let aof = String::from_utf8_lossy(&aof);
    assert_eq!(aof.matches("LOCK.RELEASE").count(), 2, "{aof}");
    assert!(!aof.contains("\r\nDEL\r\n"), "{aof}");
    std::thread::sleep(std::time::Duration::from_millis(400)); // both leases are over by the replay
    s.signal(libc::SIGKILL);
    s.restart();
    let mut c = s.con();
    assert_eq!(int(&ok(&mut c, &["EXISTS", "short", "plain"])), 0);
    assert_eq!(info_field(&mut c, "stats", "expired_keys"), "0");
    let holders = ok(&mut c, &["LOCK.INFO", "rw"]);
    assert!(format!("{holders:?}").contains("r2"), "{holders:?}");
    assert!(!format!("{holders:?}").contains("r1"), "{holders:?}");
}

fn aof_rewrite_round_trip(preamble: &str) {
    let mut s = Server::builder()
        .args(&["--appendonly", "yes", "--aof-use-rdb-preamble", preamble])
        .start();
    let mut c = s.con();
    let t = acquire(&mut c, "k", "alice", 60_000).unwrap();
    let bin = run(&mut c, &[b"LOCK.ACQUIRE", b"bin", b"a\x00b", b"60000"]).unwrap();
    acquire(&mut c, "gone", "x", 60_000).unwrap();
    release(&mut c, "gone", "x");
    ok(&mut c, &["BGREWRITEAOF"]);
    wait_persistence_idle(&mut c);
    let base: Vec<u8> = std::fs::read_dir(s.dir.join("appendonlydir"))
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().contains(".base."))
        .flat_map(|e| std::fs::read(e.path()).unwrap())
        .collect();
    if preamble == "no" {
        let text = String::from_utf8_lossy(&base);
        assert!(
            text.contains("LOCK.APPLY"),
            "the rewrite emits LOCK.APPLY: {text}"
        );
    }
    s.signal(libc::SIGKILL);
    s.restart();
    let mut c = s.con();
    assert_eq!(fence(&mut c, "k"), Some(t));
    assert_eq!(
        run(&mut c, &[b"LOCK.ACQUIRE", b"bin", b"a\x00b", b"60000"]),
        Ok(bin)
    );
    assert_eq!(fence(&mut c, "gone"), None);
    let left = pttl(&mut c, "k");
    assert!(left > 50_000 && left <= 60_000, "deadline kept: {left}");
}

#[test]
fn aof_rewrite_without_rdb_preamble_emits_apply_commands() {
    aof_rewrite_round_trip("no");
}

#[test]
fn aof_rewrite_with_rdb_preamble_keeps_locks() {
    aof_rewrite_round_trip("yes");
}

#[test]
fn dump_restore_keeps_owner_token_deadline() {
    let s = Server::start();
    let mut c = s.con();
    let t = acquire(&mut c, "k", "alice", 60_000).unwrap();
    let payload = dump(&mut c, "k");
    assert_eq!(
        run(&mut c, &[b"RESTORE", b"copy", b"0", &payload]),
        Ok(Value::Okay)
    );
    assert_eq!(fence(&mut c, "copy"), Some(t));
    assert_eq!(release(&mut c, "copy", "alice"), 1);
    let other = Server::start();
    let mut o = other.con();
    assert_eq!(
        run(&mut o, &[b"RESTORE", b"k", b"60000", &payload]),
        Ok(Value::Okay)
    );
    assert_eq!(fence(&mut o, "k"), Some(t));
    assert!(
        acquire(&mut o, "fresh", "x", 100).unwrap() > t,
        "restoring raised the token floor"
    );
}

#[test]
fn truncated_or_newer_payloads_are_refused_cleanly() {
    let s = Server::start();
    let mut c = s.con();
    acquire(&mut c, "k", "alice", 60_000).unwrap();
    let payload = dump(&mut c, "k");
    // [type 7][0x81 + module id][0x02 kind][0x02 limit][0x02 count][0x05 owner][0x02 token]
    // [0x02 deadline][0x02 granted][0x02 permits][EOF] | rdb version | crc

    // Encoding version 5 in the module id (its low 10 bits): a future redis-lock.
    let mut newer = payload.clone();
    let id_at = 2; // type byte, then 0x81 + 8-byte big-endian module id
    assert_eq!(newer[1], 0x81, "64-bit module id encoding");
    let mut id = u64::from_be_bytes(newer[id_at..id_at + 8].try_into().unwrap());
    assert_eq!(id & 0x3ff, 4, "this build writes encoding version 4");
    id = (id & !0x3ff) | 5;
    newer[id_at..id_at + 8].copy_from_slice(&id.to_be_bytes());
    let newer = reseal(newer);

    // A value cut short: the owner claims 63 bytes, more than the payload holds.
    let mut truncated = payload.clone();
    assert_eq!(
        truncated[10..18],
        [0x02, 0x00, 0x02, 0x00, 0x02, 0x01, 0x05, 0x05],
        "kind 0 (exclusive), limit 0, one hold, then the owner's string opcode and length"
    );
    truncated[17] = 0x3f;
    let truncated = reseal(truncated);

    for bad in [newer, truncated] {
        let err = run(&mut c, &[b"RESTORE", b"bad", b"0", &bad]).unwrap_err();
        assert!(err.contains("Bad data format"), "{err}");
        assert_eq!(ok(&mut c, &["PING"]), Value::SimpleString("PONG".into()));
        assert_eq!(int(&ok(&mut c, &["EXISTS", "bad"])), 0);
    }
    // A corrupted checksum never reaches the module.
    let mut broken = payload.clone();
    broken[5] ^= 0xff;
    assert!(run(&mut c, &[b"RESTORE", b"bad", b"0", &broken]).is_err());
}

#[test]
fn expired_locks_do_not_come_back_after_restart() {
    let mut s = Server::builder()
        .args(&["--appendonly", "yes", "--appendfsync", "always"])
        .start();
    let mut c = s.con();
    acquire(&mut c, "short", "a", 200).unwrap();
    let long = acquire(&mut c, "long", "a", 60_000).unwrap();
    ok(&mut c, &["SAVE"]);
    // The module deleted it (logged with appendfsync always) before the crash.
    assert!(eventually(std::time::Duration::from_secs(5), || int(&ok(
        &mut c,
        &["EXISTS", "short"]
    )) == 0));
    s.signal(libc::SIGKILL);
    s.restart();
    let mut c = s.con();
    assert_eq!(fence(&mut c, "short"), None);
    assert_eq!(int(&ok(&mut c, &["EXISTS", "short"])), 0);
    assert_eq!(fence(&mut c, "long"), Some(long));
}

/// What an older encoding wrote for alice's exclusive hold with token `t`, a minute left: unix
/// times; version 1 without the grant time, version 3 with kind, limit, count and permits.
fn older_payload(template: &[u8], version: u64, t: i64) -> Vec<u8> {
    use RdbField::{Str, Uint};
    let unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let (owner, token, deadline, granted) = (
        Str(b"alice"),
        Uint(t as u64),
        Uint(unix + 60_000),
        Uint(unix - 1_000),
    );
    match version {
        1 => lock_payload(template, 1, &[owner, token, deadline]),
        2 => lock_payload(template, 2, &[owner, token, deadline, granted]),
        _ => lock_payload(
            template,
            3,
            &[
                Uint(0),
                Uint(0),
                Uint(1),
                owner,
                token,
                deadline,
                granted,
                Uint(1),
            ],
        ),
    }
}

/// Values written by encoding versions 1 (no grant time), 2 (one exclusive hold) and 3 (unix
/// times) still load, their unix deadlines read against this server's wall clock.
#[test]
fn older_payloads_still_load() {
    let s = Server::start();
    let mut c = s.con();
    let t = acquire(&mut c, "k", "alice", 60_000).unwrap();
    let payload = dump(&mut c, "k");
    for version in [3, 2] {
        let old = older_payload(&payload, version, t);
        assert_eq!(
            run(&mut c, &[b"RESTORE", b"old", b"0", &old]),
            Ok(Value::Okay),
            "version {version}"
        );
        assert_eq!(fence(&mut c, "old"), Some(t));
        let left = lease_left(&mut c, "old").unwrap();
        assert!(
            (55_000..=60_000).contains(&left),
            "version {version}: the unix deadline read as a minute from now: {left}"
        );
        let held = int(&map_field(&ok(&mut c, &["LOCK.INFO", "old"]), "held").unwrap());
        assert!(
            (1_000..5_000).contains(&held),
            "version {version}: held {held}"
        );
        assert_eq!(release(&mut c, "old", "alice"), 1);
    }
    let v1 = older_payload(&payload, 1, t);
    assert_eq!(
        run(&mut c, &[b"RESTORE", b"old", b"0", &v1]),
        Ok(Value::Okay)
    );
    assert_eq!(fence(&mut c, "old"), Some(t));
    let info = ok(&mut c, &["LOCK.INFO", "old"]);
    assert!(
        int(&map_field(&info, "held").unwrap()) < 1_000,
        "held counts from the load"
    );
    assert_eq!(release(&mut c, "old", "alice"), 1);
}
