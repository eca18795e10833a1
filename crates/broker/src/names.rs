//! Names clients choose (cells, resource kinds, devices): what is accepted,
//! and how they are shown.
//!
//! A name reaches terminals (`allot status`) and the broker's log, so one
//! holding a newline or an escape sequence could forge a table row or a log
//! line, or drive the terminal. Names are therefore checked when they
//! arrive ([`check`]: printable characters only, bounded length), and every
//! place that prints one also escapes it ([`shown`]), which covers names
//! restored from an older journal.

use std::borrow::Cow;

/// Longest cell name, in bytes.
pub const MAX_CELL_NAME: usize = 128;
/// Longest kind or device name, in bytes.
pub const MAX_KIND_NAME: usize = 64;

/// Checks a name: at most `max` bytes, no control characters (C0, DEL, C1)
/// and no Unicode format characters that reorder or hide text.
pub fn check(what: &str, name: &str, max: usize) -> Result<(), String> {
    if name.len() > max {
        return Err(format!(
            "{what} is {} bytes long; the limit is {max}",
            name.len()
        ));
    }
    if let Some(c) = name.chars().find(|&c| unprintable(c)) {
        return Err(format!(
            "{what} {} holds the control character {:?}; use printable characters only",
            shown(name),
            c
        ));
    }
    Ok(())
}

fn unprintable(c: char) -> bool {
    c.is_control()
        || matches!(c,
            '\u{200B}'..='\u{200F}' // zero-width and direction marks
            | '\u{202A}'..='\u{202E}' // embeddings and overrides
            | '\u{2066}'..='\u{2069}' // isolates
            | '\u{FEFF}')
}

/// `name` safe to print: control and format characters escaped as `\u{..}`
/// (`\n`, `\t`… for the common ones), backslashes doubled only when
/// something was escaped.
pub fn shown(name: &str) -> Cow<'_, str> {
    if !name.chars().any(unprintable) {
        return Cow::Borrowed(name);
    }
    let mut out = String::with_capacity(name.len() + 8);
    for c in name.chars() {
        if unprintable(c) || c == '\\' {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn printable_names_pass_unchanged() {
        for n in ["make", "gcc -j8", "ünïcødé ✓", "a\\b", ""] {
            check("name", n, MAX_CELL_NAME).unwrap();
            assert_eq!(shown(n), n);
        }
    }

    #[test]
    fn control_characters_are_refused_and_escaped() {
        for n in [
            "row\n   9  forged",
            "\x1b[2J",
            "bell\x07",
            "\u{202E}txt.exe",
            "c1\u{009b}31m",
        ] {
            let e = check("cell name", n, MAX_CELL_NAME).unwrap_err();
            assert!(e.contains("control character"), "{e}");
            let s = shown(n);
            assert!(!s.chars().any(unprintable), "{s:?}");
            assert!(
                !e.chars().any(unprintable),
                "the error itself is safe: {e:?}"
            );
        }
        assert_eq!(shown("a\nb\\c"), "a\\nb\\\\c");
    }

    #[test]
    fn long_names_are_refused() {
        let e = check("kind name", &"k".repeat(65), MAX_KIND_NAME).unwrap_err();
        assert!(e.contains("65 bytes") && e.contains("64"), "{e}");
    }
}
