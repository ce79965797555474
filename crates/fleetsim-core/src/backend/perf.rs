//! Step-time model: `step = beta0 + beta1 * prefill_tokens + beta2 * decode_tokens +
//! beta3 * context_tokens` (µs), where `context_tokens` sums, over the step's scheduled
//! requests, the tokens each one's attention reads (its computed tokens plus those
//! scheduled). `beta3` is zero in every published profile; `sim calibrate` fits it where
//! the measured engine's decode cost grows with context (attention's KV reads).
//!
//! The shipped default is BLIS's "blackbox" fit for Llama-3.1-8B-Instruct on one H100
//! (vLLM 0.8.4, the pre-#553 fit in `defaults.yaml` of inference-sim/inference-sim @
//! `644fd8b6`, the parent of PR #553; `profiles::BLIS_PRE_553`): 5752.7 µs,
//! 17.25 µs per uncached prefill token, 6.00 µs per decode token. That row agrees with a
//! roofline estimate (`profiles::roofline`).
//!
//! A profile derived from a model's shape and a GPU's datasheet (`profile = "auto"`)
//! carries [`PhysicsStep`] constants instead: the step is then priced from its
//! [`StepShape`] by the physics model ([`super::physics`]), and the linear coefficients
//! are not used.

pub use super::physics::PhysicsStep;
use crate::time::SimDuration;

/// What one engine step does, as the scheduler built it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StepShape {
    /// Prefill (uncached prompt or recomputed) tokens scheduled.
    pub prefill_tokens: u32,
    /// Decode tokens scheduled.
    pub decode_tokens: u32,
    /// Tokens of context the scheduled requests' attention reads: per request, its
    /// computed tokens plus those scheduled.
    pub context_tokens: u64,
    /// Attention query-key pairs: per request scheduling `n` tokens after `c` computed,
    /// `n·c + n·(n + 1)/2` (causal).
    pub attention_pairs: u64,
    /// Requests scheduled.
    pub requests: u32,
}

/// Linear per-iteration cost model.
#[derive(Clone, Debug, PartialEq)]
pub struct StepTimeModel {
    /// Fixed cost per engine step, µs.
    pub beta0_us: f64,
    /// Cost per prefill (uncached prompt or recomputed) token scheduled in the step, µs.
    pub beta1_us: f64,
    /// Cost per decode token scheduled in the step, µs.
    pub beta2_us: f64,
    /// Cost per token of context the step's requests attend to, µs (0: no context term).
    pub beta3_us: f64,
    /// The physics model's constants; when set they price every step and the betas are
    /// not used.
    pub physics: Option<PhysicsStep>,
}

impl Default for StepTimeModel {
    fn default() -> Self {
        StepTimeModel {
            beta0_us: 5752.7,
            beta1_us: 17.25,
            beta2_us: 6.00,
            beta3_us: 0.0,
            physics: None,
        }
    }
}

impl StepTimeModel {
    /// Duration of a step with the given token counts (at least 1 ns).
    #[inline]
    pub fn step(&self, prefill_tokens: u32, decode_tokens: u32) -> SimDuration {
        let us = self.beta0_us + self.beta1_us * f64::from(prefill_tokens) + self.beta2_us * f64::from(decode_tokens);
        SimDuration(SimDuration::from_micros_f64(us).0.max(1))
    }

    /// Duration of a step whose requests attend to `context_tokens` tokens in all; the
    /// same as [`StepTimeModel::step`] when `beta3_us` is zero.
    #[inline]
    pub fn step_with_context(&self, prefill_tokens: u32, decode_tokens: u32, context_tokens: u64) -> SimDuration {
        if self.beta3_us == 0.0 {
            return self.step(prefill_tokens, decode_tokens);
        }
        let us = self.beta0_us
            + self.beta1_us * f64::from(prefill_tokens)
            + self.beta2_us * f64::from(decode_tokens)
            + self.beta3_us * context_tokens as f64;
        SimDuration(SimDuration::from_micros_f64(us).0.max(1))
    }

    /// Duration of a step of this shape (at least 1 ns): the physics model's when the
    /// profile has one, else exactly [`StepTimeModel::step_with_context`].
    #[inline]
    pub fn duration(&self, s: &StepShape) -> SimDuration {
        match &self.physics {
            Some(p) => SimDuration(SimDuration::from_micros_f64(p.step_us(s)).0.max(1)),
            None => self.step_with_context(s.prefill_tokens, s.decode_tokens, s.context_tokens),
        }
    }

    /// True when a step's duration depends on the context its requests read, so a run of
    /// decode steps is not of constant duration (no decode coalescing).
    pub fn varies_with_context(&self) -> bool {
        self.beta3_us != 0.0 || self.physics.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_coefficients() {
        let m = StepTimeModel::default();
        // 5752.7 + 17.25*1000 + 6*4 = 23026.7 us
        assert_eq!(m.step(1000, 4), SimDuration(23_026_700));
        assert_eq!(m.step(0, 0), SimDuration(5_752_700));
        assert_eq!(m.step_with_context(1000, 4, 99_999), m.step(1000, 4));
        let c = StepTimeModel { beta3_us: 0.5, ..m };
        // 23026.7 + 0.5 * 2000 = 24026.7 us
        assert_eq!(c.step_with_context(1000, 4, 2000), SimDuration(24_026_700));
    }
}
