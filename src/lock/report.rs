//! The words of `cron_guard()`'s operator lines, in one place: how long
//! (`3 h 12 min`, `waited 2.0 s`), since when (`14:50:00Z`), and the
//! per-run record in its text and JSON forms. cronlock/polyfill's
//! `Polyfill\Report` writes the same words (`php-tests/CrossImplementationTest`
//! holds both to it); the `cronlock` command prints durations the same way.
//!
//! The traps this closes:
//! - a duration has two units at most and whole numbers, so a line stays
//!   short and greppable whatever the age (`41 d 2 h`, never `3673921 s`);
//! - a clock time is UTC with its `Z` (a host's zone is not the log
//!   reader's), and carries its date once it is not today's;
//! - a record's values are escaped once, by [`super::one_line`], before
//!   they are quoted: a key, a path or a holder cannot end a line, break a
//!   logfmt pair or a JSON string;
//! - JSON keys are fixed and always present (`holder` is `null` when
//!   unknown): log shippers map them once.

use super::one_line;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Two units at most, whole numbers: `0 s`, `45 s`, `12 min 5 s`,
/// `3 h 12 min`, `41 d 2 h`.
pub fn duration_words(duration: Duration) -> String {
    const STEPS: [(&str, u64); 4] = [("d", 86_400), ("h", 3600), ("min", 60), ("s", 1)];
    let secs = duration.as_secs();
    for (i, &(unit, size)) in STEPS.iter().enumerate() {
        if secs >= size || size == 1 {
            let mut text = format!("{} {unit}", secs / size);
            if let Some(&(next_unit, next_size)) = STEPS.get(i + 1) {
                let rest = secs % size / next_size;
                if rest > 0 {
                    text.push_str(&format!(" {rest} {next_unit}"));
                }
            }
            return text;
        }
    }
    "0 s".to_owned()
}

/// A limit the user set (`stale_after`): [`duration_words`], except that a
/// limit under a minute with a fraction is given in [`tenths`] (`0.5 s`,
/// where whole seconds would say `0 s`).
pub fn limit_words(seconds: f64) -> String {
    let limit = Duration::from_secs_f64(seconds.max(0.0));
    if seconds < 60.0 && seconds.fract() != 0.0 {
        tenths(limit)
    } else {
        duration_words(limit)
    }
}

/// `2.0 s`: a wait, to a tenth of a second.
pub fn tenths(duration: Duration) -> String {
    format!("{:.1} s", duration.as_secs_f64())
}

/// `14:50:00Z` on the UTC day of `now`, else `2026-11-30T14:50:00Z`.
pub fn clock_time(at: SystemTime, now: SystemTime) -> String {
    let at = unix_secs(at);
    let full = iso8601_utc(at);
    if at / 86_400 == unix_secs(now) / 86_400 {
        return full[11..].to_owned();
    }
    full
}

/// Whole seconds since the Unix epoch (0 before it).
pub fn unix_secs(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// `YYYY-MM-DDTHH:MM:SSZ` (civil date from days since 1970, Howard
/// Hinnant's algorithm).
pub fn iso8601_utc(secs: u64) -> String {
    let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

/// The seconds of `YYYY-MM-DDTHH:MM:SSZ` (as [`iso8601_utc`] writes it);
/// `None` for anything else.
pub fn parse_iso8601_utc(text: &str) -> Option<u64> {
    let b = text.as_bytes();
    if b.len() != 20 || &text[4..5] != "-" || &text[7..8] != "-" || &text[10..11] != "T" {
        return None;
    }
    if &text[13..14] != ":" || &text[16..17] != ":" || &text[19..] != "Z" {
        return None;
    }
    let num = |from: usize, to: usize| -> Option<i64> {
        let part = &text[from..to];
        part.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| part.parse().ok())?
    };
    let (y, m, d) = (num(0, 4)?, num(5, 7)?, num(8, 10)?);
    let (hh, mm, ss) = (num(11, 13)?, num(14, 16)?, num(17, 19)?);
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) || hh > 23 || mm > 59 || ss > 60 {
        return None;
    }
    // Days from civil (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    u64::try_from(days * 86_400 + hh * 3600 + mm * 60 + ss).ok()
}

/// How a run ended, as the record names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Ran,
    SkippedBusy,
    SkippedInterrupted,
    /// The job threw this class.
    Failed(String),
    /// The job returned (or called `exit()`), and its release threw this
    /// class.
    ReleaseFailed(String),
    /// The job ran, and the hold was lost while it did.
    Lost,
}

impl Outcome {
    pub fn words(&self) -> String {
        match self {
            Outcome::Ran => "ran".to_owned(),
            Outcome::SkippedBusy => "skipped: busy".to_owned(),
            Outcome::SkippedInterrupted => "skipped: interrupted".to_owned(),
            Outcome::Failed(class) => format!("failed: {class}"),
            Outcome::ReleaseFailed(class) => format!("release_failed: {class}"),
            Outcome::Lost => "lost".to_owned(),
        }
    }

    pub fn is_skip(&self) -> bool {
        matches!(self, Outcome::SkippedBusy | Outcome::SkippedInterrupted)
    }
}

/// One run, as `'record'` writes it.
pub struct RunRecord<'a> {
    /// When the run ended.
    pub time: SystemTime,
    /// The lock as the lines name it (a named lock: its name).
    pub lock: &'a str,
    pub outcome: &'a Outcome,
    pub waited: Duration,
    pub held: Duration,
    /// `41327@web1`: who held the lock (this run when it ran).
    pub holder: Option<&'a str>,
}

impl RunRecord<'_> {
    /// `cron_guard: record lock=sync-orders outcome=ran waited_ms=3
    /// held_ms=1520 holder=41327@web1` (logfmt: a value with a space, `"`,
    /// `=` or `\` is quoted; an unknown holder is `-`).
    pub fn text(&self) -> String {
        format!(
            "cron_guard: record lock={} outcome={} waited_ms={} held_ms={} holder={}",
            logfmt(self.lock),
            logfmt(&self.outcome.words()),
            self.waited.as_millis(),
            self.held.as_millis(),
            self.holder.map_or_else(|| "-".to_owned(), logfmt)
        )
    }

    /// `{"time":"…","lock":"…","outcome":"ran","waited_ms":3,"held_ms":1520,"holder":"41327@web1"}`.
    pub fn json(&self) -> String {
        format!(
            "{{\"time\":{},\"lock\":{},\"outcome\":{},\"waited_ms\":{},\"held_ms\":{},\"holder\":{}}}",
            json_string(&iso8601_utc(unix_secs(self.time))),
            json_string(self.lock),
            json_string(&self.outcome.words()),
            self.waited.as_millis(),
            self.held.as_millis(),
            self.holder.map_or_else(|| "null".to_owned(), json_string)
        )
    }
}

fn logfmt(value: &str) -> String {
    let value = one_line(value);
    if !value.is_empty() && !value.contains([' ', '"', '=', '\\']) {
        return value;
    }
    format!("\"{}\"", value.replace('\\', "\\\\").replace('"', "\\\""))
}

/// A JSON string of `value` after [`one_line`], which leaves no control
/// character (nor U+2028/2029) to escape: only `"` and `\` remain.
fn json_string(value: &str) -> String {
    let value = one_line(value);
    format!("\"{}\"", value.replace('\\', "\\\\").replace('"', "\\\""))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_limit_with_a_fraction_keeps_it_under_a_minute() {
        assert_eq!(limit_words(0.5), "0.5 s");
        assert_eq!(limit_words(1.0), "1 s");
        assert_eq!(limit_words(90.5), "1 min 30 s");
    }

    #[test]
    fn durations_have_two_units_at_most() {
        let words = |s| duration_words(Duration::from_secs(s));
        assert_eq!(words(0), "0 s");
        assert_eq!(words(45), "45 s");
        assert_eq!(words(725), "12 min 5 s");
        assert_eq!(words(3 * 3600 + 12 * 60 + 59), "3 h 12 min");
        assert_eq!(words(41 * 86_400 + 2 * 3600 + 7), "41 d 2 h");
        assert_eq!(words(3600), "1 h");
        assert_eq!(tenths(Duration::from_millis(2049)), "2.0 s");
    }

    #[test]
    fn clock_times_carry_the_date_when_not_today() {
        let at = UNIX_EPOCH + Duration::from_secs(1_764_514_200); // 2025-11-30T14:50:00Z
        assert_eq!(clock_time(at, at + Duration::from_secs(3600)), "14:50:00Z");
        assert_eq!(
            clock_time(at, at + Duration::from_secs(86_400)),
            "2025-11-30T14:50:00Z"
        );
        assert_eq!(
            parse_iso8601_utc("2025-11-30T14:50:00Z"),
            Some(1_764_514_200)
        );
        assert_eq!(parse_iso8601_utc("2000-02-29T00:00:00Z"), Some(951_782_400));
        assert_eq!(parse_iso8601_utc("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(parse_iso8601_utc("2025-11-30 14:50:00Z"), None);
        assert_eq!(iso8601_utc(951_782_400), "2000-02-29T00:00:00Z");
    }

    #[test]
    fn records_quote_and_escape_their_values() {
        let outcome = Outcome::SkippedBusy;
        let record = RunRecord {
            time: UNIX_EPOCH + Duration::from_secs(1_764_514_200),
            lock: "redis key 'a\"b' at 127.0.0.1:6379\n",
            outcome: &outcome,
            waited: Duration::from_millis(2003),
            held: Duration::ZERO,
            holder: None,
        };
        assert_eq!(
            record.text(),
            "cron_guard: record lock=\"redis key 'a\\\"b' at 127.0.0.1:6379\\\\n\" \
             outcome=\"skipped: busy\" waited_ms=2003 held_ms=0 holder=-"
        );
        assert_eq!(
            record.json(),
            "{\"time\":\"2025-11-30T14:50:00Z\",\"lock\":\"redis key 'a\\\"b' at 127.0.0.1:6379\\\\n\",\
             \"outcome\":\"skipped: busy\",\"waited_ms\":2003,\"held_ms\":0,\"holder\":null}"
        );
        let ran = Outcome::Ran;
        let record = RunRecord {
            lock: "sync-orders",
            outcome: &ran,
            holder: Some("41327@web1"),
            ..record
        };
        assert_eq!(
            record.text(),
            "cron_guard: record lock=sync-orders outcome=ran waited_ms=2003 held_ms=0 holder=41327@web1"
        );
    }
}
