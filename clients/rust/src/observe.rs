//! Observing an election (rule 22 of docs/clients.md): a `Stream` of leaders, the current one
//! first and then each change, from one connection blocked in `LOCK.WATCH key AFTER cursor
//! WAIT`; after a broken link or a retryable reply it connects again and passes its last
//! cursor, so the next leader it tells is the server's latest.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures_util::stream::{self, Stream, StreamExt};
use redis::{RedisError, Value};
use tokio::time::timeout;

use crate::availability::RETRY_PAUSE;
use crate::cluster::Conn;
use crate::election::{leader_of, Election, Leader};
use crate::error::Failure;
use crate::protocol::{self, FIRST_CURSOR};
use crate::Error;

/// The longest a `LOCK.WATCH` blocks before it is sent again (it answers nil then): a server
/// that froze is noticed within this and min(1 s, bound) for the reply.
const LONGEST_WATCH: Duration = Duration::from_secs(5);

impl Election {
    /// The leaders of this election as a `Stream`: the current one (`None`: nobody leads) at
    /// once, then each change, never the same one twice in a row, on a connection of its own.
    /// A broken link, a server that stops answering or a retryable reply (rule 19) is
    /// connected again with the last cursor, so the next item is the server's latest leader
    /// (leaders that came and went meanwhile may be skipped; the latest never is). Once the
    /// server has not answered for the locker's bound, one `Err(Error::Unavailable)` says so,
    /// and it goes on trying; any other error reply (`WRONGTYPE`) is the last item. Dropping
    /// the stream closes its connection.
    pub fn observe(&self) -> Observer {
        let watch = Watch {
            election: self.clone(),
            conn: None,
            cursor: FIRST_CURSOR.to_string(),
            told: None,
            failing_since: None,
            said_unavailable: false,
            ended: false,
        };
        let leaders = stream::unfold(watch, |mut watch| async move {
            let item = watch.next().await?;
            Some((item, watch))
        });
        Observer(Box::pin(leaders))
    }
}

/// The stream `Election::observe` returns: items are `Ok(Some(leader))`, `Ok(None)` (nobody
/// leads) or an error. `next().await` without `StreamExt`.
pub struct Observer(Pin<Box<dyn Stream<Item = Result<Option<Leader>, Error>> + Send>>);

impl Observer {
    /// The next change (`StreamExt::next` without the import).
    pub async fn next(&mut self) -> Option<Result<Option<Leader>, Error>> {
        self.0.next().await
    }
}

impl Stream for Observer {
    type Item = Result<Option<Leader>, Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.0.as_mut().poll_next(cx)
    }
}

impl std::fmt::Debug for Observer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Observer")
    }
}

/// The observer's state between items.
struct Watch {
    election: Election,
    conn: Option<Conn>,
    /// The last cursor the server gave (`0`: none yet).
    cursor: String,
    /// The last leader told (`None`: nothing told yet).
    told: Option<Option<Leader>>,
    /// The first failure since the server last answered.
    failing_since: Option<Instant>,
    /// `Error::Unavailable` was told for this outage.
    said_unavailable: bool,
    ended: bool,
}

/// One `LOCK.WATCH`'s outcome.
enum Step {
    /// The holders (as a leader, or none).
    Holders(Option<Leader>),
    /// Nothing new (nil).
    Same,
    /// The link broke, the server did not answer, or it cannot serve the key now.
    Broken(RedisError),
    /// No answer by the time it was due (the server froze, or the link is cut).
    Silent { due: Instant },
    /// The server refused (the stream's last item).
    Refused(Error),
}

impl Watch {
    async fn next(&mut self) -> Option<Result<Option<Leader>, Error>> {
        if self.ended {
            return None;
        }
        loop {
            let step = self.step().await;
            let locker = &self.election.locker;
            let availability = &locker.availability;
            let failed = match step {
                Step::Holders(leader) => {
                    self.answered();
                    if self.told.as_ref() != Some(&leader) {
                        self.told = Some(leader.clone());
                        return Some(Ok(leader));
                    }
                    continue;
                }
                Step::Same => {
                    self.answered();
                    continue;
                }
                Step::Refused(e) => {
                    self.ended = true;
                    return Some(Err(e));
                }
                Step::Broken(e) => {
                    self.failing_since.get_or_insert_with(Instant::now);
                    availability.error_from(e)
                }
                Step::Silent { due } => {
                    // Not answering since its reply was due (a watch blocks until then).
                    let since = *self.failing_since.get_or_insert(due);
                    availability.silence(since.elapsed())
                }
            };
            self.conn = None;
            locker.forget().await;
            availability.failed();
            let since = self.failing_since.unwrap_or_else(Instant::now);
            if since.elapsed() >= availability.bound() && !self.said_unavailable {
                self.said_unavailable = true;
                return Some(Err(failed));
            }
            tokio::time::sleep(RETRY_PAUSE).await;
        }
    }

    fn answered(&mut self) {
        self.failing_since = None;
        self.said_unavailable = false;
        self.election.locker.availability.answered();
    }

    /// One `LOCK.WATCH key AFTER cursor WAIT w` (a connection made first if there is none).
    async fn step(&mut self) -> Step {
        let locker = &self.election.locker;
        let bound = locker.availability.bound();
        let started = Instant::now();
        let mut conn = match self.conn.clone() {
            Some(conn) => conn,
            None => match timeout(bound, locker.dedicated(&self.election.key)).await {
                Err(_) => return Step::Silent { due: started },
                Ok(Err(e)) => return self.judge_error(e),
                Ok(Ok(conn)) => {
                    self.conn = Some(conn.clone());
                    conn
                }
            },
        };
        let wait = LONGEST_WATCH.min(bound / 2).max(Duration::from_millis(1));
        let cmd = protocol::watch(&self.election.key, &self.cursor, Some(wait));
        let due = Instant::now() + wait;
        let reply = timeout(
            wait + locker.reply_grace(),
            cmd.query_async::<Value>(&mut conn),
        );
        let reply = match reply.await {
            Err(_) => return Step::Silent { due },
            Ok(Err(e)) => return self.judge_error(e),
            Ok(Ok(reply)) => reply,
        };
        match protocol::watched(&reply) {
            Ok(None) => Step::Same,
            Ok(Some(watched)) => {
                self.cursor = watched.cursor;
                Step::Holders(leader_of(watched.exclusive))
            }
            Err(other) => Step::Refused(locker.availability.error(format!(
                "not Redis with the redis-lock module (LOCK.WATCH answered {other})"
            ))),
        }
    }

    fn judge_error(&self, e: RedisError) -> Step {
        let availability = &self.election.locker.availability;
        match self.election.locker.failure(&e) {
            Failure::Unreachable => Step::Broken(e),
            Failure::NotLockService => Step::Refused(
                availability.error(format!("not Redis with the redis-lock module ({e})")),
            ),
            Failure::Refused => Step::Refused(e.into()),
        }
    }
}
