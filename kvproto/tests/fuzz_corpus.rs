//! The fuzz seed corpus on the stable toolchain: every seed in `fuzz/corpus/framer`,
//! `fuzz/corpus/command` and `fuzz/corpus/cluster_map` goes through the same checks the
//! fuzz targets run (`fuzz/checks/resp.rs`, `fuzz/checks/cluster.rs`), so `cargo test`
//! exercises the framer, command-parser and cluster-map properties and every regression
//! seed. The ignored test `write_seed_corpus` (re)writes the generated seeds:
//! `cargo test -p kvproto --test fuzz_corpus -- --ignored write_seed_corpus`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "../../fuzz/checks/cluster.rs"]
mod cluster_checks;
#[path = "../../fuzz/checks/replay.rs"]
mod replay;
#[path = "../../fuzz/checks/resp.rs"]
mod resp_checks;

use std::path::PathBuf;

use bytes::BytesMut;
use kvproto::cluster::{even_ranges, ClusterMap, NodeSpec};
use kvproto::encode_command;

/// `fuzz/corpus/<target>`.
fn corpus_dir(target: &str) -> PathBuf {
    replay::corpus_dir(env!("CARGO_MANIFEST_DIR"), target)
}

/// Runs `check` on every seed of `target`, naming the seeds that fail.
fn replay(target: &str, check: fn(&[u8])) {
    replay::replay(env!("CARGO_MANIFEST_DIR"), target, check);
}

#[test]
fn framer_seeds() {
    replay("framer", resp_checks::check_framer);
}

#[test]
fn command_seeds() {
    replay("command", resp_checks::check_command);
}

#[test]
fn cluster_map_seeds() {
    replay("cluster_map", cluster_checks::check_cluster_map);
}

/// RESP requests of the commands clients send most, as redis-cli and client libraries
/// encode them.
fn requests() -> Vec<(&'static str, Vec<Vec<&'static str>>)> {
    vec![
        ("ping", vec![vec!["PING"]]),
        ("ping-msg", vec![vec!["PING", "hello"]]),
        ("echo", vec![vec!["ECHO", "hi"]]),
        ("get", vec![vec!["GET", "key:1"]]),
        ("set", vec![vec!["SET", "key:1", "value"]]),
        (
            "set-ex-nx-get",
            vec![vec!["SET", "k", "v", "EX", "10", "NX", "GET"]],
        ),
        (
            "set-pxat-xx",
            vec![vec!["set", "k", "v", "PXAT", "1700000000000", "XX"]],
        ),
        ("set-keepttl", vec![vec!["SET", "k", "v", "KEEPTTL"]]),
        ("setex", vec![vec!["SETEX", "k", "100", "v"]]),
        ("psetex", vec![vec!["PSETEX", "k", "1500", "v"]]),
        (
            "setnx-getset",
            vec![vec!["SETNX", "k", "v"], vec!["GETSET", "k", "w"]],
        ),
        (
            "getex",
            vec![vec!["GETEX", "k", "PERSIST"], vec!["GETEX", "k", "EX", "5"]],
        ),
        (
            "getdel-append",
            vec![vec!["GETDEL", "k"], vec!["APPEND", "k", "tail"]],
        ),
        (
            "mget-mset",
            vec![
                vec!["MSET", "a", "1", "b", "2"],
                vec!["MGET", "a", "b", "c"],
            ],
        ),
        (
            "del-exists",
            vec![
                vec!["DEL", "a", "b"],
                vec!["EXISTS", "a"],
                vec!["UNLINK", "c"],
            ],
        ),
        (
            "incr",
            vec![
                vec!["INCR", "n"],
                vec!["INCRBY", "n", "-9223372036854775808"],
                vec!["DECRBY", "n", "5"],
            ],
        ),
        (
            "getrange-strlen",
            vec![vec!["GETRANGE", "k", "0", "-1"], vec!["STRLEN", "k"]],
        ),
        (
            "expire",
            vec![
                vec!["EXPIRE", "k", "10", "NX"],
                vec!["PEXPIREAT", "k", "1700000000000", "GT"],
            ],
        ),
        (
            "ttl",
            vec![
                vec!["TTL", "k"],
                vec!["PTTL", "k"],
                vec!["EXPIRETIME", "k"],
                vec!["PERSIST", "k"],
            ],
        ),
        (
            "hash",
            vec![
                vec!["HSET", "h", "f", "v", "g", "w"],
                vec!["HGET", "h", "f"],
                vec!["HGETALL", "h"],
                vec!["HMGET", "h", "f", "x"],
                vec!["HDEL", "h", "f"],
                vec!["HLEN", "h"],
                vec!["HEXISTS", "h", "g"],
            ],
        ),
        (
            "zset",
            vec![
                vec!["ZADD", "z", "NX", "CH", "1", "a", "2.5", "b"],
                vec!["ZSCORE", "z", "a"],
                vec!["ZCARD", "z"],
                vec!["ZREM", "z", "a"],
            ],
        ),
        (
            "zrangebyscore",
            vec![vec![
                "ZRANGEBYSCORE",
                "z",
                "-inf",
                "(2",
                "WITHSCORES",
                "LIMIT",
                "0",
                "10",
            ]],
        ),
        (
            "scan",
            vec![vec![
                "SCAN", "0", "MATCH", "user:*", "COUNT", "100", "TYPE", "string",
            ]],
        ),
        (
            "keys-type-rename",
            vec![
                vec!["KEYS", "*"],
                vec!["TYPE", "k"],
                vec!["RENAME", "k", "j"],
                vec!["RENAMENX", "j", "k"],
            ],
        ),
        ("ls-range", vec![vec!["LS.RANGE", "a", "", "COUNT", "10"]]),
        (
            "hello-auth",
            vec![vec![
                "HELLO", "3", "AUTH", "default", "secret", "SETNAME", "app",
            ]],
        ),
        (
            "auth",
            vec![vec!["AUTH", "secret"], vec!["AUTH", "user", "secret"]],
        ),
        (
            "client",
            vec![
                vec!["CLIENT", "SETNAME", "app"],
                vec!["CLIENT", "SETINFO", "LIB-NAME", "redis-py"],
                vec!["CLIENT", "ID"],
            ],
        ),
        (
            "config-info",
            vec![
                vec!["CONFIG", "GET", "maxmemory*"],
                vec!["INFO", "server", "lsm"],
            ],
        ),
        (
            "command-docs",
            vec![
                vec!["COMMAND", "DOCS", "get"],
                vec!["COMMAND", "COUNT"],
                vec!["COMMAND", "INFO", "set"],
            ],
        ),
        (
            "multi-exec",
            vec![
                vec!["WATCH", "k"],
                vec!["MULTI"],
                vec!["SET", "k", "v"],
                vec!["INCR", "n"],
                vec!["EXEC"],
                vec!["UNWATCH"],
            ],
        ),
        (
            "discard",
            vec![vec!["MULTI"], vec!["GET", "k"], vec!["DISCARD"]],
        ),
        (
            "cluster",
            vec![
                vec!["CLUSTER", "SLOTS"],
                vec!["CLUSTER", "KEYSLOT", "{user}1"],
                vec!["READONLY"],
                vec!["READWRITE"],
            ],
        ),
        (
            "flush-dbsize",
            vec![
                vec!["DBSIZE"],
                vec!["FLUSHALL", "ASYNC"],
                vec!["FLUSHDB"],
                vec!["SELECT", "0"],
            ],
        ),
        ("shutdown", vec![vec!["SHUTDOWN", "NOSAVE"]]),
        ("unknown", vec![vec!["FOO", "bar", "baz"]]),
        ("wrong-arity", vec![vec!["GET"], vec!["SET", "k"]]),
    ]
}

/// Wire bytes (not RESP multibulk) that exercise the framer's other paths and limits.
fn raw_streams() -> Vec<(&'static str, Vec<u8>)> {
    let mut big_value = BytesMut::new();
    encode_command(&[&b"SET"[..], b"big", &vec![b'x'; 5000]], &mut big_value);
    vec![
        (
            "inline",
            b"PING\r\nset a \"b c\\x41\\n\" 'it\\'s'\r\nGET a\n".to_vec(),
        ),
        ("inline-empty-lines", b"\r\n\n  \r\nPING\r\n".to_vec()),
        (
            "empty-multibulk",
            b"*0\r\n*-1\r\n*1\r\n$4\r\nPING\r\n".to_vec(),
        ),
        ("unbalanced-quotes", b"SET \"a b\r\n".to_vec()),
        ("quote-then-char", b"SET 'a'b c\r\n".to_vec()),
        ("bad-multibulk-count", b"*abc\r\n".to_vec()),
        ("bad-bulk-len", b"*1\r\n$-5\r\n".to_vec()),
        ("expected-dollar", b"*2\r\n$3\r\nGET\r\n:1\r\n".to_vec()),
        (
            "huge-bulk",
            b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$536870912\r\nabc".to_vec(),
        ),
        ("over-max-bulk", b"*1\r\n$1099511627776\r\n".to_vec()),
        ("huge-multibulk", b"*1048577\r\n".to_vec()),
        ("bulk-without-crlf", b"*2\r\n$3\r\nGETxx$1\r\nkZZ".to_vec()),
        ("big-value", big_value.to_vec()),
    ]
}

/// Regression seeds of the framer's fuzz findings (small limits: `max_inline_len` 32).
fn framer_regressions() -> Vec<(&'static str, Vec<u8>)> {
    let long = "0".repeat(64);
    vec![
        // A `*` or `$` header line past max_inline_len: the error depended on whether its
        // line end arrived in the same read.
        (
            "regress-long-multibulk-header",
            format!("*1{long}\r\n").into_bytes(),
        ),
        (
            "regress-long-bulk-header",
            format!("*1\r\n$1{long}\r\n").into_bytes(),
        ),
    ]
}

/// Writes a seed, creating the directory.
fn write_seed(target: &str, name: &str, data: &[u8]) {
    let dir = corpus_dir(target);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(name), data).unwrap();
}

/// A cluster map of `n` primaries on 127.0.0.1:7001.. with `replicas` replicas each.
fn cluster_map(version: u64, n: usize, replicas: usize) -> ClusterMap {
    let id = |port: usize| format!("{:036x}{port:04}", 0x15c1);
    let mut nodes = Vec::new();
    for (i, (start, end)) in even_ranges(n).into_iter().enumerate() {
        nodes.push(NodeSpec {
            id: id(7001 + i),
            addr: format!("127.0.0.1:{}", 7001 + i).parse().unwrap(),
            slots: vec![[u32::from(start), u32::from(end)]],
            replica_of: None,
        });
    }
    for r in 0..n * replicas {
        let port = 7001 + n + r;
        nodes.push(NodeSpec {
            id: id(port),
            addr: format!("127.0.0.1:{port}").parse().unwrap(),
            slots: Vec::new(),
            replica_of: Some(id(7001 + r % n)),
        });
    }
    ClusterMap::new(version, nodes).unwrap()
}

#[test]
#[ignore = "writes the generated seeds into fuzz/corpus"]
fn write_seed_corpus() {
    for (i, (name, reqs)) in requests().into_iter().enumerate() {
        let mut wire = BytesMut::new();
        for r in &reqs {
            encode_command(r, &mut wire);
        }
        write_seed("command", name, &wire);
        write_seed(
            "framer",
            name,
            &resp_checks::encode_framer_input(false, &[], &wire),
        );
        // The same stream split into reads at a few places, and under small limits.
        let len = u16::try_from(wire.len()).unwrap_or(u16::MAX);
        let cuts = [1, len / 3, len / 2, len.saturating_sub(1)];
        write_seed(
            "framer",
            &format!("{name}-split"),
            &resp_checks::encode_framer_input(false, &cuts, &wire),
        );
        if i % 4 == 0 {
            write_seed(
                "framer",
                &format!("{name}-small"),
                &resp_checks::encode_framer_input(true, &cuts[..2], &wire),
            );
        }
    }
    for (name, wire) in raw_streams() {
        write_seed("command", name, &wire);
        write_seed(
            "framer",
            name,
            &resp_checks::encode_framer_input(false, &[3], &wire),
        );
        write_seed(
            "framer",
            &format!("{name}-small"),
            &resp_checks::encode_framer_input(true, &[], &wire),
        );
    }

    for (name, wire) in framer_regressions() {
        write_seed(
            "framer",
            name,
            &resp_checks::encode_framer_input(true, &[20], &wire),
        );
    }

    let maps = [
        ("one-node", cluster_map(1, 1, 0)),
        ("three-nodes", cluster_map(1, 3, 0)),
        ("three-nodes-replicas", cluster_map(4, 3, 1)),
        ("five-nodes-two-replicas", cluster_map(7, 5, 2)),
    ];
    for (name, map) in &maps {
        write_seed("cluster_map", name, map.to_toml().as_bytes());
        // As a push: `<version>\n<toml>` (version + 1, so it is newer than the current 1).
        let newer = cluster_map(map.version() + 1, map.nodes().len().min(3), 0);
        let push = format!("{}\n{}", newer.version(), newer.to_toml());
        write_seed("cluster_map", &format!("{name}-push"), push.as_bytes());
    }
    let base = cluster_map(2, 2, 1).to_toml();
    let broken = [
        ("overlap", base.replacen("8191]", "8192]", 1)),
        ("reversed-range", base.replacen("[0, 8191]", "[8191, 0]", 1)),
        ("past-last-slot", base.replacen("16383", "16384", 1)),
        ("bad-id", base.replacen("id = \"", "id = \"zz", 1)),
        ("unknown-field", format!("{base}\nextra = 1\n")),
        ("bad-addr", base.replacen("127.0.0.1:7001", "localhost", 1)),
        ("push-version-mismatch", format!("3\n{base}")),
        ("push-not-newer", format!("1\n{base}")),
        ("push-bad-version", format!("+2\n{base}")),
        ("no-nodes", "version = 1\n".to_string()),
        ("not-toml", "version = [[\n".to_string()),
    ];
    for (name, text) in &broken {
        write_seed("cluster_map", name, text.as_bytes());
    }
}
