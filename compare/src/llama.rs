//! The C ABI of the vendored llama.cpp stages (`llama/sampling.cpp`).

use std::ffi::c_void;
use std::ptr::NonNull;

use logits::TokenId;

extern "C" {
    fn lc_chain_new(n_vocab: usize) -> *mut c_void;
    fn lc_chain_free(c: *mut c_void);
    fn lc_chain_add_top_k(c: *mut c_void, k: i32);
    fn lc_chain_add_top_p(c: *mut c_void, p: f32, min_keep: usize);
    fn lc_chain_add_min_p(c: *mut c_void, p: f32, min_keep: usize);
    fn lc_chain_add_temp(c: *mut c_void, t: f32);
    fn lc_chain_sample(c: *mut c_void, logits: *const f32, n: usize, u: f64) -> i32;
    fn lc_allocations() -> u64;
}

/// Allocations made through C++ `operator new` so far.
pub fn allocations() -> u64 {
    // SAFETY: reads an atomic counter; no arguments.
    unsafe { lc_allocations() }
}

/// llama.cpp's stages in the order added, then its dist draw; owns the C++ chain.
pub struct LlamaChain(NonNull<c_void>);

impl LlamaChain {
    /// A chain for rows of up to `n_vocab` logits, with no stage yet.
    pub fn new(n_vocab: usize) -> LlamaChain {
        // SAFETY: `lc_chain_new` returns a fresh chain (it aborts rather than return null).
        let p = unsafe { lc_chain_new(n_vocab) };
        LlamaChain(NonNull::new(p).expect("lc_chain_new"))
    }

    /// Adds top-k.
    pub fn top_k(&mut self, k: i32) {
        // SAFETY: `self.0` is a live chain owned by `self`.
        unsafe { lc_chain_add_top_k(self.0.as_ptr(), k) }
    }

    /// Adds top-p.
    pub fn top_p(&mut self, p: f32, min_keep: usize) {
        // SAFETY: as above.
        unsafe { lc_chain_add_top_p(self.0.as_ptr(), p, min_keep) }
    }

    /// Adds min-p.
    pub fn min_p(&mut self, p: f32, min_keep: usize) {
        // SAFETY: as above.
        unsafe { lc_chain_add_min_p(self.0.as_ptr(), p, min_keep) }
    }

    /// Adds temperature.
    pub fn temperature(&mut self, t: f32) {
        // SAFETY: as above.
        unsafe { lc_chain_add_temp(self.0.as_ptr(), t) }
    }

    /// The token drawn from `row` with uniform `u`; `None` when no candidate is left or
    /// `row` is longer than the chain's vocabulary.
    pub fn sample(&mut self, row: &[f32], u: f64) -> Option<TokenId> {
        // SAFETY: `self.0` is live and `row` is valid for `row.len()` reads; the chain
        // checks the length against its buffer and only reads `row`.
        let t = unsafe { lc_chain_sample(self.0.as_ptr(), row.as_ptr(), row.len(), u) };
        TokenId::try_from(t).ok()
    }
}

impl Drop for LlamaChain {
    fn drop(&mut self) {
        // SAFETY: `self.0` came from `lc_chain_new` and is freed once, here.
        unsafe { lc_chain_free(self.0.as_ptr()) }
    }
}
