//! Authentication and ACL users by difference: the same AUTH / HELLO AUTH / ACL / NOPERM
//! exchanges against redis-server and the drive started with the same ACL file (or the same
//! `requirepass`), reply for reply.
//!
//! redis-server must be installed (`cargo xtask test` installs it): the test fails without it.
//! Redis before 7.2 words NOPERM as "this user has no permissions ...", 7.2 as "User <name> has
//! no permissions ..." (the drive's, as it reports 7.2): the older text is mapped to the newer.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::io::Write;
use std::net::TcpStream;
use std::process::Command;

use common::{read_frame as read_reply, Drive, RedisServer};

/// Sends one inline command and reads its reply.
fn ask(s: &mut TcpStream, cmd: &str) -> String {
    s.write_all(format!("{cmd}\r\n").as_bytes()).unwrap();
    String::from_utf8_lossy(&read_reply(s)).into_owned()
}

/// The redis-server's major.minor version, from INFO.
fn redis_version(s: &mut TcpStream) -> (u32, u32) {
    let info = ask(s, "INFO server");
    let v = info
        .lines()
        .find_map(|l| l.strip_prefix("redis_version:"))
        .unwrap_or("0.0");
    let mut parts = v.split('.').map(|p| p.trim().parse().unwrap_or(0));
    (parts.next().unwrap_or(0), parts.next().unwrap_or(0))
}

/// The drive's reply in the words of a redis-server older than 7.2 where they differ.
fn as_redis(reply: &str, version: (u32, u32)) -> String {
    if version >= (7, 2) {
        return reply.to_string();
    }
    match reply.strip_prefix("-NOPERM User ") {
        Some(rest) => match rest.split_once(' ') {
            Some((_user, tail)) => format!("-NOPERM this user {tail}"),
            None => reply.to_string(),
        },
        None => reply.to_string(),
    }
}

/// Runs `script` (connection index, command, compare: exact or only the reply's type) on
/// both servers and lists the differences.
fn compare(redis: &RedisServer, drive: &Drive, conns: usize, script: &[(usize, &str, bool)]) {
    let mut r: Vec<TcpStream> = (0..conns).map(|_| redis.raw()).collect();
    let mut d: Vec<TcpStream> = (0..conns).map(|_| drive.raw()).collect();
    let version = redis_version(&mut redis.raw());
    let mut diffs = Vec::new();
    for &(i, cmd, exact) in script {
        let want = ask(&mut r[i], cmd);
        let got = as_redis(&ask(&mut d[i], cmd), version);
        let same = if exact {
            want == got
        } else {
            want.as_bytes().first() == got.as_bytes().first()
        };
        if !same {
            diffs.push(format!(
                "conn {i} `{cmd}`:\n  redis-server: {want:?}\n  drive:        {got:?}"
            ));
        }
    }
    assert!(diffs.is_empty(), "{}", diffs.join("\n"));
}

const ACL_FILE: &str = "\
user alice on >apw ~* &* +@all
user ro on >rpw ~* &* +@all -@write
user gone off >gpw ~* &* +@all
user reader on nopass ~* &* -@all +@read
user idle off
";

#[test]
fn acl_users_answer_as_redis_server_does() {
    let dir = tempfile::tempdir().unwrap();
    let acl = dir.path().join("users.acl");
    std::fs::write(&acl, ACL_FILE).unwrap();
    let acl_s = acl.to_str().unwrap();
    let redis = RedisServer::start(dir.path(), &["--aclfile", acl_s]);
    let drive = Drive::start(&dir.path().join("data"), &["--aclfile", acl_s]);
    compare(
        &redis,
        &drive,
        2,
        &[
            (0, "ACL WHOAMI", true),
            (0, "AUTH x", true),
            (0, "AUTH alice bad", true),
            (0, "AUTH gone gpw", true),
            (0, "AUTH nobody x", true),
            (0, "ACL USERS", true),
            (0, "ACL LIST", true),
            (0, "ACL WHOAMI x", true),
            (0, "ACL FOO", true),
            (0, "AUTH ro rpw", true),
            (0, "ACL WHOAMI", true),
            (0, "SET k v", true),
            (0, "GET k", true),
            (0, "DEL k", true),
            (0, "FLUSHALL", true),
            (0, "INCR n", true),
            (0, "PING", true),
            (0, "MULTI", true),
            (0, "SET a b", true),
            (0, "GET a", true),
            (0, "EXEC", true),
            (0, "HELLO 3 AUTH ro bad", true),
            (0, "HELLO 2 AUTH alice apw", false),
            (0, "ACL WHOAMI", true),
            (0, "SET k v", true),
            (0, "GET k", true),
            (1, "AUTH reader anything", true),
            (1, "GET k", true),
            (1, "EXISTS k", true),
            (1, "PING", true),
            (1, "ACL WHOAMI", true),
            (1, "SET k w", true),
            (1, "AUTH gone gpw", true),
            (1, "ACL WHOAMI", true),
        ],
    );
}

#[test]
fn requirepass_answers_as_redis_server_does() {
    let dir = tempfile::tempdir().unwrap();
    let redis = RedisServer::start(dir.path(), &["--requirepass", "s3cret"]);
    let drive = Drive::start(&dir.path().join("data"), &["--requirepass", "s3cret"]);
    compare(
        &redis,
        &drive,
        1,
        &[
            (0, "GET k", true),
            (0, "AUTH wrong", true),
            (0, "AUTH default wrong", true),
            (0, "AUTH s3cret", true),
            (0, "ACL WHOAMI", true),
            (0, "CONFIG GET requirepass", true),
            (0, "AUTH default s3cret", true),
            (0, "SET k v", true),
            // RESET logs the connection out (the default user has a password).
            (0, "RESET", true),
            (0, "GET k", true),
            (0, "RESET", true),
            (0, "AUTH s3cret", true),
            (0, "GET k", true),
        ],
    );
}

#[test]
fn empty_requirepass_is_no_password() {
    let dir = tempfile::tempdir().unwrap();
    let redis = RedisServer::start(dir.path(), &["--requirepass", ""]);
    let drive = Drive::start(&dir.path().join("data"), &["--requirepass", ""]);
    compare(
        &redis,
        &drive,
        1,
        &[
            (0, "PING", true),
            (0, "AUTH \"\"", true),
            (0, "AUTH default \"\"", true),
            (0, "CONFIG GET requirepass", true),
            (0, "ACL WHOAMI", true),
        ],
    );
}

#[test]
fn a_bad_acl_file_stops_the_start_naming_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let acl = dir.path().join("users.acl");
    std::fs::write(&acl, "user a on >x ~* +@all\nuser b on >y ~app:* +@all\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_lightstore"))
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .args(["--port", "0", "--capacity", common::TEST_CAPACITY])
        .arg("--aclfile")
        .arg(&acl)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("line 2") && err.contains("~app:*"),
        "the error names the line: {err}"
    );
}

/// The project's own client (kvproto) authenticates as an ACL user, and a read-only user's
/// write is refused with NOPERM.
#[test]
fn kvproto_client_authenticates_as_an_acl_user() {
    let dir = tempfile::tempdir().unwrap();
    let acl = dir.path().join("users.acl");
    std::fs::write(&acl, ACL_FILE).unwrap();
    let drive = Drive::start(
        &dir.path().join("data"),
        &["--aclfile", acl.to_str().unwrap()],
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        use kvproto::client::{Client, Credentials};
        use kvproto::Reply;
        let login = |user: &str, password: &str| Credentials {
            user: Some(user.into()),
            password: password.into(),
        };
        let mut c = Client::connect(drive.addr).await.unwrap();
        c.auth(&login("alice", "apw")).await.unwrap();
        let r = c.call(&["SET", "k", "v"]).await.unwrap();
        assert!(!r.is_error(), "{r:?}");
        let mut c = Client::connect(drive.addr).await.unwrap();
        c.auth(&login("ro", "rpw")).await.unwrap();
        assert_eq!(
            c.call(&["GET", "k"]).await.unwrap(),
            Reply::Bulk(bytes::Bytes::from_static(b"v"))
        );
        match c.call(&["SET", "k", "w"]).await.unwrap() {
            Reply::Error(e) => assert!(e.starts_with(b"NOPERM"), "{e:?}"),
            other => panic!("a read-only user wrote: {other:?}"),
        }
        let mut c = Client::connect(drive.addr).await.unwrap();
        assert!(
            c.auth(&login("ro", "nope")).await.is_err(),
            "a wrong password is refused"
        );
    });
}
