//! The process-wide queue of receive comms that may hold staged clear-to-send entries, and the
//! lifetime rule that makes reading it from any thread sound.
//!
//! Why the queue exists is in [`super::cts`]: a waiting call on any comm writes out the
//! clear-to-send entries other receive comms hold staged. Every receive comm has a place in the
//! [`Registry`] (a [`Ticket`], from `add` to `remove`), but only the comms that staged entries
//! since they were last visited are *queued*; a waiting call visits at most a fixed number of
//! queued comms, from the front. So what a look costs does not depend on how many receive comms
//! the process has, and neither does any other operation: adding and removing a comm, queueing
//! it and taking the front are O(1) (slots reached by their ticket, a free list, the queue linked
//! through the slots), never a scan; only adding a comm when no slot is free may grow the slot
//! table (amortised O(1), by doubling).
//!
//! The lifetime rule:
//! - a comm is added once it is at its final heap address, before NCCL can see it;
//! - a comm is removed, under the registry's lock, **before anything else of its end happens**:
//!   before `close` overwrites its magic word, before its memory is handed back to a `Box` and
//!   freed (removal also takes it out of the queue);
//! - a visitor only dereferences an address while it holds the registry's lock.
//!
//! So an address a visitor sees names a live comm, and nobody else has a `Box` or `&mut` of it:
//! removal waits for the visitor to let go of the lock.
//!
//! The rule that no staged entry is forgotten (the queue's own rule): a comm that stages entries
//! makes sure it is queued before its call ends; a visitor takes a comm off the queue only when
//! it could lock the comm (and then writes everything staged); a comm it cannot lock (its thread
//! is in a call on it) goes back to the end of the queue. So a comm with staged entries and no
//! call under way is always queued. The flag that spares a staging comm the registry's lock when
//! it is already queued is the comm's own (see [`super::cts`]), read and written only under the
//! comm's lock.
//!
//! The model tests at the end check both rules (and that the wrong orders, freeing first or
//! dropping a comm that was busy, are caught) under every interleaving with `loom`
//! (`RUSTFLAGS="--cfg loom" cargo test -p nccl-net-plugin --lib receivers::model`).

use crate::sync::Mutex;
use std::sync::atomic::AtomicBool;
use std::sync::{OnceLock, TryLockError};

/// Every open receive comm of the process, by address, and the queue of those that staged.
pub(super) fn list() -> &'static Registry {
    static RECEIVERS: OnceLock<Registry> = OnceLock::new();
    RECEIVERS.get_or_init(Registry::default)
}

/// An object's place in a [`Registry`], from [`Registry::add`] to [`Registry::remove`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ticket(u32);

/// A receive comm's place in the [`list`]: its ticket, and whether it is queued.
#[derive(Debug)]
pub(super) struct Place {
    pub(super) ticket: Ticket,
    /// Whether the comm is queued, as the comm knows it. Read and written only with the comm's
    /// core lock held (by its own call, or by a visitor that locked it), which orders every
    /// access; an atomic only because the comm is shared between threads.
    pub(super) queued: AtomicBool,
}

impl Place {
    /// The place of a comm just added (not queued).
    pub(super) fn new(ticket: Ticket) -> Place {
        Place {
            ticket,
            queued: AtomicBool::new(false),
        }
    }
}

/// What a visitor did with a queued object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Visit {
    /// Handled (or nothing to do): it leaves the queue.
    Done,
    /// In use by another thread right now: it goes back to the end of the queue.
    Busy,
}

/// No slot: the end of the queue or of the free list.
const NIL: u32 = u32::MAX;

/// A registry slot: an object's address while it is registered; the links of the queue while
/// it is queued, or of the free list while the slot is free.
#[derive(Debug, Clone, Copy)]
struct Slot {
    addr: usize,
    prev: u32,
    next: u32,
    queued: bool,
}

/// The registry's state, behind its lock.
#[derive(Debug)]
struct Slots {
    slots: Vec<Slot>,
    /// The first free slot (linked through `next`).
    free: u32,
    /// The queue: its first and last slot.
    head: u32,
    tail: u32,
    /// Slots read or written by any operation so far: what the tests count the work with.
    touched: u64,
}

impl Default for Slots {
    fn default() -> Slots {
        Slots {
            slots: Vec::new(),
            free: NIL,
            head: NIL,
            tail: NIL,
            touched: 0,
        }
    }
}

impl Slots {
    fn slot(&mut self, i: u32) -> &mut Slot {
        self.touched += 1;
        &mut self.slots[i as usize]
    }

    /// Links slot `i` at the end of the queue (a no-op when it is queued already).
    fn push_back(&mut self, i: u32) {
        if self.slot(i).queued {
            return;
        }
        let tail = self.tail;
        *self.slot(i) = Slot {
            prev: tail,
            next: NIL,
            queued: true,
            ..self.slots[i as usize]
        };
        if tail == NIL {
            self.head = i;
        } else {
            self.slot(tail).next = i;
        }
        self.tail = i;
    }

    /// Unlinks slot `i` from the queue (a no-op when it is not queued).
    fn unlink(&mut self, i: u32) {
        let Slot {
            prev, next, queued, ..
        } = *self.slot(i);
        if !queued {
            return;
        }
        if prev == NIL {
            self.head = next;
        } else {
            self.slot(prev).next = next;
        }
        if next == NIL {
            self.tail = prev;
        } else {
            self.slot(next).prev = prev;
        }
        let s = self.slot(i);
        s.queued = false;
        s.prev = NIL;
        s.next = NIL;
    }
}

/// A set of object addresses with a queue of some of them, under one lock.
#[derive(Debug, Default)]
pub(crate) struct Registry {
    inner: Mutex<Slots>,
}

impl Registry {
    fn lock(&self) -> crate::sync::MutexGuard<'_, Slots> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds `addr` (a live object at its final address, never 0), not queued; O(1) (a free
    /// slot is reused, else one is appended).
    pub(crate) fn add(&self, addr: usize) -> Ticket {
        debug_assert_ne!(addr, 0, "0 marks a free slot");
        let mut s = self.lock();
        let fresh = Slot {
            addr,
            prev: NIL,
            next: NIL,
            queued: false,
        };
        let i = s.free;
        if i == NIL {
            s.touched += 1;
            s.slots.push(fresh);
            Ticket(s.slots.len() as u32 - 1)
        } else {
            s.free = s.slot(i).next;
            *s.slot(i) = fresh;
            Ticket(i)
        }
    }

    /// Removes the object of `t` (and takes it out of the queue); waits for a visitor that
    /// holds the registry. Once it returns, no visitor sees its address any more. O(1); a
    /// no-op for a ticket already removed (and not handed out again).
    pub(crate) fn remove(&self, t: Ticket) {
        let mut s = self.lock();
        if s.slot(t.0).addr == 0 {
            return;
        }
        s.unlink(t.0);
        let free = s.free;
        *s.slot(t.0) = Slot {
            addr: 0,
            prev: NIL,
            next: free,
            queued: false,
        };
        s.free = t.0;
    }

    /// Queues the object of `t` at the end (a no-op when it is queued already). O(1).
    pub(crate) fn queue(&self, t: Ticket) {
        self.lock().push_back(t.0);
    }

    /// Takes up to `most` objects from the front of the queue and calls `visit` with each
    /// address, holding the registry's lock throughout, so each address is live during its
    /// call. An object `visit` finds [`Visit::Busy`], and `skip` (the caller's own, whose lock
    /// it holds) without a call, go back to the end; no object is taken twice in one call.
    /// `None` (nothing visited) when another thread holds the registry: it is adding,
    /// removing, queueing or visiting, and a later look does the work. Else how many objects
    /// were taken.
    pub(crate) fn try_visit(
        &self,
        skip: usize,
        most: usize,
        mut visit: impl FnMut(usize) -> Visit,
    ) -> Option<usize> {
        let mut s = match self.inner.try_lock() {
            Ok(s) => s,
            Err(TryLockError::WouldBlock) => return None,
            // A visit that panicked left the queue whole (its comm was unlinked before).
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
        };
        let mut busy = NIL;
        let mut taken = 0;
        while taken < most && s.head != NIL && s.head != busy {
            let i = s.head;
            s.unlink(i);
            taken += 1;
            let addr = s.slot(i).addr;
            let outcome = if addr == skip {
                Visit::Busy
            } else {
                visit(addr)
            };
            if outcome == Visit::Busy {
                s.push_back(i);
                if busy == NIL {
                    busy = i;
                }
            }
        }
        Some(taken)
    }

    /// Slots read or written by every operation so far.
    #[cfg(all(test, not(loom)))]
    fn touched(&self) -> u64 {
        self.lock().touched
    }

    /// Whether the object of `t` is queued.
    #[cfg(test)]
    pub(crate) fn is_queued(&self, t: Ticket) -> bool {
        self.lock().slots[t.0 as usize].queued
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::{Registry, Ticket, Visit};

    /// A registry with `n` objects (addresses 1..=n) of which those in `queued` are queued.
    fn registry(n: usize, queued: &[usize]) -> (Registry, Vec<Ticket>) {
        let r = Registry::default();
        let tickets: Vec<Ticket> = (1..=n).map(|a| r.add(a)).collect();
        for &a in queued {
            r.queue(tickets[a - 1]);
        }
        (r, tickets)
    }

    /// One look: the addresses it visits, and the slots it touched.
    fn look(r: &Registry, most: usize) -> (Vec<usize>, u64) {
        let before = r.touched();
        let mut seen = Vec::new();
        let taken = r.try_visit(0, most, |a| {
            seen.push(a);
            Visit::Done
        });
        assert_eq!(taken, Some(seen.len()), "nobody else holds the registry");
        (seen, r.touched() - before)
    }

    #[test]
    fn a_look_visits_only_queued_comms_and_costs_the_same_with_16_or_4096_registered() {
        let mut costs = Vec::new();
        for n in [16, 4096] {
            let (r, _) = registry(n, &[3, 9]);
            let (seen, cost) = look(&r, 4);
            assert_eq!(seen, [3, 9], "{n} registered");
            costs.push(cost);
            let (seen, cost) = look(&r, 4);
            assert!(seen.is_empty(), "both left the queue");
            assert_eq!(cost, 0, "an empty queue costs nothing");
        }
        assert_eq!(costs[0], costs[1], "slots touched per look: {costs:?}");
        assert!(
            costs[0] <= 8,
            "a look of 2 comms touched {} slots",
            costs[0]
        );
    }

    #[test]
    fn adding_queueing_and_removing_touch_the_same_few_slots_with_16_or_4096_registered() {
        let mut costs = Vec::new();
        for n in [16, 4096] {
            let (r, t) = registry(n, &(1..=n).step_by(2).collect::<Vec<_>>());
            let before = r.touched();
            let extra = r.add(n + 1);
            r.queue(extra);
            r.remove(t[n / 2]); // queued, in the middle of the queue
            r.remove(t[n / 2 + 1]); // not queued
            r.remove(extra); // at the end of the queue
            costs.push(r.touched() - before);
        }
        assert_eq!(costs[0], costs[1], "slots touched: {costs:?}");
        assert!(costs[0] <= 24, "slots touched: {}", costs[0]);
    }

    #[test]
    fn a_look_takes_at_most_its_bound_and_the_rest_wait_in_order() {
        let (r, _) = registry(10, &[1, 2, 3, 4, 5, 6]);
        assert_eq!(look(&r, 4).0, [1, 2, 3, 4]);
        assert_eq!(look(&r, 4).0, [5, 6]);
    }

    #[test]
    fn a_busy_comm_goes_back_to_the_end_and_is_visited_by_the_next_look() {
        let (r, t) = registry(4, &[1, 2, 3]);
        let taken = r.try_visit(0, 4, |a| if a == 2 { Visit::Busy } else { Visit::Done });
        assert_eq!(
            taken,
            Some(3),
            "each queued comm once, the busy one not twice"
        );
        assert!(r.is_queued(t[1]));
        assert!(!r.is_queued(t[0]) && !r.is_queued(t[2]));
        assert_eq!(look(&r, 4).0, [2]);
    }

    #[test]
    fn the_callers_own_comm_is_not_visited_and_stays_queued() {
        let (r, t) = registry(3, &[1, 2]);
        let mut seen = Vec::new();
        r.try_visit(2, 4, |a| {
            seen.push(a);
            Visit::Done
        });
        assert_eq!(seen, [1]);
        assert!(r.is_queued(t[1]));
    }

    #[test]
    fn queueing_a_queued_comm_keeps_its_one_place() {
        let (r, t) = registry(3, &[1, 2]);
        r.queue(t[0]);
        r.queue(t[0]);
        assert_eq!(look(&r, 8).0, [1, 2]);
    }

    #[test]
    fn a_removed_comm_is_never_visited_and_its_slot_serves_the_next_comm() {
        let (r, t) = registry(3, &[1, 2, 3]);
        r.remove(t[1]);
        assert_eq!(look(&r, 8).0, [1, 3]);
        let again = r.add(7);
        assert_eq!(again, t[1], "the free slot is reused");
        assert!(!r.is_queued(again), "a new comm starts unqueued");
        r.queue(again);
        assert_eq!(look(&r, 8).0, [7]);
    }

    #[test]
    fn removing_a_comm_twice_leaves_the_registry_as_one_removal_does() {
        let (r, t) = registry(3, &[1, 2, 3]);
        r.remove(t[1]);
        r.remove(t[1]);
        let a = r.add(8);
        let b = r.add(9);
        assert_ne!(a, b, "the freed slot is handed out once");
        r.queue(a);
        r.queue(b);
        assert_eq!(look(&r, 8).0, [1, 3, 8, 9]);
    }

    #[test]
    fn a_look_while_another_thread_holds_the_registry_does_nothing() {
        let (r, _) = registry(2, &[1]);
        let held = r.lock();
        assert_eq!(r.try_visit(0, 4, |_| Visit::Done), None);
        drop(held);
        assert_eq!(look(&r, 4).0, [1]);
    }
}

#[cfg(all(test, loom))]
mod model {
    //! Two receive comms (at addresses 1 and 2, comms 0 and 1) modelled as slots with a "live"
    //! flag that the closing thread clears where the real `close` frees the memory (a visitor
    //! asserts every address it sees is live), and with a lock over what the real core and flag
    //! hold: entries staged, and whether the comm says it is queued.
    use super::{Registry, Ticket, Visit};
    use loom::cell::UnsafeCell;
    use loom::sync::Arc;
    use loom::sync::atomic::{AtomicBool, Ordering};
    use loom::thread;

    struct Core {
        staged: u32,
        queued: bool,
    }

    /// A comm's lock as the model's threads take it: `with` waits for it, `try_with` tries
    /// once. Made of an atomic flag, as loom explores the failure of a compare-exchange but not
    /// that of `Mutex::try_lock` (the failure is what the rule is about).
    struct CoreLock {
        held: AtomicBool,
        core: UnsafeCell<Core>,
    }

    impl CoreLock {
        fn staged() -> CoreLock {
            CoreLock {
                held: AtomicBool::new(false),
                core: UnsafeCell::new(Core {
                    staged: 1,
                    queued: true,
                }),
            }
        }

        /// One attempt to take the lock.
        fn take(&self) -> bool {
            self.held
                .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        }

        /// Runs `f` on the core and lets go of the lock, which the caller took.
        fn run<R>(&self, f: impl FnOnce(&mut Core) -> R) -> R {
            // SAFETY: the caller took `held` (it was false): no other thread is in here until
            // the Release store below (loom checks it: an unsynchronised access fails the
            // model).
            let r = self.core.with_mut(|c| f(unsafe { &mut *c }));
            self.held.store(false, Ordering::Release);
            r
        }

        fn try_with<R>(&self, f: impl FnOnce(&mut Core) -> R) -> Option<R> {
            self.take().then(|| self.run(f))
        }

        fn with<R>(&self, f: impl FnOnce(&mut Core) -> R) -> R {
            while !self.take() {
                thread::yield_now();
            }
            self.run(f)
        }
    }

    struct World {
        registry: Registry,
        live: [AtomicBool; 2],
        core: [CoreLock; 2],
        tickets: [Ticket; 2],
    }

    /// Two comms, both with entries staged and queued.
    fn world() -> Arc<World> {
        let registry = Registry::default();
        let tickets = [registry.add(1), registry.add(2)];
        for t in tickets {
            registry.queue(t);
        }
        Arc::new(World {
            registry,
            live: [AtomicBool::new(true), AtomicBool::new(true)],
            core: [CoreLock::staged(), CoreLock::staged()],
            tickets,
        })
    }

    /// A waiting call on comm `me` (2: on another comm): visits queued comms, touching each, as
    /// `flush_others` does; `when_busy` is its answer for a comm it cannot lock (a comm it
    /// locks leaves the queue, its entries written).
    fn visitor(w: &World, me: usize, when_busy: Visit) {
        w.registry.try_visit(me + 1, 4, |addr| {
            let a = addr - 1;
            assert!(
                w.live[a].load(Ordering::Relaxed),
                "visited comm {a} after it was freed"
            );
            w.core[a]
                .try_with(|c| {
                    c.queued = false;
                    c.staged = 0;
                    Visit::Done
                })
                .unwrap_or(when_busy)
        });
    }

    /// An `irecv` on comm `a` that leaves one more entry staged.
    fn stage(w: &World, a: usize) {
        w.core[a].with(|c| {
            c.staged += 1;
            if !c.queued {
                c.queued = true;
                w.registry.queue(w.tickets[a]);
            }
        });
    }

    /// Once every thread is done: a comm with entries staged is queued, and its flag says so.
    fn nothing_staged_is_forgotten(w: &World, a: usize) {
        let queued = w.registry.is_queued(w.tickets[a]);
        w.core[a].with(|c| {
            assert!(
                c.staged == 0 || queued,
                "comm {a} holds {} staged entries and nobody will write them",
                c.staged
            );
            assert_eq!(c.queued, queued, "comm {a}'s flag disagrees with the queue");
        });
    }

    #[test]
    fn a_comm_removed_before_it_is_freed_is_never_visited_freed() {
        loom::model(|| {
            let w = world();
            let w2 = w.clone();
            let closer = thread::spawn(move || {
                w2.registry.remove(w2.tickets[1]);
                w2.live[1].store(false, Ordering::Relaxed);
            });
            visitor(&w, 0, Visit::Busy);
            closer.join().unwrap();
            visitor(&w, 0, Visit::Busy);
        });
    }

    #[test]
    fn two_waiting_threads_and_a_close_never_see_a_freed_comm() {
        loom::model(|| {
            let w = world();
            let (w2, w3) = (w.clone(), w.clone());
            let closer = thread::spawn(move || {
                w2.registry.remove(w2.tickets[0]);
                w2.live[0].store(false, Ordering::Relaxed);
            });
            let other = thread::spawn(move || visitor(&w3, 1, Visit::Busy));
            visitor(&w, 2, Visit::Busy);
            closer.join().unwrap();
            other.join().unwrap();
        });
    }

    #[test]
    #[should_panic(expected = "after it was freed")]
    fn freeing_before_removing_is_caught_by_the_model() {
        loom::model(|| {
            let w = world();
            let w2 = w.clone();
            let closer = thread::spawn(move || {
                w2.live[1].store(false, Ordering::Relaxed);
                w2.registry.remove(w2.tickets[1]);
            });
            visitor(&w, 0, Visit::Busy);
            closer.join().unwrap();
        });
    }

    #[test]
    fn entries_staged_while_a_look_visits_the_comm_are_never_forgotten() {
        loom::model(|| {
            let w = world();
            let w2 = w.clone();
            let receiver = thread::spawn(move || {
                stage(&w2, 0);
                stage(&w2, 0);
            });
            visitor(&w, 2, Visit::Busy);
            receiver.join().unwrap();
            nothing_staged_is_forgotten(&w, 0);
            nothing_staged_is_forgotten(&w, 1);
        });
    }

    #[test]
    #[should_panic(expected = "nobody will write them")]
    fn dropping_a_busy_comm_from_the_queue_is_caught_by_the_model() {
        loom::model(|| {
            let w = world();
            let w2 = w.clone();
            let receiver = thread::spawn(move || stage(&w2, 0));
            visitor(&w, 2, Visit::Done);
            receiver.join().unwrap();
            nothing_staged_is_forgotten(&w, 0);
        });
    }
}
