//! Calendar periods in an IANA time zone: the instants where a day, an ISO week, a month (from
//! a billing anchor day) or a year begins, DST-aware. The time-zone rules come from the IANA
//! database bundled into the library (jiff's `tzdb-bundle-always`), not from the host, so every
//! process of a fleet — whatever its language or machine — puts the boundaries at the same
//! instants.

use jiff::civil::Date;
use jiff::tz::TimeZone;
use jiff::{Timestamp, ToSpan};

use crate::error::{Error, Result};

/// The length of a calendar quota's period.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CalendarPeriod {
    /// A calendar day, from local midnight (23 or 25 hours long on DST changes).
    Day,
    /// An ISO week, from Monday's local midnight.
    Week,
    /// A calendar month, from the anchor day's local midnight.
    Month,
    /// A calendar year, from January 1's local midnight.
    Year,
}

impl CalendarPeriod {
    /// Parses `day`, `week`, `month` or `year`, naming `period` otherwise.
    pub fn parse(name: &str) -> Result<CalendarPeriod> {
        match name {
            "day" => Ok(CalendarPeriod::Day),
            "week" => Ok(CalendarPeriod::Week),
            "month" => Ok(CalendarPeriod::Month),
            "year" => Ok(CalendarPeriod::Year),
            other => Err(Error::invalid("period", format!("must be day, week, month or year, got {other:?}"))),
        }
    }

    /// The name [`CalendarPeriod::parse`] reads.
    pub fn as_str(self) -> &'static str {
        match self {
            CalendarPeriod::Day => "day",
            CalendarPeriod::Week => "week",
            CalendarPeriod::Month => "month",
            CalendarPeriod::Year => "year",
        }
    }
}

/// The instants, in microseconds since the Unix epoch, that begin the period containing a given
/// instant and the one after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PeriodBounds {
    /// The first instant of the period.
    pub start_us: u64,
    /// The first instant of the next period.
    pub end_us: u64,
}

/// A validated period, time zone and anchor: computes period boundaries.
#[derive(Debug, Clone)]
pub(crate) struct CalendarClock {
    period: CalendarPeriod,
    tz: TimeZone,
    tz_name: String,
    anchor: i8,
}

impl PartialEq for CalendarClock {
    fn eq(&self, other: &Self) -> bool {
        self.period == other.period && self.tz_name == other.tz_name && self.anchor == other.anchor
    }
}

impl CalendarClock {
    /// Validates the time zone (an IANA name such as `Europe/Berlin` or `UTC`) and the anchor
    /// (a day of the month, 1–31, for monthly periods only; `None` means 1).
    pub(crate) fn new(period: CalendarPeriod, tz: &str, anchor: Option<u8>) -> Result<CalendarClock> {
        let zone = TimeZone::get(tz).map_err(|_| {
            Error::invalid(
                "tz",
                format!("must be an IANA time zone name such as \"Europe/Berlin\" or \"UTC\", got {tz:?}"),
            )
        })?;
        let anchor = match (period, anchor) {
            (_, None) => 1,
            (CalendarPeriod::Month, Some(day @ 1..=31)) => day as i8,
            (CalendarPeriod::Month, Some(day)) => {
                return Err(Error::invalid("anchor", format!("must be a day of the month, 1 to 31, got {day}")))
            }
            (other, Some(_)) => {
                return Err(Error::invalid(
                    "anchor",
                    format!("applies to monthly periods only, not to period {:?}", other.as_str()),
                ))
            }
        };
        Ok(CalendarClock { period, tz: zone, tz_name: tz.to_owned(), anchor })
    }

    /// The period containing `now_us` (microseconds since the Unix epoch).
    pub(crate) fn bounds(&self, now_us: u64) -> Result<PeriodBounds> {
        let now = i64::try_from(now_us).ok().and_then(|us| Timestamp::from_microsecond(us).ok()).ok_or_else(|| {
            Error::invalid("now", format!("{now_us} µs since the epoch is outside the calendar's range"))
        })?;
        let today = now.to_zoned_datetime(self.tz.clone()).date();
        let (start, end) = match self.period {
            CalendarPeriod::Day => (today, today.tomorrow().map_err(out_of_range)?),
            CalendarPeriod::Week => {
                let monday = today
                    .checked_sub(i64::from(today.weekday().to_monday_zero_offset()).days())
                    .map_err(out_of_range)?;
                (monday, monday.checked_add(7.days()).map_err(out_of_range)?)
            }
            CalendarPeriod::Month => {
                let (year, month) = (today.year(), today.month());
                let this = self.anchor_in(year, month)?;
                if today >= this {
                    let (y, m) = next_month(year, month);
                    (this, self.anchor_in(y, m)?)
                } else {
                    let (y, m) = previous_month(year, month);
                    (self.anchor_in(y, m)?, this)
                }
            }
            CalendarPeriod::Year => {
                let first = today.first_of_year();
                (first, Date::new(first.year() + 1, 1, 1).map_err(out_of_range)?)
            }
        };
        Ok(PeriodBounds { start_us: self.first_instant(start)?, end_us: self.first_instant(end)? })
    }

    /// The anchor day in a month, clamped to the month's last day (anchor 31 in February is the
    /// 28th or the 29th).
    fn anchor_in(&self, year: i16, month: i8) -> Result<Date> {
        let first = Date::new(year, month, 1).map_err(out_of_range)?;
        Date::new(year, month, self.anchor.min(first.days_in_month())).map_err(out_of_range)
    }

    /// The first instant of a local day: midnight, or the end of a DST gap that skips midnight.
    fn first_instant(&self, day: Date) -> Result<u64> {
        let zoned = day.to_zoned_datetime(self.tz.clone()).and_then(|z| z.start_of_day()).map_err(out_of_range)?;
        u64::try_from(zoned.timestamp().as_microsecond()).map_err(|_| Error::invalid("now", "before the Unix epoch"))
    }
}

fn next_month(year: i16, month: i8) -> (i16, i8) {
    if month == 12 {
        (year + 1, 1)
    } else {
        (year, month + 1)
    }
}

fn previous_month(year: i16, month: i8) -> (i16, i8) {
    if month == 1 {
        (year - 1, 12)
    } else {
        (year, month - 1)
    }
}

fn out_of_range(error: jiff::Error) -> Error {
    Error::invalid("now", format!("outside the calendar's range: {error}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Microseconds since the epoch of an RFC 3339 instant.
    fn at(instant: &str) -> u64 {
        instant.parse::<Timestamp>().unwrap().as_microsecond() as u64
    }

    /// The bounds of the period containing `now`, as RFC 3339 instants in UTC.
    fn period(period: CalendarPeriod, tz: &str, anchor: Option<u8>, now: &str) -> (String, String) {
        let bounds = CalendarClock::new(period, tz, anchor).unwrap().bounds(at(now)).unwrap();
        let show = |us: u64| Timestamp::from_microsecond(us as i64).unwrap().to_string();
        (show(bounds.start_us), show(bounds.end_us))
    }

    fn hours(bounds: &(String, String)) -> f64 {
        (at(&bounds.1) - at(&bounds.0)) as f64 / 3.6e9
    }

    #[test]
    fn a_utc_day_is_midnight_to_midnight() {
        let day = period(CalendarPeriod::Day, "UTC", None, "2026-11-23T22:47:39Z");
        assert_eq!(day, ("2026-11-23T00:00:00Z".into(), "2026-11-24T00:00:00Z".into()));
    }

    #[test]
    fn berlin_spring_forward_day_lasts_23_hours() {
        // 2026-03-29: clocks go from 02:00 CET to 03:00 CEST.
        let day = period(CalendarPeriod::Day, "Europe/Berlin", None, "2026-03-29T12:00:00Z");
        assert_eq!(day, ("2026-03-28T23:00:00Z".into(), "2026-03-29T22:00:00Z".into()));
        assert_eq!(hours(&day), 23.0);
    }

    #[test]
    fn berlin_fall_back_day_lasts_25_hours() {
        // 2026-10-25: clocks go from 03:00 CEST back to 02:00 CET.
        let day = period(CalendarPeriod::Day, "Europe/Berlin", None, "2026-10-25T01:30:00Z");
        assert_eq!(day, ("2026-10-24T22:00:00Z".into(), "2026-10-25T23:00:00Z".into()));
        assert_eq!(hours(&day), 25.0);
    }

    #[test]
    fn new_york_dst_days() {
        // 2026-03-08 springs forward (23 h), 2026-11-01 falls back (25 h).
        let spring = period(CalendarPeriod::Day, "America/New_York", None, "2026-03-08T15:00:00Z");
        assert_eq!(spring, ("2026-03-08T05:00:00Z".into(), "2026-03-09T04:00:00Z".into()));
        assert_eq!(hours(&spring), 23.0);
        let fall = period(CalendarPeriod::Day, "America/New_York", None, "2026-11-01T15:00:00Z");
        assert_eq!(fall, ("2026-11-01T04:00:00Z".into(), "2026-11-02T05:00:00Z".into()));
        assert_eq!(hours(&fall), 25.0);
    }

    #[test]
    fn the_local_date_decides_not_the_utc_date() {
        // 23:30 on Nov 23 in New York is already Nov 24 in UTC.
        let day = period(CalendarPeriod::Day, "America/New_York", None, "2026-11-24T04:30:00Z");
        assert_eq!(day, ("2026-11-23T05:00:00Z".into(), "2026-11-24T05:00:00Z".into()));
    }

    #[test]
    fn a_day_without_midnight_starts_when_the_gap_ends() {
        // Santiago (Chile) springs forward at local midnight: 2026-09-06 begins at 01:00 -03.
        let day = period(CalendarPeriod::Day, "America/Santiago", None, "2026-09-06T12:00:00Z");
        assert_eq!(day.0, "2026-09-06T04:00:00Z");
        assert_eq!(hours(&day), 23.0);
    }

    #[test]
    fn an_iso_week_starts_on_monday() {
        // 2026-11-23 is a Monday; Sunday 2026-11-29 belongs to the same week.
        let week = period(CalendarPeriod::Week, "UTC", None, "2026-11-29T23:59:59Z");
        assert_eq!(week, ("2026-11-23T00:00:00Z".into(), "2026-11-30T00:00:00Z".into()));
        let monday = period(CalendarPeriod::Week, "UTC", None, "2026-11-23T00:00:00Z");
        assert_eq!(monday, week);
        let sunday_before = period(CalendarPeriod::Week, "UTC", None, "2026-11-22T23:59:59.999999Z");
        assert_eq!(sunday_before.1, "2026-11-23T00:00:00Z");
    }

    #[test]
    fn a_week_across_a_year_boundary_and_dst() {
        // Monday 2025-12-29 to Monday 2026-01-05.
        let week = period(CalendarPeriod::Week, "Europe/Berlin", None, "2026-01-01T10:00:00Z");
        assert_eq!(week, ("2025-12-28T23:00:00Z".into(), "2026-01-04T23:00:00Z".into()));
        // The week of the Berlin fall-back lasts 169 hours.
        let fall = period(CalendarPeriod::Week, "Europe/Berlin", None, "2026-10-25T12:00:00Z");
        assert_eq!(hours(&fall), 169.0);
    }

    #[test]
    fn months_default_to_the_first() {
        let month = period(CalendarPeriod::Month, "UTC", None, "2028-02-29T12:00:00Z");
        assert_eq!(month, ("2028-02-01T00:00:00Z".into(), "2028-03-01T00:00:00Z".into()));
    }

    #[test]
    fn anchor_31_is_the_last_day_of_short_months() {
        let anchored = |now| period(CalendarPeriod::Month, "UTC", Some(31), now);
        // Leap year: Jan 31 → Feb 29 → Mar 31.
        assert_eq!(anchored("2028-02-15T00:00:00Z"), ("2028-01-31T00:00:00Z".into(), "2028-02-29T00:00:00Z".into()));
        assert_eq!(anchored("2028-02-29T00:00:00Z"), ("2028-02-29T00:00:00Z".into(), "2028-03-31T00:00:00Z".into()));
        // Common year: Feb 28; April has 30 days.
        assert_eq!(anchored("2027-03-01T00:00:00Z"), ("2027-02-28T00:00:00Z".into(), "2027-03-31T00:00:00Z".into()));
        assert_eq!(anchored("2027-04-30T12:00:00Z"), ("2027-04-30T00:00:00Z".into(), "2027-05-31T00:00:00Z".into()));
    }

    #[test]
    fn anchored_months_cross_the_year_in_local_time() {
        // Billing day 15 in Berlin: Dec 15 00:00 CET to Jan 15 00:00 CET.
        let month = period(CalendarPeriod::Month, "Europe/Berlin", Some(15), "2027-01-14T22:59:59Z");
        assert_eq!(month, ("2026-12-14T23:00:00Z".into(), "2027-01-14T23:00:00Z".into()));
        let next = period(CalendarPeriod::Month, "Europe/Berlin", Some(15), "2027-01-14T23:00:00Z");
        assert_eq!(next.0, "2027-01-14T23:00:00Z");
    }

    #[test]
    fn a_year_is_local_new_year_to_new_year() {
        let year = period(CalendarPeriod::Year, "America/New_York", None, "2027-01-01T03:00:00Z");
        assert_eq!(year, ("2026-01-01T05:00:00Z".into(), "2027-01-01T05:00:00Z".into()));
        let leap = period(CalendarPeriod::Year, "UTC", None, "2028-06-01T00:00:00Z");
        assert_eq!(hours(&leap), 366.0 * 24.0);
    }

    #[test]
    fn bad_parameters_are_named() {
        let parameter = |e: Error| match e {
            Error::InvalidArgument { parameter, .. } => parameter,
            other => panic!("expected InvalidArgument, got {other:?}"),
        };
        assert_eq!(parameter(CalendarPeriod::parse("fortnight").unwrap_err()), "period");
        assert_eq!(parameter(CalendarClock::new(CalendarPeriod::Day, "Mars/Olympus", None).unwrap_err()), "tz");
        assert_eq!(parameter(CalendarClock::new(CalendarPeriod::Month, "UTC", Some(0)).unwrap_err()), "anchor");
        assert_eq!(parameter(CalendarClock::new(CalendarPeriod::Month, "UTC", Some(32)).unwrap_err()), "anchor");
        assert_eq!(parameter(CalendarClock::new(CalendarPeriod::Week, "UTC", Some(3)).unwrap_err()), "anchor");
    }

    #[test]
    fn every_period_contains_its_instant_and_follows_the_last() {
        let clocks = [
            CalendarClock::new(CalendarPeriod::Day, "Europe/Berlin", None).unwrap(),
            CalendarClock::new(CalendarPeriod::Week, "America/New_York", None).unwrap(),
            CalendarClock::new(CalendarPeriod::Month, "Australia/Lord_Howe", Some(30)).unwrap(),
            CalendarClock::new(CalendarPeriod::Year, "Pacific/Apia", None).unwrap(),
        ];
        for clock in &clocks {
            let mut now = at("2024-01-01T00:00:00Z");
            let stop = at("2029-01-01T00:00:00Z");
            let mut previous_end = None;
            while now < stop {
                let b = clock.bounds(now).unwrap();
                assert!(b.start_us <= now && now < b.end_us, "{clock:?} at {now}: {b:?}");
                if let Some(end) = previous_end {
                    assert_eq!(b.start_us, end, "{clock:?}: periods must tile time");
                }
                assert_eq!(clock.bounds(b.end_us - 1).unwrap(), b);
                previous_end = Some(b.end_us);
                now = b.end_us;
            }
        }
    }
}
