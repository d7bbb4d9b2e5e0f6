// The CPU backend's sums per channel over the rows of a channels-last tensor ((n h w, c)), in a
// fixed order over its OpenMP team: batch norm's statistics and their gradients
// (cpu_batch_norm.cpp), and a convolution's bias gradient where the layer after it writes it
// (PoolDesc::sumDx, LrnDesc::sumDx).
#pragma once
#include <omp.h>

#include <cstdint>
#include <vector>

namespace tb {

// The CPU backend's loops over a tensor go parallel only when it has more elements than this:
// below it, waking the OpenMP team costs more than it saves.
inline constexpr int64_t kParallelMin = 1 << 15;

// Sums over the rows of a tensor, `width` of them per row, in a team of `team` threads:
// f(begin, end, total, block) is called once per thread over its share of [0, rows) and adds its
// rows into total (width doubles), with block (width floats, zeroed) as its scratch; the threads'
// totals are added in thread order, so a plan gives the same bits every call.
template <class F>
std::vector<double> sumOverTeam(int64_t rows, size_t width, int team, F&& f) {
    std::vector<double> part(size_t(team) * width, 0.0);
    std::vector<float> scratch(size_t(team) * width, 0.f);
#pragma omp parallel num_threads(team)
    {
        const int64_t t = omp_get_thread_num(), k = omp_get_num_threads();
        f(rows * t / k, rows * (t + 1) / k, part.data() + size_t(t) * width, scratch.data() + size_t(t) * width);
    }
    std::vector<double> out(width, 0.0);
    for (int t = 0; t < team; ++t)
        for (size_t j = 0; j < width; ++j) out[j] += part[size_t(t) * width + j];
    return out;
}

class ChannelSums {
public:
    static constexpr int kBlock = 32;
    // One thread's running sums.
    class Adder {
    public:
        Adder(double* total, float* block, int c) : total_(total), block_(block), c_(c) {}
        void add(const float* row) {
#pragma omp simd
            for (int j = 0; j < c_; ++j) block_[j] += row[j];
            if (++rows_ == kBlock) flush();
        }
        void flush() {
            for (int j = 0; j < c_; ++j) {
                total_[j] += block_[j];
                block_[j] = 0.f;
            }
            rows_ = 0;
        }

    private:
        double* total_;
        float* block_;
        int c_;
        int rows_ = 0;
    };

    ChannelSums(int c, int threads) : c_(c), threads_(threads) {}
    // out (c) := the sum of the rows that f(begin, end, adder) adds, called once per thread over
    // its share of [0, rows) (one thread alone below kParallelMin elements).
    template <class F>
    void run(int64_t rows, F&& f, float* out) const {
        const std::vector<double> total = sumOverTeam(rows, size_t(c_), rows * c_ > kParallelMin ? threads_ : 1,
                                                      [&](int64_t b, int64_t e, double* sums, float* block) {
                                                          Adder mine(sums, block, c_);
                                                          f(b, e, mine);
                                                          mine.flush();
                                                      });
        for (int j = 0; j < c_; ++j) out[j] = float(total[size_t(j)]);
    }

private:
    int c_;
    int threads_;
};

}  // namespace tb
