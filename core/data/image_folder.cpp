#include "data/image_folder.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <system_error>
#include <thread>

#include "data/image_codec.hpp"
#include "util/error.hpp"
#include "util/system_text.hpp"

namespace fs = std::filesystem;

namespace tb {
namespace {

struct ImageFile {
    std::string path, name;  // name: the file's own, the first sort key
    int label = 0;
};

bool isImageName(const std::string& name) {
    std::string ext = fs::path(name).extension().string();
    std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char ch) { return char(std::tolower(ch)); });
    return ext == ".png" || ext == ".jpg" || ext == ".jpeg";
}

uint32_t fnv1a(const std::string& s) {
    uint32_t h = 2166136261u;
    for (unsigned char ch : s) h = (h ^ ch) * 16777619u;
    return h;
}

std::vector<std::string> subfolders(const fs::path& dir, const std::string& spec) {
    std::error_code ec;
    std::vector<std::string> names;
    fs::directory_iterator it(dir, ec);
    if (ec) throw Error(spec + ": " + dir.string() + " cannot be listed (" + ec.message() + ")");
    for (const fs::directory_entry& e : it) {
        const std::string n = e.path().filename().string();
        if (!n.starts_with('.') && e.is_directory(ec)) names.push_back(n);
    }
    std::sort(names.begin(), names.end());
    return names;
}

// The images of one class folder, counting the other files in `ignored`.
void listClass(const fs::path& folder, int label, const std::string& spec, std::vector<ImageFile>& out,
               size_t& ignored) {
    std::error_code ec;
    fs::directory_iterator it(folder, ec);
    if (ec) throw Error(spec + ": " + folder.string() + " cannot be listed (" + ec.message() + ")");
    size_t found = 0;
    for (const fs::directory_entry& e : it) {
        const std::string n = e.path().filename().string();
        if (n.starts_with('.')) continue;
        if (!isImageName(n) || e.is_directory(ec)) {
            ++ignored;
            continue;
        }
        out.push_back({e.path().string(), n, label});
        ++found;
    }
    if (found == 0)
        throw Error(spec + ": the class folder " + folder.string() + " holds no .png, .jpg or .jpeg images");
}

void sortImages(std::vector<ImageFile>& files) {
    std::sort(files.begin(), files.end(), [](const ImageFile& a, const ImageFile& b) {
        return a.name != b.name ? a.name < b.name : a.label < b.label;
    });
}

// Decodes `files` into d (shape set) on `threads` threads; each file's fault in `errors`.
void decodeAll(const std::vector<ImageFile>& files, Dataset& d, int threads, const CancelCheck& cancelled,
               std::vector<std::string>& errors) {
    const size_t n = files.size(), per = d.sampleSize();
    d.pixels.assign(n * per, 0);
    d.labels.resize(n);
    errors.assign(n, {});
    std::atomic<size_t> next{0};
    std::atomic<bool> stop{false};
    auto work = [&] {
        for (size_t i; !stop && (i = next++) < n;) {
            if (cancelled && i % 256 == 0 && cancelled()) {
                stop = true;
                return;
            }
            d.labels[i] = files[i].label;
            try {
                imageToSample(readImageFile(files[i].path), d.channels, d.height, d.width, d.pixels.data() + i * per);
            } catch (const Error& e) {
                errors[i] = e.what();
            } catch (const std::bad_alloc&) {
                errors[i] = files[i].path + ": out of memory while decoding it";
            }
        }
    };
    std::vector<std::thread> pool;
    for (int t = 1; t < threads; ++t) pool.emplace_back(work);
    work();
    for (std::thread& t : pool) t.join();
    if (stop) throw Cancelled();
}

// The faulty images out of d (skip) or the first fault as the error.
void dropFaults(Dataset& d, const std::vector<std::string>& errors, bool skip, std::vector<std::string>& skipped) {
    size_t kept = 0;
    const size_t per = d.sampleSize();
    for (size_t i = 0; i < errors.size(); ++i) {
        if (!errors[i].empty()) {
            if (!skip) throw Error(errors[i] + " (--skip-bad-images true leaves such files out)");
            skipped.push_back(errors[i]);
            continue;
        }
        if (kept != i) {
            std::memmove(d.pixels.data() + kept * per, d.pixels.data() + i * per, per);
            d.labels[kept] = d.labels[i];
        }
        ++kept;
    }
    d.pixels.resize(kept * per);
    d.labels.resize(kept);
}

}  // namespace

ImageFolderSet readImageFolder(const std::string& dir, ImageShape shape, bool skipBadImages, int threads,
                               const CancelCheck& cancelled) {
    const std::string spec = "--data folder:" + dir;
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) throw Error(spec + ": not a folder");
    ImageFolderSet set;
    const fs::path root(dir);
    const bool split = fs::is_directory(root / "train", ec) && fs::is_directory(root / "test", ec);
    const std::vector<std::string> classes = subfolders(split ? root / "train" : root, spec);
    if (classes.size() < 2)
        throw Error(spec + ": " + std::to_string(classes.size()) + " class folder" + (classes.size() == 1 ? "" : "s") +
                    " in " + (split ? (root / "train").string() : dir) +
                    "; a classifier needs at least 2 (one subfolder of images per class)");
    std::vector<ImageFile> train, test;
    for (size_t k = 0; k < classes.size(); ++k)
        listClass((split ? root / "train" : root) / classes[k], int(k), spec, train, set.ignoredFiles);
    if (split) {
        for (const std::string& c : subfolders(root / "test", spec)) {
            const auto at = std::find(classes.begin(), classes.end(), c);
            if (at == classes.end())
                throw Error(spec + ": the test class folder '" + c + "' has no training folder of that name in " +
                            (root / "train").string());
            listClass(root / "test" / c, int(at - classes.begin()), spec, test, set.ignoredFiles);
        }
        if (test.empty()) throw Error(spec + ": " + (root / "test").string() + " holds no class folders");
    } else {
        set.splitByHash = true;
        std::vector<ImageFile> all;
        all.swap(train);
        for (ImageFile& f : all)
            (fnv1a(classes[size_t(f.label)] + "/" + f.name) % 10 == 0 ? test : train).push_back(std::move(f));
        if (test.empty() || train.empty())
            throw Error(spec + ": " + std::to_string(all.size()) +
                        " images are too few to split a tenth off for testing (give train/ and test/ folders)");
    }
    sortImages(train);
    sortImages(test);
    if (shape.channels == 0 || shape.height == 0 || shape.width == 0) {
        const Image first = readImageFile(train.front().path);
        shape = {first.channels, first.height, first.width};
    }
    const double bytes = double(train.size() + test.size()) * shape.channels * shape.height * shape.width;
    const double memory = physicalMemoryBytes();
    if (memory > 0 && bytes > memory / 2)
        throw Error(spec + ": " + std::to_string(train.size() + test.size()) + " images of " +
                    std::to_string(shape.channels) + "x" + std::to_string(shape.height) + "x" +
                    std::to_string(shape.width) + " take " + std::to_string(int64_t(bytes / (1 << 20))) +
                    " MiB, more than half this machine's memory: convert them to TFRecord shards "
                    "(towerbench-run convert folder:DIR tfrecord:OUT) and stream those");
    const int pool = threads > 0 ? threads : int(std::max(1u, std::thread::hardware_concurrency()));
    for (auto [files, d] : {std::pair{&train, &set.train}, std::pair{&test, &set.test}}) {
        d->channels = shape.channels;
        d->height = shape.height;
        d->width = shape.width;
        d->numClasses = int(classes.size());
        d->classNames = classes;
        std::vector<std::string> errors;
        decodeAll(*files, *d, pool, cancelled, errors);
        dropFaults(*d, errors, skipBadImages, set.skipped);
        if (d->size() == 0) throw Error(spec + ": every image of a split was skipped as unreadable");
    }
    return set;
}

void writeImageFolder(const Dataset& train, const Dataset& test, const std::string& dir, int jpegQuality) {
    if (!train.isImage() || !test.isImage())
        throw Error("convert: " + train.name + " is not an image set (only images go to image folders)");
    if (train.channels != 1 && train.channels != 3)
        throw Error("convert: " + train.name + " has " + std::to_string(train.channels) +
                    " channels; image files hold 1 (gray) or 3 (RGB)");
    const int classes = std::max(train.numClasses, test.numClasses);
    const int digits = int(std::to_string(std::max(0, classes - 1)).size());
    auto pad = [](size_t v, int width) {
        std::string s = std::to_string(v);
        return std::string(size_t(std::max(0, width - int(s.size()))), '0') + s;
    };
    std::vector<std::string> folders;
    for (int k = 0; k < classes; ++k) {
        std::string name = k < int(train.classNames.size()) ? train.classNames[size_t(k)] : "class";
        std::replace(name.begin(), name.end(), '/', '_');
        folders.push_back(pad(size_t(k), digits) + "-" + name);
    }
    for (const auto& [split, d] : {std::pair{"train", &train}, std::pair{"test", &test}}) {
        const int fileDigits = int(std::to_string(d->size()).size());
        std::vector<bool> made(folders.size(), false);  // a class without images gets no folder (a reader refuses empty ones)
        const size_t plane = size_t(d->height) * size_t(d->width);
        Image im;
        im.height = d->height;
        im.width = d->width;
        im.channels = d->channels;
        im.pixels.resize(plane * size_t(d->channels));
        for (size_t i = 0; i < d->size(); ++i) {
            const uint8_t* src = d->pixels.data() + i * d->sampleSize();
            for (size_t p = 0; p < plane; ++p)
                for (int ch = 0; ch < d->channels; ++ch) im.pixels[p * size_t(d->channels) + size_t(ch)] = src[size_t(ch) * plane + p];
            const std::string bytes = jpegQuality > 0 ? encodeJpeg(im, jpegQuality) : encodePng(im);
            const size_t k = size_t(d->labels[i]);
            if (!made[k]) {
                std::error_code ec;
                fs::create_directories(fs::path(dir) / split / folders[k], ec);
                if (ec) throw Error("convert: cannot create " + (fs::path(dir) / split / folders[k]).string() + " (" + ec.message() + ")");
                made[k] = true;
            }
            const fs::path path = fs::path(dir) / split / folders[k] /
                                  (pad(i, fileDigits) + (jpegQuality > 0 ? ".jpg" : ".png"));
            std::ofstream out(path, std::ios::binary);
            out.write(bytes.data(), std::streamsize(bytes.size()));
            if (!out) throw Error("convert: cannot write " + path.string() + " (" + std::strerror(errno) + ")");
        }
    }
}

}  // namespace tb
