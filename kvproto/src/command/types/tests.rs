use super::super::Command;
use super::*;

fn cmd(parts: &[&str]) -> Result<Command, CommandError> {
    let args: Vec<Bytes> = parts.iter().map(|p| Bytes::from(p.to_string())).collect();
    Command::parse(&args)
}

fn err_text(parts: &[&str]) -> String {
    cmd(parts).err().map(|e| e.0).unwrap_or_default()
}

#[test]
fn collection_commands_parse_with_redis_errors() {
    assert_eq!(
        err_text(&["spop", "s", "-1"]),
        "ERR value is out of range, must be positive"
    );
    assert_eq!(err_text(&["spop", "s", "1", "2"]), SYNTAX);
    assert!(err_text(&["srandmember", "s", "-9223372036854775808"]).contains("must between"));
    assert_eq!(
        err_text(&["sintercard", "0", "a"]),
        "ERR numkeys should be greater than 0"
    );
    assert_eq!(
        err_text(&["sintercard", "3", "a"]),
        "ERR Number of keys can't be greater than number of args"
    );
    assert_eq!(
        err_text(&["sintercard", "1", "a", "limit", "-1"]),
        "ERR LIMIT can't be negative"
    );
    assert!(err_text(&["zrange", "z", "0", "1", "limit", "0", "2"]).contains("LIMIT is only"));
    assert!(cmd(&["zrange", "z", "0", "1", "limit", "0", "-1"]).is_ok());
    assert!(err_text(&["zrange", "z", "-", "+", "bylex", "withscores"]).contains("BYLEX"));
    assert_eq!(err_text(&["zrevrange", "z", "0", "1", "rev"]), SYNTAX);
    assert_eq!(
        err_text(&["zrangebylex", "z", "a", "+"]),
        "ERR min or max not valid string range item"
    );
    assert_eq!(err_text(&["hincrbyfloat", "h", "f", "x"]), NOT_FLOAT);
    assert_eq!(err_text(&["hrandfield", "h", "1", "x"]), SYNTAX);
    let Ok(Command::Collection(Collection::ZRange { by, rev, .. })) =
        cmd(&["zrevrangebyscore", "z", "5", "(1"])
    else {
        panic!("zrevrangebyscore did not parse");
    };
    assert!(rev);
    assert_eq!(
        by,
        ZRangeBy::Score(ScoreBound::Exclusive(1.0), ScoreBound::Inclusive(5.0))
    );
    let Ok(Command::Collection(Collection::CollScan { bad_option, .. })) =
        cmd(&["sscan", "s", "0", "count", "0"])
    else {
        panic!("sscan did not parse");
    };
    assert_eq!(bad_option, Some(err(SYNTAX)));
    assert_eq!(err_text(&["sscan", "s", "x"]), "ERR invalid cursor");
    assert!(cmd(&["sadd", "s", "a"]).is_ok_and(|c| c.is_write()));
    assert!(cmd(&["sinter", "a", "b"]).is_ok_and(|c| !c.is_write() && c.keys().len() == 2));
}

#[test]
fn blocking_pops_parse_their_timeout_first_as_redis_does() {
    let Ok(Command::Collection(Collection::BPop {
        keys,
        left,
        timeout_ms,
    })) = cmd(&["BLPOP", "a", "b", "1.5"])
    else {
        panic!("BLPOP parses");
    };
    assert_eq!((keys.len(), left, timeout_ms), (2, true, 1500));
    // Rounded up to the millisecond, 0 waits for ever.
    let t = |v: &str| match cmd(&["brpop", "k", v]) {
        Ok(Command::Collection(c)) => c.block_timeout_ms(),
        _ => None,
    };
    assert_eq!(t("0.0001"), Some(1));
    assert_eq!(t("0"), Some(0));
    assert_eq!(
        err_text(&["blpop", "k", "x"]),
        "ERR timeout is not a float or out of range"
    );
    assert_eq!(
        err_text(&["blpop", "k", "nan"]),
        "ERR timeout is not a float or out of range"
    );
    assert_eq!(err_text(&["blpop", "k", "-1"]), "ERR timeout is negative");
    assert_eq!(
        err_text(&["blpop", "k", "inf"]),
        "ERR timeout is out of range"
    );
    assert!(err_text(&["blpop", "k"]).starts_with("ERR wrong number of arguments"));
    // BLMOVE reads its ends before its timeout.
    assert_eq!(err_text(&["blmove", "s", "d", "up", "left", "x"]), SYNTAX);
    assert_eq!(
        err_text(&["blmove", "s", "d", "left", "left", "x"]),
        "ERR timeout is not a float or out of range"
    );
    let Ok(Command::Collection(Collection::BZPop { keys, max, .. })) =
        cmd(&["bzpopmax", "z1", "z2", "0"])
    else {
        panic!("BZPOPMAX parses");
    };
    assert_eq!((keys.len(), max), (2, true));
    assert_eq!(
        err_text(&["bzpopmin", "z", "-2"]),
        "ERR timeout is negative"
    );
    let mv = cmd(&["brpoplpush", "s", "d", "2"]).unwrap();
    assert!(mv.is_write());
    assert_eq!(mv.keys(), vec![&b"s"[..], &b"d"[..]]);
    let Command::Collection(c) = mv else {
        panic!("a collection command");
    };
    assert_eq!(c.block_timeout_ms(), Some(2000));
    assert!(cmd(&["lpop", "k"]).is_ok_and(|c| match c {
        Command::Collection(c) => c.block_timeout_ms().is_none(),
        _ => false,
    }));
}

#[test]
fn multi_key_pops_parse_as_redis_7() {
    let Ok(Command::Collection(Collection::MPop {
        keys,
        left,
        count,
        timeout_ms,
    })) = cmd(&["lmpop", "2", "a", "b", "right", "COUNT", "3"])
    else {
        panic!("LMPOP parses");
    };
    assert_eq!((keys.len(), left, count, timeout_ms), (2, false, 3, None));
    let Ok(Command::Collection(c)) = cmd(&["bzmpop", "1.5", "1", "z", "MAX"]) else {
        panic!("BZMPOP parses");
    };
    assert_eq!(c.block_timeout_ms(), Some(1500));
    assert_eq!(c.name(), "bzmpop");
    assert!(matches!(
        c,
        Collection::ZMPop {
            max: true,
            count: 1,
            ..
        }
    ));
    for (args, want) in [
        (
            &["lmpop", "0", "a", "left"][..],
            "ERR numkeys should be greater than 0",
        ),
        (
            &["lmpop", "x", "a", "left"],
            "ERR numkeys should be greater than 0",
        ),
        (&["lmpop", "2", "a", "left"], SYNTAX),
        (&["lmpop", "1", "a", "up"], SYNTAX),
        (&["zmpop", "1", "a", "left"], SYNTAX),
        (
            &["lmpop", "1", "a", "left", "count", "0"],
            "ERR count should be greater than 0",
        ),
        (&["lmpop", "1", "a", "left", "count"], SYNTAX),
        (
            &["lmpop", "1", "a", "left", "count", "1", "count", "2"],
            SYNTAX,
        ),
        // The timeout is read last, as Redis 7 does.
        (&["blmpop", "x", "1", "a", "up"], SYNTAX),
        (
            &["blmpop", "x", "1", "a", "left"],
            "ERR timeout is not a float or out of range",
        ),
        (
            &["bzmpop", "-1", "1", "a", "min"],
            "ERR timeout is negative",
        ),
    ] {
        assert_eq!(err_text(args), want, "{args:?}");
    }
}
