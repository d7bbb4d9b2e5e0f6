// One dense layer split over devices (issue 32, point 4): the lecture's "different parameters of
// the same layer on different machines" (tensor parallelism, as Megatron-LM splits its MLPs).
// The layer is y = x W^T + b, x (n, in), W (out, in), b (out), over D ranks of a communicator:
//
//   Columns  rank d holds the output features outs_d: W[outs_d, :] (out/D, in) and b[outs_d].
//            forward   y_d = x W_d^T + b_d (n, out/D); all-gather, then y = [y_0 | y_1 | ...]
//            backward  dW_d = dy_d^T x, db_d = colsum dy_d (dy_d = dy[:, outs_d]);
//                      dx = sum_d dy_d W_d (n, in): an all-reduce
//   Rows     rank d holds the input features ins_d: W[:, ins_d] (out, in/D); b on rank 0 only.
//            forward   y = sum_d x[:, ins_d] W_d^T (+ b): an all-reduce
//            backward  dW_d = dy^T x[:, ins_d], db = colsum dy (every rank the same);
//                      dx_d = dy W_d (n, in/D); all-gather, then dx = [dx_0 | dx_1 | ...]
//
// Each rank calls forward and backward from its own thread (collectives). The parts are equal:
// out (columns) or in (rows) must be divisible by D. What crosses between devices is counted by
// the communicator (bytesMoved): columns move (D-1) n out/D x 4 bytes per rank forward and an
// all-reduce of n in backward; rows the reverse.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "comm/communicator.hpp"

namespace tb {

enum class LayerSplit { Columns, Rows };
// "columns" or "rows"; throws tb::Error naming `flag`.
LayerSplit parseLayerSplit(const std::string& text, const std::string& flag);

class SplitDense {
public:
    // Every rank's backend and stream come from `comm`; n examples; W and b set by setWeights.
    SplitDense(Communicator& comm, LayerSplit split, int n, int in, int out);
    ~SplitDense();
    SplitDense(const SplitDense&) = delete;
    SplitDense& operator=(const SplitDense&) = delete;

    int ranks() const { return comm_.size(); }
    LayerSplit split() const { return split_; }
    // From the host: the whole layer's W (out, in) and b (out), each rank taking its part. Not a
    // collective: from one thread while the ranks are idle.
    void setWeights(const float* w, const float* b);
    // The whole layer's W and b, and their gradients from the last backward, assembled on the host.
    void weights(float* w, float* b) const;
    void gradients(float* dw, float* db) const;

    // Rank `rank`'s part of a step, on its thread: x (n, in) and dy (n, out) in its device's
    // memory (every rank reads the whole of them); y (n, out) and dx (n, in) are written whole on
    // every rank.
    void forward(int rank, const float* x, float* y);
    void backward(int rank, const float* x, const float* dy, float* dx);
    // rank's weights and bias -= lr x their gradients (a plain SGD step on its part).
    void sgdStep(int rank, float lr);

    struct Part;  // one rank's weights, gradients, plan and scratch (split_dense.cpp)

private:
    Communicator& comm_;
    LayerSplit split_;
    int n_, in_, out_, width_;  // width_: each rank's part of out (columns) or in (rows)
    std::vector<std::unique_ptr<Part>> parts_;
};

}  // namespace tb
