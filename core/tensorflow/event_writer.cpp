#include "tensorflow/event_writer.hpp"

#include <unistd.h>

#include <chrono>
#include <cmath>

#include "tensorflow/tensorflow.pb.h"
#include "util/system_text.hpp"

namespace tb {

namespace {

double now() {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// TensorBoard orders a folder's files by name: seconds, then a pid against same-second twins.
std::string fileName(const std::string& folder) {
    return folder + "/events.out.tfevents." + std::to_string(int64_t(now())) + "." + hostName() + "." +
           std::to_string(::getpid());
}

}  // namespace

EventWriter::EventWriter(const std::string& folder, int64_t resumeStep) : out_(fileName(folder)) {
    tensorflow::Event version;
    version.set_wall_time(now());
    version.set_file_version("brain.Event:2");
    out_.write(version.SerializeAsString());
    if (resumeStep >= 0) {
        tensorflow::Event start;
        start.set_wall_time(now());
        start.set_step(resumeStep + 1);
        start.mutable_session_log()->set_status(tensorflow::SessionLog::START);
        out_.write(start.SerializeAsString());
    }
    out_.flush();
}

void EventWriter::scalars(int64_t step, std::initializer_list<std::pair<std::string, double>> values) {
    tensorflow::Event e;
    e.set_wall_time(now());
    e.set_step(step);
    for (const auto& [tag, v] : values) {
        if (!std::isfinite(v)) continue;
        tensorflow::Summary::Value* s = e.mutable_summary()->add_value();
        s->set_tag(tag);
        s->set_simple_value(float(v));
    }
    if (e.summary().value_size() > 0) out_.write(e.SerializeAsString());
}

}  // namespace tb
