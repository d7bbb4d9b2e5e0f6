#include "command_line.hpp"

#include <algorithm>
#include <optional>
#include <string_view>

#include "engine/run_folder.hpp"
#include "util/error.hpp"
#include "util/nearest_name.hpp"

namespace {

using tb::Error;

void parseRuns(CommandLine& c, const std::vector<std::string>& args) {
    c.command = CommandLine::Command::Runs;
    for (size_t i = 1; i < args.size(); ++i) {
        if (args[i] == "--ascending") c.ascending = true;
        else if (args[i] == "--json") c.json = true;
        else if ((args[i] == "--filter" || args[i] == "--sort") && i + 1 < args.size())
            (args[i] == "--filter" ? c.filter : c.sort) = args[++i];
        else throw Error("runs: unknown argument '" + args[i] + "' (see --help)");
    }
}

std::vector<std::string> splitCommas(const std::string& flag, const std::string& text) {
    std::vector<std::string> out(1);
    for (char ch : text) {
        if (ch == ',') out.emplace_back();
        else out.back().push_back(ch);
    }
    for (const std::string& item : out)
        if (item.empty()) throw Error(flag + ": '" + text + "' has an empty item");
    return out;
}

int wholeNumber(const std::string& flag, const std::string& text, int lo, int hi) {
    const bool digits = !text.empty() && text.size() <= 9 && std::all_of(text.begin(), text.end(), ::isdigit);
    const long v = digits ? std::stol(text) : -1;
    if (v < lo || v > hi)
        throw Error(flag + ": '" + text + "' is not a whole number from " + std::to_string(lo) + " to " + std::to_string(hi));
    return int(v);
}

std::vector<int> towerCounts(const std::string& flag, const std::string& text) {
    std::vector<int> out;
    for (const std::string& item : splitCommas(flag, text)) out.push_back(wholeNumber(flag, item, 1, 4096));
    return out;
}

// The whole of text as a number, or nullopt ("2x", "", "1e999" are not).
std::optional<double> wholeDouble(const std::string& text) {
    try {
        size_t used = 0;
        const double v = std::stod(text, &used);
        if (used == text.size()) return v;
    } catch (const std::exception&) {
    }
    return std::nullopt;
}

// predict --slow T=F,...: tower T is F times slower.
void parseSlow(CommandLine& c, const std::string& v) {
    for (const std::string& item : splitCommas("--slow", v)) {
        const size_t eq = item.find('=');
        if (eq == std::string::npos) throw Error("--slow: '" + item + "' is not TOWER=FACTOR");
        const int tower = wholeNumber("--slow", item.substr(0, eq), 0, 4095);
        const double factor = wholeDouble(item.substr(eq + 1)).value_or(0);
        if (!(factor >= 1 && factor <= 1000)) throw Error("--slow: the factor in '" + item + "' must be from 1 to 1000");
        c.slow.emplace_back(tower, factor);
    }
}

// predict --assume KEY=VALUE,...: the model's assumptions (Assumptions::set names a bad key).
void parseAssumptions(CommandLine& c, const std::string& v) {
    for (const std::string& item : splitCommas("--assume", v)) {
        const size_t eq = item.find('=');
        if (eq == std::string::npos) throw Error("--assume: '" + item + "' is not KEY=VALUE");
        const std::optional<double> value = wholeDouble(item.substr(eq + 1));
        if (!value) throw Error("--assume: '" + item.substr(eq + 1) + "' is not a number");
        c.assumptions.set(item.substr(0, eq), *value);
        c.serialShareGiven |= item.substr(0, eq) == "serial_share";
    }
}

// predict SWEEP_DIR [flags]: the scenario's flags; the sweep's own where one is not given.
void parsePredict(CommandLine& c, const std::vector<std::string>& args) {
    if (args.size() < 2 || args[1].starts_with("--")) throw Error("predict: needs a scaling sweep's folder (towerbench-run scale)");
    c.command = CommandLine::Command::Predict;
    c.predictFrom = args[1];
    for (size_t i = 2; i < args.size(); ++i) {
        const std::string& a = args[i];
        if (a == "--json") {
            c.json = true;
            continue;
        }
        if (i + 1 >= args.size() || args[i + 1].starts_with("--")) throw Error(a + ": needs a value (see --help)");
        const std::string& v = args[++i];
        if (a == "--from") c.calibrationPoint = wholeNumber(a, v, 1, 100000);
        else if (a == "--towers") c.predictTowers = towerCounts(a, v);
        else if (a == "--strategies") {
            c.predictStrategies = splitCommas(a, v);
            for (const std::string& st : c.predictStrategies) {
                tb::RunConfig probe;
                tb::applyStrategy(probe, st);  // names the flag --sweep-strategies: say which one
            }
        } else if (a == "--threads-per-tower") c.scenario.threadsPerTower = wholeNumber(a, v, 1, 4096), c.threadsGiven = true;
        else if (a == "--cores") c.scenario.cores = wholeNumber(a, v, 1, 100000), c.coresGiven = true;
        else if (a == "--batch-per-tower") c.scenario.batchPerTower = wholeNumber(a, v, 1, tb::RunConfig::kMaxBatch), c.batchGiven = true;
        else if (a == "--ps-shards") c.scenario.psShards = wholeNumber(a, v, 1, 4096);
        else if (a == "--machines") c.scenario.machines = wholeNumber(a, v, 1, 4096);
        else if (a == "--device") c.scenario.device = tb::parseProcessor(v, a);
        else if (a == "--link") c.scenario.link = tb::parseLink(v, a);
        else if (a == "--network") c.scenario.network = tb::parseLink(v, a);
        else if (a == "--slow") parseSlow(c, v);
        else if (a == "--assume") parseAssumptions(c, v);
        else throw Error("predict: unknown argument '" + a + "' (see --help)");
    }
    if (c.scenario.device && c.scenario.link.name.empty()) c.scenario.link = tb::parseLink("pcie4", "--link");
    if (c.scenario.machines > 1 && c.scenario.network.name.empty()) c.scenario.network = tb::parseLink("100gbe", "--network");
    if (!c.scenario.device && (c.scenario.machines > 1 || !c.scenario.link.name.empty()))
        throw Error("--link/--machines: describe the towers' device too (--device h100, ...)");
}

void parseSelfTest(CommandLine& c, const std::vector<std::string>& args) {
    if (args.size() > 1) throw Error("selftest takes no arguments, got '" + args[1] + "'");
    c.command = CommandLine::Command::SelfTest;
}

void parseModels(CommandLine& c, const std::vector<std::string>& args) {
    c.command = CommandLine::Command::Models;
    for (size_t i = 1; i < args.size(); ++i) {
        if (args[i] != "--json") throw Error("models: unknown argument '" + args[i] + "' (models takes --json alone)");
        c.json = true;
    }
}

// convert SPEC tfrecord:DIR [--shards N] [--repeat R] | SPEC folder:DIR [--jpeg-quality Q]
void parseConvert(CommandLine& c, const std::vector<std::string>& args) {
    if (args.size() < 3 || args.size() % 2 == 0)
        throw Error("convert: expected SPEC tfrecord:DIR [--shards N] [--repeat R] or SPEC folder:DIR "
                    "[--jpeg-quality Q] (e.g. convert idx:mnist tfrecord:mnist-tf)");
    const bool toFolder = args[2].starts_with("folder:");
    if ((!args[2].starts_with("tfrecord:") && !toFolder) || args[2].size() == (toFolder ? 7u : 9u))
        throw Error("convert: the target '" + args[2] + "' is not tfrecord:DIR or folder:DIR");
    for (size_t i = 3; i + 1 < args.size(); i += 2) {
        const std::string& a = args[i];
        if (a == "--jpeg-quality" && toFolder) c.jpegQuality = wholeNumber(a, args[i + 1], 1, 100);
        else if (a == "--shards" && !toFolder) c.shards = wholeNumber(a, args[i + 1], 1, 4096);
        else if (a == "--repeat" && !toFolder) c.repeat = wholeNumber(a, args[i + 1], 1, 10000);
        else
            throw Error("convert: '" + a + "' is not an option of a " + (toFolder ? "folder:DIR" : "tfrecord:DIR") +
                        " target (" + (toFolder ? "--jpeg-quality Q" : "--shards N, --repeat R") + ")");
    }
    c.command = CommandLine::Command::Convert;
    c.convertSpec = args[1];
    c.convertTarget = args[2];
}

// export RUN_DIR|CHECKPOINT --onnx FILE
void parseExport(CommandLine& c, const std::vector<std::string>& args) {
    c.command = CommandLine::Command::Export;
    if (args.size() < 2 || args[1].starts_with("--")) throw Error("export: needs a run folder or a checkpoint file");
    c.evalTarget = args[1];
    for (size_t i = 2; i < args.size(); ++i) {
        if (args[i] != "--onnx") throw Error("export: unknown argument '" + args[i] + "' (export RUN_DIR --onnx FILE)");
        if (i + 1 >= args.size() || args[i + 1].starts_with("--")) throw Error("--onnx: needs a file name");
        c.onnxFile = args[++i];
    }
    if (c.onnxFile.empty()) throw Error("export: give --onnx FILE, the file to write");
}

// classify RUN_DIR|CHECKPOINT IMAGE... [--top K] [--threads N]
void parseClassify(CommandLine& c, const std::vector<std::string>& args) {
    c.command = CommandLine::Command::Classify;
    if (args.size() < 2 || args[1].starts_with("--")) throw Error("classify: needs a run folder or a checkpoint file");
    c.evalTarget = args[1];
    for (size_t i = 2; i < args.size(); ++i) {
        const std::string& a = args[i];
        if (a == "--top" || a == "--threads") {
            if (i + 1 >= args.size()) throw Error(a + ": needs a value");
            (a == "--top" ? c.top : c.config.threads) = wholeNumber(a, args[++i], a == "--top" ? 1 : 0, 1 << 16);
        } else if (a.starts_with("--")) {
            throw Error("classify: unknown argument '" + a + "' (--top K, --threads N)");
        } else {
            c.images.push_back(a);
        }
    }
    if (c.images.empty()) throw Error("classify: give one or more image files after " + c.evalTarget);
}

// scale [train flags] [--sweep-*]: takes the sweep's own flags and returns the rest, the base
// run's.
std::vector<std::string> parseScale(CommandLine& c, const std::vector<std::string>& args) {
    c.command = CommandLine::Command::Scale;
    std::vector<std::string> rest;
    for (size_t i = 1; i < args.size(); ++i) {
        const std::string& a = args[i];
        if (!a.starts_with("--sweep-")) {
            rest.push_back(a);
            continue;
        }
        if (i + 1 >= args.size() || args[i + 1].starts_with("--")) throw Error(a + ": needs a value");
        const std::string& v = args[++i];
        if (a == "--sweep-towers") c.sweep.towers = towerCounts(a, v);
        else if (a == "--sweep-strategies") c.sweep.strategies = splitCommas(a, v);
        else if (a == "--sweep-warmup") c.sweep.warmup = wholeNumber(a, v, 0, 100000);
        else if (a == "--sweep-steps") c.sweep.measure = wholeNumber(a, v, 2, 1000000);
        else throw Error("scale: unknown argument '" + a + "' (--sweep-towers, --sweep-strategies, --sweep-warmup, --sweep-steps)");
    }
    c.sweep.validate();
    // --towers stays: its kind (cpu:0, gpu:0, gpu:0*2) is the sweep's (sweepTowers).
    for (const char* flag : {"--resume", "--steps", "--epochs", "--metrics", "--slow"})
        if (std::find(rest.begin(), rest.end(), flag) != rest.end())
            throw Error(std::string("scale: ") + flag + " does not apply (the sweep sets it for each point)");
    return rest;
}

// The base settings, wherever their flag stands, so every other flag overrides them: a config
// file (--config), or the folder of the run to resume (--resume); and --run-dir.
void readBaseSettings(CommandLine& c, const std::vector<std::string>& args, bool eval) {
    std::string configFile;
    for (size_t i = 0; i < args.size(); ++i) {
        if (args[i] != "--config" && args[i] != "--resume" && args[i] != "--run-dir") continue;
        if (i + 1 >= args.size() || args[i + 1].starts_with("--"))
            throw Error(args[i] + (args[i] == "--config" ? ": needs a file name" : ": needs a folder"));
        (args[i] == "--config" ? configFile : args[i] == "--resume" ? c.storage.resumeDir : c.storage.runDir) = args[i + 1];
    }
    if (eval && (!c.storage.resumeDir.empty() || !c.storage.runDir.empty()))
        throw Error("eval: --resume and --run-dir do not apply");
    if (!c.storage.resumeDir.empty()) {
        if (!c.storage.runDir.empty()) throw Error("--run-dir: a resumed run stays in its own folder (--resume)");
        if (!configFile.empty()) throw Error("--config: a resumed run keeps its own settings (--resume)");
        c.config = tb::RunFolder::resumeConfig(c.storage.resumeDir);
    }
    if (!configFile.empty()) {
        try {
            c.config.loadFile(configFile);
        } catch (const Error& e) {
            throw Error(std::string("--config: ") + e.what());
        }
    }
}

// Every other flag sets its RunConfig key over the base settings.
void readRunFlags(CommandLine& c, const std::vector<std::string>& args) {
    for (size_t i = 0; i < args.size(); ++i) {
        const std::string& a = args[i];
        if (a == "--config" || a == "--resume" || a == "--run-dir") {
            ++i;
            continue;
        }
        c.dataGiven |= a == "--data";
        if (a == "--quiet") {
            c.config.quiet = true;
            continue;
        }
        const std::string key = tb::RunConfig::flagToKey(a);
        const auto& keys = tb::RunConfig::keys();
        if (!a.starts_with("--") || key == "quiet" || std::find(keys.begin(), keys.end(), key) == keys.end()) {
            // The flag a typo meant ("--bacth": "--batch"), among every flag a run takes.
            std::vector<std::string> flags{"--quiet", "--config", "--resume", "--run-dir"};
            for (const std::string& k : keys) flags.push_back(tb::RunConfig::keyToFlag(k));
            const std::string meant = tb::didYouMean(a, flags);
            throw Error("unknown argument '" + a + "'" + (meant.empty() ? " (see --help)" : meant));
        }
        if (i + 1 >= args.size() || args[i + 1].starts_with("--")) throw Error(a + ": needs a value");
        c.config.setFromText(key, args[++i], a);
    }
}

// The commands whose arguments are theirs alone (no run flags follow).
using Parser = void (*)(CommandLine&, const std::vector<std::string>&);
constexpr std::pair<std::string_view, Parser> kOwnCommands[] = {
    {"selftest", parseSelfTest}, {"models", parseModels},   {"runs", parseRuns},         {"convert", parseConvert},
    {"export", parseExport},     {"classify", parseClassify}, {"predict", parsePredict},
};

}  // namespace

// train [flags] | eval TARGET [flags] | scale [flags] [--sweep-*] | one of kOwnCommands.
CommandLine parseCommandLine(const std::vector<std::string>& argsIn) {
    CommandLine c;
    std::vector<std::string> args = argsIn;
    if (!args.empty()) {
        for (const auto& [name, parse] : kOwnCommands) {
            if (args[0] != name) continue;
            parse(c, args);
            return c;
        }
        if (args[0] == "scale") args = parseScale(c, args);
    }
    const bool eval = c.command == CommandLine::Command::Train && !args.empty() && args[0] == "eval";
    if (eval) {
        if (args.size() < 2 || args[1].starts_with("--")) throw Error("eval: needs a run folder or a checkpoint file");
        c.command = CommandLine::Command::Eval;
        c.evalTarget = args[1];
        args.erase(args.begin(), args.begin() + 2);
    }
    if (std::find_if(args.begin(), args.end(), [](const std::string& a) { return a == "--help" || a == "-h"; }) !=
        args.end()) {
        c.command = CommandLine::Command::Help;
        return c;
    }
    readBaseSettings(c, args, eval);
    readRunFlags(c, args);
    if (!eval) {
        try {
            c.config.validate();
        } catch (const Error& e) {
            throw Error(c.config.explain(e.what()));
        }
    }
    return c;
}
