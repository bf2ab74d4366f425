//! Server time: UTC with microsecond precision, strictly increasing within a process.

use std::fmt;
use std::sync::atomic::{AtomicI64, Ordering};

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

/// Microseconds since the Unix epoch, UTC. Serialized as RFC 3339 with exactly six
/// fractional digits (`2026-01-06T12:34:56.123456Z`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Timestamp(pub i64);

static LAST_NOW: AtomicI64 = AtomicI64::new(0);

impl Timestamp {
    /// The earliest time Stepwise reads and writes, `0000-01-01T00:00:00.000000Z`
    /// (RFC 3339 years have four digits).
    pub const MIN: Timestamp = Timestamp(-62_167_219_200_000_000);
    /// The latest, `9999-12-31T23:59:59.999999Z`.
    pub const MAX: Timestamp = Timestamp(253_402_300_799_999_999);

    /// The current time. Two calls in one process never return the same value, so rows
    /// ordered by server time keep the order in which they were created.
    pub fn now() -> Self {
        let wall = OffsetDateTime::now_utc().unix_timestamp_nanos() / 1_000;
        let wall = i64::try_from(wall).unwrap_or(i64::MAX);
        let mut last = LAST_NOW.load(Ordering::Relaxed);
        loop {
            let next = wall.max(last + 1);
            match LAST_NOW.compare_exchange_weak(last, next, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return Timestamp(next),
                Err(seen) => last = seen,
            }
        }
    }

    pub fn from_micros(micros: i64) -> Self {
        Timestamp(micros)
    }

    pub fn as_micros(self) -> i64 {
        self.0
    }

    /// This time moved by a signed number of seconds.
    pub fn plus_secs(self, secs: i64) -> Self {
        Timestamp(self.0.saturating_add(secs.saturating_mul(1_000_000)))
    }

    pub fn minus_days(self, days: u32) -> Self {
        self.plus_secs(-(i64::from(days) * 86_400))
    }

    /// Parses RFC 3339 (any offset, any fraction); the result is truncated to microseconds.
    /// A time whose UTC form falls outside [`Timestamp::MIN`]..=[`Timestamp::MAX`] (such as
    /// `9999-12-31T23:59:59-01:00`) is refused: it could not be written back.
    pub fn parse(text: &str) -> Option<Self> {
        let dt = OffsetDateTime::parse(text, &Rfc3339).ok()?;
        i64::try_from(dt.unix_timestamp_nanos() / 1_000)
            .ok()
            .map(Timestamp)
            .filter(|t| (Timestamp::MIN..=Timestamp::MAX).contains(t))
    }

    pub fn to_rfc3339(self) -> String {
        let secs = self.0.div_euclid(1_000_000);
        let micros = self.0.rem_euclid(1_000_000);
        match OffsetDateTime::from_unix_timestamp(secs) {
            Ok(dt) => format!(
                "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}Z",
                dt.year(),
                u8::from(dt.month()),
                dt.day(),
                dt.hour(),
                dt.minute(),
                dt.second(),
                micros
            ),
            Err(_) => "1970-01-01T00:00:00.000000Z".to_string(),
        }
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_rfc3339())
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_rfc3339())
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        Timestamp::parse(&text)
            .ok_or_else(|| serde::de::Error::custom("expected an RFC 3339 timestamp"))
    }
}

impl utoipa::PartialSchema for Timestamp {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::ObjectBuilder::new()
            .schema_type(utoipa::openapi::schema::Type::String)
            .format(Some(utoipa::openapi::SchemaFormat::KnownFormat(
                utoipa::openapi::KnownFormat::DateTime,
            )))
            .into()
    }
}
impl utoipa::ToSchema for Timestamp {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_with_six_fraction_digits_and_parses_back() {
        let t = Timestamp(1_767_702_896_123_456);
        assert_eq!(t.to_rfc3339(), "2026-01-06T12:34:56.123456Z");
        assert_eq!(Timestamp::parse(&t.to_rfc3339()), Some(t));
        assert_eq!(
            Timestamp::parse("2026-01-06T13:34:56.123456789+01:00"),
            Some(t)
        );
    }

    #[test]
    fn times_that_cannot_be_written_back_are_refused() {
        // Found by fuzzing: these parsed, then were written as a year of five digits (or a
        // negative one) that no reader accepts, so an exported document failed to import.
        assert_eq!(Timestamp::parse("9999-12-31T23:59:59-23:59"), None);
        assert_eq!(Timestamp::parse("0000-01-01T00:00:00+00:01"), None);
        for t in [Timestamp::MIN, Timestamp::MAX] {
            assert_eq!(Timestamp::parse(&t.to_rfc3339()), Some(t));
        }
        assert_eq!(Timestamp::MAX.to_rfc3339(), "9999-12-31T23:59:59.999999Z");
        assert_eq!(Timestamp::MIN.to_rfc3339(), "0000-01-01T00:00:00.000000Z");
    }

    #[test]
    fn now_is_strictly_increasing() {
        let a = Timestamp::now();
        let b = Timestamp::now();
        assert!(b > a);
    }
}
