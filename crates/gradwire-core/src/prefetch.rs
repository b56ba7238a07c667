//! Software prefetch. The simulator's working set (one endpoint pair per flow, pooled
//! packets, ~10^5 live flows at 144 hosts) is far larger than the caches, and most of its
//! time went to loads that miss. Where the event loop knows what it will touch next — the
//! flows at the front of a NIC's ready list, the packets behind a wire's head, the target
//! of the next event — it asks for those lines early. A hint only: the output never
//! depends on it.

/// Start loading the cache line holding `p`. Never faults, whatever the address.
#[inline(always)]
pub fn line(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `prefetcht0` is a hint; it does not fault on any address.
    unsafe {
        std::arch::x86_64::_mm_prefetch(p as *const i8, std::arch::x86_64::_MM_HINT_T0)
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Start loading the slot after `last` in its buffer: where a ring buffer's next push
/// goes. A long queue's ring is larger than the cache, so that slot was last touched a
/// whole ring ago, and the next push is usually far enough off to hide the miss.
#[inline(always)]
pub fn after<E>(last: Option<&E>) {
    if let Some(e) = last {
        // past the end of the buffer is harmless: a prefetch never faults
        line((e as *const E as *const u8).wrapping_add(std::mem::size_of::<E>()));
    }
}
