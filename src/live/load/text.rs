//! A planned turn as the text a client sends: the content model's tokens rendered as
//! characters by the wire's codec ([`Codec::push_content`]), cut into chat messages or
//! joined into one completions prompt.
//!
//! A token is a word of exactly `chars_per_token` characters drawn from its content source
//! and position, so a server that counts tokens as the codec does sees the plan's token
//! counts, and two requests whose content shares a prefix share exactly that prefix of
//! text: a real router's prefix tree and an emulated engine's prefix cache meet the sharing
//! the simulation models.
//!
//! An assistant message is the text the server streamed back for that turn when the client
//! has it (a real agent sends back what it received), else the content model's own tokens
//! for that output.

use crate::content::Segment;
use crate::ids::SessionId;
use crate::live::wire::Codec;
use crate::workload::{NO_TRACE, RequestApi, SessionPlan, Workload};

/// Who speaks a chat message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// The shared system prompt.
    System,
    /// A user message or tool output.
    User,
    /// The model's reply to an earlier turn.
    Assistant,
}

impl Role {
    /// The OpenAI role name.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
        }
    }
}

/// One message of a turn's prompt, as content segments.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    /// Speaker.
    pub role: Role,
    /// Its tokens.
    pub segments: Vec<Segment>,
    /// For an assistant message: the turn whose output it is (its received text replaces
    /// the segments when known).
    pub reply_of: Option<usize>,
}

/// Appends the tokens of `segments`.
pub fn push_segments(out: &mut String, segments: &[Segment], codec: Codec) {
    for s in segments {
        for p in s.start..s.start + s.len {
            codec.push_content(out, s.source, p);
        }
    }
}

/// The messages of turn `t` of session `s`: the shared system prompt, then per earlier turn
/// its user message and the assistant's reply, then this turn's user message. Replayed
/// trace requests and independent calls are one user message (their content has no
/// conversation structure).
pub fn turn_messages(w: &Workload, s: SessionId, t: usize) -> Vec<Message> {
    let plan = &w.sessions[s.index()];
    let independent = plan.replay.as_deref().is_some_and(|r| r.independent);
    if plan.trace_first != NO_TRACE || independent {
        let c = w.content(s, t);
        return vec![Message {
            role: Role::User,
            segments: clip(&c.segments, c.prompt_tokens),
            reply_of: None,
        }];
    }
    conversation(plan, t)
}

/// [`turn_messages`] of a conversation session (a shared prefix, then its own stream).
fn conversation(plan: &SessionPlan, t: usize) -> Vec<Message> {
    let mut msgs = Vec::with_capacity(2 * t + 2);
    if let Some((src, len)) = plan.shared.filter(|&(_, len)| len > 0) {
        msgs.push(Message {
            role: Role::System,
            segments: vec![Segment {
                source: src,
                start: 0,
                len,
            }],
            reply_of: None,
        });
    }
    let run = |start: u32, end: u32| {
        vec![Segment {
            source: plan.source,
            start,
            len: end.saturating_sub(start),
        }]
    };
    let mut pos = 0u32;
    for (j, turn) in plan.turns.iter().enumerate().take(t + 1) {
        let prompt_end = turn.session_prompt_tokens.max(pos);
        msgs.push(Message {
            role: Role::User,
            segments: run(pos, prompt_end),
            reply_of: None,
        });
        if j == t {
            break;
        }
        let out_end = prompt_end + turn.output_tokens;
        msgs.push(Message {
            role: Role::Assistant,
            segments: run(prompt_end, out_end),
            reply_of: Some(j),
        });
        pos = out_end;
    }
    msgs
}

/// The first `n` tokens of `segments`.
fn clip(segments: &[Segment], n: u32) -> Vec<Segment> {
    let mut left = n;
    let mut out = Vec::new();
    for s in segments {
        if left == 0 {
            break;
        }
        let len = s.len.min(left);
        out.push(Segment { len, ..*s });
        left -= len;
    }
    out
}

/// Renders `msgs` as `(role, text)` pairs; `replies[j]` is turn `j`'s received output.
pub fn render(msgs: &[Message], replies: &[Option<String>], codec: Codec) -> Vec<(Role, String)> {
    msgs.iter()
        .map(|m| {
            let received = m.reply_of.and_then(|j| replies.get(j)).and_then(Option::as_ref);
            let text = match received {
                Some(r) => r.clone(),
                None => {
                    let n: u32 = m.segments.iter().map(|s| s.len).sum();
                    let mut text = String::with_capacity((n * codec.chars_per_token()) as usize);
                    push_segments(&mut text, &m.segments, codec);
                    text
                }
            };
            (m.role, text)
        })
        .filter(|(role, text)| !text.is_empty() || *role != Role::User)
        .collect()
}

/// The JSON body of a streaming request for `msgs` (chat: `messages`; completions: the
/// messages' texts concatenated as one `prompt`), asking for exactly `output_tokens`.
pub fn request_body(
    api: RequestApi,
    model: &str,
    rendered: &[(Role, String)],
    output_tokens: u32,
) -> serde_json::Value {
    let mut body = serde_json::json!({
        "model": model,
        "stream": true,
        "stream_options": { "include_usage": true },
        "max_tokens": output_tokens,
        "min_tokens": output_tokens,
        "ignore_eos": true,
    });
    match api {
        RequestApi::Chat => {
            body["messages"] = rendered
                .iter()
                .map(|(role, text)| serde_json::json!({ "role": role.as_str(), "content": text }))
                .collect();
        }
        RequestApi::Completions => {
            let prompt: String = rendered.iter().map(|(_, t)| t.as_str()).collect();
            body["prompt"] = serde_json::Value::String(prompt);
        }
    }
    body
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::SimDuration;
    use crate::workload::TurnPlan;

    fn plan(turns: &[(u32, u32)]) -> SessionPlan {
        SessionPlan {
            group: 0,
            key: "g-0".into(),
            open_at: crate::time::SimTime::ZERO,
            sends_key: true,
            shared: Some((7, 3)),
            source: 11,
            turns: turns
                .iter()
                .map(|&(p, o)| TurnPlan {
                    think_before: SimDuration::ZERO,
                    session_prompt_tokens: p,
                    output_tokens: o,
                    service: SimDuration::ZERO,
                })
                .collect(),
            hit_context_limit: false,
            open_loop: false,
            trace_first: NO_TRACE,
            model: crate::workload::NO_MODEL,
            replay: None,
            api: RequestApi::Chat,
        }
    }

    #[test]
    fn tokens_are_cpt_characters_and_prefixes_agree() {
        for cpt in [1, 2, 4, 13, 64] {
            let codec = Codec::new(cpt);
            let run = |len| {
                let mut text = String::new();
                push_segments(
                    &mut text,
                    &[Segment {
                        source: 5,
                        start: 0,
                        len,
                    }],
                    codec,
                );
                text
            };
            let (a, b) = (run(10), run(4));
            assert_eq!(a.len(), 10 * cpt as usize);
            assert!(a.starts_with(&b));
        }
    }

    #[test]
    fn conversation_grows_by_the_plan() {
        // Turn 0: 5 own tokens + 4 out; turn 1: 5 + 4 + 2 new = 11, 3 out.
        let p = plan(&[(5, 4), (11, 3)]);
        let m1 = conversation(&p, 1);
        let roles: Vec<Role> = m1.iter().map(|m| m.role).collect();
        assert_eq!(roles, [Role::System, Role::User, Role::Assistant, Role::User]);
        let lens: Vec<u32> = m1.iter().map(|m| m.segments[0].len).collect();
        assert_eq!(lens, [3, 5, 4, 2]);
        let r0 = render(&conversation(&p, 0), &[], Codec::new(4));
        let r1 = render(&m1, &[], Codec::new(4));
        // Turn 1's messages start with turn 0's.
        assert_eq!(r0[..], r1[..2]);
        let tokens: usize = r1.iter().map(|(_, t)| t.len() / 4).sum();
        assert_eq!(tokens, 3 + 11);
        // A received reply replaces the planned one.
        let r1e = render(&m1, &[Some("reply".into())], Codec::new(4));
        assert_eq!(r1e[2].1, "reply");
    }

    #[test]
    fn completions_prompt_is_the_concatenation() {
        let p = plan(&[(5, 4), (11, 3)]);
        let r = render(&conversation(&p, 1), &[], Codec::new(4));
        let b = request_body(RequestApi::Completions, "m", &r, 3);
        assert_eq!(b["prompt"].as_str().unwrap().len(), 14 * 4);
        assert_eq!(b["max_tokens"], 3);
        let c = request_body(RequestApi::Chat, "m", &r, 3);
        assert_eq!(c["messages"].as_array().unwrap().len(), 4);
        assert_eq!(c["messages"][0]["role"], "system");
    }
}
