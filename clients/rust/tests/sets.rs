//! Lock sets (rule 23 of docs/clients.md): `Locker::lock_set` and `SetGuard`, against real
//! servers the harness starts.

mod common;

use std::time::Duration;

use common::{calls, locker};
use redis_lock_client::{redis, Error, Locker, SetGuard};
use redis_lock_harness::*;

async fn take(l: &redis_lock_client::Locker, keys: &[&str], ttl: Duration) -> SetGuard {
    l.lock_set(keys.iter().copied())
        .ttl(ttl)
        .acquire()
        .await
        .unwrap()
        .expect("granted")
}

fn exists(s: &Server, key: &str) -> bool {
    int(&ok(&mut s.con(), &["EXISTS", key])) == 1
}

fn waiters(s: &Server, key: &str) -> i64 {
    let info = ok(&mut s.con(), &["LOCK.INFO", key]);
    map_field(&info, "waiters").map_or(0, |v| int(&v))
}

/// Rule 23: a token per key (in order and by key, `LOCK.FENCE`'s); release frees every key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_has_a_token_per_key_and_release_frees_every_key() {
    let s = Server::start();
    let l = locker(&s);
    let keys = ["acct:2", "acct:1", "acct:3"];
    let set = take(&l, &keys, Duration::from_secs(5)).await;
    assert_eq!(set.tokens().len(), 3);
    for (i, key) in keys.iter().enumerate() {
        let token = set.tokens()[i];
        assert_eq!(fence(&mut s.con(), key), Some(token as i64), "{key}");
        assert_eq!(set.token(key), Some(token));
    }
    assert_eq!(set.token("acct:9"), None);
    assert_eq!(set.keys(), keys);
    assert!(!set.is_lost());
    assert!(set.release().await.unwrap());
    for key in keys {
        assert!(!exists(&s, key), "{key} left after release");
    }
}

/// Rule 23: trying once while one key is busy answers `None` and takes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trying_once_with_a_busy_key_takes_nothing() {
    let s = Server::start();
    let l = locker(&s);
    let other = l.lock("b").acquire().await.unwrap().unwrap();
    let set = l.lock_set(["a", "b", "c"]).wait(Duration::ZERO);
    assert!(set.acquire().await.unwrap().is_none());
    assert!(!exists(&s, "a") && !exists(&s, "c"), "a free key was taken");
    assert!(other.release().await.unwrap());
}

/// Rule 23: two sets of the same keys named in opposite orders, both waiting, are granted in
/// turn (no deadlock).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sets_in_opposite_orders_are_granted_in_turn() {
    let s = Server::start();
    let l = locker(&s);
    let first = l.lock("x").acquire().await.unwrap().unwrap();
    let wait = Duration::from_secs(10);
    let a = tokio::spawn(l.lock_set(["x", "y"]).wait(wait).acquire());
    assert!(eventually(Duration::from_secs(5), || waiters(&s, "x") == 1));
    let b = tokio::spawn(l.lock_set(["y", "x"]).wait(wait).acquire());
    assert!(eventually(Duration::from_secs(5), || waiters(&s, "x") == 2));
    assert!(!exists(&s, "y"), "a waiting set took its free key");
    assert!(first.release().await.unwrap());
    let a = tokio::time::timeout(wait, a).await.unwrap().unwrap();
    let a = a.unwrap().expect("the first set granted");
    assert!(a.release().await.unwrap());
    let b = tokio::time::timeout(wait, b).await.unwrap().unwrap();
    let b = b.unwrap().expect("the second set granted");
    assert_eq!(fence(&mut s.con(), "y"), b.token("y").map(|t| t as i64));
    assert!(b.release().await.unwrap());
}

/// Rules 6 and 23: the locker's loop renews every member past several ttls.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watchdog_keeps_a_set_past_its_ttl() {
    let s = Server::start();
    let l = locker(&s);
    let keys = ["w:1", "w:2", "w:3"];
    let set = take(&l, &keys, Duration::from_millis(300)).await;
    tokio::time::sleep(Duration::from_millis(1200)).await; // four ttls: only renewals keep it
    for key in keys {
        assert_eq!(fence(&mut s.con(), key), set.token(key).map(|t| t as i64));
    }
    assert!(!set.is_lost(), "{:?}", set.lost_reason());
    assert!(set.release().await.unwrap());
}

/// Rules 8, 16 and 23: a member force-released loses the set once, naming the key; the other
/// members are released; then release, extend and run answer without the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_lost_loses_the_set_once_and_releases_the_others() {
    let s = Server::start();
    let l = locker(&s);
    let set = take(&l, &["m:1", "m:2", "m:3"], Duration::from_millis(600)).await;
    ok(&mut s.con(), &["LOCK.FORCERELEASE", "m:2"]);
    let reason = tokio::time::timeout(Duration::from_secs(3), set.lost())
        .await
        .expect("lost");
    assert_eq!(reason, "m:2: the lease ran out before it was renewed");
    assert!(eventually(Duration::from_secs(3), || {
        !exists(&s, "m:1") && !exists(&s, "m:3")
    }));
    assert_eq!(set.lost_reason().as_deref(), Some(reason.as_str()));
    // (LOCK.EXTEND is not counted: a renewal written just before the loss may land late;
    // extend_renews_every_member_and_a_fixed_lease_ends counts it, without a watchdog.)
    let sent = calls(&s, "lock.mrelease") + calls(&s, "lock.guard");
    let write = redis::cmd("SET").arg("x").arg(1).clone();
    assert!(matches!(
        set.run::<()>("m:1", &write).await,
        Err(Error::Stale(_))
    ));
    assert!(!set.extend(Duration::from_secs(1)).await.unwrap());
    assert!(!set.release().await.unwrap());
    let now = calls(&s, "lock.mrelease") + calls(&s, "lock.guard");
    assert_eq!(now, sent, "commands sent for a set known lost");
}

/// Rules 16 and 23: a release that finds a member gone answers false and marks the set lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_finding_a_member_gone_is_false_and_lost() {
    let s = Server::start();
    let l = locker(&s);
    let set = take(&l, &["g:1", "g:2"], Duration::from_secs(30)).await;
    let lost = set.lost();
    ok(&mut s.con(), &["LOCK.FORCERELEASE", "g:1"]);
    assert!(!set.release().await.unwrap());
    let reason = tokio::time::timeout(Duration::from_secs(1), lost)
        .await
        .unwrap();
    assert!(reason.ends_with("the hold was gone when released (its lease ran out)"));
    assert!(!exists(&s, "g:2"), "the live member was not released");
}

/// Rules 17 and 23: no keys, a key twice, more than 64 keys, a ttl under 1 ms: refused before
/// anything is sent; run on a key not in the set too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn arguments_are_refused_before_anything_is_sent() {
    let s = Server::start();
    let l = locker(&s);
    let many: Vec<String> = (0..65).map(|i| format!("k{i}")).collect();
    let refused = [
        l.lock_set(Vec::<String>::new()),
        l.lock_set(["a", "b", "a"]),
        l.lock_set(many),
        l.lock_set(["a"]).ttl(Duration::ZERO),
    ];
    for builder in refused {
        let got = builder.acquire().await;
        assert!(matches!(got, Err(Error::InvalidArgument(_))), "{got:?}");
    }
    assert_eq!(calls(&s, "lock.macquire"), 0);
    let set = take(&l, &["a", "b"], Duration::from_secs(5)).await;
    let write = redis::cmd("SET").arg("c").arg(1).clone();
    let got = set.run::<()>("c", &write).await;
    assert!(matches!(got, Err(Error::InvalidArgument(_))), "{got:?}");
    let got = set.extend(Duration::ZERO).await;
    assert!(matches!(got, Err(Error::InvalidArgument(_))), "{got:?}");
    assert_eq!(calls(&s, "lock.guard") + calls(&s, "lock.extend"), 0);
    assert!(set.release().await.unwrap());
}

/// Rules 5 and 23: a guarded write names its key and goes with that key's token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guarded_write_sends_its_keys_token() {
    let s = Server::start();
    let l = locker(&s);
    let set = take(&l, &["{o}:lock:1", "{o}:lock:2"], Duration::from_secs(30)).await;
    let one = redis::cmd("SET").arg("{o}:data:1").arg("a").clone();
    let two = redis::cmd("SET").arg("{o}:data:2").arg("b").clone();
    set.run::<()>("{o}:lock:1", &one).await.unwrap();
    set.run::<()>("{o}:lock:2", &two).await.unwrap();
    let mut c = s.con();
    assert_eq!(text(&ok(&mut c, &["GET", "{o}:data:1"])), "a");
    assert_eq!(text(&ok(&mut c, &["GET", "{o}:data:2"])), "b");
    // A newer holder of key 2: the set's token there is stale.
    ok(&mut c, &["LOCK.FORCERELEASE", "{o}:lock:2"]);
    ok(&mut c, &["LOCK.ACQUIRE", "{o}:lock:2", "someone", "30000"]);
    let late = redis::cmd("SET").arg("{o}:data:2").arg("c").clone();
    let got = set.run::<()>("{o}:lock:2", &late).await;
    assert!(matches!(got, Err(Error::Stale(_))), "{got:?}");
    assert_eq!(text(&ok(&mut c, &["GET", "{o}:data:2"])), "b");
    drop(set);
}

/// Rules 20 and 23: extend renews every member; a fixed-lease set is lost at its end, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extend_renews_every_member_and_a_fixed_lease_ends() {
    let s = Server::start();
    let l = locker(&s);
    let set = l.lock_set(["e:1", "e:2"]).ttl(Duration::from_millis(300));
    let set = set.watchdog(false).acquire().await.unwrap().unwrap();
    assert!(set.extend(Duration::from_secs(10)).await.unwrap());
    for key in ["e:1", "e:2"] {
        assert!(lease_left(&mut s.con(), key).unwrap() > 5000, "{key}");
    }
    assert!(set.extend(Duration::from_millis(200)).await.unwrap());
    let reason = tokio::time::timeout(Duration::from_secs(3), set.lost())
        .await
        .expect("the fixed lease ended");
    assert!(
        reason.ends_with(": the lease ended (a fixed lease, not extended in time)"),
        "{reason}"
    );
    let sent = calls(&s, "lock.extend") + calls(&s, "lock.mrelease");
    assert!(!set.extend(Duration::from_secs(1)).await.unwrap());
    assert!(!set.release().await.unwrap());
    let now = calls(&s, "lock.extend") + calls(&s, "lock.mrelease");
    assert_eq!(now, sent, "commands sent for a set known lost");
}

/// Rule 23: shared sets side by side; an owner holding some keys while others are busy gets
/// `Error::Deadlock` when it would wait; a session set ends with its connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_sets_deadlock_and_session_sets() {
    let s = Server::start();
    let l = locker(&s);
    let one = l.lock_set(["s:1", "s:2"]).shared().acquire().await;
    let two = l.lock_set(["s:2", "s:1"]).shared().wait(Duration::ZERO);
    let two = two.acquire().await.unwrap().expect("readers share");
    assert!(one.unwrap().unwrap().release().await.unwrap());
    assert!(two.release().await.unwrap());

    let mine = l.lock("d:1").owner("me").acquire().await.unwrap().unwrap();
    let theirs = l.lock("d:2").acquire().await.unwrap().unwrap();
    let got = l
        .lock_set(["d:1", "d:2"])
        .owner("me")
        .wait(Duration::from_secs(1))
        .acquire()
        .await;
    assert!(matches!(got, Err(Error::Deadlock(_))), "{got:?}");
    assert!(mine.release().await.unwrap());
    assert!(theirs.release().await.unwrap());

    let session = l
        .lock_set(["q:1", "q:2"])
        .session()
        .ttl(Duration::from_secs(30));
    let session = session.acquire().await.unwrap().unwrap();
    let holders = holders(&mut s.con(), "q:1");
    assert!(map_field(&holders[0], "session").is_some_and(|v| int(&v) > 0));
    drop(session); // released, and its connection closed
    assert!(eventually(Duration::from_secs(3), || {
        !exists(&s, "q:1") && !exists(&s, "q:2")
    }));
}

// README lock set example: begin
/// Move `amount` between two accounts under both their locks, taken in one step.
async fn transfer(locker: &Locker, from: &str, to: &str, amount: i64) -> Result<bool, Error> {
    // One hash tag ({bank}): one slot in a cluster. Any order: sets never deadlock.
    let keys = [
        format!("{{bank}}:lock:{from}"),
        format!("{{bank}}:lock:{to}"),
    ];
    let set = locker
        .lock_set(&keys)
        .ttl(Duration::from_secs(30))
        .wait(Duration::from_secs(5)) // in every key's queue at once
        .acquire()
        .await?
        .expect("granted within 5 s");
    let mut debit = redis::cmd("DECRBY");
    debit.arg(format!("{{bank}}:acct:{from}")).arg(amount);
    let mut credit = redis::cmd("INCRBY");
    credit.arg(format!("{{bank}}:acct:{to}")).arg(amount);
    // Each guarded write names its key and goes with that key's token.
    let _: i64 = set.run(&keys[0], &debit).await?;
    let _: i64 = set.run(&keys[1], &credit).await?;
    set.release().await // true only if every member was still held
}
// README lock set example: end

/// The README's lock set example, run: two transfers in opposite directions at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_lock_set_example_runs() {
    let s = Server::start();
    let l = locker(&s);
    ok(&mut s.con(), &["SET", "{bank}:acct:1", "100"]);
    let (a, b) = tokio::join!(transfer(&l, "1", "2", 10), transfer(&l, "2", "1", 3));
    assert!(a.unwrap() && b.unwrap());
    let mut c = s.con();
    assert_eq!(text(&ok(&mut c, &["GET", "{bank}:acct:1"])), "93");
    assert_eq!(text(&ok(&mut c, &["GET", "{bank}:acct:2"])), "7");
}

/// The README shows the example this file runs, word for word.
#[test]
fn the_readme_shows_the_lock_set_example_that_runs() {
    let this = include_str!("sets.rs");
    let begin = "// README lock set example: begin\n";
    let end = "// README lock set example: end\n";
    let from = this.find(begin).unwrap() + begin.len();
    let tested = &this[from..this.find(end).unwrap()];
    let readme = include_str!("../README.md");
    let shown = readme
        .split("```rust")
        .filter_map(|block| block.split_once("\n")?.1.split_once("```").map(|b| b.0))
        .find(|block| block.contains("async fn transfer"))
        .expect("the README's Lock sets example");
    let shown = shown
        .lines()
        .filter(|l| !l.starts_with("use redis_lock_client::{") && !l.starts_with("use std::"))
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        shown.contains(tested.trim_end()),
        "README:\n{shown}\ntested:\n{tested}"
    );
}
