//! `sim policies`: the policy catalogue as text or JSON.

use std::process::ExitCode;

use anyhow::Result;
use clap::Args;

use super::out::out;

#[derive(Args, Debug)]
pub(super) struct PoliciesArgs {
    /// Print JSON (kind, source, signals, params with upstream defaults) instead of text.
    #[arg(long)]
    pub(super) json: bool,
}

/// Prints the catalogue.
pub(super) fn cmd_policies(a: PoliciesArgs) -> Result<ExitCode> {
    if a.json {
        out!("{}", crate::policy::catalogue::to_json())?;
    } else {
        out!("{}", crate::policy::catalogue::render())?;
    }
    Ok(ExitCode::SUCCESS)
}
