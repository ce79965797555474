//! One member of the family: a fleet and its traffic drawn from the family's distribution,
//! written as an ordinary scenario file (so any member can be rerun with `sim run`).

use toml_edit::{ArrayOfTables, DocumentMut, InlineTable, Item, Table, Value, value};

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

    /// The member as a scenario (router policy: production-stack main, which each
    /// candidate replaces), its description the file's first line.
    pub fn scenario(&self) -> DocumentMut {
        let mut doc = DocumentMut::new();
        doc.as_table_mut().decor_mut().set_prefix(format!(
            "# fleetsim family member {}: {}\n",
            self.index,
            self.describe()
        ));
        doc["name"] = value(self.name());
        doc["seed"] = value(1);
        doc["backends"] = Item::Table(self.fleet());
        doc["network"] = Item::Table(table([
            ("dispatch_latency_s", 0.002.into()),
            ("response_latency_s", 0.001.into()),
        ]));
        doc["router"] = Item::Table(self.router());
        doc["workload"] = Item::Table(self.workload());
        doc.set_trailing("\n");
        doc
    }

    /// `[backends]`: one group per kind of hardware.
    fn fleet(&self) -> Table {
        let mut groups = ArrayOfTables::new();
        for g in &self.groups {
            groups.push(table([
                ("name", g.name.into()),
                ("count", i64::from(g.count).into()),
                ("profile", format!("llama-3.1-8b/{}/tp1", g.name).into()),
                ("max_num_seqs", i64::from(g.slots).into()),
                ("max_num_batched_tokens", 8192.into()),
            ]));
        }
        let mut t = table([("model", "vllm".into())]);
        t["groups"] = Item::ArrayOfTables(groups);
        t
    }

    /// `[router]` and `[router.policy]`.
    fn router(&self) -> Table {
        let mut t = table([
            ("engine_stats_interval_s", i64::from(self.scrape_s).into()),
            ("engine_stats_phase", shortest(self.phase)),
            ("scrape_duration_s", 0.into()),
            ("request_stats_window_s", 60.into()),
            ("chars_per_token", 4.into()),
        ]);
        t["policy"] = Item::Table(table([
            ("kind", "prefixaware".into()),
            ("prefix_min_match_length", (THRESHOLD_CHARS as i64).into()),
            ("fallback", "qps".into()),
        ]));
        t
    }

    /// `[[workload.groups]]`: the chat users, if any, then the agents' waves.
    fn workload(&self) -> Table {
        let mut groups = ArrayOfTables::new();
        if self.chat_users > 0 {
            groups.push(self.chat());
        }
        for (i, (sessions, arrival)) in self.waves().into_iter().enumerate().filter(|(_, (n, _))| *n > 0) {
            groups.push(self.agents(i, sessions, arrival));
        }
        let mut t = Table::new();
        t.set_implicit(true);
        t["groups"] = Item::ArrayOfTables(groups);
        t
    }

    /// The background chat users: each pastes a document, then chats in short turns.
    fn chat(&self) -> Table {
        table([
            ("name", "chat".into()),
            ("sessions", i64::from(self.chat_users).into()),
            (
                "arrival",
                inline([("kind", "burst".into()), ("at_s", 0.into()), ("spread_s", 5.into())]),
            ),
            ("turns", 40.into()),
            ("system_prompt_tokens", 300.into()),
            ("system_prompt", "chat-ui".into()),
            ("first_input_tokens", 5000.into()),
            ("input_tokens", uniform(20, 80)),
            ("output_tokens", uniform(60, 160)),
            ("think_time_s", exponential(2.0)),
        ])
    }

    /// The agents' waves: sessions and arrival of each.
    fn waves(&self) -> Vec<(u32, Value)> {
        let burst = |at_s: u32| {
            inline([
                ("kind", "burst".into()),
                ("at_s", i64::from(at_s).into()),
                ("spread_s", 1.0.into()),
            ])
        };
        match self.arrival {
            Arrival::Burst => vec![(self.agents, burst(60))],
            Arrival::Waves { gap_s } => {
                let first = self.agents.div_ceil(2);
                vec![(first, burst(60)), (self.agents - first, burst(60 + gap_s))]
            }
            Arrival::Poisson { span_s } => vec![(
                self.agents,
                inline([
                    ("kind", "poisson".into()),
                    ("start_s", 60.into()),
                    ("rate_per_s", fixed(f64::from(self.agents) / f64::from(span_s), 4)),
                ]),
            )],
        }
    }

    /// Agent wave `i`: `sessions` sessions arriving as `arrival`, sharing the system prompt.
    fn agents(&self, i: usize, sessions: u32, arrival: Value) -> Table {
        let turns = match self.turns {
            (a, b) if a == b => i64::from(a).into(),
            (a, b) => uniform(a, b),
        };
        table([
            ("name", format!("agents-{i}").into()),
            ("sessions", i64::from(sessions).into()),
            ("arrival", arrival),
            ("turns", turns),
            ("system_prompt_tokens", i64::from(self.system_prompt_tokens).into()),
            ("system_prompt", "agent".into()),
            ("first_input_tokens", 1000.into()),
            ("input_tokens", uniform(500, 1500)),
            ("output_tokens", uniform(300, 900)),
            ("think_time_s", exponential(1.0)),
        ])
    }
}

/// A table of `pairs`, in order.
fn table<const N: usize>(pairs: [(&str, Value); N]) -> Table {
    let mut t = Table::new();
    for (k, v) in pairs {
        t[k] = Item::Value(v);
    }
    t
}

/// An inline table of `pairs`, in order.
fn inline<const N: usize>(pairs: [(&str, Value); N]) -> Value {
    Value::InlineTable(pairs.into_iter().collect::<InlineTable>())
}

/// `{ dist = "uniform", min, max }`.
fn uniform(min: u32, max: u32) -> Value {
    inline([
        ("dist", "uniform".into()),
        ("min", i64::from(min).into()),
        ("max", i64::from(max).into()),
    ])
}

/// `{ dist = "exponential", mean }`.
fn exponential(mean: f64) -> Value {
    inline([("dist", "exponential".into()), ("mean", mean.into())])
}

/// `x` written in its shortest form (`0`, `0.125`): a whole number as an integer.
fn shortest(x: f64) -> Value {
    written(&x.to_string())
}

/// `x` written with `places` decimals (`0.6250`).
fn fixed(x: f64, places: usize) -> Value {
    written(&format!("{x:.places$}"))
}

/// The TOML number written `text` (the form a member file has always had).
fn written(text: &str) -> Value {
    text.parse().expect("a finite number is a TOML value")
}
