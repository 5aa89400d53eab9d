//! Page buffers: 8 KiB, 4 KiB-aligned heap buffers that O_DIRECT and io_uring can use as they
//! are, passed by value into a command and handed back in its completion; and the chunk pool
//! they come from.
//!
//! A dropped page goes back to a process-wide lock-free pool (at most [`POOL_PAGES`] kept),
//! and new pages come from it, so the read and write paths neither allocate nor free per page
//! in steady state, and a page that the device fills whole ([`PageBuf::for_read`]) is not
//! zeroed first. A pooled page holds bytes of its previous use until it is overwritten; that is
//! initialised memory, and a failed read hands no buffer back as data.

use std::alloc::{self, Layout};
use std::fmt;
use std::mem::ManuallyDrop;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use crossbeam_queue::ArrayQueue;

use crate::geometry::PAGE_SIZE;

/// Alignment of every buffer the device reads into or writes from (O_DIRECT needs 4 KiB).
pub const BUFFER_ALIGN: usize = 4096;

/// A zero-initialised heap buffer of `len` bytes aligned to [`BUFFER_ALIGN`].
pub(crate) struct AlignedBuf {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: AlignedBuf owns its allocation exclusively, like a Box<[u8]>.
unsafe impl Send for AlignedBuf {}
// SAFETY: shared access only hands out &[u8].
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// Allocates `len` zero bytes (`len` is rounded up to a multiple of the alignment).
    pub(crate) fn zeroed(len: usize) -> Self {
        let len = len.max(1).next_multiple_of(BUFFER_ALIGN);
        let layout = Self::layout(len);
        // SAFETY: layout has non-zero size.
        let raw = unsafe { alloc::alloc_zeroed(layout) };
        let Some(ptr) = NonNull::new(raw) else {
            alloc::handle_alloc_error(layout)
        };
        AlignedBuf { ptr, len }
    }

    fn layout(len: usize) -> Layout {
        match Layout::from_size_align(len, BUFFER_ALIGN) {
            Ok(l) => l,
            // len is a multiple of a power of two far below isize::MAX for any real buffer.
            Err(_) => alloc::handle_alloc_error(Layout::new::<u8>()),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: ptr was allocated in `zeroed` with exactly this layout.
        unsafe { alloc::dealloc(self.ptr.as_ptr(), Self::layout(self.len)) }
    }
}

impl Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: ptr is valid for len initialised bytes for as long as self lives.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: ptr is valid for len bytes and &mut self guarantees exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

/// Pages the pool keeps for reuse at most (32 MiB); more are freed when dropped.
pub const POOL_PAGES: usize = 4096;

/// Pages handed out from the pool, and pages that had to be allocated (see [`pool_stats`]).
static POOL_HITS: AtomicU64 = AtomicU64::new(0);
static POOL_MISSES: AtomicU64 = AtomicU64::new(0);

fn pool() -> &'static ArrayQueue<AlignedBuf> {
    static POOL: OnceLock<ArrayQueue<AlignedBuf>> = OnceLock::new();
    POOL.get_or_init(|| ArrayQueue::new(POOL_PAGES))
}

/// `(reused, allocated)`: pages taken from the pool and pages that had to be allocated since
/// the process started.
pub fn pool_stats() -> (u64, u64) {
    (
        POOL_HITS.load(Ordering::Relaxed),
        POOL_MISSES.load(Ordering::Relaxed),
    )
}

/// One 8 KiB page buffer, 4 KiB-aligned. Commands take it by value; the completion gives it
/// back (filled, for a read), so no copy is needed between the caller and the device.
pub struct PageBuf(ManuallyDrop<AlignedBuf>);

impl PageBuf {
    /// A page from the pool with unspecified (but initialised) contents, or a new zeroed one.
    fn pooled() -> Self {
        match pool().pop() {
            Some(b) => {
                POOL_HITS.fetch_add(1, Ordering::Relaxed);
                PageBuf(ManuallyDrop::new(b))
            }
            None => {
                POOL_MISSES.fetch_add(1, Ordering::Relaxed);
                PageBuf(ManuallyDrop::new(AlignedBuf::zeroed(PAGE_SIZE)))
            }
        }
    }

    /// A zero-filled page.
    pub fn zeroed() -> Self {
        let mut p = Self::pooled();
        p.fill(0);
        p
    }

    /// A page for the device to fill whole (a READ's buffer): not zeroed first, so it may
    /// hold an earlier page's bytes until the read completes. Use [`PageBuf::zeroed`] for a
    /// page that is not overwritten entirely.
    pub fn for_read() -> Self {
        Self::pooled()
    }

    /// A page holding `data` followed by zeroes.
    ///
    /// # Panics
    /// Never; `data` longer than a page is truncated to [`PAGE_SIZE`] bytes.
    pub fn from_slice(data: &[u8]) -> Self {
        let mut p = Self::pooled();
        let n = data.len().min(PAGE_SIZE);
        p[..n].copy_from_slice(&data[..n]);
        p[n..].fill(0);
        p
    }

    /// Raw pointer for the kernel to fill the page through, or read it from.
    pub(crate) fn as_mut_ptr(&mut self) -> *mut u8 {
        self.0.ptr.as_ptr()
    }
}

impl Drop for PageBuf {
    fn drop(&mut self) {
        // SAFETY: the buffer is taken exactly once, here, and `self` is not used afterwards.
        let buf = unsafe { ManuallyDrop::take(&mut self.0) };
        // A full pool frees the page (the rejected buffer is dropped here).
        let _ = pool().push(buf);
    }
}

impl Deref for PageBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.0
    }
}

impl DerefMut for PageBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.0
    }
}

impl Clone for PageBuf {
    fn clone(&self) -> Self {
        Self::from_slice(self)
    }
}

impl fmt::Debug for PageBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PageBuf({:02x?}..)", &self[..8])
    }
}

impl PartialEq for PageBuf {
    fn eq(&self, other: &Self) -> bool {
        self[..] == other[..]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_is_aligned_zeroed_and_sized() {
        let p = PageBuf::zeroed();
        assert_eq!(p.len(), PAGE_SIZE);
        assert_eq!(p.as_ptr() as usize % BUFFER_ALIGN, 0);
        assert!(p.iter().all(|&b| b == 0));
    }

    #[test]
    fn from_slice_truncates() {
        let big = vec![7u8; PAGE_SIZE + 10];
        let p = PageBuf::from_slice(&big);
        assert!(p.iter().all(|&b| b == 7));
        let q = PageBuf::from_slice(b"abc");
        assert_eq!(&q[..4], b"abc\0");
        assert_eq!(p.clone(), p);
    }

    #[test]
    fn pages_are_reused_and_zeroed_when_asked() {
        let mut p = PageBuf::for_read();
        p.fill(0xAB);
        drop(p);
        // Whatever page comes back, `zeroed` and `from_slice` give exactly what they promise.
        let z = PageBuf::zeroed();
        assert!(z.iter().all(|&b| b == 0));
        drop(z);
        let q = PageBuf::from_slice(b"xyz");
        assert_eq!(&q[..3], b"xyz");
        assert!(q[3..].iter().all(|&b| b == 0));
        assert_eq!(q.as_ptr() as usize % BUFFER_ALIGN, 0);
        let (hits, misses) = pool_stats();
        assert!(hits + misses >= 3);
    }

    #[test]
    fn aligned_buf_rounds_up() {
        let b = AlignedBuf::zeroed(5000);
        assert_eq!(b.len(), 8192);
    }
}
