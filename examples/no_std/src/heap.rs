//! The example's own heap: `talc` serving one static array, behind a thin wrapper that keeps the
//! live and peak byte counts, so the run can say how much of the arena the protocols needed.
//!
//! Whatever binary links this crate allocates from here, the std `main` included: the exchange
//! never touches an operating system's allocator.

// The one place this crate needs `unsafe`: handing talc a static array and forwarding the
// `GlobalAlloc` calls. Everything else is checked by the compiler.
#![allow(unsafe_code)]

use core::alloc::{GlobalAlloc, Layout};
use core::sync::atomic::{AtomicUsize, Ordering};

use spinning_top::RawSpinlock;
use talc::TalcLock;
use talc::source::Claim;

/// Bytes in the arena: the 256 KiB of RAM of the microcontroller issue #7 aims at. The exchange
/// has to fit, or the allocation fails and the run aborts.
pub const ARENA_BYTES: usize = 256 * 1024;

/// talc plus the counters the run reports.
struct Counted {
    talc: TalcLock<RawSpinlock, Claim>,
    live: AtomicUsize,
    peak: AtomicUsize,
}

impl Counted {
    fn grew(&self, by: usize) {
        let live = self.live.fetch_add(by, Ordering::Relaxed) + by;
        self.peak.fetch_max(live, Ordering::Relaxed);
    }

    fn shrank(&self, by: usize) {
        self.live.fetch_sub(by, Ordering::Relaxed);
    }
}

// SAFETY: every call is forwarded unchanged to talc, which upholds `GlobalAlloc`'s contract; the
// counters are only arithmetic on the sizes of calls that succeeded.
unsafe impl GlobalAlloc for Counted {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's guarantees for `layout` are talc's.
        let p = unsafe { self.talc.alloc(layout) };
        if !p.is_null() {
            self.grew(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from this allocator with `layout`, as the caller guarantees.
        unsafe { self.talc.dealloc(ptr, layout) };
        self.shrank(layout.size());
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as for `alloc` and `dealloc`: the caller's guarantees are talc's.
        let p = unsafe { self.talc.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            self.shrank(layout.size());
            self.grew(new_size);
        }
        p
    }
}

#[global_allocator]
static HEAP: Counted = Counted {
    // SAFETY: the array is used by nothing but this allocator: it is declared here, inside the
    // initialiser, so no other code can name it.
    talc: TalcLock::new(unsafe {
        static mut ARENA: [u8; ARENA_BYTES] = [0; ARENA_BYTES];
        Claim::array(&raw mut ARENA)
    }),
    live: AtomicUsize::new(0),
    peak: AtomicUsize::new(0),
};

/// The most bytes live on the heap at once so far (the sizes asked for, not talc's overhead).
pub fn peak_bytes() -> usize {
    HEAP.peak.load(Ordering::Relaxed)
}

/// Bytes live on the heap now.
pub fn live_bytes() -> usize {
    HEAP.live.load(Ordering::Relaxed)
}

/// Starts a new peak measurement from what is live now.
pub fn reset_peak() {
    HEAP.peak.store(live_bytes(), Ordering::Relaxed);
}
