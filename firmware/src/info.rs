//! Server-wide counters, per-command statistics and the INFO text (sections server,
//! clients, stats, commandstats, cluster, keyspace, lsm, ftl), in Redis's `field:value`
//! format.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;

use crate::fsck_record::LastFsck;
use crate::store::Store;

/// The Redis version the drive reports (INFO `redis_version`, HELLO `version`): the release
/// whose behaviour the differential tests check command by command (Debian 12's
/// redis-server 7.0); what the drive lacks of it is listed in docs/COMPATIBILITY.md.
pub const REDIS_VERSION: &str = "7.0.0";

/// One command's counters (INFO commandstats), kept by `ls-net`, which sees every command
/// and its reply.
#[derive(Debug, Default)]
pub struct CommandStat {
    /// Times it ran (a failed run counts too, a rejected one does not).
    pub calls: AtomicU64,
    /// Microseconds from dispatch to reply, summed.
    pub usec: AtomicU64,
    /// Refused before it ran (arity, NOAUTH, NOPERM, MOVED, subscribed mode).
    pub rejected: AtomicU64,
    /// Ran and answered an error.
    pub failed: AtomicU64,
}

/// The subcommands counted on their own (Redis's `cmdstat_client|id`), per container command.
const SUBCOMMANDS: &[(&str, &[&str])] = &[
    (
        "client",
        &[
            "setname", "getname", "setinfo", "id", "info", "list", "kill", "no-evict", "no-touch",
            "pause", "unpause",
        ],
    ),
    ("config", &["get", "set", "resetstat"]),
    ("command", &["count", "docs", "info", "list"]),
    ("acl", &["whoami", "users", "list"]),
    ("pubsub", &["channels", "numsub", "numpat"]),
    ("slowlog", &["get", "len", "reset"]),
    ("latency", &["latest", "history", "reset"]),
    (
        "cluster",
        &[
            "info",
            "nodes",
            "slots",
            "shards",
            "myid",
            "keyslot",
            "countkeysinslot",
            "getkeysinslot",
        ],
    ),
];

/// Counters per row of the command table ([`kvproto::command::COMMANDS`]), then per
/// subcommand of [`SUBCOMMANDS`].
#[derive(Debug)]
pub struct CommandStats {
    rows: Vec<CommandStat>,
}

/// How many rows the subcommands take before container `i` of [`SUBCOMMANDS`].
fn sub_base(i: usize) -> usize {
    kvproto::command::COMMANDS.len() + SUBCOMMANDS[..i].iter().map(|(_, s)| s.len()).sum::<usize>()
}

impl CommandStats {
    fn new() -> CommandStats {
        let subs: usize = SUBCOMMANDS.iter().map(|(_, s)| s.len()).sum();
        CommandStats {
            rows: (0..kvproto::command::COMMANDS.len() + subs)
                .map(|_| CommandStat::default())
                .collect(),
        }
    }

    /// The row counting request `args`: its subcommand's for a container command with a
    /// known subcommand, else its command's (`None`: not a command of the table).
    #[must_use]
    pub fn row_of(args: &[Bytes]) -> Option<usize> {
        let name = args.first()?;
        let row = kvproto::command::COMMANDS
            .iter()
            .position(|s| s.name.as_bytes().eq_ignore_ascii_case(name))?;
        let sub = args.get(1).and_then(|sub| {
            let (i, (_, subs)) = SUBCOMMANDS
                .iter()
                .enumerate()
                .find(|(_, (c, _))| c.as_bytes().eq_ignore_ascii_case(name))?;
            let j = subs
                .iter()
                .position(|s| s.as_bytes().eq_ignore_ascii_case(sub))?;
            Some(sub_base(i) + j)
        });
        Some(sub.unwrap_or(row))
    }

    /// Whether a row's command has the table's `fast` flag (a subcommand: its command's).
    #[must_use]
    pub fn is_fast(row: usize) -> bool {
        kvproto::command::lookup(Self::row_command(row).as_bytes())
            .is_some_and(|s| s.flags.contains(&"fast"))
    }

    /// The command a row counts, without its subcommand: `get`, `client` (for `client|id`);
    /// empty for a row out of range. No allocation (`row_name` formats).
    #[must_use]
    pub fn row_command(row: usize) -> &'static str {
        let commands = kvproto::command::COMMANDS;
        if let Some(spec) = commands.get(row) {
            return spec.name;
        }
        let mut at = commands.len();
        for (parent, subs) in SUBCOMMANDS {
            if row < at + subs.len() {
                return parent;
            }
            at += subs.len();
        }
        ""
    }

    /// The name a row is shown under: `get`, `client|id`.
    #[must_use]
    pub fn row_name(row: usize) -> String {
        let commands = kvproto::command::COMMANDS;
        if let Some(spec) = commands.get(row) {
            return spec.name.to_owned();
        }
        let mut at = commands.len();
        for (parent, subs) in SUBCOMMANDS {
            if row < at + subs.len() {
                return format!("{parent}|{}", subs[row - at]);
            }
            at += subs.len();
        }
        String::new()
    }

    /// Counts one call of row `row` that took `usec` and `failed` or not.
    pub fn called(&self, row: usize, usec: u64, failed: bool) {
        if let Some(r) = self.rows.get(row) {
            r.calls.fetch_add(1, Ordering::Relaxed);
            r.usec.fetch_add(usec, Ordering::Relaxed);
            if failed {
                r.failed.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Counts one call of row `row` refused before it ran.
    pub fn rejected(&self, row: usize) {
        if let Some(r) = self.rows.get(row) {
            r.rejected.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn reset(&self) {
        for r in &self.rows {
            for c in [&r.calls, &r.usec, &r.rejected, &r.failed] {
                c.store(0, Ordering::Relaxed);
            }
        }
    }

    /// The `# Commandstats` lines: `cmdstat_<name>:calls=..,usec=..,usec_per_call=..,
    /// rejected_calls=..,failed_calls=..` for each command used since start or RESETSTAT.
    fn render(&self, out: &mut String) {
        use std::fmt::Write as _;
        out.push_str("# Commandstats\r\n");
        for (row, r) in self.rows.iter().enumerate() {
            let calls = r.calls.load(Ordering::Relaxed);
            let rejected = r.rejected.load(Ordering::Relaxed);
            let failed = r.failed.load(Ordering::Relaxed);
            if calls == 0 && rejected == 0 && failed == 0 {
                continue;
            }
            let usec = r.usec.load(Ordering::Relaxed);
            let per_call = if calls > 0 {
                usec as f64 / calls as f64
            } else {
                0.0
            };
            let _ = write!(
                out,
                "cmdstat_{}:calls={calls},usec={usec},usec_per_call={per_call:.2},rejected_calls={rejected},failed_calls={failed}\r\n",
                Self::row_name(row)
            );
        }
        out.push_str("\r\n");
    }
}

/// Counters shared by the network, engine and writer threads.
#[derive(Debug)]
pub struct Metrics {
    /// When the drive started.
    pub started: Instant,
    /// TCP port.
    pub port: u16,
    /// Clients connected now.
    pub connected_clients: AtomicU64,
    /// Clients waiting in BLPOP, BRPOP, BLMOVE or BRPOPLPUSH (set by the writer thread).
    pub blocked_clients: AtomicU64,
    /// Connections accepted since start.
    pub total_connections: AtomicU64,
    /// Connections refused (maxclients, protected mode).
    pub rejected_connections: AtomicU64,
    /// Commands executed.
    pub commands_processed: AtomicU64,
    /// Bytes read from clients.
    pub net_input_bytes: AtomicU64,
    /// Bytes written to clients.
    pub net_output_bytes: AtomicU64,
    /// Value bytes copied between the socket and the device (see docs/ARCHITECTURE.md).
    pub value_bytes_copied: AtomicU64,
    /// Value bytes received in SETs / sent in GET replies.
    pub value_bytes_moved: AtomicU64,
    /// Clients disconnected for exceeding `client-query-buffer-limit`.
    pub query_buffer_disconnects: AtomicU64,
    /// Clients disconnected for exceeding `client-output-buffer-limit`.
    pub output_buffer_disconnects: AtomicU64,
    /// Clients closed by the idle `timeout`.
    pub timeout_disconnects: AtomicU64,
    /// Times a client was not read because the drive-wide budget was used up.
    pub budget_pauses: AtomicU64,
    /// Jobs kept on the network thread because their worker's queue was full.
    pub worker_queue_full: AtomicU64,
    /// Episodes of accept failing for want of file descriptors (retried on a timer).
    pub accept_backoffs: AtomicU64,
    /// Bytes of buffered requests now (query buffers and pending requests, all clients).
    pub buffered_request_bytes: AtomicU64,
    /// Clients waiting for the drive-wide budget now.
    pub clients_paused_budget: AtomicU64,
    /// Protocol errors.
    pub protocol_errors: AtomicU64,
    /// Reads answered on the network thread from DRAM alone (no hand-off to the engine).
    pub reads_answered_inline: AtomicU64,
    /// Reads resolved on the network thread whose value pages it then queued on the device
    /// (no hand-off to the engine thread).
    pub reads_started_inline: AtomicU64,
    /// Value pages of those reads that came back on the network thread's own device read
    /// queue and were finished there (`lsm::ThreadReads`: no other thread woken); the rest
    /// went through the engine's poller.
    pub pages_read_on_net_queue: AtomicU64,
    /// Writes run on the network thread while the writer was idle (plp mode).
    pub writes_run_inline: AtomicU64,
    /// The engine's count of value bytes its read path copied (shared with the engine).
    pub engine_read_copies: Arc<AtomicU64>,
    /// `engine_read_copies` at the last CONFIG RESETSTAT.
    pub engine_read_copies_base: AtomicU64,
    /// Cluster mode (`--cluster-config`): INFO `cluster_enabled`, `redis_mode`.
    pub cluster_enabled: AtomicBool,
    /// The last `lightstore fsck` of the device, read when the drive started (INFO
    /// `last_fsck`, `last_fsck_time`, `last_fsck_problems`).
    pub last_fsck: LastFsck,
    /// Channels with a subscriber now (INFO `pubsub_channels`).
    pub pubsub_channels: AtomicU64,
    /// Patterns with a subscriber now (INFO `pubsub_patterns`).
    pub pubsub_patterns: AtomicU64,
    /// Per-command counters (INFO commandstats).
    pub command_stats: CommandStats,
}

impl Metrics {
    /// Fresh counters.
    pub fn new(port: u16, engine_read_copies: Arc<AtomicU64>) -> Metrics {
        Metrics {
            started: Instant::now(),
            port,
            connected_clients: AtomicU64::new(0),
            blocked_clients: AtomicU64::new(0),
            total_connections: AtomicU64::new(0),
            rejected_connections: AtomicU64::new(0),
            commands_processed: AtomicU64::new(0),
            net_input_bytes: AtomicU64::new(0),
            net_output_bytes: AtomicU64::new(0),
            value_bytes_copied: AtomicU64::new(0),
            value_bytes_moved: AtomicU64::new(0),
            query_buffer_disconnects: AtomicU64::new(0),
            output_buffer_disconnects: AtomicU64::new(0),
            timeout_disconnects: AtomicU64::new(0),
            budget_pauses: AtomicU64::new(0),
            worker_queue_full: AtomicU64::new(0),
            accept_backoffs: AtomicU64::new(0),
            buffered_request_bytes: AtomicU64::new(0),
            clients_paused_budget: AtomicU64::new(0),
            protocol_errors: AtomicU64::new(0),
            reads_answered_inline: AtomicU64::new(0),
            reads_started_inline: AtomicU64::new(0),
            pages_read_on_net_queue: AtomicU64::new(0),
            writes_run_inline: AtomicU64::new(0),
            engine_read_copies_base: AtomicU64::new(engine_read_copies.load(Ordering::Relaxed)),
            engine_read_copies,
            cluster_enabled: AtomicBool::new(false),
            last_fsck: LastFsck::Never,
            pubsub_channels: AtomicU64::new(0),
            pubsub_patterns: AtomicU64::new(0),
            command_stats: CommandStats::new(),
        }
    }

    /// Zeroes the stats counters (CONFIG RESETSTAT).
    pub fn reset(&self) {
        for c in [
            &self.total_connections,
            &self.rejected_connections,
            &self.commands_processed,
            &self.net_input_bytes,
            &self.net_output_bytes,
            &self.value_bytes_copied,
            &self.value_bytes_moved,
            &self.query_buffer_disconnects,
            &self.output_buffer_disconnects,
            &self.timeout_disconnects,
            &self.budget_pauses,
            &self.worker_queue_full,
            &self.accept_backoffs,
            &self.protocol_errors,
        ] {
            c.store(0, Ordering::Relaxed);
        }
        self.command_stats.reset();
        self.engine_read_copies_base.store(
            self.engine_read_copies.load(Ordering::Relaxed),
            Ordering::Relaxed,
        );
    }
}

fn wants(sections: &[Bytes], name: &str) -> bool {
    sections.is_empty()
        || sections.iter().any(|s| {
            let s = s.to_ascii_lowercase();
            s == name.as_bytes() || s == b"all" || s == b"everything" || s == b"default"
        })
}

/// Current resident set size in bytes (Linux `/proc/self/statm`).
pub fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * 4096)
}

/// Renders INFO for `sections` (empty: every section).
pub fn render(store: &Store, m: &Metrics, sections: &[Bytes]) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
    let cluster = m.cluster_enabled.load(Ordering::Relaxed);
    if wants(sections, "server") {
        let up = m.started.elapsed().as_secs();
        let _ = write!(
            s,
            "# Server\r\nredis_version:{REDIS_VERSION}\r\nlightstore_version:{}\r\nredis_mode:{}\r\n\
             os:{} {}\r\narch_bits:64\r\nprocess_id:{}\r\ntcp_port:{}\r\nuptime_in_seconds:{up}\r\n\
             uptime_in_days:{}\r\nexecutable:lightstore\r\n\r\n",
            env!("CARGO_PKG_VERSION"),
            if cluster { "cluster" } else { "standalone" },
            std::env::consts::OS,
            std::env::consts::ARCH,
            std::process::id(),
            m.port,
            up / 86_400,
        );
    }
    if wants(sections, "clients") {
        let _ = write!(
            s,
            "# Clients\r\nconnected_clients:{}\r\nblocked_clients:{}\r\n\
             buffered_request_bytes:{}\r\nclients_paused_budget:{}\r\n\r\n",
            load(&m.connected_clients),
            load(&m.blocked_clients),
            load(&m.buffered_request_bytes),
            load(&m.clients_paused_budget),
        );
    }
    if wants(sections, "memory") {
        let (reused, allocated) = hwftl_sim::pool_stats();
        let _ = write!(
            s,
            "# Memory\r\nused_memory_rss:{}\r\nchunk_pool_pages_reused:{reused}\r\n\
             chunk_pool_pages_allocated:{allocated}\r\nchunk_pool_capacity_pages:{}\r\n\r\n",
            rss_bytes(),
            hwftl_sim::POOL_PAGES
        );
    }
    if wants(sections, "stats") {
        let _ = write!(
            s,
            "# Stats\r\ntotal_connections_received:{}\r\ntotal_commands_processed:{}\r\n\
             total_net_input_bytes:{}\r\ntotal_net_output_bytes:{}\r\nrejected_connections:{}\r\n\
             expired_keys:{}\r\nkeyspace_hits:{}\r\nkeyspace_misses:{}\r\n\
             value_bytes_copied:{}\r\nvalue_bytes_moved:{}\r\nclient_buffer_limit_disconnections:{}\r\n\
             client_query_buffer_limit_disconnections:{}\r\nclient_output_buffer_limit_disconnections:{}\r\n\
             client_timeout_disconnections:{}\r\nclient_reads_paused_budget:{}\r\n\
             worker_queue_full:{}\r\naccept_backoffs:{}\r\n\
             total_error_replies_protocol:{}\r\nreads_answered_inline:{}\r\nreads_started_inline:{}\r\n\
             pages_read_on_net_queue:{}\r\nwrites_run_inline:{}\r\n\
             pubsub_channels:{}\r\npubsub_patterns:{}\r\n\r\n",
            load(&m.total_connections),
            load(&m.commands_processed),
            load(&m.net_input_bytes),
            load(&m.net_output_bytes),
            load(&m.rejected_connections),
            load(&store.counters.expired_keys),
            load(&store.counters.keyspace_hits),
            load(&store.counters.keyspace_misses),
            load(&m.value_bytes_copied)
                + load(&m.engine_read_copies).saturating_sub(load(&m.engine_read_copies_base)),
            load(&m.value_bytes_moved),
            load(&m.query_buffer_disconnects) + load(&m.output_buffer_disconnects),
            load(&m.query_buffer_disconnects),
            load(&m.output_buffer_disconnects),
            load(&m.timeout_disconnects),
            load(&m.budget_pauses),
            load(&m.worker_queue_full),
            load(&m.accept_backoffs),
            load(&m.protocol_errors),
            load(&m.reads_answered_inline),
            load(&m.reads_started_inline),
            load(&m.pages_read_on_net_queue),
            load(&m.writes_run_inline),
            load(&m.pubsub_channels),
            load(&m.pubsub_patterns),
        );
    }
    // Not in the default set, as in Redis: only asked for by name, `all` or `everything`.
    if sections.iter().any(|s| {
        let s = s.to_ascii_lowercase();
        s == b"commandstats" || s == b"all" || s == b"everything"
    }) {
        m.command_stats.render(&mut s);
    }
    if wants(sections, "cluster") {
        let _ = write!(
            s,
            "# Cluster\r\ncluster_enabled:{}\r\n\r\n",
            u8::from(cluster)
        );
    }
    if wants(sections, "keyspace") {
        s.push_str("# Keyspace\r\n");
        match store.dbsize() {
            Ok(n) if n > 0 => {
                let _ = write!(
                    s,
                    "db0:keys={n},expires={},avg_ttl=0\r\n",
                    store.expiring_keys()
                );
            }
            Ok(_) => {}
            Err(e) => tracing::warn!("counting keys for INFO failed: {e}"),
        }
        s.push_str("\r\n");
    }
    let e = store.engine().stats();
    if wants(sections, "lsm") {
        let wa = if e.user_bytes_written > 0 {
            e.device_bytes_written as f64 / e.user_bytes_written as f64
        } else {
            0.0
        };
        let sa = if e.live_bytes > 0 {
            e.total_bytes as f64 / e.live_bytes as f64
        } else {
            0.0
        };
        let _ = write!(
            s,
            "# Lsm\r\nuser_bytes_written:{}\r\ndevice_bytes_written:{}\r\nwrite_amplification:{wa:.3}\r\n\
             user_capacity_bytes:{}\r\nlive_bytes:{}\r\ntotal_bytes:{}\r\nspace_amplification:{sa:.3}\r\nkeytable_dram_bytes:{}\r\n\
             entry_values:{}\r\nentry_value_bytes:{}\r\nmemtable_keys:{}\r\nfrozen_memtables:{}\r\nruns_per_level:{:?}\r\nkeys_per_level:{:?}\r\nflushes:{}\r\ncompactions:{}\r\n\
             compaction_invalidated:{}\r\nexpired_entries_dropped:{}\r\nexpiry_compactions:{}\r\ncompactions_without_room_to_move:{}\r\ngc_segments:{}\r\ngc_bytes_moved:{}\r\ngc_pages_skipped:{}\r\ngc_skipped_pages_reread:{}\r\nlog_segments:{}\r\n\
             keytable_segments:{}\r\nreclaimed_segments:{}\r\nunlinked_segments:{}\r\nreleased_segments:{}\r\nreplayed_records:{}\r\ndevice_flushes:{}\r\npaced_flushes:{}\r\npaced_flush_errors:{}\r\n\
             write_stalls_memtable:{}\r\nwrite_stalls_free_segments:{}\r\nwrite_stalls_hole:{}\r\n\
             write_stalls_capacity:{}\r\nwrite_stalls_l0_runs:{}\r\nwrite_stalls_compaction_debt:{}\r\n\
             write_stall_micros:{}\r\nmaintenance_errors:{}\r\n\
             gc_steps_refused:{}\r\nread_retries:{}\r\nrecovery_read_retries:{}\r\ngc_read_retries:{}\r\n\
             recovery_damage:{}\r\nread_checksum_failures:{}\r\nread_unreadable_pages:{}\r\n\
             last_fsck:{}\r\nlast_fsck_time:{}\r\nlast_fsck_problems:{}\r\ncompaction_debt_bytes:{}\r\n\
             landing_pages:{}\r\nlanding_hits:{}\r\nshared_pages_opened:{}\r\nshared_page_joins:{}\r\n\
             gc_batches_beside_clients:{}\r\ngc_waits_for_clients:{}\r\n",
            e.user_bytes_written,
            e.device_bytes_written,
            e.user_capacity_bytes,
            e.live_bytes,
            e.total_bytes,
            e.keytable_dram_bytes,
            e.held_values,
            e.held_value_bytes,
            e.memtable_keys,
            e.frozen_memtables,
            e.runs_per_level,
            e.keys_per_level,
            e.flushes,
            e.compactions,
            e.compaction_invalidated,
            e.expired_dropped,
            e.expiry_compactions,
            e.compactions_without_room_to_move,
            e.gc_segments,
            e.gc_bytes_moved,
            e.gc_pages_skipped,
            e.gc_skipped_pages_reread,
            e.log_segments,
            e.keytable_segments,
            e.reclaimed_segments,
            e.unlinked_segments,
            e.released_segments,
            e.replayed_records,
            e.device_flushes,
            e.paced_flushes,
            e.paced_flush_errors,
            e.write_stalls.memtable,
            e.write_stalls.free_segments,
            e.write_stalls.hole,
            e.write_stalls.capacity,
            e.write_stalls.l0_runs,
            e.write_stalls.compaction_debt,
            e.write_stalls.stalled_micros,
            e.maintenance_errors,
            e.gc_steps_refused,
            e.recovery_read_retries + e.gc_read_retries,
            e.recovery_read_retries,
            e.gc_read_retries,
            e.recovery_damage,
            e.read_checksum_failures,
            e.read_unreadable_pages,
            m.last_fsck.status(),
            m.last_fsck.unix_secs(),
            m.last_fsck.problems(),
            e.compaction_debt_bytes,
            e.landing_pages,
            e.landing_hits,
            e.shared_pages_opened,
            e.shared_page_joins,
            e.gc_batches_beside_clients,
            e.gc_waits_for_clients,
        );
        // One line per keytable level, in the spirit of RocksDB's compaction stats.
        for (l, ls) in e.levels.iter().enumerate() {
            let _ = write!(
                s,
                "level{l}:runs={},bytes={},target_bytes={},bytes_in={},bytes_rewritten={},\
                 bytes_written={},write_amplification={:.3},compactions={},trivial_moves={}\r\n",
                ls.runs,
                ls.bytes,
                ls.target_bytes,
                ls.bytes_in,
                ls.bytes_rewritten,
                ls.bytes_written,
                ls.write_amplification(),
                ls.compactions,
                ls.trivial_moves,
            );
        }
        s.push_str("\r\n");
    }
    if wants(sections, "valuecache") {
        let c = store.engine().value_cache_stats().unwrap_or_default();
        let lookups = c.hits + c.misses;
        let rate = if lookups > 0 {
            c.hits as f64 / lookups as f64
        } else {
            0.0
        };
        let _ = write!(
            s,
            "# Valuecache\r\nvalue_cache_capacity_bytes:{}\r\nvalue_cache_used_bytes:{}\r\n\
             value_cache_hits:{}\r\nvalue_cache_misses:{}\r\nvalue_cache_hit_rate:{rate:.3}\r\n\
             value_cache_inserts:{}\r\nvalue_cache_evictions:{}\r\n\r\n",
            c.capacity_bytes, c.used_bytes, c.hits, c.misses, c.inserts, c.evictions,
        );
    }
    if wants(sections, "ftl") {
        let d = store.engine().device_stats();
        let _ = write!(
            s,
            "# Ftl\r\nsegments:{}\r\nfree_segments:{}\r\nopen_segments:{}\r\nfull_segments:{}\r\n\
             read_only_segments:{}\r\npe_min:{}\r\npe_max:{}\r\nbad_blocks:{}\r\npage_reads:{}\r\n\
             page_writes:{}\r\ntrims:{}\r\nerases:{}\r\ndevice_errors:{}\r\n\r\n",
            d.segments,
            d.free_segments,
            d.open_segments,
            d.full_segments,
            d.read_only_segments,
            d.pe_min,
            d.pe_max,
            d.bad_blocks,
            d.reads,
            d.writes,
            d.trims,
            d.erases,
            d.errors,
        );
    }
    // Redis ends the text without the final blank line.
    while s.ends_with("\r\n\r\n") {
        s.truncate(s.len() - 2);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(v: &[&'static str]) -> Vec<Bytes> {
        v.iter().map(|s| Bytes::from_static(s.as_bytes())).collect()
    }

    #[test]
    fn commands_and_subcommands_have_rows_of_their_own() {
        let get = CommandStats::row_of(&args(&["GET", "k"])).unwrap_or(usize::MAX);
        assert_eq!(CommandStats::row_name(get), "get");
        let id = CommandStats::row_of(&args(&["client", "ID"])).unwrap_or(usize::MAX);
        assert_eq!(CommandStats::row_name(id), "client|id");
        assert_eq!(CommandStats::row_command(id), "client");
        assert_eq!(CommandStats::row_command(get), "get");
        let last = CommandStats::row_of(&args(&["cluster", "getkeysinslot"])).unwrap_or(0);
        assert_eq!(CommandStats::row_name(last), "cluster|getkeysinslot");
        // An unknown subcommand counts under its command; an unknown command nowhere.
        let client = CommandStats::row_of(&args(&["client", "nope"])).unwrap_or(usize::MAX);
        assert_eq!(CommandStats::row_name(client), "client");
        assert_eq!(CommandStats::row_of(&args(&["nosuch"])), None);
        let stats = CommandStats::new();
        assert!(stats.rows.len() > last);
        stats.called(id, 7, true);
        stats.rejected(get);
        let mut out = String::new();
        stats.render(&mut out);
        assert!(out.contains(
            "cmdstat_client|id:calls=1,usec=7,usec_per_call=7.00,rejected_calls=0,failed_calls=1\r\n"
        ));
        assert!(out.contains("cmdstat_get:calls=0,usec=0,usec_per_call=0.00,rejected_calls=1,"));
    }
}
