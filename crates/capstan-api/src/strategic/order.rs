//! The order of a merged list, as upstream computes it: items named by the patch (or by its
//! `$setElementOrder` list) in the patch's order, items only the server has in the server's
//! order, the two interleaved by where they stood in the server's list.
//!
//! Upstream sorts with Go's `sort.SliceStable` and a comparison that calls an item "less" when
//! either item is missing from the reference order, which is no ordering at all; the result
//! then depends on the sorting algorithm, so [`go_stable_sort`] reproduces Go's (insertion sort
//! on blocks of 20, then in-place symmetric merges) step for step. Rust's own sorts must not be
//! given such a comparison.

use serde_json::Value;

/// How the items of a list are identified: objects by the value of their merge key, scalars
/// by their value. `maps` follows the Go kind of the items, which can disagree with whether a
/// merge key is declared.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Keying<'k> {
    pub(crate) maps: bool,
    pub(crate) merge_key: &'k str,
}

impl Keying<'_> {
    /// The identity of `item`; `None` for an object without the merge key (or not an object),
    /// which upstream compares as equal to every other such item.
    pub(crate) fn key<'v>(&self, item: &'v Value) -> Option<&'v Value> {
        if self.maps {
            item.as_object()?.get(self.merge_key)
        } else {
            Some(item)
        }
    }

    /// The position in `order` of the first item identified as `item` is.
    pub(crate) fn position(&self, order: &[Option<Value>], item: &Value) -> Option<usize> {
        let key = self.key(item);
        order.iter().position(|candidate| candidate.as_ref() == key)
    }

    /// The identities of the items of `list`.
    pub(crate) fn keys(&self, list: &[Value]) -> Vec<Option<Value>> {
        list.iter().map(|item| self.key(item).cloned()).collect()
    }
}

/// Sorts `items` by their position in `order` as upstream's `normalizeSliceOrder` does (items
/// carrying `"$patch": "delete"` last, for lists of objects).
pub(crate) fn sort_by_order(
    items: Vec<Value>,
    order: &[Option<Value>],
    keying: Keying<'_>,
) -> Vec<Value> {
    let (mut kept, deleted): (Vec<_>, Vec<_>) = if keying.maps {
        items
            .into_iter()
            .partition(|item| item.get(super::DIRECTIVE).and_then(Value::as_str) != Some("delete"))
    } else {
        (items, Vec::new())
    };
    let mut positioned: Vec<(Option<usize>, Value)> = kept
        .drain(..)
        .map(|item| (keying.position(order, &item), item))
        .collect();
    go_stable_sort(&mut positioned, &|(a, _), (b, _)| match (a, b) {
        (Some(a), Some(b)) => a < b,
        _ => true,
    });
    kept.extend(positioned.into_iter().map(|(_, item)| item));
    kept.extend(deleted);
    kept
}

/// Interleaves server-only items (`left`) into patch items (`right`), both already sorted: a
/// server item goes first only when both are in the server's order and it stood earlier
/// (upstream's `mergeSortedSlice`).
pub(crate) fn interleave(
    left: Vec<Value>,
    right: Vec<Value>,
    server_order: &[Option<Value>],
    keying: Keying<'_>,
) -> Vec<Value> {
    let mut merged = Vec::with_capacity(left.len() + right.len());
    let mut left = left.into_iter().peekable();
    let mut right = right.into_iter().peekable();
    loop {
        let take_left = match (left.peek(), right.peek()) {
            (None, None) => break,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (Some(l), Some(r)) => matches!(
                (keying.position(server_order, l), keying.position(server_order, r)),
                (Some(l), Some(r)) if l < r
            ),
        };
        let next = if take_left { left.next() } else { right.next() };
        merged.extend(next);
    }
    merged
}

/// The order of the original list as upstream's `$setElementOrder` handling sees it after
/// merging `patch` into it (a list of objects with merge key `merge_key`).
///
/// Upstream reads that order through the original Go slice after the merge has reused its
/// memory: removing an item shifts the later items left in place (the last one stays behind,
/// doubled), and items appended while the merged list is shorter than the original land in
/// the freed places. This replays those moves on the items' keys; the result has as many
/// entries as `original`.
pub(crate) fn order_seen_after_merge(
    original: &[Value],
    patch: &[Value],
    keying: Keying<'_>,
) -> Vec<Option<Value>> {
    let mut memory = keying.keys(original);
    let visible = memory.len();
    let mut len = visible;
    let matches = |slot: &Option<Value>, key: &Value| slot.as_ref() == Some(key);
    let mut replaced = false;
    for item in patch {
        let Some(directive) = item.get(super::DIRECTIVE) else {
            continue;
        };
        match directive.as_str() {
            Some("delete") => {
                let Some(key) = item.get(keying.merge_key) else {
                    continue;
                };
                while let Some(at) = memory[..len].iter().position(|slot| matches(slot, key)) {
                    // Later items move one place left; the last place keeps its old item.
                    for index in at..len - 1 {
                        memory[index] = memory[index + 1].clone();
                    }
                    len -= 1;
                }
            }
            Some("replace") => replaced = true,
            _ => {}
        }
    }
    if !replaced {
        for item in patch
            .iter()
            .filter(|item| item.get(super::DIRECTIVE).is_none())
        {
            let Some(key) = item.get(keying.merge_key) else {
                continue;
            };
            if memory[..len].iter().any(|slot| matches(slot, key)) {
                continue;
            }
            if len < memory.len() {
                memory[len] = Some(key.clone());
            } else {
                memory.push(Some(key.clone()));
            }
            len += 1;
        }
    }
    memory.truncate(visible);
    memory
}

/// Go's `sort.SliceStable`: insertion sort on blocks of 20, then symmetric merges of doubling
/// runs. Deterministic for any `less`, consistent or not.
pub(crate) fn go_stable_sort<T>(data: &mut [T], less: &impl Fn(&T, &T) -> bool) {
    const BLOCK: usize = 20;
    let n = data.len();
    let mut block = BLOCK;
    let mut start = 0;
    while start + block <= n {
        insertion_sort(data, start, start + block, less);
        start += block;
    }
    insertion_sort(data, start, n, less);
    while block < n {
        let mut a = 0;
        while a + 2 * block <= n {
            sym_merge(data, a, a + block, a + 2 * block, less);
            a += 2 * block;
        }
        if a + block < n {
            sym_merge(data, a, a + block, n, less);
        }
        block *= 2;
    }
}

fn insertion_sort<T>(data: &mut [T], a: usize, b: usize, less: &impl Fn(&T, &T) -> bool) {
    for i in a + 1..b {
        let mut j = i;
        while j > a && less(&data[j], &data[j - 1]) {
            data.swap(j, j - 1);
            j -= 1;
        }
    }
}

/// Merges the sorted runs `data[a..m]` and `data[m..b]` in place (Kim and Kutzner's SymMerge,
/// as Go implements it). Recursion depth grows with the logarithm of the run length.
fn sym_merge<T>(data: &mut [T], a: usize, m: usize, b: usize, less: &impl Fn(&T, &T) -> bool) {
    if m - a == 1 {
        // Insert data[a] into data[m..b] by binary search for the first element not less.
        let (mut i, mut j) = (m, b);
        while i < j {
            let h = (i + j) / 2;
            if less(&data[h], &data[a]) {
                i = h + 1;
            } else {
                j = h;
            }
        }
        for k in a..i - 1 {
            data.swap(k, k + 1);
        }
        return;
    }
    if b - m == 1 {
        // Insert data[m] into data[a..m] after the last element it is not less than.
        let (mut i, mut j) = (a, m);
        while i < j {
            let h = (i + j) / 2;
            if !less(&data[m], &data[h]) {
                i = h + 1;
            } else {
                j = h;
            }
        }
        let mut k = m;
        while k > i {
            data.swap(k, k - 1);
            k -= 1;
        }
        return;
    }
    let mid = (a + b) / 2;
    let n = mid + m;
    let (mut start, mut r) = if m > mid { (n - b, mid) } else { (a, m) };
    let p = n - 1;
    while start < r {
        let c = (start + r) / 2;
        if !less(&data[p - c], &data[c]) {
            start = c + 1;
        } else {
            r = c;
        }
    }
    let end = n - start;
    if start < m && m < end {
        rotate(data, start, m, end);
    }
    if a < start && start < mid {
        sym_merge(data, a, start, mid, less);
    }
    if mid < end && end < b {
        sym_merge(data, mid, end, b, less);
    }
}

/// Rotates `data[a..b]` so that `data[m]` comes first, by block swaps as Go does.
fn rotate<T>(data: &mut [T], a: usize, m: usize, b: usize) {
    let mut i = m - a;
    let mut j = b - m;
    while i != j {
        if i > j {
            swap_range(data, m - i, m, j);
            i -= j;
        } else {
            swap_range(data, m - i, m + j - i, i);
            j -= i;
        }
    }
    swap_range(data, m - i, m, i);
}

fn swap_range<T>(data: &mut [T], a: usize, b: usize, n: usize) {
    for offset in 0..n {
        data.swap(a + offset, b + offset);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_stable_sort_agrees_with_a_stable_sort_for_a_true_ordering() {
        // Pseudo-random keys with many ties, at sizes around the block boundaries.
        for n in [0, 1, 2, 19, 20, 21, 39, 40, 41, 77, 200] {
            let mut state: u32 = 0x2545_f491 ^ n as u32;
            let items: Vec<(u32, usize)> = (0..n)
                .map(|index| {
                    state ^= state << 13;
                    state ^= state >> 17;
                    state ^= state << 5;
                    (state % 7, index)
                })
                .collect();
            let mut ours = items.clone();
            go_stable_sort(&mut ours, &|a, b| a.0 < b.0);
            let mut reference = items;
            reference.sort_by_key(|item| item.0);
            assert_eq!(ours, reference, "n = {n}");
        }
    }

    #[test]
    fn go_stable_sort_is_total_for_an_inconsistent_comparison() {
        // Upstream's comparison: unknown items (None) are "less" than everything.
        let mut items: Vec<Option<u8>> = vec![Some(3), None, Some(1), None, Some(2)];
        go_stable_sort(&mut items, &|a, b| match (a, b) {
            (Some(a), Some(b)) => a < b,
            _ => true,
        });
        // Worked by hand through Go's insertion sort: every comparison with an unknown item
        // swaps, so unknown items drift left until a known item passes them again.
        assert_eq!(items, [None, Some(1), Some(2), None, Some(3)]);
    }
}
