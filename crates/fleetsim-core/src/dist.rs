//! Random distributions for workload parameters (`rand_distr` underneath).
//!
//! Scenario files give a distribution as a bare number (a constant) or as a table
//! `{ dist = "lognormal", mean = 800, cv = 0.5 }`; `scenario` turns that into a [`Dist`].
//!
//! Owns: distribution parsing and sampling. Invariant: a sample depends only on the stream it
//! is drawn from.

use rand::RngExt;
use rand::distr::{Distribution, Uniform};
use rand_distr::{Exp, Gamma, LogNormal, Normal, Weibull};
use serde::Deserialize;

use crate::rng::SimRng;

/// A validated distribution over non-negative reals (samples below zero are clamped).
#[derive(Clone, Debug)]
pub struct Dist {
    spec: DistSpec,
    sampler: Sampler,
}

/// The parameters a distribution was built from (kept for reports and the mean).
#[derive(Clone, Debug, PartialEq)]
pub enum DistSpec {
    /// Always `value`.
    Constant { value: f64 },
    /// Uniform on `[min, max)`.
    Uniform { min: f64, max: f64 },
    /// Exponential with the given mean.
    Exponential { mean: f64 },
    /// Normal, clamped at zero.
    Normal { mean: f64, std: f64 },
    /// Log-normal with log-space parameters.
    LogNormal { mu: f64, sigma: f64 },
    /// Gamma with shape k and scale theta.
    Gamma { shape: f64, scale: f64 },
    /// Weibull with shape k and scale lambda.
    Weibull { shape: f64, scale: f64 },
}

#[derive(Clone, Debug)]
enum Sampler {
    Constant(f64),
    Uniform(Uniform<f64>),
    Exp(Exp<f64>),
    Normal(Normal<f64>),
    LogNormal(LogNormal<f64>),
    Gamma(Gamma<f64>),
    Weibull(Weibull<f64>),
}

/// The table form of a distribution as written in a scenario. Which keys are allowed
/// depends on `dist`; [`Dist::from_table`] checks the combination.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DistTable {
    /// Family name: constant, uniform, exponential, normal, lognormal, gamma, weibull.
    pub dist: String,
    pub value: Option<f64>,
    pub min: Option<f64>,
    pub max: Option<f64>,
    pub mean: Option<f64>,
    pub std: Option<f64>,
    pub cv: Option<f64>,
    pub mu: Option<f64>,
    pub sigma: Option<f64>,
    pub median: Option<f64>,
    pub shape: Option<f64>,
    pub scale: Option<f64>,
}

/// Valid values of `dist`, for error messages.
pub const DIST_FAMILIES: &str = "constant, uniform, exponential, normal, lognormal, gamma, weibull";

/// The parameterisations a family accepts, each a list of keys: the first whose keys are
/// all present (and nothing else is) wins.
fn forms(dist: &str) -> Result<&'static [&'static [&'static str]], (String, String)> {
    Ok(match dist {
        "constant" => &[&["value"]],
        "uniform" => &[&["min", "max"]],
        "exponential" => &[&["mean"]],
        "normal" => &[&["mean", "std"]],
        "lognormal" => &[&["mu", "sigma"], &["mean", "cv"], &["median", "sigma"]],
        "gamma" => &[&["shape", "scale"], &["mean", "cv"]],
        "weibull" => &[&["shape", "scale"]],
        other => {
            return Err((
                "dist".into(),
                format!("unknown distribution `{other}`; expected one of {DIST_FAMILIES}"),
            ));
        }
    })
}

/// The distribution of family `dist` in the parameterisation starting with key `first`
/// (`get` gives a key's value): the derived ones (lognormal from mean and cv or median,
/// gamma from mean and cv) converted, their own bounds checked.
fn spec(dist: &str, first: &str, get: impl Fn(&str) -> f64) -> Result<DistSpec, (String, String)> {
    Ok(match (dist, first) {
        ("constant", _) => DistSpec::Constant { value: get("value") },
        ("uniform", _) => DistSpec::Uniform {
            min: get("min"),
            max: get("max"),
        },
        ("exponential", _) => DistSpec::Exponential { mean: get("mean") },
        ("normal", _) => DistSpec::Normal {
            mean: get("mean"),
            std: get("std"),
        },
        ("lognormal", "mu") => DistSpec::LogNormal {
            mu: get("mu"),
            sigma: get("sigma"),
        },
        ("lognormal", "mean") => lognormal_of_mean(get("mean"), get("cv"))?,
        ("lognormal", "median") => {
            let median = get("median");
            if median <= 0.0 {
                return Err(("median".into(), "must be > 0".into()));
            }
            DistSpec::LogNormal {
                mu: median.ln(),
                sigma: get("sigma"),
            }
        }
        ("gamma", "shape") => DistSpec::Gamma {
            shape: get("shape"),
            scale: get("scale"),
        },
        ("gamma", "mean") => gamma_of_mean(get("mean"), get("cv"))?,
        ("weibull", _) => DistSpec::Weibull {
            shape: get("shape"),
            scale: get("scale"),
        },
        _ => unreachable!("forms and specs out of sync"),
    })
}

/// The lognormal of mean `mean` (> 0) and coefficient of variation `cv` (>= 0).
fn lognormal_of_mean(mean: f64, cv: f64) -> Result<DistSpec, (String, String)> {
    if mean <= 0.0 {
        return Err(("mean".into(), "must be > 0".into()));
    }
    if cv < 0.0 {
        return Err(("cv".into(), "must be >= 0".into()));
    }
    let sigma2 = (1.0 + cv * cv).ln();
    Ok(DistSpec::LogNormal {
        mu: mean.ln() - sigma2 / 2.0,
        sigma: sigma2.sqrt(),
    })
}

/// The gamma of mean `mean` (> 0) and coefficient of variation `cv` (> 0).
fn gamma_of_mean(mean: f64, cv: f64) -> Result<DistSpec, (String, String)> {
    if mean <= 0.0 {
        return Err(("mean".into(), "must be > 0".into()));
    }
    if cv <= 0.0 {
        return Err(("cv".into(), "must be > 0".into()));
    }
    let shape = 1.0 / (cv * cv);
    Ok(DistSpec::Gamma {
        shape,
        scale: mean / shape,
    })
}

impl Dist {
    /// A constant.
    pub fn constant(value: f64) -> Result<Dist, String> {
        Dist::from_spec(DistSpec::Constant { value })
    }

    /// Builds from a scenario table; the error names the offending key (`(key, message)`).
    pub fn from_table(t: &DistTable) -> Result<Dist, (String, String)> {
        let given: [(&str, Option<f64>); 11] = [
            ("value", t.value),
            ("min", t.min),
            ("max", t.max),
            ("mean", t.mean),
            ("std", t.std),
            ("cv", t.cv),
            ("mu", t.mu),
            ("sigma", t.sigma),
            ("median", t.median),
            ("shape", t.shape),
            ("scale", t.scale),
        ];
        let forms = forms(&t.dist)?;
        for (k, v) in &given {
            if let Some(v) = v
                && !v.is_finite()
            {
                return Err(((*k).into(), "must be a finite number".into()));
            }
        }
        let present: Vec<&str> = given.iter().filter(|(_, v)| v.is_some()).map(|(k, _)| *k).collect();
        let form = forms
            .iter()
            .find(|f| f.len() == present.len() && f.iter().all(|k| present.contains(k)));
        let Some(form) = form else {
            let want: Vec<String> = forms.iter().map(|f| f.join(" + ")).collect();
            return Err((
                "dist".into(),
                format!(
                    "`{}` takes {}; got {}",
                    t.dist,
                    want.join(" or "),
                    if present.is_empty() {
                        "no parameters".to_string()
                    } else {
                        present.join(" + ")
                    }
                ),
            ));
        };
        let get = |k: &str| given.iter().find(|(n, _)| *n == k).and_then(|(_, v)| *v).unwrap();
        let spec = spec(&t.dist, form[0], get)?;
        Dist::from_spec(spec).map_err(|m| (form[0].to_string(), m))
    }

    /// Validates parameters and builds the sampler.
    pub fn from_spec(spec: DistSpec) -> Result<Dist, String> {
        let sampler = match spec {
            DistSpec::Constant { value } => {
                if !(value.is_finite() && value >= 0.0) {
                    return Err(format!("constant must be a finite number >= 0, got {value}"));
                }
                Sampler::Constant(value)
            }
            DistSpec::Uniform { min, max } => {
                if !(min >= 0.0 && max > min) {
                    return Err(format!("uniform needs 0 <= min < max, got min = {min}, max = {max}"));
                }
                Sampler::Uniform(Uniform::new(min, max).map_err(|e| e.to_string())?)
            }
            DistSpec::Exponential { mean } => {
                if mean <= 0.0 {
                    return Err(format!("exponential mean must be > 0, got {mean}"));
                }
                Sampler::Exp(Exp::new(1.0 / mean).map_err(|e| e.to_string())?)
            }
            DistSpec::Normal { mean, std } => {
                if std < 0.0 {
                    return Err(format!("normal std must be >= 0, got {std}"));
                }
                // Every sampled quantity is a count or a duration: a negative mean would be
                // clamped to 0 on most draws, silently another distribution.
                if mean < 0.0 {
                    return Err(format!("normal mean must be >= 0, got {mean}"));
                }
                Sampler::Normal(Normal::new(mean, std).map_err(|e| e.to_string())?)
            }
            DistSpec::LogNormal { mu, sigma } => {
                if sigma < 0.0 {
                    return Err(format!("lognormal sigma must be >= 0, got {sigma}"));
                }
                Sampler::LogNormal(LogNormal::new(mu, sigma).map_err(|e| e.to_string())?)
            }
            DistSpec::Gamma { shape, scale } => {
                if shape <= 0.0 || scale <= 0.0 {
                    return Err(format!("gamma needs shape > 0 and scale > 0, got {shape}, {scale}"));
                }
                Sampler::Gamma(Gamma::new(shape, scale).map_err(|e| e.to_string())?)
            }
            DistSpec::Weibull { shape, scale } => {
                if shape <= 0.0 || scale <= 0.0 {
                    return Err(format!("weibull needs shape > 0 and scale > 0, got {shape}, {scale}"));
                }
                Sampler::Weibull(Weibull::new(scale, shape).map_err(|e| e.to_string())?)
            }
        };
        Ok(Dist { spec, sampler })
    }

    /// The parameters.
    pub fn spec(&self) -> &DistSpec {
        &self.spec
    }

    /// One draw, clamped at zero.
    pub fn sample(&self, rng: &mut SimRng) -> f64 {
        let x = match &self.sampler {
            Sampler::Constant(v) => *v,
            Sampler::Uniform(d) => d.sample(rng),
            Sampler::Exp(d) => d.sample(rng),
            Sampler::Normal(d) => d.sample(rng),
            Sampler::LogNormal(d) => d.sample(rng),
            Sampler::Gamma(d) => d.sample(rng),
            Sampler::Weibull(d) => d.sample(rng),
        };
        x.max(0.0)
    }

    /// One draw rounded to the nearest integer, at least `min` and at most `u32::MAX`.
    pub fn sample_count(&self, rng: &mut SimRng, min: u32) -> u32 {
        let x = self.sample(rng).round();
        if x >= u32::MAX as f64 {
            u32::MAX
        } else {
            (x as u32).max(min)
        }
    }

    /// The distribution mean (before clamping at zero).
    pub fn mean(&self) -> f64 {
        match self.spec {
            DistSpec::Constant { value } => value,
            DistSpec::Uniform { min, max } => (min + max) / 2.0,
            DistSpec::Exponential { mean } => mean,
            DistSpec::Normal { mean, .. } => mean,
            DistSpec::LogNormal { mu, sigma } => (mu + sigma * sigma / 2.0).exp(),
            DistSpec::Gamma { shape, scale } => shape * scale,
            DistSpec::Weibull { shape, scale } => scale * libm::tgamma(1.0 + 1.0 / shape),
        }
    }
}

/// Uniform index in `0..n` (n > 0), the one place policies draw a random choice.
pub fn uniform_index(rng: &mut SimRng, n: usize) -> usize {
    assert!(n > 0, "uniform_index over an empty set");
    rng.random_range(0..n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::stream;

    fn table(dist: &str) -> DistTable {
        DistTable {
            dist: dist.into(),
            ..Default::default()
        }
    }

    #[test]
    fn lognormal_mean_cv_has_that_mean() {
        let d = Dist::from_table(&DistTable {
            mean: Some(800.0),
            cv: Some(0.5),
            ..table("lognormal")
        })
        .unwrap();
        assert!((d.mean() - 800.0).abs() < 1e-9);
        let mut rng = stream(1, "t", 0);
        let n = 200_000;
        let m: f64 = (0..n).map(|_| d.sample(&mut rng)).sum::<f64>() / n as f64;
        // std error = 800 * 0.5 / sqrt(n) ~ 0.9; allow 5 sigma.
        assert!((m - 800.0).abs() < 4.5, "sample mean {m}");
    }

    #[test]
    fn gamma_mean_cv() {
        let d = Dist::from_table(&DistTable {
            mean: Some(2.0),
            cv: Some(2.0),
            ..table("gamma")
        })
        .unwrap();
        assert!((d.mean() - 2.0).abs() < 1e-12);
    }

    #[test]
    fn weibull_mean_matches_closed_form() {
        // shape 1 is exponential with mean = scale.
        let d = Dist::from_spec(DistSpec::Weibull { shape: 1.0, scale: 3.0 }).unwrap();
        assert!((d.mean() - 3.0).abs() < 1e-9);
    }

    #[test]
    fn wrong_parameters_name_the_key() {
        let e = Dist::from_table(&DistTable {
            mean: Some(1.0),
            ..table("normal")
        })
        .unwrap_err();
        assert_eq!(e.0, "dist");
        assert!(e.1.contains("mean + std"), "{}", e.1);
        let e = Dist::from_table(&table("zipfian")).unwrap_err();
        assert!(e.1.contains("unknown distribution `zipfian`"));
        let e = Dist::from_table(&DistTable {
            mean: Some(-1.0),
            ..table("exponential")
        })
        .unwrap_err();
        assert_eq!(e.0, "mean");
        let e = Dist::from_table(&DistTable {
            min: Some(3.0),
            max: Some(1.0),
            ..table("uniform")
        })
        .unwrap_err();
        assert!(e.1.contains("min < max"));
    }

    #[test]
    fn a_negative_normal_mean_is_refused_not_clamped() {
        let e = Dist::from_spec(DistSpec::Normal { mean: -5.0, std: 0.1 }).unwrap_err();
        assert_eq!(e, "normal mean must be >= 0, got -5");
    }

    #[test]
    fn counts_are_clamped() {
        let d = Dist::from_spec(DistSpec::Normal { mean: 0.0, std: 0.1 }).unwrap();
        let mut rng = stream(1, "t", 0);
        assert_eq!(d.sample_count(&mut rng, 1), 1);
        assert_eq!(Dist::constant(7.4).unwrap().sample_count(&mut rng, 1), 7);
    }
}
