//! Authentication and permissions on `ls-net`: AUTH, HELLO's AUTH option, ACL WHOAMI / USERS /
//! LIST, and the per-command ACL check (`NOPERM`), against the users of [`crate::acl`].
//!
//! A connection carries its user's name and the command classes that user may not run
//! ([`Classes`]); the loop calls [`refuse`] only when that set is not empty, so a drive whose
//! users all have `+@all` pays one byte test per command.

use bytes::Bytes;
use kvproto::{Command, Reply};

use super::conn::Conn;
use super::route::{route_of, Route};
use crate::acl::{self, Classes, Users, DEFAULT_USER};
use crate::cluster::Admin;

/// Redis's reply to AUTH with a bad password, an unknown user or a disabled one.
pub(super) const WRONGPASS: &str = "WRONGPASS invalid username-password pair or user is disabled.";
/// Redis's reply to `AUTH <password>` when the default user has no password.
const AUTH_WITHOUT_PASSWORD: &str = "ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?";

/// The class a command belongs to (for the ACL check). AUTH, HELLO, QUIT and RESET belong to
/// none: every user may run them, as in Redis (their `no_auth` flag).
pub(super) fn class_of(cmd: &Command) -> Classes {
    match cmd {
        Command::Auth { .. } | Command::Hello { .. } | Command::Quit | Command::Reset => {
            Classes::NONE
        }
        // Redis files INFO under @dangerous, not @read.
        Command::Info(_) => Classes::OTHER,
        _ => match route_of(cmd) {
            Route::Writer => Classes::WRITE,
            Route::Engine => Classes::READ,
            // Cluster map pushes (deferred to the map's saver) count as writes.
            Route::Admin => Classes::WRITE,
            Route::Here => Classes::OTHER,
        },
    }
}

/// The command's name as Redis's NOPERM text gives it: `name|subcommand` for commands with
/// subcommands.
fn full_name(args: &[Bytes]) -> String {
    let lower = |b: &Bytes| String::from_utf8_lossy(b).to_ascii_lowercase();
    let name = args.first().map(lower).unwrap_or_default();
    match (name.as_str(), args.get(1)) {
        ("config" | "client" | "command" | "acl" | "cluster", Some(sub)) => {
            format!("{name}|{}", lower(sub))
        }
        _ => name,
    }
}

/// The NOPERM error for `cmd` if the connection's user may not run it.
pub(super) fn refuse(c: &Conn, cmd: &Command, args: &[Bytes]) -> Option<Reply> {
    c.denied
        .intersects(class_of(cmd))
        .then(|| Reply::error(acl::noperm_error(&c.user, &full_name(args))))
}

/// The NOPERM error for a cluster admin command if the connection's user may not run it (a
/// map push writes; reading the map and `LS.REPLICA` are of the other class).
pub(super) fn refuse_admin(c: &Conn, admin: &Admin, args: &[Bytes]) -> Option<Reply> {
    let class = match admin {
        Admin::ClusterMap if args.len() > 1 => Classes::WRITE,
        _ => Classes::OTHER,
    };
    c.denied
        .intersects(class)
        .then(|| Reply::error(acl::noperm_error(&c.user, &full_name(args))))
}

/// AUTH `[username] password`: on success the connection runs as that user.
pub(super) fn auth(users: &Users, c: &mut Conn, username: Option<&[u8]>, password: &[u8]) -> Reply {
    if username.is_none() && !users.default_has_password() {
        return Reply::error(AUTH_WITHOUT_PASSWORD);
    }
    if login(
        users,
        c,
        username.unwrap_or(DEFAULT_USER.as_bytes()),
        password,
    ) {
        Reply::ok()
    } else {
        Reply::error(WRONGPASS)
    }
}

/// Authenticates the connection as `user` if the password matches; returns whether it did.
pub(super) fn login(users: &Users, c: &mut Conn, user: &[u8], password: &[u8]) -> bool {
    match users.authenticate(user, password) {
        Some(u) => {
            c.authed = true;
            c.denied = u.denied();
            c.user = u.name.clone();
            c.all_channels = u.all_channels();
            true
        }
        None => false,
    }
}

/// ACL WHOAMI, USERS and LIST.
pub(super) fn acl_command(users: &Users, c: &Conn, cmd: &Command) -> Reply {
    let bulk = |s: &str| Reply::Bulk(Bytes::copy_from_slice(s.as_bytes()));
    match cmd {
        Command::AclWhoami => bulk(&c.user),
        Command::AclUsers => Reply::Array(users.iter().map(|u| bulk(&u.name)).collect()),
        Command::AclList => Reply::Array(users.iter().map(|u| bulk(&u.describe())).collect()),
        other => Reply::error(format!(
            "ERR internal: '{}' is not an ACL command",
            other.name()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_follow_the_route() {
        let k = Bytes::from_static(b"k");
        assert_eq!(class_of(&Command::Get(k.clone())), Classes::READ);
        assert_eq!(class_of(&Command::Del(vec![k])), Classes::WRITE);
        assert_eq!(class_of(&Command::FlushAll), Classes::WRITE);
        assert_eq!(class_of(&Command::Ping(None)), Classes::OTHER);
        assert_eq!(class_of(&Command::Info(Vec::new())), Classes::OTHER);
        assert_eq!(class_of(&Command::Quit), Classes::NONE);
    }

    #[test]
    fn subcommands_are_named_with_their_parent() {
        let a = |v: &[&'static str]| {
            v.iter()
                .map(|s| Bytes::from_static(s.as_bytes()))
                .collect::<Vec<_>>()
        };
        assert_eq!(full_name(&a(&["SET", "k", "v"])), "set");
        assert_eq!(full_name(&a(&["CONFIG", "GET", "x"])), "config|get");
        assert_eq!(full_name(&a(&["acl", "WHOAMI"])), "acl|whoami");
    }
}
