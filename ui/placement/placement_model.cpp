#include "placement/placement_model.hpp"

#include <QObject>
#include <QSet>
#include <algorithm>

#include "nn/network.hpp"
#include "parallel/stage_plan.hpp"
#include "placement/placement_format.hpp"

namespace {
bool isGpu(const QString& device) { return device.startsWith(QLatin1String("gpu:")); }
}  // namespace

PlacementModel PlacementModel::fromStages(const tb::RunConfig& c, const tb::ModelSpec& spec) {
    PlacementModel m;
    std::vector<std::string> names;
    for (const tb::LayerSpec& l : spec.layers) names.push_back(l.name);
    const tb::StagePlan plan = tb::parseStagePlan(c.stages, names);
    m.schedule = QString::fromStdString(c.pipeline.empty() ? std::string("naive") : c.pipeline);
    m.microBatches = c.microBatches;
    m.stageReplicas = std::max(1, c.stageReplicas);
    m.stageCopies = c.transfers == "copies";
    m.stagePerProcess = c.stagePerProcess;
    m.syncBatchNorm = c.syncBn;
    m.paramCount = tb::shapeOf(spec).params;
    for (int r = 0; r < m.stageReplicas; ++r)
        for (int s = 0; s < plan.count(); ++s) {
            const tb::Stage& st = plan.stages[size_t(s)];
            tb::Device d = st.device;
            d.index += plan.count() * r;  // as StagePipeline numbers a replica's devices
            const QString layers = st.first < 0 ? QObject::tr("split at start")
                                   : st.first == st.last ? QString::fromStdString(names[size_t(st.first)])
                                                         : QString::fromStdString(names[size_t(st.first)] + ".." +
                                                                                  names[size_t(st.last)]);
            // (A stage per process: process r S + s runs stage s of replica r.)
            m.stages.push_back({m.stagePerProcess ? QObject::tr("process %1").arg(r * plan.count() + s) : QString::fromStdString(d.str()),
                                layers, r});
            if (r > 0 || s + 1 == plan.count()) continue;
            // The boundary layer's outputs per example.
            const int64_t perExample = st.first < 0 ? 0 : tb::layerOutputDims(spec, st.last).size();
            m.boundaryBytes.push_back(perExample * int64_t(c.batch / m.stageReplicas) * int64_t(sizeof(float)));
        }
    return m;
}

PlacementModel PlacementModel::fromPlan(const tb::DeploymentPlan& plan, int64_t paramCount) {
    PlacementModel m;
    const int n = plan.towerCount();
    m.towers.reserve(n);
    for (int i = 0; i < n; ++i) {
        Tower t;
        t.device = QString::fromStdString(plan.towers[size_t(i)].str());
        t.batch = plan.batchPerTower;
        t.slowdown = size_t(i) < plan.slowdown.size() ? plan.slowdown[size_t(i)] : 1.0;
        t.local = plan.variables == tb::VariablePlacement::Tower && plan.variablesTower >= 0 &&
                  plan.variablesTower < n && plan.towers[size_t(i)] == plan.towers[size_t(plan.variablesTower)];
        m.towers.push_back(t);
    }
    switch (plan.variables) {
    case tb::VariablePlacement::Cpu: m.holder = QStringLiteral("cpu"); break;
    case tb::VariablePlacement::Tower:
        // validate() refuses an index out of range; clamp anyway so a diagram never crashes.
        if (n > 0) m.holder = m.towers[std::clamp(plan.variablesTower, 0, n - 1)].device;
        break;
    case tb::VariablePlacement::Replicated: break;
    }
    // Shards act only in asynchronous mode (each has its own lock); a synchronous plan updates
    // the variables as one, so the diagram draws one holder. (Parameter-server processes are
    // shards in either mode: acrossProcesses.)
    m.psShards = plan.update == tb::UpdateMode::Async ? std::max(1, plan.psShards) : 1;
    m.gradientBytes = int(tb::gradientElementBytes(plan.commPrecision));
    if (plan.variables == tb::VariablePlacement::Replicated)
        m.links = Links::Ring;
    else if (m.psShards > 1)
        m.links = Links::Shards;
    else
        m.links = Links::HolderArrows;
    m.async = plan.update == tb::UpdateMode::Async;
    m.averageEvery = plan.averageEvery;
    m.syncBatchNorm = plan.syncBatchNorm;
    m.paramCount = paramCount;
    return m;
}

PlacementModel PlacementModel::fromPlan(const tb::DeploymentPlan& plan, const QVector<int64_t>& variableSizes) {
    int64_t count = 0;
    for (int64_t v : variableSizes) count += v;
    PlacementModel m = fromPlan(plan, count);
    m.variableSizes = variableSizes;
    return m;
}

PlacementModel PlacementModel::acrossProcesses(int processes, int servers, bool batchPerTowerGiven) const {
    PlacementModel m = *this;
    m.processes = std::max(1, processes);
    m.serverProcesses = std::clamp(servers, 0, m.processes - 1);
    const int workers = m.processes - m.serverProcesses;
    if (m.processes == 1) return m;
    m.towers.clear();
    for (int w = 0; w < workers; ++w)
        for (Tower t : towers) {
            t.process = m.serverProcesses + w;
            if (!batchPerTowerGiven) t.batch = std::max(1, t.batch / workers);
            m.towers.push_back(t);
        }
    if (m.serverProcesses > 0) {  // the variables' shards are the server processes
        m.links = Links::Shards;
        m.psShards = m.serverProcesses;
        m.holder = m.serverProcesses == 1 ? QObject::tr("a parameter-server process")
                                          : QObject::tr("%1 parameter-server processes").arg(m.serverProcesses);
    }
    return m;
}

QVector<PlacementModel::DeviceGroup> PlacementModel::processFrames() const {
    QVector<DeviceGroup> frames;
    if (processes == 1) return frames;
    for (int i = 0; i < towers.size();) {
        int j = i + 1;
        while (j < towers.size() && towers[j].process == towers[i].process) ++j;
        const int rank = towers[i].process;
        frames.push_back({rank == serverProcesses ? QObject::tr("process %1 (chief)").arg(rank)
                                                  : QObject::tr("process %1").arg(rank),
                          i, j - i});
        i = j;
    }
    return frames;
}

int PlacementModel::arrowCount() const {
    const int n = int(towers.size());
    const int moving = int(std::count_if(towers.begin(), towers.end(), [](const Tower& t) { return !t.local; }));
    switch (links) {
    case Links::HolderArrows:
    case Links::Shards: return 2 * moving;
    case Links::Ring: return n > 1 ? n : 0;
    }
    return 0;
}

int PlacementModel::shardVariables(int shard) const {
    const int v = int(variableSizes.size());
    if (shard < 0 || shard >= psShards || shard >= v) return 0;
    return (v - shard + psShards - 1) / psShards;  // shard, shard + S, shard + 2S, ... below v
}

int64_t PlacementModel::shardBytes(int shard) const {
    int64_t elements = 0;
    for (int v = shard; shard >= 0 && v < variableSizes.size(); v += std::max(1, psShards)) elements += variableSizes[v];
    return elements * 4;
}

int64_t PlacementModel::bytesPerStep() const {
    const int64_t p4 = paramCount * 4, pg = paramCount * gradientBytes;
    if (links == Links::Ring) return 2 * int64_t(std::max(0, distinctDevices() - 1)) * pg;
    if (async) return p4 + pg;  // per update: the pusher's pull and push (a tower off the holder's device)
    int64_t moved = 0;
    for (int i = 0; i < towers.size(); ++i) moved += linkBytes(i) / 4 * (4 + gradientBytes);
    return moved;
}

QString PlacementModel::bothWays(const QString& towers) const {
    const QString m = towers.isEmpty() ? QString() : towers + QStringLiteral(" \u00d7 ");
    return gradientBytes == 4 ? QStringLiteral("2 \u00d7 %1P \u00d7 4").arg(m)
                              : QStringLiteral("%1P \u00d7 (4 + %2)").arg(m).arg(gradientBytes);
}

QString PlacementModel::bytesLabel() const {
    if (towers.isEmpty()) return {};
    const int64_t bytes = bytesPerStep();
    if (links == Links::Ring) {
        const int d = distinctDevices();
        if (d < 2) return QObject::tr("nothing moves between devices");
        const QString when = averageEvery > 1 ? QObject::tr("every %1 steps").arg(averageEvery) : QObject::tr("per step");
        return QObject::tr("%1 %2 (2 \u00d7 (D\u22121) \u00d7 P \u00d7 %3, D = %4)")
            .arg(formatBytes(double(bytes)), when)
            .arg(gradientBytes)
            .arg(d);
    }
    if (async) {
        const int local = int(std::count_if(towers.begin(), towers.end(), [](const Tower& t) { return t.local; }));
        return local == towers.size() ? QObject::tr("nothing moves: every tower reads the variables in place")
                                       : QObject::tr("%1 per update off the holder (%2)")
                                             .arg(formatBytes(double(bytes)), bothWays());
    }
    int moving = 0;
    for (int i = 0; i < towers.size(); ++i) moving += linkBytes(i) > 0 ? 1 : 0;
    if (moving == 0) return QObject::tr("nothing moves: every tower reads the variables in place");
    return QObject::tr("%1 per step (%2, M = %3)").arg(formatBytes(double(bytes)), bothWays(QStringLiteral("M"))).arg(moving);
}

int64_t PlacementModel::linkBytes(int tower) const {
    if (links == Links::Ring || tower < 0 || tower >= towers.size() || towers[tower].local) return 0;
    // Parameter-server processes: a worker's towers meet on its host, and its mean goes up once.
    if (serverProcesses > 0 && tower > 0 && towers[tower - 1].process == towers[tower].process) return 0;
    return paramCount * 4;
}

QString PlacementModel::linkKind(int tower) const {
    if (linkBytes(tower) == 0 || !isGpu(towers[tower].device)) return {};
    return isGpu(holder) ? QStringLiteral("GPU\u2194GPU") : QStringLiteral("host\u2194GPU");
}

QString PlacementModel::linkLabel(int tower) const {
    const int64_t bytes = linkBytes(tower);
    if (bytes == 0) return {};
    const QString per = async ? QObject::tr("update") : QObject::tr("step");
    if (gradientBytes != 4)  // the variables down in fp32, the gradients up in bf16
        return QObject::tr("%1 \u2193 %2 \u2191 per %3")
            .arg(formatBytes(double(bytes)), formatBytes(double(bytes / 4 * gradientBytes)), per);
    return QObject::tr("%1 \u2193\u2191 per %2").arg(formatBytes(double(bytes)), per);
}

int PlacementModel::distinctDevices() const {
    // Processes: each reduces its towers first, then the processes meet (one ring among them).
    if (processes > 1) return processes - serverProcesses;
    QSet<QString> devices;
    for (const Tower& t : towers) devices.insert(t.device);
    return int(devices.size());
}

double PlacementModel::ringBytesPerDevice() const {
    const int d = distinctDevices();
    if (links != Links::Ring || d < 2) return 0;
    return 2.0 * (d - 1) / d * double(paramCount) * double(gradientBytes);
}

QString PlacementModel::ringLabel() const {
    if (links != Links::Ring || towers.size() < 2) return {};
    const QString how = averageEvery == 1  ? QObject::tr("average every step")
                        : averageEvery > 1 ? QObject::tr("average every %1 steps").arg(averageEvery)
                                           : QObject::tr("all-reduce");
    const int d = distinctDevices();
    if (d < 2) return QObject::tr("%1 within %2: nothing leaves the device").arg(how, towers[0].device);
    return QObject::tr("%1: %2 %3 %4 (2(D\u22121)/D \u00d7 P \u00d7 %5, D = %6)")
        .arg(how, formatBytes(ringBytesPerDevice()),
             processes > 1             ? QObject::tr("per process")
             : isGpu(towers[0].device) ? QObject::tr("per GPU")
                                       : QObject::tr("per tower"),
             averageEvery > 1 ? QObject::tr("each time") : QObject::tr("per step"))
        .arg(gradientBytes)
        .arg(d);
}

QVector<PlacementModel::DeviceGroup> PlacementModel::sharedDevices() const {
    QVector<DeviceGroup> groups;
    for (int i = 0; i < towers.size();) {
        int j = i + 1;
        while (j < towers.size() && towers[j].device == towers[i].device && towers[j].process == towers[i].process) ++j;
        if (j - i > 1) groups.push_back({towers[i].device, i, j - i});
        i = j;
    }
    return groups;
}

