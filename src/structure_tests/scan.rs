//! Reading Rust source as the structure tests need it: comments, strings and character literals
//! blanked out (lines kept), `#[cfg(test)]` items found, `fn` items measured, module paths
//! parsed. A reader for this tree's code, not a Rust parser.

use std::ops::Range;

/// `text` with comments, string and character literals replaced by spaces (newlines kept), so
/// that braces and paths found in it are code.
pub fn code_only(text: &str) -> String {
    let c: Vec<char> = text.chars().collect();
    let mut out: Vec<char> = Vec::with_capacity(c.len());
    let mut i = 0;
    while i < c.len() {
        let end = literal_end(&c, i);
        if end > i {
            out.extend(
                c[i..end]
                    .iter()
                    .map(|&ch| if ch == '\n' { '\n' } else { ' ' }),
            );
            i = end;
        } else {
            out.push(c[i]);
            i += 1;
        }
    }
    out.into_iter().collect()
}

/// The end of the comment or literal starting at `i`, or `i` if none starts there.
fn literal_end(c: &[char], i: usize) -> usize {
    let at = |k: usize| c.get(k).copied().unwrap_or('\0');
    let word_before = i > 0 && (c[i - 1].is_alphanumeric() || c[i - 1] == '_');
    match (at(i), at(i + 1)) {
        ('/', '/') => (i..c.len()).find(|&k| c[k] == '\n').unwrap_or(c.len()),
        ('/', '*') => block_comment_end(c, i),
        ('"', _) => string_end(c, i + 1),
        ('b', '"') if !word_before => string_end(c, i + 2),
        ('r', '"' | '#') if !word_before => raw_string_end(c, i + 1),
        ('b', 'r') if !word_before && matches!(at(i + 2), '"' | '#') => raw_string_end(c, i + 2),
        ('\'', _) => char_end(c, i),
        ('b', '\'') if !word_before => char_end(c, i + 1),
        _ => i,
    }
}

fn block_comment_end(c: &[char], start: usize) -> usize {
    let (mut depth, mut k) = (0usize, start);
    while k + 1 < c.len() {
        if c[k] == '/' && c[k + 1] == '*' {
            depth += 1;
            k += 2;
        } else if c[k] == '*' && c[k + 1] == '/' {
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

/// The end of a string whose content starts at `k` (just past the opening quote).
fn string_end(c: &[char], mut k: usize) -> usize {
    while k < c.len() {
        match c[k] {
            '\\' => k += 2,
            '"' => return k + 1,
            _ => k += 1,
        }
    }
    c.len()
}

/// The end of a raw string whose hashes (or quote) start at `k`; `k` itself if it is not one.
fn raw_string_end(c: &[char], k: usize) -> usize {
    let hashes = c[k..].iter().take_while(|&&ch| ch == '#').count();
    if c.get(k + hashes) != Some(&'"') {
        return k - 1;
    }
    let mut j = k + hashes + 1;
    while j < c.len() {
        if c[j] == '"'
            && c[j + 1..]
                .iter()
                .take(hashes)
                .filter(|&&ch| ch == '#')
                .count()
                == hashes
        {
            return j + 1 + hashes;
        }
        j += 1;
    }
    c.len()
}

/// The end of a character literal at `k` (a quote); `k` if it is a lifetime or label.
fn char_end(c: &[char], k: usize) -> usize {
    match c.get(k + 1) {
        Some('\\') => (k + 2..c.len())
            .find(|&j| c[j] == '\'')
            .map_or(c.len(), |j| j + 1),
        Some(_) if c.get(k + 2) == Some(&'\'') => k + 3,
        _ => k,
    }
}

/// The index of the brace that closes the one at `open` in `code`.
pub fn matching_brace(code: &[u8], open: usize) -> usize {
    let mut depth = 0usize;
    for (k, &b) in code.iter().enumerate().skip(open) {
        match b {
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    return k;
                }
            }
            _ => {}
        }
    }
    code.len()
}

/// The byte ranges of `code` taken by items under `#[cfg(test)]`.
pub fn test_items(code: &str) -> Vec<Range<usize>> {
    let bytes = code.as_bytes();
    let mut ranges = Vec::new();
    let mut from = 0;
    while let Some(at) = code[from..].find("#[cfg(test)]") {
        let start = from + at;
        let after = start + "#[cfg(test)]".len();
        let end = match code[after..].find(['{', ';']) {
            Some(k) if bytes[after + k] == b'{' => matching_brace(bytes, after + k) + 1,
            Some(k) => after + k + 1,
            None => code.len(),
        };
        ranges.push(start..end);
        from = end.max(after);
    }
    ranges
}

/// `code` with the items under `#[cfg(test)]` blanked out.
pub fn without_tests(code: &str) -> String {
    let mut out = code.as_bytes().to_vec();
    for r in test_items(code) {
        for b in &mut out[r] {
            if *b != b'\n' {
                *b = b' ';
            }
        }
    }
    String::from_utf8(out).expect("blanking keeps UTF-8: only ASCII is replaced by spaces")
}

fn is_ident(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// A `fn` item: its name, the line it starts on (1-based) and how many lines it spans.
#[derive(Debug)]
pub struct FnItem {
    /// The function's name.
    pub name: String,
    /// Its first line.
    pub line: usize,
    /// Lines from `fn` to the closing brace.
    pub lines: usize,
}

/// The `fn` items with bodies in `code` (already [`code_only`]), outside `#[cfg(test)]` items.
pub fn functions(code: &str) -> Vec<FnItem> {
    let code = without_tests(code);
    let b = code.as_bytes();
    let mut found = Vec::new();
    let mut k = 0;
    while let Some(at) = code[k..].find("fn ") {
        let start = k + at;
        k = start + 3;
        if start > 0 && is_ident(b[start - 1]) {
            continue;
        }
        let name: String = code[k..]
            .trim_start()
            .chars()
            .take_while(|&ch| ch.is_alphanumeric() || ch == '_')
            .collect();
        if name.is_empty() {
            continue;
        }
        let Some(open) = body_start(b, k) else {
            continue;
        };
        let close = matching_brace(b, open);
        let line = code[..start].matches('\n').count() + 1;
        let lines = code[start..close].matches('\n').count() + 1;
        found.push(FnItem { name, line, lines });
    }
    found
}

/// The brace that opens the body of a `fn` whose signature starts at `k`; none for a
/// declaration without a body.
fn body_start(b: &[u8], k: usize) -> Option<usize> {
    let mut depth = 0i32;
    for (j, &ch) in b.iter().enumerate().skip(k) {
        match ch {
            b'(' | b'[' => depth += 1,
            b')' | b']' => depth -= 1,
            b';' if depth == 0 => return None,
            b'{' if depth == 0 => return Some(j),
            _ => {}
        }
    }
    None
}

/// The module paths that `code` names from `crate`, `super` or `self`, use trees expanded:
/// `use crate::a::{b::C, d}` gives `crate::a::b::C` and `crate::a::d`.
pub fn paths(code: &str) -> Vec<(usize, Vec<String>)> {
    let b = code.as_bytes();
    let mut out = Vec::new();
    let mut k = 0;
    while k < b.len() {
        let word_start = k == 0 || !is_ident(b[k - 1]) && b[k - 1] != b':';
        let head = ["crate", "super", "self"].into_iter().find(|h| {
            word_start && code[k..].starts_with(h) && code[k + h.len()..].starts_with("::")
        });
        match head {
            Some(h) => {
                let mut found = Vec::new();
                let end = tree(code, k, vec![], &mut found).max(k + h.len());
                out.extend(found.into_iter().map(|p| (k, p)));
                k = end;
            }
            None => k += 1,
        }
    }
    out
}

/// Parses the use tree at `k` under `prefix` into `out`; returns where it ends.
fn tree(code: &str, mut k: usize, mut prefix: Vec<String>, out: &mut Vec<Vec<String>>) -> usize {
    let b = code.as_bytes();
    loop {
        while k < b.len() && b[k].is_ascii_whitespace() {
            k += 1;
        }
        if k < b.len() && b[k] == b'{' {
            return group(code, k + 1, prefix, out);
        }
        let end = (k..b.len()).find(|&j| !is_ident(b[j])).unwrap_or(b.len());
        if end == k {
            break;
        }
        prefix.push(code[k..end].to_string());
        k = end;
        let rest = code[k..].trim_start();
        if !rest.starts_with("::") || rest.starts_with("::<") {
            break;
        }
        k = code.len() - rest.len() + 2;
    }
    out.push(prefix);
    k
}

/// Parses the members of a `{...}` use group starting at `k`; returns the end of the group.
fn group(code: &str, mut k: usize, prefix: Vec<String>, out: &mut Vec<Vec<String>>) -> usize {
    let b = code.as_bytes();
    while k < b.len() {
        match b[k] {
            b'}' => return k + 1,
            b',' => k += 1,
            ch if ch.is_ascii_whitespace() => k += 1,
            _ => {
                let next = tree(code, k, prefix.clone(), out);
                // `self` in a group names the prefix itself; `as` renames are skipped.
                k = skip_rename(code, next.max(k + 1));
            }
        }
    }
    k
}

fn skip_rename(code: &str, k: usize) -> usize {
    let rest = code[k..].trim_start();
    match rest.strip_prefix("as ") {
        Some(tail) => {
            let tail = tail.trim_start();
            let n = tail.bytes().take_while(|&b| is_ident(b)).count();
            code.len() - tail.len() + n
        }
        None => k,
    }
}

/// The inline modules of `code` (`mod name { ... }`): each name with the byte range it spans.
pub fn inline_modules(code: &str) -> Vec<(String, Range<usize>)> {
    let b = code.as_bytes();
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(at) = code[from..].find("mod ") {
        let start = from + at;
        from = start + 4;
        if start > 0 && is_ident(b[start - 1]) {
            continue;
        }
        let rest = code[from..].trim_start();
        let name: String = rest
            .chars()
            .take_while(|&c| c.is_alphanumeric() || c == '_')
            .collect();
        let after = rest[name.len()..].trim_start();
        if !name.is_empty() && after.starts_with('{') {
            let open = code.len() - after.len();
            out.push((name, open..matching_brace(b, open)));
        }
    }
    out
}
