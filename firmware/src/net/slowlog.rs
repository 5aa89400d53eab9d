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
use std::net::SocketAddr;
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
///
/// Its arguments are kept as bytes back to back in one buffer, each cut to
/// [`MAX_ARG_BYTES`], with their full lengths; SLOWLOG GET adds Redis's `... (N more
/// bytes)` and `... (N more arguments)` marks. Under a load where every command is slow
/// (a drive whose queues hold more than `slowlog-log-slower-than` of work: 50 connections
/// pipelining 16 8 KiB SETs each) every reply is logged, so a full log reuses the entry it
/// drops, buffers and all, and logging allocates nothing: built per entry, the argument
/// copies, the peer's text and the command's name were 18% of `ls-net`'s samples
/// (`perf`, 8 KiB SETs, 50 connections, pipeline 16).
#[derive(Debug, Default)]
struct Entry {
    id: u64,
    unix_secs: u64,
    usec: u64,
    /// The kept arguments' bytes, back to back.
    arg_bytes: Vec<u8>,
    /// Per kept argument: where its bytes end in `arg_bytes`, and its full length.
    arg_ends: Vec<(usize, usize)>,
    /// How many arguments the command had (more than were kept: SLOWLOG GET shows Redis's
    /// "more arguments" mark after the kept ones, as the 32nd).
    argc: usize,
    peer: Option<SocketAddr>,
    name: Bytes,
}

impl Entry {
    /// Keeps `args` as Redis keeps them: at most [`MAX_ARGS`] (the last then says how many
    /// more there were), each cut to [`MAX_ARG_BYTES`].
    fn keep_args(&mut self, args: &[Bytes]) {
        self.arg_bytes.clear();
        self.arg_ends.clear();
        self.argc = args.len();
        let kept = if args.len() > MAX_ARGS {
            MAX_ARGS - 1
        } else {
            args.len()
        };
        for a in &args[..kept] {
            self.arg_bytes
                .extend_from_slice(&a[..a.len().min(MAX_ARG_BYTES)]);
            self.arg_ends.push((self.arg_bytes.len(), a.len()));
        }
    }

    /// The kept arguments as SLOWLOG GET shows them.
    fn shown_args(&self) -> Vec<Reply> {
        let mut out = Vec::with_capacity(self.arg_ends.len() + 1);
        let mut start = 0;
        for &(end, full) in &self.arg_ends {
            let kept = self.arg_bytes.get(start..end).unwrap_or_default();
            start = end;
            if full > kept.len() {
                let mut s = kept.to_vec();
                s.extend_from_slice(format!("... ({} more bytes)", full - kept.len()).as_bytes());
                out.push(Reply::Bulk(Bytes::from(s)));
            } else {
                out.push(Reply::Bulk(Bytes::copy_from_slice(kept)));
            }
        }
        if self.argc > self.arg_ends.len() {
            out.push(Reply::Bulk(Bytes::from(format!(
                "... ({} more arguments)",
                self.argc - self.arg_ends.len()
            ))));
        }
        out
    }
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
    /// The client's address (shown as `ip:port`); `None` shows as empty.
    pub(super) peer: Option<SocketAddr>,
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

    /// Logs `args` of `command` (its name, lower case, without a subcommand: `get`,
    /// `client`) if it took long enough. Allocates nothing once the log is full.
    pub(super) fn record(
        &mut self,
        command: &str,
        args: &[Bytes],
        took: Duration,
        caller: impl FnOnce() -> Caller,
    ) {
        if !self.wants(took) || NEVER_LOGGED.contains(&command) {
            return;
        }
        let caller = caller();
        let unix_secs = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let mut e = if self.entries.len() >= self.max_len {
            self.entries.pop_back().unwrap_or_default()
        } else {
            Entry::default()
        };
        if command == "migrate" {
            let mut redacted = args.to_vec();
            redact_migrate_passwords(&mut redacted);
            e.keep_args(&redacted);
        } else {
            e.keep_args(args);
        }
        e.id = self.next_id;
        e.unix_secs = unix_secs;
        e.usec = micros(took);
        e.peer = caller.peer;
        e.name = caller.name;
        self.entries.push_front(e);
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
                    let peer = e.peer.map(|p| p.to_string()).unwrap_or_default();
                    Reply::Array(vec![
                        int(e.id),
                        int(e.unix_secs),
                        int(e.usec),
                        Reply::Array(e.shown_args()),
                        Reply::Bulk(Bytes::from(peer)),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn caller() -> Caller {
        Caller {
            peer: Some(SocketAddr::from(([127, 0, 0, 1], 5))),
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

    /// The arguments of the newest entry as SLOWLOG GET shows them.
    fn newest_args(log: &Slowlog) -> Vec<Reply> {
        let Reply::Array(items) = log.get(Some(1)) else {
            panic!("not an array");
        };
        let Some(Reply::Array(entry)) = items.into_iter().next() else {
            panic!("no entry");
        };
        match entry.into_iter().nth(3) {
            Some(Reply::Array(args)) => args,
            other => panic!("no arguments: {other:?}"),
        }
    }

    #[test]
    fn long_requests_are_cut_as_redis_cuts_them() {
        let mut log = Slowlog::new(0, 4);
        let args: Vec<Bytes> = (0..40).map(|i| Bytes::from(vec![b'x'; 100 + i])).collect();
        log.record("set", &args, Duration::ZERO, caller);
        let kept = newest_args(&log);
        assert_eq!(kept.len(), 32);
        assert_eq!(kept[31], Reply::bulk("... (9 more arguments)"));
        let mut cut = vec![b'x'; 128];
        cut.extend_from_slice(b"... (2 more bytes)");
        assert_eq!(kept[30], Reply::Bulk(Bytes::from(cut)));
        assert_eq!(kept[0], Reply::Bulk(Bytes::from(vec![b'x'; 100])));
        // Exactly 32 arguments are all kept; 128 bytes are not cut.
        let args: Vec<Bytes> = (0..32).map(|_| Bytes::from(vec![b'y'; 128])).collect();
        log.record("set", &args, Duration::ZERO, caller);
        let kept = newest_args(&log);
        assert_eq!(kept.len(), 32);
        assert!(kept
            .iter()
            .all(|a| *a == Reply::Bulk(Bytes::from(vec![b'y'; 128]))));
    }

    #[test]
    fn a_full_log_reuses_the_entry_it_drops() {
        let mut log = Slowlog::new(0, 2);
        for i in 0..5u8 {
            let args = vec![Bytes::from(vec![b'a' + i; 200 - usize::from(i) * 40])];
            log.record("set", &args, Duration::from_micros(u64::from(i)), caller);
        }
        assert_eq!(log.len(), 2);
        let Reply::Array(items) = log.get(None) else {
            panic!("not an array");
        };
        let ids: Vec<Reply> = items
            .iter()
            .map(|e| match e {
                Reply::Array(f) => f[0].clone(),
                _ => Reply::Integer(-1),
            })
            .collect();
        assert_eq!(ids, vec![Reply::Integer(4), Reply::Integer(3)]);
        // The newest (40 bytes, 'e') holds nothing of the longer ones it reused.
        assert_eq!(
            newest_args(&log),
            vec![Reply::Bulk(Bytes::from(vec![b'e'; 40]))]
        );
        let Reply::Array(items) = log.get(None) else {
            panic!("not an array");
        };
        let Reply::Array(older) = &items[1] else {
            panic!("not an entry");
        };
        assert_eq!(older[4], Reply::bulk("127.0.0.1:5"));
    }
}
