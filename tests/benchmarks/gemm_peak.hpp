// The machine's GEMM ceiling per precision, measured with oneDNN (tb_gemm_peak prints it as JSON;
// every benchmark's machine line, bench_machine.hpp, states it): fp32 with dnnl_sgemm; bf16 (bf16
// inputs, fp32 accumulation and result, as the towers' bf16 matrix work) with a matmul primitive,
// only where the processor has bf16 instructions (oneDNN would emulate it, far slower).
#pragma once
#include <oneapi/dnnl/dnnl.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <oneapi/dnnl/dnnl.hpp>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "util/error.hpp"

namespace tbbench {

// Seconds of the fastest of `repeats` calls of `once`, after one untimed call.
template <class F>
double fastest(F once, int repeats) {
    once();
    double best = 1e30;
    for (int r = 0; r < repeats; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        once();
        best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    return best;
}

inline double gflops(dnnl_dim_t n, double seconds) { return 2.0 * double(n) * double(n) * double(n) / seconds / 1e9; }

// C (n, n) = A (n, n) x B (n, n), fp32, row-major.
inline double sgemmGflops(dnnl_dim_t n, int repeats) {
    const size_t count = size_t(n) * size_t(n);
    std::vector<float> a(count), b(count), c(count, 0.f);
    std::mt19937 rng(42);
    std::uniform_real_distribution<float> dist(-1.f, 1.f);
    for (auto& v : a) v = dist(rng);
    for (auto& v : b) v = dist(rng);
    auto once = [&] {
        if (dnnl_sgemm('N', 'N', n, n, n, 1.f, a.data(), n, b.data(), n, 0.f, c.data(), n) != dnnl_success)
            throw tb::Error("dnnl_sgemm failed for n = " + std::to_string(n));
    };
    return gflops(n, fastest(once, repeats));
}

// C (n, n) f32 = A (n, n) bf16 x B (n, n) bf16 with oneDNN's matmul; `kernel` gets its name.
inline double bf16GemmGflops(dnnl_dim_t n, int repeats, std::string& kernel) {
    using namespace dnnl;
    using dt = memory::data_type;
    using tag = memory::format_tag;
    engine eng(engine::kind::cpu, 0);
    stream s(eng);
    const memory::desc a({n, n}, dt::bf16, tag::ab), c({n, n}, dt::f32, tag::ab);
    const matmul::primitive_desc pd(matmul::desc(a, a, c), eng);
    kernel = pd.impl_info_str();
    memory A(a, eng), B(a, eng), C(c, eng), source(c, eng);
    std::mt19937 rng(42);
    std::uniform_real_distribution<float> dist(-1.f, 1.f);
    float* f = static_cast<float*>(source.get_data_handle());
    for (size_t i = 0; i < size_t(n) * size_t(n); ++i) f[i] = dist(rng);
    reorder(source, A).execute(s, source, A);
    reorder(source, B).execute(s, source, B);
    matmul mm(pd);
    auto once = [&] {
        mm.execute(s, {{DNNL_ARG_SRC, A}, {DNNL_ARG_WEIGHTS, B}, {DNNL_ARG_DST, C}});
        s.wait();
    };
    return gflops(n, fastest(once, repeats));
}

struct GemmPeak {
    int threads = 0;
    double fp32 = 0, bf16 = 0;     // GFLOP/s at the best size (bf16: 0 where missing)
    dnnl_dim_t fp32N = 0, bf16N = 0;
    std::string fp32Sizes;         // "\"1024\": X, \"2048\": Y" (JSON members)
    std::string bf16Kernel;        // oneDNN's implementation ("brg:avx512_core_bf16")
    std::string bf16Missing;       // why there is no bf16 figure (tb::cpuBf16Missing)
};

// The best size of `sizes` for each precision, on `threads` threads.
inline GemmPeak measureGemmPeak(int threads, const std::vector<dnnl_dim_t>& sizes, int repeats) {
    omp_set_num_threads(threads);
    GemmPeak p;
    p.threads = threads;
    p.bf16Missing = tb::cpuBf16Missing();
    for (dnnl_dim_t n : sizes) {
        if (n <= 0) continue;
        const double g = sgemmGflops(n, repeats);
        p.fp32Sizes += (p.fp32Sizes.empty() ? "\"" : ", \"") + std::to_string(n) + "\": " + std::to_string(g);
        if (g > p.fp32) p.fp32 = g, p.fp32N = n;
        std::string kernel;
        if (p.bf16Missing.empty())
            if (const double h = bf16GemmGflops(n, repeats, kernel); h > p.bf16) p.bf16 = h, p.bf16N = n, p.bf16Kernel = kernel;
    }
    return p;
}

}  // namespace tbbench
