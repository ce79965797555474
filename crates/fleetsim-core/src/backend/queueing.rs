//! Plain multi-server queue (`c` slots, FIFO, service time drawn per request).
//!
//! Not a model of vLLM: it exists to validate the event core, the router plumbing and the
//! metrics against closed-form queueing results (M/M/1, M/M/c, M/D/1). A request's service
//! time is drawn from its own workload stream, so it is the same under every policy.

use std::collections::VecDeque;

use crate::ids::RequestId;
use crate::time::SimDuration;

/// A c-server FIFO queue.
pub struct QueueingServer {
    slots: u32,
    busy: u32,
    queue: VecDeque<(RequestId, SimDuration)>,
}

impl QueueingServer {
    /// An idle server with `slots` servers.
    pub fn new(slots: u32) -> QueueingServer {
        assert!(slots > 0);
        QueueingServer {
            slots,
            busy: 0,
            queue: VecDeque::new(),
        }
    }

    /// Number of servers.
    pub fn slots(&self) -> u32 {
        self.slots
    }

    /// A request arrives. Returns `Some(service)` if it starts service immediately.
    pub fn arrive(&mut self, id: RequestId, service: SimDuration) -> Option<SimDuration> {
        if self.busy < self.slots {
            self.busy += 1;
            Some(service)
        } else {
            self.queue.push_back((id, service));
            None
        }
    }

    /// A service completes. Returns the next request to start, if any.
    pub fn complete(&mut self) -> Option<(RequestId, SimDuration)> {
        assert!(self.busy > 0, "completion on an idle server");
        match self.queue.pop_front() {
            Some(next) => Some(next),
            None => {
                self.busy -= 1;
                None
            }
        }
    }

    /// Requests in service.
    pub fn running(&self) -> u32 {
        self.busy
    }

    /// Requests queued.
    pub fn waiting(&self) -> u32 {
        self.queue.len() as u32
    }

    /// Invariants.
    pub fn check(&self) -> Result<(), String> {
        if self.busy > self.slots {
            return Err(format!("{} busy > {} slots", self.busy, self.slots));
        }
        if !self.queue.is_empty() && self.busy < self.slots {
            return Err("requests queued while a server is free".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fifo_with_c_servers() {
        let mut q = QueueingServer::new(2);
        assert!(q.arrive(RequestId(0), SimDuration(5)).is_some());
        assert!(q.arrive(RequestId(1), SimDuration(5)).is_some());
        assert!(q.arrive(RequestId(2), SimDuration(7)).is_none());
        assert!(q.arrive(RequestId(3), SimDuration(9)).is_none());
        assert_eq!((q.running(), q.waiting()), (2, 2));
        assert_eq!(q.complete(), Some((RequestId(2), SimDuration(7))));
        assert_eq!(q.complete(), Some((RequestId(3), SimDuration(9))));
        assert_eq!(q.complete(), None);
        assert_eq!((q.running(), q.waiting()), (1, 0));
        q.check().unwrap();
    }
}
