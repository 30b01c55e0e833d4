//! When each simulated node writes: N nodes renewing a lease every period would all write at
//! once if they started together, so node `i` of `n` takes the slot `i / n` of the way into each
//! period, as the jitter of real kubelets started at different times spreads them.

use std::time::Duration;

/// Where in each `period` node `index` of `count` acts.
pub fn spread_offset(index: usize, count: usize, period: Duration) -> Duration {
    if count == 0 {
        return Duration::ZERO;
    }
    let nanos = period.as_nanos() * index as u128 / count as u128;
    Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
}

/// The next time, counted from the simulator's start, at which a node acting at `offset` into
/// each `period` acts after `elapsed`: the first `offset + k * period` (k ≥ 0) later than it.
pub fn next_slot(elapsed: Duration, offset: Duration, period: Duration) -> Duration {
    if elapsed < offset {
        return offset;
    }
    if period.is_zero() {
        return elapsed;
    }
    let periods = (elapsed - offset).as_nanos() / period.as_nanos() + 1;
    let nanos = offset.as_nanos() + periods * period.as_nanos();
    Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: fn(u64) -> Duration = Duration::from_secs;
    const MS: fn(u64) -> Duration = Duration::from_millis;

    #[test]
    fn offsets_spread_evenly_over_the_period() {
        let check = |index: usize, count: usize, expected: Duration| {
            assert_eq!(
                spread_offset(index, count, S(10)),
                expected,
                "{index} of {count}"
            );
        };
        check(0, 1, S(0));
        check(0, 4, S(0));
        check(1, 4, MS(2_500));
        check(3, 4, MS(7_500));
        check(4_999, 5_000, MS(9_998));
        check(0, 0, S(0));
    }

    #[test]
    fn five_thousand_nodes_write_about_500_times_a_second() {
        let count = 5_000;
        let mut per_second = [0usize; 10];
        for index in 0..count {
            per_second[spread_offset(index, count, S(10)).as_secs() as usize] += 1;
        }
        assert_eq!(per_second, [500; 10]);
    }

    #[test]
    fn the_next_slot_is_the_first_one_after_now() {
        let check = |elapsed: Duration, offset: Duration, expected: Duration| {
            assert_eq!(
                next_slot(elapsed, offset, S(10)),
                expected,
                "elapsed {elapsed:?}, offset {offset:?}"
            );
        };
        // Before the first slot: the first slot.
        check(S(0), S(3), S(3));
        check(MS(2_999), S(3), S(3));
        // At or after a slot: the next one.
        check(S(3), S(3), S(13));
        check(S(4), S(3), S(13));
        check(S(12), S(3), S(13));
        check(S(13), S(3), S(23));
        check(MS(47_500), S(0), S(50));
        // A zero period never waits.
        assert_eq!(next_slot(S(5), S(1), Duration::ZERO), S(5));
    }
}
