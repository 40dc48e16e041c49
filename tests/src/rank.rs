//! The rank (child process) side of the multi-process protocol.
//!
//! Lines a rank prints on stdout (everything else, including diagnostics, goes to stderr):
//!
//! | line               | meaning                                                     |
//! |--------------------|-------------------------------------------------------------|
//! | `HANDLE <hex>`     | my listen handle (256 hex digits)                           |
//! | `BARRIER <name>`   | I reached barrier `name`; wait for `GO <name>`              |
//! | `KILLME`           | SIGKILL me now (peer-death scenarios)                       |
//! | `PASS <details>`   | final verdict, then exit 0                                  |
//! | `FAIL <details>`   | final verdict, then exit 1                                  |
//!
//! Lines the driver writes on a rank's stdin:
//!
//! | line               | meaning                                                     |
//! |--------------------|-------------------------------------------------------------|
//! | `PEER <hex>`       | the handle of rank (r+1) % n, the one this rank connects to |
//! | `GO <name>`        | every live rank reached barrier `name`                      |
//! | `KILLED <rank>`    | the driver just SIGKILLed that rank                         |

use crate::error::{HResult, HarnessError};
use crate::handle::Handle;
use std::io::{BufRead as _, Write as _};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, TryRecvError};
use std::time::{Duration, Instant};

/// Control channel of a rank: stdout for announcements, stdin (read by a thread) for answers.
#[derive(Debug)]
pub struct Ctl {
    rank: usize,
    rx: Receiver<String>,
    stash: Vec<String>,
    stdin_closed: bool,
}

impl Ctl {
    /// Starts the stdin reader.
    pub fn start(rank: usize) -> Ctl {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let stdin = std::io::stdin();
            for line in stdin.lock().lines() {
                match line {
                    Ok(l) => {
                        if tx.send(l).is_err() {
                            return;
                        }
                    }
                    Err(_) => return,
                }
            }
        });
        Ctl {
            rank,
            rx,
            stash: Vec::new(),
            stdin_closed: false,
        }
    }

    /// This rank's number.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// Prints one protocol line on stdout and flushes it.
    pub fn say(&self, line: &str) {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
    }

    /// A diagnostic line on stderr, prefixed with the rank.
    pub fn note(&self, msg: &str) {
        let _ = writeln!(std::io::stderr(), "[rank {}] {msg}", self.rank);
    }

    fn pump(&mut self) {
        loop {
            match self.rx.try_recv() {
                Ok(l) => self.stash.push(l),
                Err(TryRecvError::Empty) => return,
                Err(TryRecvError::Disconnected) => {
                    self.stdin_closed = true;
                    return;
                }
            }
        }
    }

    fn take_stashed(&mut self, pred: &dyn Fn(&str) -> bool) -> Option<String> {
        let i = self.stash.iter().position(|l| pred(l))?;
        Some(self.stash.remove(i))
    }

    /// Waits for a driver line satisfying `pred` (other lines are kept for later).
    pub fn expect(
        &mut self,
        what: &str,
        pred: &dyn Fn(&str) -> bool,
        timeout: Duration,
    ) -> HResult<String> {
        let start = Instant::now();
        loop {
            self.pump();
            if let Some(l) = self.take_stashed(pred) {
                return Ok(l);
            }
            if self.stdin_closed {
                return Err(HarnessError::Failed(format!(
                    "stdin closed while waiting for {what}"
                )));
            }
            let left = timeout.saturating_sub(start.elapsed());
            if left.is_zero() {
                return Err(HarnessError::Timeout {
                    what: format!("the driver to send {what}"),
                    after: start.elapsed(),
                });
            }
            match self.rx.recv_timeout(left.min(Duration::from_millis(200))) {
                Ok(l) => self.stash.push(l),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => self.stdin_closed = true,
            }
        }
    }

    /// Announces this rank's listen handle.
    pub fn publish_handle(&self, h: &Handle) {
        self.say(&format!("HANDLE {}", h.to_hex()));
    }

    /// Waits for the peer's handle.
    pub fn peer_handle(&mut self, timeout: Duration) -> HResult<Handle> {
        let l = self.expect("PEER <handle>", &|l| l.starts_with("PEER "), timeout)?;
        Handle::from_hex(&l["PEER ".len()..]).map_err(HarnessError::Failed)
    }

    /// Waits until every live rank reached barrier `name`.
    pub fn barrier(&mut self, name: &str, timeout: Duration) -> HResult<()> {
        self.say(&format!("BARRIER {name}"));
        let want = format!("GO {name}");
        self.expect(&want, &|l| l == want, timeout).map(|_| ())
    }

    /// Asks the driver to SIGKILL this process.
    pub fn kill_me(&self) {
        self.say("KILLME");
    }

    /// Whether the driver has announced that it killed a rank (non-blocking).
    pub fn peer_killed(&mut self) -> bool {
        self.pump();
        self.stash.iter().any(|l| l.starts_with("KILLED "))
    }
}
