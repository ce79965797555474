//! One member of the family: a fleet and its traffic drawn from the family's distribution,
//! written as an ordinary scenario file (so any member can be rerun with `sim run`).

use std::fmt::Write as _;

use crate::dist::uniform_index;
use crate::rng::{SimRng, stream};

/// Uniform in `lo..=hi`.
fn between(r: &mut SimRng, lo: u32, hi: u32) -> u32 {
    lo + uniform_index(r, (hi - lo + 1) as usize) as u32
}

/// One of `v`, uniformly.
fn one_of<T: Copy>(r: &mut SimRng, v: &[T]) -> T {
    v[uniform_index(r, v.len())]
}

/// The prefix-aware threshold every member uses, in characters (4096 tokens at 4 characters
/// per token: the #957 recommendation for a 2000-token system prompt). The shared prefix is
/// drawn around it instead.
pub const THRESHOLD_CHARS: u64 = 16_384;

/// Tokens of [`THRESHOLD_CHARS`] at the members' 4 characters per token.
pub const THRESHOLD_TOKENS: u32 = 4096;

/// The engine slots a member may give one backend (the capacity rules' normalisation is
/// exact up to 16).
const MAX_SLOTS: u32 = 16;

/// How the agent sessions arrive.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Arrival {
    /// All within 1 s at t = 60 s.
    Burst,
    /// Half at t = 60 s, half `gap_s` later (a second team's wave while the first is in
    /// flight).
    Waves { gap_s: u32 },
    /// Poisson from t = 60 s over about `span_s` seconds.
    Poisson { span_s: u32 },
}

impl Arrival {
    fn label(self) -> String {
        match self {
            Arrival::Burst => "burst".into(),
            Arrival::Waves { gap_s } => format!("waves+{gap_s}s"),
            Arrival::Poisson { span_s } => format!("poisson/{span_s}s"),
        }
    }
}

/// A backend group: `count` engines of `profile` with `slots` each.
#[derive(Clone, Debug, PartialEq)]
pub struct Group {
    /// `h100` or `a100`.
    pub name: &'static str,
    /// Backends.
    pub count: u32,
    /// `--max-num-seqs`.
    pub slots: u32,
}

/// A drawn member.
#[derive(Clone, Debug, PartialEq)]
pub struct Setup {
    /// Index in the family (its random stream).
    pub index: u64,
    /// Backend groups in discovery order (one for equal hardware, fast then slow for mixed).
    pub groups: Vec<Group>,
    /// `--engine-stats-interval`, seconds.
    pub scrape_s: u32,
    /// The agents' arrival offset in the scrape window, in [0, 1).
    pub phase: f64,
    /// Agent sessions.
    pub agents: u32,
    /// How they arrive.
    pub arrival: Arrival,
    /// Turns per agent session: uniform in `turns.0..=turns.1`.
    pub turns: (u32, u32),
    /// The agents' shared system prompt, tokens (around [`THRESHOLD_TOKENS`]).
    pub system_prompt_tokens: u32,
    /// Background chat users (each pastes a document, then chats in short turns).
    pub chat_users: u32,
}

impl Setup {
    /// Draws member `index` of the family seeded `seed` (each member from its own stream, so
    /// a member does not depend on how many are drawn).
    pub fn draw(seed: u64, index: u64) -> Setup {
        let mut r = stream(seed, "family", index);
        let n = between(&mut r, 2, 16);
        let mixed = uniform_index(&mut r, 2) == 1;
        let groups = if mixed {
            let slow_slots = between(&mut r, 1, 3);
            let ratio = one_of(&mut r, &[1.5, 2.0, 3.0, 4.0, 6.0]);
            let fast_slots = ((f64::from(slow_slots) * ratio).round() as u32).clamp(slow_slots + 1, MAX_SLOTS);
            let fast = between(&mut r, 1, n - 1);
            vec![
                Group {
                    name: "h100",
                    count: fast,
                    slots: fast_slots,
                },
                Group {
                    name: "a100",
                    count: n - fast,
                    slots: slow_slots,
                },
            ]
        } else {
            vec![Group {
                name: "h100",
                count: n,
                slots: one_of(&mut r, &[2, 4, 6, 8]),
            }]
        };
        let slots: u32 = groups.iter().map(|g| g.count * g.slots).sum();
        // Agents per slot, 0.50 to 1.25.
        let load = f64::from(between(&mut r, 50, 125)) / 100.0;
        let agents = ((f64::from(slots) * load).round() as u32).max(2);
        let arrival = match uniform_index(&mut r, 3) {
            0 => Arrival::Burst,
            1 => Arrival::Waves {
                gap_s: between(&mut r, 10, 60),
            },
            _ => Arrival::Poisson {
                span_s: between(&mut r, 20, 120),
            },
        };
        let a = between(&mut r, 2, 40);
        let b = between(&mut r, 2, 40);
        Setup {
            index,
            groups,
            scrape_s: one_of(&mut r, &[1, 2, 5, 10, 15, 20, 30]),
            phase: f64::from(between(&mut r, 0, 7)) / 8.0,
            agents,
            arrival,
            turns: (a.min(b), a.max(b)),
            system_prompt_tokens: between(&mut r, THRESHOLD_TOKENS / 4, THRESHOLD_TOKENS * 3 / 2) / 100 * 100,
            chat_users: between(&mut r, 0, 4),
        }
    }

    /// True if the backends differ in slots.
    pub fn mixed(&self) -> bool {
        self.groups.len() > 1
    }

    /// Backends.
    pub fn backends(&self) -> u32 {
        self.groups.iter().map(|g| g.count).sum()
    }

    /// Scenario name: `family-007`.
    pub fn name(&self) -> String {
        format!("family-{:03}", self.index)
    }

    /// One line: `4x6 h100 + 4x2 a100, 32 agents burst, 2-20 turns, prefix 2000 tok, 2 chat, scrape 10 s @0.50`.
    pub fn describe(&self) -> String {
        let fleet: Vec<String> = self
            .groups
            .iter()
            .map(|g| format!("{}x{} {}", g.count, g.slots, g.name))
            .collect();
        format!(
            "{}, {} agents {}, {}-{} turns, prefix {} tok, {} chat, scrape {} s @{:.2}",
            fleet.join(" + "),
            self.agents,
            self.arrival.label(),
            self.turns.0,
            self.turns.1,
            self.system_prompt_tokens,
            self.chat_users,
            self.scrape_s,
            self.phase
        )
    }

    /// The scenario file (router policy: production-stack main, which each candidate
    /// replaces).
    pub fn scenario_toml(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "# fleetsim family member {}: {}", self.index, self.describe());
        let _ = writeln!(s, "name = \"{}\"\nseed = 1\n", self.name());
        let _ = writeln!(s, "[backends]\nmodel = \"vllm\"\n");
        for g in &self.groups {
            let _ = writeln!(
                s,
                "[[backends.groups]]\nname = \"{}\"\ncount = {}\nprofile = \"llama-3.1-8b/{}/tp1\"\nmax_num_seqs = {}\nmax_num_batched_tokens = 8192\n",
                g.name, g.count, g.name, g.slots
            );
        }
        let _ = writeln!(
            s,
            "[network]\ndispatch_latency_s = 0.002\nresponse_latency_s = 0.001\n\n[router]\nengine_stats_interval_s = {}\nengine_stats_phase = {}\nscrape_duration_s = 0\nrequest_stats_window_s = 60\nchars_per_token = 4\n",
            self.scrape_s, self.phase
        );
        let _ = writeln!(
            s,
            "[router.policy]\nkind = \"prefixaware\"\nprefix_min_match_length = {THRESHOLD_CHARS}\nfallback = \"qps\"\n"
        );
        if self.chat_users > 0 {
            let _ = writeln!(
                s,
                "[[workload.groups]]\nname = \"chat\"\nsessions = {}\narrival = {{ kind = \"burst\", at_s = 0, spread_s = 5 }}\nturns = 40\nsystem_prompt_tokens = 300\nsystem_prompt = \"chat-ui\"\nfirst_input_tokens = 5000\ninput_tokens = {{ dist = \"uniform\", min = 20, max = 80 }}\noutput_tokens = {{ dist = \"uniform\", min = 60, max = 160 }}\nthink_time_s = {{ dist = \"exponential\", mean = 2.0 }}\n",
                self.chat_users
            );
        }
        let waves: Vec<(u32, String)> = match self.arrival {
            Arrival::Burst => vec![(self.agents, "{ kind = \"burst\", at_s = 60, spread_s = 1.0 }".into())],
            Arrival::Waves { gap_s } => {
                let first = self.agents.div_ceil(2);
                vec![
                    (first, "{ kind = \"burst\", at_s = 60, spread_s = 1.0 }".into()),
                    (
                        self.agents - first,
                        format!("{{ kind = \"burst\", at_s = {}, spread_s = 1.0 }}", 60 + gap_s),
                    ),
                ]
            }
            Arrival::Poisson { span_s } => vec![(
                self.agents,
                format!(
                    "{{ kind = \"poisson\", start_s = 60, rate_per_s = {:.4} }}",
                    f64::from(self.agents) / f64::from(span_s)
                ),
            )],
        };
        let turns = match self.turns {
            (a, b) if a == b => a.to_string(),
            (a, b) => format!("{{ dist = \"uniform\", min = {a}, max = {b} }}"),
        };
        for (i, (n, arrival)) in waves.into_iter().enumerate().filter(|(_, (n, _))| *n > 0) {
            let _ = writeln!(
                s,
                "[[workload.groups]]\nname = \"agents-{i}\"\nsessions = {n}\narrival = {arrival}\nturns = {turns}\nsystem_prompt_tokens = {}\nsystem_prompt = \"agent\"\nfirst_input_tokens = 1000\ninput_tokens = {{ dist = \"uniform\", min = 500, max = 1500 }}\noutput_tokens = {{ dist = \"uniform\", min = 300, max = 900 }}\nthink_time_s = {{ dist = \"exponential\", mean = 1.0 }}\n",
                self.system_prompt_tokens
            );
        }
        s
    }
}
