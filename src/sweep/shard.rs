//! `--shard K/N | auto` for `sim sweep` and `sim tune`: which shard of the runs this
//! process owns, given on the command line or taken from the batch system's task index.
//!
//! * Slurm job arrays: `SLURM_ARRAY_TASK_ID` and `SLURM_ARRAY_TASK_COUNT` (and, when Slurm
//!   sets them, `SLURM_ARRAY_TASK_MIN`, `_MAX` and `_STEP`, so `--array=1-8` is shards 0..8
//!   and an array with gaps or a step is refused rather than leaving shards unrun).
//! * Kubernetes Indexed Jobs: `JOB_COMPLETION_INDEX`, with the count given by
//!   `--shard-count N` (the Job's `completions`; Kubernetes does not export it).
//!
//! Refused (exit 2, one line naming the variables): neither set, both set, a value that is
//! not a number, an index outside the count, or a `--shard-count` that disagrees with
//! Slurm's count. A shard is a shard however it was chosen: `--shard auto` in task 3 of 8
//! writes exactly what `--shard 3/8` writes.

use anyhow::{Result, bail};
use clap::Args;

/// The value of `--shard`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShardSpec {
    /// `K/N`: shard K of N (0-based).
    Fixed(u64, u64),
    /// `auto`: from the batch system's environment.
    Auto,
}

/// Parses `--shard`: `K/N` or `auto`.
pub fn parse_shard_spec(s: &str) -> Result<ShardSpec, String> {
    if s.trim() == "auto" {
        return Ok(ShardSpec::Auto);
    }
    super::exec::parse_shard(s)
        .map(|(k, n)| ShardSpec::Fixed(k, n))
        .map_err(|e| format!("{e}, or `auto` (from SLURM_ARRAY_TASK_ID or JOB_COMPLETION_INDEX)"))
}

/// The sharding flags `sim sweep` and `sim tune` share.
#[derive(Args, Debug, Clone, Default)]
pub struct ShardArgs {
    /// Run only shard K of N (0-based), or `auto`: K and N from a Slurm job array
    /// (SLURM_ARRAY_TASK_ID, SLURM_ARRAY_TASK_COUNT) or a Kubernetes Indexed Job
    /// (JOB_COMPLETION_INDEX with --shard-count N). Shards write OUT/shards/ for
    /// `sim merge` (a tune: each round's folder).
    #[arg(long, value_name = "K/N|auto", value_parser = parse_shard_spec)]
    pub shard: Option<ShardSpec>,
    /// With `--shard auto`: the number of shards (a Kubernetes Indexed Job's
    /// `completions`); under Slurm it must agree with SLURM_ARRAY_TASK_COUNT.
    #[arg(long, value_name = "N", requires = "shard", value_parser = clap::value_parser!(u64).range(1..))]
    pub shard_count: Option<u64>,
}

impl ShardArgs {
    /// The shard `(K, N)` this process runs, if any, from the flags and the process
    /// environment.
    pub fn resolve(&self) -> Result<Option<(u64, u64)>> {
        self.resolve_with(|k| std::env::var(k).ok())
    }

    /// As [`ShardArgs::resolve`], reading variables through `env` (tests).
    pub fn resolve_with(&self, env: impl Fn(&str) -> Option<String>) -> Result<Option<(u64, u64)>> {
        match self.shard {
            None => Ok(None),
            Some(ShardSpec::Fixed(k, n)) => {
                if self.shard_count.is_some() {
                    bail!("--shard-count goes with --shard auto; --shard {k}/{n} already gives the count");
                }
                Ok(Some((k, n)))
            }
            Some(ShardSpec::Auto) => from_env(self.shard_count, &env)
                .map(Some)
                .map_err(|m| anyhow::anyhow!(m)),
        }
    }
}

/// A variable's value: unset and empty are the same (a batch script's `export X=`).
fn var(env: &impl Fn(&str) -> Option<String>, name: &str) -> Option<String> {
    env(name).map(|v| v.trim().to_string()).filter(|v| !v.is_empty())
}

fn number(env: &impl Fn(&str) -> Option<String>, name: &str) -> Result<Option<u64>, String> {
    match var(env, name) {
        None => Ok(None),
        Some(v) => v
            .parse::<u64>()
            .map(Some)
            .map_err(|_| format!("--shard auto: {name}={} is not a whole number", crate::quote::quote(&v))),
    }
}

fn from_env(count: Option<u64>, env: &impl Fn(&str) -> Option<String>) -> Result<(u64, u64), String> {
    let slurm_id = number(env, "SLURM_ARRAY_TASK_ID")?;
    let slurm_count = number(env, "SLURM_ARRAY_TASK_COUNT")?;
    let k8s = number(env, "JOB_COMPLETION_INDEX")?;
    let slurm = slurm_id.is_some() || slurm_count.is_some();
    match (slurm, k8s) {
        (false, None) => Err(
            "--shard auto: neither SLURM_ARRAY_TASK_ID/SLURM_ARRAY_TASK_COUNT (a Slurm job array) nor JOB_COMPLETION_INDEX (a Kubernetes Indexed Job) is set; give --shard K/N"
                .into(),
        ),
        (true, Some(_)) => Err(
            "--shard auto: both SLURM_ARRAY_TASK_ID and JOB_COMPLETION_INDEX are set, so the shard is ambiguous; give --shard K/N"
                .into(),
        ),
        (false, Some(k)) => {
            let n = count.ok_or_else(|| {
                format!("--shard auto: JOB_COMPLETION_INDEX={k} gives the index but not the count; add --shard-count N (the Indexed Job's completions)")
            })?;
            if k >= n {
                return Err(format!(
                    "--shard auto: JOB_COMPLETION_INDEX={k} is out of range for --shard-count {n} (indices 0..{n})"
                ));
            }
            Ok((k, n))
        }
        (true, None) => slurm_shard(slurm_id, slurm_count, count, env),
    }
}

fn slurm_shard(
    id: Option<u64>,
    count: Option<u64>,
    given: Option<u64>,
    env: &impl Fn(&str) -> Option<String>,
) -> Result<(u64, u64), String> {
    let (Some(id), Some(n)) = (id, count) else {
        return Err(
            "--shard auto: a Slurm job array sets both SLURM_ARRAY_TASK_ID and SLURM_ARRAY_TASK_COUNT, and only one is set"
                .into(),
        );
    };
    if n == 0 {
        return Err("--shard auto: SLURM_ARRAY_TASK_COUNT=0; a job array has at least one task".into());
    }
    if let Some(step) = number(env, "SLURM_ARRAY_TASK_STEP")?
        && step != 1
    {
        return Err(format!(
            "--shard auto: SLURM_ARRAY_TASK_STEP={step}: task ids with a step do not number the shards; submit --array=0-{} (no step)",
            n - 1
        ));
    }
    let min = number(env, "SLURM_ARRAY_TASK_MIN")?.unwrap_or(0);
    if let Some(max) = number(env, "SLURM_ARRAY_TASK_MAX")?
        && max.checked_sub(min).map(|d| d + 1) != Some(n)
    {
        return Err(format!(
            "--shard auto: SLURM_ARRAY_TASK_MIN={min}..SLURM_ARRAY_TASK_MAX={max} is not SLURM_ARRAY_TASK_COUNT={n} consecutive ids; submit --array=0-{} (no gaps)",
            n - 1
        ));
    }
    let k = id
        .checked_sub(min)
        .filter(|k| *k < n)
        .ok_or_else(|| {
            format!(
                "--shard auto: SLURM_ARRAY_TASK_ID={id} is outside the array's ids {min}..{} (SLURM_ARRAY_TASK_MIN, SLURM_ARRAY_TASK_COUNT={n})",
                min + n
            )
        })?;
    if let Some(g) = given
        && g != n
    {
        return Err(format!(
            "--shard auto: --shard-count {g} disagrees with SLURM_ARRAY_TASK_COUNT={n}"
        ));
    }
    Ok((k, n))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve(count: Option<u64>, vars: &[(&str, &str)]) -> Result<(u64, u64), String> {
        let a = ShardArgs {
            shard: Some(ShardSpec::Auto),
            shard_count: count,
        };
        a.resolve_with(|k| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string()))
            .map(|s| s.expect("auto gives a shard"))
            .map_err(|e| e.to_string())
    }

    #[test]
    fn parses_k_of_n_and_auto() {
        assert_eq!(parse_shard_spec("2/4"), Ok(ShardSpec::Fixed(2, 4)));
        assert_eq!(parse_shard_spec("auto"), Ok(ShardSpec::Auto));
        assert!(parse_shard_spec("4/4").unwrap_err().contains("out of range"));
        assert!(parse_shard_spec("automatic").unwrap_err().contains("or `auto`"));
    }

    #[test]
    fn slurm_array_ids_from_zero_and_from_min() {
        let v = [("SLURM_ARRAY_TASK_ID", "3"), ("SLURM_ARRAY_TASK_COUNT", "8")];
        assert_eq!(resolve(None, &v), Ok((3, 8)));
        assert_eq!(resolve(Some(8), &v), Ok((3, 8)));
        // --array=1-8: ids 1..=8 are shards 0..8.
        let v = [
            ("SLURM_ARRAY_TASK_ID", "1"),
            ("SLURM_ARRAY_TASK_COUNT", "8"),
            ("SLURM_ARRAY_TASK_MIN", "1"),
            ("SLURM_ARRAY_TASK_MAX", "8"),
            ("SLURM_ARRAY_TASK_STEP", "1"),
        ];
        assert_eq!(resolve(None, &v), Ok((0, 8)));
    }

    #[test]
    fn kubernetes_index_needs_the_count() {
        assert_eq!(resolve(Some(4), &[("JOB_COMPLETION_INDEX", "3")]), Ok((3, 4)));
        assert!(
            resolve(None, &[("JOB_COMPLETION_INDEX", "3")])
                .unwrap_err()
                .contains("--shard-count")
        );
        assert!(
            resolve(Some(3), &[("JOB_COMPLETION_INDEX", "3")])
                .unwrap_err()
                .contains("out of range")
        );
    }

    #[test]
    fn refuses_missing_ambiguous_and_inconsistent_values() {
        /// `--shard-count`, the environment, and what the refusal says.
        type Case<'a> = (Option<u64>, &'a [(&'a str, &'a str)], &'a str);
        let cases: &[Case] = &[
            (None, &[], "neither"),
            (Some(4), &[("JOB_COMPLETION_INDEX", "")], "neither"),
            (None, &[("SLURM_ARRAY_TASK_ID", "1")], "only one is set"),
            (None, &[("SLURM_ARRAY_TASK_COUNT", "4")], "only one is set"),
            (
                Some(4),
                &[
                    ("SLURM_ARRAY_TASK_ID", "1"),
                    ("SLURM_ARRAY_TASK_COUNT", "4"),
                    ("JOB_COMPLETION_INDEX", "1"),
                ],
                "ambiguous",
            ),
            (
                None,
                &[("SLURM_ARRAY_TASK_ID", "x"), ("SLURM_ARRAY_TASK_COUNT", "4")],
                "not a whole number",
            ),
            (
                None,
                &[("SLURM_ARRAY_TASK_ID", "4"), ("SLURM_ARRAY_TASK_COUNT", "4")],
                "outside",
            ),
            (
                None,
                &[("SLURM_ARRAY_TASK_ID", "0"), ("SLURM_ARRAY_TASK_COUNT", "0")],
                "at least one",
            ),
            (
                Some(5),
                &[("SLURM_ARRAY_TASK_ID", "1"), ("SLURM_ARRAY_TASK_COUNT", "4")],
                "disagrees",
            ),
            (
                None,
                &[
                    ("SLURM_ARRAY_TASK_ID", "2"),
                    ("SLURM_ARRAY_TASK_COUNT", "4"),
                    ("SLURM_ARRAY_TASK_STEP", "2"),
                ],
                "step",
            ),
            (
                None,
                &[
                    ("SLURM_ARRAY_TASK_ID", "7"),
                    ("SLURM_ARRAY_TASK_COUNT", "3"),
                    ("SLURM_ARRAY_TASK_MIN", "0"),
                    ("SLURM_ARRAY_TASK_MAX", "7"),
                ],
                "consecutive",
            ),
        ];
        for (count, vars, want) in cases {
            let e = resolve(*count, vars).unwrap_err();
            assert!(e.contains(want) && !e.contains('\n'), "{vars:?}: {e}");
        }
    }

    #[test]
    fn shard_count_goes_only_with_auto() {
        let a = ShardArgs {
            shard: Some(ShardSpec::Fixed(0, 2)),
            shard_count: Some(2),
        };
        assert!(
            a.resolve_with(|_| None)
                .unwrap_err()
                .to_string()
                .contains("--shard auto")
        );
    }
}
