//! An in-memory redis-server for differential tests.

use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// An in-memory redis-server (no snapshots, no AOF) with extra flags on a free loopback
/// port; killed on drop.
pub struct RedisServer {
    /// The process.
    pub child: Child,
    /// Its port on 127.0.0.1.
    pub port: u16,
}

impl RedisServer {
    /// Starts it in `dir` and waits until it accepts clients.
    ///
    /// The port comes from binding port 0 and closing the socket, so another process on this
    /// machine (a drive or a redis-server of a test running in parallel) can take it before
    /// redis-server binds it. The server that answers on the port must therefore prove it is
    /// this child (it holds the listening socket); otherwise the child is killed and another
    /// port is tried. Without the check a differential test can compare the drive with another
    /// test's redis-server.
    pub fn start(dir: &Path, extra: &[&str]) -> RedisServer {
        for _ in 0..START_ATTEMPTS {
            if let Some(server) = Self::start_once(dir, extra) {
                return server;
            }
        }
        panic!("redis-server did not start on a port of its own in {START_ATTEMPTS} attempts");
    }

    fn start_once(dir: &Path, extra: &[&str]) -> Option<RedisServer> {
        let port = crate::pki::free_port();
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(dir)
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server must be installed (cargo xtask test installs it)");
        let mut server = RedisServer { child, port };
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if matches!(server.child.try_wait(), Ok(Some(_))) {
                // It exited: most likely the port was taken first.
                return None;
            }
            if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                // Dropping `server` kills the child when another process answers.
                return listens_on(server.child.id(), port).then_some(server);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("redis-server did not start");
    }

    /// A raw socket to it (10 s read timeout).
    pub fn raw(&self) -> TcpStream {
        let s = TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s
    }

    /// A redis-rs connection to it.
    pub fn conn(&self) -> redis::Connection {
        redis::Client::open(format!("redis://127.0.0.1:{}/", self.port))
            .unwrap()
            .get_connection()
            .unwrap()
    }
}

/// How many ports [`RedisServer::start`] tries before it gives up.
const START_ATTEMPTS: usize = 5;

/// Whether process `pid` holds the socket listening on 127.0.0.1:`port`: the listening
/// socket's inode from `/proc/net/tcp` is among the process's open files. This works whether
/// or not the server asks for a password, where `INFO server`'s `process_id` would not.
fn listens_on(pid: u32, port: u16) -> bool {
    let Ok(table) = std::fs::read_to_string("/proc/net/tcp") else {
        return false;
    };
    let wanted = format!("0100007F:{port:04X}");
    let inodes: Vec<String> = table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            // local_address, state (0A is LISTEN), inode
            (fields.len() > 9 && fields[1] == wanted && fields[3] == "0A")
                .then(|| format!("socket:[{}]", fields[9]))
        })
        .collect();
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.flatten().any(|fd| {
        std::fs::read_link(fd.path())
            .is_ok_and(|target| inodes.iter().any(|i| target.as_os_str() == i.as_str()))
    })
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::listens_on;

    #[test]
    fn a_listening_socket_is_found_in_its_own_process_only() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        assert!(listens_on(std::process::id(), port));
        // PID 1 (init, or the container's first process) does not hold this test's socket.
        assert!(!listens_on(1, port));
        drop(listener);
        assert!(!listens_on(std::process::id(), port));
    }
}
