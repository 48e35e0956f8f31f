//! A cache hint for the simulator's cold tables (the event queue's slots, a link's state).

/// Asks the processor to bring `value` into the cache, without waiting for it: a hint, with no
/// effect on what the program computes.
pub(crate) fn prefetch<T>(value: &T) {
    #[cfg(target_arch = "x86_64")]
    {
        use core::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        let first = core::ptr::from_ref(value).cast::<i8>();
        // The value's first and last byte: a slot is wider than a cache line and seldom aligned
        // to one.
        let last = first.wrapping_add(size_of::<T>().saturating_sub(1));
        // SAFETY: every x86_64 processor has SSE, and a prefetch reads nothing the program
        // sees and cannot fault, whatever the address.
        unsafe {
            _mm_prefetch::<_MM_HINT_T0>(first);
            _mm_prefetch::<_MM_HINT_T0>(last);
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = value;
}

/// Asks the processor to bring every cache line of `value` into the cache: for a node's slot,
/// whose parts an event touches here and there.
pub(crate) fn prefetch_all<T>(value: &T) {
    #[cfg(target_arch = "x86_64")]
    {
        use core::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        let first = core::ptr::from_ref(value).cast::<i8>();
        for offset in (0..size_of::<T>()).step_by(64) {
            // SAFETY: as in `prefetch`: a hint that reads nothing and cannot fault.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(first.wrapping_add(offset)) };
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = value;
}
