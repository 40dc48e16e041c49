//! The process-wide list of open receive comms (by address), and the lifetime rule that makes
//! reading it from any thread sound.
//!
//! Why the list exists is in [`super::cts`]: a waiting call on any comm writes out the
//! clear-to-send entries other receive comms hold staged. The rule:
//! - a comm is added once it is at its final heap address, before NCCL can see it;
//! - a comm is removed, under the list's lock, **before anything else of its end happens**: before
//!   `close` overwrites its magic word, before its memory is handed back to a `Box` and freed;
//! - a visitor only dereferences an address while it holds the list's lock.
//!
//! So an address a visitor sees names a live comm, and nobody else has a `Box` or `&mut` of it:
//! removal waits for the visitor to let go of the lock. The model tests at the end check the rule
//! (and that the wrong order, freeing first, is caught) under every interleaving with `loom`
//! (`RUSTFLAGS="--cfg loom" cargo test -p nccl-net-plugin --lib receivers`).

use crate::sync::Mutex;
use std::sync::OnceLock;

/// Every open receive comm of the process, by address.
pub(super) fn list() -> &'static Registry {
    static RECEIVERS: OnceLock<Registry> = OnceLock::new();
    RECEIVERS.get_or_init(Registry::default)
}

/// A set of object addresses, visited under one lock.
#[derive(Debug, Default)]
pub(crate) struct Registry {
    list: Mutex<Vec<usize>>,
}

impl Registry {
    /// Adds `addr` (a live object at its final address).
    pub(crate) fn add(&self, addr: usize) {
        let mut l = self.list.lock().unwrap_or_else(|p| p.into_inner());
        l.push(addr);
    }

    /// Removes `addr`; waits for a visitor that holds the list. A no-op for an address that was
    /// never added. Once it returns, no visitor sees `addr` any more.
    pub(crate) fn remove(&self, addr: usize) {
        let mut l = self.list.lock().unwrap_or_else(|p| p.into_inner());
        l.retain(|&c| c != addr);
    }

    /// Calls `visit` with every address but `skip`, holding the list's lock throughout, so each
    /// address is live during its call. `false` (nothing visited) when another thread holds the
    /// list: it is adding, removing, or visiting, and a visitor does the same work.
    pub(crate) fn try_visit(&self, skip: usize, mut visit: impl FnMut(usize)) -> bool {
        let Ok(l) = self.list.try_lock() else {
            return false;
        };
        for &a in l.iter().filter(|&&a| a != skip) {
            visit(a);
        }
        true
    }
}

#[cfg(all(test, loom))]
mod model {
    //! Two receive comms, modelled as slots with a "live" flag that the closing thread clears
    //! where the real `close` frees the memory. A visitor asserts every address it sees is live.
    use super::Registry;
    use loom::sync::Arc;
    use loom::sync::atomic::{AtomicBool, Ordering};
    use loom::thread;

    struct World {
        registry: Registry,
        live: [AtomicBool; 2],
    }

    fn world() -> Arc<World> {
        let w = Arc::new(World {
            registry: Registry::default(),
            live: [AtomicBool::new(true), AtomicBool::new(true)],
        });
        w.registry.add(0);
        w.registry.add(1);
        w
    }

    /// A waiting call on comm `me`: visits the others and touches each.
    fn visitor(w: &World, me: usize) {
        w.registry.try_visit(me, |a| {
            assert!(
                w.live[a].load(Ordering::Relaxed),
                "visited comm {a} after it was freed"
            );
        });
    }

    #[test]
    fn a_comm_removed_before_it_is_freed_is_never_visited_freed() {
        loom::model(|| {
            let w = world();
            let w2 = w.clone();
            let closer = thread::spawn(move || {
                w2.registry.remove(1);
                w2.live[1].store(false, Ordering::Relaxed);
            });
            visitor(&w, 0);
            closer.join().unwrap();
            visitor(&w, 0);
        });
    }

    #[test]
    fn two_waiting_threads_and_a_close_never_see_a_freed_comm() {
        loom::model(|| {
            let w = world();
            let (w2, w3) = (w.clone(), w.clone());
            let closer = thread::spawn(move || {
                w2.registry.remove(0);
                w2.live[0].store(false, Ordering::Relaxed);
            });
            let other = thread::spawn(move || visitor(&w3, 1));
            visitor(&w, 2);
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
                w2.registry.remove(1);
            });
            visitor(&w, 0);
            closer.join().unwrap();
        });
    }
}
