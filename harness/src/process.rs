//! Child processes the harness starts and stops by PID: the one wrapper a [`Server`] and a
//! Sentinel deployment's processes (`sentinel::Proc`) keep their child in.
//!
//! [`Server`]: crate::Server

use std::process::Child;
use std::time::{Duration, Instant};

/// A child process (or none: not started yet, or reaped), stopped by PID.
#[derive(Default)]
pub struct Process {
    child: Option<Child>,
}

impl Process {
    /// A spawned child, now owned by this wrapper.
    pub fn new(child: Child) -> Self {
        Self { child: Some(child) }
    }

    /// Its PID, 0 when there is no process.
    pub fn pid(&self) -> i32 {
        self.child.as_ref().map_or(0, |c| c.id() as i32)
    }

    pub fn signal(&self, sig: i32) {
        signal_pid(self.pid(), sig);
    }

    /// `kill -9` the process, if there is one, and reap it.
    pub fn kill9(&mut self) {
        kill_and_reap(&mut self.child);
    }

    /// SIGTERM, then wait up to `grace` for it to exit (`kill -9` after that), and reap it.
    pub fn terminate(&mut self, grace: Duration) {
        if let Some(mut child) = self.child.take() {
            // SAFETY: signalling our own child.
            unsafe {
                libc::kill(child.id() as i32, libc::SIGTERM);
            }
            let deadline = Instant::now() + grace;
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Whether the process has exited by itself (true when there is none).
    pub fn exited(&mut self) -> bool {
        self.child
            .as_mut()
            .is_none_or(|c| matches!(c.try_wait(), Ok(Some(_))))
    }
}

/// Send `sig` to the child process `pid` (nothing for 0: no process).
pub fn signal_pid(pid: i32, sig: i32) {
    if pid > 0 {
        // SAFETY: sending a signal to our own child process by PID.
        unsafe {
            libc::kill(pid, sig);
        }
    }
}

/// `kill -9` a child process, if there is one, and reap it.
pub fn kill_and_reap(child: &mut Option<Child>) {
    if let Some(mut child) = child.take() {
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// The running test binary, to start again as a helper process. Not `current_exe()`: suites
/// run side by side, and another suite's cargo may relink the binary at its path meanwhile;
/// `/proc/self/exe` is the file this process runs, wherever its path now points.
pub fn this_test_binary() -> std::path::PathBuf {
    std::path::PathBuf::from("/proc/self/exe")
}
