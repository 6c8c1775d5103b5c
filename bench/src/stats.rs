//! Percentiles, fairness and small helpers over recorded samples.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The `q` quantile of `samples` (sorted in place), 0 when empty.
pub fn quantile(samples: &mut [f64], q: f64) -> f64 {
    if samples.is_empty() {
        return 0.0;
    }
    samples.sort_by(|a, b| a.total_cmp(b));
    let rank = ((samples.len() as f64) * q).ceil() as usize;
    samples[rank.clamp(1, samples.len()) - 1]
}

/// Jain's fairness index over per-client counts: 1.0 when everyone got the same.
pub fn jain(counts: &[u64]) -> f64 {
    let n = counts.len() as f64;
    let sum: f64 = counts.iter().map(|&c| c as f64).sum();
    let squares: f64 = counts.iter().map(|&c| (c as f64) * (c as f64)).sum();
    if squares == 0.0 {
        return 0.0;
    }
    sum * sum / (n * squares)
}

pub fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

pub fn unix_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0)
}

/// Run `f` repeatedly on its own connection per thread until `dur` passes; collect results.
pub fn for_threads<T: Send + 'static>(
    threads: usize,
    f: impl Fn(usize, Instant) -> T + Send + Sync + 'static,
    until: Instant,
) -> Vec<T> {
    let f = std::sync::Arc::new(f);
    let handles: Vec<_> = (0..threads)
        .map(|i| {
            let f = f.clone();
            std::thread::spawn(move || f(i, until))
        })
        .collect();
    handles
        .into_iter()
        .map(|h| h.join().expect("bench thread"))
        .collect()
}

/// A polling client's acquire: `attempt` until it succeeds, sleeping `every` between tries;
/// false once a try fails at or after `give_up`.
pub fn poll(every: Duration, give_up: Instant, mut attempt: impl FnMut() -> bool) -> bool {
    loop {
        if attempt() {
            return true;
        }
        if Instant::now() >= give_up {
            return false;
        }
        std::thread::sleep(every);
    }
}

/// CPU time (user + system) a process has used, from /proc.
pub fn process_cpu(pid: i32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may contain spaces) start after the last ')'.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // utime and stime are fields 14 and 15 of the file; `fields[0]` is field 3.
    // SAFETY: sysconf only reads a configuration value.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    Duration::from_secs_f64((ticks(11) + ticks(12)) as f64 / hz)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_and_fairness() {
        let mut v = vec![5.0, 1.0, 3.0, 2.0, 4.0];
        assert_eq!(quantile(&mut v, 0.5), 3.0);
        assert_eq!(quantile(&mut v, 0.99), 5.0);
        assert_eq!(quantile(&mut [], 0.5), 0.0);
        assert!((jain(&[10, 10, 10]) - 1.0).abs() < 1e-9);
        assert!((jain(&[30, 0, 0]) - 1.0 / 3.0).abs() < 1e-9);
    }
}
