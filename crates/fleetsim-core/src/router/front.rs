//! The load balancer in front of the router replicas (`router.front`): which replica a
//! request reaches.

/// How requests are spread over router replicas (the load balancer in front of them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrontBalancer {
    /// Round robin over replicas.
    RoundRobin,
    /// Uniformly random.
    Random,
    /// By a hash of the session key (sticky), round robin for requests without one.
    SessionHash,
}

impl FrontBalancer {
    /// Name as written in scenarios.
    pub fn as_str(self) -> &'static str {
        match self {
            FrontBalancer::RoundRobin => "round_robin",
            FrontBalancer::Random => "random",
            FrontBalancer::SessionHash => "session_hash",
        }
    }
}

/// The front balancer's counter and random stream.
pub(crate) struct FrontState {
    kind: FrontBalancer,
    next: usize,
    rng: crate::rng::SimRng,
}

impl FrontState {
    pub(crate) fn new(kind: FrontBalancer, rng: crate::rng::SimRng) -> Self {
        FrontState { kind, next: 0, rng }
    }

    pub(crate) fn pick(&mut self, key: Option<&str>, replicas: usize) -> usize {
        if replicas == 1 {
            return 0;
        }
        match (self.kind, key) {
            (FrontBalancer::Random, _) => crate::dist::uniform_index(&mut self.rng, replicas),
            (FrontBalancer::SessionHash, Some(k)) => {
                let h = k
                    .bytes()
                    .fold(0xcbf2_9ce4_8422_2325u64, |h, b| crate::content::mix(h, u64::from(b)));
                (h % replicas as u64) as usize
            }
            _ => {
                let r = self.next % replicas;
                self.next += 1;
                r
            }
        }
    }
}
