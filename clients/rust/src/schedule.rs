//! The renewal loop's timing, without I/O (rules 6, 15 and 20 of docs/clients.md): each hold's
//! lease deadline and next renewal, which renewals are due now (with those at most a tenth of
//! their interval early, to share the pipeline), which leases ended, and each renewal's lag.

use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

use crate::protocol::reason;

/// A hold in the schedule.
pub(crate) type Ticket = u64;

/// What `hold`'s lease is, as the client counts it.
struct Entry<T> {
    hold: T,
    ttl: Duration,
    /// Renewed by the loop (false: a fixed lease, ended by its deadline unless extended).
    renew: bool,
    /// The send time of the acquire or of the last renewal that succeeded, plus the ttl.
    deadline: Instant,
    /// When the next renewal goes (after a failure: when it is tried again).
    due: Instant,
    /// When the next renewal fell due: the last success's send time plus ttl/3 (for the lag).
    fell_due: Instant,
    /// The epoch of the renewal sent whose reply is not in (None: none is).
    in_flight: Option<u64>,
    /// Counts extends, so a renewal sent before one does not undo it.
    epoch: u64,
    /// The last failure's cause, until a renewal succeeds.
    cause: Option<String>,
}

/// A renewal taken out of the schedule to be sent.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Renewal {
    pub(crate) ticket: Ticket,
    pub(crate) ttl: Duration,
    epoch: u64,
}

/// What the loop does with a renewal's answer.
pub(crate) enum Renewed {
    /// The lease runs ttl from the send; `lag`: the reply's arrival after it fell due.
    Extended { lag: Duration },
    /// The hold is no longer in the schedule (released or lost): the answer is ignored.
    Gone,
}

pub(crate) struct Schedule<T> {
    entries: HashMap<Ticket, Entry<T>>,
    /// Holds waiting for their next renewal (not in flight), by when it is due.
    dues: BTreeSet<(Instant, Ticket)>,
    /// Every hold, by its lease deadline.
    deadlines: BTreeSet<(Instant, Ticket)>,
    next: Ticket,
}

impl<T> Default for Schedule<T> {
    fn default() -> Self {
        Self {
            entries: HashMap::new(),
            dues: BTreeSet::new(),
            deadlines: BTreeSet::new(),
            next: 0,
        }
    }
}

impl<T> Schedule<T> {
    /// A hold whose lease of `ttl` began at `start`; the first renewal comes ttl/3 later.
    pub(crate) fn insert(&mut self, hold: T, start: Instant, ttl: Duration, renew: bool) -> Ticket {
        let ticket = self.next;
        self.next += 1;
        let due = start + ttl / 3;
        let entry = Entry {
            hold,
            ttl,
            renew,
            deadline: start + ttl,
            due,
            fell_due: due,
            in_flight: None,
            epoch: 0,
            cause: None,
        };
        self.deadlines.insert((entry.deadline, ticket));
        if renew {
            self.dues.insert((due, ticket));
        }
        self.entries.insert(ticket, entry);
        ticket
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub(crate) fn hold(&self, ticket: Ticket) -> Option<&T> {
        self.entries.get(&ticket).map(|e| &e.hold)
    }

    pub(crate) fn deadline(&self, ticket: Ticket) -> Option<Instant> {
        self.entries.get(&ticket).map(|e| e.deadline)
    }

    /// Out of the schedule (released, or lost): no renewal of it is taken after this.
    pub(crate) fn remove(&mut self, ticket: Ticket) -> Option<T> {
        let entry = self.entries.remove(&ticket)?;
        self.deadlines.remove(&(entry.deadline, ticket));
        self.dues.remove(&(entry.due, ticket));
        Some(entry.hold)
    }

    /// The holds whose deadline passed by `now`, out of the schedule, each with its loss reason.
    pub(crate) fn expired(&mut self, now: Instant) -> Vec<(T, String)> {
        let ended: Vec<Ticket> = self
            .deadlines
            .range(..=(now, Ticket::MAX))
            .map(|&(_, ticket)| ticket)
            .collect();
        let mut lost = Vec::with_capacity(ended.len());
        for ticket in ended {
            let why = self.entries.get(&ticket).map(Self::why_ended);
            if let (Some(why), Some(hold)) = (why, self.remove(ticket)) {
                lost.push((hold, why));
            }
        }
        lost
    }

    fn why_ended(entry: &Entry<T>) -> String {
        match (&entry.cause, entry.renew, entry.in_flight.is_some()) {
            (_, false, _) => reason::FIXED_LEASE_ENDED.to_string(),
            (Some(cause), true, _) => reason::unreached(cause),
            (None, true, true) => reason::unreached("no answer to the renewal"),
            (None, true, false) => reason::unreached("no renewal was sent in time"),
        }
    }

    /// The renewals to send now, marked in flight: none unless one is due; with it, every one
    /// due within a tenth of its interval (never later than due, at most that much early).
    pub(crate) fn take_due(&mut self, now: Instant) -> Vec<Renewal> {
        match self.dues.first() {
            Some(&(due, _)) if due <= now => {}
            _ => return Vec::new(),
        }
        let mut taken = Vec::new();
        for &(due, ticket) in &self.dues {
            let Some(entry) = self.entries.get(&ticket) else {
                continue;
            };
            if due > now + entry.ttl / 30 {
                break; // a tenth of the interval (ttl/3) early at most
            }
            taken.push((due, ticket));
        }
        let mut renewals = Vec::with_capacity(taken.len());
        for key in taken {
            self.dues.remove(&key);
            if let Some(entry) = self.entries.get_mut(&key.1) {
                entry.in_flight = Some(entry.epoch);
                renewals.push(Renewal {
                    ticket: key.1,
                    ttl: entry.ttl,
                    epoch: entry.epoch,
                });
            }
        }
        renewals
    }

    /// `renewal`, sent at `sent`, answered that the hold was live, at `now`.
    pub(crate) fn renewed(&mut self, renewal: &Renewal, sent: Instant, now: Instant) -> Renewed {
        let Some(entry) = self.entries.get_mut(&renewal.ticket) else {
            return Renewed::Gone;
        };
        let lag = now.saturating_duration_since(entry.fell_due);
        self.deadlines.remove(&(entry.deadline, renewal.ticket));
        if renewal.epoch == entry.epoch {
            entry.deadline = sent + renewal.ttl;
            entry.due = sent + renewal.ttl / 3;
            entry.fell_due = entry.due;
        } else {
            // Sent before an extend by another ttl: it may have run last, and the lease may end
            // sooner than the next renewal by the new ttl would come, so that one goes now.
            entry.deadline = entry.deadline.min(sent + renewal.ttl);
            entry.due = now;
            entry.fell_due = now;
        }
        entry.in_flight = None;
        entry.cause = None;
        self.deadlines.insert((entry.deadline, renewal.ticket));
        self.dues.insert((entry.due, renewal.ticket));
        Renewed::Extended { lag }
    }

    /// `renewal` failed with `cause` (the link, or a retryable reply): tried again at `retry`,
    /// while the deadline allows.
    pub(crate) fn failed(&mut self, renewal: &Renewal, cause: String, retry: Instant) {
        let Some(entry) = self.entries.get_mut(&renewal.ticket) else {
            return;
        };
        self.dues.remove(&(entry.due, renewal.ticket));
        entry.in_flight = None;
        entry.cause = Some(cause);
        entry.due = retry;
        self.dues.insert((retry, renewal.ticket));
    }

    /// Before an extend to `ttl` is sent (rule 20): the renewals taken from now on carry `ttl`,
    /// and the answers of those taken before are stale. The extend's epoch (for
    /// `renewal_before`); None when the hold is no longer in the schedule.
    pub(crate) fn extending(&mut self, ticket: Ticket, ttl: Duration) -> Option<u64> {
        let entry = self.entries.get_mut(&ticket)?;
        entry.ttl = ttl;
        entry.epoch += 1;
        Some(entry.epoch)
    }

    /// Whether a renewal taken before the extend of `epoch` still awaits its answer (the extend
    /// is not sent until it is in: the two would cross).
    pub(crate) fn renewal_before(&self, ticket: Ticket, epoch: u64) -> bool {
        let sent = self.entries.get(&ticket).and_then(|e| e.in_flight);
        sent.is_some_and(|sent| sent < epoch)
    }

    /// An extend to `ttl` (see `extending`), sent at `sent`, answered live (rule 20): the lease
    /// ends `ttl` from then. A renewal by `ttl` answered after this may move the deadline to
    /// its own send plus `ttl`: the server's lease ends no sooner either way. False when the
    /// hold is no longer in the schedule.
    pub(crate) fn extended(&mut self, ticket: Ticket, sent: Instant, ttl: Duration) -> bool {
        let Some(entry) = self.entries.get_mut(&ticket) else {
            return false;
        };
        self.deadlines.remove(&(entry.deadline, ticket));
        self.dues.remove(&(entry.due, ticket));
        entry.deadline = sent + ttl;
        entry.due = sent + ttl / 3;
        entry.fell_due = entry.due;
        entry.cause = None;
        self.deadlines.insert((entry.deadline, ticket));
        if entry.renew && entry.in_flight.is_none() {
            self.dues.insert((entry.due, ticket));
        }
        true
    }

    /// An extend that got no answer may have run (rule 15): the deadline becomes no later than
    /// `end`, its send plus its ttl. When that is sooner, a renewed hold is renewed at `now` (by
    /// the extend's ttl: a hold the server still has stays held), and `cause` is why it is lost
    /// if no renewal gets through by then; a fixed lease ends then.
    pub(crate) fn end_no_later_than(
        &mut self,
        ticket: Ticket,
        end: Instant,
        now: Instant,
        cause: String,
    ) {
        let Some(entry) = self.entries.get_mut(&ticket) else {
            return;
        };
        if end >= entry.deadline {
            return;
        }
        self.deadlines.remove(&(entry.deadline, ticket));
        entry.deadline = end;
        self.deadlines.insert((end, ticket));
        entry.cause = Some(cause);
        // Waiting for its renewal (not a fixed lease, none in flight: one taken since the
        // extend was called carries its ttl already).
        if self.dues.remove(&(entry.due, ticket)) {
            entry.due = now;
            entry.fell_due = now;
            self.dues.insert((now, ticket));
        }
    }

    /// When the loop must look again: the next renewal due or the next lease deadline.
    pub(crate) fn next_wake(&self) -> Option<Instant> {
        let due = self.dues.first().map(|&(at, _)| at);
        let deadline = self.deadlines.first().map(|&(at, _)| at);
        due.into_iter().chain(deadline).min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TTL: Duration = Duration::from_secs(3);
    const PERIOD: Duration = Duration::from_secs(1);

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// A schedule of one renewed hold, "a", granted now.
    fn one() -> (Instant, Schedule<&'static str>, Ticket) {
        let t0 = Instant::now();
        let mut s = Schedule::default();
        let a = s.insert("a", t0, TTL, true);
        (t0, s, a)
    }

    #[test]
    fn the_first_renewal_is_due_a_third_of_the_ttl_after_the_start() {
        let t0 = Instant::now();
        let mut s = Schedule::default();
        s.insert("a", t0, TTL, true);
        assert_eq!(s.next_wake(), Some(t0 + PERIOD));
        assert!(
            s.take_due(t0 + PERIOD - ms(1)).is_empty(),
            "not before it is due"
        );
        assert_eq!(s.take_due(t0 + PERIOD).len(), 1);
        assert!(
            s.take_due(t0 + PERIOD).is_empty(),
            "in flight: not taken twice"
        );
    }

    #[test]
    fn renewals_due_within_a_tenth_of_the_interval_join_the_batch() {
        let t0 = Instant::now();
        let mut s = Schedule::default();
        s.insert("due", t0, TTL, true);
        s.insert("early", t0 + PERIOD / 10, TTL, true); // due a tenth later: joins
        s.insert("later", t0 + PERIOD / 10 + ms(1), TTL, true); // does not
        let taken = s.take_due(t0 + PERIOD);
        let names: Vec<_> = taken.iter().map(|r| *s.hold(r.ticket).unwrap()).collect();
        assert_eq!(names, ["due", "early"]);
        // Nothing goes early on its own: the one left waits until it is due.
        assert!(s.take_due(t0 + PERIOD + ms(50)).is_empty());
    }

    #[test]
    fn a_success_moves_the_deadline_to_its_send_time_plus_the_ttl() {
        let t0 = Instant::now();
        let mut s = Schedule::default();
        s.insert("a", t0, TTL, true);
        let r = s.take_due(t0 + PERIOD)[0];
        let sent = t0 + PERIOD;
        let lag = match s.renewed(&r, sent, sent + ms(30)) {
            Renewed::Extended { lag } => lag,
            Renewed::Gone => panic!("in the schedule"),
        };
        assert_eq!(lag, ms(30), "the reply's arrival after it fell due");
        assert!(s.expired(t0 + TTL + ms(500)).is_empty(), "renewed");
        assert_eq!(s.next_wake(), Some(sent + PERIOD));
        let lost = s.expired(sent + TTL);
        assert_eq!(lost.len(), 1, "lost at the new deadline");
    }

    #[test]
    fn a_lease_with_no_success_ends_at_its_deadline_with_the_last_cause() {
        let t0 = Instant::now();
        let mut s = Schedule::default();
        s.insert("renewed", t0, TTL, true);
        s.insert("fixed", t0, TTL, false);
        let r = s.take_due(t0 + PERIOD)[0];
        s.failed(&r, "connection refused".into(), t0 + PERIOD + ms(50));
        assert_eq!(s.next_wake(), Some(t0 + PERIOD + ms(50)), "tried again");
        assert!(s.expired(t0 + TTL - ms(1)).is_empty());
        let mut lost = s.expired(t0 + TTL);
        lost.sort();
        let expected = [
            ("fixed", reason::FIXED_LEASE_ENDED.to_string()),
            ("renewed", reason::unreached("connection refused")),
        ];
        assert_eq!(lost, expected);
        assert!(s.is_empty() && s.next_wake().is_none());
    }

    #[test]
    fn a_renewal_of_a_removed_hold_is_ignored() {
        let (t0, mut s, a) = one();
        let r = s.take_due(t0 + PERIOD)[0];
        assert_eq!(s.remove(a), Some("a"));
        assert!(matches!(s.renewed(&r, t0, t0), Renewed::Gone));
        assert!(s.is_empty() && s.next_wake().is_none());
    }

    #[test]
    fn an_extend_sets_the_deadline_and_the_interval() {
        let (t0, mut s, a) = one();
        let sent = t0 + ms(100);
        assert!(s.extending(a, ms(600)).is_some());
        assert!(s.extended(a, sent, ms(600)), "shorter than before");
        assert_eq!(
            s.next_wake(),
            Some(sent + ms(200)),
            "renewed by the new ttl"
        );
        let r = s.take_due(sent + ms(200))[0];
        assert_eq!(r.ttl, ms(600));
        assert_eq!(s.expired(sent + ms(600)).len(), 1);
        assert!(!s.extended(a, sent, TTL), "gone: false");
    }

    #[test]
    fn an_extend_waits_for_a_renewal_by_the_old_ttl_only() {
        let (t0, mut s, a) = one();
        let old = s.take_due(t0 + PERIOD)[0];
        let epoch = s.extending(a, ms(900)).unwrap();
        assert!(
            s.renewal_before(a, epoch),
            "sent by the old ttl: waited for"
        );
        let answered = t0 + PERIOD + ms(20);
        s.renewed(&old, t0 + PERIOD, answered);
        assert!(!s.renewal_before(a, epoch), "answered");
        let new = s.take_due(answered)[0];
        assert_eq!(new.ttl, ms(900), "taken after the call: the new ttl");
        assert!(!s.renewal_before(a, epoch), "not waited for");
        assert_eq!(s.extending(a, TTL), Some(epoch + 1));
        assert!(
            s.renewal_before(a, epoch + 1),
            "a later extend waits for it"
        );
        assert_eq!(s.remove(a), Some("a"));
        assert!(!s.renewal_before(a, epoch + 1), "gone: nothing to wait for");
        assert!(s.extending(a, TTL).is_none());
    }

    #[test]
    fn a_renewal_by_the_old_ttl_caps_the_deadline_and_the_next_goes_at_once() {
        let (t0, mut s, a) = one();
        let old = s.take_due(t0 + PERIOD)[0]; // 3 s
        s.extending(a, Duration::from_secs(30)); // renewed every 10 s: too late for 3 s
        let answered = t0 + PERIOD + ms(20);
        s.renewed(&old, t0 + PERIOD, answered);
        assert_eq!(
            s.next_wake(),
            Some(answered),
            "renewed by the new ttl at once"
        );
        let new = s.take_due(answered)[0];
        assert!(s.expired(t0 + TTL - ms(1)).is_empty());
        s.renewed(&new, answered, answered + ms(20));
        assert_eq!(s.deadline(a), Some(answered + Duration::from_secs(30)));
    }

    #[test]
    fn an_unanswered_extend_caps_the_deadline_and_the_next_renewal_goes_at_once() {
        let (t0, mut s, a) = one();
        let fixed = s.insert("fixed", t0, TTL, false);
        let (sent, failed) = (t0 + ms(100), t0 + ms(150));
        s.extending(a, ms(600));
        s.end_no_later_than(a, sent + ms(600), failed, "cut".into());
        s.end_no_later_than(fixed, sent + ms(600), failed, "cut".into());
        s.end_no_later_than(a, sent + TTL, failed, "later".into()); // never moved later
        assert_eq!(s.deadline(a), Some(sent + ms(600)));
        assert_eq!(s.next_wake(), Some(failed), "renewed at once");
        let taken = s.take_due(failed);
        assert_eq!(taken.len(), 1, "the fixed lease is not renewed");
        assert_eq!(taken[0].ttl, ms(600), "by the extend's ttl");
        let mut lost = s.expired(sent + ms(600));
        lost.sort();
        let expected = [
            ("a", reason::unreached("cut")),
            ("fixed", reason::FIXED_LEASE_ENDED.to_string()),
        ];
        assert_eq!(lost, expected, "the renewal not answered by then");
    }

    #[test]
    fn a_renewal_sent_before_an_extend_never_lengthens_the_lease() {
        let (t0, mut s, a) = one();
        let r = s.take_due(t0 + PERIOD)[0]; // the old ttl, 3 s
        let extend_sent = t0 + PERIOD + ms(10);
        s.extending(a, ms(900));
        s.extended(a, extend_sent, ms(900));
        s.renewed(&r, t0 + PERIOD, t0 + PERIOD + ms(20));
        assert!(s.expired(extend_sent + ms(899)).is_empty());
        assert_eq!(
            s.expired(extend_sent + ms(900)).len(),
            1,
            "the earlier deadline"
        );
    }
}
