//! The renewal bench (docs/clients.md rule 6; `clients/rust/bench/renewals`, run by
//! `scripts/bench_renewals.py`): N holds with the watchdog on, on one `Locker`, kept S seconds;
//! the connections they add, the holds lost, each renewal's lag; then one released and the
//! others checked still renewed. Prints one JSON line last.
//!
//! `cargo run --release -q -p redis-lock-client --features bench --example renewals --
//!  --port P --holds N --ttl-ms T --seconds S`

use std::time::{Duration, Instant};

use redis_lock_client::redis::{self, aio::MultiplexedConnection, Value};
use redis_lock_client::{LockGuard, Locker};

struct Args {
    port: u16,
    holds: usize,
    ttl: Duration,
    seconds: u64,
}

fn args() -> Result<Args, String> {
    let mut args = Args {
        port: 6379,
        holds: 1000,
        ttl: Duration::from_secs(3),
        seconds: 30,
    };
    let mut words = std::env::args().skip(1);
    while let Some(flag) = words.next() {
        let value = words.next().ok_or(format!("{flag} needs a value"))?;
        let number = |v: &str| v.parse::<u64>().map_err(|e| format!("{flag} {v}: {e}"));
        match flag.as_str() {
            "--port" => args.port = number(&value)? as u16,
            "--holds" => args.holds = number(&value)? as usize,
            "--ttl-ms" => args.ttl = Duration::from_millis(number(&value)?),
            "--seconds" => args.seconds = number(&value)?,
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    Ok(args)
}

/// The server's `connected_clients`.
async fn connected_clients(info: &mut MultiplexedConnection) -> Result<u64, redis::RedisError> {
    let text: String = redis::cmd("INFO").arg("clients").query_async(info).await?;
    let field = text
        .lines()
        .find_map(|l| l.strip_prefix("connected_clients:"));
    Ok(field.and_then(|n| n.trim().parse().ok()).unwrap_or(0))
}

/// Each key's lease left on the server, in ms (`LOCK.INFO`'s `ttl`; None: not held).
async fn leases_left(
    info: &mut MultiplexedConnection,
    keys: &[String],
) -> Result<Vec<Option<i64>>, redis::RedisError> {
    let mut pipe = redis::pipe();
    for key in keys {
        pipe.cmd("LOCK.INFO").arg(key);
    }
    let replies: Vec<Value> = pipe.query_async(info).await?;
    Ok(replies.iter().map(ttl_field).collect())
}

fn ttl_field(info: &Value) -> Option<i64> {
    let pairs: Vec<(&Value, &Value)> = match info {
        Value::Map(pairs) => pairs.iter().map(|(k, v)| (k, v)).collect(),
        Value::Array(items) => items.chunks(2).map(|kv| (&kv[0], &kv[1])).collect(),
        _ => return None,
    };
    pairs.into_iter().find_map(|(k, v)| match (k, v) {
        (Value::BulkString(k), Value::Int(ttl)) if k == b"ttl" => Some(*ttl),
        (Value::SimpleString(k), Value::Int(ttl)) if k == "ttl" => Some(*ttl),
        _ => None,
    })
}

fn quantile(sorted: &[Duration], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i].as_secs_f64() * 1000.0
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = args()?;
    let client = redis::Client::open(format!("redis://127.0.0.1:{}/", args.port))?;
    // No response timeout: LOCK.INFO of 10,000 keys is one pipeline.
    let config = redis::AsyncConnectionConfig::new().set_response_timeout(None);
    let mut info = client
        .get_multiplexed_async_connection_with_config(&config)
        .await?;
    let locker = Locker::new(client);
    // One command: the locker's shared connection is open (a fixed lease, never renewed).
    let first = locker.lock("renew:first").watchdog(false);
    if let Some(guard) = first.wait(Duration::ZERO).acquire().await? {
        guard.release().await?;
    }
    let before = connected_clients(&mut info).await?;
    let mut guards: Vec<LockGuard> = Vec::with_capacity(args.holds);
    for i in 0..args.holds {
        let lock = locker.lock(format!("renew:{i}")).ttl(args.ttl);
        let guard = lock.wait(Duration::ZERO).acquire().await?;
        guards.push(guard.ok_or(format!("renew:{i} not granted"))?);
    }
    let mut most = connected_clients(&mut info).await?;
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(args.seconds) {
        tokio::time::sleep(Duration::from_secs(1)).await;
        most = most.max(connected_clients(&mut info).await?);
    }
    let mut lags = locker.renewal_lags();
    let lost = guards.iter().filter(|g| g.is_lost()).count();
    // Release hold 0; two renewal intervals later, the others are still held and were renewed
    // since (without a renewal, at most a third of the ttl would be left).
    let mut guards = guards.into_iter();
    if let Some(first) = guards.next() {
        first.release().await?;
    }
    let others: Vec<LockGuard> = guards.collect();
    tokio::time::sleep(args.ttl * 2 / 3).await;
    let keys: Vec<String> = others.iter().map(|g| g.key().to_string()).collect();
    let third = (args.ttl / 3).as_millis() as i64;
    let left = leases_left(&mut info, &keys).await?;
    let others_live = others.iter().all(|g| !g.is_lost())
        && left.iter().all(|ttl| ttl.is_some_and(|ms| ms > third));
    lags.extend(locker.renewal_lags());
    for guard in others {
        guard.release().await?;
    }
    lags.sort();
    let json = format!(
        concat!(
            r#"{{"client": "rust", "holds": {}, "connections_before": {}, "#,
            r#""connections_after": {}, "lost": {}, "lag_ms": {{"p50": {:.2}, "p99": {:.2}, "#,
            r#""max": {:.2}}}, "renewals": {}, "others_live_after_release": {}}}"#
        ),
        args.holds,
        before,
        most,
        lost,
        quantile(&lags, 0.50),
        quantile(&lags, 0.99),
        quantile(&lags, 1.0),
        lags.len(),
        others_live
    );
    println!("{json}");
    Ok(())
}
