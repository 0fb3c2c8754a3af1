//! Wall-clock time as RFC 3339 text (`2026-12-03T15:04:05.123Z`), for
//! the timestamps a client is shown (a task's `createdAt`).

use std::time::{SystemTime, UNIX_EPOCH};

/// Now, in UTC, to the millisecond.
#[must_use]
pub fn utc_now_iso8601() -> String {
    rfc3339(SystemTime::now())
}

/// `at`, in UTC, to the millisecond; a time before 1970 reads as 1970.
#[must_use]
pub fn rfc3339(at: SystemTime) -> String {
    let since = at.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs();
    let (days, rest) = (secs / 86_400, secs % 86_400);
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60,
        since.subsec_millis()
    )
}

/// The proleptic Gregorian date of a day count since 1970-01-01 (Howard
/// Hinnant's `civil_from_days`).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn known_instants_read_as_rfc3339() {
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        let leap = UNIX_EPOCH + Duration::from_millis(951_782_400_007);
        assert_eq!(rfc3339(leap), "2000-02-29T00:00:00.007Z");
        let late = UNIX_EPOCH + Duration::from_secs(1_796_310_000);
        assert_eq!(rfc3339(late), "2026-12-03T15:00:00.000Z");
        let end_of_year = UNIX_EPOCH + Duration::from_secs(1_798_761_599);
        assert_eq!(rfc3339(end_of_year), "2026-12-31T23:59:59.000Z");
    }
}
