//! `sim`: see `fleetsim::cli`.

fn main() -> std::process::ExitCode {
    fleetsim::cli::main()
}
