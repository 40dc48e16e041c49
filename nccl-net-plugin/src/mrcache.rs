//! Registration cache: page-rounded, reference-counted memory registrations, shared by every
//! comm of a device.
//!
//! The plugin advertises `regIsGlobal = 1`, which promises NCCL that registrations are not tied
//! to a comm and that registering a sub-range of an already registered range is nearly free
//! (NCCL then registers user buffers once and calls `regMr`/`deregMr` around each operation).
//! This cache keeps that promise the way NCCL's own IB transport does ("MR cache"): entries are
//! sorted by start address, cover whole pages, and carry a reference count; a request that lies
//! inside an entry takes a reference instead of registering again.
//!
//! The cache is generic over the registration `R` and does no I/O: the caller passes the
//! registering closure to [`RegCache::acquire`], and receives the last reference from
//! [`RegCache::release`] so it can drop it (deregister) *after* releasing its lock. The caller
//! owns the locking; registering runs under it, which serialises registrations of a device (as in
//! NCCL) and guarantees one registration per range.
//!
//! Rules:
//! - A request `[addr, addr + len)` (a 0-byte request counts as 1 byte) is served by an existing
//!   entry whose page-rounded range contains it; among several, the smallest wins, then the one
//!   with the lowest start. Two small buffers in one page therefore share one registration, and
//!   it covers both, because it covers the whole page (aws-ofi-nccl once returned a registration
//!   keyed on the first buffer's byte range for the second buffer).
//! - Otherwise the page-rounded range is registered as a new entry. Overlapping entries are never
//!   merged: an existing registration is in use by posted work and cannot be replaced.
//! - A [`Key`] names one entry by an id never reused in the process, so keys stay valid while
//!   other entries come and go; releasing a stale key, or one from another cache, is a no-op
//!   returning `None`.
//! - Address arithmetic is done in `u128`, so no input overflows or panics. A range reaching past
//!   the end of the address space (not real memory) is handed to the closure as computed, its
//!   length clamped to `usize::MAX` if need be; the registration then fails in the verbs layer and
//!   nothing is cached.
#![forbid(unsafe_code)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Entry ids, unique across every cache of the process, so a key given to the wrong cache
/// names nothing there.
static NEXT_ID: AtomicU64 = AtomicU64::new(0);

/// Names one cache entry, for [`RegCache::release`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Key {
    /// Unique in the process, never reused.
    id: u64,
    /// The entry's start, to find it by binary search.
    start: usize,
}

/// One registration: whole pages from `start`.
#[derive(Debug)]
struct Entry<R> {
    id: u64,
    /// Page-aligned.
    start: usize,
    pages: usize,
    refs: usize,
    reg: Arc<R>,
}

impl<R> Entry<R> {
    /// One past the last byte covered.
    fn end(&self, page: usize) -> u128 {
        self.start as u128 + self.pages as u128 * page as u128
    }
}

/// The cache. Not synchronised: wrap it in a mutex.
#[derive(Debug)]
pub struct RegCache<R> {
    page: usize,
    /// Sorted by (start, pages, id).
    entries: Vec<Entry<R>>,
}

impl<R> RegCache<R> {
    /// An empty cache rounding to `page` bytes (the system page size; 0 is taken as 1).
    pub fn new(page: usize) -> Self {
        RegCache {
            page: page.max(1),
            entries: Vec::new(),
        }
    }

    /// The rounding unit.
    pub fn page(&self) -> usize {
        self.page
    }

    /// Number of entries (distinct registrations held).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The reference count of the entry `key` names, or `None` if it is not in the cache.
    pub fn refs(&self, key: Key) -> Option<usize> {
        self.position(key).map(|i| self.entries[i].refs)
    }

    /// Returns a registration covering `[addr, addr + len)` and a key to release it with.
    ///
    /// Reuses (and references) the smallest entry containing the range; otherwise calls
    /// `register(start, len)` with the page-aligned start and page-rounded length of the range
    /// (a 0-byte range gives one page) and caches the result with one reference.
    ///
    /// # Errors
    /// An error from `register` is returned as is, and nothing is cached.
    pub fn acquire<E>(
        &mut self,
        addr: usize,
        len: usize,
        register: impl FnOnce(usize, usize) -> Result<R, E>,
    ) -> Result<(Arc<R>, Key), E> {
        let page = self.page as u128;
        let lo = addr as u128;
        let hi = lo + len.max(1) as u128;

        // Entries starting after `addr` cannot contain it; scan those that start at or before.
        let upper = self.entries.partition_point(|e| e.start <= addr);
        let mut best: Option<usize> = None;
        for (i, e) in self.entries[..upper].iter().enumerate() {
            // `e.start <= addr` holds for the whole prefix.
            if e.end(self.page) >= hi {
                let better = match best {
                    None => true,
                    // Strictly smaller only: the prefix is in start order, so ties keep the
                    // lowest start.
                    Some(b) => e.pages < self.entries[b].pages,
                };
                if better {
                    best = Some(i);
                }
            }
        }
        if let Some(i) = best {
            let e = &mut self.entries[i];
            e.refs += 1;
            return Ok((
                e.reg.clone(),
                Key {
                    id: e.id,
                    start: e.start,
                },
            ));
        }

        let start = addr - addr % self.page;
        let end = hi.div_ceil(page) * page;
        let span = end - start as u128;
        // `span` exceeds `usize::MAX` only for ranges wrapping past the end of the address space;
        // the clamp is harmless there (such a registration cannot succeed).
        let pages = usize::try_from(span / page).unwrap_or(usize::MAX);
        let reg_len = usize::try_from(span).unwrap_or(usize::MAX);
        let reg = Arc::new(register(start, reg_len)?);
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let at = self
            .entries
            .partition_point(|e| (e.start, e.pages, e.id) < (start, pages, id));
        self.entries.insert(
            at,
            Entry {
                id,
                start,
                pages,
                refs: 1,
                reg: reg.clone(),
            },
        );
        Ok((reg, Key { id, start }))
    }

    /// Drops one reference. When it was the last, removes the entry and returns its registration
    /// for the caller to drop (deregister) outside its lock. `None` when references remain, and
    /// for a key that names no entry (already fully released, or from another cache).
    pub fn release(&mut self, key: Key) -> Option<Arc<R>> {
        let i = self.position(key)?;
        let e = &mut self.entries[i];
        e.refs -= 1;
        if e.refs > 0 {
            return None;
        }
        Some(self.entries.remove(i).reg)
    }

    fn position(&self, key: Key) -> Option<usize> {
        let from = self.entries.partition_point(|e| e.start < key.start);
        self.entries[from..]
            .iter()
            .take_while(|e| e.start == key.start)
            .position(|e| e.id == key.id)
            .map(|off| from + off)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::sync::Weak;

    const PAGE: usize = 4096;

    /// A fake registration: the range it was made for, and a serial.
    #[derive(Debug, PartialEq, Eq)]
    struct Reg {
        serial: usize,
        start: usize,
        len: usize,
    }

    impl Reg {
        fn covers(&self, addr: usize, len: usize) -> bool {
            let hi = addr as u128 + len.max(1) as u128;
            self.start <= addr && hi <= self.start as u128 + self.len as u128
        }
    }

    /// Records every registration call.
    #[derive(Default)]
    struct Registrar {
        calls: RefCell<Vec<(usize, usize)>>,
    }

    impl Registrar {
        fn reg(&self) -> impl FnOnce(usize, usize) -> Result<Reg, String> + '_ {
            move |start, len| {
                let mut c = self.calls.borrow_mut();
                c.push((start, len));
                Ok(Reg {
                    serial: c.len(),
                    start,
                    len,
                })
            }
        }

        fn count(&self) -> usize {
            self.calls.borrow().len()
        }
    }

    fn must_not_register(_: usize, _: usize) -> Result<Reg, String> {
        Err("unexpected registration".into())
    }

    #[test]
    fn sub_range_is_reused_without_registering() {
        let r = Registrar::default();
        let mut c = RegCache::new(PAGE);
        let (a, ka) = c.acquire(0x10000, 8192, r.reg()).expect("register");
        assert_eq!(r.calls.borrow().as_slice(), &[(0x10000, 8192)]);
        let (b, kb) = c.acquire(0x10100, 100, must_not_register).expect("reused");
        let (d, kd) = c.acquire(0x11000, 4096, must_not_register).expect("reused");
        assert!(Arc::ptr_eq(&a, &b) && Arc::ptr_eq(&a, &d));
        assert_eq!(ka, kb);
        assert_eq!(ka, kd);
        assert_eq!(c.refs(ka), Some(3));
        assert_eq!(c.len(), 1);
        assert_eq!(r.count(), 1);
    }

    #[test]
    fn refcount_to_zero_returns_the_registration_once() {
        let r = Registrar::default();
        let mut c = RegCache::new(PAGE);
        let (a, k) = c.acquire(0x2000, 10, r.reg()).expect("register");
        let _ = c.acquire(0x2000, 10, must_not_register).expect("reused");
        assert_eq!(c.release(k), None);
        assert_eq!(c.refs(k), Some(1));
        let last = c.release(k).expect("last reference");
        assert!(Arc::ptr_eq(&a, &last));
        assert!(c.is_empty());
        assert_eq!(c.refs(k), None);
        // Stale key: no panic, no effect.
        assert_eq!(c.release(k), None);
        // Dropping the caller's references deregisters.
        let weak = Arc::downgrade(&a);
        drop((a, last));
        assert!(weak.upgrade().is_none());
    }

    #[test]
    fn two_buffers_in_one_page_share_a_registration_that_covers_both() {
        let r = Registrar::default();
        let mut c = RegCache::new(PAGE);
        let base = 0x7000;
        let (a, ka) = c.acquire(base + 16, 64, r.reg()).expect("register");
        assert_eq!(r.calls.borrow().as_slice(), &[(base, PAGE)]);
        // Same page, outside the first buffer's bytes, either side of it.
        let (b, kb) = c
            .acquire(base + 2048, 64, must_not_register)
            .expect("reused");
        let (z, kz) = c.acquire(base, 8, must_not_register).expect("reused");
        assert!(Arc::ptr_eq(&a, &b) && Arc::ptr_eq(&a, &z));
        assert!(b.covers(base + 2048, 64));
        assert!(z.covers(base, 8));
        assert_eq!(ka, kb);
        assert_eq!(ka, kz);
        // The second buffer reaching into the next page is not covered: new registration.
        let (n, kn) = c.acquire(base + PAGE - 8, 64, r.reg()).expect("register");
        assert_eq!(r.calls.borrow().last(), Some(&(base, 2 * PAGE)));
        assert!(n.covers(base + PAGE - 8, 64));
        assert_ne!(kn, ka);
        // Releases in any order.
        assert_eq!(c.release(kb), None);
        assert_eq!(c.release(kn).map(|x| x.serial), Some(2));
        assert_eq!(c.release(ka), None);
        assert_eq!(c.release(kz).map(|x| x.serial), Some(1));
        assert!(c.is_empty());
    }

    #[test]
    fn overlapping_ranges_are_not_merged_and_the_smallest_container_wins() {
        let r = Registrar::default();
        let mut c = RegCache::new(PAGE);
        let (big, kbig) = c.acquire(0, 8 * PAGE, r.reg()).expect("register");
        // Overlaps the big entry but sticks out: a new entry for pages 7..9.
        let (tail, ktail) = c
            .acquire(7 * PAGE + 100, 2 * PAGE, r.reg())
            .expect("register");
        assert_eq!(r.calls.borrow()[1], (7 * PAGE, 3 * PAGE));
        assert_eq!(c.len(), 2);
        // Inside page 7: both contain it; the tail entry (3 pages) is smaller than the big one.
        let (x, kx) = c
            .acquire(7 * PAGE + 8, 8, must_not_register)
            .expect("reused");
        assert!(Arc::ptr_eq(&x, &tail));
        assert_eq!(kx, ktail);
        // Inside page 1: only the big entry.
        let (y, ky) = c.acquire(PAGE, 1, must_not_register).expect("reused");
        assert!(Arc::ptr_eq(&y, &big));
        assert_eq!(ky, kbig);
        // Equal sizes: [0, 2p) and [p, 3p) both contain [p, 2p); the lower start wins.
        let mut c2 = RegCache::new(PAGE);
        let r2 = Registrar::default();
        let (lo, klo) = c2.acquire(0, 2 * PAGE, r2.reg()).expect("register");
        let (_hi, khi) = c2.acquire(PAGE, 2 * PAGE, r2.reg()).expect("register");
        assert_ne!(klo, khi);
        let (m, km) = c2.acquire(PAGE, PAGE, must_not_register).expect("reused");
        assert!(Arc::ptr_eq(&m, &lo));
        assert_eq!(km, klo);
    }

    #[test]
    fn keys_survive_other_inserts_and_removals() {
        let r = Registrar::default();
        let mut c = RegCache::new(PAGE);
        let (_, k5) = c.acquire(5 * PAGE, 10, r.reg()).expect("register");
        let (_, k9) = c.acquire(9 * PAGE, 10, r.reg()).expect("register");
        // Insert before both, then remove it: indices shift twice.
        let (_, k1) = c.acquire(PAGE, 10, r.reg()).expect("register");
        let (_, k3) = c.acquire(3 * PAGE, 10, r.reg()).expect("register");
        assert_eq!(c.release(k1).map(|x| x.serial), Some(3));
        assert_eq!(c.release(k9).map(|x| x.serial), Some(2));
        assert_eq!(c.release(k5).map(|x| x.serial), Some(1));
        assert_eq!(c.release(k3).map(|x| x.serial), Some(4));
        // A new entry at a released start gets a new id: the old key stays dead.
        let (_, k5b) = c.acquire(5 * PAGE, 10, r.reg()).expect("register");
        assert_ne!(k5, k5b);
        assert_eq!(c.release(k5), None);
        assert_eq!(c.refs(k5b), Some(1));
    }

    #[test]
    fn foreign_key_is_ignored() {
        let r = Registrar::default();
        let mut a = RegCache::new(PAGE);
        let mut b = RegCache::new(PAGE);
        let (_, ka) = a.acquire(0, 10, r.reg()).expect("register");
        let (_, _kb0) = b.acquire(PAGE, 10, r.reg()).expect("register");
        let (_, kb1) = b.acquire(2 * PAGE, 10, r.reg()).expect("register");
        // Same start and (per-cache) position as `a`'s entry: still not `a`'s.
        let (_, kb2) = b.acquire(0, 10, r.reg()).expect("register");
        assert_eq!(a.release(kb1), None);
        assert_eq!(a.release(kb2), None);
        assert_eq!(a.refs(ka), Some(1));
        assert_eq!(b.refs(ka), None);
    }

    #[test]
    fn zero_length_takes_one_page() {
        let r = Registrar::default();
        let mut c = RegCache::new(PAGE);
        let (a, k) = c.acquire(0x5008, 0, r.reg()).expect("register");
        assert_eq!(r.calls.borrow().as_slice(), &[(0x5000, PAGE)]);
        assert!(a.covers(0x5008, 0));
        // Page-aligned zero-length request too.
        let (_, k2) = c.acquire(0x5000, 0, must_not_register).expect("reused");
        assert_eq!(k, k2);
        let (_, k3) = c.acquire(0x6000, 0, r.reg()).expect("register");
        assert_eq!(r.calls.borrow()[1], (0x6000, PAGE));
        assert_ne!(k, k3);
    }

    #[test]
    fn ranges_crossing_page_boundaries_are_rounded_out() {
        let r = Registrar::default();
        let mut c = RegCache::new(PAGE);
        let _ = c.acquire(PAGE - 1, 2, r.reg()).expect("register");
        assert_eq!(r.calls.borrow()[0], (0, 2 * PAGE));
        let _ = c.acquire(8 * PAGE, PAGE, r.reg()).expect("register");
        assert_eq!(r.calls.borrow()[1], (8 * PAGE, PAGE));
        let _ = c.acquire(8 * PAGE, PAGE + 1, r.reg()).expect("register");
        assert_eq!(r.calls.borrow()[2], (8 * PAGE, 2 * PAGE));
        let _ = c
            .acquire(20 * PAGE + 5, 3 * PAGE, r.reg())
            .expect("register");
        assert_eq!(r.calls.borrow()[3], (20 * PAGE, 4 * PAGE));
        assert_eq!(c.len(), 4);
    }

    #[test]
    fn failed_registration_caches_nothing() {
        let mut c: RegCache<Reg> = RegCache::new(PAGE);
        let e = c
            .acquire(0x1000, 10, |_, _| Err::<Reg, _>("ENOMEM"))
            .expect_err("fails");
        assert_eq!(e, "ENOMEM");
        assert!(c.is_empty());
        let r = Registrar::default();
        let _ = c.acquire(0x1000, 10, r.reg()).expect("register");
        assert_eq!(r.count(), 1);
    }

    #[test]
    fn top_of_the_address_space_does_not_overflow() {
        let r = Registrar::default();
        let mut c = RegCache::new(PAGE);
        let top = usize::MAX - 10;
        let (a, k) = c.acquire(top, 5, r.reg()).expect("register");
        assert_eq!(a.start, usize::MAX - (PAGE - 1));
        assert_eq!(a.len, PAGE);
        let (_, k2) = c.acquire(top, 10, must_not_register).expect("reused");
        assert_eq!(k, k2);
        // Past the end: passed on as computed (the verbs layer rejects it), no panic.
        let (b, _) = c.acquire(top, 100, r.reg()).expect("register");
        assert_eq!((b.start, b.len), (usize::MAX - (PAGE - 1), 2 * PAGE));
        // A span longer than the address space: length clamped.
        let (w, _) = c.acquire(5000, usize::MAX, r.reg()).expect("register");
        assert_eq!((w.start, w.len), (PAGE, usize::MAX));
        // Page size 0 is taken as 1.
        let mut one: RegCache<Reg> = RegCache::new(0);
        assert_eq!(one.page(), 1);
        let (x, _) = one.acquire(7, 3, r.reg()).expect("register");
        assert_eq!((x.start, x.len), (7, 3));
    }

    /// splitmix64: small, deterministic, good enough to drive a model check.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        }

        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    /// The model: live entries as plain ranges with counts, scanned naively.
    struct ModelEntry {
        serial: usize,
        start: usize,
        end: usize,
        refs: usize,
    }

    fn run_model(seed: u64, page: usize, steps: usize) {
        let mut rng = Rng(seed);
        let mut cache: RegCache<Reg> = RegCache::new(page);
        let mut model: Vec<ModelEntry> = Vec::new();
        // Held acquisitions: (key, registration, model serial).
        let mut held: Vec<(Key, Arc<Reg>, usize)> = Vec::new();
        let mut dead: Vec<(Key, Weak<Reg>)> = Vec::new();
        let mut serial = 0usize;
        let space = 32 * page as u64;

        for step in 0..steps {
            let acquire = held.is_empty() || rng.below(100) < 55;
            if acquire {
                let addr = rng.below(space) as usize;
                let len = match rng.below(4) {
                    0 => 0,
                    1 => rng.below(64) as usize,
                    2 => rng.below(page as u64) as usize,
                    _ => rng.below(4 * page as u64) as usize,
                };
                let hi = addr + len.max(1);
                // Expected: the smallest containing entry, then the lowest start.
                let want = model
                    .iter()
                    .filter(|m| m.start <= addr && hi <= m.end)
                    .min_by_key(|m| (m.end - m.start, m.start))
                    .map(|m| m.serial);
                let mut called = None;
                let (reg, key) = cache
                    .acquire(addr, len, |s, l| {
                        called = Some((s, l));
                        Ok::<_, ()>(Reg {
                            serial: serial + 1,
                            start: s,
                            len: l,
                        })
                    })
                    .expect("registration succeeds");
                assert!(
                    reg.covers(addr, len),
                    "step {step}: {reg:?} vs {addr:#x}+{len}"
                );
                match (want, called) {
                    (Some(w), None) => {
                        assert_eq!(reg.serial, w, "step {step}: reused the wrong entry");
                        let m = model.iter_mut().find(|m| m.serial == w).expect("in model");
                        m.refs += 1;
                    }
                    (None, Some((s, l))) => {
                        serial += 1;
                        assert_eq!(s % page, 0);
                        assert_eq!(l % page, 0);
                        assert_eq!(s, addr / page * page);
                        assert_eq!(s + l, hi.div_ceil(page) * page);
                        model.push(ModelEntry {
                            serial,
                            start: s,
                            end: s + l,
                            refs: 1,
                        });
                    }
                    (w, c) => panic!("step {step}: model wanted {w:?}, cache registered {c:?}"),
                }
                held.push((key, reg.clone(), reg.serial));
            } else if rng.below(10) == 0 && !dead.is_empty() {
                // A stale key: must be ignored.
                let i = rng.below(dead.len() as u64) as usize;
                assert_eq!(cache.release(dead[i].0), None, "step {step}: stale key");
            } else {
                let i = rng.below(held.len() as u64) as usize;
                let (key, reg, s) = held.swap_remove(i);
                let mi = model.iter().position(|m| m.serial == s).expect("in model");
                model[mi].refs -= 1;
                let got = cache.release(key);
                if model[mi].refs == 0 {
                    model.remove(mi);
                    let last = got.expect("last reference returns the registration");
                    assert!(Arc::ptr_eq(&last, &reg));
                    dead.push((key, Arc::downgrade(&reg)));
                } else {
                    assert!(got.is_none(), "step {step}: references remain");
                    assert_eq!(cache.refs(key), Some(model[mi].refs));
                }
            }
            assert_eq!(cache.len(), model.len(), "step {step}");
            // The internal order invariant.
            assert!(
                cache
                    .entries
                    .windows(2)
                    .all(|w| (w[0].start, w[0].pages, w[0].id) < (w[1].start, w[1].pages, w[1].id))
            );
        }
        // Drain: everything comes back exactly once, and every registration is then dropped.
        while let Some((key, _reg, s)) = held.pop() {
            let mi = model.iter().position(|m| m.serial == s).expect("in model");
            model[mi].refs -= 1;
            let got = cache.release(key);
            assert_eq!(got.is_some(), model[mi].refs == 0);
            if model[mi].refs == 0 {
                model.remove(mi);
            }
        }
        assert!(cache.is_empty() && model.is_empty());
        for (_, w) in dead {
            assert!(
                w.upgrade().is_none(),
                "a released registration is still alive"
            );
        }
    }

    #[test]
    fn random_sequences_match_the_model() {
        for seed in 0..200 {
            run_model(seed, PAGE, 400);
        }
        // Tiny pages make partial overlaps and equal-size ties frequent.
        for seed in 1000..1200 {
            run_model(seed, 16, 400);
        }
    }
}
