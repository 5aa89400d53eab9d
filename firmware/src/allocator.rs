//! The drive's allocator: mimalloc, set to give memory back at once.
//!
//! **Why mimalloc.** `ls-net` allocates and frees per request (frames, replies, write
//! groups), and other threads free some of it. glibc's allocator spent ~10% of `ls-net`'s
//! time in `_int_malloc`, `malloc_consolidate` and `_int_free` on YCSB-shaped hash writes;
//! with mimalloc pipelined 100-byte SETs ran 1.53x as fast and HSET 1.22x
//! (`benches/results/cpu-per-op-2026-11-30b`).
//!
//! **What [`tune`] changes.** With its defaults mimalloc kept what the abuse tests' clients
//! made the drive buffer: RSS 271 MiB after a burst of slow readers (it purges freed pages
//! only a second later, and only when the owning thread calls in again) and 162 MiB while one
//! client pipelined 256 KiB SETs (transparent huge pages, `always` on the test host, filled
//! its arenas' 2 MiB regions), against a budget of 116 MiB (glibc: 97 MiB on the second). So
//! the drive purges freed pages at once and turns transparent huge pages off for its
//! process (111 MiB and 55 MiB then). An operator's `MIMALLOC_PURGE_DELAY` or
//! `MIMALLOC_ALLOW_THP` in the environment wins over these.

/// The process's allocator.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// `mi_option_purge_delay` in mimalloc v3's `mi_option_e` (`mimalloc.h`; the sys crate does
/// not name v3's options): 0 purges freed pages at once.
const OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Sets the purge delay to 0 unless `MIMALLOC_PURGE_DELAY` is set, and turns transparent
/// huge pages off for the process unless `MIMALLOC_ALLOW_THP` is set. Must run before any
/// other thread is started (mimalloc's option setter is not thread-safe).
pub fn tune() {
    if std::env::var_os("MIMALLOC_ALLOW_THP").is_none() {
        // SAFETY: `prctl(PR_SET_THP_DISABLE, 1)` sets a flag on this process's address
        // space; it takes no pointers, and failure (an old kernel) only leaves THP as it
        // was, so the result is not needed.
        unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
    }
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        // SAFETY: `mi_option_set` only stores the value in mimalloc's option table; it is
        // called from `main` before any other thread exists, so nothing reads or writes the
        // table meanwhile.
        unsafe { libmimalloc_sys::mi_option_set(OPTION_PURGE_DELAY, 0) };
    }
}

#[cfg(test)]
mod tests {
    /// Set in the child run of [`report_options`]: it prints the option's value.
    const REPORT: &str = "LIGHTSTORE_TEST_MIMALLOC_REPORT";

    /// Prints mimalloc's value of the option number (only in the child run).
    #[test]
    fn report_options() {
        if std::env::var_os(REPORT).is_none() {
            return;
        }
        // SAFETY: reads of mimalloc's option table; nothing in this run writes it.
        let purge = unsafe { libmimalloc_sys::mi_option_get(super::OPTION_PURGE_DELAY) };
        println!("option purge_delay={purge}");
    }

    /// The option number is the option the environment names: a child run of this test
    /// binary with `MIMALLOC_PURGE_DELAY=7` (which mimalloc reads by name at start) reads 7
    /// under the number [`super::tune`] sets.
    #[test]
    fn the_option_number_is_the_option_named() {
        let out = std::process::Command::new(std::env::current_exe().unwrap_or_default())
            .args(["allocator::tests::report_options", "--exact", "--nocapture"])
            .env(REPORT, "1")
            .env("MIMALLOC_PURGE_DELAY", "7")
            .output();
        let text = out.map(|o| String::from_utf8_lossy(&o.stdout).into_owned());
        assert!(
            text.as_deref()
                .is_ok_and(|t| t.contains("option purge_delay=7")),
            "{text:?}"
        );
    }
}
