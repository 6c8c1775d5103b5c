//! Lock sets under randomness: set steps of the model-checked histories (`LOCK.MACQUIRE` and
//! `LOCK.MRELEASE` of two keys, decided key by key as single acquires would, all or nothing),
//! and many clients taking overlapping sets in random orders at once: nobody waits forever
//! (no deadlock), no key has two holders, every waiter is served within its bound.

use super::{expect, seeded, Ask, Expect, Held, Rng};
use redis_lock_harness::*;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Two distinct keys of a history step, the owner, and the step's number.
pub struct Step<'a> {
    pub keys: [&'a str; 2],
    pub owner: &'a str,
    pub steps: u64,
}

/// `LOCK.MACQUIRE 2 k1 k2 owner ttl [SHARED]`: an error if either key refuses the request, nil
/// if either is not free for it, else every key (fresh tokens in key order, kept where held).
pub fn acquire_step<'a>(
    c: &mut Connection,
    model: &mut HashMap<&'a str, Held>,
    step: &Step<'a>,
    shared: bool,
    last_token: &mut i64,
) {
    let ask = if shared { Ask::Shared } else { Ask::Exclusive };
    let [k1, k2] = step.keys;
    let mut words = vec!["LOCK.MACQUIRE", "2", k1, k2, step.owner, "600000"];
    if shared {
        words.push("SHARED");
    }
    let got = cmd(c, &words);
    let each: Vec<Expect> = step
        .keys
        .iter()
        .map(|k| expect(model.get(k), step.owner, ask))
        .collect();
    let at = format!(
        "step {}: {words:?} with {:?}",
        step.steps,
        step.keys.map(|k| model.get(k).cloned())
    );
    if let Some(Expect::Error(part)) = each.iter().find(|e| matches!(e, Expect::Error(_))) {
        assert!(
            got.as_ref().is_err_and(|e| e.contains(part)),
            "{at}: wanted {part:?}, got {got:?}"
        );
        return;
    }
    if each.iter().any(|e| matches!(e, Expect::Nil)) {
        assert_eq!(got, Ok(Value::Nil), "{at}");
        return;
    }
    let Ok(Value::Array(tokens)) = got else {
        panic!("{at}: wanted tokens, got {got:?}");
    };
    for ((key, wanted), token) in step.keys.iter().zip(each).zip(tokens.iter().map(int)) {
        match wanted {
            Expect::Fresh(next) => {
                assert!(
                    token > *last_token,
                    "{at}: token {token} after {last_token}"
                );
                *last_token = token;
                model.insert(key, next(token));
            }
            Expect::Same(t, next) => {
                assert_eq!(token, t, "{at}: a retry keeps the token");
                model.insert(key, next);
            }
            _ => unreachable!("nil and errors answered above"),
        }
    }
}

/// `LOCK.MRELEASE 2 k1 k2 owner`: every hold of the owner's on either key goes.
pub fn release_step<'a>(c: &mut Connection, model: &mut HashMap<&'a str, Held>, step: &Step<'a>) {
    let [k1, k2] = step.keys;
    let got = int(&ok(c, &["LOCK.MRELEASE", "2", k1, k2, step.owner]));
    let mut expected = 0;
    for key in step.keys {
        let Some(held) = model.get(key).cloned() else {
            continue;
        };
        if held.token_of(step.owner).is_some() {
            expected += 1;
            match held.without(step.owner) {
                Some(rest) => model.insert(key, rest),
                None => model.remove(key),
            };
        }
    }
    assert_eq!(got, expected, "step {}: mrelease", step.steps);
}

const KEYS: [&str; 6] = ["s0", "s1", "s2", "s3", "s4", "s5"];

/// 2 to 4 distinct keys in a random order.
fn random_set(rng: &mut Rng) -> Vec<&'static str> {
    let mut keys = KEYS.to_vec();
    for i in (1..keys.len()).rev() {
        keys.swap(i, rng.below(i + 1));
    }
    keys.truncate(2 + rng.below(3));
    keys
}

/// One client's turns: take a random set (or now and then one key alone) waiting up to
/// `bound`, check it is the only holder of each key and that each key's token is above its
/// last holder's, hold it 1 ms, release it.
fn client_turns(
    s_port: u16,
    seed: u64,
    until: Instant,
    last: Arc<Mutex<HashMap<String, i64>>>,
) -> u64 {
    let mut rng = Rng(seed);
    let mut c = connect(s_port).expect("connect");
    let me = format!("c{seed}");
    let bound = "20000"; // a set waits behind at most a few 1 ms holds: 20 s is a wide margin
    let mut turns = 0;
    while Instant::now() < until {
        let keys = if rng.below(4) == 0 {
            vec![*rng.pick(&KEYS)]
        } else {
            random_set(&mut rng)
        };
        let n = keys.len().to_string();
        let mut words = vec!["LOCK.MACQUIRE", &n];
        words.extend(&keys);
        words.extend([me.as_str(), "10000", "WAIT", bound]);
        let got = ok(&mut c, &words);
        let Value::Array(tokens) = got else {
            panic!("{me}: {words:?} was not served within {bound} ms: {got:?}");
        };
        for (key, token) in keys.iter().zip(tokens.iter().map(int)) {
            let mark = format!("holder:{key}");
            let set = ok(&mut c, &["SET", &mark, &me, "NX"]);
            assert_eq!(
                set,
                Value::Okay,
                "{me} holds {key}, and so does someone else"
            );
            let mut last = last.lock().unwrap();
            let before = last.insert(key.to_string(), token).unwrap_or(0);
            assert!(token > before, "{key}: token {token} after {before}");
        }
        std::thread::sleep(Duration::from_millis(1));
        for key in &keys {
            ok(&mut c, &["DEL", &format!("holder:{key}")]);
        }
        let mut words = vec!["LOCK.MRELEASE", &n];
        words.extend(&keys);
        words.push(&me);
        assert_eq!(
            int(&ok(&mut c, &words)),
            keys.len() as i64,
            "{me}: released all"
        );
        turns += 1;
    }
    turns
}

#[test]
#[ignore = "randomized: run by make test-faults"]
fn overlapping_sets_in_random_orders_never_deadlock_nor_share_a_key() {
    let (mut rng, run_for) =
        seeded("overlapping_sets_in_random_orders_never_deadlock_nor_share_a_key");
    let s = Server::start();
    let until = Instant::now() + run_for;
    let last = Arc::new(Mutex::new(HashMap::new()));
    let clients: Vec<_> = (0..8)
        .map(|_| {
            let (port, seed, last) = (s.port, rng.next_u64() | 1, Arc::clone(&last));
            std::thread::spawn(move || client_turns(port, seed, until, last))
        })
        .collect();
    let turns: u64 = clients
        .into_iter()
        .map(|h| h.join().expect("a client failed"))
        .sum();
    let mut c = s.con();
    assert_eq!(stat(&mut c, "waiters"), 0.0);
    assert_eq!(
        int(&ok(&mut c, &["DBSIZE"])),
        0,
        "every lock released, every mark gone"
    );
    assert_eq!(stat(&mut c, "panics"), 0.0);
    println!("{turns} sets taken and released");
}
