//! Crash-only failure handling: a panic on any thread of the drive (`ls-net`, `ls-engine`,
//! `ls-writer`, `lsm-maint`, `lsm-poller`, ...) ends the process with a logged reason and exit
//! code [`PANIC_EXIT_CODE`], instead of leaving a live process whose dead thread answers
//! nothing. A supervisor restarts it; recovery at the next start brings back every
//! acknowledged write, as after a power cut.

/// Exit code of a drive that stopped because a thread panicked (`EX_SOFTWARE`).
pub const PANIC_EXIT_CODE: i32 = 70;

/// Environment variable for tests: a thread named `ls-fault` panics this many milliseconds
/// after start, to check that a panic ends the process.
pub const FAULT_PANIC_ENV: &str = "LIGHTSTORE_FAULT_PANIC_MS";

/// Installs the panic hook (the default hook's message and backtrace first, then the log
/// line and the exit).
pub fn install() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        default(info);
        let current = std::thread::current();
        let thread = current.name().unwrap_or("unnamed");
        tracing::error!(
            thread,
            "a thread panicked ({info}); the drive stops (exit code {PANIC_EXIT_CODE}); \
             recovery at the next start brings back every acknowledged write"
        );
        std::process::exit(PANIC_EXIT_CODE);
    }));
}

/// Starts the test fault of [`FAULT_PANIC_ENV`] when that variable is set.
pub fn start_fault_if_asked() {
    let Some(ms) = std::env::var(FAULT_PANIC_ENV)
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    else {
        return;
    };
    let spawned = std::thread::Builder::new()
        .name("ls-fault".into())
        .spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(ms));
            #[allow(clippy::panic)]
            {
                panic!("fault injected by {FAULT_PANIC_ENV}");
            }
        });
    if let Err(e) = spawned {
        tracing::warn!("starting the fault thread failed: {e}");
    }
}
