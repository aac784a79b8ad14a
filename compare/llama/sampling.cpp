// llama.cpp's CPU sampler stages, vendored for comparison: top-k (partial sort, bucket
// sort above 128), softmax, top-p, min-p, temperature and the dist draw.
//
// Source: llama.cpp `src/llama-sampler.cpp` (formerly `src/llama-sampling.cpp`), as
// shipped in the crates.io crate `llama-cpp-sys-2` 0.1.161 (llama-cpp-rs commit
// e7af607ebd5ec2932709ef918c17cca2f9b0fce4). MIT licence: see LICENSE beside this file.
//
// The functions between the "upstream" markers are copied unchanged, except:
// - `GGML_ASSERT` is `assert`;
// - the dist stage takes its uniform from the caller instead of drawing it from its
//   `std::mt19937` (`std::uniform_real_distribution<double>(0, 1)` upstream), so that its
//   draws can be checked against an exact distribution;
// - the stage structs keep only the fields the CPU path reads.
//
// Below them, a thin C ABI builds the candidate array from a row of logits the way
// `llama_sampler_sample` does (into a buffer allocated once, where upstream allocates it
// per call), runs the stages in the order given and returns the selected token id.
// Every C++ allocation goes through the counting `operator new` at the end, so that the
// caller can report allocations made inside the stages.

#include <algorithm>
#include <atomic>
#include <cassert>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

typedef int32_t llama_token;

typedef struct llama_token_data {
    llama_token id; // token id
    float logit;    // log-odds of the token
    float p;        // probability of the token
} llama_token_data;

typedef struct llama_token_data_array {
    llama_token_data * data;
    size_t size;
    int64_t selected; // this is the index in the data array (i.e. not the token id)
    bool sorted;      // note: do not assume the data is sorted - always check this flag
} llama_token_data_array;

#define GGML_ASSERT(x) assert(x)

// ---- upstream (llama-sampler.cpp) ----

// writes result in res, does not mutate cur
static void llama_token_data_array_partial_sort(const llama_token_data_array & cur, int npartial, std::vector<llama_token_data> & res) {
    static const auto comp = [](const llama_token_data & a, const llama_token_data & b) {
        return a.logit > b.logit;
    };

    constexpr int   nbuckets     = 128;
    constexpr float bucket_low   = -10.0f;
    constexpr float bucket_high  =  10.0f;
    constexpr float bucket_scale = nbuckets/(bucket_high - bucket_low);
    constexpr float bucket_inter = -bucket_low * bucket_scale;

    std::vector<int> bucket_idx;
    std::vector<int> histo(nbuckets, 0);

    std::vector<llama_token_data*> bucket_ptrs;

    bucket_idx.reserve(cur.size);

    for (int i = 0; i < (int)cur.size; ++i) {
        const float val = cur.data[i].logit;
        int ib = int(bucket_scale * val + bucket_inter); //nbuckets * (val - bucket_low) / (bucket_high - bucket_low);
        ib = std::max(0, std::min(nbuckets - 1, ib));
        bucket_idx.push_back(ib);
        ++histo[ib];
    }
    int nhave = 0;
    int ib = nbuckets - 1;
    for ( ; ib >= 0; --ib) {
        nhave += histo[ib];
        if (nhave >= npartial) {
            break;
        }
    }
    res.resize(nhave);
    auto * ptr = res.data();
    bucket_ptrs.reserve(nbuckets - ib);
    for (int j = nbuckets - 1; j >= ib; --j) {
        bucket_ptrs.push_back(ptr);
        ptr += histo[j];
    }
    for (int i = 0; i < (int)cur.size; ++i) {
        int j = bucket_idx[i];
        if (j >= ib) {
            *bucket_ptrs[nbuckets - 1 - j]++ = cur.data[i];
        }
    }

    ptr = res.data();
    int ndone = 0;
    for (int j = nbuckets - 1; j > ib; --j) {
        std::sort(ptr, ptr + histo[j], comp);
        ptr += histo[j];
        ndone += histo[j];
    }
    std::partial_sort(ptr, ptr + npartial - ndone, ptr + histo[ib], comp);
}

// reduces the size of cur_p to npartial, keeping only the top npartial elements
static void llama_token_data_array_partial_sort_inplace(llama_token_data_array * cur_p, int npartial) {
    static const auto comp = [](const llama_token_data & a, const llama_token_data & b) {
        return a.logit > b.logit;
    };

    if (npartial <= 128) {
        std::partial_sort(cur_p->data, cur_p->data + npartial, cur_p->data + cur_p->size, comp);

        cur_p->size = npartial;
        cur_p->sorted = true;

        return;
    }

    std::vector<llama_token_data> tmp;

    llama_token_data_array_partial_sort(*cur_p, npartial, tmp);

    std::copy(tmp.data(), tmp.data() + npartial, cur_p->data);

    cur_p->size = npartial;
    cur_p->sorted = true;
}

static void llama_sampler_temp_impl(llama_token_data_array * cur_p, float temp) {
    if (cur_p->size == 0) {
        return;
    }

    if (temp <= 0.0f) {
        // find the token with the highest logit and set the rest to -inf
        size_t max_i = 0;
        float  max_l = cur_p->data[0].logit;

        for (size_t i = 1; i < cur_p->size; ++i) {
            if (cur_p->data[i    ].logit > max_l) {
                cur_p->data[max_i].logit = -INFINITY;
                max_i = i;
                max_l = cur_p->data[i].logit;
            } else {
                cur_p->data[i].logit = -INFINITY;
            }
        }

        return;
    }

    for (size_t i = 0; i < cur_p->size; ++i) {
        cur_p->data[i].logit /= temp;
    }
}

static void llama_sampler_softmax_impl(llama_token_data_array * cur_p, bool do_sort) {
    GGML_ASSERT(cur_p->size > 0);

    // Sort the logits in descending order if requested
    if (do_sort && !cur_p->sorted) {
        llama_token_data_array_partial_sort_inplace(cur_p, cur_p->size);
    }

    float max_l = cur_p->data[0].logit;
    if (!cur_p->sorted) {
        for (size_t i = 1; i < cur_p->size; ++i) {
            max_l = std::max(max_l, cur_p->data[i].logit);
        }
    }

    float cum_sum = 0.0f;

    for (size_t i = 0; i < cur_p->size; ++i) {
        float p = expf(cur_p->data[i].logit - max_l);
        cur_p->data[i].p = p;
        cum_sum += p;
    }

    for (size_t i = 0; i < cur_p->size; ++i) {
        cur_p->data[i].p /= cum_sum;
    }
}

static void llama_sampler_top_k_impl(llama_token_data_array * cur_p, int32_t k) {
    // if (k >= (int32_t)cur_p->size) {
    //     return;
    // }

    if (k <= 0) {
        return;
    }

    k = std::min(k, (int) cur_p->size);

    // Sort scores in descending order
    if (!cur_p->sorted) {
        llama_token_data_array_partial_sort_inplace(cur_p, k);
    }

    cur_p->size = k;
}

// dist: `rnd` is the caller's uniform in [0, 1) (upstream: `dist(ctx->rng)`).
static void llama_sampler_dist_apply(double rnd, llama_token_data_array * cur_p) {
    // edge cases
    if (cur_p->size == 0) {
        cur_p->selected = -1;
        return;
    }

    cur_p->selected = 0;

    if (cur_p->size == 1) {
        cur_p->data[0].p = 1.0f;
        return;
    }

    // max logit for numerical stability
    float max_l = cur_p->data[0].logit;
    if (!cur_p->sorted) {
        for (size_t i = 1; i < cur_p->size; ++i) {
            max_l = std::max(max_l, cur_p->data[i].logit);
        }
    }

    // apply softmax to obtain the probabilities
    double sum_cum = 0.0f;
    for (size_t i = 0; i < cur_p->size; ++i) {
        float p = expf(cur_p->data[i].logit - max_l);
        cur_p->data[i].p = p;
        sum_cum += p;
    }

    // sample from the obtained probabilities and normalize the probs in a single pass
    // this is ~3x faster on Mac with full gpt-oss vocab than the version below
    //
          double sum_run = 0.0f;
    const double sum_tgt = sum_cum*rnd;

    bool found = false;
    for (size_t i = 0; i < cur_p->size; ++i) {
        if (!found) {
            // accumulate probs until we reach the target sum
            sum_run += cur_p->data[i].p;
            if (sum_run >= sum_tgt) {
                cur_p->selected = i;
                found = true;
            }
        }

        // normalize probs
        cur_p->data[i].p /= sum_cum;
    }

    // fallback to the last token (don't think this can happen)
    if (!found) {
        cur_p->selected = cur_p->size - 1;
    }
}

struct llama_sampler_top_p {
    const float  p;
    const size_t min_keep;

    std::vector<llama_token_data> buf_sort;
};

static void llama_sampler_top_p_apply(llama_sampler_top_p * ctx, llama_token_data_array * cur_p) {
    if (ctx->p >= 1.0f) {
        return;
    }

    llama_sampler_softmax_impl(cur_p, false);

    size_t k = cur_p->size;
    auto * pdata = cur_p->data;

    auto & buf_sort = ctx->buf_sort;

    // if not sorted, try adaptive top-k sorting
    if (!cur_p->sorted && cur_p->size > 1024) {
        k = std::min<size_t>(256, cur_p->size);
        llama_token_data_array_partial_sort(*cur_p, k, buf_sort);
        pdata = buf_sort.data();
    } else if (!cur_p->sorted) {
        // small candidates -> sort inplace
        llama_token_data_array_partial_sort_inplace(cur_p, k);
    }

    // Compute the cumulative probabilities
    float cum_sum = 0.0f;
    size_t last_idx = cur_p->size;

    for (size_t i = 0; i < cur_p->size; ++i) {
        cum_sum += pdata[i].p;

        // Check if the running sum is at least p or if we have kept at least min_keep tokens
        // we set the last index to i+1 to indicate that the current iterate should be included in the set
        if (cum_sum >= ctx->p && i + 1 >= ctx->min_keep) {
            last_idx = i + 1;
            break;
        }

        // we exceeded the current top-k heuristic -> increase k and continue
        if (!cur_p->sorted && i == k - 1) {
            k = cur_p->size;
            llama_token_data_array_partial_sort(*cur_p, k, buf_sort);
            pdata = buf_sort.data();
        }
    }

    // Resize the output vector to keep only the top-p tokens
    if (!cur_p->sorted) {
        std::copy(buf_sort.data(), buf_sort.data() + last_idx, cur_p->data);
        cur_p->sorted = true;
    }

    cur_p->size = last_idx;
}

struct llama_sampler_min_p {
    const float  p;
    const size_t min_keep;
};

static void llama_sampler_min_p_apply(const llama_sampler_min_p * ctx, llama_token_data_array * cur_p) {
    if (ctx->p <= 0.0f || !cur_p->size) {
        return;
    }

    bool min_p_applied = false;

    // if the cur_p aren't sorted, try the unsorted implementation first
    if (!cur_p->sorted) {
        std::vector<llama_token_data> filtered_tokens;

        float max_logit = -FLT_MAX;
        for (size_t i = 0; i < cur_p->size; ++i) {
            max_logit = std::max(max_logit, cur_p->data[i].logit);
        }
        const float min_logit = max_logit + logf(ctx->p); // min logit for p_i >= p * p_max

        for (size_t i = 0; i < cur_p->size; ++i) {
            if (cur_p->data[i].logit >= min_logit) {
                filtered_tokens.push_back(cur_p->data[i]);
            }
        }

        // if we have enough values the operation was a success
        if (!filtered_tokens.empty() && filtered_tokens.size() >= ctx->min_keep) {
            std::copy(filtered_tokens.begin(), filtered_tokens.end(), cur_p->data);
            cur_p->size = filtered_tokens.size();
            min_p_applied = true;
        }
    }

    // if the cur_p are sorted or the unsorted implementation failed, use this implementation
    if (!min_p_applied) {
        // Sort the logits in descending order
        if (!cur_p->sorted) {
            llama_token_data_array_partial_sort_inplace(cur_p, cur_p->size);
        }

        const float min_logit = cur_p->data[0].logit + logf(ctx->p); // min logit for p_i >= p * p_max
        size_t i = 1; // first token always matches

        for (; i < cur_p->size; ++i) {
            if (cur_p->data[i].logit < min_logit && i >= ctx->min_keep) {
                break; // prob too small
            }
        }

        // Resize the output vector to keep only the matching tokens
        cur_p->size = i;
    }
}

// ---- end of upstream ----

namespace {

enum class kind { top_k, top_p, min_p, temp };

struct stage {
    kind k;
    int32_t top_k;
    llama_sampler_top_p * top_p;
    llama_sampler_min_p min_p;
    float temp;
};

std::atomic<uint64_t> g_allocations{0};

} // namespace

struct lc_chain {
    std::vector<stage> stages;
    std::vector<llama_token_data> cur;
};

extern "C" {

lc_chain * lc_chain_new(size_t n_vocab) {
    auto * c = new lc_chain();
    c->cur.reserve(n_vocab);
    return c;
}

void lc_chain_free(lc_chain * c) {
    for (auto & s : c->stages) {
        delete s.top_p;
    }
    delete c;
}

void lc_chain_add_top_k(lc_chain * c, int32_t k) {
    c->stages.push_back(stage{kind::top_k, k, nullptr, {0.0f, 0}, 0.0f});
}

void lc_chain_add_top_p(lc_chain * c, float p, size_t min_keep) {
    c->stages.push_back(stage{kind::top_p, 0, new llama_sampler_top_p{p, min_keep, {}}, {0.0f, 0}, 0.0f});
}

void lc_chain_add_min_p(lc_chain * c, float p, size_t min_keep) {
    c->stages.push_back(stage{kind::min_p, 0, nullptr, {p, min_keep}, 0.0f});
}

void lc_chain_add_temp(lc_chain * c, float t) {
    c->stages.push_back(stage{kind::temp, 0, nullptr, {0.0f, 0}, t});
}

// The token id drawn from `logits[0..n]` with uniform `u`, or -1 when no candidate is
// left (or `n` exceeds the vocabulary given to `lc_chain_new`).
int32_t lc_chain_sample(lc_chain * c, const float * logits, size_t n, double u) {
    if (n > c->cur.capacity()) {
        return -1;
    }
    c->cur.clear();
    for (llama_token token_id = 0; token_id < (llama_token) n; token_id++) {
        c->cur.push_back(llama_token_data{token_id, logits[token_id], 0.0f});
    }
    llama_token_data_array cur_p = {c->cur.data(), c->cur.size(), -1, false};
    for (auto & s : c->stages) {
        switch (s.k) {
            case kind::top_k: llama_sampler_top_k_impl(&cur_p, s.top_k); break;
            case kind::top_p: llama_sampler_top_p_apply(s.top_p, &cur_p); break;
            case kind::min_p: llama_sampler_min_p_apply(&s.min_p, &cur_p); break;
            case kind::temp:  llama_sampler_temp_impl(&cur_p, s.temp); break;
        }
    }
    llama_sampler_dist_apply(u, &cur_p);
    if (cur_p.selected < 0 || cur_p.selected >= (int64_t) cur_p.size) {
        return -1;
    }
    return cur_p.data[cur_p.selected].id;
}

// Allocations made through C++ `operator new` so far.
uint64_t lc_allocations(void) {
    return g_allocations.load(std::memory_order_relaxed);
}

} // extern "C"

void * operator new(size_t n) {
    g_allocations.fetch_add(1, std::memory_order_relaxed);
    if (void * p = std::malloc(n ? n : 1)) {
        return p;
    }
    throw std::bad_alloc();
}

void * operator new[](size_t n) {
    return ::operator new(n);
}

void operator delete(void * p) noexcept {
    std::free(p);
}

void operator delete[](void * p) noexcept {
    std::free(p);
}

void operator delete(void * p, size_t) noexcept {
    std::free(p);
}

void operator delete[](void * p, size_t) noexcept {
    std::free(p);
}
