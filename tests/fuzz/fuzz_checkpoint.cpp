// Checkpoints (safetensors with Towerbench's metadata): opened as --resume, --init-from and eval
// open them, every tensor's bytes read, and the weights laid out for tiny_mlp; and the header
// alone (Checkpoint::readMeta) against the whole file.
#include <optional>

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
    // checkpoint and its step): refused where open refuses, the same metadata where it opens.
    std::optional<tb::CheckpointMeta> whole, header;
    try {
        whole = tb::Checkpoint::open(path, false).meta();
    } catch (const tb::Error&) {
    }
    try {
        header = tb::Checkpoint::readMeta(path);
    } catch (const tb::Error&) {
    }
    if (whole.has_value() != header.has_value()) std::abort();
    if (whole && (whole->step != header->step || whole->samples != header->samples ||
                  whole->processes != header->processes || whole->model != header->model ||
                  whole->modelSpec != header->modelSpec || whole->config != header->config ||
                  whole->plan != header->plan || whole->validationAccuracy != header->validationAccuracy ||
                  whole->classNames != header->classNames || whole->channels.mean != header->channels.mean))
        std::abort();
    return 0;
}
