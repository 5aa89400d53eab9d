//! Who may connect: protected mode and the client limit, answered at accept.

use std::net::SocketAddr;

/// Redis's reply to a non-loopback client in protected mode.
pub const PROTECTED_MODE_ERROR: &str = "-DENIED Redis is running in protected mode because protected mode is enabled and no password is set for the default user. In this mode connections are only accepted from the loopback interface. If you want to connect from external computers to Redis you may adopt one of the following solutions: 1) Just disable protected mode sending the command 'CONFIG SET protected-mode no' from the loopback interface by connecting to Redis from the same host the server is running, however MAKE SURE Redis is not publicly accessible from internet if you do so. Use CONFIG REWRITE to make this change permanent. 2) Alternatively you can just disable the protected mode by editing the Redis configuration file, and setting the protected mode option to 'no', and then restarting the server. 3) If you started the server manually just for testing, restart it with the '--protected-mode no' option. 4) Set up an authentication password for the default user. NOTE: You only need to do one of the above things in order for the server to start accepting connections from the outside.\r\n";
/// Redis's reply when maxclients is reached.
pub const MAX_CLIENTS_ERROR: &str = "-ERR max number of clients reached\r\n";

/// Whether protected mode turns `peer` away.
pub fn protected_refuses(protected_mode: bool, has_password: bool, peer: &SocketAddr) -> bool {
    protected_mode && !has_password && !peer.ip().is_loopback() && !is_mapped_loopback(peer)
}

fn is_mapped_loopback(peer: &SocketAddr) -> bool {
    match peer {
        SocketAddr::V6(a) => a.ip().to_ipv4_mapped().is_some_and(|v4| v4.is_loopback()),
        SocketAddr::V4(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protected_mode_refuses_only_remote_clients_without_a_password() {
        let remote: SocketAddr = "10.0.0.5:5000".parse().unwrap_or_else(|_| unreachable!());
        let local: SocketAddr = "127.0.0.1:5000".parse().unwrap_or_else(|_| unreachable!());
        let local6: SocketAddr = "[::1]:5000".parse().unwrap_or_else(|_| unreachable!());
        let mapped: SocketAddr = "[::ffff:127.0.0.1]:5000"
            .parse()
            .unwrap_or_else(|_| unreachable!());
        assert!(protected_refuses(true, false, &remote));
        assert!(!protected_refuses(true, true, &remote));
        assert!(!protected_refuses(false, false, &remote));
        assert!(!protected_refuses(true, false, &local));
        assert!(!protected_refuses(true, false, &local6));
        assert!(!protected_refuses(true, false, &mapped));
    }
}
