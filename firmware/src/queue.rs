//! The queues between the drive's threads: crossbeam's lock-free channels, or, for the
//! ablation benchmark (`--ablate lock-free-queues`), a queue behind a mutex and two condition
//! variables with the same interface, so what the lock-free queues buy is measured rather
//! than claimed (the paper's Figure 12).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use crossbeam_channel::{RecvError, RecvTimeoutError, SendError, TryRecvError, TrySendError};
use parking_lot::{Condvar, Mutex};

/// Which implementation a queue uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum QueueKind {
    /// crossbeam's lock-free channels (the drive's default).
    #[default]
    LockFree,
    /// A `VecDeque` behind a mutex, with condition variables (the ablation).
    Locked,
}

/// The sending half of a queue.
pub enum Sender<T> {
    /// crossbeam.
    LockFree(crossbeam_channel::Sender<T>),
    /// The locked queue.
    Locked(Arc<Locked<T>>),
}

/// The receiving half of a queue.
pub enum Receiver<T> {
    /// crossbeam.
    LockFree(crossbeam_channel::Receiver<T>),
    /// The locked queue.
    Locked(Arc<Locked<T>>),
}

/// A queue of at most `cap` items (senders wait when it is full).
pub fn bounded<T>(kind: QueueKind, cap: usize) -> (Sender<T>, Receiver<T>) {
    match kind {
        QueueKind::LockFree => {
            let (tx, rx) = crossbeam_channel::bounded(cap);
            (Sender::LockFree(tx), Receiver::LockFree(rx))
        }
        QueueKind::Locked => Locked::pair(Some(cap.max(1))),
    }
}

/// A queue without a bound.
pub fn unbounded<T>(kind: QueueKind) -> (Sender<T>, Receiver<T>) {
    match kind {
        QueueKind::LockFree => {
            let (tx, rx) = crossbeam_channel::unbounded();
            (Sender::LockFree(tx), Receiver::LockFree(rx))
        }
        QueueKind::Locked => Locked::pair(None),
    }
}

/// The locked queue's shared state.
pub struct Locked<T> {
    state: Mutex<State<T>>,
    not_empty: Condvar,
    not_full: Condvar,
    cap: Option<usize>,
}

struct State<T> {
    items: VecDeque<T>,
    senders: usize,
    receiver: bool,
}

impl<T> Locked<T> {
    fn pair(cap: Option<usize>) -> (Sender<T>, Receiver<T>) {
        let q = Arc::new(Locked {
            state: Mutex::new(State {
                items: VecDeque::new(),
                senders: 1,
                receiver: true,
            }),
            not_empty: Condvar::new(),
            not_full: Condvar::new(),
            cap,
        });
        (Sender::Locked(q.clone()), Receiver::Locked(q))
    }
}

impl<T> Sender<T> {
    /// Queues `item`, waiting while a bounded queue is full.
    ///
    /// # Errors
    /// The receiver is gone (the item comes back).
    pub fn send(&self, item: T) -> Result<(), SendError<T>> {
        match self {
            Sender::LockFree(tx) => tx.send(item),
            Sender::Locked(q) => {
                let mut s = q.state.lock();
                loop {
                    if !s.receiver {
                        return Err(SendError(item));
                    }
                    if q.cap.is_none_or(|c| s.items.len() < c) {
                        break;
                    }
                    q.not_full.wait(&mut s);
                }
                s.items.push_back(item);
                drop(s);
                q.not_empty.notify_one();
                Ok(())
            }
        }
    }
}

impl<T> Sender<T> {
    /// Queues `item` if there is room now, without waiting (the network thread's send: a
    /// stalled worker must not stop the event loop).
    ///
    /// # Errors
    /// `Full` (the item comes back; try again later) or `Disconnected` (the receiver is gone).
    pub fn try_send(&self, item: T) -> Result<(), TrySendError<T>> {
        match self {
            Sender::LockFree(tx) => tx.try_send(item),
            Sender::Locked(q) => {
                let mut s = q.state.lock();
                if !s.receiver {
                    return Err(TrySendError::Disconnected(item));
                }
                if q.cap.is_some_and(|c| s.items.len() >= c) {
                    return Err(TrySendError::Full(item));
                }
                s.items.push_back(item);
                drop(s);
                q.not_empty.notify_one();
                Ok(())
            }
        }
    }
}

impl<T> Clone for Sender<T> {
    fn clone(&self) -> Self {
        match self {
            Sender::LockFree(tx) => Sender::LockFree(tx.clone()),
            Sender::Locked(q) => {
                q.state.lock().senders += 1;
                Sender::Locked(q.clone())
            }
        }
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        if let Sender::Locked(q) = self {
            let mut s = q.state.lock();
            s.senders -= 1;
            if s.senders == 0 {
                drop(s);
                q.not_empty.notify_all();
            }
        }
    }
}

impl<T> Receiver<T> {
    /// The next item, waiting for one.
    ///
    /// # Errors
    /// Every sender is gone and the queue is empty.
    pub fn recv(&self) -> Result<T, RecvError> {
        match self {
            Receiver::LockFree(rx) => rx.recv(),
            Receiver::Locked(q) => {
                let mut s = q.state.lock();
                loop {
                    if let Some(item) = s.items.pop_front() {
                        drop(s);
                        q.not_full.notify_one();
                        return Ok(item);
                    }
                    if s.senders == 0 {
                        return Err(RecvError);
                    }
                    q.not_empty.wait(&mut s);
                }
            }
        }
    }

    /// The next item if one is queued.
    ///
    /// # Errors
    /// `Empty`, or `Disconnected` when every sender is gone and the queue is empty.
    pub fn try_recv(&self) -> Result<T, TryRecvError> {
        match self {
            Receiver::LockFree(rx) => rx.try_recv(),
            Receiver::Locked(q) => {
                let mut s = q.state.lock();
                match s.items.pop_front() {
                    Some(item) => {
                        drop(s);
                        q.not_full.notify_one();
                        Ok(item)
                    }
                    None if s.senders == 0 => Err(TryRecvError::Disconnected),
                    None => Err(TryRecvError::Empty),
                }
            }
        }
    }

    /// The next item, waiting at most `timeout`.
    ///
    /// # Errors
    /// `Timeout`, or `Disconnected` when every sender is gone and the queue is empty.
    pub fn recv_timeout(&self, timeout: Duration) -> Result<T, RecvTimeoutError> {
        match self {
            Receiver::LockFree(rx) => rx.recv_timeout(timeout),
            Receiver::Locked(q) => {
                let deadline = Instant::now() + timeout;
                let mut s = q.state.lock();
                loop {
                    if let Some(item) = s.items.pop_front() {
                        drop(s);
                        q.not_full.notify_one();
                        return Ok(item);
                    }
                    if s.senders == 0 {
                        return Err(RecvTimeoutError::Disconnected);
                    }
                    if q.not_empty.wait_until(&mut s, deadline).timed_out() {
                        return Err(RecvTimeoutError::Timeout);
                    }
                }
            }
        }
    }
}

impl<T> Drop for Receiver<T> {
    fn drop(&mut self) {
        if let Receiver::Locked(q) = self {
            q.state.lock().receiver = false;
            q.not_full.notify_all();
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn both() -> [QueueKind; 2] {
        [QueueKind::LockFree, QueueKind::Locked]
    }

    #[test]
    fn fifo_bounded_and_disconnect() {
        for kind in both() {
            let (tx, rx) = bounded(kind, 2);
            let producer = std::thread::spawn(move || {
                for i in 0..1000 {
                    tx.send(i).unwrap();
                }
            });
            for i in 0..1000 {
                assert_eq!(rx.recv().unwrap(), i, "{kind:?}");
            }
            producer.join().unwrap();
            assert!(rx.recv().is_err(), "{kind:?}: every sender is gone");
            assert!(matches!(rx.try_recv(), Err(TryRecvError::Disconnected)));
        }
    }

    #[test]
    fn try_send_reports_full_and_gone() {
        for kind in both() {
            let (tx, rx) = bounded(kind, 1);
            assert!(tx.try_send(1).is_ok());
            assert!(
                matches!(tx.try_send(2), Err(TrySendError::Full(2))),
                "{kind:?}"
            );
            assert_eq!(rx.recv().unwrap(), 1);
            assert!(tx.try_send(3).is_ok());
            drop(rx);
            assert!(matches!(tx.try_send(4), Err(TrySendError::Disconnected(4))));
        }
    }

    #[test]
    fn empty_timeout_and_receiver_gone() {
        for kind in both() {
            let (tx, rx) = unbounded::<u32>(kind);
            assert!(matches!(rx.try_recv(), Err(TryRecvError::Empty)));
            assert!(matches!(
                rx.recv_timeout(Duration::from_millis(5)),
                Err(RecvTimeoutError::Timeout)
            ));
            let tx2 = tx.clone();
            drop(tx);
            tx2.send(7).unwrap();
            assert_eq!(rx.recv_timeout(Duration::from_secs(1)).unwrap(), 7);
            drop(rx);
            assert!(tx2.send(8).is_err(), "{kind:?}: the receiver is gone");
        }
    }
}
