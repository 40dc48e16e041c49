//! A comm's request table: a fixed number of slots, a free list, and the rule that a request is
//! freed exactly once, when `test` reports it done.
//!
//! NCCL gets a stable pointer per slot (the plugin owns those); the state behind it lives here.

use super::CoreError;

/// A fixed-size table of requests of type `S`.
#[derive(Debug)]
pub struct RequestTable<S> {
    slots: Vec<Option<S>>,
    /// Free slot indexes; popped from the end, so the lowest index is used first.
    free: Vec<u32>,
}

impl<S> RequestTable<S> {
    pub fn new(capacity: usize) -> RequestTable<S> {
        let capacity = u32::try_from(capacity).unwrap_or(u32::MAX);
        RequestTable {
            slots: (0..capacity).map(|_| None).collect(),
            free: (0..capacity).rev().collect(),
        }
    }

    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    pub fn is_full(&self) -> bool {
        self.free.is_empty()
    }

    /// Requests in flight (allocated and not yet reported done).
    #[inline]
    pub fn in_flight(&self) -> usize {
        self.slots.len() - self.free.len()
    }

    /// Takes a free slot for `state` (inlined into the send and receive paths: a call per
    /// message costs more than its body).
    #[inline(always)]
    pub fn alloc(&mut self, state: S) -> Result<u32, CoreError> {
        // Not `ok_or`: the error would be built (and dropped) on every call.
        let Some(idx) = self.free.pop() else {
            return Err(CoreError::TableFull {
                capacity: self.slots.len(),
            });
        };
        self.slots[idx as usize] = Some(state);
        Ok(idx)
    }

    #[inline]
    pub fn get(&self, idx: u32) -> Option<&S> {
        self.slots.get(idx as usize).and_then(Option::as_ref)
    }

    #[inline]
    pub fn get_mut(&mut self, idx: u32) -> Option<&mut S> {
        self.slots.get_mut(idx as usize).and_then(Option::as_mut)
    }

    /// The state of a request that must be in flight (`test` on anything else is a usage error).
    #[inline]
    pub fn in_flight_mut(&mut self, idx: u32) -> Result<&mut S, CoreError> {
        self.get_mut(idx).ok_or(CoreError::NotInFlight { idx })
    }

    /// `f`'s answer for the state of slot `idx` when it is in flight; when that answer is
    /// `Some`, the slot is freed in the same look-up (a request that `test` finds done).
    #[inline(always)]
    pub fn take_if<R>(&mut self, idx: u32, f: impl FnOnce(&S) -> Option<R>) -> Option<R> {
        let mut answer = None;
        self.free_if(idx, |s| {
            answer = f(s);
            answer.is_some()
        });
        answer
    }

    /// Whether `f` answers yes for the state of slot `idx` when it is in flight; the slot is
    /// then freed in the same look-up. `f` reads the state in place (a finished request's
    /// result is handed on from where it lies, not copied out first).
    #[inline(always)]
    pub fn free_if(&mut self, idx: u32, f: impl FnOnce(&S) -> bool) -> bool {
        let Some(slot) = self.slots.get_mut(idx as usize) else {
            return false;
        };
        let Some(state) = slot.as_ref() else {
            return false;
        };
        if !f(state) {
            return false;
        }
        *slot = None;
        self.free.push(idx);
        true
    }

    /// Frees a slot; the state it held is returned.
    #[inline]
    pub fn release(&mut self, idx: u32) -> Option<S> {
        let s = self.slots.get_mut(idx as usize)?.take()?;
        self.free.push(idx);
        Some(s)
    }

    /// Every request in flight, with its index.
    pub fn iter(&self) -> impl Iterator<Item = (u32, &S)> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.as_ref().map(|s| (i as u32, s)))
    }

    /// Every request in flight, with its index.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (u32, &mut S)> {
        self.slots
            .iter_mut()
            .enumerate()
            .filter_map(|(i, s)| s.as_mut().map(|s| (i as u32, s)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_reused_only_after_release() {
        let mut t = RequestTable::new(2);
        let a = t.alloc('a').unwrap();
        let b = t.alloc('b').unwrap();
        assert_eq!((a, b), (0, 1));
        assert!(t.is_full());
        assert_eq!(t.alloc('c'), Err(CoreError::TableFull { capacity: 2 }));
        assert_eq!(t.release(a), Some('a'));
        assert_eq!(t.release(a), None, "a second release finds nothing");
        assert_eq!(t.alloc('d').unwrap(), a);
        assert_eq!(t.in_flight(), 2);
    }

    #[test]
    fn take_if_frees_the_slot_only_when_the_answer_is_some() {
        let mut t = RequestTable::new(2);
        let a = t.alloc(1u8).unwrap();
        assert_eq!(t.take_if(a, |&v| (v == 2).then_some(v)), None);
        assert_eq!(t.in_flight(), 1, "a None answer keeps the request");
        assert_eq!(t.take_if(a, |&v| (v == 1).then_some(v)), Some(1));
        assert_eq!(t.in_flight(), 0);
        assert_eq!(t.take_if(a, |&v| Some(v)), None, "a free slot answers None");
        assert_eq!(
            t.take_if(99, |&v| Some(v)),
            None,
            "so does one out of range"
        );
        assert_eq!(t.alloc(3).unwrap(), a, "the freed slot is reused");
    }

    #[test]
    fn free_if_frees_the_slot_only_when_the_answer_is_yes() {
        let mut t = RequestTable::new(2);
        let a = t.alloc(1u8).unwrap();
        assert!(!t.free_if(a, |&v| v == 2));
        assert_eq!(t.in_flight(), 1, "a no keeps the request");
        let mut seen = 0;
        assert!(t.free_if(a, |&v| {
            seen = v;
            v == 1
        }));
        assert_eq!((seen, t.in_flight()), (1, 0));
        assert!(!t.free_if(a, |_| true), "a free slot answers no");
        assert!(!t.free_if(99, |_| true), "so does one out of range");
        assert_eq!(t.alloc(3).unwrap(), a, "the freed slot is reused");
    }

    #[test]
    fn a_free_or_out_of_range_slot_is_not_in_flight() {
        let mut t: RequestTable<u8> = RequestTable::new(4);
        assert_eq!(t.in_flight_mut(0), Err(CoreError::NotInFlight { idx: 0 }));
        assert_eq!(t.in_flight_mut(99), Err(CoreError::NotInFlight { idx: 99 }));
    }
}
