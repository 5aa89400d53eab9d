//! Command timing on `ls-net`: INFO commandstats counters and the SLOWLOG.
//!
//! `ls-net` sees every command leave and every reply come back, so it times each command from
//! dispatch to reply: a command answered on this thread (connection commands, hot reads) is
//! timed around its execution; one answered by `ls-engine`, `ls-writer` or the poller from the
//! moment it was handed over until its reply reached this thread (queueing and device time
//! included; Redis times only the command's execution, which for the drive would leave out
//! the device read or write a client waits for).
//!
//! A command that took at least `slowlog-log-slower-than` microseconds (default 10000; 0
//! logs every command, a negative value none) is kept in the SLOWLOG, at most
//! `slowlog-max-len` entries (default 128, oldest dropped first), as Redis keeps them:
//! at most 32 arguments (the last one then says how many more there were), each cut to 128
//! bytes. AUTH, HELLO and ACL are never logged (they may carry passwords) and neither is EXEC
//! (Redis's `skip_slowlog`); MIGRATE's AUTH / AUTH2 passwords show as `(redacted)`, as
//! Redis shows them (`redactClientCommandArgument`).

use std::collections::VecDeque;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use kvproto::Reply;

/// Redis's default `slowlog-log-slower-than` (microseconds).
pub const DEFAULT_SLOWER_THAN_USEC: i64 = 10_000;
/// Redis's default `slowlog-max-len`.
pub const DEFAULT_MAX_LEN: usize = 128;
/// SLOWLOG GET's default count.
const DEFAULT_GET_COUNT: usize = 10;
/// Arguments kept per entry.
const MAX_ARGS: usize = 32;
/// Bytes kept per argument.
const MAX_ARG_BYTES: usize = 128;
/// Commands never logged (their arguments may hold passwords, or they are logged through
/// what they ran).
const NEVER_LOGGED: &[&str] = &["auth", "hello", "acl", "exec"];

/// One slow command.
#[derive(Debug, Clone)]
struct Entry {
    id: u64,
    unix_secs: u64,
    usec: u64,
    args: Vec<Bytes>,
    peer: String,
    name: Bytes,
}

/// The SLOWLOG's settings and entries (newest first).
#[derive(Debug)]
pub(super) struct Slowlog {
    slower_than_usec: i64,
    max_len: usize,
    next_id: u64,
    entries: VecDeque<Entry>,
}

/// Who ran a logged command (SLOWLOG GET's last two fields).
pub(super) struct Caller {
    /// `ip:port`.
    pub(super) peer: String,
    /// CLIENT SETNAME's name, empty if none.
    pub(super) name: Bytes,
}

impl Slowlog {
    /// An empty log with these settings.
    pub(super) fn new(slower_than_usec: i64, max_len: usize) -> Slowlog {
        Slowlog {
            slower_than_usec,
            max_len,
            next_id: 0,
            entries: VecDeque::new(),
        }
    }

    /// Whether a command that took `took` goes into the log (cheap: no allocation).
    pub(super) fn wants(&self, took: Duration) -> bool {
        self.slower_than_usec >= 0
            && self.max_len > 0
            && micros(took) >= self.slower_than_usec.unsigned_abs()
    }

    /// Logs `args` (command `name` as commandstats shows it: `get`, `client|id`) if it took
    /// long enough.
    pub(super) fn record(
        &mut self,
        name: &str,
        args: &[Bytes],
        took: Duration,
        caller: impl FnOnce() -> Caller,
    ) {
        let command = name.split('|').next().unwrap_or(name);
        if !self.wants(took) || NEVER_LOGGED.contains(&command) {
            return;
        }
        let caller = caller();
        let unix_secs = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let mut args = kept_args(args);
        if command == "migrate" {
            redact_migrate_passwords(&mut args);
        }
        self.entries.push_front(Entry {
            id: self.next_id,
            unix_secs,
            usec: micros(took),
            args,
            peer: caller.peer,
            name: caller.name,
        });
        self.next_id += 1;
        self.entries.truncate(self.max_len);
    }

    /// SLOWLOG GET `count` (`None`: 10; `-1`: all).
    pub(super) fn get(&self, count: Option<i64>) -> Reply {
        let n = match count {
            None => DEFAULT_GET_COUNT,
            Some(n) if n < 0 => self.entries.len(),
            Some(n) => usize::try_from(n).unwrap_or(usize::MAX),
        };
        let int = |v: u64| Reply::Integer(i64::try_from(v).unwrap_or(i64::MAX));
        Reply::Array(
            self.entries
                .iter()
                .take(n)
                .map(|e| {
                    Reply::Array(vec![
                        int(e.id),
                        int(e.unix_secs),
                        int(e.usec),
                        Reply::Array(e.args.iter().cloned().map(Reply::Bulk).collect()),
                        Reply::Bulk(Bytes::from(e.peer.clone())),
                        Reply::Bulk(e.name.clone()),
                    ])
                })
                .collect(),
        )
    }

    /// SLOWLOG LEN.
    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }

    /// SLOWLOG RESET.
    pub(super) fn reset(&mut self) {
        self.entries.clear();
    }
}

/// Whole microseconds of `d` (saturating).
pub(super) fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// The arguments as Redis keeps them in an entry.
/// MIGRATE's `AUTH password` and `AUTH2 user password` with the password replaced (the
/// options come before KEYS; a key named AUTH after KEYS is a key).
fn redact_migrate_passwords(args: &mut [Bytes]) {
    let mut i = 0;
    while i < args.len() {
        let word = args[i].to_ascii_lowercase();
        match word.as_slice() {
            b"keys" => return,
            b"auth" if i + 1 < args.len() => {
                args[i + 1] = Bytes::from_static(REDACTED);
                i += 2;
            }
            b"auth2" if i + 2 < args.len() => {
                args[i + 2] = Bytes::from_static(REDACTED);
                i += 3;
            }
            _ => i += 1,
        }
    }
}

/// What a redacted argument shows.
const REDACTED: &[u8] = b"(redacted)";

fn kept_args(args: &[Bytes]) -> Vec<Bytes> {
    let keep = args.len().min(MAX_ARGS);
    let mut out = Vec::with_capacity(keep);
    for (i, a) in args.iter().take(keep).enumerate() {
        if keep < args.len() && i == keep - 1 {
            out.push(Bytes::from(format!(
                "... ({} more arguments)",
                args.len() - keep + 1
            )));
        } else if a.len() > MAX_ARG_BYTES {
            let mut s = a[..MAX_ARG_BYTES].to_vec();
            s.extend_from_slice(format!("... ({} more bytes)", a.len() - MAX_ARG_BYTES).as_bytes());
            out.push(Bytes::from(s));
        } else {
            out.push(a.clone());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caller() -> Caller {
        Caller {
            peer: "127.0.0.1:5".into(),
            name: Bytes::new(),
        }
    }

    #[test]
    fn logs_what_is_slow_enough_newest_first_and_bounded() {
        let mut log = Slowlog::new(100, 2);
        let args = |s: &'static str| vec![Bytes::from_static(s.as_bytes())];
        log.record("get", &args("fast"), Duration::from_micros(99), caller);
        assert_eq!(log.len(), 0);
        for s in ["a", "b", "c"] {
            log.record("get", &args(s), Duration::from_micros(100), caller);
        }
        log.record("auth", &args("secret"), Duration::from_secs(1), caller);
        assert_eq!(log.len(), 2);
        let Reply::Array(items) = log.get(Some(-1)) else {
            panic!("not an array");
        };
        let Reply::Array(first) = &items[0] else {
            panic!("not an entry");
        };
        assert_eq!(first[0], Reply::Integer(2));
        assert_eq!(first[3], Reply::Array(vec![Reply::bulk("c")]));
        assert!(matches!(log.get(Some(1)), Reply::Array(v) if v.len() == 1));
        log.reset();
        assert_eq!(log.len(), 0);
        assert!(!Slowlog::new(-1, 128).wants(Duration::from_secs(9)));
        assert!(Slowlog::new(0, 128).wants(Duration::ZERO));
    }

    #[test]
    fn migrate_passwords_are_redacted() {
        let mut log = Slowlog::new(0, 8);
        let words = |w: &[&'static str]| -> Vec<Bytes> {
            w.iter().map(|s| Bytes::from_static(s.as_bytes())).collect()
        };
        log.record(
            "migrate",
            &words(&[
                "MIGRATE", "h", "1", "", "0", "10", "AUTH", "pw1", "KEYS", "auth", "k",
            ]),
            Duration::ZERO,
            caller,
        );
        log.record(
            "migrate",
            &words(&[
                "MIGRATE", "h", "1", "", "0", "10", "auth2", "u", "pw2", "REPLICA", "r", "2",
                "KEYS", "a",
            ]),
            Duration::ZERO,
            caller,
        );
        let text = format!("{:?}", log.get(Some(-1)));
        assert!(!text.contains("pw1") && !text.contains("pw2"), "{text}");
        assert_eq!(text.matches("(redacted)").count(), 2, "{text}");
        // A key named `auth` after KEYS is a key, shown as it is.
        assert!(text.contains("\"auth\""), "{text}");
    }

    #[test]
    fn long_requests_are_cut_as_redis_cuts_them() {
        let args: Vec<Bytes> = (0..40).map(|i| Bytes::from(vec![b'x'; 100 + i])).collect();
        let kept = kept_args(&args);
        assert_eq!(kept.len(), 32);
        assert_eq!(&kept[31][..], b"... (9 more arguments)");
        assert_eq!(kept[30].len(), 128 + "... (2 more bytes)".len());
        assert_eq!(kept[0].len(), 100);
    }
}
