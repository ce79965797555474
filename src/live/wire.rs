//! The wire contract between fleetsim's two live ends: what `sim serve` (the emulated
//! fleet) and `sim load` (the client) agree on beyond the OpenAI API both speak. One
//! definition each: the header and the `system_fingerprint` that name the backend which
//! served a request, the session key headers, the endpoints, and the text codec by which
//! token content becomes text and text becomes tokens.
//!
//! The codec: a token is exactly `chars_per_token` characters (the scenario's
//! `router.chars_per_token`), `chars_per_token - 1` lowercase letters then a space (one
//! letter when a token is one character). Text is cut into tokens every `chars_per_token`
//! characters, the last possibly shorter. So the client's rendering of a plan's tokens is
//! read back by the server as exactly those tokens, two texts that share a prefix share
//! exactly the tokens of that prefix, and a reply the server streamed, sent back in the
//! client's next prompt, is the same tokens again.

use crate::content::mix;
use crate::workload::RequestApi;

/// The response header naming the backend that served a request.
pub const BACKEND_HEADER: &str = "x-fleetsim-backend";

/// Prefix of the `system_fingerprint` naming the backend in every completion body and
/// streamed chunk (vLLM sends `null` there; routers pass it through even where they drop
/// response headers).
pub const FINGERPRINT_PREFIX: &str = "fleetsim:";

/// The `system_fingerprint` of backend `name`.
pub fn fingerprint(name: &str) -> String {
    format!("{FINGERPRINT_PREFIX}{name}")
}

/// The backend a `system_fingerprint` names, if it is one of ours.
pub fn backend_of_fingerprint(fingerprint: &str) -> Option<&str> {
    fingerprint.strip_prefix(FINGERPRINT_PREFIX)
}

/// The session key headers, in the order the server reads them (the first present names
/// the session): `x-session-id`, read by vllm-project/router's and SGLang's consistent
/// hashing, then production-stack's session router key (`--session-key`, commonly
/// `x-user-id`). The client sends both when a group sends its key.
pub const SESSION_HEADERS: [&str; 2] = ["x-session-id", "x-user-id"];

/// `GET`: the served models.
pub const MODELS_PATH: &str = "/v1/models";
/// `POST`: a text completion.
pub const COMPLETIONS_PATH: &str = "/v1/completions";
/// `POST`: a chat completion.
pub const CHAT_COMPLETIONS_PATH: &str = "/v1/chat/completions";

/// The endpoint of a request of kind `api`.
pub fn completion_path(api: RequestApi) -> &'static str {
    match api {
        RequestApi::Chat => CHAT_COMPLETIONS_PATH,
        RequestApi::Completions => COMPLETIONS_PATH,
    }
}

/// The text codec of one fleet (module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Codec {
    chars_per_token: u32,
}

impl Codec {
    /// The codec at `chars_per_token` characters per token (at least one).
    pub fn new(chars_per_token: u32) -> Codec {
        Codec {
            chars_per_token: chars_per_token.max(1),
        }
    }

    /// Characters per token.
    pub fn chars_per_token(self) -> u32 {
        self.chars_per_token
    }

    /// Tokens of `text`: one per `chars_per_token` characters, the last possibly shorter
    /// (none for an empty text).
    pub fn count(self, text: &str) -> u32 {
        let chars = text.chars().count() as u64;
        chars.div_ceil(u64::from(self.chars_per_token)).min(u64::from(u32::MAX)) as u32
    }

    /// The tokens of `text`, in order, as its slices.
    pub fn tokens(self, text: &str) -> Tokens<'_> {
        Tokens {
            rest: text,
            chars_per_token: self.chars_per_token as usize,
        }
    }

    /// Appends token `pos` of content source `source`: its letters drawn from a hash of
    /// both, so equal content is equal text and different sources differ.
    pub fn push_content(self, out: &mut String, source: u64, pos: u32) {
        let mut h = mix(source, u64::from(pos));
        self.push_word(out, |i| {
            // 26^12 < 2^64: draw a fresh word every 12 letters.
            if i > 0 && i % 12 == 0 {
                h = mix(h, u64::from(i));
            }
            let letter = h % 26;
            h /= 26;
            letter
        });
    }

    /// Appends generated token `k` (from 0) of a reply: the same for every request.
    pub fn push_filler(self, out: &mut String, k: u32) {
        self.push_word(out, |j| (u64::from(k) * 7 + u64::from(j) * 3) % 26);
    }

    /// One token: `chars_per_token - 1` letters (`letter(i)` from `a`, below 26), then a
    /// space; one letter when a token is one character.
    fn push_word(self, out: &mut String, mut letter: impl FnMut(u32) -> u64) {
        let cpt = self.chars_per_token;
        let letters = if cpt >= 2 { cpt - 1 } else { 1 };
        for i in 0..letters {
            out.push(char::from(b'a' + letter(i) as u8));
        }
        if cpt >= 2 {
            out.push(' ');
        }
    }
}

/// [`Codec::tokens`]: a text's tokens, `chars_per_token` characters each, the last
/// possibly shorter.
pub struct Tokens<'a> {
    rest: &'a str,
    chars_per_token: usize,
}

impl<'a> Iterator for Tokens<'a> {
    type Item = &'a str;

    fn next(&mut self) -> Option<&'a str> {
        if self.rest.is_empty() {
            return None;
        }
        let end = self
            .rest
            .char_indices()
            .nth(self.chars_per_token)
            .map_or(self.rest.len(), |(i, _)| i);
        let (token, rest) = self.rest.split_at(end);
        self.rest = rest;
        Some(token)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_chars_per_token_characters_and_count_agrees() {
        let c = Codec::new(4);
        assert_eq!(c.count(""), 0);
        assert_eq!(c.count("abcd"), 1);
        assert_eq!(c.count("abcde"), 2);
        assert_eq!(c.count("ééééé"), 2);
        for text in ["", "abcd", "abcdefghij", "ééééé", "x"] {
            let toks: Vec<&str> = c.tokens(text).collect();
            assert_eq!(toks.len(), c.count(text) as usize, "{text}");
            assert_eq!(toks.concat(), text);
            assert!(toks.iter().rev().skip(1).all(|t| t.chars().count() == 4));
        }
    }

    /// Whatever the client renders, the server reads back as the same number of tokens,
    /// one written token per read token.
    #[test]
    fn rendered_tokens_read_back_one_for_one() {
        for cpt in [1, 2, 4, 13, 64] {
            let c = Codec::new(cpt);
            let mut text = String::new();
            for p in 0..10 {
                c.push_content(&mut text, 5, p);
            }
            for k in 0..10 {
                c.push_filler(&mut text, k);
            }
            assert_eq!(text.chars().count(), 20 * cpt as usize);
            assert_eq!(c.count(&text), 20);
            let toks: Vec<&str> = c.tokens(&text).collect();
            let mut first = String::new();
            c.push_content(&mut first, 5, 0);
            assert_eq!(toks[0], first);
            assert!(text.chars().all(|ch| ch == ' ' || ch.is_ascii_lowercase()));
        }
        let (mut x, mut y) = (String::new(), String::new());
        Codec::new(4).push_content(&mut x, 1, 0);
        Codec::new(4).push_content(&mut y, 2, 0);
        assert_ne!(x, y, "sources differ");
    }

    #[test]
    fn fingerprints_name_the_backend() {
        assert_eq!(backend_of_fingerprint(&fingerprint("backend-3")), Some("backend-3"));
        assert_eq!(backend_of_fingerprint("fp_44709d6fcb"), None);
    }
}
