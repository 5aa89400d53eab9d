#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::*;

/// An engine acknowledged from DRAM on a fresh small RAM device.
fn plp_engine() -> Engine {
    Engine::open(
        crate::engine::test_device::small_ram_device(64),
        EngineConfig {
            flush_writes: false,
            ack_from_dram: true,
            ..EngineConfig::default()
        },
    )
    .unwrap()
}

/// Where `key`'s value is, as applied.
fn applied_ptr(g: &Inner, key: &[u8]) -> ValuePtr {
    match g.lookup(key) {
        Some(Slot::Value(p, _)) => p,
        other => panic!("{other:?}"),
    }
}

/// The rule of `gc::moves`, case 2: with a client batch in flight that is not yet claimed, a
/// move of a key that batch writes is not laid out (it would be newer in the log than the
/// client's write, and a later replay would bring the old value back); it stays pending and
/// is judged again after the drain, when it is found dead. A move of a key no batch in
/// flight writes is laid out beside the client's batch and applied at once.
#[test]
fn a_move_waits_for_a_client_batch_in_flight_that_writes_its_key() {
    let db = plp_engine();
    let (old, other, new) = (vec![1u8; 3000], vec![2u8; 3000], vec![9u8; 3000]);
    db.put(b"moved", &old).unwrap();
    db.put(b"other", &other).unwrap();
    let mut g = db.core.inner.lock();
    let (p_moved, p_other) = (applied_ptr(&g, b"moved"), applied_ptr(&g, b"other"));
    // A client's overwrite of `moved`, laid out and queued; its writer would claim it once
    // it holds the lock again.
    let ops = [WriteOp::Put(b"moved", &new)];
    let bound = g.page_bound(&ops);
    let client = g
        .start_pending(&ops, bound, &mut crate::engine::write::Prepared::none())
        .unwrap();
    // Garbage collection read the old copy, which what is applied still points at.
    assert_eq!(applied_ptr(&g, b"moved"), p_moved);
    g.gc_pending.push(GcMove {
        key: b"moved".to_vec(),
        value: old.clone(),
        from: p_moved,
    });
    let mut writes = GcWrites::default();
    assert_eq!(
        g.submit_gc_moves(&mut writes).unwrap(),
        Some(GcWait::Clients)
    );
    assert!(writes.batches.is_empty(), "nothing was laid out");
    assert_eq!(g.gc_pending.len(), 1, "the move stays pending");
    assert_eq!(g.stats.gc_waits_for_clients, 1);
    assert_eq!(g.stats.gc_batches_beside_clients, 0);

    // A key no batch in flight writes: laid out beside the client's batch.
    let waiting = std::mem::take(&mut g.gc_pending);
    g.gc_pending.push(GcMove {
        key: b"other".to_vec(),
        value: other.clone(),
        from: p_other,
    });
    assert_eq!(g.submit_gc_moves(&mut writes).unwrap(), None);
    assert_eq!(writes.batches.len(), 1);
    assert!(writes.early, "acknowledged from DRAM: claimable at once");
    assert_eq!(g.stats.gc_batches_beside_clients, 1);
    // Applied at once, in ticket order behind the client's batch (which is applied too).
    let batches = std::mem::take(&mut writes.batches);
    g.apply_gc_batches(&batches, Vec::new()).unwrap();
    assert_ne!(applied_ptr(&g, b"other"), p_other, "the move is applied");
    drop(g);
    db.finish_write(client).unwrap();

    // Judged again: the client's write is applied, so the old copy is dead and not moved.
    let mut g = db.core.inner.lock();
    g.gc_pending = waiting;
    let mut writes = GcWrites::default();
    assert_eq!(g.submit_gc_moves(&mut writes).unwrap(), None);
    assert!(writes.batches.is_empty(), "a dead value is not moved");
    drop(g);
    assert_eq!(db.get(b"moved").unwrap(), Some(new.clone()));
    assert_eq!(db.get(b"other").unwrap(), Some(other.clone()));
    db.sync().unwrap();
    assert_eq!(db.get(b"moved").unwrap(), Some(new));
    assert_eq!(db.get(b"other").unwrap(), Some(other));
}
