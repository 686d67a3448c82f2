//! The process's global allocator: the system allocator, except that allocations of
//! [`LARGE_ALLOCATION_BYTES`] or more are anonymous mappings made with `MAP_NORESERVE`, which
//! reserve address space but commit memory only for pages that are actually written.
//!
//! Why: `kafka-protocol` 0.18 sizes a decoded array with `Vec::with_capacity(count)` using the
//! count read from the wire, before checking that the frame holds that many elements
//! (upstream kafka-protocol-rs PRs 152, 161 and 200 propose the fix). A 30-byte request claiming
//! 2^31 topics would make the system allocator fail a ~200 GB request, and Rust aborts the
//! process on allocation failure. With this allocator such a request costs only address space:
//! decoding then fails on the missing bytes, the mapping is released, and the connection is
//! closed with a log line. No allocation Keel makes on purpose reaches the threshold.
//!
//! On a machine with strict overcommit (`vm.overcommit_memory=2`) `MAP_NORESERVE` is ignored and
//! such a request can still exhaust the commit limit.

#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::ptr;

/// Allocations at least this large are lazily committed mappings (1 GiB).
pub const LARGE_ALLOCATION_BYTES: usize = 1 << 30;

/// Mappings are page aligned; larger alignments go to the system allocator.
const PAGE_BYTES: usize = 4096;

/// See the module docs.
pub struct GuardedAllocator;

fn is_large(layout: Layout) -> bool {
    layout.size() >= LARGE_ALLOCATION_BYTES && layout.align() <= PAGE_BYTES
}

unsafe fn map(size: usize) -> *mut u8 {
    // SAFETY: an anonymous private mapping has no preconditions; failure is MAP_FAILED.
    let p = unsafe {
        libc::mmap(
            ptr::null_mut(),
            size,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        ptr::null_mut()
    } else {
        p.cast()
    }
}

// SAFETY: every block is freed by the same path that allocated it, chosen by `is_large` of the
// block's layout, which `GlobalAlloc` guarantees is the layout it was allocated with; mappings
// are page aligned and zero filled.
unsafe impl GlobalAlloc for GuardedAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if is_large(layout) {
            unsafe { map(layout.size()) }
        } else {
            unsafe { System.alloc(layout) }
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if is_large(layout) {
            // Fresh anonymous mappings are zero filled.
            unsafe { map(layout.size()) }
        } else {
            unsafe { System.alloc_zeroed(layout) }
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if is_large(layout) {
            unsafe {
                libc::munmap(ptr.cast(), layout.size());
            }
        } else {
            unsafe { System.dealloc(ptr, layout) }
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        if !is_large(layout) && !is_large(new_layout) {
            return unsafe { System.realloc(ptr, layout, new_size) };
        }
        let new_ptr = unsafe { self.alloc(new_layout) };
        if !new_ptr.is_null() {
            unsafe {
                ptr::copy_nonoverlapping(ptr, new_ptr, layout.size().min(new_size));
                self.dealloc(ptr, layout);
            }
        }
        new_ptr
    }
}

#[cfg(test)]
mod tests {
    // Shows: an allocation far beyond the machine's memory (what a lying array count asks for)
    // succeeds without committing memory and is released; small allocations are unaffected.
    #[test]
    fn huge_reservations_do_not_abort() {
        let huge: Vec<[u8; 96]> = Vec::with_capacity((1usize << 31) - 1);
        assert!(huge.capacity() >= (1usize << 31) - 1);
        drop(huge);
        let mut grow: Vec<u8> = Vec::new();
        for i in 0..100_000u32 {
            grow.push((i % 251) as u8);
        }
        assert_eq!(grow[99_999], (99_999 % 251) as u8);
    }

    // Shows: growing a buffer across the threshold keeps its contents (realloc path).
    #[test]
    fn realloc_across_the_threshold_keeps_data() {
        let mut v: Vec<u8> = vec![7; 1024];
        v.reserve_exact(super::LARGE_ALLOCATION_BYTES);
        assert!(v.iter().all(|b| *b == 7));
        v.shrink_to_fit();
        assert_eq!(v.len(), 1024);
        assert!(v.iter().all(|b| *b == 7));
    }
}
