//! Redis-style glob matching (`*`, `?`, `[a-z]`, `[^abc]`, `\x`), as `SCAN MATCH` and
//! `CONFIG GET` use it.
//!
//! Every token other than `*` matches exactly one byte, so a single backtracking point
//! (the last `*` seen) is enough: matching is `O(pattern * input)` and never recursive,
//! whatever the pattern.

/// One single-byte token of a pattern and the pattern position after it.
fn token_matches(pattern: &[u8], p: usize, c: u8) -> (bool, usize) {
    match pattern[p] {
        b'?' => (true, p + 1),
        b'\\' if p + 1 < pattern.len() => (pattern[p + 1] == c, p + 2),
        b'[' => class_matches(pattern, p + 1, c),
        other => (other == c, p + 1),
    }
}

/// Matches `c` against the class starting after `[` at `p`; returns the position after `]`.
fn class_matches(pattern: &[u8], mut p: usize, c: u8) -> (bool, usize) {
    let negate = pattern.get(p) == Some(&b'^');
    if negate {
        p += 1;
    }
    let mut hit = false;
    while p < pattern.len() && pattern[p] != b']' {
        if pattern[p] == b'\\' && p + 1 < pattern.len() {
            hit |= pattern[p + 1] == c;
            p += 2;
        } else if p + 2 < pattern.len() && pattern[p + 1] == b'-' && pattern[p + 2] != b']' {
            let (lo, hi) = if pattern[p] <= pattern[p + 2] {
                (pattern[p], pattern[p + 2])
            } else {
                (pattern[p + 2], pattern[p])
            };
            hit |= (lo..=hi).contains(&c);
            p += 3;
        } else {
            hit |= pattern[p] == c;
            p += 1;
        }
    }
    // An unterminated class ends at the end of the pattern, as in Redis.
    let next = if p < pattern.len() { p + 1 } else { p };
    (hit != negate, next)
}

/// Whether `input` matches the glob `pattern` (case-sensitive, binary-safe).
#[must_use]
pub fn glob_match(pattern: &[u8], input: &[u8]) -> bool {
    let (mut p, mut i) = (0usize, 0usize);
    // (pattern position after the star, input position the star currently ends at)
    let mut star: Option<(usize, usize)> = None;
    while i < input.len() {
        if p < pattern.len() && pattern[p] == b'*' {
            while p < pattern.len() && pattern[p] == b'*' {
                p += 1;
            }
            if p == pattern.len() {
                return true;
            }
            star = Some((p, i));
            continue;
        }
        if p < pattern.len() {
            let (ok, next) = token_matches(pattern, p, input[i]);
            if ok {
                p = next;
                i += 1;
                continue;
            }
        }
        match star {
            Some((sp, si)) => {
                p = sp;
                i = si + 1;
                star = Some((sp, si + 1));
            }
            None => return false,
        }
    }
    pattern[p..].iter().all(|&b| b == b'*')
}

#[cfg(test)]
mod tests {
    use super::glob_match;

    #[test]
    fn redis_examples() {
        assert!(glob_match(b"h?llo", b"hello"));
        assert!(glob_match(b"h*llo", b"heeeello"));
        assert!(glob_match(b"h*llo", b"hllo"));
        assert!(glob_match(b"h[ae]llo", b"hallo"));
        assert!(!glob_match(b"h[ae]llo", b"hillo"));
        assert!(glob_match(b"h[^e]llo", b"hallo"));
        assert!(!glob_match(b"h[^e]llo", b"hello"));
        assert!(glob_match(b"h[a-b]llo", b"hbllo"));
        assert!(glob_match(b"h[b-a]llo", b"hallo"));
        assert!(glob_match(b"h\\*llo", b"h*llo"));
        assert!(!glob_match(b"h\\*llo", b"hello"));
        assert!(glob_match(b"*", b""));
        assert!(glob_match(b"user:*:name", b"user:42:name"));
        assert!(!glob_match(b"user:*:name", b"user:42:mail"));
        assert!(glob_match(b"*a*b*c", b"xxaxxbxxbc"));
        assert!(!glob_match(b"abc", b"abcd"));
        assert!(!glob_match(b"", b"a"));
        assert!(glob_match(b"maxmemory*", b"maxmemory-policy"));
    }

    #[test]
    fn pathological_pattern_is_fast() {
        let input = vec![b'a'; 10_000];
        let pattern = b"*a*a*a*a*a*a*a*a*a*a*a*a*a*a*b";
        assert!(!glob_match(pattern, &input));
    }
}
