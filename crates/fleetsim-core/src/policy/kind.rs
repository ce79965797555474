//! What a policy declares about itself: [`PolicyKind`], implemented once in each policy's
//! module (kind name, parameter struct and validation, upstream defaults, scrape interval,
//! builder, description, catalogue entry, production-stack's flags and routing logic,
//! another released router's flags), and the validated, type-erased
//! [`PolicyConfig`] a scenario's policy table becomes. The list of every policy is
//! [`crate::policy::registry::REGISTRY`].

use std::any::{Any, TypeId};
use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use serde::de::DeserializeOwned;

use super::RoutingPolicy;
use super::params::{ParamError, ParamValue};

/// production-stack's `--engine-stats-interval` default, seconds: the scrape interval of
/// every policy that does not declare its own router's.
pub const PRODUCTION_STACK_ENGINE_STATS_INTERVAL_S: f64 = 30.0;

/// One parameter, as `sim policies` lists it.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct ParamDoc {
    /// Key under `[router.policy]`.
    pub key: &'static str,
    /// Default as written in TOML; `(required)` when there is none, `(auto)` when it is
    /// derived from the fleet.
    pub default: &'static str,
    /// What it does.
    pub meaning: &'static str,
}

/// A [`ParamDoc`] in one line.
pub const fn param(key: &'static str, default: &'static str, meaning: &'static str) -> ParamDoc {
    ParamDoc { key, default, meaning }
}

/// A policy's catalogue entry (`sim policies`).
#[derive(Clone, Copy, Debug)]
pub struct Doc {
    /// The router and code it reproduces.
    pub source: &'static str,
    /// How it picks an endpoint, in one sentence (the parameters name the variants).
    pub decision: &'static str,
    /// Signals read, with their freshness.
    pub signals: &'static str,
    /// Parameters.
    pub params: &'static [ParamDoc],
}

/// What a policy may auto-tune from the fleet (llm-d sizes its index from the pods), and
/// what an operator can tell a static-discovery router about each URL.
#[derive(Clone, Debug)]
pub struct Fleet {
    /// `backends.block_size_tokens`.
    pub block_size_tokens: u32,
    /// `backends.kv_blocks`.
    pub kv_blocks: u32,
    /// `router.chars_per_token` (a token-level prefix tree's unit).
    pub chars_per_token: u32,
    /// Each backend's `--max-num-seqs` (slots), by backend index: what a capacity-aware
    /// rule is told per URL (it is in each engine's configuration, not in its metrics).
    pub max_num_seqs: Vec<u32>,
}

/// How production-stack's `vllm-router` command line sets a policy, beyond
/// `--routing-logic KIND`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StackFlags {
    /// Arguments, in parser order.
    pub args: Vec<String>,
    /// Settings with no flag, and the PRs they need.
    pub notes: Vec<String>,
    /// The policy reads scraped engine stats (`--engine-stats-interval` matters).
    pub reads_engine_stats: bool,
    /// The policy reads router-local request stats (`--request-stats-window` matters).
    pub reads_request_stats: bool,
}

/// How production-stack's `vllm-router` selects a policy (`--routing-logic KIND`, the kind
/// name) and sets its parameters from its command line: what `sim import` reads a
/// deployment's router through.
#[derive(Clone, Copy, Debug)]
pub struct RoutingLogic {
    /// The pull request that adds it (`PR #884`); `None`: on main.
    pub pr: Option<&'static str>,
    /// The policy keys the router's command line sets, in the order a table lists them.
    pub keys: &'static [LogicKey],
    /// A flag without which the router runs another routing logic: `(flag, kind, why)`.
    pub needs: Option<(&'static str, &'static str, &'static str)>,
}

/// One policy key of a [`RoutingLogic`].
#[derive(Clone, Copy, Debug)]
pub struct LogicKey {
    /// The key under `[router.policy]`.
    pub key: &'static str,
    /// The router flag that sets it; `None`: no flag does (it is always `default`).
    pub flag: Option<&'static str>,
    /// Its value when no flag gives it, and where that value comes from; `None`: the key is
    /// written only when its flag is given.
    pub default: Option<(LogicValue, &'static str)>,
    /// What a value given by the flag counts (`characters`), said beside it.
    pub unit: Option<&'static str>,
}

/// A [`LogicKey`]'s default.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum LogicValue {
    /// An integer.
    Int(i64),
    /// A float.
    Float(f64),
    /// A string.
    Str(&'static str),
}

/// A released router other than production-stack that runs a configuration as it is, with
/// no patch or open pull request (`sim tune --upstream-only`, the `upstream` tie-break).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Upstream {
    /// The router (`SGLang router`, `AIBrix gateway`, ...).
    pub router: &'static str,
    /// Its flags or settings for this configuration.
    pub how: String,
}

impl Upstream {
    /// `router`, switched on by `how`.
    pub fn new(router: &'static str, how: impl Into<String>) -> Option<Upstream> {
        Some(Upstream {
            router,
            how: how.into(),
        })
    }
}

/// One policy's declaration: implement it (or [`ParamlessKind`], for a policy without
/// parameters) for a marker type in the policy's module and add one line to
/// [`REGISTRY`](crate::policy::registry::REGISTRY).
pub trait PolicyKind: Send + Sync + 'static {
    /// `router.policy.kind`.
    const KIND: &'static str;
    /// What `sim policies` prints.
    const DOC: Doc;
    /// The engine-stats refresh interval the real router uses by default, when the scenario
    /// does not set `router.engine_stats_interval_s`.
    const ENGINE_STATS_INTERVAL_S: f64 = PRODUCTION_STACK_ENGINE_STATS_INTERVAL_S;
    /// True if the real router polls every endpoint concurrently on a ticker (llm-d's
    /// datalayer) rather than in sequential passes (production-stack's scraper).
    const POLLS_ENDPOINTS_CONCURRENTLY: bool = false;
    /// How production-stack's `--routing-logic` selects it; `None`: not one of
    /// production-stack's routing logics.
    const ROUTING_LOGIC: Option<RoutingLogic> = None;
    /// The `[router.policy]` table without `kind`: a serde struct with
    /// `deny_unknown_fields` whose defaults are upstream's.
    type Params: DeserializeOwned;
    /// The validated configuration.
    type Config: Clone + fmt::Debug + PartialEq + Send + Sync + 'static;
    /// Validates the table; errors name their key inside the table.
    fn validate(p: Self::Params, fleet: &Fleet) -> Result<Self::Config, ParamError>;
    /// The parameters for reports (`band = 1, tie = first`); empty: the kind alone.
    fn describe(c: &Self::Config) -> String;
    /// Instantiates the policy.
    fn build(c: &Self::Config) -> Box<dyn RoutingPolicy>;
    /// production-stack's command line for it; `None`: not one of production-stack's
    /// routers.
    fn production_stack(_c: &Self::Config) -> Option<StackFlags> {
        None
    }
    /// How a released router other than production-stack runs it (`set`: the keys its
    /// table sets, the rest at their upstream defaults); `None`: none does as it is.
    fn upstream(_c: &Self::Config, _set: &[&str]) -> Option<Upstream> {
        None
    }
}

/// A policy without parameters (`[router.policy]` holds `kind` alone): its kind, catalogue
/// entry and builder; its [`PolicyKind`] follows, with no parameters to validate or describe.
pub trait ParamlessKind: Send + Sync + 'static {
    /// `router.policy.kind`.
    const KIND: &'static str;
    /// What `sim policies` prints.
    const DOC: Doc;
    /// How production-stack's `--routing-logic` selects it; `None`: not one of
    /// production-stack's routing logics.
    const ROUTING_LOGIC: Option<RoutingLogic> = None;
    /// Instantiates the policy.
    fn build() -> Box<dyn RoutingPolicy>;
    /// production-stack's command line for it; `None`: not one of production-stack's
    /// routers.
    fn production_stack() -> Option<StackFlags> {
        None
    }
    /// How a released router other than production-stack runs it; `None`: none does.
    fn upstream() -> Option<Upstream> {
        None
    }
}

impl<K: ParamlessKind> PolicyKind for K {
    const KIND: &'static str = K::KIND;
    const DOC: Doc = K::DOC;
    const ROUTING_LOGIC: Option<RoutingLogic> = K::ROUTING_LOGIC;
    type Params = super::params::NoParams;
    type Config = ();
    fn validate(_: super::params::NoParams, _: &Fleet) -> Result<(), ParamError> {
        Ok(())
    }
    fn describe(_: &()) -> String {
        String::new()
    }
    fn build(_: &()) -> Box<dyn RoutingPolicy> {
        K::build()
    }
    fn production_stack(_: &()) -> Option<StackFlags> {
        K::production_stack()
    }
    fn upstream(_: &(), _: &[&str]) -> Option<Upstream> {
        K::upstream()
    }
}

/// A registry entry, with the policy's types erased.
pub trait Entry: Sync {
    /// `router.policy.kind`.
    fn kind(&self) -> &'static str;
    /// Its catalogue entry.
    fn doc(&self) -> Doc;
    /// How production-stack's `--routing-logic` selects it, if it does.
    fn routing_logic(&self) -> Option<RoutingLogic>;
    /// Parses and validates the `[router.policy]` table without `kind`.
    fn parse(&self, table: ParamValue, fleet: &Fleet) -> Result<PolicyConfig, ParamError>;
}

/// The [`Entry`] of a [`PolicyKind`].
pub struct Registered<K>(PhantomData<fn() -> K>);

impl<K: PolicyKind> Registered<K> {
    /// The entry, for [`REGISTRY`](crate::policy::registry::REGISTRY).
    pub const ENTRY: Registered<K> = Registered(PhantomData);
}

impl<K: PolicyKind> Entry for Registered<K> {
    fn kind(&self) -> &'static str {
        K::KIND
    }
    fn doc(&self) -> Doc {
        K::DOC
    }
    fn routing_logic(&self) -> Option<RoutingLogic> {
        K::ROUTING_LOGIC
    }
    fn parse(&self, table: ParamValue, fleet: &Fleet) -> Result<PolicyConfig, ParamError> {
        let p: K::Params = super::params::deserialize(table)?;
        K::validate(p, fleet).map(PolicyConfig::new::<K>)
    }
}

/// A validated policy configuration of any kind.
#[derive(Clone)]
pub struct PolicyConfig(Arc<dyn ErasedConfig>);

trait ErasedConfig: Send + Sync {
    fn kind_id(&self) -> TypeId;
    fn kind(&self) -> &'static str;
    fn config(&self) -> &dyn Any;
    fn describe(&self) -> String;
    fn build(&self) -> Box<dyn RoutingPolicy>;
    fn production_stack(&self) -> Option<StackFlags>;
    fn upstream(&self, set: &[&str]) -> Option<Upstream>;
    fn engine_stats_interval_s(&self) -> f64;
    fn polls_endpoints_concurrently(&self) -> bool;
    fn eq_dyn(&self, other: &dyn ErasedConfig) -> bool;
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result;
}

struct Configured<K: PolicyKind>(K::Config);

impl<K: PolicyKind> ErasedConfig for Configured<K> {
    fn kind_id(&self) -> TypeId {
        TypeId::of::<K>()
    }
    fn kind(&self) -> &'static str {
        K::KIND
    }
    fn config(&self) -> &dyn Any {
        &self.0
    }
    fn describe(&self) -> String {
        let d = K::describe(&self.0);
        if d.is_empty() {
            K::KIND.to_string()
        } else {
            format!("{} ({d})", K::KIND)
        }
    }
    fn build(&self) -> Box<dyn RoutingPolicy> {
        K::build(&self.0)
    }
    fn production_stack(&self) -> Option<StackFlags> {
        K::production_stack(&self.0)
    }
    fn upstream(&self, set: &[&str]) -> Option<Upstream> {
        K::upstream(&self.0, set)
    }
    fn engine_stats_interval_s(&self) -> f64 {
        K::ENGINE_STATS_INTERVAL_S
    }
    fn polls_endpoints_concurrently(&self) -> bool {
        K::POLLS_ENDPOINTS_CONCURRENTLY
    }
    fn eq_dyn(&self, other: &dyn ErasedConfig) -> bool {
        other.kind_id() == TypeId::of::<K>() && other.config().downcast_ref::<K::Config>() == Some(&self.0)
    }
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {:?}", K::KIND, self.0)
    }
}

impl PolicyConfig {
    /// A configuration of kind `K`.
    pub fn new<K: PolicyKind>(config: K::Config) -> Self {
        PolicyConfig(Arc::new(Configured::<K>(config)))
    }

    /// The configuration, if this is a `K`.
    pub fn get<K: PolicyKind>(&self) -> Option<&K::Config> {
        if self.0.kind_id() == TypeId::of::<K>() {
            self.0.config().downcast_ref()
        } else {
            None
        }
    }

    /// `router.policy.kind`.
    pub fn kind(&self) -> &'static str {
        self.0.kind()
    }

    /// A one-line description for reports.
    pub fn describe(&self) -> String {
        self.0.describe()
    }

    /// Instantiates the policy.
    pub fn build(&self) -> Box<dyn RoutingPolicy> {
        self.0.build()
    }

    /// production-stack's command line for it, if it is one of production-stack's routers.
    pub fn production_stack(&self) -> Option<StackFlags> {
        self.0.production_stack()
    }

    /// How a released router other than production-stack runs it (`set`: the keys its
    /// table sets), if one does as it is.
    pub fn upstream(&self, set: &[&str]) -> Option<Upstream> {
        self.0.upstream(set)
    }

    /// The engine-stats refresh interval the real router uses by default.
    pub fn default_engine_stats_interval_s(&self) -> f64 {
        self.0.engine_stats_interval_s()
    }

    /// True if the real router polls every endpoint concurrently on a ticker.
    pub fn polls_endpoints_concurrently(&self) -> bool {
        self.0.polls_endpoints_concurrently()
    }
}

impl PartialEq for PolicyConfig {
    fn eq(&self, other: &Self) -> bool {
        self.0.eq_dyn(other.0.as_ref())
    }
}

impl fmt::Debug for PolicyConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}
