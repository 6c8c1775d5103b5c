//! Rules 21 and 22 of docs/clients.md, and the election rows of "Same case, same answer":
//! candidates and observers in processes of their own (this test binary run again with
//! `ELECTION_CHILD` set: `election_child`), a leader killed with `kill -9`, stopped past its
//! lease (SIGSTOP, then SIGCONT), resigning; observers that see every leader in order of term;
//! an observer across a server restart. Every process started here is killed by PID when the
//! test ends (`Run`'s drop).

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use redis_lock_client::{redis, Error, Leader, Locker};
use redis_lock_harness::*;

mod common;
use common::locker;

const KEY: &str = "{billing}:leader";
/// Where the leaders' fenced writes go (`RPUSH` of `identity:term` under `LOCK.GUARD`).
const WRITES: &str = "{billing}:writes";

/// How soon the next candidate leads after a `kill -9` or a resignation: the server hands
/// over the moment the session closes or the release lands (milliseconds); 2 s is the margin
/// of a loaded machine (2 cores shared with other suites), far under the 10 s lease a handover
/// at the lease's end would take.
const AT_ONCE: Duration = Duration::from_secs(2);
/// How long a process may take to start, campaign or tell what it saw (a loaded machine).
const PROMPTLY: Duration = Duration::from_secs(10);
/// The spacing of the changes observers must all see (rule 22: a watch may merge changes
/// closer together than its round trip).
const SPACING: Duration = Duration::from_secs(1);

// ---- The processes ------------------------------------------------------------------------

/// A line a child printed: which child, when it was read, what it said.
#[derive(Clone, Debug)]
struct Said {
    child: usize,
    at: Instant,
    text: String,
}

/// The children of one test, their lines as they come, and every line so far. Dropped, it
/// kills each child by PID (SIGCONT first: a stopped one too).
struct Run {
    port: u16,
    children: Vec<(String, Child, Option<ChildStdin>)>,
    lines: mpsc::Receiver<Said>,
    sender: mpsc::Sender<Said>,
    log: Vec<Said>,
}

impl Run {
    fn new(server: &Server) -> Self {
        let (sender, lines) = mpsc::channel();
        Run {
            port: server.port,
            children: Vec::new(),
            lines,
            sender,
            log: Vec::new(),
        }
    }

    /// Start `role` (`candidate` or `observer`) named `identity`; its index.
    fn start(&mut self, role: &str, identity: &str, ttl: Duration) -> usize {
        let mut child = Command::new(redis_lock_harness::this_test_binary())
            .args([
                "election_child",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("ELECTION_CHILD", role)
            .env("ELECTION_PORT", self.port.to_string())
            .env("ELECTION_IDENTITY", identity)
            .env("ELECTION_TTL_MS", ttl.as_millis().to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start a child");
        let index = self.children.len();
        let stdout = child.stdout.take().unwrap();
        let sender = self.sender.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                // libtest prints "test election_child ... " before the child's first line.
                if let Some((_, text)) = line.split_once("ELECT ") {
                    let said = Said {
                        child: index,
                        at: Instant::now(),
                        text: text.to_string(),
                    };
                    if sender.send(said).is_err() {
                        return;
                    }
                }
            }
        });
        let stdin = child.stdin.take();
        self.children.push((identity.to_string(), child, stdin));
        index
    }

    fn pid(&self, child: usize) -> i32 {
        self.children[child].1.id() as i32
    }

    fn name(&self, child: usize) -> &str {
        &self.children[child].0
    }

    /// The first line (read already, or within `within`) that `what` accepts.
    fn wait_for(&mut self, within: Duration, what: impl Fn(&Said) -> bool) -> Said {
        if let Some(said) = self.log.iter().find(|s| what(s)) {
            return said.clone();
        }
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(said) => {
                    self.log.push(said.clone());
                    if what(&said) {
                        return said;
                    }
                }
                Err(_) => panic!(
                    "nothing accepted within {within:?}; the children said:\n{}",
                    self.transcript()
                ),
            }
        }
    }

    /// Every line read so far, by child.
    fn transcript(&self) -> String {
        let lines = self
            .log
            .iter()
            .map(|s| format!("{}: {}", self.name(s.child), s.text));
        lines.collect::<Vec<_>>().join("\n")
    }

    /// Lines read so far from `child`.
    fn said_by(&mut self, child: usize) -> Vec<String> {
        while let Ok(said) = self.lines.try_recv() {
            self.log.push(said);
        }
        let lines = self.log.iter().filter(|s| s.child == child);
        lines.map(|s| s.text.clone()).collect()
    }

    /// The candidate among `among` that says it leads next (within `within`): it and its term.
    fn next_leader(&mut self, among: &[usize], within: Duration) -> (usize, u64, Instant) {
        let said = self.wait_for(within, |s| {
            among.contains(&s.child) && s.text.starts_with("leading ")
        });
        (said.child, term_in(&said.text, "leading "), said.at)
    }

    /// Until each observer of `observers` told `leader`.
    fn observed(&mut self, observers: &[usize], leader: &Leader) {
        let told = format!("leader {} {}", leader.identity, leader.term);
        for &o in observers {
            if !self.said_by(o).contains(&told) {
                self.wait_for(PROMPTLY, |s| s.child == o && s.text == told);
            }
        }
    }

    /// The leaders `observer` told, in order (the `none` items and errors left out).
    fn leaders_told(&mut self, observer: usize) -> Vec<Leader> {
        let said = self.said_by(observer);
        said.iter()
            .filter_map(|l| {
                let (identity, term) = l.strip_prefix("leader ")?.split_once(' ')?;
                let term = term.parse().ok()?;
                let identity = identity.to_string();
                Some(Leader { identity, term })
            })
            .collect()
    }

    /// The longest time between a leader saying it leads and an observer telling it (both
    /// as this process read them: a measurement, not asserted).
    fn observer_lag(&self, observers: &[usize], leaders: &[Leader]) -> Duration {
        let at = |what: &dyn Fn(&Said) -> bool| self.log.iter().find(|s| what(s)).map(|s| s.at);
        let mut lag = Duration::ZERO;
        for leader in leaders {
            let leading = format!("leading {}", leader.term);
            let Some(elected) = at(&|s| s.text == leading) else {
                continue;
            };
            let told = format!("leader {} {}", leader.identity, leader.term);
            for &o in observers {
                if let Some(seen) = at(&|s| s.child == o && s.text == told) {
                    lag = lag.max(seen.saturating_duration_since(elected));
                }
            }
        }
        lag
    }

    fn tell(&mut self, child: usize, line: &str) {
        let stdin = self.children[child].2.as_mut().expect("stdin");
        writeln!(stdin, "{line}").expect("tell the child");
    }

    /// Until `child` exits by itself (within `within`): whether it succeeded.
    fn exits(&mut self, child: usize, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.children[child].1.try_wait().unwrap() {
                return status.success();
            }
            assert!(
                Instant::now() < deadline,
                "{} did not exit",
                self.name(child)
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        for (_, child, _) in &mut self.children {
            if child.try_wait().ok().flatten().is_none() {
                signal_pid(child.id() as i32, libc::SIGCONT);
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

fn term_in(text: &str, prefix: &str) -> u64 {
    let rest = text.strip_prefix(prefix).expect("the prefix");
    let term = rest.split_whitespace().next().expect("a term");
    term.parse().expect("a term")
}

/// Starts observers `o1` and `o2` (each has told that nobody leads), then candidates `c1`,
/// `c2`, `c3` on `ttl` (`c1` leads, the others queue behind it in this order): the indexes of
/// the observers, then of the candidates.
fn three_candidates_two_observers(run: &mut Run, s: &Server, ttl: Duration) -> Vec<usize> {
    let observers = vec![
        run.start("observer", "o1", ttl),
        run.start("observer", "o2", ttl),
    ];
    for &o in &observers {
        run.wait_for(PROMPTLY, |said| said.child == o && said.text == "none");
    }
    let c1 = run.start("candidate", "c1", ttl);
    run.next_leader(&[c1], PROMPTLY);
    let mut con = s.con();
    let mut candidates = vec![c1];
    for name in ["c2", "c3"] {
        candidates.push(run.start("candidate", name, ttl));
        let queued = |con: &mut Connection| queue(con).last().is_some_and(|q| q == name);
        assert!(eventually(PROMPTLY, || queued(&mut con)), "{name} queued");
    }
    [observers, candidates].concat()
}

/// The owners waiting in `KEY`'s queue, in order (`LOCK.INFO`).
fn queue(con: &mut Connection) -> Vec<String> {
    match map_field(&ok(con, &["LOCK.INFO", KEY]), "queue") {
        Some(Value::Array(owners)) => owners.iter().map(text).collect(),
        _ => Vec::new(),
    }
}

/// The server's leader of `KEY` now (`LOCK.INFO`): its identity and term.
fn server_leader(con: &mut Connection) -> Option<Leader> {
    let holders = holder_tokens(con, KEY);
    let [(identity, term)] = holders.as_slice() else {
        assert!(
            holders.is_empty(),
            "one exclusive holder at most: {holders:?}"
        );
        return None;
    };
    let term = *term as u64;
    let identity = identity.clone();
    Some(Leader { identity, term })
}

/// The fenced writes that succeeded, in the order the server ran them, never go back to an
/// older term: two leaders' writes never both succeed once the newer one wrote; and each
/// term's writes are its own leader's.
fn check_writes(con: &mut Connection, leaders: &[Leader]) {
    let writes = match ok(con, &["LRANGE", WRITES, "0", "-1"]) {
        Value::Array(items) => items.iter().map(text).collect::<Vec<_>>(),
        other => panic!("{other:?}"),
    };
    let mut newest = 0;
    for write in &writes {
        let (identity, term) = write.split_once(':').expect("identity:term");
        let term: u64 = term.parse().unwrap();
        assert!(
            term >= newest,
            "a write of term {term} after one of {newest}: {writes:?}"
        );
        newest = term;
        let leader = leaders.iter().find(|l| l.term == term);
        let leader = leader.unwrap_or_else(|| panic!("a write of an unknown term: {write}"));
        assert_eq!(leader.identity, identity, "{write}");
    }
}

fn leader(run: &Run, child: usize, term: u64) -> Leader {
    let identity = run.name(child).to_string();
    Leader { identity, term }
}

/// Until `SPACING` has passed since `change`.
fn spaced(change: Instant) {
    std::thread::sleep(SPACING.saturating_sub(change.elapsed()));
}

// ---- The tests ------------------------------------------------------------------------------

/// Three candidates, two observers: the leader killed with `kill -9` is replaced at once (its
/// session closed) by exactly one candidate with a larger term; that one resigns and the last
/// leads at once; each observer told every leader, in order of term, ending with the current.
#[test]
fn a_leader_killed_is_replaced_at_once_and_a_resignation_hands_over_at_once() {
    let s = Server::start();
    let mut run = Run::new(&s);
    let ttl = Duration::from_secs(10);
    let all = three_candidates_two_observers(&mut run, &s, ttl);
    let (observers, candidates) = all.split_at(2);
    let mut con = s.con();
    let first = server_leader(&mut con).expect("c1 leads");
    assert_eq!(first.identity, "c1");
    run.observed(observers, &first);
    let elected = run
        .log
        .iter()
        .find(|l| l.text.starts_with("leading "))
        .unwrap()
        .at;
    spaced(elected);

    let killed = Instant::now();
    signal_pid(run.pid(candidates[0]), libc::SIGKILL);
    let (c, term, at) = run.next_leader(&candidates[1..], AT_ONCE + PROMPTLY);
    let handover = at - killed;
    eprintln!("kill -9 -> new leader: {handover:?}");
    assert!(handover < AT_ONCE, "the next leader after {handover:?}");
    let second = leader(&run, c, term);
    assert_eq!(second.identity, "c2", "the first in the queue");
    assert!(
        second.term > first.term,
        "a larger term: {second:?} after {first:?}"
    );
    assert_eq!(server_leader(&mut con), Some(second.clone()), "one leader");
    let third_said = run.said_by(candidates[2]);
    assert!(
        !third_said.iter().any(|l| l.starts_with("leading")),
        "{third_said:?}"
    );
    run.observed(observers, &second);
    spaced(at);

    let resigned = Instant::now();
    run.tell(candidates[1], "resign");
    let (c, term, at) = run.next_leader(&candidates[2..], AT_ONCE + PROMPTLY);
    let handover = at - resigned;
    eprintln!("resign -> new leader: {handover:?}");
    assert!(handover < AT_ONCE, "the next leader after {handover:?}");
    let third = leader(&run, c, term);
    assert!(third.term > second.term);
    assert_eq!(server_leader(&mut con), Some(third.clone()));
    run.wait_for(PROMPTLY, |s| {
        s.child == candidates[1] && s.text == "resigned true"
    });
    assert!(run.exits(candidates[1], PROMPTLY), "c2 exits cleanly");
    run.observed(observers, &third);

    let every = vec![first, second, third];
    for &o in observers {
        assert_eq!(
            run.leaders_told(o),
            every,
            "{} told every leader in order",
            run.name(o)
        );
    }
    eprintln!(
        "observer lag (max): {:?}",
        run.observer_lag(observers, &every)
    );
    check_writes(&mut con, &every);
}

/// Three candidates on a 3 s lease, two observers: the leader stopped (SIGSTOP) keeps its
/// connection, so the next candidate leads at the lease's end, not before; continued
/// (SIGCONT), the old leader is told it lost leadership, and its fenced write with the old term
/// is refused by the server.
#[test]
fn a_leader_stopped_past_its_lease_is_replaced_at_its_end_and_its_old_term_refused() {
    let s = Server::start();
    let mut run = Run::new(&s);
    let ttl = Duration::from_secs(3);
    let all = three_candidates_two_observers(&mut run, &s, ttl);
    let (observers, candidates) = all.split_at(2);
    let mut con = s.con();
    let first = server_leader(&mut con).expect("c1 leads");
    run.observed(observers, &first);
    let elected = run
        .log
        .iter()
        .find(|l| l.text.starts_with("leading "))
        .unwrap()
        .at;
    spaced(elected);

    let c1 = run.pid(candidates[0]);
    signal_pid(c1, libc::SIGSTOP);
    assert!(
        eventually(PROMPTLY, || state(c1) == Some('T')),
        "c1 stopped"
    );
    // The server's lease end, as seen after the stop: a renewal still on its way can only move
    // it later, never earlier.
    let sent = Instant::now();
    let left = Duration::from_millis(lease_left(&mut con, KEY).expect("c1 still holds") as u64);
    let (ends_after, ends_by) = (sent + left, Instant::now() + left);
    let (c, term, at) = run.next_leader(&candidates[1..], ttl + PROMPTLY);
    let second = leader(&run, c, term);
    // Not before the lease's end (100 ms: the reply's ms rounding and the read's trip); within
    // 2 s after it (the module's timer, the handover and this process reading the line on a
    // loaded machine, and a renewal that was still on its way at the stop).
    let early = ends_after.saturating_duration_since(at);
    let late = at.saturating_duration_since(ends_by);
    eprintln!("SIGSTOP: lease left {left:?}, new leader {late:?} after its end");
    assert!(
        early < Duration::from_millis(100),
        "{early:?} before the lease's end"
    );
    assert!(late < AT_ONCE, "{late:?} after the lease's end");
    assert_eq!(second.identity, "c2");
    assert!(second.term > first.term);
    assert_eq!(server_leader(&mut con), Some(second.clone()), "one leader");
    let third_said = run.said_by(candidates[2]);
    assert!(
        !third_said.iter().any(|l| l.starts_with("leading")),
        "{third_said:?}"
    );
    run.observed(observers, &second);

    let continued = Instant::now();
    signal_pid(c1, libc::SIGCONT);
    let lost = run.wait_for(PROMPTLY, |s| {
        s.child == candidates[0] && s.text.starts_with("lost ")
    });
    eprintln!(
        "SIGCONT -> told lost: {:?} ({})",
        lost.at - continued,
        lost.text
    );
    let reasons = [
        "lost the server could not be reached before the lease ended: ",
        "lost the lease ran out before it was renewed",
    ];
    assert!(
        reasons.iter().any(|r| lost.text.starts_with(r)),
        "{}",
        lost.text
    );
    let fenced = format!("fenced {} refused", first.term);
    run.wait_for(PROMPTLY, |s| {
        s.child == candidates[0] && s.text.starts_with("fenced ")
    });
    let said = run.said_by(candidates[0]);
    assert!(said.contains(&fenced), "{said:?}");
    assert!(said.contains(&"run stale".to_string()), "{said:?}");
    let told = said.iter().filter(|l| l.starts_with("lost ")).count();
    assert_eq!(told, 1, "told once: {said:?}");
    assert!(run.exits(candidates[0], PROMPTLY), "c1 exits cleanly");
    assert_eq!(
        server_leader(&mut con),
        Some(second.clone()),
        "c2 still leads"
    );

    let every = vec![first, second];
    for &o in observers {
        assert_eq!(
            run.leaders_told(o),
            every,
            "{} told every leader in order",
            run.name(o)
        );
    }
    check_writes(&mut con, &every);
}

/// A process's state letter from /proc (`T`: stopped).
fn state(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

/// An observer across a server restart (`kill -9`, started again on its port with its data,
/// the AOF): it connects again with its last cursor and tells the server's latest leader, in
/// order of term (never an older one, never the same twice in a row).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_observer_across_a_server_restart_tells_the_latest_leader() {
    let mut s = Server::builder()
        .args(&["--appendonly", "yes", "--appendfsync", "always"])
        .start();
    let locker = locker(&s).unavailable_after(Duration::from_secs(60));
    let mut leaders = locker.election(KEY, "observer").observe();
    let (told, mut seen) = tokio::sync::mpsc::unbounded_channel();
    let observer = tokio::spawn(async move {
        while let Some(leader) = leaders.next().await {
            let _ = told.send(leader);
        }
    });
    assert_eq!(
        next_told(&mut seen).await.unwrap(),
        None,
        "nobody leads yet"
    );
    let mut con = s.con();
    let a = acquire(&mut con, KEY, "a", 60_000).unwrap() as u64;
    let first = Leader {
        identity: "a".into(),
        term: a,
    };
    assert_eq!(next_told(&mut seen).await.unwrap(), Some(first.clone()));

    tokio::task::block_in_place(|| s.restart());
    let mut con = s.con();
    assert_eq!(
        server_leader(&mut con),
        Some(first.clone()),
        "kept by the AOF"
    );
    assert_eq!(release(&mut con, KEY, "a"), 1);
    acquire(&mut con, KEY, "b", 60_000).unwrap();
    assert_eq!(release(&mut con, KEY, "b"), 1);
    let c = acquire(&mut con, KEY, "c", 60_000).unwrap() as u64;
    let latest = Some(Leader {
        identity: "c".into(),
        term: c,
    });
    let mut told = vec![Some(first)];
    while told.last() != Some(&latest) {
        match next_told(&mut seen).await {
            Ok(leader) => told.push(leader),
            Err(Error::Unavailable { .. }) => {} // a slow restart: told once, then goes on
            Err(e) => panic!("{e}"),
        }
    }
    let terms: Vec<u64> = told
        .iter()
        .map(|l| l.as_ref().map_or(0, |l| l.term))
        .collect();
    let leaders: Vec<&Leader> = told.iter().flatten().collect();
    assert!(
        leaders.windows(2).all(|w| w[0].term < w[1].term),
        "in order of term, never the same twice: {told:?}"
    );
    assert!(!terms.windows(2).any(|w| w[0] == w[1]), "{told:?}");
    observer.abort();
}

/// An observer of a frozen server (SIGSTOP) says `Error::Unavailable` once, within the bound
/// after its watch's reply was due, and goes on trying: once the server continues, its next
/// item is the server's latest leader.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_observer_of_a_frozen_server_says_unavailable_once_then_the_latest_leader() {
    let s = Server::start();
    let bound = Duration::from_secs(1);
    let locker = locker(&s).unavailable_after(bound);
    let mut leaders = locker.election(KEY, "observer").observe();
    let (told, mut seen) = tokio::sync::mpsc::unbounded_channel();
    let observer = tokio::spawn(async move {
        while let Some(leader) = leaders.next().await {
            let _ = told.send(leader);
        }
    });
    assert_eq!(
        next_told(&mut seen).await.unwrap(),
        None,
        "nobody leads yet"
    );
    let frozen = Instant::now();
    s.signal(libc::SIGSTOP);
    let unavailable = next_told(&mut seen).await;
    let took = frozen.elapsed();
    assert!(
        matches!(unavailable, Err(Error::Unavailable { .. })),
        "{unavailable:?}"
    );
    // A watch blocks up to half the bound (0.5 s), its reply is due min(1 s, bound) after
    // that, then the bound; 2 s of margin for a loaded machine.
    let within = bound / 2 + bound + bound + Duration::from_secs(2);
    eprintln!("frozen server -> observer unavailable: {took:?}");
    assert!(took < within, "unavailable after {took:?}");
    s.signal(libc::SIGCONT);
    let mut con = s.con();
    let a = acquire(&mut con, KEY, "a", 60_000).unwrap() as u64;
    let latest = Leader {
        identity: "a".into(),
        term: a,
    };
    assert_eq!(
        next_told(&mut seen).await.unwrap(),
        Some(latest),
        "once unavailable"
    );
    observer.abort();
}

/// An observer whose watch is ended by a retryable reply (`CLIENT UNBLOCK id ERROR`: Valkey
/// answers the blocked watch `UNBLOCKED`; Redis 7.0 cannot unblock a module's blocked client)
/// or by a broken link (`CLIENT KILL`) connects again and blocks again, telling nothing new
/// (its last cursor names the same leader) and no error; then the changes after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_observer_unblocked_or_cut_off_connects_again_with_its_cursor() {
    let s = Server::start();
    let locker = locker(&s);
    let mut leaders = locker.election(KEY, "observer").observe();
    let (told, mut seen) = tokio::sync::mpsc::unbounded_channel();
    let observer = tokio::spawn(async move {
        while let Some(leader) = leaders.next().await {
            let _ = told.send(leader);
        }
    });
    let mut con = s.con();
    let a = acquire(&mut con, KEY, "a", 60_000).unwrap() as u64;
    let first = Some(Leader {
        identity: "a".into(),
        term: a,
    });
    while next_told(&mut seen).await.unwrap() != first {} // `None` first, if it watched before
    for way in ["CLIENT UNBLOCK", "CLIENT KILL"] {
        let blocked = |con: &mut Connection| {
            let mut ids = Vec::new();
            eventually(PROMPTLY, || {
                ids = blocked_ids(con);
                ids.len() == 1
            });
            ids.first()
                .copied()
                .expect("the observer blocked in LOCK.WATCH")
        };
        let id = tokio::task::block_in_place(|| blocked(&mut con));
        let ended = match way {
            "CLIENT UNBLOCK" => ok(&mut con, &["CLIENT", "UNBLOCK", &id.to_string(), "ERROR"]),
            _ => ok(&mut con, &["CLIENT", "KILL", "ID", &id.to_string()]),
        };
        if int(&ended) == 0 {
            eprintln!("{way}: not on this server");
            continue;
        }
        let again = tokio::task::block_in_place(|| blocked(&mut con));
        assert_ne!(again, id, "{way}: watching again on a new connection");
    }
    assert_eq!(release(&mut con, KEY, "a"), 1);
    let b = acquire(&mut con, KEY, "b", 60_000).unwrap() as u64;
    let next = Some(Leader {
        identity: "b".into(),
        term: b,
    });
    // The free moment between the release and the grant may be told; `a` never again.
    let mut told = next_told(&mut seen).await.unwrap();
    if told.is_none() {
        told = next_told(&mut seen).await.unwrap();
    }
    assert_eq!(told, next, "nothing told but the changes");
    observer.abort();
}

/// Without its server (a closed port), a campaign, `leader()` and an observer's first item are
/// `Error::Unavailable` within the locker's bound (rule 14), not a wait without end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_election_without_its_server_is_unavailable_within_the_bound() {
    let url = format!("redis://127.0.0.1:{}/", free_port()); // nothing listens there
    let bound = Duration::from_millis(500);
    let locker = Locker::new(redis::Client::open(url).unwrap()).unavailable_after(bound);
    let election = locker.election(KEY, "a");
    // The bound, and 1 s for a loaded machine.
    let within = bound + Duration::from_secs(1);
    let started = Instant::now();
    let campaign = election.campaign().await;
    assert!(
        matches!(campaign, Err(Error::Unavailable { .. })),
        "{campaign:?}"
    );
    assert!(
        started.elapsed() < within,
        "campaign: {:?}",
        started.elapsed()
    );
    let started = Instant::now();
    let leader = election.leader().await;
    assert!(
        matches!(leader, Err(Error::Unavailable { .. })),
        "{leader:?}"
    );
    assert!(
        started.elapsed() < within,
        "leader: {:?}",
        started.elapsed()
    );
    let started = Instant::now();
    let first = election.observe().next().await.expect("an item");
    assert!(matches!(first, Err(Error::Unavailable { .. })), "{first:?}");
    assert!(
        started.elapsed() < within,
        "observe: {:?}",
        started.elapsed()
    );
}

/// The observer's next item, within 20 s (a restart and a reconnection on a loaded machine).
async fn next_told(seen: &mut Told) -> Result<Option<Leader>, Error> {
    let item = tokio::time::timeout(PROMPTLY * 2, seen.recv()).await;
    item.expect("told in time").expect("the stream goes on")
}

type Told = tokio::sync::mpsc::UnboundedReceiver<Result<Option<Leader>, Error>>;

/// `leader()` answers the current leader or none; a campaign bounded by the server's wait
/// (`campaign_for`) or by the caller dropping it (`tokio::time::timeout`) leaves the queue; a
/// resignation answers true and leaves the key free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_answers_and_a_bounded_campaign_leaves_the_queue() {
    let s = Server::start();
    let locker = locker(&s);
    let a = locker.election(KEY, "a");
    let b = locker.election(KEY, "b");
    assert_eq!(a.leader().await.unwrap(), None);
    let leading = a.campaign().await.unwrap();
    let now = Leader {
        identity: "a".into(),
        term: leading.term(),
    };
    assert_eq!(b.leader().await.unwrap(), Some(now.clone()));
    assert_eq!(leading.identity(), "a");
    assert_eq!(leading.key(), KEY);

    let started = Instant::now();
    assert!(b
        .campaign_for(Duration::from_millis(200))
        .await
        .unwrap()
        .is_none());
    assert!(started.elapsed() >= Duration::from_millis(200));
    let cancelled = tokio::time::timeout(Duration::from_millis(200), b.campaign()).await;
    assert!(cancelled.is_err(), "still campaigning when cancelled");
    let mut con = s.con();
    let left = tokio::task::block_in_place(|| {
        eventually(PROMPTLY, || {
            queue(&mut con).is_empty() && blocked_clients(&mut con) == 0
        })
    });
    assert!(left, "the cancelled campaign left the queue");

    let fenced: i64 = leading
        .run(redis::cmd("INCR").arg("{billing}:runs"))
        .await
        .unwrap();
    assert_eq!(fenced, 1);
    assert!(leading.resign().await.unwrap());
    assert_eq!(
        a.leader().await.unwrap(),
        None,
        "nobody was left in the queue"
    );
    assert_eq!(
        b.campaign_for(Duration::ZERO)
            .await
            .unwrap()
            .map(|l| l.identity().to_string()),
        Some("b".into())
    );
}

// ---- The README's example -------------------------------------------------------------------

// README election example: begin
/// Lead once: campaign (in the queue, no polling), write under the term, resign.
async fn lead_once(locker: &Locker, me: &str) -> Result<u64, Error> {
    let election = locker.election("billing:leader", me); // ttl 10 s: .ttl(d)
    let leadership = election.campaign().await?; // returns once elected
    let term = leadership.term(); // larger than every earlier leader's
    let lost = leadership.lost(); // resolves, once, if leadership is lost
    let mut write = redis::cmd("SET");
    write.arg("billing:term").arg(term);
    tokio::select! {
        // A fenced write: runs only while `term` is the live leader's (else Error::Stale).
        done = leadership.run::<()>(&write) => done?,
        reason = lost => return Err(Error::Stale(reason)),
    }
    leadership.resign().await?; // the next candidate leads at once
    Ok(term)
}

/// The first leader seen, waiting for one without polling.
async fn first_leader(locker: &Locker) -> Result<Leader, Error> {
    let election = locker.election("billing:leader", "watcher");
    let mut leaders = election.observe(); // the leader now, then each change
    loop {
        let next = leaders
            .next()
            .await
            .expect("observe() ends after an error only");
        if let Some(leader) = next? {
            return Ok(leader); // leader.identity, leader.term
        } // None: nobody leads yet
    }
}
// README election example: end

/// The README's election example, run: an observer waiting for a leader sees the one that
/// leads, and each `lead_once` leads with a larger term.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_election_example_runs() {
    let s = Server::start();
    let locker = locker(&s);
    let watching = tokio::spawn({
        let locker = locker.clone();
        async move { first_leader(&locker).await }
    });
    let holding = locker
        .election("billing:leader", "node-0")
        .campaign()
        .await
        .unwrap();
    let seen = tokio::time::timeout(PROMPTLY, watching)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(seen.identity, "node-0");
    assert_eq!(seen.term, holding.term());
    let next = tokio::spawn({
        let locker = locker.clone();
        async move { lead_once(&locker, "node-1").await }
    });
    assert!(holding.resign().await.unwrap());
    let term = tokio::time::timeout(PROMPTLY, next)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(term > seen.term);
    assert!(lead_once(&locker, "node-2").await.unwrap() > term);
}

/// The README shows the example this file runs, word for word.
#[test]
fn the_readme_shows_the_election_example_that_runs() {
    let this = include_str!("election.rs");
    let begin = "// README election example: begin\n";
    let end = "// README election example: end\n";
    let from = this.find(begin).unwrap() + begin.len();
    let tested = &this[from..this.find(end).unwrap()];
    let readme = include_str!("../README.md");
    let shown = readme
        .split("```rust")
        .filter_map(|block| block.split_once("\n")?.1.split_once("```").map(|b| b.0))
        .find(|block| block.contains("async fn lead_once"))
        .expect("the README's Elections example");
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

// ---- The child processes ------------------------------------------------------------------

/// A candidate or an observer (this binary run again with `ELECTION_CHILD` set; a no-op in a
/// plain test run). Each line it prints for the test starts with `ELECT `.
#[test]
fn election_child() {
    let Ok(role) = std::env::var("ELECTION_CHILD") else {
        return;
    };
    let env = |name: &str| std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set"));
    let port = env("ELECTION_PORT");
    let identity = env("ELECTION_IDENTITY");
    let ttl = Duration::from_millis(env("ELECTION_TTL_MS").parse().unwrap());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let url = format!("redis://127.0.0.1:{port}/");
    let locker = Locker::new(redis::Client::open(url.as_str()).unwrap());
    let election = locker.election(KEY, identity.as_str()).ttl(ttl);
    runtime.block_on(async {
        match role.as_str() {
            "candidate" => candidate(election, &url).await,
            "observer" => observer(election).await,
            other => panic!("no role {other}"),
        }
    });
}

fn say(line: impl std::fmt::Display) {
    let mut out = std::io::stdout().lock();
    writeln!(out, "ELECT {line}").unwrap();
    out.flush().unwrap();
}

/// Campaign; once leading, a fenced write every 50 ms until told to resign (a `resign` line
/// on stdin) or told leadership was lost: then a write through the leadership (stale, known
/// lost), and one with the old term straight to the server (refused), and exit.
async fn candidate(election: redis_lock_client::Election, url: &str) {
    let leadership = match election.campaign().await {
        Ok(leadership) => leadership,
        Err(e) => return say(format!("error {e}")),
    };
    let term = leadership.term();
    say(format!("leading {term}"));
    let (resign, mut resigned) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        if std::io::stdin().read_line(&mut line).is_ok() && line.trim() == "resign" {
            let _ = resign.send(());
        }
    });
    let write = || {
        let mut cmd = redis::cmd("RPUSH");
        cmd.arg(WRITES)
            .arg(format!("{}:{term}", election.identity()));
        cmd
    };
    let lost = leadership.lost();
    tokio::pin!(lost);
    let mut tick = tokio::time::interval(Duration::from_millis(50));
    loop {
        tokio::select! {
            reason = &mut lost => {
                say(format!("lost {reason}"));
                break;
            }
            _ = &mut resigned => {
                let resigned = leadership.resign().await;
                return say(format!("resigned {}", resigned.map_or_else(|e| e.to_string(), |r| r.to_string())));
            }
            _ = tick.tick() => match leadership.run::<i64>(&write()).await {
                Ok(_) => {}
                Err(Error::Stale(_)) => say("write stale"),
                Err(e) => say(format!("error {e}")),
            },
        }
    }
    match leadership.run::<i64>(&write()).await {
        Err(Error::Stale(_)) => say("run stale"),
        other => say(format!("run {other:?}")),
    }
    let client = redis::Client::open(url).unwrap();
    let mut con = client.get_multiplexed_async_connection().await.unwrap();
    let mut guarded = redis::cmd("LOCK.GUARD");
    guarded
        .arg(KEY)
        .arg(term)
        .arg("RPUSH")
        .arg(WRITES)
        .arg(format!("{}:{term}", election.identity()));
    match guarded.query_async::<i64>(&mut con).await {
        Err(e) if e.code() == Some("STALE") => say(format!("fenced {term} refused")),
        other => say(format!("fenced {term} accepted {other:?}")),
    }
}

/// Tell each leader the election's stream gives, until killed.
async fn observer(election: redis_lock_client::Election) {
    let mut leaders = election.observe();
    while let Some(leader) = leaders.next().await {
        match leader {
            Ok(Some(leader)) => say(format!("leader {} {}", leader.identity, leader.term)),
            Ok(None) => say("none"),
            Err(e) => say(format!("error {e}")),
        }
    }
}
