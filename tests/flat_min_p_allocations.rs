//! Once warm, min-p on a flat row (thousands of survivors, drawn without sorting them)
//! allocates nothing, in the Sampler and in a chain `min-p -> T`, with and without a
//! mask: counted with a global allocator.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use logits::{Chain, MinP, Sampler, SamplingParams, Temperature, TokenMask};

struct Counting;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// Only the test's own thread is counted.
    static COUNTED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

fn count() {
    if COUNTED.try_with(|c| c.get()).unwrap_or(false) {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
    }
}

// The counting allocator forwards to the system allocator and only counts calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: forwarded unchanged; the caller upholds `GlobalAlloc::alloc`'s contract.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was returned by `System.alloc` with this layout (see `alloc`).
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        // SAFETY: forwarded unchanged; `ptr` came from this allocator with `layout`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const V: usize = 151_936;

/// A flat row: uniform in `[-1, 1]`, so that min-p 0.05 keeps every token.
fn row() -> Vec<f32> {
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    (0..V)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
        })
        .collect()
}

/// Allocations during 20 draws after two warm-up draws.
fn counted(mut step: impl FnMut()) -> usize {
    step();
    step();
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    COUNTED.with(|c| c.set(true));
    for _ in 0..20 {
        step();
    }
    COUNTED.with(|c| c.set(false));
    ALLOCATIONS.load(Ordering::Relaxed) - before
}

#[test]
fn warm_flat_min_p_does_not_allocate() {
    let row = row();
    let mut mask = TokenMask::new_empty(V);
    for id in (0..V as u32).filter(|id| id % 3 != 0) {
        mask.allow(id).unwrap();
    }
    for mask in [None, Some(&mask)] {
        let params = SamplingParams::builder()
            .min_p(0.05)
            .logit_bias(7, 0.5)
            .build()
            .unwrap();
        let mut s = Sampler::new(params, V).unwrap();
        let mut u = 0.0;
        let n = counted(|| {
            u = (u + 0.377) % 1.0;
            s.sample_with_uniform(&row, mask, u).unwrap();
            s.rollback(1);
        });
        assert_eq!(n, 0, "sampler, mask {}", mask.is_some());
        let mut c = Chain::builder(V)
            .stage(MinP::new(0.05).unwrap())
            .stage(Temperature::new(0.8).unwrap())
            .draw()
            .build()
            .unwrap();
        let n = counted(|| {
            u = (u + 0.377) % 1.0;
            c.sample_with_uniform(&row, mask, u).unwrap();
            c.reset();
        });
        assert_eq!(n, 0, "chain, mask {}", mask.is_some());
    }
}
