//! The clock room: a server's wall clock moved by libfaketime ([`ClockFile`], [`faketime_env`]).
//! Leases run on the monotonic clock, which libfaketime leaves alone.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::server::server_binary;

/// A file that sets a server's clock offset (libfaketime), removed when dropped.
pub struct ClockFile(PathBuf);

impl ClockFile {
    pub fn new(tag: &str, offset: &str) -> Self {
        let path = std::env::temp_dir().join(format!(
            "lock-clock-{tag}-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        std::fs::write(&path, offset).expect("write the clock file");
        Self(path)
    }

    /// Move the clock: `+0`, `-30`, `+1h`, ... (read on every clock read).
    pub fn set(&self, offset: &str) {
        std::fs::write(&self.0, offset).expect("write the clock file");
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    /// The server environment for this clock, or `None` where libfaketime cannot run.
    pub fn env(&self) -> Option<Vec<(String, String)>> {
        faketime_env(&self.0)
    }
}

impl Drop for ClockFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// An environment as the `(&str, &str)` pairs `ServerBuilder::env` takes.
pub fn pairs(env: &[(String, String)]) -> Vec<(&str, &str)> {
    env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
}

/// libfaketime, which moves a server's wall clock (never its monotonic clock).
pub const FAKETIME_LIB: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

/// The environment that runs a server with its wall clock offset by what `offset_file` says
/// (`+0`, `-30`, `+1h`, ...; read on every clock read, so a test can move it), or `None` where
/// that cannot work: a jemalloc build (libfaketime recurses into itself when jemalloc reads
/// the clock at start-up: Debian's Redis; Valkey's libc build works) or no libfaketime.
pub fn faketime_env(offset_file: &Path) -> Option<Vec<(String, String)>> {
    let version = Command::new(server_binary())
        .arg("--version")
        .output()
        .ok()?;
    if String::from_utf8_lossy(&version.stdout).contains("malloc=jemalloc")
        || !Path::new(FAKETIME_LIB).exists()
    {
        return None;
    }
    let pairs = [
        ("LD_PRELOAD", FAKETIME_LIB.to_string()),
        ("FAKETIME_TIMESTAMP_FILE", offset_file.display().to_string()),
        ("FAKETIME_NO_CACHE", "1".to_string()),
        ("FAKETIME_DONT_FAKE_MONOTONIC", "1".to_string()),
    ];
    Some(pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
}

/// The environment that runs a server whose wall clock moves `step_us` further at each read
/// (`harness/movingclock.c`: `gettimeofday` only, which keys' TTLs read; never the monotonic
/// clock): time passes between any two looks at a key, as on a very slow machine. `None` where
/// the shim could not be built. Unlike libfaketime it starts jemalloc builds too.
pub fn moving_clock_env(step_us: u32) -> Option<Vec<(String, String)>> {
    let lib = env!("MOVINGCLOCK_LIB");
    if lib.is_empty() {
        return None;
    }
    Some(vec![
        ("LD_PRELOAD".to_string(), lib.to_string()),
        ("MOVINGCLOCK_STEP_US".to_string(), step_us.to_string()),
    ])
}
