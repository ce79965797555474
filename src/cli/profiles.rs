//! `sim profiles`: the shipped latency profiles as a table or JSON.

use super::out::{out, outln};
use crate::profiles;

/// `sim profiles` arguments.
#[derive(clap::Args, Debug)]
pub struct ProfilesArgs {
    /// Print JSON (one object per profile, with source repository and commit).
    #[arg(long)]
    pub json: bool,
}

/// Runs `sim profiles`.
pub fn cli(a: &ProfilesArgs) -> anyhow::Result<std::process::ExitCode> {
    if a.json {
        outln!("{}", serde_json::to_string_pretty(&profiles::json())?)?;
    } else {
        out!("{}", profiles::table())?;
    }
    Ok(std::process::ExitCode::SUCCESS)
}
