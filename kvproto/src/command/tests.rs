use super::*;

fn cmd(parts: &[&str]) -> Result<Command, CommandError> {
    let args: Vec<Bytes> = parts.iter().map(|p| Bytes::from(p.to_string())).collect();
    Command::parse(&args)
}

fn err_text(parts: &[&str]) -> String {
    match cmd(parts) {
        Ok(c) => format!("parsed as {c:?}"),
        Err(e) => e.to_string(),
    }
}

#[test]
#[allow(clippy::panic)]
fn migrate_takes_replicas_of_the_target() {
    let Ok(Command::Migrate(m)) = cmd(&[
        "MIGRATE", "h", "1", "", "0", "50", "REPLICA", "r1", "2", "REPLACE", "REPLICA", "r2", "3",
        "KEYS", "a", "b",
    ]) else {
        panic!("{}", err_text(&["MIGRATE"]));
    };
    assert_eq!(m.keys, vec![Bytes::from("a"), Bytes::from("b")]);
    assert!(m.replace && !m.copy);
    assert_eq!(
        m.replicas,
        vec![
            (Bytes::from("r1"), Bytes::from("2")),
            (Bytes::from("r2"), Bytes::from("3"))
        ]
    );
    // A REPLICA without its port is a syntax error, as any short option.
    assert_eq!(
        err_text(&["MIGRATE", "h", "1", "k", "0", "50", "REPLICA", "r1"]),
        "ERR syntax error"
    );
}

#[test]
fn redis_error_texts() {
    assert_eq!(
        err_text(&["FOO", "a", "b"]),
        "ERR unknown command 'FOO', with args beginning with: 'a' 'b' "
    );
    assert_eq!(
        err_text(&["get"]),
        "ERR wrong number of arguments for 'get' command"
    );
    assert_eq!(
        err_text(&["GET", "a", "b"]),
        "ERR wrong number of arguments for 'get' command"
    );
    assert_eq!(err_text(&["set", "k", "v", "bogus"]), "ERR syntax error");
    assert_eq!(err_text(&["set", "k", "v", "ex", "x"]), NOT_INTEGER);
    assert_eq!(
        err_text(&["set", "k", "v", "ex", "0"]),
        "ERR invalid expire time in 'set' command"
    );
    assert_eq!(err_text(&["set", "k", "v", "nx", "xx"]), "ERR syntax error");
    assert_eq!(err_text(&["incrby", "k", "1.5"]), NOT_INTEGER);
    assert_eq!(err_text(&["setrange", "k", "x", "v"]), NOT_INTEGER);
    assert_eq!(
        err_text(&["setrange", "k", "-1", "v"]),
        "ERR offset is out of range"
    );
    assert_eq!(
        err_text(&["msetnx", "a", "1", "b"]),
        "ERR wrong number of arguments for 'msetnx' command"
    );
    assert_eq!(
        err_text(&["copy", "a", "a"]),
        "ERR source and destination objects are the same"
    );
    assert_eq!(
        err_text(&["copy", "a", "b", "db", "1"]),
        "ERR DB index is out of range"
    );
    assert_eq!(err_text(&["copy", "a", "b", "db", "x"]), NOT_INTEGER);
    assert_eq!(err_text(&["copy", "a", "b", "db"]), SYNTAX);
    assert_eq!(err_text(&["copy", "a", "b", "bogus"]), SYNTAX);
    assert!(matches!(
        cmd(&["copy", "a", "b", "DB", "0", "REPLACE"]),
        Ok(Command::Copy { replace: true, .. })
    ));
    // INCRBYFLOAT's increment is judged after the key's type, as Redis does.
    assert!(cmd(&["incrbyfloat", "k", "x"]).is_ok_and(|c| c.is_write()));
    assert_eq!(
        err_text(&["mset", "a", "1", "b"]),
        "ERR wrong number of arguments for 'mset' command"
    );
    assert_eq!(err_text(&["zadd", "z", "x", "m"]), NOT_FLOAT);
    assert_eq!(
        err_text(&["zadd", "z", "nx", "xx", "1", "m"]),
        "ERR XX and NX options at the same time are not compatible"
    );
    assert_eq!(
        err_text(&["zadd", "z", "gt", "lt", "1", "m"]),
        "ERR GT, LT, and/or NX options at the same time are not compatible"
    );
    assert_eq!(
        err_text(&["zrangebyscore", "z", "a", "1"]),
        "ERR min or max is not a float"
    );
    assert_eq!(err_text(&["scan", "x"]), "ERR invalid cursor");
    assert_eq!(
        err_text(&["ls.range", "a"]),
        "ERR wrong number of arguments for 'ls.range' command"
    );
    assert_eq!(
        err_text(&["ls.range", "a", "b", "count"]),
        "ERR syntax error"
    );
    assert_eq!(
        err_text(&["LS.RANGE", "a", "b", "COUNT", "0"]),
        "ERR COUNT must be between 1 and 10000"
    );
    assert_eq!(
        err_text(&["ls.range", "a", "b", "count", "x"]),
        "ERR value is not an integer or out of range"
    );
    assert_eq!(
        err_text(&["config", "bogus"]),
        "ERR unknown subcommand 'bogus'. Try CONFIG HELP."
    );
    assert_eq!(
        err_text(&["config", "get"]),
        "ERR wrong number of arguments for 'config|get' command"
    );
    assert_eq!(
        err_text(&["hset", "h", "f"]),
        "ERR wrong number of arguments for 'hset' command"
    );
}

#[test]
fn expiry_and_transaction_commands_parse_as_redis_does() {
    assert_eq!(
        err_text(&["expire", "k", "10", "nx", "xx"]),
        "ERR NX and XX, GT or LT options at the same time are not compatible"
    );
    assert_eq!(
        err_text(&["expire", "k", "10", "gt", "lt"]),
        "ERR GT and LT options at the same time are not compatible"
    );
    // Options are checked before the time, as Redis does.
    assert_eq!(
        err_text(&["expire", "k", "x", "bogus"]),
        "ERR Unsupported option bogus"
    );
    assert_eq!(err_text(&["expire", "k", "x"]), NOT_INTEGER);
    assert_eq!(
        err_text(&["expire", "k", "9223372036854775807"]),
        "ERR invalid expire time in 'expire' command"
    );
    assert_eq!(
        cmd(&["PEXPIREAT", "k", "5", "GT"]).ok(),
        Some(Command::Expire {
            key: Bytes::from("k"),
            when: 5,
            absolute: true,
            condition: Some(ExpireCondition::Gt),
            name: "pexpireat",
        })
    );
    assert_eq!(
        err_text(&["setex", "k", "0", "v"]),
        "ERR invalid expire time in 'setex' command"
    );
    assert_eq!(
        err_text(&["psetex", "k", "-1", "v"]),
        "ERR invalid expire time in 'psetex' command"
    );
    assert_eq!(err_text(&["getex", "k", "ex", "1", "persist"]), SYNTAX);
    // GETEX's bad time is kept: Redis reports it only for an existing string key.
    assert!(matches!(
        cmd(&["getex", "k", "ex", "0"]),
        Ok(Command::GetEx {
            expire_error: Some(_),
            ..
        })
    ));
    assert_eq!(
        check_arity(&[Bytes::from("exec"), Bytes::from("x")]).map_err(|e| e.0),
        Err("ERR wrong number of arguments for 'exec' command".to_owned())
    );
    // A syntax error passes the arity check: inside MULTI it is queued.
    assert!(check_arity(&[
        Bytes::from("set"),
        Bytes::from("k"),
        Bytes::from("v"),
        Bytes::from("bogus")
    ])
    .is_ok());
    assert_eq!(
        cmd(&["rename", "a", "b"]).ok().map(|c| c.keys().len()),
        Some(2)
    );
    assert!(cmd(&["multi"]).is_ok_and(|c| !c.is_write()));
    assert!(cmd(&["getdel", "k"]).is_ok_and(|c| c.is_write()));
}

#[test]
fn parses_options() {
    assert_eq!(
        cmd(&["SET", "k", "v", "PX", "100", "NX", "GET"]).ok(),
        Some(Command::Set {
            key: Bytes::from("k"),
            value: Bytes::from("v"),
            expire: Some(Expire::Px(100)),
            condition: Some(SetCondition::Nx),
            keep_ttl: false,
            get: true,
        })
    );
    assert_eq!(
        cmd(&[
            "zrangebyscore",
            "z",
            "(1",
            "+inf",
            "WITHSCORES",
            "LIMIT",
            "0",
            "10"
        ])
        .ok(),
        Some(Command::ZRangeByScore {
            key: Bytes::from("z"),
            min: ScoreBound::Exclusive(1.0),
            max: ScoreBound::PosInf,
            withscores: true,
            limit: Some((0, 10)),
        })
    );
    assert_eq!(
        cmd(&["ls.range", "a", "", "COUNT", "7"]).ok(),
        Some(Command::Range {
            start: Bytes::from_static(b"a"),
            end: Bytes::new(),
            count: 7,
        })
    );
    assert_eq!(
        cmd(&["LS.Range", "a", "b"]).ok(),
        Some(Command::Range {
            start: Bytes::from_static(b"a"),
            end: Bytes::from_static(b"b"),
            count: RANGE_DEFAULT_COUNT,
        })
    );
    assert_eq!(
        cmd(&["scan", "0", "match", "a*", "count", "5"]).ok(),
        Some(Command::Scan {
            cursor: 0,
            pattern: Some(Bytes::from("a*")),
            count: Some(5),
            kind: None,
        })
    );
    assert_eq!(
        cmd(&["decrby", "k", "-9223372036854775808"])
            .err()
            .map(|e| e.0),
        Some("ERR decrement would overflow".to_owned())
    );
    assert!(cmd(&["hello", "3", "auth", "u", "p", "setname", "n"]).is_ok());
}

#[test]
fn integers_like_string2ll() {
    assert_eq!(parse_i64(b"0"), Some(0));
    assert_eq!(parse_i64(b"-12"), Some(-12));
    assert_eq!(parse_i64(b"9223372036854775807"), Some(i64::MAX));
    assert_eq!(parse_i64(b"-9223372036854775808"), Some(i64::MIN));
    assert_eq!(parse_i64(b"9223372036854775808"), None);
    assert_eq!(parse_i64(b"01"), None);
    assert_eq!(parse_i64(b"+1"), None);
    assert_eq!(parse_i64(b" 1"), None);
    assert_eq!(parse_i64(b"-0"), None);
    assert_eq!(parse_i64(b""), None);
}

#[test]
fn pubsub_client_and_slowlog_commands_parse_as_redis_does() {
    let b = |s: &'static str| Bytes::from_static(s.as_bytes());
    assert_eq!(
        cmd(&["SUBSCRIBE", "a", "b"]),
        Ok(Command::Subscribe(vec![b("a"), b("b")]))
    );
    assert_eq!(cmd(&["unsubscribe"]), Ok(Command::Unsubscribe(Vec::new())));
    assert_eq!(
        err_text(&["subscribe"]),
        "ERR wrong number of arguments for 'subscribe' command"
    );
    assert_eq!(
        err_text(&["publish", "c"]),
        "ERR wrong number of arguments for 'publish' command"
    );
    assert_eq!(cmd(&["pubsub", "NUMPAT"]), Ok(Command::PubSubNumPat));
    assert_eq!(
        err_text(&["pubsub", "numpat", "x"]),
        "ERR wrong number of arguments for 'pubsub|numpat' command"
    );
    assert_eq!(
        err_text(&["pubsub", "nope"]),
        "ERR unknown subcommand 'nope'. Try PUBSUB HELP."
    );
    assert_eq!(
        cmd(&["pubsub", "channels", "a*", "extra"]),
        Ok(Command::PubSubChannels(Some(b("a*"))))
    );
    assert_eq!(cmd(&["RESET"]), Ok(Command::Reset));
    assert_eq!(
        err_text(&["reset", "x"]),
        "ERR wrong number of arguments for 'reset' command"
    );
    assert_eq!(
        cmd(&["client", "kill", "1.2.3.4:5"]),
        Ok(Command::ClientKill(ClientKill::Addr(b("1.2.3.4:5"))))
    );
    assert_eq!(
        cmd(&["client", "kill", "id", "7", "skipme", "NO", "type", "pubsub"]),
        Ok(Command::ClientKill(ClientKill::Filters(
            ClientKillFilters {
                id: Some(7),
                kind: Some(ClientType::PubSub),
                addr: None,
                laddr: None,
                user: None,
                skipme: false,
            }
        )))
    );
    assert_eq!(
        err_text(&["client", "kill", "id", "0"]),
        "ERR client-id should be greater than 0"
    );
    assert_eq!(
        err_text(&["client", "kill", "type", "x"]),
        "ERR Unknown client type 'x'"
    );
    assert_eq!(
        err_text(&["client", "kill", "id", "5", "skipme"]),
        "ERR syntax error"
    );
    assert_eq!(
        err_text(&["client", "kill"]),
        "ERR wrong number of arguments for 'client|kill' command"
    );
    assert_eq!(
        cmd(&["client", "no-evict", "ON"]),
        Ok(Command::ClientNoEvict(true))
    );
    assert_eq!(
        err_text(&["client", "no-touch", "maybe"]),
        "ERR syntax error"
    );
    assert_eq!(
        cmd(&["client", "pause", "100", "write"]),
        Ok(Command::ClientPause {
            millis: 100,
            all: false
        })
    );
    assert_eq!(
        cmd(&["client", "pause", "0"]),
        Ok(Command::ClientPause {
            millis: 0,
            all: true
        })
    );
    assert_eq!(
        err_text(&["client", "pause", "-1"]),
        "ERR timeout is negative"
    );
    assert_eq!(
        err_text(&["client", "pause", "x"]),
        "ERR timeout is not an integer or out of range"
    );
    assert_eq!(
        err_text(&["client", "pause", "1", "both"]),
        "ERR CLIENT PAUSE mode must be WRITE or ALL"
    );
    assert_eq!(cmd(&["slowlog", "get"]), Ok(Command::SlowlogGet(None)));
    assert_eq!(
        cmd(&["slowlog", "get", "-1"]),
        Ok(Command::SlowlogGet(Some(-1)))
    );
    assert_eq!(
        err_text(&["slowlog", "get", "-2"]),
        "ERR count should be greater than or equal to -1"
    );
    assert_eq!(
        err_text(&["slowlog", "len", "x"]),
        "ERR wrong number of arguments for 'slowlog|len' command"
    );
    assert_eq!(
        err_text(&["slowlog", "get", "1", "2"]),
        "ERR unknown subcommand or wrong number of arguments for 'get'. Try SLOWLOG HELP."
    );
}

#[test]
fn table_is_consistent() {
    for s in COMMANDS {
        assert_eq!(
            lookup(s.name.to_uppercase().as_bytes()).map(|x| x.name),
            Some(s.name)
        );
    }
    assert!(cmd(&["set", "k", "v"]).is_ok_and(|c| c.is_write()));
    assert!(cmd(&["get", "k"]).is_ok_and(|c| !c.is_write()));
    assert_eq!(
        cmd(&["mset", "a", "1", "b", "2"])
            .ok()
            .map(|c| c.keys().len()),
        Some(2)
    );
}
