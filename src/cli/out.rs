//! Writing to stdout without panicking on a closed pipe.
//!
//! `print!` panics when stdout is a pipe its reader closed (`sim run ... | head`). These
//! macros write through a locked stdout and return the `io::Error` instead, so a subcommand
//! propagates it with `?` and [`super::main`] turns `BrokenPipe` into a clean exit.

/// `print!` that returns `std::io::Result<()>` instead of panicking.
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        write!(std::io::stdout().lock(), $($arg)*)
    }};
}

/// `println!` that returns `std::io::Result<()>` instead of panicking.
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout().lock(), $($arg)*)
    }};
}

pub(crate) use {out, outln};
