//! One renewal loop per `Locker` (rules 6, 7, 8 and 15 of docs/clients.md): one tokio task
//! renews every live watchdog hold of the locker on one connection of its own, the renewals
//! falling due together in one pipeline, and marks a hold lost, once, when its lease deadline
//! passes with no successful renewal, a renewal answers 0, or the server refuses one. The task
//! runs while the locker has holds, and starts again with the next.
//!
//! A session hold has a loop of its own, on its session's connection (closing that connection
//! ends the hold, so it is never made again).

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use futures_util::stream::{FuturesUnordered, StreamExt};
use redis::aio::MultiplexedConnection;
use redis::{RedisError, RedisResult, Value};
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::timeout_at;

use crate::availability::{Availability, RETRY_PAUSE};
use crate::error::{self, Failure};
use crate::hold::HoldState;
use crate::locker::Source;
use crate::protocol::{self, reason, HoldId};
use crate::schedule::{Renewal, Renewed, Schedule, Ticket};

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

/// Where the loop's renewals go.
#[allow(clippy::large_enum_variant)] // one per loop: its size does not matter
enum Link {
    /// The locker's server (through Sentinel: the master it names on each connect), on a
    /// connection the loop makes itself and makes again when it breaks.
    Server {
        source: Source,
        /// The connection and its generation (a count of those made), so that a failed batch
        /// drops only the one it was sent on.
        conn: Mutex<(u64, Option<MultiplexedConnection>)>,
        /// Held while connecting: one connection made at a time.
        connecting: tokio::sync::Mutex<()>,
    },
    /// A session hold's own connection: when it breaks, the hold is gone.
    Session(MultiplexedConnection),
}

impl Link {
    /// The connection to send on, and its generation.
    async fn conn(
        &self,
        availability: &Availability,
    ) -> Result<(u64, MultiplexedConnection), RedisError> {
        let (source, slot, connecting) = match self {
            Link::Session(conn) => return Ok((0, conn.clone())),
            Link::Server {
                source,
                conn,
                connecting,
            } => (source, conn, connecting),
        };
        let current = || {
            let slot = lock(slot);
            slot.1.clone().map(|conn| (slot.0, conn))
        };
        if let Some(made) = current() {
            return Ok(made);
        }
        let _connecting = connecting.lock().await;
        if let Some(made) = current() {
            return Ok(made);
        }
        let conn = source.connect(availability).await?;
        let mut slot = lock(slot);
        *slot = (slot.0 + 1, Some(conn.clone()));
        Ok((slot.0, conn))
    }

    /// The connection of `generation` failed: the next batch makes a new one.
    fn forget(&self, generation: u64) {
        if let Link::Server { conn, .. } = self {
            let mut slot = lock(conn);
            if slot.0 == generation {
                slot.1 = None;
            }
        }
    }
}

/// `mutex`'s content; poisoned only by a panic elsewhere, and still whole.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

struct Book {
    schedule: Schedule<Hold>,
    /// The loop's task while it runs (it stops when the schedule is empty).
    task: Option<JoinHandle<()>>,
}

struct Shared {
    book: Mutex<Book>,
    wake: Notify,
    link: Link,
    availability: Arc<Availability>,
    #[cfg(feature = "bench")]
    lags: Mutex<Vec<Duration>>,
}

/// The loop of a locker (or of one session hold).
#[derive(Clone)]
pub(crate) struct Renewals(Arc<Shared>);

/// A batch's outcome: its renewals, when it was sent, and the pipeline's replies.
struct Answered {
    batch: Vec<Renewal>,
    generation: u64,
    sent: Instant,
    replies: Result<Vec<RedisResult<Value>>, BatchFailure>,
}

enum BatchFailure {
    Link(RedisError),
    /// No answer before the earliest deadline of the batch.
    Silent,
}

impl Renewals {
    /// The loop of a locker whose connections come from `source`.
    pub(crate) fn new(source: Source, availability: Arc<Availability>) -> Self {
        let link = Link::Server {
            source,
            conn: Mutex::new((0, None)),
            connecting: tokio::sync::Mutex::new(()),
        };
        Self::on(link, availability)
    }

    /// The loop of one session hold, on its connection.
    pub(crate) fn session(conn: MultiplexedConnection, availability: Arc<Availability>) -> Self {
        Self::on(Link::Session(conn), availability)
    }

    fn on(link: Link, availability: Arc<Availability>) -> Self {
        Self(Arc::new(Shared {
            book: Mutex::new(Book {
                schedule: Schedule::default(),
                task: None,
            }),
            wake: Notify::new(),
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

    /// An extend sent at `sent` answered live: the lease ends `ttl` from then (rule 20).
    pub(crate) fn extended(&self, ticket: Ticket, sent: Instant, ttl: Duration) -> bool {
        let extended = self.0.book().schedule.extended(ticket, sent, ttl);
        self.0.wake.notify_one();
        extended
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
            hold.state.mark_lost(why);
        }
        let due = book.schedule.take_due(now);
        if book.schedule.is_empty() && in_flight == 0 && due.is_empty() {
            book.task = None;
            return None;
        }
        let batch = (!due.is_empty()).then(|| Batch::of(&book.schedule, due));
        Some((book.schedule.next_wake(), batch))
    }

    /// Sends `batch` as one pipeline; its replies are awaited until its earliest deadline.
    async fn send(self: Arc<Self>, batch: Batch) -> Answered {
        let sent = Instant::now();
        let mut generation = 0;
        let replies = timeout_at(batch.reply_by.into(), async {
            let (made, mut conn) = self.link.conn(&self.availability).await?;
            generation = made;
            batch.pipe.query_async(&mut conn).await
        })
        .await;
        let replies = match replies {
            Ok(Ok(replies)) => Ok(replies),
            Ok(Err(e)) => Err(BatchFailure::Link(e)),
            Err(_) => Err(BatchFailure::Silent),
        };
        Answered {
            batch: batch.renewals,
            generation,
            sent,
            replies,
        }
    }

    /// What a batch's answer does to its holds.
    fn settle(&self, answered: Answered) {
        let Answered {
            batch,
            generation,
            sent,
            replies,
        } = answered;
        let cause = match replies {
            Ok(replies) => {
                if self.each(&batch, sent, replies) {
                    self.link.forget(generation);
                }
                return;
            }
            Err(BatchFailure::Link(e)) => e.to_string(),
            Err(BatchFailure::Silent) => "no answer to the renewal".to_string(),
        };
        self.availability.failed();
        self.link.forget(generation);
        let session = matches!(self.link, Link::Session(_));
        let mut book = self.book();
        for renewal in &batch {
            if session {
                if let Some(hold) = book.schedule.remove(renewal.ticket) {
                    hold.state.mark_lost(reason::session_closed(&cause));
                }
            } else {
                let retry = Instant::now() + RETRY_PAUSE;
                book.schedule.failed(renewal, cause.clone(), retry);
            }
        }
    }

    /// Each renewal's reply; true when one said this server cannot serve the key now (rule 19:
    /// the connection is made again, through Sentinel to the current master).
    fn each(&self, batch: &[Renewal], sent: Instant, replies: Vec<RedisResult<Value>>) -> bool {
        let (now, mut reconnect) = (Instant::now(), false);
        let mut book = self.book();
        for (renewal, reply) in batch.iter().zip(replies) {
            let outcome = match reply {
                Ok(Value::Int(live)) if protocol::was_live(live) => {
                    self.availability.answered();
                    if let Renewed::Extended { lag } = book.schedule.renewed(renewal, sent, now) {
                        self.record(lag);
                    }
                    continue;
                }
                Ok(Value::Int(_)) => reason::RAN_OUT.to_string(),
                Ok(other) => reason::watchdog_failed(&format!("LOCK.EXTEND answered {other:?}")),
                Err(e) if error::failure(&e) == Failure::Unreachable => {
                    reconnect = true;
                    let retry = now + RETRY_PAUSE;
                    book.schedule
                        .failed(renewal, protocol::error_reply(&e), retry);
                    continue;
                }
                Err(e) => reason::refused(&protocol::error_reply(&e)),
            };
            if let Some(hold) = book.schedule.remove(renewal.ticket) {
                hold.state.mark_lost(outcome);
            }
        }
        reconnect
    }

    #[cfg(feature = "bench")]
    fn record(&self, lag: Duration) {
        lock(&self.lags).push(lag);
    }

    #[cfg(not(feature = "bench"))]
    fn record(&self, _lag: Duration) {}
}

/// The renewals due now, as one pipeline.
struct Batch {
    renewals: Vec<Renewal>,
    pipe: redis::Pipeline,
    /// The earliest lease deadline of the batch: no reply is awaited past it (rule 15).
    reply_by: Instant,
}

impl Batch {
    fn of(schedule: &Schedule<Hold>, renewals: Vec<Renewal>) -> Self {
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        for renewal in &renewals {
            if let Some(hold) = schedule.hold(renewal.ticket) {
                pipe.add_command(protocol::extend(&hold.id, renewal.ttl));
            }
        }
        let deadlines = renewals.iter().filter_map(|r| schedule.deadline(r.ticket));
        let reply_by = deadlines.min().unwrap_or_else(Instant::now);
        Self {
            renewals,
            pipe,
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
