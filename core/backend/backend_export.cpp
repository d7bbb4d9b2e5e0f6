#include "backend/backend_export.hpp"

#include <cstdio>
#include <string>

struct TbBackend {
    std::shared_ptr<tb::Backend> be;
};
struct TbConv {
    std::unique_ptr<tb::ConvOp> op;
};
struct TbPool {
    std::unique_ptr<tb::PoolOp> op;
};
struct TbLrn {
    std::unique_ptr<tb::LrnOp> op;
};
struct TbDense {
    std::unique_ptr<tb::DenseOp> op;
};
struct TbBatchNorm {
    std::unique_ptr<tb::BatchNormOp> op;
};

namespace tb {

void writeError(TbError* err, const char* text) {
    if (err) std::snprintf(err->message, sizeof err->message, "%s", text);
}

namespace {

UpdateParams paramsOf(const TbUpdateParams& h) {
    UpdateParams u;
    u.lr = h.lr, u.momentum = h.momentum, u.beta1 = h.beta1, u.beta2 = h.beta2, u.epsilon = h.epsilon;
    u.step = h.step;
    return u;
}

UpdateRule ruleOf(int rule) {
    switch (rule) {
    case TB_RULE_SGD: return UpdateRule::Sgd;
    case TB_RULE_NESTEROV: return UpdateRule::Nesterov;
    case TB_RULE_ADAM: return UpdateRule::Adam;
    default: return UpdateRule::Momentum;
    }
}

// The table's rows, in cuda_module.h's order, one lambda a row: memory, queues, events and graphs;
// the heavy ops' plans; the element-wise and small ops.
void fillMemoryAndQueues(TbBackendInterface& t) {
    t.destroy = [](TbBackend* b) { delete b; };
    t.name = [](TbBackend* b, char* out, size_t len) {
        try {
            std::snprintf(out, len, "%s", b->be->name().c_str());
        } catch (...) {
            std::snprintf(out, len, "?");
        }
    };
    t.memoryInfo = [](TbBackend* b, TbMemoryInfo* out, TbError* err) {
        return guarded(err, [&] {
            const MemoryInfo m = b->be->memoryInfo();
            *out = {m.freeBytes, m.totalBytes};
        });
    };
    t.allocate = [](TbBackend* b, size_t bytes, void** out, TbError* err) {
        return guarded(err, [&] { *out = b->be->allocate(bytes); });
    };
    t.deallocate = [](TbBackend* b, void* p) { b->be->deallocate(p); };
    t.allocateHost = [](TbBackend* b, size_t bytes, void** out, TbError* err) {
        return guarded(err, [&] { *out = b->be->allocateHost(bytes); });
    };
    t.deallocateHost = [](TbBackend* b, void* p) { b->be->deallocateHost(p); };
    t.allocatorStats = [](TbBackend* b, TbAllocatorStats* out) {
        const AllocatorStats s = b->be->allocatorStats();
        *out = {s.inUseBytes, s.peakInUseBytes, s.reservedBytes, s.deviceMallocs};
    };
    t.copy = [](TbBackend* b, TbStream* s, void* dst, const void* src, size_t bytes, TbError* err) {
        return guarded(err, [&] { b->be->copy(streamOf(s), dst, src, bytes); });
    };
    t.copy2d = [](TbBackend* b, TbStream* s, void* dst, size_t dstPitch, const void* src, size_t srcPitch,
                  size_t width, size_t rows, TbError* err) {
        return guarded(err, [&] { b->be->copy2d(streamOf(s), dst, dstPitch, src, srcPitch, width, rows); });
    };

    t.createStream = [](TbBackend* b, int copiesOnly, TbStream** out, TbError* err) {
        return guarded(err, [&] { *out = handleOf(copiesOnly ? b->be->createCopyStream() : b->be->createStream()); });
    };
    t.destroyStream = [](TbBackend* b, TbStream* s) { b->be->destroyStream(streamOf(s)); };
    t.synchronize = [](TbBackend* b, TbStream* s, TbError* err) {
        return guarded(err, [&] { b->be->synchronize(streamOf(s)); });
    };
    t.createEvent = [](TbBackend* b, TbEvent** out, TbError* err) {
        return guarded(err, [&] { *out = handleOf(b->be->createEvent()); });
    };
    t.destroyEvent = [](TbBackend* b, TbEvent* e) { b->be->destroyEvent(eventOf(e)); };
    t.recordEvent = [](TbBackend* b, TbEvent* e, TbStream* s, TbError* err) {
        return guarded(err, [&] { b->be->recordEvent(eventOf(e), streamOf(s)); });
    };
    t.waitEvent = [](TbBackend* b, TbStream* s, TbEvent* e, TbError* err) {
        return guarded(err, [&] { b->be->waitEvent(streamOf(s), eventOf(e)); });
    };
    t.synchronizeEvent = [](TbBackend* b, TbEvent* e, TbError* err) {
        return guarded(err, [&] { b->be->synchronizeEvent(eventOf(e)); });
    };
    t.elapsedSeconds = [](TbBackend* b, TbEvent* start, TbEvent* end, double* out, TbError* err) {
        return guarded(err, [&] { *out = b->be->elapsedSeconds(eventOf(start), eventOf(end)); });
    };
    t.canCapture = [](TbBackend* b) { return b->be->canCapture() ? 1 : 0; };
    t.beginCapture = [](TbBackend* b, TbStream* s, TbError* err) {
        return guarded(err, [&] { b->be->beginCapture(streamOf(s)); });
    };
    t.endCapture = [](TbBackend* b, TbStream* s, TbGraph** out, TbError* err) {
        return guarded(err, [&] { *out = handleOf(b->be->endCapture(streamOf(s))); });
    };
    t.launchGraph = [](TbBackend* b, TbGraph* g, TbStream* s, const TbUpdateParams* update, TbError* err) {
        return guarded(err, [&] {
            const UpdateParams u = update ? paramsOf(*update) : UpdateParams{};
            b->be->launchGraph(graphOf(g), streamOf(s), update ? &u : nullptr);
        });
    };
    t.destroyGraph = [](TbBackend* b, TbGraph* g) { b->be->destroyGraph(graphOf(g)); };
    t.abortCapture = [](TbBackend* b, TbStream* s) { b->be->abortCapture(streamOf(s)); };
}

void fillPlans(TbBackendInterface& t) {
    t.makeConv = [](TbBackend* b, const TbConvDesc* d, TbConv** out, size_t* workspace, TbError* err) {
        return guarded(err, [&] {
            ConvDesc c;
            c.n = d->n, c.c = d->c, c.h = d->h, c.w = d->w, c.k = d->k, c.r = d->r, c.s = d->s;
            c.strideH = d->strideH, c.strideW = d->strideW;
            c.padTop = d->padTop, c.padLeft = d->padLeft, c.padBottom = d->padBottom, c.padRight = d->padRight;
            c.bias = d->bias != 0;
            c.biasGradient = d->biasGradient != 0;
            c.inputGradient = d->inputGradient != 0;
            auto op = std::make_unique<TbConv>();
            op->op = b->be->makeConv(c);
            *workspace = op->op->workspaceBytes();
            *out = op.release();
        });
    };
    t.convForward = [](TbConv* op, TbStream* s, const float* x, const float* w, const float* b, float* y, void* ws,
                       TbError* err) { return guarded(err, [&] { op->op->forward(streamOf(s), x, w, b, y, ws); }); };
    t.convBackwardData = [](TbConv* op, TbStream* s, const float* dy, const float* w, float* dx, void* ws,
                            TbError* err) {
        return guarded(err, [&] { op->op->backwardData(streamOf(s), dy, w, dx, ws); });
    };
    t.convBackwardWeights = [](TbConv* op, TbStream* s, const float* x, const float* dy, float* dw, float* db,
                               void* ws, TbError* err) {
        return guarded(err, [&] { op->op->backwardWeights(streamOf(s), x, dy, dw, db, ws); });
    };
    t.destroyConv = [](TbConv* op) { delete op; };
    t.makePool = [](TbBackend* b, const TbPoolDesc* d, TbPool** out, size_t* saved, TbError* err) {
        return guarded(err, [&] {
            PoolDesc p;
            p.n = d->n, p.c = d->c, p.h = d->h, p.w = d->w, p.r = d->r, p.s = d->s;
            p.strideH = d->strideH, p.strideW = d->strideW;
            p.padTop = d->padTop, p.padLeft = d->padLeft, p.padBottom = d->padBottom, p.padRight = d->padRight;
            if (d->mode != int(PoolMode::Max) && d->mode != int(PoolMode::Average))
                throw Error("a pooling plan of unknown mode " + std::to_string(d->mode));
            p.mode = PoolMode(d->mode);
            p.relu = d->relu != 0;
            p.sumDx = d->sumDx != 0;
            auto op = std::make_unique<TbPool>();
            op->op = b->be->makePool(p);
            *saved = op->op->savedBytes();
            *out = op.release();
        });
    };
    t.poolForward = [](TbPool* op, TbStream* s, const float* x, float* y, void* saved, TbError* err) {
        return guarded(err, [&] { op->op->forward(streamOf(s), x, y, saved); });
    };
    t.poolBackward = [](TbPool* op, TbStream* s, const float* x, const float* y, const float* dy, float* dx,
                        const void* saved, float* dxSum, TbError* err) {
        return guarded(err, [&] { op->op->backward(streamOf(s), x, y, dy, dx, saved, dxSum); });
    };
    t.destroyPool = [](TbPool* op) { delete op; };
    t.makeLrn = [](TbBackend* b, const TbLrnDesc* d, TbLrn** out, size_t* saved, TbError* err) {
        return guarded(err, [&] {
            LrnDesc l;
            l.n = d->n, l.c = d->c, l.h = d->h, l.w = d->w, l.depthRadius = d->depthRadius;
            l.bias = d->bias, l.alpha = d->alpha, l.beta = d->beta, l.relu = d->relu != 0;
            l.sumDx = d->sumDx != 0;
            auto op = std::make_unique<TbLrn>();
            op->op = b->be->makeLrn(l);
            *saved = op->op->savedBytes();
            *out = op.release();
        });
    };
    t.lrnForward = [](TbLrn* op, TbStream* s, const float* x, float* y, void* saved, TbError* err) {
        return guarded(err, [&] { op->op->forward(streamOf(s), x, y, saved); });
    };
    t.lrnBackward = [](TbLrn* op, TbStream* s, const float* x, const float* y, const float* dy, float* dx,
                       const void* saved, float* dxSum, TbError* err) {
        return guarded(err, [&] { op->op->backward(streamOf(s), x, y, dy, dx, saved, dxSum); });
    };
    t.destroyLrn = [](TbLrn* op) { delete op; };
    t.makeDense = [](TbBackend* b, const TbDenseDesc* d, TbDense** out, TbError* err) {
        return guarded(err, [&] {
            auto op = std::make_unique<TbDense>();
            op->op = b->be->makeDense(
                DenseDesc{d->n, d->in, d->out, d->relu != 0, d->reluMaskOut != 0, d->reluMaskIn != 0});
            *out = op.release();
        });
    };
    t.denseForward = [](TbDense* op, TbStream* s, const float* x, const float* w, const uint16_t* wBf16,
                        const float* b, float* y, void* mask, TbError* err) {
        return guarded(err, [&] { op->op->forward(streamOf(s), x, w, wBf16, b, y, mask); });
    };
    t.denseBackwardData = [](TbDense* op, TbStream* s, const float* dy, const float* w, const uint16_t* wBf16,
                             float* dx, const void* mask, TbError* err) {
        return guarded(err, [&] { op->op->backwardData(streamOf(s), dy, w, wBf16, dx, mask); });
    };
    t.denseBackwardWeights = [](TbDense* op, TbStream* s, const float* x, const float* dy, float* dw, float* db,
                                TbError* err) {
        return guarded(err, [&] { op->op->backwardWeights(streamOf(s), x, dy, dw, db); });
    };
    t.destroyDense = [](TbDense* op) { delete op; };
    t.makeBatchNorm = [](TbBackend* b, const TbBatchNormDesc* d, TbBatchNorm** out, size_t* saved, TbError* err) {
        return guarded(err, [&] {
            auto op = std::make_unique<TbBatchNorm>();
            op->op = b->be->makeBatchNorm(BatchNormDesc{d->rows, d->c, d->epsilon, d->relu != 0});
            *saved = op->op->savedBytes();
            *out = op.release();
        });
    };
    t.batchNormSums = [](TbBatchNorm* op, TbStream* s, const float* x, const float* shift, float* sums, void* saved,
                         TbError* err) { return guarded(err, [&] { op->op->sums(streamOf(s), x, shift, sums, saved); }); };
    t.batchNormForward = [](TbBatchNorm* op, TbStream* s, const float* x, const float* sums, const float* shift,
                            double count, const float* gamma, const float* beta, float* y, float* moving, float decay,
                            void* saved, TbError* err) {
        return guarded(err, [&] {
            op->op->forward(streamOf(s), x, sums, shift, count, gamma, beta, y, moving, decay, saved);
        });
    };
    t.batchNormInference = [](TbBatchNorm* op, TbStream* s, const float* x, const float* moving, const float* gamma,
                              const float* beta, float* y, TbError* err) {
        return guarded(err, [&] { op->op->inference(streamOf(s), x, moving, gamma, beta, y); });
    };
    t.batchNormGradientSums = [](TbBatchNorm* op, TbStream* s, const float* x, const float* y, const float* dy,
                                 float* dgamma, float* dbeta, void* saved, TbError* err) {
        return guarded(err, [&] { op->op->gradientSums(streamOf(s), x, y, dy, dgamma, dbeta, saved); });
    };
    t.batchNormBackwardData = [](TbBatchNorm* op, TbStream* s, const float* x, const float* y, const float* dy,
                                 const float* gamma, const float* sumDyXhat, const float* sumDy, double count, float* dx,
                                 void* saved, TbError* err) {
        return guarded(err, [&] {
            op->op->backwardData(streamOf(s), x, y, dy, gamma, sumDyXhat, sumDy, count, dx, saved);
        });
    };
    t.destroyBatchNorm = [](TbBatchNorm* op) { delete op; };
}

void fillElementwise(TbBackendInterface& t) {
    t.fill = [](TbBackend* b, TbStream* s, float* x, float v, size_t n, TbError* err) {
        return guarded(err, [&] { b->be->fill(streamOf(s), x, v, n); });
    };
    t.scale = [](TbBackend* b, TbStream* s, float* x, float a, size_t n, TbError* err) {
        return guarded(err, [&] { b->be->scale(streamOf(s), x, a, n); });
    };
    t.axpy = [](TbBackend* b, TbStream* s, float a, const float* x, float* y, size_t n, TbError* err) {
        return guarded(err, [&] { b->be->axpy(streamOf(s), a, x, y, n); });
    };
    t.addSumSquares = [](TbBackend* b, TbStream* s, const float* x, size_t n, float a, float* out, TbError* err) {
        return guarded(err, [&] { b->be->addSumSquares(streamOf(s), x, n, a, out); });
    };
    t.reluForward = [](TbBackend* b, TbStream* s, const float* x, float* y, size_t n, TbError* err) {
        return guarded(err, [&] { b->be->reluForward(streamOf(s), x, y, n); });
    };
    t.reluBackward = [](TbBackend* b, TbStream* s, const float* y, const float* dy, float* dx, size_t n,
                        TbError* err) { return guarded(err, [&] { b->be->reluBackward(streamOf(s), y, dy, dx, n); }); };
    t.add = [](TbBackend* b, TbStream* s, const float* a, const float* bb, float* y, size_t n, int relu, TbError* err) {
        return guarded(err, [&] { b->be->add(streamOf(s), a, bb, y, n, relu != 0); });
    };
    t.dropoutForward = [](TbBackend* b, TbStream* s, const float* x, float* y, float* mask, size_t n, float keep,
                          uint64_t seed, TbError* err) {
        return guarded(err, [&] { b->be->dropoutForward(streamOf(s), x, y, mask, n, keep, seed); });
    };
    t.dropoutBackward = [](TbBackend* b, TbStream* s, const float* dy, const float* mask, float* dx, size_t n,
                           TbError* err) {
        return guarded(err, [&] { b->be->dropoutBackward(streamOf(s), dy, mask, dx, n); });
    };
    t.softmaxCrossEntropy = [](TbBackend* b, TbStream* s, const float* logits, const int32_t* labels, float* probs,
                               int n, int k, float* stats, TbError* err) {
        return guarded(err, [&] { b->be->softmaxCrossEntropy(streamOf(s), logits, labels, probs, n, k, stats); });
    };
    t.softmaxCrossEntropyBackward = [](TbBackend* b, TbStream* s, const float* probs, const int32_t* labels,
                                       float* dlogits, int n, int k, float scale, TbError* err) {
        return guarded(err,
                       [&] { b->be->softmaxCrossEntropyBackward(streamOf(s), probs, labels, dlogits, n, k, scale); });
    };
    t.applyUpdate = [](TbBackend* b, TbStream* s, int rule, const TbUpdateParams* h, float* p, const float* g,
                       float* m, float* v, uint16_t* rounded, size_t n, TbError* err) {
        return guarded(err, [&] { b->be->applyUpdate(streamOf(s), ruleOf(rule), paramsOf(*h), p, g, m, v, rounded, n); });
    };
    t.emaUpdate = [](TbBackend* b, TbStream* s, float* shadow, const float* p, float decay, size_t n, TbError* err) {
        return guarded(err, [&] { b->be->emaUpdate(streamOf(s), shadow, p, decay, n); });
    };
    t.roundToBf16 = [](TbBackend* b, TbStream* s, const float* x, uint16_t* y, size_t n, TbError* err) {
        return guarded(err, [&] { b->be->roundToBf16(streamOf(s), x, y, n); });
    };
    t.widenBf16 = [](TbBackend* b, TbStream* s, const uint16_t* x, float* y, size_t n, TbError* err) {
        return guarded(err, [&] { b->be->widenBf16(streamOf(s), x, y, n); });
    };
}

TbBackendInterface makeInterface() {
    TbBackendInterface t{};
    fillMemoryAndQueues(t);
    fillPlans(t);
    fillElementwise(t);
    return t;
}

}  // namespace

const TbBackendInterface& exportedBackendInterface() {
    static const TbBackendInterface table = makeInterface();
    return table;
}

TbBackend* exportBackend(std::shared_ptr<Backend> backend) { return new TbBackend{std::move(backend)}; }

}  // namespace tb
