//! An `Option<u64>` in 8 bytes, for endpoints' deadlines, times and sequence numbers: a
//! datacenter run keeps 10^6 or more TCP endpoints live at once, and `Option<u64>` takes 16.

/// `u64::MAX` stands for `None`: no sequence number or time a run reaches (a deadline that
/// saturated there would never fire, as none).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct Opt(u64);

impl Opt {
    pub(crate) const NONE: Opt = Opt(u64::MAX);

    #[inline]
    pub(crate) fn get(self) -> Option<u64> {
        (self.0 != u64::MAX).then_some(self.0)
    }

    #[inline]
    pub(crate) fn take(&mut self) -> Option<u64> {
        std::mem::replace(self, Opt::NONE).get()
    }
}

impl From<Option<u64>> for Opt {
    #[inline]
    fn from(v: Option<u64>) -> Opt {
        Opt(v.unwrap_or(u64::MAX))
    }
}

impl Default for Opt {
    fn default() -> Opt {
        Opt::NONE
    }
}

impl std::fmt::Debug for Opt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.get().fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::Opt;

    #[test]
    fn it_round_trips_every_value_but_the_sentinel() {
        for v in [None, Some(0), Some(1), Some(u64::MAX - 1)] {
            assert_eq!(Opt::from(v).get(), v);
        }
        assert_eq!(Opt::from(Some(u64::MAX)).get(), None, "saturated: never reached");
        let mut o = Opt::from(Some(7));
        assert_eq!((o.take(), o), (Some(7), Opt::NONE));
        assert_eq!(std::mem::size_of::<Opt>(), 8);
    }
}
