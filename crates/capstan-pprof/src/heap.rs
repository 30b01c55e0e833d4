//! A sampled heap profile, as Go's runtime keeps one: [`Sampled`] wraps the process's global
//! allocator and, once [`start`] has been called, records the stack of about one allocation
//! per [`rate`] bytes allocated (the gap to the next sample is drawn from an exponential
//! distribution, so every byte has the same chance, as in Go), together with its size. A
//! sampled block's free is noticed too, so the profile tells what is still in use (the
//! `inuse_*` values) from what was ever allocated (`alloc_*`).
//!
//! Cost: on every allocation a thread-local countdown; on every free, while any sample is
//! live, one bit read from a 4 KiB bitmap of the sampled addresses' hashes ([`MARKED`]), and
//! only where that bit is set (a few per cent of frees) a hashed load from the table of the
//! sampled addresses ([`FILTER`], 128 KiB); a stack
//! walk per sample (about 2,000 a second for a process allocating 1 GiB/s at the default
//! rate). Before [`start`], one relaxed atomic load per call.
//!
//! Only the `GlobalAlloc` implementation is `unsafe` (the trait is); it forwards every call
//! unchanged to the wrapped allocator. Everything the profiler itself allocates (its tables,
//! the stack walker's caches) happens with the calling thread marked busy, so it is never
//! sampled and the profiler's lock is never taken twice on one thread.

use std::alloc::{GlobalAlloc, Layout};
use std::cell::Cell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Mutex, MutexGuard};

/// Go's default `MemProfileRate`: one sample per 512 KiB allocated, on average.
pub const DEFAULT_RATE: usize = 512 * 1024;

/// Frames kept per sample (Go keeps 32; Rust's async stacks run deeper).
const MAX_DEPTH: usize = 64;

/// Slots of the free filter, and how far an address may sit from its hashed slot.
const SLOTS: usize = 1 << 14;
const MAX_PROBE: usize = 32;
/// A slot whose sample was freed (linear probing must step over it).
const TOMBSTONE: usize = 1;

static ACTIVE: AtomicBool = AtomicBool::new(false);
static RATE: AtomicUsize = AtomicUsize::new(DEFAULT_RATE);
/// Samples recorded and not yet freed; frees skip the filter while it is 0.
static LIVE: AtomicUsize = AtomicUsize::new(0);
/// Samples dropped because the filter had no room near their slot.
static DROPPED: AtomicU64 = AtomicU64::new(0);
/// Seeds each thread's generator differently.
static SEEDS: AtomicU64 = AtomicU64::new(0x9E37_79B9_7F4A_7C15);
/// The addresses of the live samples, open addressing with linear probing; 0 is empty.
static FILTER: [AtomicUsize; SLOTS] = [const { AtomicUsize::new(0) }; SLOTS];
static TABLE: Mutex<Option<Table>> = Mutex::new(None);

/// Bits of the first check every free makes: bit [`mark`]`(addr)` is set while some live
/// sample's address has that mark. At 4 KiB it stays in the first-level cache, where a probe of
/// [`FILTER`] at a hashed slot of its 128 KiB missed it on almost every free (4.7 % of a busy
/// server's CPU samples); with 2,000 samples live about one free in sixteen gets past it.
const MARKS: usize = 1 << 15;
static MARKED: [AtomicU64; MARKS / 64] = [const { AtomicU64::new(0) }; MARKS / 64];

struct ThreadState {
    /// Bytes left before the next sample.
    left: Cell<i64>,
    /// Set while this thread is inside the profiler.
    busy: Cell<bool>,
    /// Set while this thread holds the table's lock: a free then must not take it again.
    locked: Cell<bool>,
    /// xorshift64* state; 0 until the thread's first allocation.
    rng: Cell<u64>,
}

thread_local! {
    static THREAD: ThreadState = const {
        ThreadState {
            left: Cell::new(0),
            busy: Cell::new(false),
            locked: Cell::new(false),
            rng: Cell::new(0),
        }
    };
}

/// The process's allocator `A`, with heap sampling once [`start`] is called.
#[derive(Debug)]
pub struct Sampled<A> {
    inner: A,
}

impl<A> Sampled<A> {
    /// Wraps `inner`; nothing is sampled before [`start`].
    pub const fn new(inner: A) -> Self {
        Sampled { inner }
    }
}

// SAFETY: every method forwards its arguments unchanged to the wrapped allocator and returns
// what it returned, so the wrapper meets `GlobalAlloc`'s contract exactly when `A` does. The
// bookkeeping around the calls reads only the pointer's address and the sizes, and never
// allocates through this allocator on a path that could sample again (see `busy`).
#[allow(unsafe_code)]
unsafe impl<A: GlobalAlloc> GlobalAlloc for Sampled<A> {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's guarantees for `layout` are passed on unchanged.
        let ptr = unsafe { self.inner.alloc(layout) };
        observe_alloc(ptr as usize, layout.size());
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as `alloc`.
        let ptr = unsafe { self.inner.alloc_zeroed(layout) };
        observe_alloc(ptr as usize, layout.size());
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // Before the block goes back: its address may be handed out again at once.
        observe_free(ptr as usize);
        // SAFETY: `ptr` and `layout` are the caller's, which came from this allocator's
        // `alloc`, i.e. from `inner`.
        unsafe { self.inner.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        observe_free(ptr as usize);
        // SAFETY: as `dealloc`; `new_size` is the caller's.
        let new = unsafe { self.inner.realloc(ptr, layout, new_size) };
        observe_alloc(new as usize, new_size);
        new
    }
}

/// Starts sampling one allocation per `rate` bytes on average (Go's `MemProfileRate`);
/// allocations made before are not in the profile.
pub fn start(rate: usize) {
    RATE.store(rate.max(1), Relaxed);
    ACTIVE.store(true, Relaxed);
}

/// Whether sampling runs.
pub fn active() -> bool {
    ACTIVE.load(Relaxed)
}

/// The sampling rate, bytes per sample on average.
pub fn rate() -> usize {
    RATE.load(Relaxed)
}

#[inline]
fn observe_alloc(addr: usize, size: usize) {
    if addr == 0 || !ACTIVE.load(Relaxed) {
        return;
    }
    let _ = THREAD.try_with(|thread| {
        let left = thread.left.get() - size as i64;
        if left > 0 || thread.busy.get() {
            thread.left.set(left);
            return;
        }
        thread.busy.set(true);
        let first = thread.rng.get() == 0;
        thread.left.set(next_gap(thread));
        // A thread's first allocation only draws its first gap, as Go draws one at start.
        if !first {
            record(addr, size);
        }
        thread.busy.set(false);
    });
}

#[inline]
fn observe_free(addr: usize) {
    if LIVE.load(Relaxed) == 0 || addr == 0 || !is_marked(addr) {
        return;
    }
    let mut slot = hash(addr);
    for _ in 0..MAX_PROBE {
        match FILTER[slot].load(Relaxed) {
            0 => return,
            found if found == addr => {
                // The table's own memory is never sampled, so a free under its lock is not
                // one of these; skipping it (rather than locking twice) is only a safeguard.
                if !THREAD.try_with(|t| t.locked.get()).unwrap_or(true) {
                    with_table(|table| table.free(addr));
                }
                return;
            }
            _ => slot = (slot + 1) % SLOTS,
        }
    }
}

fn hash(addr: usize) -> usize {
    ((addr as u64 >> 4).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - SLOTS.trailing_zeros()))
        as usize
}

/// The bit of [`MARKED`] an address sets while sampled: a hash independent of [`hash`]'s.
fn mark(addr: usize) -> usize {
    ((addr as u64 >> 4).wrapping_mul(0xD6E8_FEB8_6659_FD93) >> (64 - MARKS.trailing_zeros()))
        as usize
}

#[inline]
fn is_marked(addr: usize) -> bool {
    let mark = mark(addr);
    MARKED[mark / 64].load(Relaxed) & (1 << (mark % 64)) != 0
}

/// The bytes to the next sample: exponential with mean [`rate`].
fn next_gap(thread: &ThreadState) -> i64 {
    let mut x = thread.rng.get();
    if x == 0 {
        let here = std::ptr::from_ref(thread) as u64;
        x = (SEEDS.fetch_add(0x6A09_E667_F3BC_C909, Relaxed) ^ here) | 1;
    }
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    thread.rng.set(x);
    // 53 random bits as a uniform value in (0, 1].
    let uniform = ((x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) + 1) as f64 / (1u64 << 53) as f64;
    let gap = -uniform.ln() * rate() as f64;
    (gap as i64).max(1)
}

/// Runs `f` on the table with this thread marked busy, so that what the table allocates is
/// never sampled (which would take the lock again).
fn with_table<T>(f: impl FnOnce(&mut Table) -> T) -> T {
    let was_busy = THREAD.try_with(|t| t.busy.replace(true)).unwrap_or(true);
    let result = {
        let mut guard: MutexGuard<'_, Option<Table>> = TABLE
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        f(guard.get_or_insert_with(Table::default))
    };
    let _ = THREAD.try_with(|t| t.busy.set(was_busy));
    result
}

fn record(addr: usize, size: usize) {
    let mut frames = [0usize; MAX_DEPTH];
    let mut depth = 0;
    backtrace::trace(|frame| {
        frames[depth] = frame.ip() as usize;
        depth += 1;
        depth < MAX_DEPTH
    });
    with_table(|table| table.alloc(addr, size, &frames[..depth]));
}

/// What was sampled at one stack.
#[derive(Debug, Default, Clone)]
struct Bucket {
    allocs: u64,
    alloc_bytes: u64,
    frees: u64,
    free_bytes: u64,
}

#[derive(Default)]
struct Table {
    stacks: HashMap<Box<[usize]>, usize>,
    buckets: Vec<(Box<[usize]>, Bucket)>,
    /// Live samples: address → (bucket, size).
    live: HashMap<usize, (usize, usize)>,
    /// Live samples per [`mark`], to clear a bit of [`MARKED`] when its last one is freed.
    marks: HashMap<usize, u32>,
}

impl Table {
    fn alloc(&mut self, addr: usize, size: usize, frames: &[usize]) {
        // Find the address (a free this table missed) or the first reusable slot.
        let mut slot = hash(addr);
        let mut free_slot = None;
        let mut present = false;
        for _ in 0..MAX_PROBE {
            match FILTER[slot].load(Relaxed) {
                0 => {
                    free_slot.get_or_insert(slot);
                    break;
                }
                TOMBSTONE => {
                    free_slot.get_or_insert(slot);
                }
                found if found == addr => {
                    present = true;
                    break;
                }
                _ => {}
            }
            slot = (slot + 1) % SLOTS;
        }
        if present {
            self.free(addr);
            free_slot = Some(slot);
        }
        let Some(slot) = free_slot else {
            DROPPED.fetch_add(1, Relaxed);
            return;
        };
        let bucket = match self.stacks.get(frames) {
            Some(&bucket) => bucket,
            None => {
                let frames: Box<[usize]> = frames.into();
                self.buckets.push((frames.clone(), Bucket::default()));
                self.stacks.insert(frames, self.buckets.len() - 1);
                self.buckets.len() - 1
            }
        };
        let counts = &mut self.buckets[bucket].1;
        counts.allocs += 1;
        counts.alloc_bytes += size as u64;
        self.live.insert(addr, (bucket, size));
        LIVE.fetch_add(1, Relaxed);
        FILTER[slot].store(addr, Relaxed);
        let mark = mark(addr);
        *self.marks.entry(mark).or_default() += 1;
        MARKED[mark / 64].fetch_or(1 << (mark % 64), Relaxed);
    }

    fn free(&mut self, addr: usize) {
        let Some((bucket, size)) = self.live.remove(&addr) else {
            return;
        };
        let counts = &mut self.buckets[bucket].1;
        counts.frees += 1;
        counts.free_bytes += size as u64;
        LIVE.fetch_sub(1, Relaxed);
        let mark = mark(addr);
        if let Some(live) = self.marks.get_mut(&mark) {
            *live -= 1;
            if *live == 0 {
                self.marks.remove(&mark);
                MARKED[mark / 64].fetch_and(!(1 << (mark % 64)), Relaxed);
            }
        }
        let mut slot = hash(addr);
        for _ in 0..MAX_PROBE {
            if FILTER[slot].load(Relaxed) == addr {
                FILTER[slot].store(TOMBSTONE, Relaxed);
                return;
            }
            slot = (slot + 1) % SLOTS;
        }
    }
}

/// One stack's sampled counts (raw, not yet scaled to estimates).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StackCounts {
    /// Instruction addresses, innermost first, the profiler's own frames included.
    pub frames: Vec<usize>,
    /// Sampled allocations and their bytes.
    pub allocs: u64,
    pub alloc_bytes: u64,
    /// Of those, freed since.
    pub frees: u64,
    pub free_bytes: u64,
}

/// What has been sampled so far, and how many samples were dropped for want of room.
pub fn snapshot() -> (Vec<StackCounts>, u64) {
    let stacks = with_table(|table| {
        table
            .buckets
            .iter()
            .map(|(frames, b)| StackCounts {
                frames: frames.to_vec(),
                allocs: b.allocs,
                alloc_bytes: b.alloc_bytes,
                frees: b.frees,
                free_bytes: b.free_bytes,
            })
            .collect()
    });
    (stacks, DROPPED.load(Relaxed))
}

/// The estimated real (count, bytes) behind `count` samples of `bytes` bytes: Go's
/// `scaleHeapSample`. A block of size s is sampled with probability 1 - e^(-s/rate).
pub fn unsample(count: u64, bytes: u64, rate: usize) -> (i64, i64) {
    if count == 0 || bytes == 0 {
        return (0, 0);
    }
    if rate <= 1 {
        return (count as i64, bytes as i64);
    }
    let average = bytes as f64 / count as f64;
    let scale = 1.0 / (1.0 - (-average / rate as f64).exp());
    ((count as f64 * scale) as i64, (bytes as f64 * scale) as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsampling_follows_go() {
        // A block as large as the rate is sampled with probability 1 - 1/e.
        let (count, bytes) = unsample(1, DEFAULT_RATE as u64, DEFAULT_RATE);
        assert_eq!(count, 1, "1 / 0.632 rounds down to 1");
        assert_eq!(bytes, (DEFAULT_RATE as f64 / (1.0 - (-1f64).exp())) as i64);
        // Small blocks: one sample of 64 bytes stands for about rate/64 blocks.
        let (count, bytes) = unsample(1, 64, DEFAULT_RATE);
        assert!((8_000..8_400).contains(&count), "{count}");
        assert!((512_000..540_000).contains(&bytes), "{bytes}");
        assert_eq!(unsample(0, 0, DEFAULT_RATE), (0, 0));
        assert_eq!(unsample(3, 300, 1), (3, 300), "rate 1 samples everything");
    }

    #[test]
    fn gaps_average_the_rate() {
        let thread = ThreadState {
            left: Cell::new(0),
            busy: Cell::new(false),
            locked: Cell::new(false),
            rng: Cell::new(0),
        };
        RATE.store(DEFAULT_RATE, Relaxed);
        let n = 20_000;
        let total: i64 = (0..n).map(|_| next_gap(&thread)).sum();
        let mean = total as f64 / f64::from(n);
        assert!(
            (0.95..1.05).contains(&(mean / DEFAULT_RATE as f64)),
            "mean gap {mean}"
        );
    }

    #[test]
    fn addresses_spread_over_the_filter() {
        let slots: std::collections::HashSet<usize> = (0..1000usize)
            .map(|i| hash(0x7f00_0000_0000 + i * 48))
            .collect();
        assert!(slots.len() > 900, "{} distinct slots", slots.len());
        assert!(slots.iter().all(|&s| s < SLOTS));
        let marks: std::collections::HashSet<usize> = (0..1000usize)
            .map(|i| mark(0x7f00_0000_0000 + i * 48))
            .collect();
        assert!(marks.len() > 900, "{} distinct marks", marks.len());
    }

    #[test]
    fn a_mark_stays_while_any_sample_with_it_lives() {
        // Two addresses with one mark (found by search), in a table of their own; the
        // statics they touch are the process's, so the addresses are ones nothing allocates.
        let first = 0x5a5a_0000_0000usize;
        let second = (1..)
            .map(|i| first + i * 16)
            .find(|&a| mark(a) == mark(first))
            .expect("another address with the same mark");
        let mut table = Table::default();
        assert!(!is_marked(first));
        table.alloc(first, 64, &[1]);
        table.alloc(second, 64, &[1]);
        assert!(is_marked(first) && is_marked(second));
        table.free(first);
        assert!(is_marked(second), "the second sample still has the mark");
        table.free(second);
        assert!(!is_marked(first), "no live sample has the mark any more");
        assert!(table.marks.is_empty());
    }
}
