//! Randomized checks, run by `make test-faults` for a bounded time with a printed seed
//! (`LOCK_FUZZ_SEED=<seed>` replays a run, `LOCK_FUZZ_SECS` sets its length):
//! - argument fuzzing of every command with binary arguments over RESP2 and RESP3: every reply
//!   is a value or a Redis-style error, the connection stays in step, nothing panics;
//! - random operation histories checked step by step against a model of the locks.

use redis_lock_harness::*;
use std::collections::HashMap;
use std::time::{Duration, Instant};

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

fn seeded(test: &str) -> (Rng, Duration) {
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

const COMMANDS: [&[u8]; 7] = [
    b"LOCK.ACQUIRE",
    b"LOCK.RELEASE",
    b"LOCK.EXTEND",
    b"LOCK.FENCE",
    b"LOCK.INFO",
    b"LOCK.FORCERELEASE",
    b"LOCK.APPLY",
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
const WORDS: [&[u8]; 6] = [b"WAIT", b"wait", b"COUNT", b"*", b"SHARED", b"k\x00"];

fn random_arg(rng: &mut Rng) -> Vec<u8> {
    match rng.below(4) {
        0 => rng.pick(&NUMBERS).to_vec(),
        1 => rng.pick(&WORDS).to_vec(),
        2 => format!("k{}", rng.below(4)).into_bytes(),
        _ => (0..rng.below(12)).map(|_| rng.next() as u8).collect(),
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
            // Other types under the same names, for the WRONGTYPE paths.
            args = vec![
                b"SET".to_vec(),
                format!("k{}", rng.below(4)).into_bytes(),
                b"v".to_vec(),
            ];
        }
        let refs: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
        match run(con, &refs) {
            Ok(_) => {}
            Err(e) => assert!(
                ["ERR", "WRONGTYPE", "TRYAGAIN", "READONLY"]
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

#[derive(Clone, Debug, PartialEq)]
struct Held {
    owner: String,
    token: i64,
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
        match rng.below(9) {
            0 | 1 => {
                let got = cmd(&mut c, &["LOCK.ACQUIRE", key, owner, "600000"]).unwrap();
                match (&held, got) {
                    (Some(h), Value::Int(t)) if h.owner == owner => assert_eq!(t, h.token),
                    (Some(_), Value::Nil) => {}
                    (None, Value::Int(t)) => {
                        assert!(t > last_token, "step {steps}: token {t} after {last_token}");
                        last_token = t;
                        model.insert(
                            key,
                            Held {
                                owner: owner.into(),
                                token: t,
                            },
                        );
                    }
                    (h, got) => {
                        panic!("step {steps}: acquire {key:?} {owner:?} with {h:?} gave {got:?}")
                    }
                }
            }
            2 => {
                let got = int(&ok(&mut c, &["LOCK.RELEASE", key, owner]));
                let mine = held.as_ref().is_some_and(|h| h.owner == owner);
                assert_eq!(got, i64::from(mine), "step {steps}: release");
                if mine {
                    model.remove(key);
                }
            }
            3 => {
                let got = int(&ok(&mut c, &["LOCK.EXTEND", key, owner, "600000"]));
                let mine = held.as_ref().is_some_and(|h| h.owner == owner);
                assert_eq!(got, i64::from(mine), "step {steps}: extend");
            }
            4 => assert_eq!(
                fence(&mut c, key),
                held.as_ref().map(|h| h.token),
                "step {steps}"
            ),
            5 => {
                let probe = held
                    .as_ref()
                    .map_or(last_token.max(1), |h| h.token + rng.below(2) as i64);
                let got = int(&ok(&mut c, &["LOCK.FENCE", key, &probe.to_string()]));
                assert_eq!(
                    got,
                    i64::from(held.as_ref().is_some_and(|h| h.token == probe))
                );
            }
            6 => {
                let got = int(&ok(&mut c, &["LOCK.FORCERELEASE", key]));
                assert_eq!(got, i64::from(held.is_some()), "step {steps}: forcerelease");
                model.remove(key);
            }
            7 => {
                let info = ok(&mut c, &["LOCK.INFO", key]);
                let owner_field = map_field(&info, "owner");
                let expected = held
                    .as_ref()
                    .map(|h| Value::BulkString(h.owner.clone().into_bytes()));
                assert_eq!(owner_field, expected, "step {steps}: info");
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
