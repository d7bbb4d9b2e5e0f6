// Per-channel sums of a channels-last tensor seen as rows of c floats ((n h w, c)): a
// convolution's bias gradient where the layer after it writes it (PoolDesc::sumDx, LrnDesc::sumDx).
#pragma once
#include <omp.h>

#include <cstdint>
#include <vector>

#include "backend/cpu/cpu_batch_norm.hpp"

namespace tb {

// The rows are split evenly over the team; each thread adds its rows into float sums of blocks of
// kBlock rows (vectorised), and the blocks' sums into doubles: fp32 error over 32 rows, double
// over the batch. The threads' doubles are added in thread order, so a plan gives the same bits
// every call (as the CPU batch norm's sums).
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
        const size_t c = size_t(c_);
        const int team = rows * c_ > kParallelMin ? threads_ : 1;
        std::vector<double> total(size_t(team) * c, 0.0);
        std::vector<float> block(size_t(team) * c, 0.f);
#pragma omp parallel num_threads(team)
        {
            const int64_t t = omp_get_thread_num(), k = omp_get_num_threads();
            Adder mine(total.data() + size_t(t) * c, block.data() + size_t(t) * c, c_);
            f(rows * t / k, rows * (t + 1) / k, mine);
            mine.flush();
        }
        for (size_t j = 0; j < c; ++j) {
            double s = 0;
            for (int t = 0; t < team; ++t) s += total[size_t(t) * c + j];
            out[j] = float(s);
        }
    }

private:
    int c_;
    int threads_;
};

}  // namespace tb
