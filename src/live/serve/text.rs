//! The server's side of the text codec ([`Codec`]): a prompt's tokens as the
//! engine sees them. The engine's cache blocks are keyed by the text of their tokens, and
//! generated tokens are the codec's filler words. So two requests share exactly the cache
//! blocks whose text they share, as with a real tokenizer and vLLM's chained block hashes,
//! and a client that sends a reply back in its next prompt hits the blocks that reply
//! filled.

use crate::content::{Content, mix};
use crate::ids::RequestId;
use crate::live::wire::Codec;

/// FNV-1a over `bytes`, continuing from `h`.
fn fnv(mut h: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01B3);
    }
    h
}

const FNV_OFFSET: u64 = 0xCBF2_9CE4_8422_2325;

/// Tokenisation settings of one fleet.
#[derive(Clone, Copy, Debug)]
pub struct Tokenizer {
    /// Text to tokens and back.
    pub codec: Codec,
    /// Tokens per KV-cache block of the engines.
    pub block_tokens: u32,
}

impl Tokenizer {
    /// Tokens of a prompt ([`Codec::count`]; vLLM refuses an empty prompt, and so does the
    /// server).
    pub fn count(&self, text: &str) -> u32 {
        self.codec.count(text)
    }

    /// Generated token `k` (from 0), [`Codec::push_filler`].
    pub fn filler(&self, k: u32, out: &mut String) {
        self.codec.push_filler(out, k);
    }

    /// The engine's view of a request: `prompt` then `output_tokens` filler tokens, each
    /// full block keyed by a hash of its tokens' text (token boundaries included), the
    /// partial last block by the request.
    pub fn content(&self, prompt: &str, output_tokens: u32, id: RequestId) -> Content {
        let bt = self.block_tokens;
        let prompt_tokens = self.count(prompt);
        let total = u64::from(prompt_tokens) + u64::from(output_tokens);
        let full_blocks = (total / u64::from(bt)) as usize;
        let mut keys = Vec::with_capacity(full_blocks);
        let mut h = FNV_OFFSET;
        let mut in_block = 0u32;
        let mut push_token = |bytes: &[u8], keys: &mut Vec<u64>| {
            h = fnv(h, bytes);
            h = fnv(h, &[0xFF]);
            in_block += 1;
            if in_block == bt {
                keys.push(mix(h, 0x5E4E));
                h = FNV_OFFSET;
                in_block = 0;
            }
        };
        for token in self.codec.tokens(prompt) {
            push_token(token.as_bytes(), &mut keys);
        }
        // Output tokens, only as far as they fill whole blocks.
        let mut word = String::with_capacity(self.codec.chars_per_token() as usize);
        let mut k = 0u32;
        while keys.len() < full_blocks && k < output_tokens {
            word.clear();
            self.filler(k, &mut word);
            push_token(word.as_bytes(), &mut keys);
            k += 1;
        }
        Content::keyed_blocks(
            &keys,
            bt,
            mix(0x7A11_5EED, u64::from(id.0)),
            prompt_tokens,
            output_tokens,
        )
    }

    /// Token ids of `text` (for `/tokenize` and the render endpoints): each token's id is
    /// a hash of its characters below 128,000 (Llama 3's vocabulary), so equal text gives
    /// equal ids.
    pub fn token_ids(&self, text: &str) -> Vec<u32> {
        self.codec
            .tokens(text)
            .map(|t| (mix(fnv(FNV_OFFSET, t.as_bytes()), 0x1D) % 128_000) as u32)
            .collect()
    }
}

impl Tokenizer {
    /// The token ids of a request's full KV blocks, as [`Tokenizer::token_ids`] gives them:
    /// the prompt's, then the generated filler tokens' as far as they fill whole blocks
    /// (what a `BlockStored` event carries).
    pub fn block_token_ids(&self, prompt: &str, output_tokens: u32) -> Vec<u32> {
        let bt = u64::from(self.block_tokens.max(1));
        let mut ids = self.token_ids(prompt);
        let total = ids.len() as u64 + u64::from(output_tokens);
        let full = (total / bt * bt) as usize;
        let mut word = String::new();
        let mut k = 0u32;
        while ids.len() < full && k < output_tokens {
            word.clear();
            self.filler(k, &mut word);
            ids.extend(self.token_ids(&word));
            k += 1;
        }
        ids.truncate(full);
        ids
    }
}

/// How many tokens a request generates when the client lets the model stop (no
/// `ignore_eos`): a length in 64..=512 from a hash of the prompt, so the same prompt
/// always stops at the same token.
pub fn natural_length(prompt: &str) -> u32 {
    64 + (mix(fnv(FNV_OFFSET, prompt.as_bytes()), 0xE05) % 449) as u32
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::content::block_hashes;

    fn tok(cpt: u32) -> Tokenizer {
        Tokenizer {
            codec: Codec::new(cpt),
            block_tokens: 4,
        }
    }

    /// Shared text gives shared chained block hashes, as far as the text is shared, and a
    /// reply sent back as the next prompt hits the blocks the reply filled.
    #[test]
    fn blocks_are_shared_exactly_as_far_as_the_text_is() {
        let t = tok(4);
        let hashes = |c: &Content| {
            let mut out = Vec::new();
            block_hashes(c, 4, (c.total_tokens() / 4) as usize, &mut out);
            out
        };
        let a = "x".repeat(16 * 10);
        let mut b = a.clone();
        b.replace_range(16 * 6..16 * 6 + 1, "y");
        let (ha, hb) = (
            hashes(&t.content(&a, 0, RequestId(0))),
            hashes(&t.content(&b, 0, RequestId(1))),
        );
        assert_eq!(ha.len(), 10);
        assert_eq!(ha[..6], hb[..6]);
        assert!(ha[6..].iter().zip(&hb[6..]).all(|(x, y)| x != y));
        // Turn 1: 40 tokens of prompt, 24 generated; turn 2's prompt is turn 1's prompt,
        // its reply and more.
        let p1 = "q".repeat(160);
        let c1 = t.content(&p1, 24, RequestId(2));
        let mut reply = String::new();
        for k in 0..24 {
            t.filler(k, &mut reply);
        }
        let p2 = format!("{p1}{reply}next question");
        let c2 = t.content(&p2, 5, RequestId(3));
        let (h1, h2) = (hashes(&c1), hashes(&c2));
        assert_eq!(h1.len(), 16);
        assert_eq!(h1[..], h2[..16]);
    }

    #[test]
    fn token_ids_are_one_per_token_and_follow_the_text() {
        let t = tok(4);
        let a = t.token_ids("abcdefghij");
        assert_eq!(a.len(), t.count("abcdefghij") as usize);
        assert_eq!(t.token_ids("abcdefgh")[..], a[..2]);
    }

    #[test]
    fn natural_lengths_are_in_range_and_stable() {
        for p in ["", "a", "hello world", &"z".repeat(1000)] {
            let n = natural_length(p);
            assert!((64..=512).contains(&n));
            assert_eq!(n, natural_length(p));
        }
    }
}
