//! Randomized checks, run by `make test-faults` for a bounded time with a printed seed
//! (`LOCK_FUZZ_SEED=<seed>` replays a run, `LOCK_FUZZ_SECS` sets its length):
//! - argument fuzzing of every command with binary arguments over RESP2 and RESP3: every reply
//!   is a value or a Redis-style error, the connection stays in step, nothing panics;
//! - random operation histories checked step by step against a model of the locks;
//! - lock sets taken by many clients at once (`sets.rs`).

mod sets;

use redis_lock_harness::*;
use std::collections::HashMap;
use std::time::{Duration, Instant};

pub struct Rng(u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

pub fn seeded(test: &str) -> (Rng, Duration) {
    let seed = std::env::var("LOCK_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| now_us() as u64 | 1);
    let secs = std::env::var("LOCK_FUZZ_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(15);
    println!("{test}: seed {seed} (replay with LOCK_FUZZ_SEED={seed}), {secs} s");
    (Rng(seed), Duration::from_secs(secs))
}

const COMMANDS: [&[u8]; 11] = [
    b"LOCK.ACQUIRE",
    b"LOCK.MACQUIRE",
    b"LOCK.MRELEASE",
    b"LOCK.RELEASE",
    b"LOCK.EXTEND",
    b"LOCK.FENCE",
    b"LOCK.INFO",
    b"LOCK.FORCERELEASE",
    b"LOCK.APPLY",
    b"LOCK.APPLYSTATE",
    b"LOCK.WATCH",
];
const NUMBERS: [&[u8]; 14] = [
    b"0",
    b"-1",
    b"1",
    b"50",
    b"1000",
    b"9223372036854775807",
    b"-9223372036854775808",
    b"18446744073709551616",
    b"9007199254740991",
    b"9007199254740992",
    b"1e3",
    b" 5",
    b"+5",
    b"",
];
const WORDS: [&[u8]; 13] = [
    b"WAIT",
    b"wait",
    b"COUNT",
    b"*",
    b"SHARED",
    b"k\x00",
    b"LIMIT",
    b"permits",
    b"\x03\x00\x00\x00",
    b"AFTER",
    b"free",
    b"foreign",
    b"9007199254740991-2",
];

fn random_arg(rng: &mut Rng) -> Vec<u8> {
    match rng.below(4) {
        0 => rng.pick(&NUMBERS).to_vec(),
        1 => rng.pick(&WORDS).to_vec(),
        2 => format!("k{}", rng.below(4)).into_bytes(),
        _ => (0..rng.below(12)).map(|_| rng.next_u64() as u8).collect(),
    }
}

#[test]
#[ignore = "randomized: run by make test-faults"]
fn fuzz_arguments_of_every_command() {
    let (mut rng, run_for) = seeded("fuzz_arguments_of_every_command");
    let s = Server::start();
    let mut cons = [s.con(), s.con3()];
    let started = Instant::now();
    let mut sent = 0u64;
    while started.elapsed() < run_for {
        let con = &mut cons[rng.below(2)];
        let mut args: Vec<Vec<u8>> = vec![rng.pick(&COMMANDS).to_vec()];
        for _ in 0..rng.below(8) {
            let arg = random_arg(&mut rng);
            let was_wait = arg.eq_ignore_ascii_case(b"wait");
            args.push(arg);
            if was_wait {
                // Keep blocking short: a WAIT timeout of 1..50 ms.
                args.push((1 + rng.below(50)).to_string().into_bytes());
            }
        }
        if rng.below(20) == 0 {
            // Other types under the same names: a list for the WRONGTYPE paths, a plain string
            // for the foreign-hold paths.
            let write: &[u8] = if rng.below(2) == 0 { b"RPUSH" } else { b"SET" };
            args = vec![
                write.to_vec(),
                format!("k{}", rng.below(4)).into_bytes(),
                b"v".to_vec(),
            ];
        }
        let refs: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
        match run(con, &refs) {
            Ok(_) => {}
            Err(e) => assert!(
                ["ERR", "WRONGTYPE", "TRYAGAIN", "READONLY", "DEADLOCK"]
                    .iter()
                    .any(|p| e.starts_with(p)),
                "{args:?} gave {e}"
            ),
        }
        sent += 1;
        if sent.is_multiple_of(200) {
            for con in cons.iter_mut() {
                assert_eq!(cmd(con, &["PING"]), Ok(Value::SimpleString("PONG".into())));
            }
        }
    }
    let mut c = s.con();
    assert_eq!(stat(&mut c, "panics"), 0.0);
    assert!(!s.log().contains("panic"), "log:\n{}", s.log());
    println!("{sent} commands");
}

/// The model of one key: who holds it, how, with which token.
#[derive(Clone, Debug, PartialEq)]
pub enum Held {
    Exclusive(String, i64),
    Shared(Vec<(String, i64)>),
    /// limit, then (owner, token, permits)
    Semaphore(u32, Vec<(String, i64, u32)>),
}

impl Held {
    pub fn token_of(&self, owner: &str) -> Option<i64> {
        match self {
            Held::Exclusive(o, t) => (o == owner).then_some(*t),
            Held::Shared(v) => v.iter().find(|(o, _)| o == owner).map(|(_, t)| *t),
            Held::Semaphore(_, v) => v.iter().find(|(o, ..)| o == owner).map(|(_, t, _)| *t),
        }
    }

    fn tokens(&self) -> Vec<i64> {
        match self {
            Held::Exclusive(_, t) => vec![*t],
            Held::Shared(v) => v.iter().map(|(_, t)| *t).collect(),
            Held::Semaphore(_, v) => v.iter().map(|(_, t, _)| *t).collect(),
        }
    }

    /// Without `owner`'s hold (None when nothing is left).
    pub fn without(self, owner: &str) -> Option<Held> {
        match self {
            Held::Exclusive(..) => None,
            Held::Shared(mut v) => {
                v.retain(|(o, _)| o != owner);
                (!v.is_empty()).then_some(Held::Shared(v))
            }
            Held::Semaphore(l, mut v) => {
                v.retain(|(o, ..)| o != owner);
                (!v.is_empty()).then_some(Held::Semaphore(l, v))
            }
        }
    }
}

/// A request the model decides: exclusive, shared, or `n` permits of a semaphore of `limit`.
#[derive(Clone, Copy, Debug)]
pub enum Ask {
    Exclusive,
    Shared,
    Permits(u32, u32),
}

/// What the server must answer, by the rules of the README (nobody queues in this test).
pub enum Expect {
    /// A fresh token (above every earlier one) and the new model.
    Fresh(Box<dyn Fn(i64) -> Held>),
    /// This very token; the model does not change but for the mode (a downgrade).
    Same(i64, Held),
    Nil,
    Error(&'static str),
}

impl std::fmt::Debug for Expect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Expect::Fresh(_) => f.write_str("a fresh token"),
            Expect::Same(t, _) => write!(f, "the same token {t}"),
            Expect::Nil => f.write_str("nil"),
            Expect::Error(part) => write!(f, "an error with {part:?}"),
        }
    }
}

pub fn expect(held: Option<&Held>, owner: &str, ask: Ask) -> Expect {
    let o = owner.to_string();
    match (held, ask) {
        (None, Ask::Exclusive) => Expect::Fresh(Box::new(move |t| Held::Exclusive(o.clone(), t))),
        (None, Ask::Shared) => Expect::Fresh(Box::new(move |t| Held::Shared(vec![(o.clone(), t)]))),
        (None, Ask::Permits(l, n)) => Expect::Fresh(Box::new(move |t| {
            Held::Semaphore(l, vec![(o.clone(), t, n)])
        })),
        (Some(Held::Semaphore(..)), Ask::Exclusive | Ask::Shared)
        | (Some(Held::Exclusive(..) | Held::Shared(..)), Ask::Permits(..)) => {
            Expect::Error("another kind of lock")
        }
        (Some(Held::Semaphore(limit, _)), Ask::Permits(l, _)) if *limit != l => {
            Expect::Error("LIMIT differs")
        }
        (Some(Held::Exclusive(h, t)), Ask::Exclusive) if *h == o => {
            Expect::Same(*t, Held::Exclusive(o, *t))
        }
        (Some(Held::Exclusive(h, t)), Ask::Shared) if *h == o => {
            Expect::Same(*t, Held::Shared(vec![(o, *t)]))
        }
        (Some(Held::Exclusive(..)), _) => Expect::Nil,
        (Some(Held::Shared(v)), Ask::Shared) => match v.iter().find(|(h, _)| *h == o) {
            Some((_, t)) => Expect::Same(*t, Held::Shared(v.clone())),
            None => {
                let v = v.clone();
                Expect::Fresh(Box::new(move |t| {
                    let mut v = v.clone();
                    v.push((o.clone(), t));
                    Held::Shared(v)
                }))
            }
        },
        (Some(Held::Shared(v)), Ask::Exclusive) => match v.iter().any(|(h, _)| *h == o) {
            true if v.len() == 1 => Expect::Fresh(Box::new(move |t| Held::Exclusive(o.clone(), t))),
            true => Expect::Error("DEADLOCK"),
            false => Expect::Nil,
        },
        (Some(Held::Semaphore(l, v)), Ask::Permits(_, n)) => {
            if let Some((_, t, held)) = v.iter().find(|(h, ..)| *h == o) {
                return if *held == n {
                    Expect::Same(*t, Held::Semaphore(*l, v.clone()))
                } else {
                    Expect::Error("different number of permits")
                };
            }
            let used: u32 = v.iter().map(|(.., p)| p).sum();
            if used + n > *l {
                return Expect::Nil;
            }
            let (l, v) = (*l, v.clone());
            Expect::Fresh(Box::new(move |t| {
                let mut v = v.clone();
                v.push((o.clone(), t, n));
                Held::Semaphore(l, v)
            }))
        }
    }
}

#[test]
#[ignore = "randomized: run by make test-faults"]
fn random_histories_match_a_model() {
    let (mut rng, run_for) = seeded("random_histories_match_a_model");
    let s = Server::start();
    let mut c = s.con();
    let keys = ["m0", "m1", "m\x002", "m3"];
    let owners = ["a", "b", "c\x00"];
    let mut model: HashMap<&str, Held> = HashMap::new();
    let mut last_token = 0i64;
    let started = Instant::now();
    let mut steps = 0u64;
    while started.elapsed() < run_for {
        let key = *rng.pick(&keys);
        let owner = *rng.pick(&owners);
        let held = model.get(key).cloned();
        let mine = held.as_ref().and_then(|h| h.token_of(owner));
        match rng.below(11) {
            0..=2 => {
                let ask = match rng.below(4) {
                    0 | 1 => Ask::Exclusive,
                    2 => Ask::Shared,
                    _ => Ask::Permits(2 + rng.below(2) as u32, 1 + rng.below(2) as u32),
                };
                let mut words = vec![
                    "LOCK.ACQUIRE".to_string(),
                    key.into(),
                    owner.into(),
                    "600000".into(),
                ];
                match ask {
                    Ask::Exclusive => {}
                    Ask::Shared => words.push("SHARED".into()),
                    Ask::Permits(l, n) => words.extend([
                        "LIMIT".into(),
                        l.to_string(),
                        "PERMITS".into(),
                        n.to_string(),
                    ]),
                }
                let words: Vec<&str> = words.iter().map(String::as_str).collect();
                let got = cmd(&mut c, &words);
                match (expect(held.as_ref(), owner, ask), got) {
                    (Expect::Fresh(next), Ok(Value::Int(t))) => {
                        assert!(t > last_token, "step {steps}: token {t} after {last_token}");
                        last_token = t;
                        model.insert(key, next(t));
                    }
                    (Expect::Same(t, next), Ok(Value::Int(got))) => {
                        assert_eq!(got, t, "step {steps}: a retry keeps the token");
                        model.insert(key, next);
                    }
                    (Expect::Nil, Ok(Value::Nil)) => {}
                    (Expect::Error(part), Err(e)) if e.contains(part) => {}
                    (wanted, got) => panic!(
                        "step {steps}: {words:?} with {held:?}: wanted {wanted:?}, got {got:?}"
                    ),
                }
            }
            3 => {
                let got = int(&ok(&mut c, &["LOCK.RELEASE", key, owner]));
                assert_eq!(got, i64::from(mine.is_some()), "step {steps}: release");
                if mine.is_some() {
                    match held.and_then(|h| h.without(owner)) {
                        Some(rest) => model.insert(key, rest),
                        None => model.remove(key),
                    };
                }
            }
            4 => {
                let got = int(&ok(&mut c, &["LOCK.EXTEND", key, owner, "600000"]));
                assert_eq!(got, i64::from(mine.is_some()), "step {steps}: extend");
            }
            5 => {
                let exclusive = match &held {
                    Some(Held::Exclusive(_, t)) => Some(*t),
                    _ => None,
                };
                assert_eq!(fence(&mut c, key), exclusive, "step {steps}: fence");
            }
            6 => {
                let tokens = held.as_ref().map(Held::tokens).unwrap_or_default();
                let probe = tokens
                    .first()
                    .map_or(last_token.max(1), |t| t + rng.below(2) as i64);
                let got = int(&ok(&mut c, &["LOCK.FENCE", key, &probe.to_string()]));
                assert_eq!(
                    got,
                    i64::from(tokens.contains(&probe)),
                    "step {steps}: fence token"
                );
            }
            7 => {
                let got = int(&ok(&mut c, &["LOCK.FORCERELEASE", key]));
                assert_eq!(got, i64::from(held.is_some()), "step {steps}: forcerelease");
                model.remove(key);
            }
            8 => {
                let info = ok(&mut c, &["LOCK.INFO", key]);
                let owner_field = map_field(&info, "owner");
                let expected = match &held {
                    Some(Held::Exclusive(o, _)) => Some(Value::BulkString(o.clone().into_bytes())),
                    _ => None,
                };
                assert_eq!(owner_field, expected, "step {steps}: info owner");
                let holders = match map_field(&info, "holders") {
                    Some(Value::Array(v)) => v.len(),
                    _ => 0,
                };
                let expected = held.as_ref().map_or(0, |h| h.tokens().len());
                assert_eq!(holders, expected, "step {steps}: info holders");
                // LOCK.WATCH names the same holders: the newest token and how many.
                let cursor = match &held {
                    Some(h) => {
                        let tokens = h.tokens();
                        let newest = tokens.iter().max().copied().unwrap_or_default();
                        format!("{newest}-{}", tokens.len())
                    }
                    None => "free".to_string(),
                };
                let seen = ok(&mut c, &["LOCK.WATCH", key]);
                assert_eq!(
                    map_field(&seen, "cursor").map(|v| text(&v)),
                    Some(cursor.clone()),
                    "step {steps}: watch"
                );
                let again = ok(&mut c, &["LOCK.WATCH", key, "AFTER", &cursor]);
                assert_eq!(
                    again,
                    Value::Nil,
                    "step {steps}: nothing new after its own cursor"
                );
            }
            9 => {
                let other = *rng.pick(&keys);
                if other != key {
                    let step = sets::Step {
                        keys: [key, other],
                        owner,
                        steps,
                    };
                    if rng.below(3) == 0 {
                        sets::release_step(&mut c, &mut model, &step);
                    } else {
                        let shared = rng.below(3) == 0;
                        sets::acquire_step(&mut c, &mut model, &step, shared, &mut last_token);
                    }
                }
            }
            _ => {
                if rng.below(10) == 0 {
                    ok(&mut c, &["DEBUG", "RELOAD"]);
                } else {
                    ok(&mut c, &["DEL", key]);
                    model.remove(key);
                }
            }
        }
        steps += 1;
    }
    assert_eq!(stat(&mut c, "panics"), 0.0);
    println!("{steps} steps");
}
