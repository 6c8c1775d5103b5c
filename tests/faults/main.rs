//! The fault-injection safety suite (`make test-faults`), one file per family of faults. Each
//! scenario runs the workload of `redis_lock_harness::scenario` (clients loop acquire -> fenced
//! read-modify-write -> release) while faults are injected, then checks the recorded history.
//! Scenarios are `#[ignore]`d so `make test` stays quick; `make test-faults` runs them.

mod clock;
mod crashes;
mod failover;
mod guard;
mod pauses;
mod processes;
mod sentinel;
mod shared;
mod waiters;
