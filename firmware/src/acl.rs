//! Users and what they may run: the subset of Redis ACL the drive serves.
//!
//! Users come from `requirepass` (the `default` user's password) or from an `aclfile` in Redis's
//! ACL file syntax, one `user <name> <rule>...` line per user. Passwords are kept only as
//! SHA-256 digests (as Redis keeps them) and a password sent with AUTH is hashed and compared
//! with each digest in constant time (`subtle`), so the time AUTH takes does not depend on how
//! much of a guess matched.
//!
//! Commands fall into three classes, from the thread that answers them (`net::route`): *write*
//! (every command that changes data: Redis's `@write`), *read* (the reading commands: Redis's
//! `@read`) and *other* (connection, server and transaction commands). A user holds the set of
//! classes it may not run ([`Classes`]), copied into each connection it authenticates, so the
//! check per command is one test of a byte that is zero for users with `+@all`.
//! `docs/SECURITY.md` lists what is and is not supported of Redis ACL.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// Name of the user every connection starts as (Redis's).
pub const DEFAULT_USER: &str = "default";

/// A SHA-256 password digest.
pub type PasswordDigest = [u8; 32];

/// Length of a password digest written in hex (`#<hex>` rules).
const DIGEST_HEX_LEN: usize = 64;

/// Command classes, as a bit set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Classes(pub u8);

impl Classes {
    /// No class.
    pub const NONE: Classes = Classes(0);
    /// Reading commands (`@read`).
    pub const READ: Classes = Classes(1);
    /// Writing commands (`@write`).
    pub const WRITE: Classes = Classes(2);
    /// Every other command (connection, server, transaction, cluster).
    pub const OTHER: Classes = Classes(4);
    /// Every class (`@all`).
    pub const ALL: Classes = Classes(7);

    /// Whether no class is in the set.
    #[must_use]
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Whether `other` shares a class with this set.
    #[must_use]
    pub fn intersects(self, other: Classes) -> bool {
        self.0 & other.0 != 0
    }

    fn with(self, other: Classes) -> Classes {
        Classes(self.0 | other.0)
    }

    fn without(self, other: Classes) -> Classes {
        Classes(self.0 & !other.0)
    }
}

/// One user.
#[derive(Debug, Clone)]
pub struct User {
    /// The user's name.
    pub name: Arc<str>,
    /// `on`: the user may authenticate (`off`: AUTH as this user fails).
    pub enabled: bool,
    /// `nopass`: any password authenticates this user.
    pub nopass: bool,
    /// Digests of the passwords that authenticate this user.
    passwords: Vec<PasswordDigest>,
    /// The command classes the user may run.
    pub allowed: Classes,
    /// The command rules as written (`+@all`, `-@write`, ...), for ACL LIST.
    rules: Vec<&'static str>,
    /// `~*` given: the user may touch every key.
    all_keys: bool,
    /// `&*` given: the user may use every pub/sub channel (without it, none: SUBSCRIBE,
    /// PSUBSCRIBE and PUBLISH answer NOPERM).
    all_channels: bool,
}

impl User {
    /// A user that is off, has no password, no keys and no commands (Redis's new user).
    fn new(name: &str) -> User {
        User {
            name: Arc::from(name),
            enabled: false,
            nopass: false,
            passwords: Vec::new(),
            allowed: Classes::NONE,
            rules: Vec::new(),
            all_keys: false,
            all_channels: false,
        }
    }

    /// Redis's default user: `on nopass ~* &* +@all`.
    fn default_user() -> User {
        User {
            enabled: true,
            nopass: true,
            allowed: Classes::ALL,
            rules: vec!["+@all"],
            all_keys: true,
            all_channels: true,
            ..User::new(DEFAULT_USER)
        }
    }

    /// Whether the user may use pub/sub channels (`&*`).
    #[must_use]
    pub fn all_channels(&self) -> bool {
        self.all_channels
    }

    /// The classes this user may not run (what a connection checks).
    #[must_use]
    pub fn denied(&self) -> Classes {
        Classes::ALL.without(self.allowed)
    }

    /// Whether `password` authenticates this user (it is on, and `nopass` or a digest
    /// matches; every digest is compared, in constant time).
    fn accepts(&self, digest: &PasswordDigest) -> bool {
        let mut matched = subtle::Choice::from(0);
        for p in &self.passwords {
            matched |= p.ct_eq(digest);
        }
        self.enabled && (self.nopass || bool::from(matched))
    }

    /// The user as an ACL file line (what ACL LIST answers), in Redis 7's order: flags,
    /// password digests, keys, channels, commands.
    #[must_use]
    pub fn describe(&self) -> String {
        let mut s = format!("user {}", self.name);
        s.push_str(if self.enabled { " on" } else { " off" });
        if self.nopass {
            s.push_str(" nopass");
        }
        for p in &self.passwords {
            s.push_str(" #");
            s.push_str(&hex(p));
        }
        if self.all_keys {
            s.push_str(" ~*");
        }
        s.push_str(if self.all_channels {
            " &*"
        } else {
            " resetchannels"
        });
        if self.rules.is_empty() || self.rules.first() != Some(&"+@all") {
            s.push_str(" -@all");
        }
        for r in &self.rules {
            s.push(' ');
            s.push_str(r);
        }
        s
    }
}

/// A rule the drive does not support, or a malformed file.
#[derive(Debug, thiserror::Error)]
pub enum AclError {
    /// The file could not be read.
    #[error("reading the ACL file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A line the drive does not understand or does not support.
    #[error("ACL file {path}, line {line}: {why} (in `{text}`)")]
    Line {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        why: String,
        /// The line.
        text: String,
    },
    /// Both a password for the default user and an ACL file were given.
    #[error("requirepass and aclfile are both set: set the default user's password in the ACL file (a `user default on >password ~* &* +@all` line)")]
    RequirepassWithFile,
}

/// Every user of the drive.
#[derive(Debug, Clone)]
pub struct Users {
    /// Users by name (sorted, as ACL USERS and ACL LIST answer).
    by_name: BTreeMap<Vec<u8>, Arc<User>>,
    /// The default user (also in `by_name`).
    default: Arc<User>,
}

impl Users {
    /// The users of a drive started with `requirepass` (an empty password is no password)
    /// and no ACL file: only `default`.
    #[must_use]
    pub fn from_requirepass(requirepass: Option<&str>) -> Users {
        let mut user = User::default_user();
        if let Some(pw) = requirepass.filter(|p| !p.is_empty()) {
            user.nopass = false;
            user.passwords.push(digest(pw.as_bytes()));
        }
        Users::from_list(vec![user])
    }

    /// Reads an ACL file. A file without a `default` user gets Redis's (`on nopass ~* &*
    /// +@all`).
    ///
    /// # Errors
    /// An unreadable file, or the first line that is not understood (named with its number).
    pub fn from_file(path: &Path) -> Result<Users, AclError> {
        let text = std::fs::read_to_string(path).map_err(|source| AclError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Users::parse(&text).map_err(|(line, why)| AclError::Line {
            path: path.to_path_buf(),
            line,
            why,
            text: text
                .lines()
                .nth(line.saturating_sub(1))
                .unwrap_or_default()
                .trim()
                .to_string(),
        })
    }

    /// Parses ACL file text; an error names the 1-based line and what is wrong.
    fn parse(text: &str) -> Result<Users, (usize, String)> {
        let mut users: Vec<User> = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let n = i + 1;
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let mut words = line.split_ascii_whitespace();
            if words.next() != Some("user") {
                return Err((n, "a line must start with `user`".into()));
            }
            let Some(name) = words.next() else {
                return Err((n, "missing user name".into()));
            };
            if users.iter().any(|u| &*u.name == name) {
                return Err((n, format!("duplicate user '{name}'")));
            }
            let mut user = User::new(name);
            for rule in words {
                apply_rule(&mut user, rule).map_err(|why| (n, why))?;
            }
            if !user.allowed.is_empty() && !user.all_keys {
                return Err((
                    n,
                    format!(
                        "user '{name}' has commands but no `~*`: key patterns other than `~*` (allkeys) are not supported"
                    ),
                ));
            }
            users.push(user);
        }
        if !users.iter().any(|u| &*u.name == DEFAULT_USER) {
            users.push(User::default_user());
        }
        Ok(Users::from_list(users))
    }

    fn from_list(list: Vec<User>) -> Users {
        let by_name: BTreeMap<Vec<u8>, Arc<User>> = list
            .into_iter()
            .map(|u| (u.name.as_bytes().to_vec(), Arc::new(u)))
            .collect();
        let default = by_name
            .get(DEFAULT_USER.as_bytes())
            .cloned()
            .unwrap_or_else(|| Arc::new(User::default_user()));
        Users { by_name, default }
    }

    /// Builds the users from the settings: the ACL file if one is given, else `requirepass`.
    ///
    /// # Errors
    /// Both given, or a bad file.
    pub fn load(requirepass: Option<&str>, aclfile: Option<&Path>) -> Result<Users, AclError> {
        match aclfile {
            None => Ok(Users::from_requirepass(requirepass)),
            Some(_) if requirepass.is_some_and(|p| !p.is_empty()) => {
                Err(AclError::RequirepassWithFile)
            }
            Some(path) => Users::from_file(path),
        }
    }

    /// The default user.
    #[must_use]
    pub fn default_user(&self) -> &Arc<User> {
        &self.default
    }

    /// Whether a new connection starts authenticated (the default user is on and has
    /// `nopass`, as in Redis).
    #[must_use]
    pub fn open_by_default(&self) -> bool {
        self.default.enabled && self.default.nopass
    }

    /// Whether the default user needs a password (protected mode is off then).
    #[must_use]
    pub fn default_has_password(&self) -> bool {
        !self.default.nopass
    }

    /// The user `name` with `password`, if they match and the user is on. The password is
    /// hashed whether or not the user exists, and compared with every digest of the user
    /// in constant time.
    #[must_use]
    pub fn authenticate(&self, name: &[u8], password: &[u8]) -> Option<Arc<User>> {
        let d = digest(password);
        let user = self.by_name.get(name)?;
        user.accepts(&d).then(|| user.clone())
    }

    /// Every user, by name.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<User>> {
        self.by_name.values()
    }
}

/// Applies one ACL rule to `user`.
fn apply_rule(user: &mut User, rule: &str) -> Result<(), String> {
    match rule {
        "on" => user.enabled = true,
        "off" => user.enabled = false,
        "nopass" => {
            user.nopass = true;
            user.passwords.clear();
        }
        "resetpass" => {
            user.nopass = false;
            user.passwords.clear();
        }
        "~*" | "allkeys" => user.all_keys = true,
        "resetkeys" => user.all_keys = false,
        // Channels are all or nothing: `&*` or none (pattern rules like `&news:*` are refused).
        "&*" | "allchannels" => user.all_channels = true,
        "resetchannels" => user.all_channels = false,
        "+@all" | "allcommands" => {
            user.allowed = Classes::ALL;
            user.rules = vec!["+@all"];
        }
        "-@all" | "nocommands" => {
            user.allowed = Classes::NONE;
            user.rules.clear();
        }
        "+@read" => add_rule(user, "+@read", |c| c.with(Classes::READ)),
        "-@read" => add_rule(user, "-@read", |c| c.without(Classes::READ)),
        "+@write" => add_rule(user, "+@write", |c| c.with(Classes::WRITE)),
        "-@write" => add_rule(user, "-@write", |c| c.without(Classes::WRITE)),
        "reset" => *user = User::new(&user.name),
        _ => {
            if let Some(pw) = rule.strip_prefix('>') {
                let d = digest(pw.as_bytes());
                user.nopass = false;
                if !user.passwords.contains(&d) {
                    user.passwords.push(d);
                }
            } else if let Some(h) = rule.strip_prefix('#') {
                let d = parse_digest(h)?;
                user.nopass = false;
                if !user.passwords.contains(&d) {
                    user.passwords.push(d);
                }
            } else {
                return Err(format!(
                    "unsupported rule `{rule}` (supported: on, off, >password, #sha256hex, nopass, resetpass, ~*, allkeys, resetkeys, &*, allchannels, resetchannels, +@all, -@all, allcommands, nocommands, +@read, -@read, +@write, -@write, reset)"
                ));
            }
        }
    }
    Ok(())
}

fn add_rule(user: &mut User, rule: &'static str, f: impl Fn(Classes) -> Classes) {
    user.allowed = f(user.allowed);
    user.rules.push(rule);
}

/// SHA-256 of a password.
#[must_use]
pub fn digest(password: &[u8]) -> PasswordDigest {
    Sha256::digest(password).into()
}

fn parse_digest(h: &str) -> Result<PasswordDigest, String> {
    let bad = || format!("`#{h}`: a password hash is {DIGEST_HEX_LEN} hex digits (SHA-256)");
    if h.len() != DIGEST_HEX_LEN {
        return Err(bad());
    }
    let mut d = [0u8; 32];
    for (i, byte) in d.iter_mut().enumerate() {
        let pair = h.get(2 * i..2 * i + 2).ok_or_else(bad)?;
        *byte = u8::from_str_radix(pair, 16).map_err(|_| bad())?;
    }
    Ok(d)
}

fn hex(d: &PasswordDigest) -> String {
    d.iter().map(|b| format!("{b:02x}")).collect()
}

/// Redis 7.2's error for a command the user may not run (`name`: the command's full name,
/// `config|set` for a subcommand).
#[must_use]
pub fn noperm_error(user: &str, name: &str) -> String {
    format!("NOPERM User {user} has no permissions to run the '{name}' command")
}

/// Redis 7.2's error for SUBSCRIBE, PSUBSCRIBE or PUBLISH by a user without channel
/// permissions (`resetchannels`, no `&*`).
pub const NOPERM_CHANNEL: &str = "NOPERM No permissions to access a channel";

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]
    use super::*;

    #[test]
    fn requirepass_empty_is_no_password() {
        let u = Users::from_requirepass(Some(""));
        assert!(u.open_by_default());
        assert!(!u.default_has_password());
        let u = Users::from_requirepass(Some("pw"));
        assert!(!u.open_by_default());
        assert!(u.authenticate(b"default", b"pw").is_some());
        assert!(u.authenticate(b"default", b"pW").is_none());
        assert!(u.authenticate(b"default", b"").is_none());
        assert!(u.authenticate(b"nobody", b"pw").is_none());
    }

    #[test]
    fn acl_file_users_classes_and_listing() {
        let h = hex(&digest(b"secret"));
        let text = format!(
            "# users\n\nuser alice on >apw ~* &* +@all\nuser ro on #{h} ~* &* +@all -@write\nuser gone off >x ~* +@all\nuser reader on nopass ~* -@all +@read\n"
        );
        let u = Users::parse(&text).unwrap();
        assert!(u.open_by_default(), "a file without default gets Redis's");
        let alice = u.authenticate(b"alice", b"apw").unwrap();
        assert!(alice.denied().is_empty());
        let ro = u.authenticate(b"ro", b"secret").unwrap();
        assert_eq!(ro.denied(), Classes::WRITE);
        assert!(u.authenticate(b"gone", b"x").is_none(), "off users fail");
        let reader = u.authenticate(b"reader", b"anything").unwrap();
        assert_eq!(
            reader.denied(),
            Classes(Classes::WRITE.0 | Classes::OTHER.0)
        );
        let names: Vec<&str> = u.iter().map(|u| &*u.name).collect();
        assert_eq!(names, ["alice", "default", "gone", "reader", "ro"]);
        assert_eq!(
            ro.describe(),
            format!("user ro on #{h} ~* &* +@all -@write")
        );
        assert_eq!(
            reader.describe(),
            "user reader on nopass ~* resetchannels -@all +@read"
        );
        let u = Users::parse("user x off\nuser z on >p ~* resetchannels +@all\n").unwrap();
        let list: Vec<String> = u.iter().map(|u| u.describe()).collect();
        assert_eq!(list[0], "user default on nopass ~* &* +@all");
        assert_eq!(list[1], "user x off resetchannels -@all");
        assert!(list[2].ends_with(" ~* resetchannels +@all"), "{}", list[2]);
    }

    #[test]
    fn bad_lines_are_named() {
        for (text, line) in [
            ("user a on >x ~* +@all\nuser b on ~foo:* +@all\n", 2),
            ("usr a on\n", 1),
            ("user a on #abc ~* +@all\n", 1),
            ("user a on >x +@all\n", 1),
            ("user a on >x ~* +@all\nuser a off\n", 2),
            ("user a on >x ~* +get\n", 1),
        ] {
            let Err((n, why)) = Users::parse(text) else {
                panic!("accepted {text:?}");
            };
            assert_eq!(n, line, "{text:?}: {why}");
        }
    }

    #[test]
    fn requirepass_and_file_exclude_each_other() {
        let r = Users::load(Some("pw"), Some(Path::new("/nonexistent")));
        assert!(matches!(r, Err(AclError::RequirepassWithFile)));
    }
}
