//! Terminal output shared by every subcommand.
//!
//! * [`render`]: aligned plain-text tables (`sim run`, `sim check`, `sim compare`,
//!   `sim profiles`, `sim trace inspect`), laid out by comfy-table: no borders, columns two
//!   spaces apart, numbers right-aligned, no trailing spaces. Files (Markdown, CSV) are
//!   written elsewhere and never go through here.
//! * [`out!`](crate::out) and [`outln!`](crate::outln): `print!` panics when stdout is a pipe
//!   its reader closed (`sim run ... | head`); these write through a locked stdout and return
//!   the `io::Error` instead, so a subcommand propagates it with `?` and the CLI turns
//!   `BrokenPipe` into a clean exit.

use comfy_table::{CellAlignment, Table, presets::NOTHING};

/// Renders `header` and `rows` (same length each) as lines ending in `\n`; the columns
/// listed in `right` are right-aligned. An empty `header` prints no header line.
pub fn render<R, C>(header: &[&str], rows: R, right: &[usize]) -> String
where
    R: IntoIterator<Item = Vec<C>>,
    C: Into<comfy_table::Cell>,
{
    // Content arrangement stays disabled (the default): cells are never wrapped or cut.
    let mut t = Table::new();
    t.load_style(NOTHING);
    if !header.is_empty() {
        t.set_header(header.to_vec());
    }
    for r in rows {
        t.add_row(r);
    }
    let n = t.column_count();
    for (i, c) in t.column_iter_mut().enumerate() {
        c.set_padding((0, if i + 1 < n { 2 } else { 0 }));
        if right.contains(&i) {
            c.set_cell_alignment(CellAlignment::Right);
        }
    }
    t.lines().map(|l| l.trim_end().to_string() + "\n").collect()
}

/// `print!` that returns `std::io::Result<()>` instead of panicking.
/// Where `sim run`/`sim sweep` write without `--out`: `out/<name>`, ignored by git, so a
/// user's runs never touch the committed reference results in `results/` (CI writes those
/// only through an explicit `--out`).
pub fn default_out(name: &str) -> std::path::PathBuf {
    std::path::Path::new("out").join(name)
}

#[macro_export]
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        write!(std::io::stdout().lock(), $($arg)*)
    }};
}

/// `println!` that returns `std::io::Result<()>` instead of panicking.
#[macro_export]
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout().lock(), $($arg)*)
    }};
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_two_spaces_apart_numbers_right_no_trailing_space() {
        let rows = vec![vec!["a", "1", ""], vec!["long name", "1234", "x"]];
        assert_eq!(
            render(&["name", "n", "note"], rows, &[1]),
            "name          n  note\na             1\nlong name  1234  x\n"
        );
        assert_eq!(render::<_, &str>(&[], vec![vec!["k", "v"]], &[]), "k  v\n");
    }
}
