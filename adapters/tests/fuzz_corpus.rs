//! The NBD fuzz seed corpus on the stable toolchain: every seed in `fuzz/corpus/nbd` goes
//! through the checks the fuzz target runs (`fuzz/checks/nbd.rs`), so `cargo test`
//! exercises the handshake and request-header properties and every regression seed. The
//! ignored test `write_seed_corpus` (re)writes the generated seeds:
//! `cargo test -p adapters --test fuzz_corpus -- --ignored write_seed_corpus`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "../../fuzz/checks/nbd.rs"]
mod nbd_checks;
#[path = "../../fuzz/checks/replay.rs"]
mod replay;

use std::path::PathBuf;

use adapters::nbd::proto::{self, Request};

/// `fuzz/corpus/nbd`.
fn corpus_dir() -> PathBuf {
    replay::corpus_dir(env!("CARGO_MANIFEST_DIR"), "nbd")
}

#[test]
fn nbd_seeds() {
    replay::replay(env!("CARGO_MANIFEST_DIR"), "nbd", nbd_checks::check_nbd);
}

/// The client's flags word (fixed newstyle, and no zeroes when `no_zeroes`).
fn client_flags(no_zeroes: bool) -> Vec<u8> {
    let mut f = proto::FLAG_C_FIXED_NEWSTYLE;
    if no_zeroes {
        f |= proto::FLAG_C_NO_ZEROES;
    }
    f.to_be_bytes().to_vec()
}

/// One option as the client sends it: `IHAVEOPT`, option, length, data.
fn option(opt: u32, data: &[u8]) -> Vec<u8> {
    let mut b = proto::IHAVEOPT.to_be_bytes().to_vec();
    b.extend_from_slice(&opt.to_be_bytes());
    b.extend_from_slice(&u32::try_from(data.len()).unwrap().to_be_bytes());
    b.extend_from_slice(data);
    b
}

/// `NBD_OPT_INFO` / `NBD_OPT_GO` data.
fn info_data(name: &str, items: &[u16]) -> Vec<u8> {
    let mut b = u32::try_from(name.len()).unwrap().to_be_bytes().to_vec();
    b.extend_from_slice(name.as_bytes());
    b.extend_from_slice(&u16::try_from(items.len()).unwrap().to_be_bytes());
    for i in items {
        b.extend_from_slice(&i.to_be_bytes());
    }
    b
}

/// `NBD_OPT_LIST_META_CONTEXT` / `NBD_OPT_SET_META_CONTEXT` data.
fn meta_data(export: &str, queries: &[&str]) -> Vec<u8> {
    let mut b = u32::try_from(export.len()).unwrap().to_be_bytes().to_vec();
    b.extend_from_slice(export.as_bytes());
    b.extend_from_slice(&u32::try_from(queries.len()).unwrap().to_be_bytes());
    for q in queries {
        b.extend_from_slice(&u32::try_from(q.len()).unwrap().to_be_bytes());
        b.extend_from_slice(q.as_bytes());
    }
    b
}

/// A transmission request header.
fn request(kind: u16, flags: u16, offset: u64, length: u32) -> Vec<u8> {
    proto::encode_request(&Request {
        flags,
        kind,
        handle: 0x1122_3344_5566_7788,
        offset,
        length,
    })
    .to_vec()
}

/// A session of requests after the handshake: READ, WRITE with its payload, FLUSH, TRIM,
/// WRITE_ZEROES, an out-of-range READ, then DISC.
fn session() -> Vec<u8> {
    let mut b = request(proto::CMD_READ, 0, 0, 8192);
    b.extend(request(proto::CMD_WRITE, proto::CMD_FLAG_FUA, 4096, 16));
    b.extend([0xab; 16]);
    b.extend(request(proto::CMD_FLUSH, 0, 0, 0));
    b.extend(request(proto::CMD_TRIM, 0, 8192, 65536));
    b.extend(request(
        proto::CMD_WRITE_ZEROES,
        proto::CMD_FLAG_NO_HOLE,
        0,
        512,
    ));
    b.extend(request(proto::CMD_READ, 0, u64::MAX - 10, 512));
    b.extend(request(proto::CMD_DISC, 0, 0, 0));
    b
}

#[test]
#[ignore = "writes the generated seeds into fuzz/corpus/nbd"]
fn write_seed_corpus() {
    let dir = corpus_dir();
    std::fs::create_dir_all(&dir).unwrap();
    let go = |name: &str, items: &[u16]| option(proto::OPT_GO, &info_data(name, items));
    let items = [proto::INFO_NAME, proto::INFO_BLOCK_SIZE];
    let cat = |parts: &[&[u8]]| parts.concat();
    let seeds: Vec<(&str, Vec<u8>)> = vec![
        (
            "go-session",
            cat(&[&client_flags(true), &go("disk0", &items), &session()]),
        ),
        (
            "go-default-export",
            cat(&[&client_flags(true), &go("", &[]), &session()]),
        ),
        (
            "go-unknown-then-go",
            cat(&[
                &client_flags(true),
                &go("nope", &[]),
                &go("scratch", &items),
            ]),
        ),
        (
            "info-then-go",
            cat(&[
                &client_flags(false),
                &option(proto::OPT_INFO, &info_data("disk0", &items)),
                &go("disk0", &[]),
            ]),
        ),
        (
            "list-abort",
            cat(&[
                &client_flags(true),
                &option(proto::OPT_LIST, &[]),
                &option(proto::OPT_ABORT, &[]),
            ]),
        ),
        (
            "list-with-data",
            cat(&[&client_flags(true), &option(proto::OPT_LIST, b"x")]),
        ),
        (
            "export-name",
            cat(&[
                &client_flags(false),
                &option(proto::OPT_EXPORT_NAME, b"disk0"),
                &session(),
            ]),
        ),
        (
            "export-name-no-zeroes",
            cat(&[
                &client_flags(true),
                &option(proto::OPT_EXPORT_NAME, b"scratch"),
                &session(),
            ]),
        ),
        (
            "export-name-unknown",
            cat(&[
                &client_flags(true),
                &option(proto::OPT_EXPORT_NAME, b"missing"),
            ]),
        ),
        (
            "starttls-unsupported",
            cat(&[
                &client_flags(true),
                &option(proto::OPT_STARTTLS, &[]),
                // NBD_OPT_EXTENDED_HEADERS, not offered.
                &option(11, &[]),
                &go("disk0", &[]),
            ]),
        ),
        (
            "go-lying-count",
            cat(&[
                &client_flags(true),
                &option(
                    proto::OPT_GO,
                    &[0, 0, 0, 5, b'd', b'i', b's', b'k', b'0', 0, 9],
                ),
            ]),
        ),
        (
            "go-name-past-data",
            cat(&[
                &client_flags(true),
                &option(proto::OPT_GO, &[0xff, 0xff, 0xff, 0xff, 0, 0]),
            ]),
        ),
        (
            "option-too-long",
            cat(&[
                &client_flags(true),
                &proto::IHAVEOPT.to_be_bytes(),
                &proto::OPT_GO.to_be_bytes(),
                &u32::MAX.to_be_bytes(),
            ]),
        ),
        (
            "bad-option-magic",
            cat(&[&client_flags(true), b"NOTAMAGIC_______"]),
        ),
        ("unknown-client-flags", vec![0, 0, 0, 0xff]),
        (
            "go-bad-requests",
            cat(&[
                &client_flags(true),
                &go("scratch", &[]),
                &request(proto::CMD_WRITE, 0, 0, proto::MAX_PAYLOAD + 1),
                &request(proto::CMD_READ, 1 << 5, 0, 512),
                &request(9, 0, 0, 512),
                &request(proto::CMD_WRITE_ZEROES, 0, (64 << 20) + 4096, 2),
                b"\x25\x60\x95\x14 bad magic header.........",
            ]),
        ),
        (
            "structured-meta-block-status",
            cat(&[
                &client_flags(true),
                &option(proto::OPT_STRUCTURED_REPLY, &[]),
                &option(proto::OPT_LIST_META_CONTEXT, &meta_data("disk0", &[])),
                &option(
                    proto::OPT_SET_META_CONTEXT,
                    &meta_data("disk0", &[proto::META_BASE_ALLOCATION]),
                ),
                &go("disk0", &items),
                &request(proto::CMD_BLOCK_STATUS, 0, 0, 1 << 20),
                &request(proto::CMD_BLOCK_STATUS, proto::CMD_FLAG_REQ_ONE, 4096, 1),
                &request(proto::CMD_BLOCK_STATUS, 0, 0, 0),
                &request(proto::CMD_BLOCK_STATUS, 0, u64::MAX - 1, 2),
                &session(),
            ]),
        ),
        (
            "meta-before-structured",
            cat(&[
                &client_flags(true),
                &option(
                    proto::OPT_SET_META_CONTEXT,
                    &meta_data("scratch", &[proto::META_BASE_ALLOCATION]),
                ),
                &go("scratch", &[]),
                &request(proto::CMD_BLOCK_STATUS, 0, 0, 4096),
                &request(proto::CMD_DISC, 0, 0, 0),
            ]),
        ),
        (
            "meta-malformed",
            cat(&[
                &client_flags(true),
                &option(proto::OPT_STRUCTURED_REPLY, b"x"),
                &option(proto::OPT_STRUCTURED_REPLY, &[]),
                &option(proto::OPT_SET_META_CONTEXT, &[0, 0, 0, 5, b'd']),
                &option(
                    proto::OPT_LIST_META_CONTEXT,
                    &[0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff],
                ),
                &option(
                    proto::OPT_SET_META_CONTEXT,
                    &meta_data("missing", &[proto::META_BASE_ALLOCATION]),
                ),
                &go("disk0", &[]),
            ]),
        ),
    ];
    for (name, data) in seeds {
        std::fs::write(dir.join(name), data).unwrap();
    }
}
