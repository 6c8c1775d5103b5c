//! Where fencing tokens come from, and why they never repeat or go backwards, whatever the
//! hosts' clocks say.
//!
//! A token is an **epoch** (its high 21 bits) and a count within it (its low 32 bits). A server
//! issues tokens only in an epoch it started itself, and `last + 1` within it:
//!
//! - An epoch starts as soon as a server is master: once start-up has loaded its data, and at
//!   promotion (again when its epoch runs low on tokens). The new epoch is above every epoch the server has seen: that of
//!   the largest token it knows (its own, the RDB, the AOF, its master's replicated grants,
//!   restored keys) and that of its **epoch file**, where it stores each epoch it starts
//!   (written and fsynced before the epoch's first token). The wall clock, read as a token,
//!   is one more floor: it only ever raises the epoch, and lets a replacement with neither
//!   data nor file start above the tokens of the past (those of earlier, clock-based versions
//!   included). It never lowers one, so a clock behind or stepped back costs nothing.
//! - The master replicates the new epoch as `LOCK.EPOCH` before any grant in it, and an
//!   epoch's first token is its marker: the last token the RDB (and so a full sync) carries.
//! - Failover: a promoted replica that synced with its master after the master started its
//!   epoch knows that epoch (`LOCK.EPOCH` in the stream, or the marker in the RDB of a full
//!   sync), so its own epoch is higher: each of its tokens is above every token the old master
//!   issued or will issue in that epoch, however many grants the replica missed and however
//!   long the old master goes on granting on the far side of a partition. No clock is read.
//! - Restart: the epoch file holds the epoch in use, so a server restarted from an older RDB
//!   snapshot (or after a host crash that lost the AOF's last second) starts above it.
//! - What it does not cover: two servers that each start an epoch without hearing of the
//!   other's, from the same history: an isolated old master that restarts (or runs out of
//!   its epoch) during a partition while a replica is promoted. They may pick the same epoch.
//!   `min-replicas-to-write` rules that out (an isolated master cannot grant at all).
//! - Tokens stay below 2^53, so JavaScript clients read them exactly: 2^21 epochs of 2^32
//!   tokens. A server starts an epoch per start or promotion; the clock floor moves one epoch
//!   per 2^32 µs (71.6 minutes), which lasts until the year 2255. `MAX_TOKEN` is a hard bound:
//!   loading, restoring or replaying a larger token is refused, and once no epoch is left
//!   grants fail with an error instead of repeating a token.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// The largest token ever issued or accepted: 2^53 - 1, the largest integer a JavaScript (or any
/// IEEE double) client reads exactly.
pub const MAX_TOKEN: u64 = (1 << 53) - 1;

/// The low bits of a token count within its epoch.
pub const COUNT_BITS: u32 = 32;

/// The last epoch (2^21 - 1).
pub const MAX_EPOCH: u64 = MAX_TOKEN >> COUNT_BITS;

/// An epoch is left for the next one while this many tokens are still unused in it, so one
/// step (a handoff to up to `lock.max-holders` = 2^20 waiters) never runs out mid-way.
pub const HEADROOM: u64 = 1 << 21;

/// Whether `token` can be a fencing token (1 ..= MAX_TOKEN).
pub const fn in_range(token: u64) -> bool {
    token > 0 && token <= MAX_TOKEN
}

/// The epoch of `token`.
pub const fn epoch_of(token: u64) -> u64 {
    token >> COUNT_BITS
}

/// The first token of `epoch`.
pub const fn first_of(epoch: u64) -> u64 {
    epoch << COUNT_BITS
}

/// The pure rule, kept apart from the globals so it can be tested.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TokenSource {
    /// The largest token issued or observed.
    last: u64,
    /// The epoch this server started and issues in (0: none yet, or it became a replica).
    epoch: u64,
}

impl TokenSource {
    pub const fn new(last: u64, epoch: u64) -> Self {
        Self { last, epoch }
    }

    /// A source in epoch 1 from its start: for the tests of rules that only need tokens.
    #[cfg(test)]
    pub fn started() -> Self {
        let mut source = Self::default();
        source.enter(1);
        source
    }

    /// The last token issued or observed.
    pub const fn last(&self) -> u64 {
        self.last
    }

    /// The epoch in use (0: none).
    pub const fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Whether tokens can be issued now: an epoch is in use with `HEADROOM` tokens left.
    pub fn ready(&self) -> bool {
        self.epoch != 0 && self.last.saturating_add(HEADROOM) < first_of(self.epoch + 1)
    }

    /// The epoch to start: above the epoch of every token observed and above `stored` (the
    /// epoch file's), and above the wall clock read as a token (so above any token the clock
    /// scheme of earlier versions issued before now). `None` when no epoch is left.
    pub fn next_epoch(&self, stored: u64, clock_us: u64) -> Option<u64> {
        let above_seen = epoch_of(self.last).max(stored).max(self.epoch) + 1;
        let above_clock = epoch_of(clock_us).min(MAX_EPOCH - 1) + 1;
        let epoch = above_seen.max(above_clock);
        (epoch <= MAX_EPOCH).then_some(epoch)
    }

    /// Start issuing in `epoch` (already stored durably). Its first token is its marker: the
    /// one replicas observe when the epoch starts (`LOCK.EPOCH`) and the RDB carries as the
    /// last token, so a replica knows the epoch before any grant in it reaches it.
    pub fn enter(&mut self, epoch: u64) {
        self.epoch = epoch;
        self.last = self.last.max(first_of(epoch));
    }

    /// Stop issuing (this server became a replica): the next grant starts a new epoch.
    pub fn leave(&mut self) {
        self.epoch = 0;
    }

    /// Issue a fresh token: strictly above every token issued or observed, in the epoch in
    /// use. `None` without an epoch or past its end (`ready` says when to start the next).
    pub fn issue(&mut self) -> Option<u64> {
        let token = self.last.saturating_add(1);
        if self.epoch == 0 || epoch_of(token) != self.epoch || token > MAX_TOKEN {
            return None;
        }
        self.last = token;
        Some(token)
    }

    /// Remember a token issued elsewhere (master, RDB, AOF) so later tokens are above it.
    pub fn observe(&mut self, token: u64) {
        self.last = self.last.max(token);
    }
}

/// The server-wide last token and epoch. Only the main thread touches them; atomics avoid any
/// `unsafe`.
static LAST_TOKEN: AtomicU64 = AtomicU64::new(0);
static EPOCH: AtomicU64 = AtomicU64::new(0);

/// Whether the replication stream (so every replica, and the AOF after its base) has carried
/// this master's last token. Then the next token is `last + 1` wherever the stream is replayed,
/// and a grant of it may go out as the command itself (`replay_issue`). Issuing a token unsets
/// it until a write carrying that token goes out (`replicated`); it starts unset, and the
/// first epoch's `LOCK.EPOCH` sets it.
static STREAM_KNOWS_LAST: AtomicBool = AtomicBool::new(false);

/// The last token as this server's data and replication stream tell it: what a grant replayed
/// as its command counts from (`replay_issue`). It follows `LAST_TOKEN` but starts again at
/// every load that replaces the data (a full sync, a restart, `DEBUG RELOAD`), whereas
/// `LAST_TOKEN` only grows: a server that issued tokens of its own epoch and then follows a
/// master below it counts that master's grants from the master's last token, not its own.
static STREAM_LAST: AtomicU64 = AtomicU64::new(0);
/// `STREAM_LAST` before the load running now, for a load that fails (the data stays).
static STREAM_LAST_BEFORE_LOAD: AtomicU64 = AtomicU64::new(0);

/// Whether an AOF rewrite's base carries the last token: with an RDB preamble its auxiliary
/// data does; without one (`aof-use-rdb-preamble no`) the base has only the locks it
/// rewrites, and grants after it must carry their tokens. Unset until the server says.
static AOF_BASE_KNOWS_LAST: AtomicBool = AtomicBool::new(false);

fn source() -> TokenSource {
    TokenSource::new(
        LAST_TOKEN.load(Ordering::Relaxed),
        EPOCH.load(Ordering::Relaxed),
    )
}

/// Whether this server can issue tokens without starting an epoch first.
pub fn ready() -> bool {
    source().ready()
}

/// The epoch this server would start now (see `TokenSource::next_epoch`).
pub fn next_epoch(stored: u64, clock_us: u64) -> Option<u64> {
    source().next_epoch(stored, clock_us)
}

/// Issue in `epoch` from now on (stored durably by the caller first, replicated by the caller
/// after: `replicated(first_of(epoch))`).
pub fn enter(epoch: u64) {
    let mut source = source();
    source.enter(epoch);
    LAST_TOKEN.store(source.last(), Ordering::Relaxed);
    STREAM_LAST.fetch_max(source.last(), Ordering::Relaxed);
    EPOCH.store(epoch, Ordering::Relaxed);
}

/// This server became a replica: it issues nothing until it starts an epoch again.
pub fn leave() {
    EPOCH.store(0, Ordering::Relaxed);
}

/// The epoch in use (0: none).
pub fn epoch() -> u64 {
    EPOCH.load(Ordering::Relaxed)
}

/// Issue the next token of this server (`None`: no epoch ready, see `ready`). Until a write
/// carrying it is replicated, the stream does not know it (`stream_knows_last`).
pub fn issue() -> Option<u64> {
    let mut source = source();
    let token = source.issue()?;
    LAST_TOKEN.store(source.last(), Ordering::Relaxed);
    // Only the main thread writes it: a load and a store, no locked instruction per grant.
    if token > STREAM_LAST.load(Ordering::Relaxed) {
        STREAM_LAST.store(token, Ordering::Relaxed);
    }
    STREAM_KNOWS_LAST.store(false, Ordering::Relaxed);
    Some(token)
}

/// Whether an AOF rewrite's base carries the last token (`AOF_BASE_KNOWS_LAST`).
pub fn aof_base_knows_last() -> bool {
    AOF_BASE_KNOWS_LAST.load(Ordering::Relaxed)
}

/// Whether the replication stream has carried the last token (see `STREAM_KNOWS_LAST`), and
/// any AOF rewrite's base would too (`AOF_BASE_KNOWS_LAST`).
pub fn stream_knows_last() -> bool {
    STREAM_KNOWS_LAST.load(Ordering::Relaxed)
        && AOF_BASE_KNOWS_LAST.load(Ordering::Relaxed)
        // A `DEBUG LOADAOF` rebuilt the data's last token below the one issued: an RDB made
        // now would carry that one.
        && STREAM_LAST.load(Ordering::Relaxed) == LAST_TOKEN.load(Ordering::Relaxed)
}

/// Whether an AOF rewrite's base carries the last token (its RDB preamble's auxiliary data).
/// A rewrite may have started under the previous setting: the next grant carries its token.
/// (A replica reads it too: what it replays goes to its own AOF.)
pub fn set_aof_base_knows_last(knows: bool) {
    AOF_BASE_KNOWS_LAST.store(knows, Ordering::Relaxed);
    STREAM_KNOWS_LAST.store(false, Ordering::Relaxed);
}

/// A write carrying tokens up to `max_token` went to the replicas and the AOF.
pub fn replicated(max_token: u64) {
    if max_token >= LAST_TOKEN.load(Ordering::Relaxed) {
        STREAM_KNOWS_LAST.store(true, Ordering::Relaxed);
    }
}

/// A replica (or a server replaying its AOF) runs a grant its master replicated as the command
/// itself, issued when the stream knew the master's last token: the token it issued, `last +
/// 1` here too. `None` past `MAX_TOKEN` (a stream no master of this version writes).
pub fn replay_issue() -> Option<u64> {
    let token = STREAM_LAST.load(Ordering::Relaxed).checked_add(1)?;
    if token > MAX_TOKEN {
        return None;
    }
    STREAM_LAST.store(token, Ordering::Relaxed);
    LAST_TOKEN.fetch_max(token, Ordering::Relaxed);
    Some(token)
}

/// A load that replaces the data starts (start-up, a full sync, `DEBUG RELOAD` or `LOADAOF`):
/// the stream's last token is what it loads (the RDB's auxiliary data, the tokens it holds,
/// the AOF's effects).
pub fn load_started() {
    let before = STREAM_LAST.swap(0, Ordering::Relaxed);
    STREAM_LAST_BEFORE_LOAD.store(before, Ordering::Relaxed);
}

/// The load failed and the server keeps the data it had.
pub fn load_failed() {
    STREAM_LAST.fetch_max(
        STREAM_LAST_BEFORE_LOAD.load(Ordering::Relaxed),
        Ordering::Relaxed,
    );
}

/// Raise the server's last token to at least `token`.
pub fn observe(token: u64) {
    LAST_TOKEN.fetch_max(token, Ordering::Relaxed);
    STREAM_LAST.fetch_max(token, Ordering::Relaxed);
}

/// The last token as the server's data and stream tell it (`STREAM_LAST`), saved as the RDB's
/// auxiliary data: what a replica syncing from this RDB, or this server restarted from it,
/// counts replayed grants from. (Tokens of its own earlier epochs above it stay below its
/// epoch file's epoch.)
pub fn last() -> u64 {
    STREAM_LAST.load(Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const E: u64 = 419_000; // about the epoch of the clock in 2026

    #[test]
    fn issues_only_in_a_started_epoch_after_its_marker() {
        let mut s = TokenSource::default();
        assert!(!s.ready());
        assert_eq!(s.issue(), None);
        s.enter(s.next_epoch(0, 1).unwrap());
        assert_eq!((s.epoch(), s.last()), (1, first_of(1)), "the marker");
        assert_eq!(s.issue(), Some(first_of(1) + 1));
        assert_eq!(s.issue(), Some(first_of(1) + 2));
    }

    #[test]
    fn a_new_epoch_is_above_every_epoch_seen_whatever_the_clock() {
        let mut s = TokenSource::new(first_of(E) + 77, 0);
        assert_eq!(s.next_epoch(0, 0), Some(E + 1), "seen tokens");
        assert_eq!(s.next_epoch(E + 5, 0), Some(E + 6), "the epoch file");
        assert_eq!(
            s.next_epoch(0, first_of(E - 1000)),
            Some(E + 1),
            "a clock far behind"
        );
        assert_eq!(
            s.next_epoch(0, first_of(E + 3) + 5),
            Some(E + 4),
            "above the clock"
        );
        s.enter(E + 1);
        s.leave();
        assert_eq!(s.next_epoch(0, 0), Some(E + 2), "its marker was seen");
        let mut replica = TokenSource::default();
        replica.observe(first_of(E + 2)); // LOCK.EPOCH E + 2 from its master
        assert_eq!(replica.next_epoch(0, 0), Some(E + 3));
    }

    #[test]
    fn an_epoch_is_left_with_headroom_for_one_step() {
        let end = first_of(E + 1);
        let mut s = TokenSource::new(end - HEADROOM - 1, E);
        assert!(s.ready());
        s.issue().unwrap();
        assert!(!s.ready(), "the next step could run past the epoch");
        assert_eq!(s.next_epoch(0, 0), Some(E + 1));
        let mut full = TokenSource::new(end - 1, E);
        assert_eq!(full.issue(), None, "never into the next epoch's tokens");
    }

    #[test]
    fn refuses_rather_than_repeat_or_pass_the_bound() {
        let s = TokenSource::new(first_of(MAX_EPOCH), MAX_EPOCH);
        assert_eq!(s.next_epoch(0, 0), None);
        assert_eq!(TokenSource::default().next_epoch(MAX_EPOCH, 0), None);
        assert_eq!(
            TokenSource::default().next_epoch(0, u64::MAX),
            Some(MAX_EPOCH),
            "a clock past 2255 is held at the last epoch"
        );
        let mut last = TokenSource::new(MAX_TOKEN - 1, MAX_EPOCH);
        assert_eq!(last.issue(), Some(MAX_TOKEN));
        assert_eq!(last.issue(), None);
        assert_eq!(last.last(), MAX_TOKEN, "a refused issue changes nothing");
        assert!(in_range(MAX_TOKEN) && !in_range(MAX_TOKEN + 1) && !in_range(0));
    }

    /// One step of a master and its replica (clocks: any reading, independently per step).
    #[derive(Clone, Debug)]
    enum Step {
        /// The master grants.
        Grant(u64),
        /// The replica receives up to this many of the master's next replication records.
        Replicate(usize),
        /// The master is lost with what it did not replicate; the replica is promoted (it
        /// starts an epoch at once); the old master comes back as its replica (full sync).
        Failover(u64),
        /// The master restarts from a snapshot taken `n` grants ago (its epoch file kept) and
        /// starts an epoch at once; its replica full-syncs from it.
        Restart(usize, u64),
    }

    fn step() -> impl Strategy<Value = Step> {
        let clock = 0u64..first_of(E + 2);
        prop_oneof![
            4 => clock.clone().prop_map(Step::Grant),
            2 => (0usize..4).prop_map(Step::Replicate),
            1 => clock.clone().prop_map(Step::Failover),
            1 => (0usize..4, clock).prop_map(|(n, c)| Step::Restart(n, c)),
        ]
    }

    /// A node: its token source and its epoch file; as master, what it has not replicated.
    #[derive(Clone, Debug, Default)]
    struct Node {
        source: TokenSource,
        file: u64,
        stream: std::collections::VecDeque<u64>,
    }

    impl Node {
        /// Start an epoch: stored first, then entered, its marker replicated.
        fn start_epoch(&mut self, clock: u64) {
            let epoch = self.source.next_epoch(self.file, clock).unwrap();
            self.file = epoch;
            self.source.enter(epoch);
            self.stream.push_back(first_of(epoch));
        }

        fn grant(&mut self, clock: u64) -> u64 {
            if !self.source.ready() {
                self.start_epoch(clock);
            }
            let token = self.source.issue().unwrap();
            self.stream.push_back(token);
            token
        }

        /// Follow `master` from a full sync (its RDB carries its last token).
        fn sync_from(&mut self, master: &Node) {
            self.source = TokenSource::new(master.source.last(), 0);
            self.stream.clear();
        }
    }

    proptest! {
        /// Whatever the clocks read, through failovers that lose grants and restarts from
        /// stale snapshots, every token a master issues is above every token issued before,
        /// as long as the replica synced after its master started its epoch (a master starts
        /// one as it starts and as it is promoted, before any grant).
        #[test]
        fn tokens_never_repeat_or_go_backwards(
            first_clock in 0u64..first_of(E + 2),
            steps in proptest::collection::vec(step(), 1..120),
        ) {
            let (mut master, mut replica) = (Node::default(), Node::default());
            master.start_epoch(first_clock);
            replica.sync_from(&master);
            let mut issued: Vec<u64> = Vec::new();
            for step in steps {
                match step {
                    Step::Grant(clock) => {
                        let token = master.grant(clock);
                        let before = issued.iter().max().copied().unwrap_or(0);
                        prop_assert!(token > before, "{} after {}", token, before);
                        issued.push(token);
                    }
                    Step::Replicate(n) => {
                        for _ in 0..n {
                            let Some(t) = master.stream.pop_front() else { break };
                            replica.source.observe(t);
                        }
                    }
                    Step::Failover(clock) => {
                        std::mem::swap(&mut master, &mut replica);
                        master.stream.clear();
                        master.start_epoch(clock);
                        replica.sync_from(&master);
                    }
                    Step::Restart(ago, clock) => {
                        let kept = issued.len().saturating_sub(ago);
                        let snapshot = kept.checked_sub(1).map_or(0, |i| issued[i]);
                        master.source = TokenSource::new(snapshot.min(master.source.last()), 0);
                        master.stream.clear();
                        master.start_epoch(clock);
                        replica.sync_from(&master);
                    }
                }
            }
        }
    }
}
