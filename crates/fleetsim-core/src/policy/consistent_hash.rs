//! vllm-project/router 0.1.17 `--policy consistent_hash` (`src/policies/consistent_hash.rs`,
//! `src/policies/hash_key.rs`): the request's key on a ring of 160 virtual nodes per worker
//! URL, both placed by [`fbi_hash`](super::furc::fbi_hash). The key is the first session
//! header the client sends, `header:x-session-id:<value>` for fleetsim's traffic; without
//! one, the request text: for a chat request that is only its `session_params.session_id`,
//! so every key-less chat request has the key `request:` and goes to one worker; for a
//! completion it is the prompt, which the model stands in for by a hash of its content
//! (the same prompt, the same worker; which worker is the ring's draw). Load is never read.

use super::furc::FurcRing;
use super::kind::{Doc, ParamlessKind, Upstream};
use super::{Branch, Decision, EndpointInfo, RequestInfo, RouterView, RoutingPolicy};
use crate::content::RequestApi;
use crate::rng::SimRng;

/// Characters per chunk of the prompt hash that stands in for a key-less completion's text.
const PROMPT_CHUNK_CHARS: u32 = 4096;

/// The policy state: the ring, rebuilt when the endpoint set changes.
#[derive(Default)]
pub struct ConsistentHash {
    ring: Option<(Vec<EndpointInfo>, FurcRing)>,
}

/// The key vllm-router hashes for `req` (`extract_hash_key`).
pub fn hash_key(req: &RequestInfo) -> String {
    if let Some(k) = req.session_key {
        return format!("header:x-session-id:{k}");
    }
    match req.api {
        RequestApi::Chat => "request:".to_string(),
        RequestApi::Completions => {
            let h = req
                .prompt_chunks
                .iter()
                .fold(0x243F_6A88_85A3_08D3u64, |h, &c| crate::content::mix(h, c));
            format!("request_hash:{h:016x}")
        }
    }
}

/// The ring over `endpoints`, kept in `slot` until the endpoint set changes.
pub fn ring_for<'a>(slot: &'a mut Option<(Vec<EndpointInfo>, FurcRing)>, endpoints: &[EndpointInfo]) -> &'a FurcRing {
    if slot.as_ref().is_none_or(|(eps, _)| eps.as_slice() != endpoints) {
        let urls: Vec<&str> = endpoints.iter().map(|e| e.url.as_str()).collect();
        *slot = Some((endpoints.to_vec(), FurcRing::new(&urls)));
    }
    &slot.as_ref().expect("built above").1
}

impl RoutingPolicy for ConsistentHash {
    fn route(&mut self, req: &RequestInfo, view: &RouterView, _rng: &mut SimRng) -> Decision {
        let ring = ring_for(&mut self.ring, view.endpoints);
        Decision {
            pos: ring.get(&hash_key(req)).expect("non-empty endpoint list"),
            branch: Branch::SessionHash,
            match_chars: 0,
        }
    }

    fn prompt_chunk_chars(&self) -> Option<u32> {
        Some(PROMPT_CHUNK_CHARS)
    }
}

/// This policy's registry entry ([`super::registry`]).
pub struct Kind;

impl ParamlessKind for Kind {
    const KIND: &'static str = "consistent_hash";
    const DOC: Doc = Doc {
        source: "vllm-project/router 0.1.17 consistent_hash (src/policies/consistent_hash.rs, hash_key.rs)",
        decision: "FurcHash ring (160 virtual nodes per worker URL) on header:x-session-id:<key>; key-less chat: the one key \"request:\"",
        signals: "session key header; the worker URLs (backends.urls: give the live ones)",
        params: &[],
    };
    fn build() -> Box<dyn RoutingPolicy> {
        Box::new(ConsistentHash::default())
    }
    fn upstream() -> Option<Upstream> {
        Upstream::new("vllm-router 0.1.17", "--policy consistent_hash")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::testkit::{ViewFixture, req};
    use crate::rng::stream;

    #[test]
    fn a_session_follows_the_ring_and_keyless_chat_goes_to_one_worker() {
        let f = ViewFixture::new(4);
        let mut p = ConsistentHash::default();
        let mut rng = stream(0, "t", 0);
        let urls: Vec<&str> = f.endpoints.iter().map(|e| e.url.as_str()).collect();
        let ring = FurcRing::new(&urls);
        for s in ["agents-0", "agents-1", "chat-0"] {
            let want = ring.get(&format!("header:x-session-id:{s}")).unwrap();
            let d = p.route(&req(Some(s), &[]), &f.view(), &mut rng);
            assert_eq!((d.pos, d.branch), (want, Branch::SessionHash));
        }
        let mut chat = req(None, &[]);
        chat.api = RequestApi::Chat;
        let first = p.route(&chat, &f.view(), &mut rng).pos;
        assert_eq!(first, ring.get("request:").unwrap());
        let mut c2 = req(None, &[7, 8]);
        c2.api = RequestApi::Chat;
        assert_eq!(p.route(&c2, &f.view(), &mut rng).pos, first);
    }

    #[test]
    fn keyless_completions_key_on_their_prompt() {
        let f = ViewFixture::new(4);
        let mut p = ConsistentHash::default();
        let mut rng = stream(0, "t", 0);
        let a = p.route(&req(None, &[1, 2]), &f.view(), &mut rng).pos;
        assert_eq!(p.route(&req(None, &[1, 2]), &f.view(), &mut rng).pos, a);
        let spread: std::collections::BTreeSet<usize> = (0..64u64)
            .map(|i| p.route(&req(None, &[i]), &f.view(), &mut rng).pos)
            .collect();
        assert!(spread.len() > 1);
    }
}
