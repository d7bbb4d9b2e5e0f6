// A small CNN with batch norm (tst_parallel's towers and tst_pipeline's stages): the model
// --sync-bn's equivalences are about.
#pragma once
#include "nn/model_spec.hpp"

namespace tbtest {

// Batch norm after its convolutions and its hidden dense layer, and a residual add; 8x8 images,
// 4 classes. Its 13 layers: c1 bn1 r1 c2 bn2 sum r2 maxpool flatten dense bn3 relu dense.
inline tb::ModelSpec smallBnCnn() {
    return tb::parseModelSpec(R"({"name": "small_bn", "input": [1, 8, 8], "layers": [
        {"type": "conv2d", "name": "c1", "filters": 4, "kernel": 3, "init": {"type": "he_normal"}, "bias": false, "weight_decay": 0.01},
        {"type": "batch_norm", "name": "bn1", "weight_decay": 0.01}, {"type": "relu", "name": "r1"},
        {"type": "conv2d", "name": "c2", "filters": 4, "kernel": 3, "init": {"type": "he_normal"}, "bias": false},
        {"type": "batch_norm", "name": "bn2"},
        {"type": "add", "name": "sum", "inputs": ["bn2", "r1"]}, {"type": "relu", "name": "r2"},
        {"type": "maxpool", "size": 2, "stride": 2}, {"type": "flatten"},
        {"type": "dense", "units": 16, "init": {"type": "glorot"}}, {"type": "batch_norm", "name": "bn3"},
        {"type": "relu"}, {"type": "dense", "units": 4, "init": {"type": "glorot"}}]})",
                          "small_bn.json");
}

}  // namespace tbtest
