// EventWriter: an events.out.tfevents.<seconds>.<host>.<pid> file as TensorBoard reads it
// (TFRecord framing, one tensorflow.Event per record, the first saying "brain.Event:2").
#pragma once
#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>

#include "io/tfrecord.hpp"

namespace tb {

class EventWriter {
public:
    // A new file in `folder`; throws tb::Error when it cannot be created. resumeStep >= 0: the
    // file starts with SessionLog START at resumeStep + 1, TensorBoard's sign to drop what earlier
    // files recorded from there on.
    explicit EventWriter(const std::string& folder, int64_t resumeStep = -1);
    const std::string& path() const { return out_.path(); }
    // One Event of simple values at `step`; non-finite values are left out, and an Event with none
    // is not written.
    void scalars(int64_t step, std::initializer_list<std::pair<std::string, double>> values);
    void flush() { out_.flush(); }

private:
    TFRecordWriter out_;
};

}  // namespace tb
