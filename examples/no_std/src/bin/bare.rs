//! The same exchange with no std anywhere: `#![no_std]`, `#![no_main]`, its own panic handler,
//! linked against the C library only for the process entry, `write` and the `mem*` functions a
//! target without an OS would get from `compiler_builtins`.
//!
//! That this builds is the proof: a `#[panic_handler]` collides with std's own, so if weft-proto
//! or any crate it pulls in used std, this binary would not compile. Running it shows the same
//! exchange completes; it prints what the std binary prints and exits 0, or 1 on a failure.

#![no_std]
#![no_main]

extern crate alloc;

use alloc::format;
use core::ffi::{c_char, c_int};

#[link(name = "c")]
unsafe extern "C" {
    fn write(fd: c_int, buf: *const u8, count: usize) -> isize;
}

fn print(fd: c_int, text: &str) {
    let mut rest = text.as_bytes();
    while !rest.is_empty() {
        // SAFETY: `rest` is a live slice and `write` reads at most `rest.len()` bytes of it.
        let n = unsafe { write(fd, rest.as_ptr(), rest.len()) };
        let Ok(n) = usize::try_from(n) else { return };
        if n == 0 {
            return;
        }
        rest = &rest[n..];
    }
}

/// The C runtime's entry point calls this, as it would a C program's `main`.
#[unsafe(no_mangle)]
pub extern "C" fn main(_argc: c_int, _argv: *const *const c_char) -> c_int {
    match weft_no_std::run() {
        Ok(outcome) => {
            print(1, &format!("{outcome}\nok\n"));
            0
        }
        Err(e) => {
            print(2, &format!("{e}\n"));
            1
        }
    }
}

unsafe extern "C" {
    fn abort() -> !;
}

#[panic_handler]
fn panic(info: &core::panic::PanicInfo<'_>) -> ! {
    print(2, &format!("panic: {info}\n"));
    // SAFETY: `abort` takes no arguments and never returns.
    unsafe { abort() }
}

// The host's prebuilt `alloc` is compiled for unwinding and names the unwinder's resume function
// and Rust's personality routine; with `panic = "abort"` nothing ever unwinds, so neither is ever
// called. A device target's prebuilt library is compiled for abort and needs neither.

/// Never called: nothing unwinds (see above).
#[unsafe(no_mangle)]
pub extern "C" fn _Unwind_Resume() -> ! {
    // SAFETY: as in `panic`.
    unsafe { abort() }
}

/// Never called: nothing unwinds (see above).
#[unsafe(no_mangle)]
pub extern "C" fn rust_eh_personality() {}
