//! production-stack `SessionRouter`: the session-key header value hashed onto a
//! `uhashring` ring of endpoint URLs (synced to the current endpoint set on every
//! request); requests without a key go to `_qps_routing`. Load is never consulted.

use super::hashring::HashRing;
use super::kind::{Doc, ParamlessKind, RoutingLogic, StackFlags};
use super::qps::qps_routing;
use super::{Branch, Decision, EndpointInfo, RequestInfo, RouterView, RoutingPolicy};
use crate::rng::SimRng;

/// The policy state: the ring, rebuilt when the endpoint set changes.
#[derive(Default)]
pub struct Session {
    ring: Option<(Vec<EndpointInfo>, HashRing)>,
}

impl RoutingPolicy for Session {
    fn route(&mut self, req: &RequestInfo, view: &RouterView, _rng: &mut SimRng) -> Decision {
        let Some(key) = req.session_key else {
            return Decision {
                pos: qps_routing(view),
                branch: Branch::SessionNoKeyQps,
                match_chars: 0,
            };
        };
        if self
            .ring
            .as_ref()
            .is_none_or(|(eps, _)| eps.as_slice() != view.endpoints)
        {
            let urls: Vec<&str> = view.endpoints.iter().map(|e| e.url.as_str()).collect();
            self.ring = Some((view.endpoints.to_vec(), HashRing::new(&urls)));
        }
        let (_, ring) = self.ring.as_ref().expect("built above");
        let pos = ring.get(key).expect("non-empty endpoint list");
        Decision {
            pos,
            branch: Branch::SessionHash,
            match_chars: 0,
        }
    }
}

/// This policy's registry entry ([`super::registry`]).
pub struct Kind;

impl ParamlessKind for Kind {
    const KIND: &'static str = "session";
    const DOC: Doc = Doc {
        source: "production-stack SessionRouter: uhashring consistent hash of the session header",
        decision: "uhashring ring (MD5, 160 virtual nodes per URL) on the session key; no key: _qps_routing",
        signals: "session key; without one, _qps_routing on router-local request stats",
        params: &[],
    };
    const ROUTING_LOGIC: Option<RoutingLogic> = Some(RoutingLogic {
        pr: None,
        keys: &[],
        needs: None,
    });
    fn build() -> Box<dyn RoutingPolicy> {
        Box::new(Session::default())
    }
    fn production_stack() -> Option<StackFlags> {
        Some(StackFlags {
            args: vec!["--session-key".into(), "<header>".into()],
            notes: vec!["--session-key: the request header that carries your session id".into()],
            reads_engine_stats: false,
            reads_request_stats: true,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::testkit::{ViewFixture, req};
    use crate::rng::stream;

    #[test]
    fn keyed_requests_follow_the_ring() {
        let f = ViewFixture::new(3);
        let mut p = Session::default();
        let mut rng = stream(0, "t", 0);
        // Golden owners from uhashring (see hashring tests).
        assert_eq!(p.route(&req(Some("agents-7"), &[]), &f.view(), &mut rng).pos, 0);
        assert_eq!(p.route(&req(Some("agents-1"), &[]), &f.view(), &mut rng).pos, 1);
        let d = p.route(&req(Some("agents-0"), &[]), &f.view(), &mut rng);
        assert_eq!((d.pos, d.branch), (2, Branch::SessionHash));
    }

    #[test]
    fn no_key_uses_qps() {
        let f = ViewFixture::new(2).dispatches(&[Some(4), Some(1)]);
        let d = Session::default().route(&req(None, &[]), &f.view(), &mut stream(0, "t", 0));
        assert_eq!((d.pos, d.branch), (1, Branch::SessionNoKeyQps));
    }
}
