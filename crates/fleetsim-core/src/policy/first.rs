//! `first`: always the first endpoint in discovery order (a test policy).

use super::params::{NoParams, ParamError};
use super::registry::{Doc, Fleet, PolicyKind};
use super::{Branch, Decision, RequestInfo, RouterView, RoutingPolicy};
use crate::rng::SimRng;

/// The policy (stateless).
pub struct First;

impl RoutingPolicy for First {
    fn route(&mut self, _req: &RequestInfo, _view: &RouterView, _rng: &mut SimRng) -> Decision {
        Decision {
            pos: 0,
            branch: Branch::RoundRobin,
            match_chars: 0,
        }
    }
}

/// This policy's registry entry ([`super::registry`]).
pub struct Kind;

impl PolicyKind for Kind {
    const KIND: &'static str = "first";
    const DOC: Doc = Doc {
        source: "none (a test policy)",
        signals: "none",
        params: &[],
    };
    type Params = NoParams;
    type Config = ();
    fn validate(_: NoParams, _: &Fleet) -> Result<(), ParamError> {
        Ok(())
    }
    fn describe(_: &()) -> String {
        String::new()
    }
    fn build(_: &()) -> Box<dyn RoutingPolicy> {
        Box::new(First)
    }
}
