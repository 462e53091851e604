//! How messages show text that comes from users or servers: names, paths,
//! keys, holders, a server's words. One rule for every backend and for the
//! busy line of `cron_guard()` (cronlock/polyfill's `Args::cut` and
//! `Args::escapeControls` apply the same one).
//!
//! The traps this closes:
//! - a name or path with a line break (a trailing newline from a config
//!   generator) cannot split one error into several log lines: control
//!   characters (C0, DEL, C1) are escaped (`\n`, `\u{1b}`);
//! - a 1 MB key does not become a 1 MB message: names are cut to 200
//!   characters, with "…" appended when cut;
//! - a whole log line also escapes U+2028 and U+2029, which some log
//!   viewers break lines at; the pieces in it may come from a userland
//!   lock's exception, which nothing else escaped.

/// Longest user-supplied name (key, path, lock name) a message echoes.
const MAX_ECHOED_CHARS: usize = 200;

/// `name` as messages echo it: cut to 200 characters, with "…" appended
/// when cut, and with its control characters escaped (`\n`, `\u{0}`).
pub fn shorten(name: &str) -> String {
    let mut shown = String::with_capacity(name.len().min(4 * MAX_ECHOED_CHARS));
    for (count, c) in name.chars().enumerate() {
        if count == MAX_ECHOED_CHARS {
            shown.push('…');
            break;
        }
        push_escaped(&mut shown, c, false);
    }
    shown
}

/// A whole log line: every control character and Unicode line break
/// escaped, nothing cut (the names in it are cut already).
pub fn one_line(text: &str) -> String {
    let mut line = String::with_capacity(text.len());
    for c in text.chars() {
        push_escaped(&mut line, c, true);
    }
    line
}

/// The one escaping rule: control characters as Rust escapes them (`\n`,
/// `\t`, `\r`, `\u{1b}`), with `line_breaks` also U+2028 and U+2029.
fn push_escaped(out: &mut String, c: char, line_breaks: bool) {
    if c.is_control() || (line_breaks && matches!(c, '\u{2028}' | '\u{2029}')) {
        out.extend(c.escape_default());
    } else {
        out.push(c);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_names_are_cut_to_200_characters() {
        assert_eq!(shorten("short"), "short");
        let exact = "é".repeat(200);
        assert_eq!(shorten(&exact), exact);
        let long = "k".repeat(1 << 20);
        let cut = shorten(&long);
        assert_eq!(cut.chars().count(), 201);
        assert!(cut.ends_with("k…"));
    }

    #[test]
    fn control_characters_are_escaped_and_the_rest_kept() {
        assert_eq!(shorten("/srv/locks\n/job.lock"), "/srv/locks\\n/job.lock");
        assert_eq!(
            shorten("a\tb\r\u{0}\u{1b}\u{7f}\u{85}"),
            "a\\tb\\r\\u{0}\\u{1b}\\u{7f}\\u{85}"
        );
        assert_eq!(shorten("é 'quoted' \\"), "é 'quoted' \\");
        let cut = shorten(&"\n".repeat(300));
        assert_eq!(cut, format!("{}…", "\\n".repeat(200)));
    }

    #[test]
    fn a_log_line_also_escapes_unicode_line_breaks_and_is_never_cut() {
        assert_eq!(shorten("a\u{2028}b"), "a\u{2028}b");
        assert_eq!(
            one_line("a\u{2028}b\u{2029}c\nd"),
            "a\\u{2028}b\\u{2029}c\\nd"
        );
        let long = "x".repeat(1000);
        assert_eq!(one_line(&long), long);
        assert_eq!(
            one_line(&shorten("a\nb")),
            "a\\nb",
            "escaping twice changes nothing"
        );
    }
}
