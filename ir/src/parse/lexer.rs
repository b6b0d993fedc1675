//! The lexer of the IR text form: words (names, numbers, keywords), quoted strings with
//! escapes, `<...>` texts and punctuation, each with its position and whether it starts a line.
//! `#` starts a comment that runs to the end of the line.

use super::{ParseError, ParseErrorKind, Pos};

/// A token without its position.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Tok {
    /// A bare word: a name, number or keyword.
    Word(String),
    /// A quoted string, `"..."` or `b"..."`.
    Str(Vec<u8>),
    /// `<...>`.
    Angle(String),
    /// One punctuation character.
    Punct(char),
    /// The end of the input.
    End,
}

impl Tok {
    /// The token as an error message names it.
    pub(super) fn describe(&self) -> String {
        match self {
            Tok::Word(word) => format!("`{word}`"),
            Tok::Str(_) => "a string".to_owned(),
            Tok::Angle(text) => format!("`<{text}>`"),
            Tok::Punct(c) => format!("`{c}`"),
            Tok::End => "end of input".to_owned(),
        }
    }
}

/// A token and where it starts.
#[derive(Clone, Debug)]
pub(super) struct Token {
    /// The token.
    pub(super) tok: Tok,
    /// Its first character.
    pub(super) pos: Pos,
    /// Whether this is the first token on its line.
    pub(super) line_start: bool,
}

/// The tokens of `text`, ending with [`Tok::End`].
pub(super) fn lex(text: &str) -> Result<Vec<Token>, ParseError> {
    let mut tokens = Vec::new();
    let mut chars = text.chars().peekable();
    let mut pos = Pos { line: 1, column: 1 };
    let mut line_start = true;
    let advance = |pos: &mut Pos, c: char| {
        if c == '\n' {
            pos.line += 1;
            pos.column = 1;
        } else {
            pos.column += 1;
        }
    };
    while let Some(&c) = chars.peek() {
        let start = pos;
        if c == '\n' {
            line_start = true;
        }
        if c.is_whitespace() {
            chars.next();
            advance(&mut pos, c);
            continue;
        }
        if c == '#' {
            while let Some(&c) = chars.peek() {
                if c == '\n' {
                    break;
                }
                chars.next();
                advance(&mut pos, c);
            }
            continue;
        }
        let tok = if c == '"' || (c == 'b' && text_at_quote(&chars)) {
            if c == 'b' {
                chars.next();
                advance(&mut pos, c);
            }
            chars.next();
            advance(&mut pos, '"');
            Tok::Str(lex_string(&mut chars, &mut pos, start)?)
        } else if c == '<' {
            chars.next();
            advance(&mut pos, c);
            let mut inner = String::new();
            loop {
                match chars.next() {
                    Some('>') => {
                        advance(&mut pos, '>');
                        break;
                    }
                    Some(c) if c != '\n' => {
                        advance(&mut pos, c);
                        inner.push(c);
                    }
                    _ => return Err(start.error(ParseErrorKind::UnterminatedAngle)),
                }
            }
            Tok::Angle(inner)
        } else if crate::write::is_name_char(c) || c == '+' {
            let mut word = String::new();
            word.push(c);
            chars.next();
            advance(&mut pos, c);
            while let Some(&c) = chars.peek() {
                if !crate::write::is_name_char(c) {
                    break;
                }
                word.push(c);
                chars.next();
                advance(&mut pos, c);
            }
            Tok::Word(word)
        } else if "=()[]{},:^@?".contains(c) {
            chars.next();
            advance(&mut pos, c);
            Tok::Punct(c)
        } else {
            return Err(start.error(ParseErrorKind::UnexpectedChar(c)));
        };
        tokens.push(Token {
            tok,
            pos: start,
            line_start,
        });
        line_start = false;
    }
    tokens.push(Token {
        tok: Tok::End,
        pos,
        line_start: true,
    });
    Ok(tokens)
}

/// Whether the iterator stands at `b"`.
fn text_at_quote(chars: &std::iter::Peekable<std::str::Chars<'_>>) -> bool {
    let mut ahead = chars.clone();
    ahead.next();
    ahead.next() == Some('"')
}

/// Reads a string body after the opening quote, through the closing quote.
fn lex_string(
    chars: &mut std::iter::Peekable<std::str::Chars<'_>>,
    pos: &mut Pos,
    start: Pos,
) -> Result<Vec<u8>, ParseError> {
    let mut bytes = Vec::new();
    loop {
        let here = *pos;
        let Some(c) = chars.next() else {
            return Err(start.error(ParseErrorKind::UnterminatedString));
        };
        pos.column += 1;
        match c {
            '"' => return Ok(bytes),
            '\n' => return Err(start.error(ParseErrorKind::UnterminatedString)),
            '\\' => {
                let escape = chars.next();
                pos.column += 1;
                match escape {
                    Some('n') => bytes.push(b'\n'),
                    Some('t') => bytes.push(b'\t'),
                    Some('r') => bytes.push(b'\r'),
                    Some('"') => bytes.push(b'"'),
                    Some('\\') => bytes.push(b'\\'),
                    Some('x') => {
                        let hex: String = chars.by_ref().take(2).collect();
                        pos.column += hex.chars().count() as u32;
                        match u8::from_str_radix(&hex, 16) {
                            Ok(byte) if hex.len() == 2 => bytes.push(byte),
                            _ => {
                                return Err(
                                    here.error(ParseErrorKind::InvalidEscape(format!("\\x{hex}")))
                                );
                            }
                        }
                    }
                    Some(other) => {
                        return Err(here.error(ParseErrorKind::InvalidEscape(format!("\\{other}"))));
                    }
                    None => return Err(start.error(ParseErrorKind::UnterminatedString)),
                }
            }
            c => {
                let mut buf = [0; 4];
                bytes.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            }
        }
    }
}
