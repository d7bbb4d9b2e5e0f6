#include "parallel/split_dense.hpp"

#include "util/error.hpp"

namespace tb {

LayerSplit parseLayerSplit(const std::string& text, const std::string& flag) {
    if (text == "columns") return LayerSplit::Columns;
    if (text == "rows") return LayerSplit::Rows;
    throw Error(flag + ": '" + text + "' is no way to split a layer; give columns (its outputs, all-gathered) or rows "
                "(its inputs, all-reduced)");
}

struct SplitDense::Part {
    Backend* backend = nullptr;
    Stream stream = nullptr;
    std::unique_ptr<DenseOp> op;  // columns (n, in) -> (n, width); rows (n, width) -> (n, out)
    Tensor w, b, dw, db;          // columns: (width, in), (width); rows: (out, width), (out)
    Tensor slice;                 // (n, width): rows' x[:, ins_d]; columns' dy[:, outs_d]
    Tensor part;                  // (n, width): columns' y_d; rows' dx_d
    Tensor gathered;              // (D, n, width): every rank's part
};

namespace {
// dst[r, :width] := src[r, :width] for `rows` rows of leading dimensions dstLd and srcLd: a
// block of columns of one row-major matrix into or out of another.
void copyColumns(Backend& be, Stream s, float* dst, int dstLd, const float* src, int srcLd, int rows, int width) {
    for (int r = 0; r < rows; ++r)
        be.copy(s, dst + size_t(r) * size_t(dstLd), src + size_t(r) * size_t(srcLd), size_t(width) * sizeof(float));
}
}  // namespace

SplitDense::SplitDense(Communicator& comm, LayerSplit split, int n, int in, int out)
    : comm_(comm), split_(split), n_(n), in_(in), out_(out) {
    const int d = comm.size();
    const int whole = split == LayerSplit::Columns ? out : in;
    const char* what = split == LayerSplit::Columns ? "outputs" : "inputs";
    if (n < 1 || in < 1 || out < 1) throw Error("a split dense layer needs examples, inputs and outputs");
    if (whole % d != 0)
        throw Error("a dense layer of " + std::to_string(whole) + " " + what + " does not split evenly over " +
                    std::to_string(d) + " devices");
    width_ = whole / d;
    for (int r = 0; r < d; ++r) {
        auto p = std::make_unique<Part>();
        p->backend = comm.endpoint(r).backend;
        p->stream = comm.endpoint(r).stream;
        Backend& be = *p->backend;
        const bool columns = split == LayerSplit::Columns;
        p->op = be.makeDense(columns ? DenseDesc{n, in, width_} : DenseDesc{n, width_, out});
        const int wOut = columns ? width_ : out, wIn = columns ? in : width_;
        p->w = be.empty(Shape{wOut, wIn});
        p->dw = be.empty(Shape{wOut, wIn});
        p->b = be.empty(Shape{wOut});
        p->db = be.empty(Shape{wOut});
        p->slice = be.empty(Shape{n, width_});
        p->part = be.empty(Shape{n, width_});
        p->gathered = be.empty(Shape{d, n, width_});
        parts_.push_back(std::move(p));
    }
}

SplitDense::~SplitDense() = default;

void SplitDense::setWeights(const float* w, const float* b) {
    for (int r = 0; r < ranks(); ++r) {
        Part& p = *parts_[size_t(r)];
        Backend& be = *p.backend;
        if (split_ == LayerSplit::Columns) {  // rows outs_r of W (contiguous), b[outs_r]
            be.copyFromHost(p.stream, p.w.data(), w + size_t(r) * size_t(width_) * size_t(in_), p.w.bytes());
            be.copyFromHost(p.stream, p.b.data(), b + size_t(r) * size_t(width_), p.b.bytes());
        } else {  // columns ins_r of every row of W; the bias on rank 0 only, so the sum adds it once
            std::vector<float> part(size_t(out_) * size_t(width_));
            for (int o = 0; o < out_; ++o)
                for (int k = 0; k < width_; ++k)
                    part[size_t(o) * size_t(width_) + size_t(k)] = w[size_t(o) * size_t(in_) + size_t(r * width_ + k)];
            be.copyFromHost(p.stream, p.w.data(), part.data(), p.w.bytes());
            if (r == 0) be.copyFromHost(p.stream, p.b.data(), b, p.b.bytes());
            else be.fill(p.stream, p.b.data(), 0.f, size_t(out_));
        }
        be.synchronize(p.stream);
    }
}

namespace {
// The whole (out, in) matrix and (out) vector from every part's `m` and `v`, as setWeights split them.
void assemble(const std::vector<std::unique_ptr<SplitDense::Part>>& parts, LayerSplit split, int in, int out, int width,
              Tensor SplitDense::Part::*m, Tensor SplitDense::Part::*v, float* whole, float* vector) {
    for (size_t r = 0; r < parts.size(); ++r) {
        const SplitDense::Part& p = *parts[r];
        std::vector<float> host(size_t((p.*m).numel())), hv(size_t((p.*v).numel()));
        p.backend->copyToHost(p.stream, host.data(), (p.*m).data(), (p.*m).bytes());
        p.backend->copyToHost(p.stream, hv.data(), (p.*v).data(), (p.*v).bytes());
        p.backend->synchronize(p.stream);
        if (split == LayerSplit::Columns) {
            std::copy(host.begin(), host.end(), whole + r * size_t(width) * size_t(in));
            std::copy(hv.begin(), hv.end(), vector + r * size_t(width));
        } else {
            for (int o = 0; o < out; ++o)
                for (int k = 0; k < width; ++k)
                    whole[size_t(o) * size_t(in) + r * size_t(width) + size_t(k)] = host[size_t(o) * size_t(width) + size_t(k)];
            if (r == 0) std::copy(hv.begin(), hv.end(), vector);
        }
    }
}
}  // namespace

void SplitDense::weights(float* w, float* b) const { assemble(parts_, split_, in_, out_, width_, &Part::w, &Part::b, w, b); }
void SplitDense::gradients(float* dw, float* db) const {
    assemble(parts_, split_, in_, out_, width_, &Part::dw, &Part::db, dw, db);
}

void SplitDense::forward(int rank, const float* x, float* y) {
    Part& p = *parts_[size_t(rank)];
    Backend& be = *p.backend;
    const int d = ranks();
    if (split_ == LayerSplit::Columns) {
        p.op->forward(p.stream, x, p.w.data(), nullptr, p.b.data(), p.part.data(), nullptr);
        be.synchronize(p.stream);
        comm_.allGather(rank, p.part.data(), p.gathered.data(), size_t(n_) * size_t(width_));
        for (int j = 0; j < d; ++j)  // (D, n, width) -> (n, out)
            copyColumns(be, p.stream, y + size_t(j) * size_t(width_), out_,
                        p.gathered.data() + size_t(j) * size_t(n_) * size_t(width_), width_, n_, width_);
    } else {
        copyColumns(be, p.stream, p.slice.data(), width_, x + size_t(rank) * size_t(width_), in_, n_, width_);
        p.op->forward(p.stream, p.slice.data(), p.w.data(), nullptr, p.b.data(), y, nullptr);
        be.synchronize(p.stream);
        comm_.allReduce(rank, y, size_t(n_) * size_t(out_), ReduceOp::Sum);
    }
    be.synchronize(p.stream);
}

void SplitDense::backward(int rank, const float* x, const float* dy, float* dx) {
    Part& p = *parts_[size_t(rank)];
    Backend& be = *p.backend;
    const int d = ranks();
    if (split_ == LayerSplit::Columns) {
        copyColumns(be, p.stream, p.slice.data(), width_, dy + size_t(rank) * size_t(width_), out_, n_, width_);
        p.op->backwardWeights(p.stream, x, p.slice.data(), p.dw.data(), p.db.data());
        p.op->backwardData(p.stream, p.slice.data(), p.w.data(), nullptr, dx, nullptr);
        be.synchronize(p.stream);
        comm_.allReduce(rank, dx, size_t(n_) * size_t(in_), ReduceOp::Sum);
    } else {
        // slice still holds x[:, ins_rank] from forward; recopied, as x is the caller's to change.
        copyColumns(be, p.stream, p.slice.data(), width_, x + size_t(rank) * size_t(width_), in_, n_, width_);
        p.op->backwardWeights(p.stream, p.slice.data(), dy, p.dw.data(), p.db.data());
        p.op->backwardData(p.stream, dy, p.w.data(), nullptr, p.part.data(), nullptr);
        be.synchronize(p.stream);
        comm_.allGather(rank, p.part.data(), p.gathered.data(), size_t(n_) * size_t(width_));
        for (int j = 0; j < d; ++j)  // (D, n, width) -> (n, in)
            copyColumns(be, p.stream, dx + size_t(j) * size_t(width_), in_,
                        p.gathered.data() + size_t(j) * size_t(n_) * size_t(width_), width_, n_, width_);
    }
    be.synchronize(p.stream);
}

void SplitDense::sgdStep(int rank, float lr) {
    Part& p = *parts_[size_t(rank)];
    p.backend->axpy(p.stream, -lr, p.dw.data(), p.w.data(), size_t(p.w.numel()));
    // Rows: the bias lives on rank 0 (the others hold zeros, which must stay zeros).
    if (split_ == LayerSplit::Columns || rank == 0) p.backend->axpy(p.stream, -lr, p.db.data(), p.b.data(), size_t(p.b.numel()));
    p.backend->synchronize(p.stream);
}

}  // namespace tb
