//! Each host NIC's ready lists: endpoints that may have a packet for it, one FIFO per
//! scheduling class, with a bit per non-empty class so that a pull finds the first class
//! to serve without walking the empty ones.

use std::collections::VecDeque;

pub(super) struct ReadyLists {
    classes: usize,
    /// Host h's class c at `h * classes + c`.
    lists: Vec<VecDeque<u32>>,
    /// Host h's non-empty classes, bit c for class c (at most 8 classes).
    nonempty: Vec<u8>,
}

impl ReadyLists {
    pub fn new(hosts: usize, classes: usize) -> Self {
        assert!((1..=8).contains(&classes), "1..=8 NIC classes");
        ReadyLists { classes, lists: vec![VecDeque::new(); hosts * classes], nonempty: vec![0; hosts] }
    }

    /// Whether `node` is a host with an endpoint waiting (switches have none).
    #[inline]
    pub fn any(&self, node: u32) -> bool {
        self.nonempty.get(node as usize).is_some_and(|&m| m != 0)
    }

    /// The first (most urgent) class of `host` with an endpoint waiting.
    #[inline]
    pub fn first_class(&self, host: u32) -> Option<u8> {
        match self.nonempty[host as usize] {
            0 => None,
            m => Some(m.trailing_zeros() as u8),
        }
    }

    #[inline]
    pub fn push_back(&mut self, host: u32, class: u8, ep: u32) {
        self.lists[host as usize * self.classes + class as usize].push_back(ep);
        self.nonempty[host as usize] |= 1 << class;
    }

    #[inline]
    pub fn pop_front(&mut self, host: u32, class: u8) -> Option<u32> {
        let list = &mut self.lists[host as usize * self.classes + class as usize];
        let ep = list.pop_front();
        if list.is_empty() {
            self.nonempty[host as usize] &= !(1 << class);
        }
        ep
    }

    /// The `i`-th endpoint waiting in `host`'s `class`.
    #[inline]
    pub fn get(&self, host: u32, class: u8, i: usize) -> Option<u32> {
        self.lists[host as usize * self.classes + class as usize].get(i).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_class_is_the_lowest_non_empty_one_and_emptied_classes_clear() {
        let mut r = ReadyLists::new(2, 8);
        assert!(!r.any(0) && !r.any(1) && !r.any(99), "no host waits; a switch id never does");
        r.push_back(1, 5, 50);
        r.push_back(1, 2, 20);
        r.push_back(1, 2, 21);
        assert!(!r.any(0) && r.any(1));
        assert_eq!(r.first_class(1), Some(2));
        assert_eq!((r.get(1, 2, 0), r.get(1, 2, 1), r.get(1, 2, 2)), (Some(20), Some(21), None));
        assert_eq!(r.pop_front(1, 2), Some(20));
        assert_eq!(r.first_class(1), Some(2), "class 2 still holds 21");
        assert_eq!(r.pop_front(1, 2), Some(21));
        assert_eq!(r.first_class(1), Some(5), "class 2 emptied: its bit is clear");
        assert_eq!(r.pop_front(1, 5), Some(50));
        assert_eq!((r.first_class(1), r.any(1)), (None, false));
    }
}
