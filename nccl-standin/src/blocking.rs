//! Blocking helpers over the table calls, each with a deadline: connect and accept until they
//! give a comm, post until the plugin takes a request, wait for requests; and [`Backoff`], the
//! polling they share.

use crate::buffer::Buffer;
use crate::error::{HResult, HarnessError, NcclExt};
use crate::handle::Handle;
use crate::net::{ListenComm, Mr, Net, RecvComm, RecvSlot, Request, SendComm};
use core::ffi::c_int;
use std::time::{Duration, Instant};

impl Net {
    /// Calls `connect` until it yields a comm; returns it and how many NULL answers came first.
    pub fn connect_blocking_counted(
        &self,
        dev: c_int,
        handle: &mut Handle,
        timeout: Duration,
    ) -> HResult<(SendComm, u64)> {
        let mut b = Backoff::new("connect to return a send comm", timeout);
        loop {
            if let Some(c) = self.connect(dev, handle).call("connect")? {
                return Ok((c, b.polls()));
            }
            b.pause()?;
        }
    }

    /// Calls `connect` until it yields a comm (pass a fresh copy of the peer's handle per connection).
    pub fn connect_blocking(
        &self,
        dev: c_int,
        handle: &mut Handle,
        timeout: Duration,
    ) -> HResult<SendComm> {
        self.connect_blocking_counted(dev, handle, timeout)
            .map(|(c, _)| c)
    }

    /// Calls `accept` until it yields a comm; returns it and how many NULL answers came first.
    pub fn accept_blocking_counted(
        &self,
        listen: &ListenComm,
        timeout: Duration,
    ) -> HResult<(RecvComm, u64)> {
        let mut b = Backoff::new("accept to return a recv comm", timeout);
        loop {
            if let Some(c) = self.accept(listen).call("accept")? {
                return Ok((c, b.polls()));
            }
            b.pause()?;
        }
    }

    /// Calls `accept` until it yields a comm.
    pub fn accept_blocking(&self, listen: &ListenComm, timeout: Duration) -> HResult<RecvComm> {
        self.accept_blocking_counted(listen, timeout)
            .map(|(c, _)| c)
    }

    /// Connects (to `handle`) and accepts (on `listen`) at the same time, alternating calls as an
    /// NCCL proxy thread does, so that rings of processes cannot deadlock in setup.
    pub fn connect_accept_blocking(
        &self,
        dev: c_int,
        handle: &mut Handle,
        listen: &ListenComm,
        timeout: Duration,
    ) -> HResult<(SendComm, RecvComm)> {
        let mut b = Backoff::new("connect and accept to both return comms", timeout);
        let mut send = None;
        let mut recv = None;
        loop {
            if send.is_none() {
                send = self.connect(dev, handle).call("connect")?;
            }
            if recv.is_none() {
                recv = self.accept(listen).call("accept")?;
            }
            match (send.take(), recv.take()) {
                (Some(s), Some(r)) => return Ok((s, r)),
                (s, r) => {
                    send = s;
                    recv = r;
                }
            }
            b.pause()?;
        }
    }

    /// Calls `isend` until the send is posted.
    #[allow(clippy::too_many_arguments)] // isend's own six arguments, plus the deadline
    pub fn isend_blocking(
        &self,
        comm: &SendComm,
        buf: &Buffer,
        offset: usize,
        len: usize,
        tag: c_int,
        mr: &Mr,
        timeout: Duration,
    ) -> HResult<Request> {
        let mut b = Backoff::new(
            format!("isend of {len} bytes (tag {tag}) to be posted"),
            timeout,
        );
        loop {
            if let Some(r) = self.isend(comm, buf, offset, len, tag, mr).call("isend")? {
                return Ok(r);
            }
            b.pause()?;
        }
    }

    /// Calls `irecv` until the receive is posted.
    pub fn irecv_blocking(
        &self,
        comm: &RecvComm,
        slots: &[RecvSlot<'_>],
        timeout: Duration,
    ) -> HResult<Request> {
        let mut b = Backoff::new(
            format!("irecv of {} buffer(s) to be posted", slots.len()),
            timeout,
        );
        loop {
            if let Some(r) = self.irecv(comm, slots).call("irecv")? {
                return Ok(r);
            }
            b.pause()?;
        }
    }

    /// Tests `req` until done; returns the sizes.
    pub fn wait(&self, req: Request, timeout: Duration) -> HResult<Vec<c_int>> {
        let mut b = Backoff::new(
            format!(
                "request {:p} ({} buffer(s)) to complete",
                req.as_ptr(),
                req.n()
            ),
            timeout,
        );
        loop {
            let (done, sizes) = self.test(&req).call("test")?;
            if done {
                return Ok(sizes);
            }
            b.pause()?;
        }
    }

    /// Tests all requests round-robin until every one is done; returns their sizes in order.
    pub fn wait_all(&self, reqs: Vec<Request>, timeout: Duration) -> HResult<Vec<Vec<c_int>>> {
        let total = reqs.len();
        let mut b = Backoff::new(format!("{total} requests to complete"), timeout);
        let mut pending: Vec<(usize, Request)> = reqs.into_iter().enumerate().collect();
        let mut out: Vec<Vec<c_int>> = vec![Vec::new(); total];
        while !pending.is_empty() {
            let mut progressed = false;
            let mut still = Vec::with_capacity(pending.len());
            for (i, r) in pending {
                let (done, sizes) = self.test(&r).call("test")?;
                if done {
                    out[i] = sizes;
                    progressed = true;
                } else {
                    still.push((i, r));
                }
            }
            pending = still;
            if !pending.is_empty() && !progressed {
                b.pause().map_err(|e| match e {
                    HarnessError::Timeout { after, .. } => HarnessError::Timeout {
                        what: format!(
                            "{} of {total} requests to complete (indices {:?} still pending)",
                            pending.len(),
                            pending.iter().map(|(i, _)| *i).collect::<Vec<_>>()
                        ),
                        after,
                    },
                    other => other,
                })?;
            }
        }
        Ok(out)
    }
}

/// Polling with a deadline: yields at first, then sleeps up to 1 ms between polls (the guest is
/// emulated and several ranks share two CPUs).
#[derive(Debug)]
pub struct Backoff {
    what: String,
    start: Instant,
    timeout: Duration,
    polls: u64,
}

impl Backoff {
    pub fn new(what: impl Into<String>, timeout: Duration) -> Self {
        Backoff {
            what: what.into(),
            start: Instant::now(),
            timeout,
            polls: 0,
        }
    }

    /// Unproductive polls so far.
    pub fn polls(&self) -> u64 {
        self.polls
    }

    /// Time since creation.
    pub fn elapsed(&self) -> Duration {
        self.start.elapsed()
    }

    /// Waits a little before the next poll; fails once the deadline has passed.
    pub fn pause(&mut self) -> HResult<()> {
        let elapsed = self.start.elapsed();
        if elapsed > self.timeout {
            return Err(HarnessError::Timeout {
                what: self.what.clone(),
                after: elapsed,
            });
        }
        self.polls += 1;
        if self.polls < 32 {
            std::thread::yield_now();
        } else {
            let us = (self.polls - 31).min(20) * 50;
            std::thread::sleep(Duration::from_micros(us));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_times_out() {
        let mut b = Backoff::new("nothing", Duration::from_millis(20));
        let err = loop {
            if let Err(e) = b.pause() {
                break e;
            }
        };
        assert!(matches!(err, HarnessError::Timeout { .. }), "{err:?}");
        assert!(err.to_string().contains("nothing"));
    }
}
