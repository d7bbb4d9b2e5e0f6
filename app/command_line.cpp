#include "command_line.hpp"

#include <algorithm>

#include "engine/run_folder.hpp"
#include "util/error.hpp"

namespace {

using tb::Error;

void parseRuns(CommandLine& c, const std::vector<std::string>& args) {
    for (size_t i = 1; i < args.size(); ++i) {
        if (args[i] == "--ascending") c.ascending = true;
        else if (args[i] == "--json") c.json = true;
        else if ((args[i] == "--filter" || args[i] == "--sort") && i + 1 < args.size())
            (args[i] == "--filter" ? c.filter : c.sort) = args[++i];
        else throw Error("runs: unknown argument '" + args[i] + "' (see --help)");
    }
}

}  // namespace

CommandLine parseCommandLine(const std::vector<std::string>& argsIn) {
    CommandLine c;
    std::vector<std::string> args = argsIn;
    if (!args.empty() && args[0] == "selftest") {
        if (args.size() > 1) throw Error("selftest takes no arguments, got '" + args[1] + "'");
        c.command = CommandLine::Command::SelfTest;
        return c;
    }
    if (!args.empty() && args[0] == "runs") {
        c.command = CommandLine::Command::Runs;
        parseRuns(c, args);
        return c;
    }
    if (!args.empty() && args[0] == "convert") {
        if (args.size() != 3) throw Error("convert: expected SPEC tfrecord:DIR (e.g. convert idx:mnist tfrecord:mnist-tf)");
        if (!args[2].starts_with("tfrecord:") || args[2].size() == 9)
            throw Error("convert: the target '" + args[2] + "' is not tfrecord:DIR");
        c.command = CommandLine::Command::Convert;
        c.convertSpec = args[1];
        c.convertTarget = args[2].substr(9);
        return c;
    }
    const bool eval = !args.empty() && args[0] == "eval";
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
    // The base settings first, wherever their flag stands, so every other flag overrides
    // them: a config file, or the folder of the run to resume.
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
        if (!a.starts_with("--") || key == "quiet" || std::find(keys.begin(), keys.end(), key) == keys.end())
            throw Error("unknown argument '" + a + "' (see --help)");
        if (i + 1 >= args.size() || args[i + 1].starts_with("--")) throw Error(a + ": needs a value");
        c.config.setFromText(key, args[++i], a);
    }
    if (!eval) {
        try {
            c.config.validate();
        } catch (const Error& e) {
            throw Error(c.config.explain(e.what()));
        }
    }
    return c;
}
