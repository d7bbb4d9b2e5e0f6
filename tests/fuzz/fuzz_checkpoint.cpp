// Checkpoints (safetensors with Towerbench's metadata): opened as --resume, --init-from and eval
// open them, every tensor's bytes read, and the weights laid out for tiny_mlp; and the header
// alone (Checkpoint::readMeta) against the whole file.
#include "backend/backend.hpp"
#include "engine/checkpoint.hpp"
#include "fuzz_support.hpp"
#include "nn/network.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const auto cpu = tb::makeCpuBackend(1);
    static const tb::Network layout(tb::findModel("tiny_mlp"), *cpu, 1);
    const std::string path = fuzz::scratch() + "/step-1.safetensors";
    fuzz::writeFile(path, {reinterpret_cast<const char*>(data), size});
    TB_FUZZ_REFUSALS_ARE_FINE(
        const tb::Checkpoint c = tb::Checkpoint::open(path);
        for (const std::string& name : c.file().names()) {
            const tb::safetensors::TensorInfo& t = c.file().info(name);
            if (t.dtype == tb::safetensors::Dtype::I64) (void)c.file().int64s(name);
            else if (t.dtype == tb::safetensors::Dtype::F32) {
                std::vector<float> v(size_t(t.numel()));
                c.file().readFloats(name, v.data(), v.size());
            }
        }
        (void)c.loadWeights(layout);
        (void)c.resumeProblem(tb::RunConfig{}, "{}"));
    // The header alone reads as the whole file does (Checkpoint::readMeta, which finds the newest
    // checkpoint and its step): refused where open refuses, the same step where it opens.
    std::string whole, header;
    int64_t wholeStep = -1, headerStep = -1;
    try {
        wholeStep = tb::Checkpoint::open(path, false).meta().step;
    } catch (const tb::Error& e) {
        whole = e.what();
    }
    try {
        headerStep = tb::Checkpoint::readMeta(path).step;
    } catch (const tb::Error& e) {
        header = e.what();
    }
    if (whole.empty() != header.empty() || wholeStep != headerStep) std::abort();
    return 0;
}
