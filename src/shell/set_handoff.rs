//! Handing a waiting lock set all its keys at once: once it heads every one of its queues and
//! fits beside each key's live holds (`core::registry::Registry::grant_set` decides), each key
//! is stored as a single-key handoff would store it and the client is answered with the tokens.
//! Settling (`settling`) calls it when a set heads the queue it settles.

use redis_module::RedisString;

use crate::core::lock::{Millis, Want};
use crate::core::metrics::STATS;
use crate::core::registry::SetHanded;
use crate::core::settle::{Answer, Job, SetGrant};
use crate::effects::keyspace::{LockEvent, LockKey};
use crate::effects::queues;
use crate::effects::sessions;
use crate::effects::timers;
use crate::ffi::block;
use crate::ffi::clock;

/// Grant the set `id`, which heads `lock`'s queue, every one of its keys if each is its now.
/// `lock` is used as it is; the set's other keys are opened here (a second handle on `lock`'s
/// own key would go stale under the first). False if the set must wait on.
pub fn grant_waiting(lock: &LockKey, id: u64, now: Millis) -> bool {
    let Some(wants) = queues::set_wants(id) else {
        return false;
    };
    let ctx = lock.ctx();
    let own = lock.queue_key();
    let names: Vec<RedisString> = wants
        .keys
        .iter()
        .map(|k| RedisString::create_from_slice(ctx.ctx, &k.name))
        .collect();
    let others: Vec<Option<LockKey>> = wants
        .keys
        .iter()
        .zip(&names)
        .map(|(key, name)| (*key != own).then(|| LockKey::open(ctx, name)))
        .collect();
    let keys: Vec<&LockKey> = others.iter().map(|o| o.as_ref().unwrap_or(lock)).collect();
    // A plain string under a key (another client's old-style lock): the set waits on.
    let Ok(states) = keys
        .iter()
        .map(|k| k.state())
        .collect::<Result<Vec<_>, _>>()
    else {
        return false;
    };
    let Some(handed) = queues::grant_set(id, &states, now) else {
        return false;
    };
    hand_over(&keys, handed, wants.want, now);
    true
}

/// Store a waiting set's grant on each of its keys and answer its client.
fn hand_over(keys: &[&LockKey], handed: SetHanded<queues::Blocked>, want: Want, now: Millis) {
    let SetHanded { waiter, members } = handed;
    let mut granted = Vec::with_capacity(members.len());
    for (lock, (key, token, state)) in keys.iter().zip(members) {
        if let Err(err) = lock.set_announced(state, LockEvent::Handoff, now) {
            // Not reached (each key's type was read just before); give back what was stored.
            for (key, token) in granted {
                timers::retry(0, Job::Revoke { key, token });
            }
            block::answer(waiter.client.handle, Answer::Failed(err));
            return;
        }
        if waiter.client.session {
            sessions::bind(waiter.client.client_id, key.clone(), token);
        }
        if want == Want::Shared {
            timers::settle_soon(&key); // readers behind the set may join it
        }
        granted.push((key, token));
    }
    STATS.acquired_after_wait.incr();
    STATS.granted(want);
    STATS.set_grants.incr();
    STATS.set_keys_granted.add(granted.len() as u64);
    STATS
        .wait_time
        .record(clock::mono_us().saturating_sub(waiter.client.since_us));
    block::answer(
        waiter.client.handle,
        Answer::GrantedSet(SetGrant {
            members: granted,
            owner: waiter.owner,
            with_owner: waiter.client.with_owner,
        }),
    );
}
