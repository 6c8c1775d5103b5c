//! One renewal loop per `Locker` (rules 6, 7, 8 and 15 of docs/clients.md): one tokio task
//! renews every live watchdog hold of the locker on one connection of its own (per master on a
//! cluster: `link.rs`), the renewals falling due together in one pipeline, and marks a hold lost, once, when its lease deadline
//! passes with no successful renewal, a renewal answers 0, or the server refuses one. The task
//! runs while the locker has holds, and starts again with the next.
//!
//! A session hold has a loop of its own, on its session's connection (closing that connection
//! ends the hold, so it is never made again).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use futures_util::stream::{FuturesUnordered, StreamExt};
use redis::{RedisError, RedisResult, Value};
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::timeout_at;

use crate::availability::{Availability, RETRY_PAUSE};
use crate::cluster::Conn;
use crate::error::{self, Error, Failure};
use crate::hold::HoldState;
use crate::link::{lock, Link};
use crate::protocol::{self, reason, HoldId};
use crate::schedule::{Renewal, Renewed, Schedule, Ticket};
use crate::source::Source;

/// A hold as the loop knows it.
struct Hold {
    id: HoldId,
    state: Arc<HoldState>,
}

/// A hold's lease when it enters the loop.
pub(crate) struct Lease {
    pub(crate) ttl: Duration,
    /// When the acquire that granted it was sent (for a grant after a wait: when its reply came).
    pub(crate) start: Instant,
    /// The loop renews it (false: a fixed lease, lost at its end unless extended).
    pub(crate) renew: bool,
}

struct Book {
    schedule: Schedule<Hold>,
    /// The loop's task while it runs (it stops when the schedule is empty).
    task: Option<JoinHandle<()>>,
}

struct Shared {
    book: Mutex<Book>,
    wake: Notify,
    /// A batch's answers were settled (extends wait for a renewal in flight: `before_extend`).
    settled: Notify,
    link: Link,
    availability: Arc<Availability>,
    #[cfg(feature = "bench")]
    lags: Mutex<Vec<Duration>>,
}

/// The loop of a locker (or of one session hold).
#[derive(Clone)]
pub(crate) struct Renewals(Arc<Shared>);

/// The turn of a hold's extends (rule 20), one per lock or lock set: they go one at a time, in
/// the order they were made. Two extends sent together could run in one order and be answered
/// in the other (or a caller could poll the first after the second was answered): the first's
/// answer, counted last, would then set the client's deadline later than the server's (rule
/// 15). The mutex is fair: its waiters get it in the order they asked.
#[derive(Default)]
pub(crate) struct ExtendTurn(tokio::sync::Mutex<()>);

/// A hold's turn to extend, given back when dropped: when the extend is answered, fails, is
/// cancelled (its future dropped) or panics.
pub(crate) type Turn<'a> = tokio::sync::MutexGuard<'a, ()>;

impl ExtendTurn {
    /// The turn, once every extend of the hold made before has ended; None if not by `until`.
    pub(crate) async fn take(&self, until: Instant) -> Option<Turn<'_>> {
        timeout_at(until.into(), self.0.lock()).await.ok()
    }
}

/// An extend on its way (rule 15), from its send until its answer is taken (`answered`).
/// Dropped before that (its future dropped by a timeout or a `select!`, or a panic), the
/// extend may have run all the same: it counts as unanswered, as one failed unavailable.
pub(crate) struct ExtendSent<'a> {
    renewals: &'a Renewals,
    ticket: Ticket,
    /// When it was sent (at or before).
    pub(crate) sent: Instant,
    ttl: Duration,
    answered: bool,
}

impl ExtendSent<'_> {
    /// The extend's answer (live or not, or an error, returned), taken: when unavailable, the
    /// lease counts as ending no later than `ttl` from its send.
    pub(crate) fn answered<T>(mut self, answer: Result<T, Error>) -> Result<T, Error> {
        self.answered = true;
        let (ticket, sent, ttl) = (self.ticket, self.sent, self.ttl);
        answer.map_err(|e| self.renewals.extend_failed(ticket, sent, ttl, e))
    }
}

impl Drop for ExtendSent<'_> {
    fn drop(&mut self) {
        if !self.answered {
            let cause = "an extend dropped before its answer (it may have run)".to_string();
            let end = self.sent + self.ttl;
            self.renewals.end_no_later_than(self.ticket, end, cause);
        }
    }
}

/// A batch's outcome: its renewals, when it was sent, and each one's reply.
struct Answered {
    batch: Vec<Renewal>,
    sent: Instant,
    replies: Vec<Reply>,
}

/// What came back for one renewal.
enum Reply {
    Server(RedisResult<Value>),
    /// The link to its node failed (or the node could not be found): the cause.
    Link(String),
    /// No answer before the batch's earliest deadline.
    Silent,
}

impl Renewals {
    /// The loop of a locker whose connections come from `source`.
    pub(crate) fn new(source: Source, availability: Arc<Availability>) -> Self {
        Self::on(Link::server(source), availability)
    }

    /// The loop of one session hold, on its connection.
    pub(crate) fn session(conn: Conn, availability: Arc<Availability>) -> Self {
        Self::on(Link::Session(conn), availability)
    }

    fn on(link: Link, availability: Arc<Availability>) -> Self {
        Self(Arc::new(Shared {
            book: Mutex::new(Book {
                schedule: Schedule::default(),
                task: None,
            }),
            wake: Notify::new(),
            settled: Notify::new(),
            link,
            availability,
            #[cfg(feature = "bench")]
            lags: Mutex::new(Vec::new()),
        }))
    }

    /// Into the loop: renewed every ttl/3 (if `lease.renew`), lost at its deadline otherwise.
    pub(crate) fn add(&self, id: HoldId, state: Arc<HoldState>, lease: Lease) -> Ticket {
        let mut book = self.0.book();
        let hold = Hold { id, state };
        let ticket = book
            .schedule
            .insert(hold, lease.start, lease.ttl, lease.renew);
        // A task of a runtime shut down since is finished: a new one on this runtime.
        if book.task.as_ref().is_none_or(JoinHandle::is_finished) {
            book.task = Some(tokio::spawn(run(self.0.clone())));
        }
        drop(book);
        self.0.wake.notify_one();
        ticket
    }

    /// Out of the loop, in this step: no renewal of it is sent after this, and the reply of one
    /// already sent is ignored (rule 7). False if it had left already (lost).
    pub(crate) fn remove(&self, ticket: Ticket) -> bool {
        self.0.book().schedule.remove(ticket).is_some()
    }

    /// Before an extend of `ticket` to `ttl` is sent (rule 20): the renewals from now on carry
    /// `ttl`, and one already sent by the old ttl is answered first: the two travel on
    /// different connections, and the old ttl run after the extend would cut the lease short
    /// behind the client's back (rule 15). False when that answer has not come by `until`.
    pub(crate) async fn before_extend(
        &self,
        ticket: Ticket,
        ttl: Duration,
        until: Instant,
    ) -> bool {
        let Some(epoch) = self.0.book().schedule.extending(ticket, ttl) else {
            return true; // out of the loop: no renewal to cross
        };
        loop {
            let settled = self.0.settled.notified();
            tokio::pin!(settled);
            settled.as_mut().enable(); // before the look, so no answer settles unseen between
            if !self.0.book().schedule.renewal_before(ticket, epoch) {
                return true;
            }
            if timeout_at(until.into(), settled).await.is_err() {
                return false;
            }
        }
    }

    /// An extend sent at `sent` answered live: the lease ends `ttl` from then (rule 20).
    pub(crate) fn extended(&self, ticket: Ticket, sent: Instant, ttl: Duration) -> bool {
        let extended = self.0.book().schedule.extended(ticket, sent, ttl);
        self.0.wake.notify_one();
        extended
    }

    /// An extend of `ticket` to `ttl`, sent now: answered through the returned guard, or
    /// counted as unanswered if that is dropped first.
    pub(crate) fn extend_sent(&self, ticket: Ticket, ttl: Duration) -> ExtendSent<'_> {
        ExtendSent {
            renewals: self,
            ticket,
            sent: Instant::now(),
            ttl,
            answered: false,
        }
    }

    /// An extend of `ticket` to `ttl`, sent at `sent`, failed with `e`, which it returns. When
    /// unavailable, it may have run all the same and shortened the lease: the deadline becomes
    /// no later than `sent + ttl` (rule 15), the hold renewed at once if that is sooner.
    fn extend_failed(&self, ticket: Ticket, sent: Instant, ttl: Duration, e: Error) -> Error {
        if matches!(e, Error::Unavailable { .. }) {
            self.end_no_later_than(ticket, sent + ttl, e.to_string());
        }
        e
    }

    /// `ticket`'s lease counted as ending no later than `end`, for `cause` (rule 15).
    fn end_no_later_than(&self, ticket: Ticket, end: Instant, cause: String) {
        let mut book = self.0.book();
        book.schedule
            .end_no_later_than(ticket, end, Instant::now(), cause);
        drop(book);
        self.0.wake.notify_one();
    }

    /// The lags of the renewals answered since the last call (feature `bench`).
    #[cfg(feature = "bench")]
    pub(crate) fn take_lags(&self) -> Vec<Duration> {
        std::mem::take(&mut *lock(&self.0.lags))
    }
}

impl Shared {
    fn book(&self) -> MutexGuard<'_, Book> {
        lock(&self.book)
    }

    /// Marks the holds whose lease ended lost, takes the renewals due (with their pipeline and
    /// the time their replies are due by), and says when to look again. `None` when the loop
    /// has nothing left to do (it then stops).
    fn turn(&self, in_flight: usize) -> Option<(Option<Instant>, Option<Batch>)> {
        let mut book = self.book();
        let now = Instant::now();
        for (hold, why) in book.schedule.expired(now) {
            hold.state.lose(&hold.id.key, why);
        }
        let due = book.schedule.take_due(now);
        if book.schedule.is_empty() && in_flight == 0 && due.is_empty() {
            book.task = None;
            return None;
        }
        let batch = (!due.is_empty()).then(|| Batch::of(&book.schedule, due));
        Some((book.schedule.next_wake(), batch))
    }

    /// Sends `batch`, one pipeline per node; the replies are awaited until its earliest
    /// deadline. A node whose link failed, or that answered a retryable reply, is forgotten
    /// (connected again, through Sentinel or the cluster's map, for the next batch).
    async fn send(self: Arc<Self>, batch: Batch) -> Answered {
        let sent = Instant::now();
        let mut replies: Vec<Reply> = batch.cmds.iter().map(|_| Reply::Silent).collect();
        let mut waiting: HashMap<String, Vec<usize>> = HashMap::new();
        let answered = timeout_at(batch.reply_by.into(), async {
            for (i, (key, _)) in batch.cmds.iter().enumerate() {
                match self.link.node(key).await {
                    Ok(node) => waiting.entry(node).or_default().push(i),
                    Err(e) => replies[i] = Reply::Link(e.to_string()),
                }
            }
            let mut groups: FuturesUnordered<_> = waiting
                .iter()
                .map(|(node, group)| self.send_to(node, group, &batch.cmds))
                .collect();
            while let Some((node, group, outcome)) = groups.next().await {
                self.answered(node, group, outcome, &mut replies);
            }
        })
        .await;
        if answered.is_err() {
            for (node, group) in &waiting {
                if group.iter().any(|&i| matches!(replies[i], Reply::Silent)) {
                    self.link.forget(node, None);
                }
            }
        }
        Answered {
            batch: batch.renewals,
            sent,
            replies,
        }
    }

    /// The renewals `group` (indexes into `cmds`) as one pipeline to `node`.
    async fn send_to<'a>(
        &self,
        node: &'a str,
        group: &'a [usize],
        cmds: &[(String, redis::Cmd)],
    ) -> (
        &'a str,
        &'a [usize],
        Result<Vec<RedisResult<Value>>, (Option<u64>, RedisError)>,
    ) {
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        for &i in group {
            pipe.add_command(cmds[i].1.clone());
        }
        let outcome = async {
            let (generation, mut conn) = self
                .link
                .conn(node, &self.availability)
                .await
                .map_err(|e| (None, e))?;
            pipe.query_async(&mut conn)
                .await
                .map_err(|e| (Some(generation), e))
        };
        (node, group, outcome.await)
    }

    /// A node's replies into `replies`.
    fn answered(
        &self,
        node: &str,
        group: &[usize],
        outcome: Result<Vec<RedisResult<Value>>, (Option<u64>, RedisError)>,
        replies: &mut [Reply],
    ) {
        match outcome {
            Ok(answers) => {
                let moved = answers
                    .iter()
                    .any(|a| matches!(a, Err(e) if error::failure(e) == Failure::Unreachable));
                if moved {
                    self.link.forget(node, None);
                }
                for (&i, answer) in group.iter().zip(answers) {
                    replies[i] = Reply::Server(answer);
                }
            }
            Err((generation, e)) => {
                self.link.forget(node, generation);
                for &i in group {
                    replies[i] = Reply::Link(e.to_string());
                }
            }
        }
    }

    /// What a batch's replies do to its holds.
    fn settle(&self, answered: Answered) {
        let Answered {
            batch,
            sent,
            replies,
        } = answered;
        let now = Instant::now();
        let mut book = self.book();
        for (renewal, reply) in batch.iter().zip(replies) {
            let lost = match reply {
                Reply::Server(Ok(Value::Int(live))) if protocol::was_live(live) => {
                    self.availability.answered();
                    if let Renewed::Extended { lag } = book.schedule.renewed(renewal, sent, now) {
                        self.record(lag);
                    }
                    continue;
                }
                Reply::Server(Ok(Value::Int(_))) => reason::RAN_OUT.to_string(),
                Reply::Server(Ok(other)) => {
                    reason::watchdog_failed(&format!("LOCK.EXTEND answered {other:?}"))
                }
                Reply::Server(Err(e)) if error::failure(&e) != Failure::Unreachable => {
                    reason::refused(&protocol::error_reply(&e))
                }
                Reply::Server(Err(e)) => {
                    // Rule 19: this node cannot serve the key now; asked again.
                    book.schedule
                        .failed(renewal, protocol::error_reply(&e), now + RETRY_PAUSE);
                    continue;
                }
                Reply::Link(cause) if self.link.is_session() => reason::session_closed(&cause),
                Reply::Silent if self.link.is_session() => {
                    let cause = "no answer to the renewal".to_string();
                    book.schedule.failed(renewal, cause, now + RETRY_PAUSE);
                    continue;
                }
                Reply::Link(cause) => {
                    self.availability.failed();
                    book.schedule.failed(renewal, cause, now + RETRY_PAUSE);
                    continue;
                }
                Reply::Silent => {
                    self.availability.failed();
                    let cause = "no answer to the renewal".to_string();
                    book.schedule.failed(renewal, cause, now);
                    continue;
                }
            };
            if let Some(hold) = book.schedule.remove(renewal.ticket) {
                hold.state.lose(&hold.id.key, lost);
            }
        }
        drop(book);
        self.settled.notify_waiters();
    }

    #[cfg(feature = "bench")]
    fn record(&self, lag: Duration) {
        lock(&self.lags).push(lag);
    }

    #[cfg(not(feature = "bench"))]
    fn record(&self, _lag: Duration) {}
}

/// The renewals due now, each with its key and command.
struct Batch {
    renewals: Vec<Renewal>,
    cmds: Vec<(String, redis::Cmd)>,
    /// The earliest lease deadline of the batch: no reply is awaited past it (rule 15).
    reply_by: Instant,
}

impl Batch {
    fn of(schedule: &Schedule<Hold>, due: Vec<Renewal>) -> Self {
        let mut renewals = Vec::with_capacity(due.len());
        let mut cmds = Vec::with_capacity(due.len());
        for renewal in due {
            if let Some(hold) = schedule.hold(renewal.ticket) {
                cmds.push((hold.id.key.clone(), protocol::extend(&hold.id, renewal.ttl)));
                renewals.push(renewal);
            }
        }
        let deadlines = renewals.iter().filter_map(|r| schedule.deadline(r.ticket));
        let reply_by = deadlines.min().unwrap_or_else(Instant::now);
        Self {
            renewals,
            cmds,
            reply_by,
        }
    }
}

/// The loop: wakes when a renewal is due, a lease ends, a batch is answered, or a hold came
/// in; sends what is due without waiting for the batches in flight.
async fn run(shared: Arc<Shared>) {
    let mut in_flight = FuturesUnordered::new();
    loop {
        let Some((wake, batch)) = shared.turn(in_flight.len()) else {
            return;
        };
        if let Some(batch) = batch {
            in_flight.push(shared.clone().send(batch));
        }
        let sleep = async {
            match wake {
                Some(at) => tokio::time::sleep_until(at.into()).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = sleep => {}
            _ = shared.wake.notified() => {}
            Some(answered) = in_flight.next(), if !in_flight.is_empty() => {
                shared.settle(answered);
            }
        }
    }
}
