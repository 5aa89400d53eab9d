//! The command table: one [`CommandSpec`] per command the drive serves (arity, flags, key
//! positions, group, complexity, summary), behind `COMMAND INFO/DOCS/COUNT/LIST`, the arity
//! check before parsing, routing (`write` flag) and ACL categories; and [`lookup`] by name.

use bytes::Bytes;

use crate::reply::Reply;

/// One row of the command table (what `COMMAND INFO` and `COMMAND DOCS` report).
#[derive(Debug, Clone, Copy)]
pub struct CommandSpec {
    /// Lowercase name.
    pub name: &'static str,
    /// Redis arity: `n` exactly n arguments (name included), `-n` at least n.
    pub arity: i64,
    /// Redis command flags (`write`, `readonly`, `fast`, ...).
    pub flags: &'static [&'static str],
    /// Position of the first key (0: no keys).
    pub first_key: i64,
    /// Position of the last key (-1: the last argument).
    pub last_key: i64,
    /// Step between keys.
    pub step: i64,
    /// Command group (`string`, `hash`, `sorted-set`, ...).
    pub group: &'static str,
    /// Time complexity, as Redis documents it.
    pub complexity: &'static str,
    /// One-line summary.
    pub summary: &'static str,
}

impl CommandSpec {
    /// The `COMMAND INFO` entry (Redis 7 layout: name, arity, flags, first, last, step,
    /// ACL categories, tips, key specs, subcommands).
    #[must_use]
    pub fn info_reply(&self) -> Reply {
        let s = |t: &'static str| Reply::Simple(Bytes::from_static(t.as_bytes()));
        Reply::Array(vec![
            Reply::Bulk(Bytes::from_static(self.name.as_bytes())),
            Reply::Integer(self.arity),
            Reply::Set(self.flags.iter().map(|f| s(f)).collect()),
            Reply::Integer(self.first_key),
            Reply::Integer(self.last_key),
            Reply::Integer(self.step),
            Reply::Set(Vec::new()),
            Reply::Set(Vec::new()),
            Reply::Array(Vec::new()),
            Reply::Array(Vec::new()),
        ])
    }

    /// The `COMMAND DOCS` entry: summary, since, group and complexity.
    #[must_use]
    pub fn docs_reply(&self) -> Reply {
        let b = |t: &'static str| Reply::Bulk(Bytes::from_static(t.as_bytes()));
        Reply::Map(vec![
            (b("summary"), b(self.summary)),
            (b("since"), b("1.0.0")),
            (b("group"), b(self.group)),
            (b("complexity"), b(self.complexity)),
        ])
    }
}

macro_rules! spec {
    ($name:literal, $arity:expr, [$($flag:literal),*], $first:expr, $last:expr, $step:expr,
     $group:literal, $cx:literal, $summary:literal) => {
        CommandSpec {
            name: $name,
            arity: $arity,
            flags: &[$($flag),*],
            first_key: $first,
            last_key: $last,
            step: $step,
            group: $group,
            complexity: $cx,
            summary: $summary,
        }
    };
}

/// Every command the drive serves: name, arity, flags, first key, last key, step, group,
/// complexity, summary (one row per line, as a table reads).
#[rustfmt::skip]
pub const COMMANDS: &[CommandSpec] = &[
    spec!("ping", -1, ["fast", "stale"], 0, 0, 0, "connection", "O(1)", "Returns the server's liveliness response."),
    spec!("echo", 2, ["fast"], 0, 0, 0, "connection", "O(1)", "Returns the given string."),
    spec!("hello", -1, ["noscript", "loading", "stale", "fast", "no_auth"], 0, 0, 0, "connection", "O(1)", "Handshakes with the drive."),
    spec!("auth", -2, ["noscript", "loading", "stale", "fast", "no_auth"], 0, 0, 0, "connection", "O(N)", "Authenticates the connection."),
    spec!("select", 2, ["loading", "stale", "fast"], 0, 0, 0, "connection", "O(1)", "Changes the selected database (only 0 exists)."),
    spec!("quit", -1, ["noscript", "loading", "stale", "fast", "no_auth"], 0, 0, 0, "connection", "O(1)", "Closes the connection."),
    spec!("get", 2, ["readonly", "fast"], 1, 1, 1, "string", "O(1)", "Returns the string value of a key."),
    spec!("set", -3, ["write", "denyoom"], 1, 1, 1, "string", "O(1)", "Sets the string value of a key, with optional expiry and conditions."),
    spec!("mget", -2, ["readonly", "fast"], 1, -1, 1, "string", "O(N)", "Returns the string values of one or more keys."),
    spec!("mset", -3, ["write", "denyoom"], 1, -1, 2, "string", "O(N)", "Sets the string values of one or more keys."),
    spec!("del", -2, ["write"], 1, -1, 1, "generic", "O(N)", "Deletes one or more keys."),
    spec!("exists", -2, ["readonly", "fast"], 1, -1, 1, "generic", "O(N)", "Counts how many of the given keys exist."),
    spec!("strlen", 2, ["readonly", "fast"], 1, 1, 1, "string", "O(1)", "Returns the length of a string value."),
    spec!("getrange", 4, ["readonly"], 1, 1, 1, "string", "O(N)", "Returns a substring of a string value."),
    spec!("object", -2, ["readonly"], 0, 0, 0, "generic", "O(1)", "OBJECT ENCODING, FREQ, IDLETIME, REFCOUNT and HELP."),
    spec!("lcs", -3, ["readonly"], 1, 2, 1, "string", "O(N*M) where N and M are the lengths of s1 and s2, respectively", "Finds the longest common substring."),
    spec!("incr", 2, ["write", "denyoom", "fast"], 1, 1, 1, "string", "O(1)", "Increments the integer value of a key by one."),
    spec!("decr", 2, ["write", "denyoom", "fast"], 1, 1, 1, "string", "O(1)", "Decrements the integer value of a key by one."),
    spec!("incrby", 3, ["write", "denyoom", "fast"], 1, 1, 1, "string", "O(1)", "Increments the integer value of a key by a number."),
    spec!("decrby", 3, ["write", "denyoom", "fast"], 1, 1, 1, "string", "O(1)", "Decrements the integer value of a key by a number."),
    spec!("scan", -2, ["readonly"], 0, 0, 0, "generic", "O(1) per call", "Iterates over the key names."),
    spec!("dbsize", 1, ["readonly", "fast"], 0, 0, 0, "server", "O(N)", "Returns the number of keys."),
    spec!("randomkey", 1, ["readonly"], 0, 0, 0, "generic", "O(1)", "Returns a random key name from the database."),
    spec!("flushall", -1, ["write"], 0, 0, 0, "server", "O(N)", "Removes all keys."),
    spec!("info", -1, ["loading", "stale"], 0, 0, 0, "server", "O(1)", "Returns information and statistics about the drive."),
    spec!("config", -2, [], 0, 0, 0, "server", "O(N)", "CONFIG GET, CONFIG SET and CONFIG RESETSTAT."),
    spec!("command", -1, ["loading", "stale"], 0, 0, 0, "server", "O(N)", "Returns information about the commands."),
    spec!("acl", -2, [], 0, 0, 0, "server", "O(N)", "ACL WHOAMI, USERS and LIST."),
    spec!("client", -2, [], 0, 0, 0, "connection", "O(1)", "CLIENT SETNAME, GETNAME, SETINFO, ID, INFO, LIST, KILL, NO-EVICT, NO-TOUCH, PAUSE, UNPAUSE and UNBLOCK."),
    spec!("subscribe", -2, ["pubsub", "noscript", "loading", "stale"], 0, 0, 0, "pubsub", "O(N) where N is the number of channels to subscribe to.", "Listens for messages published to channels."),
    spec!("unsubscribe", -1, ["pubsub", "noscript", "loading", "stale"], 0, 0, 0, "pubsub", "O(N) where N is the number of channels to unsubscribe.", "Stops listening to messages posted to channels."),
    spec!("psubscribe", -2, ["pubsub", "noscript", "loading", "stale"], 0, 0, 0, "pubsub", "O(N) where N is the number of patterns to subscribe to.", "Listens for messages published to channels that match one or more patterns."),
    spec!("punsubscribe", -1, ["pubsub", "noscript", "loading", "stale"], 0, 0, 0, "pubsub", "O(N) where N is the number of patterns to unsubscribe.", "Stops listening to messages published to channels that match one or more patterns."),
    spec!("publish", 3, ["pubsub", "loading", "stale", "fast"], 0, 0, 0, "pubsub", "O(N+M) where N is the number of clients subscribed to the receiving channel and M is the total number of subscribed patterns (by any client).", "Posts a message to a channel (the clients of this drive only, also in cluster mode)."),
    spec!("pubsub", -2, [], 0, 0, 0, "pubsub", "O(N)", "PUBSUB CHANNELS, NUMSUB and NUMPAT."),
    spec!("reset", 1, ["noscript", "loading", "stale", "fast", "no_auth", "allow_busy"], 0, 0, 0, "connection", "O(1)", "Resets the connection."),
    spec!("slowlog", -2, [], 0, 0, 0, "server", "O(N)", "SLOWLOG GET, LEN and RESET."),
    spec!("latency", -2, [], 0, 0, 0, "server", "O(1)", "LATENCY LATEST, HISTORY and RESET (events of latency-monitor-threshold)."),
    spec!("shutdown", -1, ["admin", "noscript", "loading", "stale"], 0, 0, 0, "server", "O(N)", "Flushes the engine and stops the drive."),
    spec!("hset", -4, ["write", "denyoom", "fast"], 1, 1, 1, "hash", "O(N)", "Sets fields of a hash."),
    spec!("hmset", -4, ["write", "denyoom", "fast"], 1, 1, 1, "hash", "O(N)", "Sets fields of a hash."),
    spec!("hget", 3, ["readonly", "fast"], 1, 1, 1, "hash", "O(1)", "Returns the value of a field in a hash."),
    spec!("hmget", -3, ["readonly", "fast"], 1, 1, 1, "hash", "O(N)", "Returns the values of fields in a hash."),
    spec!("hgetall", 2, ["readonly"], 1, 1, 1, "hash", "O(N)", "Returns all fields and values of a hash."),
    spec!("hdel", -3, ["write", "fast"], 1, 1, 1, "hash", "O(N)", "Deletes fields from a hash."),
    spec!("hlen", 2, ["readonly", "fast"], 1, 1, 1, "hash", "O(N)", "Returns the number of fields in a hash."),
    spec!("hexists", 3, ["readonly", "fast"], 1, 1, 1, "hash", "O(1)", "Whether a field exists in a hash."),
    spec!("zadd", -4, ["write", "denyoom", "fast"], 1, 1, 1, "sorted-set", "O(log(N))", "Adds members to a sorted set or updates their scores."),
    spec!("zrem", -3, ["write", "fast"], 1, 1, 1, "sorted-set", "O(M*log(N))", "Removes members from a sorted set."),
    spec!("zscore", 3, ["readonly", "fast"], 1, 1, 1, "sorted-set", "O(1)", "Returns the score of a member."),
    spec!("zcard", 2, ["readonly", "fast"], 1, 1, 1, "sorted-set", "O(N)", "Returns the number of members."),
    spec!("zrangebyscore", -4, ["readonly"], 1, 1, 1, "sorted-set", "O(log(N)+M)", "Returns members in a score range."),
    // Collection commands (command/types.rs).
    spec!("sadd", -3, ["write", "denyoom", "fast"], 1, 1, 1, "set", "O(1) per member", "Adds members to a set."),
    spec!("srem", -3, ["write", "fast"], 1, 1, 1, "set", "O(N)", "Removes members from a set."),
    spec!("smembers", 2, ["readonly"], 1, 1, 1, "set", "O(N)", "Returns every member of a set."),
    spec!("sismember", 3, ["readonly", "fast"], 1, 1, 1, "set", "O(1)", "Whether a member is in a set."),
    spec!("smismember", -3, ["readonly", "fast"], 1, 1, 1, "set", "O(N)", "Whether each member is in a set."),
    spec!("scard", 2, ["readonly", "fast"], 1, 1, 1, "set", "O(1)", "Returns the number of members of a set."),
    spec!("spop", -2, ["write", "fast"], 1, 1, 1, "set", "O(N)", "Removes and returns random members."),
    spec!("srandmember", -2, ["readonly"], 1, 1, 1, "set", "O(N)", "Returns random members."),
    spec!("sinter", -2, ["readonly"], 1, -1, 1, "set", "O(N*M)", "Intersects sets."),
    spec!("sunion", -2, ["readonly"], 1, -1, 1, "set", "O(N)", "Unites sets."),
    spec!("sdiff", -2, ["readonly"], 1, -1, 1, "set", "O(N)", "Subtracts sets."),
    spec!("sinterstore", -3, ["write", "denyoom"], 1, -1, 1, "set", "O(N*M)", "Stores the intersection of sets."),
    spec!("sunionstore", -3, ["write", "denyoom"], 1, -1, 1, "set", "O(N)", "Stores the union of sets."),
    spec!("sdiffstore", -3, ["write", "denyoom"], 1, -1, 1, "set", "O(N)", "Stores the difference of sets."),
    spec!("sintercard", -3, ["readonly", "movablekeys"], 0, 0, 0, "set", "O(N*M)", "Counts the intersection of sets."),
    spec!("smove", 4, ["write", "fast"], 1, 2, 1, "set", "O(1)", "Moves a member between sets."),
    spec!("sscan", -3, ["readonly"], 1, 1, 1, "set", "O(1) per call", "Iterates the members of a set."),
    spec!("hincrby", 4, ["write", "denyoom", "fast"], 1, 1, 1, "hash", "O(1)", "Increments a field by an integer."),
    spec!("hincrbyfloat", 4, ["write", "denyoom", "fast"], 1, 1, 1, "hash", "O(1)", "Increments a field by a float."),
    spec!("hkeys", 2, ["readonly"], 1, 1, 1, "hash", "O(N)", "Returns every field of a hash."),
    spec!("hvals", 2, ["readonly"], 1, 1, 1, "hash", "O(N)", "Returns every value of a hash."),
    spec!("hsetnx", 4, ["write", "denyoom", "fast"], 1, 1, 1, "hash", "O(1)", "Sets a field only if it does not exist."),
    spec!("hstrlen", 3, ["readonly", "fast"], 1, 1, 1, "hash", "O(1)", "Returns the length of a field's value."),
    spec!("hrandfield", -2, ["readonly"], 1, 1, 1, "hash", "O(N)", "Returns random fields."),
    spec!("hscan", -3, ["readonly"], 1, 1, 1, "hash", "O(1) per call", "Iterates the fields of a hash."),
    spec!("zrange", -4, ["readonly"], 1, 1, 1, "sorted-set", "O(log(N)+M)", "Returns members in a range of ranks, scores or names."),
    spec!("zrevrange", -4, ["readonly"], 1, 1, 1, "sorted-set", "O(log(N)+M)", "Returns members in a range of ranks, highest first."),
    spec!("zrevrangebyscore", -4, ["readonly"], 1, 1, 1, "sorted-set", "O(log(N)+M)", "Returns members in a score range, highest first."),
    spec!("zrangebylex", -4, ["readonly"], 1, 1, 1, "sorted-set", "O(log(N)+M)", "Returns members in a name range."),
    spec!("zrevrangebylex", -4, ["readonly"], 1, 1, 1, "sorted-set", "O(log(N)+M)", "Returns members in a name range, highest first."),
    spec!("zrank", -3, ["readonly", "fast"], 1, 1, 1, "sorted-set", "O(log(N))", "Returns a member's rank."),
    spec!("zrevrank", -3, ["readonly", "fast"], 1, 1, 1, "sorted-set", "O(log(N))", "Returns a member's rank, highest first."),
    spec!("zmscore", -3, ["readonly", "fast"], 1, 1, 1, "sorted-set", "O(N)", "Returns the scores of members."),
    spec!("zincrby", 4, ["write", "denyoom", "fast"], 1, 1, 1, "sorted-set", "O(log(N))", "Increments a member's score."),
    spec!("zcount", 4, ["readonly", "fast"], 1, 1, 1, "sorted-set", "O(log(N))", "Counts members in a score range."),
    spec!("zlexcount", 4, ["readonly", "fast"], 1, 1, 1, "sorted-set", "O(log(N))", "Counts members in a name range."),
    spec!("zpopmin", -2, ["write", "fast"], 1, 1, 1, "sorted-set", "O(log(N)*M)", "Removes and returns the lowest-scored members."),
    spec!("zpopmax", -2, ["write", "fast"], 1, 1, 1, "sorted-set", "O(log(N)*M)", "Removes and returns the highest-scored members."),
    spec!("bzpopmin", -3, ["write", "blocking", "fast"], 1, -2, 1, "sorted-set", "O(log(N)) with N being the number of elements in the sorted set.", "Removes and returns the lowest-scored member of the first non-empty sorted set, or blocks until one is available."),
    spec!("bzpopmax", -3, ["write", "blocking", "fast"], 1, -2, 1, "sorted-set", "O(log(N)) with N being the number of elements in the sorted set.", "Removes and returns the highest-scored member of the first non-empty sorted set, or blocks until one is available."),
    spec!("zmpop", -4, ["write", "movablekeys"], 0, 0, 0, "sorted-set", "O(K) + O(M*log(N)) where K is the number of provided keys, N being the number of elements in the sorted set, and M being the number of elements popped.", "Returns the highest- or lowest-scoring members from one or more sorted sets after removing them."),
    spec!("bzmpop", -5, ["write", "blocking", "movablekeys"], 0, 0, 0, "sorted-set", "O(K) + O(M*log(N)) where K is the number of provided keys, N being the number of elements in the sorted set, and M being the number of elements popped.", "Removes and returns a member by score from one or more sorted sets, or blocks until one is available."),
    spec!("zremrangebyscore", 4, ["write"], 1, 1, 1, "sorted-set", "O(log(N)+M)", "Removes members in a score range."),
    spec!("zremrangebyrank", 4, ["write"], 1, 1, 1, "sorted-set", "O(log(N)+M)", "Removes members in a range of ranks."),
    spec!("zremrangebylex", 4, ["write"], 1, 1, 1, "sorted-set", "O(log(N)+M)", "Removes members in a name range."),
    spec!("zscan", -3, ["readonly"], 1, 1, 1, "sorted-set", "O(1) per call", "Iterates the members and scores of a sorted set."),
    spec!("lpush", -3, ["write", "denyoom", "fast"], 1, 1, 1, "list", "O(1) per item", "Prepends items to a list."),
    spec!("rpush", -3, ["write", "denyoom", "fast"], 1, 1, 1, "list", "O(1) per item", "Appends items to a list."),
    spec!("lpushx", -3, ["write", "denyoom", "fast"], 1, 1, 1, "list", "O(1) per item", "Prepends items to an existing list."),
    spec!("rpushx", -3, ["write", "denyoom", "fast"], 1, 1, 1, "list", "O(1) per item", "Appends items to an existing list."),
    spec!("lpop", -2, ["write", "fast"], 1, 1, 1, "list", "O(N)", "Removes and returns items from the head."),
    spec!("rpop", -2, ["write", "fast"], 1, 1, 1, "list", "O(N)", "Removes and returns items from the tail."),
    spec!("lrange", 4, ["readonly"], 1, 1, 1, "list", "O(S+N)", "Returns a range of items."),
    spec!("llen", 2, ["readonly", "fast"], 1, 1, 1, "list", "O(1)", "Returns the length of a list."),
    spec!("lindex", 3, ["readonly"], 1, 1, 1, "list", "O(1)", "Returns the item at an index."),
    spec!("lset", 4, ["write", "denyoom"], 1, 1, 1, "list", "O(1)", "Sets the item at an index."),
    spec!("lrem", 4, ["write"], 1, 1, 1, "list", "O(N)", "Removes items equal to a value."),
    spec!("ltrim", 4, ["write"], 1, 1, 1, "list", "O(N)", "Keeps only a range of items."),
    spec!("linsert", 5, ["write", "denyoom"], 1, 1, 1, "list", "O(N)", "Inserts an item before or after another."),
    spec!("lmove", 5, ["write", "denyoom"], 1, 2, 1, "list", "O(1)", "Moves an item between lists."),
    spec!("rpoplpush", 3, ["write", "denyoom"], 1, 2, 1, "list", "O(1)", "Moves the tail item of a list to the head of another."),
    spec!("blpop", -3, ["write", "blocking"], 1, -2, 1, "list", "O(N) where N is the number of keys", "Removes and returns the first item of the first non-empty list, or blocks until one is available."),
    spec!("brpop", -3, ["write", "blocking"], 1, -2, 1, "list", "O(N) where N is the number of keys", "Removes and returns the last item of the first non-empty list, or blocks until one is available."),
    spec!("lmpop", -4, ["write", "movablekeys"], 0, 0, 0, "list", "O(N+M) where N is the number of provided keys and M is the number of elements returned.", "Returns multiple elements from a list after removing them."),
    spec!("blmpop", -5, ["write", "blocking", "movablekeys"], 0, 0, 0, "list", "O(N+M) where N is the number of provided keys and M is the number of elements returned.", "Pops the first element from one of multiple lists, or blocks until one is available."),
    spec!("blmove", 6, ["write", "denyoom", "blocking"], 1, 2, 1, "list", "O(1)", "Moves an item between lists, or blocks until one is available."),
    spec!("brpoplpush", 4, ["write", "denyoom", "blocking"], 1, 2, 1, "list", "O(1)", "Moves the tail item of a list to the head of another, or blocks until one is available."),
    spec!("lpos", -3, ["readonly"], 1, 1, 1, "list", "O(N)", "Returns the indexes of items equal to a value."),
    spec!("cluster", -2, [], 0, 0, 0, "cluster", "O(1)", "Cluster commands."),
    spec!("readonly", 1, ["loading", "stale", "fast"], 0, 0, 0, "cluster", "O(1)", "Enables read-only queries on a replica connection."),
    spec!("readwrite", 1, ["loading", "stale", "fast"], 0, 0, 0, "cluster", "O(1)", "Disables read-only queries."),
    spec!("ls.range", -3, ["readonly"], 1, 1, 1, "generic", "O(log(N) + M) with M the pairs returned", "LightStore: returns up to COUNT string keys and values in [start, end), in key order."),
    spec!("multi", 1, ["noscript", "loading", "stale", "fast", "allow_busy"], 0, 0, 0, "transactions", "O(1)", "Starts a transaction."),
    spec!("exec", 1, ["noscript", "loading", "stale", "skip_slowlog"], 0, 0, 0, "transactions", "O(N)", "Executes the queued commands as one atomic batch."),
    spec!("discard", 1, ["noscript", "loading", "stale", "fast", "allow_busy"], 0, 0, 0, "transactions", "O(N)", "Discards the queued commands."),
    spec!("watch", -2, ["noscript", "loading", "stale", "fast", "allow_busy"], 1, -1, 1, "transactions", "O(1) per key", "Monitors keys: EXEC aborts if another write changes them."),
    spec!("unwatch", 1, ["noscript", "loading", "stale", "fast", "allow_busy"], 0, 0, 0, "transactions", "O(N)", "Forgets the watched keys."),
    spec!("expire", -3, ["write", "fast"], 1, 1, 1, "generic", "O(1)", "Sets a key's time to live in seconds."),
    spec!("pexpire", -3, ["write", "fast"], 1, 1, 1, "generic", "O(1)", "Sets a key's time to live in milliseconds."),
    spec!("expireat", -3, ["write", "fast"], 1, 1, 1, "generic", "O(1)", "Sets a key's deadline as a unix time in seconds."),
    spec!("pexpireat", -3, ["write", "fast"], 1, 1, 1, "generic", "O(1)", "Sets a key's deadline as a unix time in milliseconds."),
    spec!("ttl", 2, ["readonly", "fast"], 1, 1, 1, "generic", "O(1)", "Returns a key's time to live in seconds."),
    spec!("pttl", 2, ["readonly", "fast"], 1, 1, 1, "generic", "O(1)", "Returns a key's time to live in milliseconds."),
    spec!("expiretime", 2, ["readonly", "fast"], 1, 1, 1, "generic", "O(1)", "Returns a key's deadline as a unix time in seconds."),
    spec!("pexpiretime", 2, ["readonly", "fast"], 1, 1, 1, "generic", "O(1)", "Returns a key's deadline as a unix time in milliseconds."),
    spec!("persist", 2, ["write", "fast"], 1, 1, 1, "generic", "O(1)", "Removes a key's deadline."),
    spec!("getex", -2, ["write", "fast"], 1, 1, 1, "string", "O(1)", "Returns a string value and changes its deadline."),
    spec!("setex", 4, ["write", "denyoom"], 1, 1, 1, "string", "O(1)", "Sets a string value with a time to live in seconds."),
    spec!("psetex", 4, ["write", "denyoom"], 1, 1, 1, "string", "O(1)", "Sets a string value with a time to live in milliseconds."),
    spec!("setnx", 3, ["write", "denyoom", "fast"], 1, 1, 1, "string", "O(1)", "Sets a string value only if the key does not exist."),
    spec!("getset", 3, ["write", "denyoom", "fast"], 1, 1, 1, "string", "O(1)", "Sets a string value and returns the old one."),
    spec!("getdel", 2, ["write", "fast"], 1, 1, 1, "string", "O(1)", "Returns a string value and deletes the key."),
    spec!("append", 3, ["write", "denyoom", "fast"], 1, 1, 1, "string", "O(1)", "Appends to a string value."),
    spec!("setrange", 4, ["write", "denyoom"], 1, 1, 1, "string", "O(1), not counting the time taken to copy the new string in place.", "Overwrites a part of a string value with another by an offset. Creates the key if it doesn't exist."),
    spec!("msetnx", -3, ["write", "denyoom"], 1, -1, 2, "string", "O(N) where N is the number of keys to set.", "Atomically modifies the string values of one or more keys only when all keys don't exist."),
    spec!("incrbyfloat", 3, ["write", "denyoom", "fast"], 1, 1, 1, "string", "O(1)", "Increment the floating point value of a key by a number. Uses 0 as initial value if the key doesn't exist."),
    spec!("copy", -3, ["write", "denyoom"], 1, 2, 1, "generic", "O(N) worst case for collections, where N is the number of nested items. O(1) for string values.", "Copies the value of a key to a new key."),
    spec!("dump", 2, ["readonly"], 1, 1, 1, "generic", "O(1) to access the key and additional O(N*M) to serialize it, where N is the number of Redis objects composing the value and M their average size. For small string values the time complexity is thus O(1)+O(1*M) where M is small, so simply O(1).", "Returns a serialized representation of the value stored at a key."),
    spec!("restore", -4, ["write", "denyoom"], 1, 1, 1, "generic", "O(1) to create the new key and additional O(N*M) to reconstruct the serialized value, where N is the number of Redis objects composing the value and M their average size. For small string values the time complexity is thus O(1)+O(1*M) where M is small, so simply O(1). However for sorted set values the complexity is O(N*M*log(N)) because inserting values into sorted sets is O(log(N)).", "Creates a key from the serialized representation of a value."),
    spec!("restore-asking", -4, ["write", "denyoom", "asking"], 1, 1, 1, "server", "O(1) to create the new key and additional O(N*M) to reconstruct the serialized value, where N is the number of Redis objects composing the value and M their average size. For small string values the time complexity is thus O(1)+O(1*M) where M is small, so simply O(1). However for sorted set values the complexity is O(N*M*log(N)) because inserting values into sorted sets is O(log(N)).", "An internal command for migrating keys in a cluster."),
    spec!("migrate", -6, ["write", "movablekeys"], 3, 3, 1, "generic", "This command actually executes a DUMP+DEL in the source instance, and a RESTORE in the target instance. See the pages of these commands for time complexity. Also an O(N) data transfer between the two instances is performed.", "Atomically transfers a key from one Redis instance to another."),
    spec!("asking", 1, ["fast"], 0, 0, 0, "cluster", "O(1)", "Signals that a cluster client is following an -ASK redirect."),
    spec!("type", 2, ["readonly", "fast"], 1, 1, 1, "generic", "O(1)", "Returns the type of a key."),
    spec!("unlink", -2, ["write", "fast"], 1, -1, 1, "generic", "O(N)", "Deletes keys (as DEL)."),
    spec!("touch", -2, ["readonly", "fast"], 1, -1, 1, "generic", "O(N)", "Counts how many of the given keys exist."),
    spec!("flushdb", -1, ["write"], 0, 0, 0, "server", "O(N)", "Removes all keys (the drive has one database)."),
    spec!("rename", 3, ["write"], 1, 2, 1, "generic", "O(N) in the key's records", "Renames a key."),
    spec!("renamenx", 3, ["write", "fast"], 1, 2, 1, "generic", "O(N) in the key's records", "Renames a key only if the new name does not exist."),
    spec!("keys", 2, ["readonly"], 0, 0, 0, "generic", "O(N)", "Returns the keys matching a pattern."),
];

/// The table row for `name` (any case).
#[must_use]
pub fn lookup(name: &[u8]) -> Option<&'static CommandSpec> {
    COMMANDS
        .iter()
        .find(|s| s.name.len() == name.len() && s.name.as_bytes().eq_ignore_ascii_case(name))
}
