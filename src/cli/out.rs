//! The print helpers of [`fleetsim_io::output`], under the names the subcommands use.

pub(crate) use fleetsim_io::{out, outln};
