#include "parallel/layer_costs.hpp"

#include <algorithm>
#include <chrono>

#include "nn/network.hpp"

namespace tb {

std::vector<double> measureLayerSeconds(const ModelSpec& spec, Backend& backend, int batch, int repeats) {
    const int layers = int(spec.layers.size());
    repeats = std::max(repeats, 1);
    Stream s = backend.createStream();
    std::vector<double> cost;
    for (int l = 0; l < layers; ++l) {
        Network net(spec, backend, batch, LayerRange{l, l});
        if (const std::vector<float> init = net.initialParams(1); !init.empty())  // ReLU, pooling: none
            backend.copyFromHost(s, net.params(), init.data(), init.size() * sizeof(float));
        // Its input, its output's gradient and its input's gradient: small values, as a trained
        // network's (no denormals, no overflow in LRN's powers).
        const size_t in = size_t(batch) * size_t(net.inputDims().size());
        const size_t out = size_t(batch) * size_t(net.outputDims().size());
        Tensor x = backend.empty(Shape{int64_t(in)}), dy = backend.empty(Shape{int64_t(out)}),
               dx = backend.empty(Shape{int64_t(in)}), stats = backend.empty(Shape{3});
        backend.fill(s, x.data(), 0.5f, in);
        backend.fill(s, dy.data(), 0.01f, out);
        backend.fill(s, stats.data(), 0.f, 3);
        if (net.input()) backend.copy(s, net.input(), x.data(), in * sizeof(float));
        else net.setInput(x.data());
        if (net.endsInLoss()) {
            const std::vector<int32_t> labels(size_t(batch), 0);
            backend.copyFromHost(s, net.labels(), labels.data(), labels.size() * sizeof(int32_t));
        } else {
            net.setOutputGrad(dy.data());
        }
        if (l > 0) net.setInputGrad(dx.data());
        std::vector<double> runs;
        for (int r = 0; r <= repeats; ++r) {
            const auto t0 = std::chrono::steady_clock::now();
            net.forward(s, true, uint64_t(r), batch, stats.data());
            net.backward(s);
            backend.synchronize(s);
            if (r > 0) runs.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        }
        std::nth_element(runs.begin(), runs.begin() + std::ptrdiff_t(runs.size() / 2), runs.end());
        cost.push_back(runs[runs.size() / 2]);
    }
    backend.destroyStream(s);
    return cost;
}

}  // namespace tb
