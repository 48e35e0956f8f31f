use core::fmt;
use core::ops::{Add, Sub};
use core::time::Duration;

/// An instant as Unix time in milliseconds.
///
/// Every protocol weft speaks stamps its messages with wall-clock time, so a machine's `now` is
/// wall-clock too. Arithmetic saturates instead of overflowing: a hostile `at` of `u64::MAX` must
/// not be able to panic a machine.
#[derive(Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(u64);

impl Timestamp {
    /// The Unix epoch.
    pub const ZERO: Self = Self(0);
    /// The latest representable instant.
    pub const MAX: Self = Self(u64::MAX);

    /// The instant `ms` milliseconds after the Unix epoch.
    pub const fn from_millis(ms: u64) -> Self {
        Self(ms)
    }

    /// The instant `s` seconds after the Unix epoch (saturating).
    pub const fn from_secs(s: u64) -> Self {
        Self(s.saturating_mul(1000))
    }

    /// Milliseconds since the Unix epoch.
    pub const fn as_millis(self) -> u64 {
        self.0
    }

    /// Whole seconds since the Unix epoch (rounded down).
    pub const fn as_secs(self) -> u64 {
        self.0 / 1000
    }

    /// `self + d`, saturating at [`Timestamp::MAX`].
    pub fn saturating_add(self, d: Duration) -> Self {
        Self(self.0.saturating_add(millis(d)))
    }

    /// `self - d`, saturating at [`Timestamp::ZERO`].
    pub fn saturating_sub(self, d: Duration) -> Self {
        Self(self.0.saturating_sub(millis(d)))
    }

    /// How long after `earlier` this is; zero if `earlier` is later.
    pub fn saturating_duration_since(self, earlier: Self) -> Duration {
        Duration::from_millis(self.0.saturating_sub(earlier.0))
    }

    /// How long after `earlier` this is, or `None` if `earlier` is later.
    pub fn checked_duration_since(self, earlier: Self) -> Option<Duration> {
        self.0.checked_sub(earlier.0).map(Duration::from_millis)
    }

    /// The absolute distance between two instants.
    pub fn abs_diff(self, other: Self) -> Duration {
        Duration::from_millis(self.0.abs_diff(other.0))
    }
}

/// A duration in whole milliseconds, saturating at `u64::MAX`.
fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl Add<Duration> for Timestamp {
    type Output = Self;
    /// Saturating, like [`Timestamp::saturating_add`].
    fn add(self, d: Duration) -> Self {
        self.saturating_add(d)
    }
}

impl Sub<Duration> for Timestamp {
    type Output = Self;
    /// Saturating, like [`Timestamp::saturating_sub`].
    fn sub(self, d: Duration) -> Self {
        self.saturating_sub(d)
    }
}

impl fmt::Debug for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{:03}s", self.0 / 1000, self.0 % 1000)
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::format;

    #[test]
    fn arithmetic_saturates_instead_of_panicking() {
        assert_eq!(Timestamp::MAX + Duration::from_secs(1), Timestamp::MAX);
        assert_eq!(Timestamp::ZERO - Duration::from_secs(1), Timestamp::ZERO);
        assert_eq!(Timestamp::from_secs(u64::MAX), Timestamp::MAX);
        assert_eq!(Timestamp::ZERO + Duration::MAX, Timestamp::MAX);
    }

    #[test]
    fn durations_between_instants() {
        let a = Timestamp::from_millis(1_500);
        let b = Timestamp::from_millis(4_000);
        assert_eq!(b.saturating_duration_since(a), Duration::from_millis(2_500));
        assert_eq!(a.saturating_duration_since(b), Duration::ZERO);
        assert_eq!(a.checked_duration_since(b), None);
        assert_eq!(a.abs_diff(b), b.abs_diff(a));
        assert_eq!(b.as_secs(), 4);
        assert_eq!(format!("{a:?}"), "1.500s");
    }
}
