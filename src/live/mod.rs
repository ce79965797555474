//! The live wing: fleetsim against real HTTP peers, on the wall clock. Real time enters
//! the project here and nowhere else; everything else runs on simulated time.
//!
//! * [`serve`] (`sim serve`): the scenario's fleet as vLLM servers, the engine model of
//!   `sim run` behind each, for a real router to route into;
//! * [`load`] (`sim load`): the scenario's workload sent to any OpenAI-compatible endpoint,
//!   paced as the simulation paces it;
//! * [`conform`] (`sim conform`): serve, a real router as a child process, and load, per
//!   router policy, judged against the catalogue model that claims it;
//! * [`fetch`]: where `sim observe` gets a real fleet's series (a Prometheus server, or the
//!   engines' `/metrics`).
//!
//! They stand on one set of shared pieces: [`wire`], the contract both ends of a served
//! and loaded run agree on (backend header and fingerprint, session headers, endpoints,
//! the text codec); [`Clock`], the one mapping of wall time onto simulated time, at a
//! checked [`Speed`] (the conversion itself lives in the core's time module); [`client`],
//! the one HTTP client (reqwest); and [`runtime`], the one async runtime set-up (tokio).

pub mod client;
pub mod conform;
pub mod fetch;
pub mod load;
pub mod serve;
pub mod wire;

use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::time::SimTime;
pub use crate::time::Speed;

/// Simulated time against wall time: simulated zero at a wall instant, then [`Speed`]
/// simulated seconds per wall second.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    start: Instant,
    speed: Speed,
}

impl Clock {
    /// A clock whose simulated zero is now.
    pub fn start(speed: Speed) -> Clock {
        Clock {
            start: Instant::now(),
            speed,
        }
    }

    /// Simulated seconds per wall second.
    pub fn speed(&self) -> Speed {
        self.speed
    }

    /// The wall instant of simulated zero.
    pub fn wall_zero(&self) -> Instant {
        self.start
    }

    /// Wall time since simulated zero.
    pub fn elapsed(&self) -> Duration {
        self.start.elapsed()
    }

    /// Simulated now.
    pub fn sim_now(&self) -> SimTime {
        self.sim_at(Instant::now())
    }

    /// The simulated time of wall instant `w` (zero before the start).
    pub fn sim_at(&self, w: Instant) -> SimTime {
        self.speed.wall_to_sim(w.saturating_duration_since(self.start))
    }

    /// The wall instant of simulated time `t`.
    pub fn wall_of(&self, t: SimTime) -> Instant {
        self.start + self.speed.sim_to_wall(t)
    }
}

/// The async runtime every live command runs its I/O on: tokio's multi-threaded
/// scheduler with its timers and sockets, on `worker_threads` threads (`None`: one per
/// core).
pub fn runtime(worker_threads: Option<usize>) -> Result<tokio::runtime::Runtime> {
    let mut b = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = worker_threads {
        b.worker_threads(n);
    }
    b.enable_all().build().context("starting the async runtime")
}
