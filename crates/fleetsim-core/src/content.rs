//! What a request's tokens *are*, abstractly, so caches can tell prefixes apart.
//!
//! The simulator never materialises text. A request's token sequence (prompt, then output)
//! is a list of [`Segment`]s, each a run of positions `start..start+len` of one content
//! *source*: a shared system prompt, a session's append-only conversation stream, or (for
//! replayed traces) one hashed block. Two requests share a prefix exactly when their
//! segment lists agree up to that point, which is what real token ids would give.
//!
//! From this, two derived views are hashed:
//! * the engine's prefix cache: chained hashes of full `block_size_tokens` blocks
//!   (vLLM: `hash(parent_hash, block token ids)`), see [`block_hashes`];
//! * production-stack's `HashTrie`: the prompt *string* cut into fixed 128-character
//!   chunks, each hashed on its own (upstream: `xxh64(chunk)`), see [`char_chunk_hashes`].
//!   A token is `chars_per_token` characters long, so a chunk covers
//!   `128 / chars_per_token` tokens when that divides evenly, and straddles tokens
//!   (hashed at character granularity) when it does not. The last chunk may be partial,
//!   exactly like upstream's last slice. A chat-completions request's string is its
//!   messages' contents joined with `"\n"` (`routing_logic.py` @ `a6c01db0` L477-495):
//!   with [`Content::message_ends`] set, one separator character follows every message but the
//!   last, so lengths and chunk boundaries shift as upstream's do.
//!
//! Token counts read from input become `u32` through one checked conversion,
//! [`checked_tokens`] (whole, at least a minimum, at most [`MAX_REQUEST_TOKENS`]), and
//! sums of them through [`checked_total`]: nothing wraps, and nothing is sized by a count
//! past that bound.
//!
//! Owns: the abstract token content and its hashes, token counts from input. May not see: backends or policies'
//! state. Invariant: equal prefixes hash equally, in any cache that reads them.

use std::sync::{Arc, Mutex};

use smallvec::SmallVec;

/// A run of `len` consecutive positions `start..start + len` of content source `source`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Segment {
    /// Identity of the content stream (a hash of its name).
    pub source: u64,
    /// First position within the source.
    pub start: u32,
    /// Number of tokens.
    pub len: u32,
}

/// The OpenAI API a group's requests use, as the router sees the body.
/// Parsed from its scenario name; the default is `chat`: agents (and production-stack's
/// own examples) call `/v1/chat/completions` (see docs/burst8-atlas.md).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum RequestApi {
    /// `/v1/chat/completions` with `messages`: production-stack's `kvaware` and
    /// `loadaware` tokenize only `prompt` and fall back; `PrefixAwareRouter` joins the
    /// messages' contents with `"\n"`.
    #[default]
    Chat,
    /// `/v1/completions` with one `prompt` string (the conversation as the client
    /// templated it; no separators modelled).
    Completions,
}

impl RequestApi {
    /// Name as written in scenarios.
    pub fn as_str(self) -> &'static str {
        match self {
            RequestApi::Chat => "chat",
            RequestApi::Completions => "completions",
        }
    }
}

impl<'de> serde::Deserialize<'de> for RequestApi {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        [RequestApi::Chat, RequestApi::Completions]
            .into_iter()
            .find(|a| a.as_str() == s)
            .ok_or_else(|| {
                serde::de::Error::custom(format!(
                    "unknown request API `{s}`; expected `chat` (`messages`) or `completions` (`prompt`)"
                ))
            })
    }
}

/// A request's full token sequence: `prompt_tokens` of prompt followed by `output_tokens`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Content {
    /// Segments covering exactly `prompt_tokens + output_tokens` tokens, in order.
    pub segments: SmallVec<[Segment; 2]>,
    /// Prompt length in tokens.
    pub prompt_tokens: u32,
    /// Output length in tokens.
    pub output_tokens: u32,
    /// A chat-completions request's token positions where its messages end (sorted; those
    /// at or beyond the prompt's end are ignored); `None` for a completions request, one
    /// `prompt` string. The API is told by this alone ([`Content::api`]).
    pub message_ends: Option<Arc<[u32]>>,
    /// The session's block-hash memo, shared by its turns (see [`ChainMemo`]); it only
    /// saves work, never changes a hash, and takes no part in equality.
    pub memo: MemoLink,
}

/// A session's most recent block-hash chains, one per block size, shared by the contents of
/// its turns: a later turn's prompt extends an earlier turn's tokens, so
/// [`block_hashes`] reuses every memoised block that lies wholly inside the tokens the two
/// contents have in common and hashes only the rest. Without it each turn rehashes its
/// whole context, O(turns^2) over a session.
#[derive(Debug, Default)]
pub struct ChainMemo {
    chains: Mutex<SmallVec<[MemoChain; 1]>>,
    /// The character-chunk hashes of the latest prompt a router hashed
    /// ([`char_chunk_hashes`]); a later turn's prompt string extends it.
    chunks: Mutex<Option<MemoChunks>>,
}

/// The memoised character-chunk hashes of one prompt string: the full chunks of the
/// string of `segments` cut at `prompt_tokens`, with separators after `seps`.
#[derive(Debug)]
struct MemoChunks {
    /// `(chars_per_token, chunk_chars, join_messages)` of the hashing.
    key: (u32, u32, bool),
    segments: SmallVec<[Segment; 2]>,
    prompt_tokens: u32,
    /// The separators hashed (message ends below `prompt_tokens`; empty without joining).
    seps: Vec<u32>,
    /// Hashes of the string's full chunks.
    hashes: Vec<u64>,
}

/// One memoised chain: the hashes of the first full blocks of `segments`.
#[derive(Debug)]
struct MemoChain {
    block_size: u32,
    segments: SmallVec<[Segment; 2]>,
    hashes: Vec<u64>,
}

/// [`Content::memo`]: an optional shared [`ChainMemo`]; all links compare equal.
#[derive(Clone, Debug, Default)]
pub struct MemoLink(pub Option<Arc<ChainMemo>>);

impl PartialEq for MemoLink {
    fn eq(&self, _: &MemoLink) -> bool {
        true
    }
}

impl Eq for MemoLink {}

/// Tokens at the start of two segment lists that are certainly the same tokens, cut the
/// same way (a block hash hashes its pieces, so equal tokens cut at other segment
/// boundaries would hash differently): equal segments, then the shorter of a last pair
/// that starts alike.
fn common_prefix_tokens(a: &[Segment], b: &[Segment]) -> u64 {
    let mut common = 0u64;
    for (x, y) in a.iter().zip(b) {
        if x.source != y.source || x.start != y.start {
            break;
        }
        common += u64::from(x.len.min(y.len));
        if x.len != y.len {
            break;
        }
    }
    common
}

/// Content source of the `"\n"` between two chat messages.
const SEPARATOR_SOURCE: u64 = 0x5E9A_7A70_0000_000A;

/// A stable 64-bit id for a named content source.
pub fn source_id(kind: &str, name: &str, index: u64) -> u64 {
    let mut h = 0x243F_6A88_85A3_08D3u64;
    for b in kind.bytes().chain([0xff]).chain(name.bytes()) {
        h = mix(h, u64::from(b));
    }
    mix(h, index)
}

/// One mixing step (murmur3 finaliser over an xor-rotate); deterministic everywhere.
#[inline]
pub fn mix(h: u64, x: u64) -> u64 {
    let mut k = h.rotate_left(27) ^ x.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    k ^= k >> 33;
    k = k.wrapping_mul(0xff51_afd7_ed55_8ccd);
    k ^= k >> 33;
    k = k.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    k ^ (k >> 33)
}

impl Content {
    /// The usual multi-turn shape: an optional shared prefix, then a prefix of the session's
    /// own stream which the output continues.
    pub fn session_turn(
        shared: Option<(u64, u32)>,
        session_source: u64,
        session_prompt_tokens: u32,
        output_tokens: u32,
    ) -> Content {
        let mut segments = SmallVec::new();
        let mut prompt_tokens = session_prompt_tokens;
        if let Some((src, len)) = shared
            && len > 0
        {
            segments.push(Segment {
                source: src,
                start: 0,
                len,
            });
            prompt_tokens += len;
        }
        segments.push(Segment {
            source: session_source,
            start: 0,
            len: session_prompt_tokens + output_tokens,
        });
        Content::of_segments(segments, prompt_tokens, output_tokens)
    }

    /// A completions request of `segments`, which cover its prompt and output exactly.
    fn of_segments(segments: SmallVec<[Segment; 2]>, prompt_tokens: u32, output_tokens: u32) -> Content {
        let c = Content {
            segments,
            prompt_tokens,
            output_tokens,
            message_ends: None,
            memo: MemoLink::default(),
        };
        c.assert_consistent();
        c
    }

    /// The same content sent as a chat completion whose messages end at `message_ends`.
    pub fn with_chat(mut self, message_ends: Arc<[u32]>) -> Content {
        self.message_ends = Some(message_ends);
        self
    }

    /// The API the request uses: chat completions exactly when it has messages.
    pub fn api(&self) -> RequestApi {
        if self.message_ends.is_some() {
            RequestApi::Chat
        } else {
            RequestApi::Completions
        }
    }

    /// The same content, sharing the block-hash memo `memo` with its session's other turns.
    pub fn with_memo(mut self, memo: Arc<ChainMemo>) -> Content {
        self.memo = MemoLink(Some(memo));
        self
    }

    /// Message boundaries inside the prompt (each followed by one separator character).
    pub fn separators(&self) -> &[u32] {
        match &self.message_ends {
            Some(ends) => &ends[..ends.partition_point(|&e| e < self.prompt_tokens)],
            None => &[],
        }
    }

    /// Characters of the prompt string: `chars_per_token` per token, plus the `"\n"`
    /// separators of a chat request when `join_messages` (production-stack's
    /// `PrefixAwareRouter`).
    pub fn prompt_chars(&self, chars_per_token: u32, join_messages: bool) -> u64 {
        let seps = if join_messages {
            self.separators().len() as u64
        } else {
            0
        };
        u64::from(self.prompt_tokens) * u64::from(chars_per_token) + seps
    }

    /// A replayed trace request: each of `blocks` (trace block ids, `block_tokens` tokens
    /// each) is its own content source, derived from `(salt, block id)`, so requests whose
    /// block lists agree share exactly that prefix, in the engine's cache (chained hashes of
    /// its own smaller blocks: one 512-token trace block is 32 blocks of 16 tokens, hashed
    /// from the block id and the position within it) and in the router's character trie.
    /// Prompt tokens beyond the whole blocks (a partial last block), and the output, are
    /// unique to the request (`unique`). Blocks beyond the prompt's whole blocks are ignored.
    pub fn trace_blocks(
        blocks: &[u32],
        salt: u64,
        block_tokens: u32,
        unique: u64,
        prompt_tokens: u32,
        output_tokens: u32,
    ) -> Content {
        let bt = block_tokens.max(1);
        let whole = blocks.len().min((prompt_tokens / bt) as usize);
        let sources = blocks[..whole]
            .iter()
            .map(|&b| mix(salt ^ 0x7472_6163_655F_626Bu64, u64::from(b)));
        let tail = mix(salt ^ 0x7472_6163_655F_7571u64, unique);
        Content::blocks_then_tail(sources, bt, tail, prompt_tokens, output_tokens)
    }

    /// A request whose token blocks are named by `keys`, one per full block of
    /// `block_tokens` tokens from the start of its prompt-then-output sequence (a live
    /// server keys each block by a hash of its text, so two requests share exactly the
    /// blocks whose text they share, in the engine's chained hashes). Tokens past the keyed
    /// blocks are a source of their own, `tail`. Keys beyond the sequence's full blocks are
    /// ignored.
    pub fn keyed_blocks(keys: &[u64], block_tokens: u32, tail: u64, prompt_tokens: u32, output_tokens: u32) -> Content {
        let bt = block_tokens.max(1);
        let total = prompt_tokens + output_tokens;
        let whole = keys.len().min((total / bt) as usize);
        Content::blocks_then_tail(keys[..whole].iter().copied(), bt, tail, prompt_tokens, output_tokens)
    }

    /// A request of one `block_tokens` block per source in `sources`, then the rest of its
    /// prompt-then-output sequence from source `tail`.
    fn blocks_then_tail(
        sources: impl ExactSizeIterator<Item = u64>,
        block_tokens: u32,
        tail: u64,
        prompt_tokens: u32,
        output_tokens: u32,
    ) -> Content {
        let whole = sources.len();
        let mut segments = SmallVec::with_capacity(whole + 1);
        for source in sources {
            segments.push(Segment {
                source,
                start: 0,
                len: block_tokens,
            });
        }
        let rest =
            (u64::from(prompt_tokens) + u64::from(output_tokens) - whole as u64 * u64::from(block_tokens)) as u32;
        if rest > 0 {
            segments.push(Segment {
                source: tail,
                start: 0,
                len: rest,
            });
        }
        Content::of_segments(segments, prompt_tokens, output_tokens)
    }

    /// Total tokens (prompt + output).
    pub fn total_tokens(&self) -> u32 {
        self.prompt_tokens + self.output_tokens
    }

    fn assert_consistent(&self) {
        let sum: u64 = self.segments.iter().map(|s| u64::from(s.len)).sum();
        assert_eq!(sum, u64::from(self.total_tokens()), "segments do not cover the content");
    }

    /// Calls `f(source, start, len)` for each piece of positions `from..to` (in units where
    /// one token is `unit` units long, e.g. characters), in order. `cursor` (segment index,
    /// its first position) starts the search, and is left at the segment holding `to`, so
    /// consecutive ranges in order cost one pass over the segments, not one pass each.
    fn for_each_piece(
        &self,
        unit: u32,
        from: u64,
        to: u64,
        cursor: &mut (usize, u64),
        mut f: impl FnMut(u64, u64, u64),
    ) {
        let unit = u64::from(unit);
        let (mut idx, mut seg_begin) = *cursor;
        debug_assert!(seg_begin <= from || from >= to, "cursor past the range");
        while let Some(s) = self.segments.get(idx) {
            let seg_end = seg_begin + u64::from(s.len) * unit;
            if seg_end > from && seg_begin < to {
                let a = from.max(seg_begin);
                let b = to.min(seg_end);
                f(s.source, u64::from(s.start) * unit + (a - seg_begin), b - a);
            }
            if seg_end >= to {
                break;
            }
            seg_begin = seg_end;
            idx += 1;
        }
        *cursor = (idx, seg_begin);
    }
}

/// One word naming the run of `len` tokens at position `pos` of `source`, so a block piece
/// costs one [`mix`] rather than one per field (block hashing is on the engine's hot path:
/// a 14k-token prompt has 860 blocks). Injective in `(pos, len)` for a given source (both
/// below 2^32, odd multiplier); sources are themselves 64-bit hashes.
#[inline]
fn piece_word(source: u64, pos: u64, len: u64) -> u64 {
    debug_assert!(pos <= u64::from(u32::MAX) && len <= u64::from(u32::MAX));
    source ^ ((len << 32) | pos).wrapping_mul(0xD6E8_FEB8_6659_FD93)
}

/// First value of every block-hash chain (the parent of block 0).
const CHAIN_ROOT: u64 = 0x5851_F42D_4C95_7F2D;

/// Chained hashes of the first `n_blocks` full blocks of `block_size` tokens. With a
/// [`ChainMemo`], the leading blocks the memo already holds for the same tokens are copied,
/// not rehashed, and the memo then keeps this chain for the session's next turn.
pub fn block_hashes(content: &Content, block_size: u32, n_blocks: usize, out: &mut Vec<u64>) {
    out.clear();
    assert!(n_blocks as u64 * u64::from(block_size) <= u64::from(content.total_tokens()));
    out.reserve(n_blocks);
    let Some(memo) = &content.memo.0 else {
        hash_blocks_from(content, block_size, n_blocks, out);
        return;
    };
    // A poisoned memo only means another thread panicked mid-update; the data is a cache
    // either way, so start it afresh.
    let mut chains = memo.chains.lock().unwrap_or_else(|e| {
        let mut g = e.into_inner();
        g.clear();
        g
    });
    let at = chains.iter().position(|c| c.block_size == block_size);
    let mut stored_usable = 0;
    if let Some(c) = at.map(|i| &chains[i]) {
        let common = common_prefix_tokens(&c.segments, &content.segments);
        stored_usable = ((common / u64::from(block_size)) as usize).min(c.hashes.len());
        out.extend_from_slice(&c.hashes[..stored_usable.min(n_blocks)]);
    }
    hash_blocks_from(content, block_size, n_blocks, out);
    // Keep the chain that covers more: this one, unless the memo holds a longer chain of
    // the same tokens (a router hashing a prompt after the engine hashed prompt + output).
    let keep_stored = at.is_some_and(|i| stored_usable == chains[i].hashes.len() && stored_usable > n_blocks);
    if !keep_stored {
        match at {
            // Into the held chain's buffers: a session's turns reuse one allocation.
            Some(i) => {
                let c = &mut chains[i];
                c.segments.clone_from(&content.segments);
                // The blocks it gave are the same hashes: append only the rest.
                let same = stored_usable.min(n_blocks);
                c.hashes.truncate(same);
                c.hashes.extend_from_slice(&out[same..]);
            }
            None => chains.push(MemoChain {
                block_size,
                segments: content.segments.clone(),
                hashes: out.clone(),
            }),
        }
    }
}

/// Word of a block that continues a run `d` blocks after the run's first block (see
/// [`hash_blocks_from`]).
#[inline]
fn run_word(d: u64) -> u64 {
    RUN_TAG ^ d.wrapping_mul(RUN_STEP)
}

/// Odd multiplier of [`run_word`]'s distance.
const RUN_STEP: u64 = 0xA076_1D64_78BD_642F;

/// Marks [`run_word`]s apart from [`piece_word`]s.
const RUN_TAG: u64 = 0x2D35_8DCC_AA6C_78A5;

/// The run holding block `b - 1`, if that block is one piece (lies wholly inside one
/// segment): `(k, source, next_pos)`, the run's first block, its source and the source
/// position just after block `b - 1`. Depends only on the pieces of blocks `..b`.
fn run_before(content: &Content, bs: u64, b: u64) -> Option<(u64, u64, u64)> {
    if b == 0 {
        return None;
    }
    let end = b * bs;
    // (first block, source, position after the last block, block after the last block)
    let mut run: Option<(u64, u64, u64, u64)> = None;
    let mut seg_begin = 0u64;
    for s in &content.segments {
        let seg_end = seg_begin + u64::from(s.len);
        // Blocks wholly inside this segment, below `b`.
        let (lo, hi) = (seg_begin.div_ceil(bs), (seg_end / bs).min(b));
        if lo < hi {
            let pos = u64::from(s.start) + (lo * bs - seg_begin);
            let next = pos + (hi - lo) * bs;
            run = match run {
                Some((k, src, np, nb)) if nb == lo && src == s.source && np == pos => Some((k, src, next, hi)),
                _ => Some((lo, s.source, next, hi)),
            };
        }
        if seg_end >= end {
            break;
        }
        seg_begin = seg_end;
    }
    run.filter(|r| r.3 == b).map(|(k, src, np, _)| (k, src, np))
}

/// Appends the hashes of blocks `out.len()..n_blocks` of `content` (`out` holds the hashes
/// of the blocks before).
///
/// A block is hashed from its *pieces* (its tokens cut at segment boundaries, each piece
/// one [`piece_word`]), and two blocks must hash equally exactly when they have the same
/// pieces and so do all blocks before them ("the same tokens, cut the same way, from the
/// start", like vLLM's `hash(parent_hash, block token ids)`). A plain chain, one dependent
/// [`mix`] per block, gives that but is latency-bound (about 7 ns a block); a replayed
/// Mooncake prompt has 880 blocks. So blocks are hashed in *runs*: a run is a maximal
/// stretch of consecutive one-piece blocks whose pieces continue each other in one source
/// (block `j + 1` is `(source, p + block_size)` when block `j` is `(source, p)`), which is
/// what a long segment gives; a run may cross a segment boundary lying on a block boundary
/// when the next segment continues the same source. With `h` the hash of the block before
/// (the chain root for block 0):
/// * a block of several pieces: `h` mixed with each piece's word in turn (the chain);
/// * the first block `k` of a run: `mix(h, piece_word(source, p_k, block_size))` (the
///   chain);
/// * block `k + d` of a run, `d >= 1`: `mix(hash of block k, run_word(d))`, independent of
///   blocks `k + 1..k + d`, so a run's blocks are hashed side by side (throughput-bound,
///   about 1-2 ns a block).
///
/// Why the equality relation is the plain chain's: read each hash as the fold of `mix`
/// over a sequence of words (as the chain is over its pieces' words). Block `i`'s sequence
/// is a function of the pieces of blocks `..=i`: the runs are defined by pieces alone
/// (segment boundaries on block boundaries between continuing pieces leave no trace, as
/// in the chain). Conversely the sequence gives back those pieces: piece words are the
/// pieces; a last word `run_word(d)` follows the one piece `(source, p_k)` of the run's
/// first block, and stands for blocks `(source, p_k + j * block_size)`, `j = 1..=d`
/// (by the run's definition). So, for one block size, two blocks' sequences are equal
/// exactly when their pieces from the start are, which is the chain's relation; unequal
/// sequences hash apart up to 64-bit collisions, the assumption every hash here rests on
/// (run words are tagged apart from piece words, as sources are hashes apart). A memo
/// ([`block_hashes`]) resumes mid-run: [`run_before`] finds the run from the pieces, and
/// its first block's hash is among the blocks `out` holds.
fn hash_blocks_from(content: &Content, block_size: u32, n_blocks: usize, out: &mut Vec<u64>) {
    let first = out.len() as u64;
    let n = n_blocks as u64;
    if first >= n {
        return;
    }
    let bs = u64::from(block_size);
    let mut prev = out.last().copied().unwrap_or(CHAIN_ROOT);
    // The run the last hashed block belongs to, if it is one piece: (first block, source,
    // position after it).
    let mut run = run_before(content, bs, first);
    // Find the segment holding the first new block's first token, then walk segments once;
    // a block may span several segments.
    let segs = &content.segments[..];
    let mut seg_idx = 0usize;
    let mut seg_begin = 0u64;
    let mut i = first;
    while i < n {
        let from = i * bs;
        while seg_begin + u64::from(segs[seg_idx].len) <= from {
            seg_begin += u64::from(segs[seg_idx].len);
            seg_idx += 1;
        }
        let s = segs[seg_idx];
        let seg_end = seg_begin + u64::from(s.len);
        if from + bs <= seg_end {
            // Blocks i..hi are one piece each, in this segment.
            let hi = (seg_end / bs).min(n);
            let pos = u64::from(s.start) + (from - seg_begin);
            let (k, next) = match run {
                Some((k, src, np)) if src == s.source && np == pos => (k, i),
                _ => {
                    out.push(mix(prev, piece_word(s.source, pos, bs)));
                    (i, i + 1)
                }
            };
            let anchor = out[k as usize];
            out.extend((next..hi).map(|j| mix(anchor, run_word(j - k))));
            run = Some((k, s.source, pos + (hi - i) * bs));
            prev = *out.last().expect("pushed");
            i = hi;
            continue;
        }
        // A block of several pieces: the chain.
        let to = from + bs;
        let mut h = prev;
        let mut pos = from;
        while pos < to {
            let s = segs[seg_idx];
            let seg_end = seg_begin + u64::from(s.len);
            if pos >= seg_end {
                seg_idx += 1;
                seg_begin = seg_end;
                continue;
            }
            let b = to.min(seg_end);
            h = mix(h, piece_word(s.source, u64::from(s.start) + (pos - seg_begin), b - pos));
            pos = b;
        }
        out.push(h);
        prev = h;
        run = None;
        i += 1;
    }
}

/// Hashes of the prompt's `chunk_chars`-character chunks (the last one possibly partial).
/// With `join_messages`, a chat request's string has one separator character after each
/// message but the last (see [`Content::separators`]).
///
/// With a [`ChainMemo`] whose last prompt string is a prefix of this one (same tokens cut
/// the same way, same separators), its full chunks are copied, not rehashed: a turn's
/// prompt re-sends the whole conversation, so hashing each turn from scratch is O(turns^2)
/// over a session. The memo then keeps this prompt's full chunks.
pub fn char_chunk_hashes(
    content: &Content,
    chars_per_token: u32,
    chunk_chars: u32,
    join_messages: bool,
    out: &mut Vec<u64>,
) {
    out.clear();
    let seps = if join_messages { content.separators() } else { &[] };
    let Some(memo) = &content.memo.0 else {
        chunk_hashes_from(content, chars_per_token, chunk_chars, seps, out);
        return;
    };
    let key = (chars_per_token, chunk_chars, join_messages);
    let mut held = memo.chunks.lock().unwrap_or_else(|e| {
        let mut g = e.into_inner();
        *g = None;
        g
    });
    let mut reused = 0;
    if let Some(m) = held.as_ref()
        && m.key == key
        && m.prompt_tokens <= content.prompt_tokens
        && common_prefix_tokens(&m.segments, &content.segments) >= u64::from(m.prompt_tokens)
        && seps[..seps.partition_point(|&e| e < m.prompt_tokens)] == m.seps[..]
    {
        // The memoised string is a prefix of this one, pieces and separators alike; its
        // full chunks are full chunks here too (this string is at least as long).
        out.extend_from_slice(&m.hashes);
        reused = m.hashes.len();
    }
    chunk_hashes_from(content, chars_per_token, chunk_chars, seps, out);
    let full = (content.prompt_chars(chars_per_token, join_messages) / u64::from(chunk_chars)) as usize;
    let m = held.get_or_insert_with(|| MemoChunks {
        key,
        segments: SmallVec::new(),
        prompt_tokens: 0,
        seps: Vec::new(),
        hashes: Vec::new(),
    });
    m.key = key;
    m.segments.clone_from(&content.segments);
    m.prompt_tokens = content.prompt_tokens;
    m.seps.clear();
    m.seps.extend_from_slice(seps);
    // The memo already holds the chunks it gave.
    m.hashes.truncate(reused);
    m.hashes.extend_from_slice(&out[reused..full]);
}

/// Appends the hashes of chunks `out.len()..` of the prompt string (separators after
/// `seps`); `out` holds the string's first chunks.
fn chunk_hashes_from(content: &Content, chars_per_token: u32, chunk_chars: u32, seps: &[u32], out: &mut Vec<u64>) {
    let cpt = u64::from(chars_per_token);
    let real_total = u64::from(content.prompt_tokens) * cpt;
    let total = real_total + seps.len() as u64;
    let chunk = u64::from(chunk_chars);
    // Chunks, messages and pieces are all visited in order: one cursor each instead of a
    // search from the start per chunk (a long chat session has hundreds of each). Cursors
    // at the start are valid for any first chunk: they only ever move forward.
    let mut segs = (0usize, 0u64);
    let (mut msg, mut msg_begin) = (0usize, 0u64);
    let mut from = out.len() as u64 * chunk;
    while from < total {
        let to = (from + chunk).min(total);
        let mut h = 0x1357_9BDF_2468_ACE0u64;
        let mut piece = |src: u64, start: u64, len: u64| h = mix(mix(mix(h, src), start), len);
        if seps.is_empty() {
            content.for_each_piece(chars_per_token, from, to, &mut segs, &mut piece);
        } else {
            // Message i spans real characters [a, b) at virtual offset + i; its separator
            // follows at virtual b + i.
            let (first, mut a) = (msg, msg_begin);
            for i in first..=seps.len() {
                let b = seps.get(i).map_or(real_total, |&e| u64::from(e) * cpt);
                let (va, vb) = (a + i as u64, b + i as u64);
                if va >= to {
                    break;
                }
                if vb > from && b > a {
                    let (x, y) = (from.max(va), to.min(vb));
                    content.for_each_piece(chars_per_token, x - i as u64, y - i as u64, &mut segs, &mut piece);
                }
                if i < seps.len() && (from..to).contains(&vb) {
                    piece(SEPARATOR_SOURCE, 0, 1);
                }
                if vb < to {
                    // Message i and its separator end in this chunk: later chunks skip it.
                    (msg, msg_begin) = (i + 1, b);
                }
                a = b;
            }
        }
        out.push(h);
        from = to;
    }
}

/// The most tokens one measured or replayed request may hold, prompt and output together
/// (2^24 = 16,777,216): above the longest context of any served model (10M tokens), far
/// below `u32::MAX`, so that a count from a file can neither wrap nor ask the engine model
/// for billions of steps.
pub const MAX_REQUEST_TOKENS: u32 = 1 << 24;

/// Why a number from input is not a token count.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum TokensError {
    /// Not a whole number (or not finite).
    NotWhole(f64),
    /// Below the minimum.
    TooFew {
        /// The count.
        got: f64,
        /// The least accepted.
        min: u32,
    },
    /// More than [`MAX_REQUEST_TOKENS`].
    TooMany(f64),
}

impl std::fmt::Display for TokensError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = |x: f64| crate::time::short(x);
        match *self {
            TokensError::NotWhole(x) => write!(f, "{} is not a whole number of tokens", n(x)),
            TokensError::TooFew { got, min } => write!(f, "{} tokens: at least {min} needed", n(got)),
            TokensError::TooMany(x) => write!(
                f,
                "{} tokens: more than the {MAX_REQUEST_TOKENS} a request may hold",
                n(x)
            ),
        }
    }
}

impl std::error::Error for TokensError {}

/// A token count from input: a whole number from `min` to [`MAX_REQUEST_TOKENS`].
pub fn checked_tokens(x: f64, min: u32) -> Result<u32, TokensError> {
    if !x.is_finite() || x.fract() != 0.0 {
        return Err(TokensError::NotWhole(x));
    }
    if x < f64::from(min) {
        return Err(TokensError::TooFew { got: x, min });
    }
    if x > f64::from(MAX_REQUEST_TOKENS) {
        return Err(TokensError::TooMany(x));
    }
    Ok(x as u32)
}

/// `a + b` tokens (a request's prompt and output), if at most [`MAX_REQUEST_TOKENS`].
pub fn checked_total(a: u32, b: u32) -> Result<u32, TokensError> {
    match a.checked_add(b) {
        Some(t) if t <= MAX_REQUEST_TOKENS => Ok(t),
        _ => Err(TokensError::TooMany(f64::from(a) + f64::from(b))),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn token_counts_are_checked_without_wrapping() {
        use super::{MAX_REQUEST_TOKENS, checked_tokens, checked_total};
        assert_eq!(checked_tokens(20.0, 1), Ok(20));
        assert_eq!(checked_tokens(0.0, 0), Ok(0));
        for (x, want) in [
            (0.0, "at least 1"),
            (0.5, "not a whole number"),
            (f64::NAN, "not a whole number"),
            (4294967295.0, "more than the 16777216"),
            (1e300, "1e300 tokens"),
        ] {
            let e = checked_tokens(x, 1).unwrap_err().to_string();
            assert!(e.contains(want), "{x}: {e}");
        }
        assert_eq!(checked_total(10, 20), Ok(30));
        assert!(checked_total(MAX_REQUEST_TOKENS, 1).is_err());
        assert!(checked_total(u32::MAX, u32::MAX).is_err());
    }

    use super::*;
    use proptest::strategy::Strategy as _;

    fn turn(sys: u32, session: u64, prompt: u32, out: u32) -> Content {
        Content::session_turn(Some((source_id("sys", "a", 0), sys)), session, prompt, out)
    }

    #[test]
    fn later_turn_shares_earlier_prefix_blocks() {
        // Turn 1: 40 prompt + 10 output; turn 2's prompt is turn 1's tokens plus 30 new ones.
        let t1 = turn(32, 7, 40, 10);
        let t2 = turn(32, 7, 80, 5);
        let (mut h1, mut h2) = (Vec::new(), Vec::new());
        block_hashes(&t1, 16, 5, &mut h1); // 82 tokens -> 5 full blocks
        block_hashes(&t2, 16, 7, &mut h2);
        assert_eq!(h1[..5], h2[..5]);
        // Another session with the same system prompt shares only the 2 system blocks.
        let other = turn(32, 8, 80, 5);
        let mut h3 = Vec::new();
        block_hashes(&other, 16, 7, &mut h3);
        assert_eq!(h3[..2], h2[..2]);
        assert_ne!(h3[2], h2[2]);
    }

    #[test]
    fn chunks_match_upstream_slicing() {
        // 4 chars/token: a 128-char chunk is 32 tokens; prompt 100 tokens = 400 chars =
        // 3 full chunks + one 16-char partial chunk.
        let a = Content::session_turn(None, 1, 100, 5);
        let mut ca = Vec::new();
        char_chunk_hashes(&a, 4, 128, false, &mut ca);
        assert_eq!(ca.len(), 4);
        let b = Content::session_turn(None, 1, 140, 5);
        let mut cb = Vec::new();
        char_chunk_hashes(&b, 4, 128, false, &mut cb);
        assert_eq!(cb.len(), 5);
        assert_eq!(ca[..3], cb[..3]);
        // The partial chunk differs from the full chunk at the same position.
        assert_ne!(ca[3], cb[3]);
    }

    #[test]
    fn chunks_straddle_tokens_when_not_divisible() {
        // 3 chars per token: chunk boundaries fall inside tokens; hashing still agrees on
        // shared prefixes.
        let a = Content::session_turn(None, 1, 100, 1);
        let b = Content::session_turn(None, 1, 200, 1);
        let (mut ca, mut cb) = (Vec::new(), Vec::new());
        char_chunk_hashes(&a, 3, 128, false, &mut ca);
        char_chunk_hashes(&b, 3, 128, false, &mut cb);
        assert_eq!(ca.len(), 3); // 300 chars
        assert_eq!(ca[..2], cb[..2]);
    }

    #[test]
    fn trace_blocks_share_exactly_the_common_block_prefix() {
        // 512-token trace blocks; 16-token engine blocks: 32 engine blocks per trace block.
        let a = Content::trace_blocks(&[3, 4, 5], 9, 512, 0, 1400, 10); // 2 whole + 376 unique
        let b = Content::trace_blocks(&[3, 4, 6, 7], 9, 512, 1, 2048, 10);
        assert_eq!(a.segments.len(), 3);
        assert_eq!(b.segments.len(), 5);
        let (mut ha, mut hb) = (Vec::new(), Vec::new());
        block_hashes(&a, 16, 64 + 23, &mut ha);
        block_hashes(&b, 16, 128, &mut hb);
        assert_eq!(ha[..64], hb[..64]);
        assert_ne!(ha[64], hb[64]);
        // The router's 128-character chunks agree on the same 1024 tokens (4 chars/token).
        let (mut ca, mut cb) = (Vec::new(), Vec::new());
        char_chunk_hashes(&a, 4, 128, false, &mut ca);
        char_chunk_hashes(&b, 4, 128, false, &mut cb);
        assert_eq!(ca[..32], cb[..32]);
        assert_ne!(ca[32], cb[32]);
        // Another salt (another replay) shares nothing.
        let c = Content::trace_blocks(&[3, 4, 5], 10, 512, 0, 1400, 10);
        let mut hc = Vec::new();
        block_hashes(&c, 16, 1, &mut hc);
        assert_ne!(hc[0], ha[0]);
    }

    /// One turn of the memo proptests' session: `kind` 0 with a shared system prompt, 1
    /// without, else a trace replay whose blocks repeat.
    fn memo_test_turn(kind: u32, prompt: u32, out: u32) -> Content {
        match kind {
            0 => Content::session_turn(Some((source_id("sys", "a", 0), 20)), 7, prompt, out),
            1 => Content::session_turn(None, 7, prompt, out),
            _ => {
                let blocks: Vec<u32> = (0..prompt / 32).map(|b| b % 5).collect();
                Content::trace_blocks(&blocks, 3, 32, u64::from(out), prompt, out)
            }
        }
    }

    /// Hashes without any memo.
    fn plain_hashes(c: &Content, bs: u32, n: usize) -> Vec<u64> {
        let mut plain = c.clone();
        plain.memo = MemoLink::default();
        let mut out = Vec::new();
        block_hashes(&plain, bs, n, &mut out);
        out
    }

    proptest::proptest! {
        /// A memo shared by a session's turns (growing, shrinking or diverging contents,
        /// prompt-only and whole-content chains, two block sizes) never changes a hash.
        #[test]
        fn memoised_chains_equal_fresh_ones(
            turns in proptest::collection::vec((0u32..3, 1u32..300, 0u32..40, proptest::bool::ANY, 0u8..3), 1..12),
        ) {
            let memo = Arc::new(ChainMemo::default());
            for (kind, prompt, out, prompt_only, bs_pick) in turns {
                let c = memo_test_turn(kind, prompt, out).with_memo(memo.clone());
                let bs = [16, 8, 5][bs_pick as usize];
                let tokens = if prompt_only { c.prompt_tokens } else { c.total_tokens() };
                let n = (tokens / bs) as usize;
                let mut got = Vec::new();
                block_hashes(&c, bs, n, &mut got);
                proptest::prop_assert_eq!(&got, &plain_hashes(&c, bs, n));
            }
        }
    }

    /// The plain chain the run hashing replaced: one dependent [`mix`] per piece, from the
    /// start. Its equality relation is the one the run hashes must keep.
    fn chained_reference(content: &Content, block_size: u32, n_blocks: usize) -> Vec<u64> {
        let bs = u64::from(block_size);
        let mut out = Vec::new();
        let mut h = CHAIN_ROOT;
        for i in 0..n_blocks as u64 {
            content.for_each_piece(1, i * bs, (i + 1) * bs, &mut (0, 0), |src, start, len| {
                h = mix(h, piece_word(src, start, len));
            });
            out.push(h);
        }
        out
    }

    /// A content from generated `(source, start, len)` segments (lengths may be 0).
    fn content_of(segs: &[(u64, u32, u32)]) -> Content {
        let segments: SmallVec<[Segment; 2]> = segs
            .iter()
            .map(|&(source, start, len)| Segment { source, start, len })
            .collect();
        let total: u32 = segments.iter().map(|s| s.len).sum();
        Content {
            segments,
            prompt_tokens: total,
            output_tokens: 0,
            message_ends: None,
            memo: MemoLink::default(),
        }
    }

    /// Segments drawn from few sources and positions, so that contents often share pieces,
    /// continue each other across segment boundaries, or cut the same tokens differently.
    fn segment_list() -> impl proptest::strategy::Strategy<Value = Vec<(u64, u32, u32)>> {
        proptest::collection::vec((0u64..3, (0u32..6).prop_map(|x| x * 8), 0u32..40), 1..8)
    }

    proptest::proptest! {
        /// Run hashing keeps the chain's equality relation: for every pair of blocks, of one
        /// content or of two, equal run hashes exactly when equal chained hashes; a memo
        /// resuming mid-run (after a shorter prefix of the same pieces) changes nothing.
        #[test]
        fn run_hashes_equal_exactly_when_chained_hashes_do(
            a in segment_list(),
            b in segment_list(),
            bs in 1u32..20,
            cut in 0usize..40,
        ) {
            let (ca, cb) = (content_of(&a), content_of(&b));
            let (na, nb) = ((ca.total_tokens() / bs) as usize, (cb.total_tokens() / bs) as usize);
            let (ra, rb) = (chained_reference(&ca, bs, na), chained_reference(&cb, bs, nb));
            let (mut ha, mut hb) = (Vec::new(), Vec::new());
            block_hashes(&ca, bs, na, &mut ha);
            block_hashes(&cb, bs, nb, &mut hb);
            let all_r: Vec<u64> = ra.iter().chain(&rb).copied().collect();
            let all_h: Vec<u64> = ha.iter().chain(&hb).copied().collect();
            for x in 0..all_r.len() {
                for y in 0..all_r.len() {
                    proptest::prop_assert_eq!(all_r[x] == all_r[y], all_h[x] == all_h[y], "blocks {} and {}", x, y);
                }
            }
            // Resuming from any prefix of the hashes (as the memo does) gives the same.
            let cut = cut.min(na);
            let mut resumed = ha[..cut].to_vec();
            hash_blocks_from(&ca, bs, na, &mut resumed);
            proptest::prop_assert_eq!(resumed, ha);
        }
    }

    #[test]
    fn a_run_crosses_a_continuing_segment_boundary_like_the_chain() {
        // [S 0..16][S 16..32] and [S 0..32] are the same tokens cut at a block boundary:
        // equal blocks, as in the chain; [S 0..8][S 8..32] cuts block 0 and differs.
        let one = content_of(&[(1, 0, 32)]);
        let two = content_of(&[(1, 0, 16), (1, 16, 16)]);
        let cut = content_of(&[(1, 0, 8), (1, 8, 24)]);
        let h = |c: &Content| {
            let mut v = Vec::new();
            block_hashes(c, 16, 2, &mut v);
            v
        };
        assert_eq!(h(&one), h(&two));
        assert_ne!(h(&one)[0], h(&cut)[0]);
        assert_ne!(h(&one)[1], h(&cut)[1]);
        // A segment starting again at the same source position does not continue the run.
        let again = content_of(&[(1, 0, 16), (1, 0, 16)]);
        assert_ne!(h(&again)[1], h(&one)[1]);
    }

    #[test]
    fn a_later_turn_reuses_the_earlier_chain() {
        let memo = Arc::new(ChainMemo::default());
        let t1 = turn(32, 7, 40, 10).with_memo(memo.clone());
        let mut h = Vec::new();
        block_hashes(&t1, 16, 5, &mut h);
        let t2 = turn(32, 7, 80, 5).with_memo(memo.clone());
        block_hashes(&t2, 16, 7, &mut h);
        assert_eq!(h, plain_hashes(&t2, 16, 7));
        let chains = memo.chains.lock().unwrap();
        assert_eq!(
            (chains.len(), chains[0].hashes.len()),
            (1, 7),
            "the memo keeps the longer chain"
        );
        // Segments [sys 32][session 0..50] and [sys 32][session 0..85] share 32 + 50 tokens.
        assert_eq!(common_prefix_tokens(&t1.segments, &t2.segments), 32 + 50);
    }

    #[test]
    fn segments_cover_content() {
        let c = turn(10, 3, 20, 4);
        assert_eq!(c.prompt_tokens, 30);
        assert_eq!(c.total_tokens(), 34);
    }

    /// The per-chunk search from the start that [`char_chunk_hashes`] replaced with
    /// cursors: the reference it must agree with.
    fn chunk_hashes_searching(content: &Content, cpt: u32, chunk_chars: u32, join: bool) -> Vec<u64> {
        // A fresh cursor per call: every range is searched from the first segment.
        let pieces = |from: u64, to: u64, f: &mut dyn FnMut(u64, u64, u64)| {
            content.for_each_piece(cpt, from, to, &mut (0, 0), f);
        };
        let cptu = u64::from(cpt);
        let real_total = u64::from(content.prompt_tokens) * cptu;
        let seps = if join { content.separators() } else { &[] };
        let total = real_total + seps.len() as u64;
        let mut out = Vec::new();
        let mut from = 0u64;
        while from < total {
            let to = (from + u64::from(chunk_chars)).min(total);
            let mut h = 0x1357_9BDF_2468_ACE0u64;
            let mut piece = |src: u64, start: u64, len: u64| h = mix(mix(mix(h, src), start), len);
            if seps.is_empty() {
                pieces(from, to, &mut piece);
            } else {
                let mut a = 0u64;
                for i in 0..=seps.len() {
                    let b = seps.get(i).map_or(real_total, |&e| u64::from(e) * cptu);
                    let (va, vb) = (a + i as u64, b + i as u64);
                    if va >= to {
                        break;
                    }
                    if vb > from && b > a {
                        pieces(from.max(va) - i as u64, to.min(vb) - i as u64, &mut piece);
                    }
                    if i < seps.len() && (from..to).contains(&vb) {
                        piece(SEPARATOR_SOURCE, 0, 1);
                    }
                    a = b;
                }
            }
            out.push(h);
            from = to;
        }
        out
    }

    proptest::proptest! {
        #[test]
        fn chunk_cursors_give_the_searched_hashes(
            segs in proptest::collection::vec((0u64..4, 0u32..50, 1u32..40), 1..12),
            ends in proptest::collection::vec(0u32..400, 0..14),
            cpt in 1u32..7,
            chunk in 1u32..300,
            chat in proptest::bool::ANY,
            out_tokens in 0u32..20,
        ) {
            let segments: SmallVec<[Segment; 2]> =
                segs.iter().map(|&(source, start, len)| Segment { source, start, len }).collect();
            let total: u32 = segments.iter().map(|s| s.len).sum();
            let out_tokens = out_tokens.min(total - 1);
            let mut ends = ends;
            ends.sort_unstable();
            let c = Content {
                segments,
                prompt_tokens: total - out_tokens,
                output_tokens: out_tokens,
                    message_ends: None,
                memo: MemoLink::default(),
            };
            let c = if chat { c.with_chat(Arc::from(ends)) } else { c };
            for join in [false, true] {
                let mut got = Vec::new();
                char_chunk_hashes(&c, cpt, chunk, join, &mut got);
                proptest::prop_assert_eq!(got, chunk_hashes_searching(&c, cpt, chunk, join));
            }
        }
    }

    proptest::proptest! {
        /// A memo shared by a session's prompts (growing, shrinking or diverging tokens,
        /// message ends added, moved or dropped, the hashing parameters switched) never
        /// changes a chunk hash.
        #[test]
        fn memoised_chunks_equal_fresh_ones(
            session_ends in proptest::collection::vec(0u32..320, 0..10),
            pick in 0u8..3,
            join in proptest::bool::ANY,
            turns in proptest::collection::vec((0u32..3, 1u32..300, 0u32..40, 0u8..8), 1..12),
        ) {
            let memo = Arc::new(ChainMemo::default());
            for (kind, prompt, out, alter) in turns {
                // The session's message ends and hashing, mostly as they are; sometimes an
                // end is moved or dropped, the request is not a chat at all, or the chunk
                // size or joining differs.
                let mut ends = session_ends.clone();
                ends.sort_unstable();
                let (mut pick, mut join) = (pick, join);
                match alter {
                    3 if !ends.is_empty() => ends[0] += 1,
                    4 => {
                        ends.pop();
                    }
                    5 => ends.clear(),
                    6 => pick = (pick + 1) % 3,
                    7 => join = !join,
                    _ => {}
                }
                let c = memo_test_turn(kind, prompt, out);
                ends.sort_unstable();
                let c = if ends.is_empty() { c } else { c.with_chat(Arc::from(ends)) };
                let (cpt, chunk) = [(4, 128), (4, 7), (3, 128)][pick as usize];
                let mut plain = c.clone();
                let mut fresh = Vec::new();
                char_chunk_hashes(&plain, cpt, chunk, join, &mut fresh);
                plain.memo = MemoLink(Some(memo.clone()));
                let mut got = Vec::new();
                char_chunk_hashes(&plain, cpt, chunk, join, &mut got);
                proptest::prop_assert_eq!(got, fresh);
            }
        }
    }

    #[test]
    fn a_later_prompt_reuses_the_earlier_chunks() {
        // Turn 1: sys 64 + user 40; turn 2 adds assistant 10 and user 30, as chat.
        let memo = Arc::new(ChainMemo::default());
        let sys = Some((source_id("sys", "a", 0), 64));
        let ends: Arc<[u32]> = Arc::from(vec![64, 104, 114, 144, 150]);
        let t1 = Content::session_turn(sys, 7, 40, 10)
            .with_chat(ends.clone())
            .with_memo(memo.clone());
        let t2 = Content::session_turn(sys, 7, 80, 6)
            .with_chat(ends)
            .with_memo(memo.clone());
        let mut h = Vec::new();
        // 104 tokens and one separator: 417 characters, 3 full chunks of 128.
        char_chunk_hashes(&t1, 4, 128, true, &mut h);
        assert_eq!(memo.chunks.lock().unwrap().as_ref().unwrap().hashes.len(), 3);
        // Poison the memo's first chunk: a reuse shows in the output.
        memo.chunks.lock().unwrap().as_mut().unwrap().hashes[0] ^= 1;
        char_chunk_hashes(&t2, 4, 128, true, &mut h);
        let mut fresh = Vec::new();
        char_chunk_hashes(
            &Content {
                memo: MemoLink::default(),
                ..t2.clone()
            },
            4,
            128,
            true,
            &mut fresh,
        );
        assert_eq!(h[0], fresh[0] ^ 1, "the first chunk came from the memo");
        assert_eq!(h[1..], fresh[1..]);
        // Another chunk size does not reuse it.
        char_chunk_hashes(&t2, 4, 64, true, &mut h);
        let mut fresh64 = Vec::new();
        char_chunk_hashes(
            &Content {
                memo: MemoLink::default(),
                ..t2
            },
            4,
            64,
            true,
            &mut fresh64,
        );
        assert_eq!(h, fresh64);
    }

    #[test]
    fn chat_separators_shift_chunks_like_the_joined_string() {
        // System prompt 64 tokens (256 chars), then a session: user 40 tokens, assistant
        // 10, user 30. As chat, the string is sys + "\n" + u1 + "\n" + a1 + "\n" + u2.
        let sys = Some((source_id("sys", "a", 0), 64));
        let ends: Arc<[u32]> = Arc::from(vec![64, 104, 114, 144, 150]);
        let t2 = Content::session_turn(sys, 7, 80, 6).with_chat(ends.clone());
        assert_eq!(t2.separators(), &[64, 104, 114]);
        assert_eq!(t2.prompt_chars(4, true), 144 * 4 + 3);
        assert_eq!(t2.prompt_chars(4, false), 144 * 4);
        let (mut chat, mut plain) = (Vec::new(), Vec::new());
        char_chunk_hashes(&t2, 4, 128, true, &mut chat);
        char_chunk_hashes(&t2, 4, 128, false, &mut plain);
        // 579 characters: 4 full chunks and a partial one (plain: 576 = 4.5 chunks).
        assert_eq!((chat.len(), plain.len()), (5, 5));
        // The first two chunks are the system prompt alone: unchanged.
        assert_eq!(chat[..2], plain[..2]);
        // The third starts with the separator: shifted.
        assert_ne!(chat[2], plain[2]);
        // Another session with the same system prompt shares the first two chunks and
        // the separator, so its third chunk differs (different user text) but the
        // prefix structure is the same; the next turn of the same session shares every
        // full chunk of this one.
        let t3 = Content::session_turn(sys, 7, 140, 6).with_chat(ends);
        let mut next = Vec::new();
        char_chunk_hashes(&t3, 4, 128, true, &mut next);
        assert_eq!(next[..4], chat[..4]);
        assert_ne!(next[4], chat[4], "the partial last chunk never matches a full one");
        // Completions requests are unaffected by `join_messages`.
        let c = Content::session_turn(sys, 7, 80, 6);
        let mut c1 = Vec::new();
        char_chunk_hashes(&c, 4, 128, true, &mut c1);
        assert_eq!(c1, plain);
    }
}
