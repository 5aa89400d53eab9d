//! The drive's allocator: mimalloc for small allocations, glibc's for large ones.
//!
//! **Why mimalloc.** `ls-net` allocates and frees per request (frames, replies, keys, write
//! groups), and other threads free some of it. glibc's allocator spent ~10% of `ls-net`'s
//! time in `_int_malloc`, `malloc_consolidate` and `_int_free` on YCSB-shaped hash writes;
//! with mimalloc for everything pipelined 100-byte SETs ran 1.53x as fast and HSET 1.22x
//! (`benches/results/cpu-per-op-2026-11-30b`).
//!
//! **Why not for everything.** With mimalloc for every size the abuse tests' RSS budget (116
//! MiB) failed: 271 MiB after a burst of slow readers and 162 MiB while one client pipelined
//! 256 KiB SETs (glibc: 97 MiB), because mimalloc keeps freed memory for a while and per
//! thread. Purging at once and turning transparent huge pages off brought that to 55 and
//! 111-118 MiB, too near the budget, and the purges cost system time. So blocks of
//! [`LARGE`] bytes or more (large values in flight, slow readers' reply buffers) go to glibc,
//! which maps the largest on their own and returns them when freed: 41 MiB and 100-103 MiB
//! then, with the machine loaded.
//!
//! **Transparent huge pages** are turned off for the process ([`tune`]) unless
//! `MIMALLOC_ALLOW_THP` is set: with THP, mimalloc's arenas grow in 2 MiB steps of resident
//! memory.

use std::alloc::{GlobalAlloc, Layout, System};

/// Allocations of at least this many bytes go to the system allocator (see [`SplitAlloc`]).
const LARGE: usize = 64 << 10;

/// The process's allocator.
#[global_allocator]
static ALLOCATOR: SplitAlloc = SplitAlloc;

/// mimalloc for allocations under [`LARGE`] bytes (the per-request churn: frames, replies,
/// keys, write groups, 8 KiB pages), glibc's for the rest (buffers of large values and of
/// slow readers' replies). An allocation is freed by the allocator its size chose, since `dealloc` and
/// `realloc` are told the size it was made with.
struct SplitAlloc;

/// Whether an allocation of `size` bytes is the system allocator's.
fn large(size: usize) -> bool {
    size >= LARGE
}

// SAFETY: every block is allocated and freed by the same allocator, chosen by the size in
// its layout, which Rust passes unchanged to `dealloc` and (as the old layout) to `realloc`;
// a `realloc` across the boundary allocates in the new size's allocator, copies the bytes
// both sizes hold, and frees the old block in its own. Both allocators honour `Layout`'s
// alignment.
unsafe impl GlobalAlloc for SplitAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's layout (non-zero size, as `GlobalAlloc`
        // requires of the caller).
        unsafe {
            if large(layout.size()) {
                System.alloc(layout)
            } else {
                mimalloc::MiMalloc.alloc(layout)
            }
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as `alloc`.
        unsafe {
            if large(layout.size()) {
                System.alloc_zeroed(layout)
            } else {
                mimalloc::MiMalloc.alloc_zeroed(layout)
            }
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated with `layout`, so by the allocator its size chose.
        unsafe {
            if large(layout.size()) {
                System.dealloc(ptr, layout);
            } else {
                mimalloc::MiMalloc.dealloc(ptr, layout);
            }
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let (was, will) = (large(layout.size()), large(new_size));
        // SAFETY: same-side reallocations are forwarded as they came; across the boundary
        // the new block (the new size with the old alignment: a valid layout, since the
        // caller guarantees `new_size` rounded up to `align` does not overflow) is filled
        // with the bytes both sizes cover before the old one is freed by its allocator.
        unsafe {
            match (was, will) {
                (true, true) => System.realloc(ptr, layout, new_size),
                (false, false) => mimalloc::MiMalloc.realloc(ptr, layout, new_size),
                _ => {
                    let new_layout = Layout::from_size_align_unchecked(new_size, layout.align());
                    let new = self.alloc(new_layout);
                    if !new.is_null() {
                        std::ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_size));
                        self.dealloc(ptr, layout);
                    }
                    new
                }
            }
        }
    }
}

/// Turns transparent huge pages off for the process unless `MIMALLOC_ALLOW_THP` is set. Runs
/// first in `main`, before mimalloc's arenas grow.
pub fn tune() {
    if std::env::var_os("MIMALLOC_ALLOW_THP").is_none() {
        // SAFETY: `prctl(PR_SET_THP_DISABLE, 1)` sets a flag on this process's address
        // space; it takes no pointers, and failure (an old kernel) only leaves THP as it
        // was, so the result is not needed.
        unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// Blocks keep their bytes across a `realloc` within and across the size boundary, and
    /// alignment is kept on both sides.
    #[test]
    fn realloc_across_the_boundary_keeps_the_bytes() {
        let a = SplitAlloc;
        for align in [8usize, 64, 4096] {
            let small = Layout::from_size_align(1000, align).unwrap();
            // SAFETY: non-zero layouts; every block is freed once with the layout it has.
            unsafe {
                let p = a.alloc(small);
                assert!(!p.is_null() && p as usize % align == 0);
                for i in 0..1000 {
                    *p.add(i) = (i % 251) as u8;
                }
                let big = a.realloc(p, small, LARGE * 2);
                assert!(!big.is_null() && big as usize % align == 0);
                assert!((0..1000).all(|i| *big.add(i) == (i % 251) as u8));
                let big_layout = Layout::from_size_align_unchecked(LARGE * 2, align);
                let back = a.realloc(big, big_layout, 500);
                assert!(!back.is_null() && back as usize % align == 0);
                assert!((0..500).all(|i| *back.add(i) == (i % 251) as u8));
                a.dealloc(back, Layout::from_size_align_unchecked(500, align));
                let z = a.alloc_zeroed(big_layout);
                assert!((0..LARGE * 2).step_by(997).all(|i| *z.add(i) == 0));
                a.dealloc(z, big_layout);
            }
        }
    }
}
