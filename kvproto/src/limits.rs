//! Request size limits, enforced by the framer while it reads headers.

/// Largest bulk argument accepted, as Redis's `proto-max-bulk-len` default (512 MiB).
pub const DEFAULT_MAX_BULK_LEN: usize = 512 << 20;
/// Most arguments in one request (Redis accepts up to 1024*1024 before 7.0's lazy growth).
pub const DEFAULT_MAX_ARGS: usize = 1024 * 1024;
/// Longest inline command or header line (Redis's `PROTO_INLINE_MAX_SIZE`, 64 KiB).
pub const DEFAULT_MAX_INLINE_LEN: usize = 64 << 10;

/// Most arguments in one request from a client that has not authenticated while a password
/// is set (Redis 7.2: more are `Protocol error: unauthenticated multibulk length`).
pub const UNAUTHENTICATED_MAX_ARGS: usize = 10;
/// Largest bulk argument from a client that has not authenticated while a password is set
/// (Redis 7.2: larger is `Protocol error: unauthenticated bulk length`).
pub const UNAUTHENTICATED_MAX_BULK_LEN: usize = 16_384;

/// Limits a [`crate::RequestParser`] enforces before it buffers a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest accepted bulk argument in bytes.
    pub max_bulk_len: usize,
    /// Most arguments in one multibulk request.
    pub max_args: usize,
    /// Longest inline request (and longest `*` / `$` header line) in bytes.
    pub max_inline_len: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_bulk_len: DEFAULT_MAX_BULK_LEN,
            max_args: DEFAULT_MAX_ARGS,
            max_inline_len: DEFAULT_MAX_INLINE_LEN,
        }
    }
}
