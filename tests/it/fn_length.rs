//! Functions read as steps: no function of the three crates' library and binary code
//! (`src/` and `crates/*/src/`) is over [`LIMIT`] lines, counted from its `fn` line to its
//! closing brace. Test code is left out: `#[cfg(test)]` items (inline test modules and the
//! files of out-of-line ones) and `tests/` or `benches/` folders. A function over the limit
//! fails here, named by file, line and length.

use std::path::{Path, PathBuf};

/// The most lines a non-test function may span.
const LIMIT: usize = 150;

/// Functions allowed over [`LIMIT`] for now, as (file, function name): each one a named,
/// temporary exception, to be split and removed from this list.
const EXCEPTIONS: &[(&str, &str)] = &[];

/// A function found: its file, the line of its `fn` and its length in lines.
#[derive(Debug, PartialEq)]
struct Found {
    file: String,
    line: usize,
    name: String,
    lines: usize,
}

#[test]
fn no_function_outside_tests_is_over_the_limit() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let all = workspace_functions(&root);
    assert!(
        all.len() > 500,
        "only {} functions found under src/ and crates/*/src/: the scan is broken",
        all.len()
    );
    let long: Vec<&Found> = all.iter().filter(|f| f.lines > LIMIT).collect();
    let over: Vec<String> = long
        .iter()
        .filter(|f| !EXCEPTIONS.contains(&(f.file.as_str(), f.name.as_str())))
        .map(|f| format!("{}:{}: fn {} is {} lines", f.file, f.line, f.name, f.lines))
        .collect();
    assert!(
        over.is_empty(),
        "functions over {LIMIT} lines (split them into named steps):\n{}",
        over.join("\n")
    );
    // An exception that no longer applies is removed from the list.
    let stale: Vec<String> = EXCEPTIONS
        .iter()
        .filter(|(file, name)| !long.iter().any(|f| f.file == *file && f.name == *name))
        .map(|(file, name)| format!("{file}: fn {name}"))
        .collect();
    assert!(
        stale.is_empty(),
        "exceptions no longer over {LIMIT} lines (remove them from EXCEPTIONS):\n{}",
        stale.join("\n")
    );
}

#[test]
fn the_scan_sees_strings_comments_and_test_modules_for_what_they_are() {
    let long_body = "    let x = 1;\n".repeat(LIMIT);
    let src = format!(
        r####"
/// A doc comment with a brace {{ and fn fake() {{
fn short(a: fn(u32) -> u32) -> &'static str {{
    let _c = '{{';
    let _l: &'static str = "}} fn not_here() {{";
    let _r = r#"a "quoted" }} brace"#;
    /* a block comment }} /* nested {{ */ */
    "ok"
}}

pub(crate) fn long<'a>(x: &'a str) -> &'a str {{
{long_body}    x
}}

trait T {{
    fn declared(&self);
}}

#[cfg(test)]
mod tests {{
    fn long_test() {{
{long_body}    }}
}}

#[cfg(test)]
mod more;
"####
    );
    let (found, test_mods) = scan(&src, "src/x.rs");
    let got: Vec<(&str, usize, usize)> = found.iter().map(|f| (f.name.as_str(), f.line, f.lines)).collect();
    assert_eq!(got, [("short", 3, 7), ("long", 11, LIMIT + 3)]);
    assert_eq!(test_mods, ["more"]);
    assert_eq!(
        test_module_files(Path::new("src/a/mod.rs"), "t"),
        [PathBuf::from("src/a/t.rs"), PathBuf::from("src/a/t/mod.rs")]
    );
    assert_eq!(
        test_module_files(Path::new("src/a/b.rs"), "t"),
        [PathBuf::from("src/a/b/t.rs"), PathBuf::from("src/a/b/t/mod.rs")]
    );
}

/// Every non-test function of the workspace's `src/` folders.
fn workspace_functions(root: &Path) -> Vec<Found> {
    let mut dirs = vec![root.join("src")];
    let crates = std::fs::read_dir(root.join("crates")).expect("crates/");
    let mut members: Vec<PathBuf> = crates.map(|e| e.expect("crates/ entry").path().join("src")).collect();
    members.sort();
    dirs.extend(members.into_iter().filter(|d| d.is_dir()));
    let mut files = Vec::new();
    for d in &dirs {
        rust_files(d, &mut files);
    }
    files.sort();
    let mut skip: Vec<PathBuf> = Vec::new();
    let mut per_file = Vec::new();
    for f in &files {
        let rel = f
            .strip_prefix(root)
            .expect("under the root")
            .to_string_lossy()
            .replace('\\', "/");
        let text = std::fs::read_to_string(f).unwrap_or_else(|e| panic!("{rel}: {e}"));
        let (found, test_mods) = scan(&text, &rel);
        for m in test_mods {
            skip.extend(test_module_files(f, &m));
        }
        per_file.push((f, found));
    }
    // The files of out-of-line test modules are test code too.
    let mut out = Vec::new();
    for (f, found) in per_file {
        if !skip.contains(f) {
            out.extend(found);
        }
    }
    out
}

/// The `.rs` files under `dir`, leaving out `tests/` and `benches/` folders.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let p = e.expect("directory entry").path();
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if p.is_dir() {
            if name != "tests" && name != "benches" {
                rust_files(&p, out);
            }
        } else if name.ends_with(".rs") {
            out.push(p);
        }
    }
}

/// Where the out-of-line module `name` declared in `file` lives.
fn test_module_files(file: &Path, name: &str) -> Vec<PathBuf> {
    let dir = file.parent().expect("a file has a folder");
    let stem = file.file_stem().and_then(|s| s.to_str()).unwrap_or("");
    let base = if matches!(stem, "mod" | "lib" | "main") {
        dir.to_path_buf()
    } else {
        dir.join(stem)
    };
    vec![base.join(format!("{name}.rs")), base.join(name).join("mod.rs")]
}

/// The functions of one file outside its `#[cfg(test)]` items, and the names of the
/// out-of-line test modules it declares.
fn scan(text: &str, file: &str) -> (Vec<Found>, Vec<String>) {
    let code: Vec<char> = blank_literals(text).chars().collect();
    let line_of = {
        let mut starts = vec![0usize];
        starts.extend(code.iter().enumerate().filter(|(_, c)| **c == '\n').map(|(i, _)| i + 1));
        move |i: usize| starts.partition_point(|&s| s <= i)
    };
    let mut found = Vec::new();
    let mut test_mods = Vec::new();
    let mut i = 0;
    while i < code.len() {
        if starts_with(&code, i, "#[cfg(test)]") {
            let (end, module) = item_end(&code, i + "#[cfg(test)]".len());
            test_mods.extend(module);
            i = end;
            continue;
        }
        if word_at(&code, i, "fn")
            && let Some((name, after)) = ident_after(&code, i + 2)
            && let Some(close) = body_end(&code, after)
        {
            found.push(Found {
                file: file.to_string(),
                line: line_of(i),
                name,
                lines: line_of(close) - line_of(i) + 1,
            });
        }
        i += 1;
    }
    (found, test_mods)
}

/// `text` with comments, string and char literals blanked (newlines kept), so braces and
/// keywords in them are not read as code.
fn blank_literals(text: &str) -> String {
    let c: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let blank = |out: &mut String, s: &[char]| out.extend(s.iter().map(|&ch| if ch == '\n' { '\n' } else { ' ' }));
    let mut i = 0;
    while i < c.len() {
        let end = literal_end(&c, i);
        if end > i {
            blank(&mut out, &c[i..end]);
            i = end;
        } else {
            out.push(c[i]);
            i += 1;
        }
    }
    out
}

/// The end of the comment or literal starting at `i` (`i` itself when none starts there).
fn literal_end(c: &[char], i: usize) -> usize {
    let at = |k: usize| c.get(k).copied().unwrap_or('\0');
    let ident_before = i > 0 && (c[i - 1].is_alphanumeric() || c[i - 1] == '_');
    match at(i) {
        '/' if at(i + 1) == '/' => (i..c.len()).find(|&k| c[k] == '\n').unwrap_or(c.len()),
        '/' if at(i + 1) == '*' => {
            let (mut depth, mut k) = (0, i);
            while k < c.len() {
                if at(k) == '/' && at(k + 1) == '*' {
                    depth += 1;
                    k += 2;
                } else if at(k) == '*' && at(k + 1) == '/' {
                    depth -= 1;
                    k += 2;
                    if depth == 0 {
                        return k;
                    }
                } else {
                    k += 1;
                }
            }
            c.len()
        }
        '"' => quoted_end(c, i + 1),
        'b' if !ident_before && at(i + 1) == '"' => quoted_end(c, i + 2),
        'b' if !ident_before && at(i + 1) == '\'' => char_end(c, i + 1).unwrap_or(i),
        'r' | 'b' if !ident_before => {
            let mut k = i + 1;
            if at(i) == 'b' && at(k) == 'r' {
                k += 1;
            } else if at(i) == 'b' {
                return i;
            }
            let hashes = (k..c.len()).take_while(|&j| c[j] == '#').count();
            if at(k + hashes) != '"' {
                return i;
            }
            let mut j = k + hashes + 1;
            while j < c.len() {
                if c[j] == '"' && (1..=hashes).all(|h| at(j + h) == '#') {
                    return j + 1 + hashes;
                }
                j += 1;
            }
            c.len()
        }
        '\'' => char_end(c, i).unwrap_or(i),
        _ => i,
    }
}

/// The end of the (non-raw) string whose contents start at `k`.
fn quoted_end(c: &[char], mut k: usize) -> usize {
    while k < c.len() {
        match c[k] {
            '\\' => k += 2,
            '"' => return k + 1,
            _ => k += 1,
        }
    }
    c.len()
}

/// The end of the char literal at `i` (a `'`), or `None` for a lifetime or label.
fn char_end(c: &[char], i: usize) -> Option<usize> {
    match c.get(i + 1) {
        // An escape: the escaped character, then up to the closing quote (`'\u{7f}'`).
        Some('\\') => (i + 3..c.len()).find(|&k| c[k] == '\'').map(|k| k + 1),
        Some(_) if c.get(i + 2) == Some(&'\'') => Some(i + 3),
        _ => None,
    }
}

fn starts_with(c: &[char], i: usize, s: &str) -> bool {
    s.chars().enumerate().all(|(k, ch)| c.get(i + k) == Some(&ch))
}

fn is_ident(ch: char) -> bool {
    ch.is_alphanumeric() || ch == '_'
}

/// Whether keyword `w` stands at `i` as a whole word.
fn word_at(c: &[char], i: usize, w: &str) -> bool {
    starts_with(c, i, w) && (i == 0 || !is_ident(c[i - 1])) && c.get(i + w.len()).is_none_or(|&ch| !is_ident(ch))
}

/// The identifier after whitespace from `i`, and the index after it.
fn ident_after(c: &[char], i: usize) -> Option<(String, usize)> {
    let start = (i..c.len()).find(|&k| !c[k].is_whitespace())?;
    let end = (start..c.len()).find(|&k| !is_ident(c[k])).unwrap_or(c.len());
    (end > start && !c[start].is_ascii_digit()).then(|| (c[start..end].iter().collect(), end))
}

/// The closing brace of the body that follows a signature from `i`, or `None` when a `;`
/// comes first (a declaration without a body).
fn body_end(c: &[char], i: usize) -> Option<usize> {
    let open = (i..c.len()).find(|&k| c[k] == '{' || c[k] == ';')?;
    if c[open] == ';' {
        return None;
    }
    matching(c, open)
}

/// The brace closing the one at `open`.
fn matching(c: &[char], open: usize) -> Option<usize> {
    let mut depth = 0usize;
    for (k, &ch) in c.iter().enumerate().skip(open) {
        match ch {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return Some(k);
                }
            }
            _ => {}
        }
    }
    None
}

/// The end of the item after an attribute ending at `i` (its block or its `;`), and the
/// module's name when it is an out-of-line `mod name;`.
fn item_end(c: &[char], i: usize) -> (usize, Option<String>) {
    let Some(stop) = (i..c.len()).find(|&k| c[k] == '{' || c[k] == ';') else {
        return (c.len(), None);
    };
    if c[stop] == '{' {
        return (matching(c, stop).map_or(c.len(), |k| k + 1), None);
    }
    let head: String = c[i..stop].iter().collect();
    let words: Vec<&str> = head.split_whitespace().collect();
    let module = match words.as_slice() {
        [.., "mod", name] => Some((*name).to_string()),
        _ => None,
    };
    (stop + 1, module)
}
