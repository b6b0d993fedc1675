//! The paths a Rust source file names, read from its tokens, for the layering checks of
//! `architecture.rs`: every `use` item's tree expanded into one path per leaf
//! (`use crate::{a::b, c::{self, d as e}}` names `crate::a::b`, `crate::c` and `crate::c::d`),
//! and every other path of two segments or more (`crate::trace::trace_flat(…)`,
//! `super::super::attr::export_attr(…)`). Comments and string and character literals are
//! skipped, so doc links and messages may name any layer.

/// A token of Rust source, as far as paths need them.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Token {
    Ident(String),
    PathSep,
    Open,
    Close,
    Comma,
    Star,
    Other,
}

/// Skips a string literal whose opening quote is at `at` (`hashes` `#`s for a raw string);
/// returns the index after its closing quote.
fn skip_string(chars: &[char], at: usize, hashes: Option<usize>) -> usize {
    let mut index = at + 1;
    while index < chars.len() {
        match (chars[index], hashes) {
            ('\\', None) => index += 2,
            ('"', None) => return index + 1,
            ('"', Some(n))
                if chars[index + 1..]
                    .iter()
                    .take(n)
                    .filter(|&&c| c == '#')
                    .count()
                    == n =>
            {
                return index + 1 + n;
            }
            _ => index += 1,
        }
    }
    index
}

/// The tokens of `source`, without comments, literals and lifetimes.
fn tokens(source: &str) -> Vec<Token> {
    let chars: Vec<char> = source.chars().collect();
    let at = |index: usize| chars.get(index).copied().unwrap_or('\0');
    let mut found = Vec::new();
    let mut index = 0;
    while index < chars.len() {
        let c = chars[index];
        if c.is_whitespace() {
            index += 1;
        } else if c == '/' && at(index + 1) == '/' {
            while index < chars.len() && chars[index] != '\n' {
                index += 1;
            }
        } else if c == '/' && at(index + 1) == '*' {
            let mut depth = 0;
            loop {
                match (at(index), at(index + 1)) {
                    ('/', '*') => (depth, index) = (depth + 1, index + 2),
                    ('*', '/') => (depth, index) = (depth - 1, index + 2),
                    ('\0', _) => break,
                    _ => index += 1,
                }
                if depth == 0 {
                    break;
                }
            }
        } else if c == '"' {
            index = skip_string(&chars, index, None);
        } else if c == '\'' {
            // A character literal ('a', '\n', '\u{1F600}') or a lifetime or label ('a).
            index = if at(index + 1) == '\\' {
                (index + 3..chars.len())
                    .find(|&end| chars[end] == '\'')
                    .map_or(chars.len(), |end| end + 1)
            } else if at(index + 2) == '\'' {
                index + 3
            } else {
                index + 1
            };
        } else if c.is_alphabetic() || c == '_' {
            let start = index;
            while at(index).is_alphanumeric() || at(index) == '_' {
                index += 1;
            }
            let word: String = chars[start..index].iter().collect();
            let raw = matches!(word.as_str(), "r" | "br" | "cr");
            if raw && (at(index) == '"' || (at(index) == '#' && matches!(at(index + 1), '"' | '#')))
            {
                let hashes = chars[index..].iter().take_while(|&&c| c == '#').count();
                index = skip_string(&chars, index + hashes, Some(hashes));
            } else if matches!(word.as_str(), "b" | "c") && matches!(at(index), '"' | '\'') {
                // b"…", c"…", b'…': the literal is read next, as any other.
            } else if word == "r" && at(index) == '#' {
                index += 1; // r#ident: the identifier follows.
            } else {
                found.push(Token::Ident(word));
            }
        } else if c.is_ascii_digit() {
            while at(index).is_alphanumeric() || at(index) == '_' {
                index += 1;
            }
        } else if c == ':' && at(index + 1) == ':' {
            found.push(Token::PathSep);
            index += 2;
        } else {
            found.push(match c {
                '{' => Token::Open,
                '}' => Token::Close,
                ',' => Token::Comma,
                '*' => Token::Star,
                _ => Token::Other,
            });
            index += 1;
        }
    }
    found
}

/// Reads the use tree at `tokens[*index]` under `prefix`, pushing one path per leaf.
fn use_tree(tokens: &[Token], index: &mut usize, prefix: Vec<String>, out: &mut Vec<Vec<String>>) {
    match tokens.get(*index) {
        Some(Token::PathSep) => {
            *index += 1;
            use_tree(tokens, index, prefix, out);
        }
        Some(Token::Open) => {
            *index += 1;
            loop {
                match tokens.get(*index) {
                    Some(Token::Close) => {
                        *index += 1;
                        break;
                    }
                    Some(Token::Comma) => *index += 1,
                    None => break,
                    Some(_) => use_tree(tokens, index, prefix.clone(), out),
                }
            }
        }
        Some(Token::Star) => {
            *index += 1;
            out.push([prefix, vec!["*".to_owned()]].concat());
        }
        Some(Token::Ident(name)) => {
            *index += 1;
            let mut path = prefix;
            // `a::{self, …}` names `a` itself.
            if name != "self" || path.is_empty() {
                path.push(name.clone());
            }
            if tokens.get(*index) == Some(&Token::PathSep) {
                *index += 1;
                use_tree(tokens, index, path, out);
            } else {
                if tokens.get(*index) == Some(&Token::Ident("as".to_owned())) {
                    *index += 2;
                }
                out.push(path);
            }
        }
        _ => *index += 1,
    }
}

/// A path a file names, and the inline modules (`mod tests { … }`) it is named in.
#[derive(Debug)]
pub struct Named {
    /// The inline modules around it, outermost first.
    pub within: Vec<String>,
    /// Its segments, as written.
    pub segments: Vec<String>,
}

/// Every path `source` names: the leaves of its `use` trees, and every other path of two
/// segments or more.
pub fn paths(source: &str) -> Vec<Named> {
    let tokens = tokens(source);
    let mut found = Vec::new();
    // The inline modules open at this point, each with the brace depth inside it.
    let mut within: Vec<(String, usize)> = Vec::new();
    let mut depth = 0;
    let mut index = 0;
    let mut push = |within: &[(String, usize)], segments: Vec<String>| {
        found.push(Named {
            within: within.iter().map(|(name, _)| name.clone()).collect(),
            segments,
        });
    };
    while index < tokens.len() {
        let after_sep = index > 0 && tokens[index - 1] == Token::PathSep;
        match &tokens[index] {
            Token::Open => {
                depth += 1;
                index += 1;
            }
            Token::Close => {
                if within.last().is_some_and(|(_, inside)| *inside == depth) {
                    within.pop();
                }
                depth -= 1;
                index += 1;
            }
            Token::Ident(word) if word == "mod" => {
                if let (Some(Token::Ident(name)), Some(Token::Open)) =
                    (tokens.get(index + 1), tokens.get(index + 2))
                {
                    within.push((name.clone(), depth + 1));
                }
                index += 1;
            }
            // `use<'a>` (precise capturing) is not an import.
            Token::Ident(word) if word == "use" && tokens.get(index + 1) != Some(&Token::Other) => {
                index += 1;
                let mut leaves = Vec::new();
                use_tree(&tokens, &mut index, Vec::new(), &mut leaves);
                for leaf in leaves {
                    push(&within, leaf);
                }
            }
            Token::Ident(first) if !after_sep && tokens.get(index + 1) == Some(&Token::PathSep) => {
                let mut segments = vec![first.clone()];
                index += 1;
                while tokens.get(index) == Some(&Token::PathSep) {
                    let Some(Token::Ident(next)) = tokens.get(index + 1) else {
                        break;
                    };
                    segments.push(next.clone());
                    index += 2;
                }
                if segments.len() >= 2 {
                    push(&within, segments);
                }
            }
            _ => index += 1,
        }
    }
    found
}

/// The module a file is, from its path relative to `src/`: `exec/kernels/save.rs` is
/// `exec::kernels::save`, `exec/mod.rs` is `exec`, `lib.rs` and `main.rs` the crate root.
pub fn module_of_file(relative: &str) -> Vec<String> {
    let without = relative.strip_suffix(".rs").unwrap_or(relative);
    let mut segments: Vec<String> = without.split('/').map(str::to_owned).collect();
    if matches!(
        segments.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        segments.pop();
    }
    segments
}

/// `named`, a path of the file whose module is `module`, as a path from the crate root
/// (`crate::`, `self::` and `super::` resolved); `None` for a path into another crate (or a
/// child module's name used bare, which stays inside the module).
pub fn resolve(named: &Named, module: &[String]) -> Option<Vec<String>> {
    let (first, mut rest) = named.segments.split_first()?;
    let mut at = match first.as_str() {
        "crate" => Vec::new(),
        "self" | "super" => [module, named.within.as_slice()].concat(),
        _ => return None,
    };
    if first == "super" {
        at.pop()?;
    }
    while let Some((next, after)) = rest.split_first()
        && (next == "self" || next == "super")
    {
        if next == "super" {
            at.pop()?;
        }
        rest = after;
    }
    Some([at.as_slice(), rest].concat())
}
