#!/usr/bin/env python3
"""The bad-input campaign (issue 13): generated malformed files, configs, models and flags fed to
towerbench-run, each case with the outcome it must have. Run it with one command:

    python3 tests/bad_input/campaign.py build/app/towerbench-run [--table docs/bad-input-campaign.md]

Every case runs in a scratch folder with a 60 s limit and 4 GiB of address space, as many at once
as there are cores (--jobs). Outcomes:
  refused          exit 2, one printable line on stderr that names the file or flag at fault,
                   in the program's words (no library exception text), nothing on stdout
  ran              exit 0 and a JSON summary as the last line of stdout (allowed only where the
                   case says the input may be valid, e.g. a flipped pixel)
  silent success   exit 0 where the input is garbage
  bad message      exit 2, but the line is missing, several, unprintable, or names nothing
  crash            a signal or any other exit status
  hang             over 60 s
  memory           'out of memory', or over 1 GiB resident
The exit status is 1 if any case ends in one of the last five."""
import argparse, collections, concurrent.futures, gzip, json, os, re, resource, shutil, signal, struct, subprocess, sys, zlib, \
    tempfile, threading, time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SLICE = os.path.join(ROOT, "samples/fashion-mnist-slice")
TIMEOUT_S, RSS_LIMIT_KB, AS_LIMIT = 60, 1 << 20, 4 << 30
LIBRARY_TEXT = re.compile(r"json\.exception|what\(\)|basic_string|std::|terminate called|\bstoi\b|\bstod\b|"
                          r"vector::|bad_alloc|internal error", re.I)

Case = collections.namedtuple("Case", "group name args names may_run needs_limit")


class Campaign:
    def __init__(self, work):
        self.work, self.cases, self.n = work, [], 0

    def path(self, *parts):
        p = os.path.join(self.work, *parts)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        return p

    def folder(self, stem):
        self.n += 1
        d = self.path("c%04d-%s" % (self.n, stem))
        os.makedirs(d)
        return d

    def add(self, group, name, args, names, may_run=False, needs_limit=False):
        self.cases.append(Case(group, name, list(args), list(names), may_run, needs_limit))


def write(path, data):
    with open(path, "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def read_gz(path):
    with gzip.open(path) as f:
        return f.read()


# ------------------------------------------------------------------ IDX (--data idx:DIR)
IDX_NAMES = ["train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"]
RUN_MLP = ["--model", "mlp", "--steps", "1", "--batch", "4", "--validation", "4", "--threads", "1", "--quiet"]


def idx_base():
    images, labels = read_gz(SLICE + "/train-images-idx3-ubyte.gz"), read_gz(SLICE + "/train-labels-idx1-ubyte.gz")
    img = lambda n, off: struct.pack(">IIII", 0x803, n, 28, 28) + images[16 + off * 784:16 + (off + n) * 784]
    lab = lambda n, off: struct.pack(">II", 0x801, n) + labels[8 + off:8 + off + n]
    return [img(20, 0), lab(20, 0), img(10, 20), lab(10, 20)]


def idx_cases(c):
    base = idx_base()

    def case(name, files, may_run=False, gz=(), culprit=None):
        d = c.folder("idx")
        for i, data in enumerate(files):
            if data is None:
                continue
            fname = IDX_NAMES[i] + (".gz" if i in gz else "")
            write(os.path.join(d, fname), gzip.compress(data, mtime=0) if i in gz and not isinstance(data, GzRaw) else data)
        names = ["--data", d] if culprit is None else [os.path.join(d, IDX_NAMES[culprit])]
        c.add("IDX files", name, RUN_MLP + ["--data", "idx:" + d], names, may_run)

    case("valid (control)", base, may_run=True)
    for i in range(4):
        for cut in sorted({0, 1, 3, 4, 7, 8, 11, 12, 15, 16, 17, 100, len(base[i]) - 1}):
            if cut >= len(base[i]):
                continue
            files = list(base)
            files[i] = base[i][:cut]
            case("%s cut at %d bytes" % (IDX_NAMES[i], cut), files, culprit=i)
        files = list(base)
        files[i] = base[i] + b"\0"
        case("%s with a byte after the data" % IDX_NAMES[i], files, culprit=i)
        files = list(base)
        files[i] = None
        case("%s missing" % IDX_NAMES[i], files)
    # gzip: cut members, trailing garbage, damaged trailer and data
    for i in range(4):
        z = gzip.compress(base[i], mtime=0)
        for cut in sorted({1, 2, 9, 10, 20, len(z) // 2, len(z) - 8, len(z) - 4, len(z) - 1}):
            files = list(base)
            files[i] = GzRaw(z[:cut])
            case("%s.gz cut at %d of %d bytes" % (IDX_NAMES[i], cut, len(z)), files, gz=(i,), culprit=i)
        for tail in (b"\0", b"garbage!!", b"\x1f"):
            files = list(base)
            files[i] = GzRaw(z + tail)
            case("%s.gz followed by %r" % (IDX_NAMES[i], tail), files, gz=(i,), culprit=i)
        for pos, label in ((len(z) - 8, "CRC-32"), (len(z) - 4, "length"), (len(z) // 2, "deflate data")):
            files = list(base)
            b = bytearray(z)
            b[pos] ^= 0x55
            files[i] = GzRaw(bytes(b))
            case("%s.gz with its %s damaged" % (IDX_NAMES[i], label), files, gz=(i,), culprit=i)
    # header fields
    for i in (0, 2):
        for magic in (0x801, 0, 0xFFFFFFFF, 0x903, 0xD03, 0x804, 0x802):
            files = list(base)
            files[i] = struct.pack(">I", magic) + base[i][4:]
            case("%s magic 0x%08x" % (IDX_NAMES[i], magic), files, culprit=i)
        n = 20 if i == 0 else 10
        for count in (0, n - 1, n + 1, 0x7FFFFFFF, 0xFFFFFFFF):
            files = list(base)
            files[i] = base[i][:4] + struct.pack(">I", count) + base[i][8:]
            case("%s count %d (holds %d)" % (IDX_NAMES[i], count, n), files)
        for rows, cols in ((0, 28), (28, 0), (1, 784), (27, 28), (65535, 65535), (0xFFFFFFFF, 0xFFFFFFFF), (14, 56)):
            files = list(base)
            files[i] = base[i][:8] + struct.pack(">II", rows, cols) + base[i][16:]
            case("%s %dx%d (holds 28x28)" % (IDX_NAMES[i], rows, cols), files, may_run=(rows * cols == 784 and rows != 28))
    for i in (1, 3):
        for magic in (0x803, 0, 0xFFFFFFFF, 0x901):
            files = list(base)
            files[i] = struct.pack(">I", magic) + base[i][4:]
            case("%s magic 0x%08x" % (IDX_NAMES[i], magic), files, culprit=i)
        for count in (0, 9, 21, 0xFFFFFFFF):
            files = list(base)
            files[i] = base[i][:4] + struct.pack(">I", count) + base[i][8:]
            case("%s count %d" % (IDX_NAMES[i], count), files)
        for value in (10, 11, 127, 255):
            files = list(base)
            b = bytearray(base[i])
            b[8] = value
            files[i] = bytes(b)
            case("%s a label %d (10 classes)" % (IDX_NAMES[i], value), files)
    for i in range(4):
        files = list(base)
        files[i] = b""
        case("%s empty" % IDX_NAMES[i], files, culprit=i)
    files = list(base)
    b = bytearray(base[0])
    b[500] ^= 0xFF
    files[0] = bytes(b)
    case("a pixel flipped (still valid)", files, may_run=True)
    d = c.folder("idx")
    os.makedirs(os.path.join(d, IDX_NAMES[0]))
    for i in range(1, 4):
        write(os.path.join(d, IDX_NAMES[i]), base[i])
    c.add("IDX files", "a folder named like the images file", RUN_MLP + ["--data", "idx:" + d], [d])


class GzRaw(bytes):
    """Bytes already in gzip form (written as they are)."""


# ------------------------------------------------------------------ CIFAR-10 (--data cifar10:DIR)
def cifar_cases(c):
    model = c.path("models", "cifar_tiny.json")
    write(model, json.dumps({"name": "cifar_tiny", "input": [3, 24, 24],
                             "layers": [{"type": "flatten"}, {"type": "dense", "units": 10}]}))
    rec = lambda label, seed: bytes([label]) + bytes((seed * 37 + k * 11) % 256 for k in range(3072))
    names = ["test_batch.bin"] + ["data_batch_%d.bin" % k for k in range(1, 6)]
    base = [rec(k % 10, k) + rec((k + 3) % 10, k + 1) for k in range(6)]
    run = ["--model", model, "--steps", "1", "--batch", "4", "--validation", "2", "--threads", "1", "--quiet"]

    def case(name, files, may_run=False, culprit=None):
        d = c.folder("cifar")
        for n, data in zip(names, files):
            if data is not None:
                write(os.path.join(d, n), data)
        c.add("CIFAR-10 files", name, run + ["--data", "cifar10:" + d],
              [os.path.join(d, names[culprit])] if culprit is not None else ["--data", d], may_run)

    case("valid (control)", base, may_run=True)
    for i in range(6):
        for size in (0, 1, 3072, 3074, 6145):
            files = list(base)
            files[i] = (base[i] * 2)[:size]
            case("%s of %d bytes" % (names[i], size), files, culprit=i)
        files = list(base)
        files[i] = None
        case("%s missing" % names[i], files)
        for label in (10, 255):
            files = list(base)
            files[i] = bytes([label]) + base[i][1:]
            case("%s a label %d" % (names[i], label), files)


# ------------------------------------------------------------------ TFRecord (--data tfrecord:DIR)
def tfrecord_cases(c, binary):
    src = c.folder("idxsrc")
    for n, data in zip(IDX_NAMES, idx_base()):
        write(os.path.join(src, n), data)
    tf = c.folder("tfbase")
    subprocess.run([binary, "convert", "idx:" + src, "tfrecord:" + tf], check=True, stdout=subprocess.DEVNULL)
    files = {n: open(os.path.join(tf, n), "rb").read() for n in ("train.tfrecords", "test.tfrecords")}

    def case(name, changed, may_run=False, features=None, culprit=None, stream=False):
        d = c.folder("tf")
        for n, data in files.items():
            write(os.path.join(d, n), changed.get(n, data))
        args = RUN_MLP + ["--data", "tfrecord:" + d] + (["--tfrecord-features", features] if features is not None else [])
        if stream:
            args += ["--stream", "true"]
        c.add("TFRecord files" + (", streamed" if stream else ""), name, args,
              [os.path.join(d, culprit)] if culprit else ["--data", d, "--tfrecord-features"], may_run)

    case("valid (control)", {}, may_run=True)
    for n, data in files.items():
        record = 16 + struct.unpack("<Q", data[:8])[0]  # the records are all this long
        for cut in sorted({0, 1, 8, 11, 12, 13, 40, len(data) // 2, len(data) - 4, len(data) - 1}):
            # Cut between two records, the file is a valid shorter one (TFRecord keeps no count).
            for stream in (False, True):  # (the train file streamed: the open pass finds the fault)
                case("%s cut at %d bytes" % (n, cut), {n: data[:cut]}, culprit=n if cut else None,
                     may_run=cut > 0 and cut % record == 0, stream=stream)
        for pos, what in ((0, "length"), (8, "length CRC"), (12, "record data"), (len(data) - 1, "last data CRC")):
            b = bytearray(data)
            b[pos] ^= 0x5A
            for stream in (False, True):
                case("%s with its %s damaged" % (n, what), {n: bytes(b)}, culprit=n, stream=stream)
        for stream in (False, True):
            case("%s claiming a 2^64-1 byte record" % n, {n: b"\xff" * 8 + data[8:]}, culprit=n, stream=stream)
            case("%s followed by garbage" % n, {n: data + b"garbage"}, culprit=n, stream=stream)
    for f in ("image=nope", "label=nope", "bogus", "image=", "x=y", "image=label,label=image", "height=label"):
        case("--tfrecord-features %s" % f, {}, features=f)
    # A shard larger than half the machine's memory (a sparse file: no disk used): held, refused
    # before any of it is read, not read until memory runs out; streamed (what auto does with it),
    # its first record's framing refused, naming it.
    d = c.folder("tf")
    for n, data in files.items():
        write(os.path.join(d, n), data)
    memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    huge = os.path.join(d, "train-huge.tfrecords")
    with open(huge, "wb") as f:
        f.truncate(memory * 6 // 10)
    c.add("TFRecord files", "a sparse shard of 60% of the machine's memory, held",
          RUN_MLP + ["--data", "tfrecord:" + d, "--stream", "false"], ["more than half this machine's memory", "--stream"])
    c.add("TFRecord files", "a sparse shard of 60% of the machine's memory (auto: streamed)",
          RUN_MLP + ["--data", "tfrecord:" + d], [huge, "record 0"])
    c.add("TFRecord files, streamed", "--stream for a set that is not TFRecord files",
          RUN_MLP + ["--stream", "true"], ["--stream", "tfrecord:DIR"])


# ------------------------------------------------------------------ image folders (--data folder:DIR)
def folder_cases(c, binary):
    src = c.folder("idxsrc")
    for n, data in zip(IDX_NAMES, idx_base()):
        write(os.path.join(src, n), data)
    bases = {}
    for fmt, extra in (("png", []), ("jpeg", ["--jpeg-quality", "90"])):
        d = c.folder("imgbase-" + fmt)
        subprocess.run([binary, "convert", "idx:" + src, "folder:" + d] + extra, check=True, stdout=subprocess.DEVNULL)
        files = {os.path.relpath(os.path.join(r, f), d): open(os.path.join(r, f), "rb").read()
                 for r, _, fs in os.walk(d) for f in fs}
        # The slice's 20 training images miss some classes its test images have: those test images out.
        trained = {k.split("/")[1] for k in files if k.startswith("train/")}
        bases[fmt] = {k: v for k, v in files.items() if k.split("/")[1] in trained}

    def case(name, fmt, changed=None, removed=(), culprit=None, names=None, may_run=False, extra=()):
        d = c.folder("img")
        for rel, data in bases[fmt].items():
            if not any(rel.startswith(r) for r in removed):
                write(c.path(d, rel), changed.get(rel, data) if changed else data)
        for rel, data in (changed or {}).items():
            if rel not in bases[fmt]:
                write(c.path(d, rel), data)
        for r in removed:
            if r.endswith("/"):
                os.makedirs(os.path.join(d, r), exist_ok=True)  # the folder stays, emptied
        args = ["--model", "mlp", "--steps", "1", "--batch", "4", "--validation", "4", "--threads", "1", "--quiet",
                "--data", "folder:" + d] + list(extra)
        c.add("image folders", "%s: %s" % (fmt, name), args,
              [os.path.join(d, culprit)] if culprit else (names or ["--data", d]), may_run)

    for fmt in ("png", "jpeg"):
        files = sorted(k for k in bases[fmt] if k.startswith("train/"))
        first = files[0]
        data = bases[fmt][first]
        case("valid (control)", fmt, may_run=True)
        for cut in sorted({0, 1, 7, 16, 30, len(data) // 2, len(data) - 2}):
            case("%s cut at %d bytes" % (first, cut), fmt, {first: data[:cut]}, culprit=first)
        for pos in (0, 3, 12, 20, len(data) // 2):
            b = bytearray(data)
            b[pos] ^= 0x5A
            # A flipped byte inside compressed data may still decode: then the run trains.
            case("%s with byte %d damaged" % (first, pos), fmt, {first: bytes(b)}, culprit=first, may_run=fmt == "jpeg" and pos >= 4)
        case("%s replaced by text" % first, fmt, {first: b"not an image at all"}, culprit=first)
        case("a bad image skipped with --skip-bad-images", fmt, {first: data[:20]}, may_run=True,
             extra=["--skip-bad-images", "true"])
        cls = first.split("/")[1]
        case("class folder %s emptied" % cls, fmt, removed=["train/%s/" % cls], names=["train/" + cls, "no .png"])
        test_cls = sorted({k.split("/")[1] for k in bases[fmt] if k.startswith("test/")})[0]
        case("a test class without a training folder", fmt, {"test/zz-unknown/1.png": data},
             names=["zz-unknown", "no training folder"])
        only = sorted({k.split("/")[1] for k in files})[0]
        case("one class only", fmt, removed=[k for k in bases[fmt] if not k.startswith("train/" + only + "/") and k.startswith("train/")],
             names=["1 class folder"])
    # A PNG header claiming 2^31-1 x 2^31-1 pixels: refused from the header, nothing allocated.
    png = bases["png"][sorted(k for k in bases["png"] if k.startswith("train/"))[0]]
    huge = bytearray(png)
    huge[16:24] = struct.pack(">II", 0x7FFFFFFF, 0x7FFFFFFF)
    huge[29:33] = struct.pack(">I", zlib.crc32(bytes(huge[12:29])) & 0xFFFFFFFF)
    first = sorted(k for k in bases["png"] if k.startswith("train/"))[0]
    case("%s claiming 2^31-1 x 2^31-1 pixels" % first, "png", {first: bytes(huge)}, culprit=first)


# ------------------------------------------------------------------ checkpoints and run folders
def checkpoint_cases(c, binary):
    runs = c.folder("runs")
    run = os.path.join(runs, "base")
    env = dict(os.environ, TOWERBENCH_RUNS_DIR=runs, OMP_NUM_THREADS="1")
    subprocess.run([binary, "--model", "tiny_mlp", "--data", "synthetic:blobs", "--steps", "4", "--checkpoint-every", "2",
                    "--run-dir", run, "--quiet", "--threads", "1"], env=env, check=True, stdout=subprocess.DEVNULL)
    ckpt_dir = os.path.join(run, "checkpoints")
    newest = sorted(f for f in os.listdir(ckpt_dir) if f.startswith("step-"))[-1]
    good = open(os.path.join(ckpt_dir, newest), "rb").read()
    hlen = struct.unpack("<Q", good[:8])[0]
    header = json.loads(good[8:8 + hlen])

    def with_header(h):
        text = json.dumps(h).encode()
        text += b" " * (-len(text) % 8)
        return struct.pack("<Q", len(text)) + text + good[8 + hlen:]

    mutations = [("valid (control)", good, True)]
    for cut in (0, 4, 8, 9, hlen // 2, 8 + hlen, 8 + hlen + 4, len(good) - 1):
        mutations.append(("cut at %d of %d bytes" % (cut, len(good)), good[:cut], False))
    for value in (0, 7, hlen + 1, len(good), 1 << 40, (1 << 64) - 1):
        mutations.append(("header length %d" % value, struct.pack("<Q", value) + good[8:], False))
    mutations.append(("one more byte at the end", good + b"\0", False))
    b = bytearray(good)
    b[8] = ord("[")
    mutations.append(("header not an object", bytes(b), False))
    tensor = next(k for k in header if k != "__metadata__")
    for field, value in (("dtype", "F16"), ("dtype", "XYZ"), ("dtype", 5), ("shape", [-1]), ("shape", [1 << 62, 1 << 62]),
                         ("shape", "x"), ("data_offsets", [8, 4]), ("data_offsets", [0, 1 << 60]), ("data_offsets", [0]),
                         ("data_offsets", None)):
        h = json.loads(json.dumps(header))
        h[tensor][field] = value
        mutations.append(("%s %s %s" % (tensor, field, json.dumps(value)), with_header(h), False))
    for key, value in (("format", "pytorch"), ("version", "99"), ("step", "-1"), ("step", "abc"), ("config", "{"),
                       ("config", "[]"), ("model_spec", "{"), ("plan", "nonsense"), ("validation_accuracy", "x")):
        h = json.loads(json.dumps(header))
        h["__metadata__"][key] = value
        mutations.append(("metadata %s=%s" % (key, value), with_header(h), False))
    for key in ("__metadata__", tensor):
        h = json.loads(json.dumps(header))
        del h[key]
        mutations.append(("without %s" % key, with_header(h), False))

    base_run = ["--model", "tiny_mlp", "--data", "synthetic:blobs", "--steps", "2", "--threads", "1", "--quiet"]
    for name, data, may_run in mutations:
        d = c.folder("ckpt")
        path = os.path.join(d, "step-00000004.safetensors")
        write(path, data)
        c.add("checkpoints", "--init-from: " + name, base_run + ["--init-from", path], [path, "--init-from"], may_run)
        c.add("checkpoints", "eval: " + name, ["eval", path, "--data", "synthetic:blobs", "--threads", "1"],
              [path, "eval"], may_run)
        # --resume over a copy of the run whose checkpoints are all this file
        r = os.path.join(d, "run")
        shutil.copytree(run, r)
        for f in os.listdir(os.path.join(r, "checkpoints")):
            os.remove(os.path.join(r, "checkpoints", f))
        write(os.path.join(r, "checkpoints", "step-00000004.safetensors"), data)
        c.add("checkpoints", "--resume: " + name, ["--resume", r, "--steps", "6", "--quiet", "--threads", "1"],
              [r, "--resume"], may_run)
    other = c.folder("other")
    write(os.path.join(other, "m.json"), json.dumps({"name": "other", "input": [2, 1, 1], "layers": [
        {"type": "dense", "name": "hidden1", "units": 5}, {"type": "relu"}, {"type": "dense", "units": 4}]}))
    c.add("checkpoints", "--init-from a checkpoint of another model",
          ["--model", os.path.join(other, "m.json")] + base_run[2:] + ["--init-from", os.path.join(ckpt_dir, newest)],
          ["--init-from", newest])
    for f, data, may_run in (("config.json", "{", False), ("config.json", "[]", False), ("config.json", None, False),
                             ("config.json", '{"batch": "x"}', False), ("model.json", "{", False), ("model.json", None, False),
                             ("run.json", "{", True), ("run.json", None, True), ("metrics.jsonl", "garbage\n{", True),
                             ("summary.json", "[", True), ("checkpoints", None, False)):
        d = c.folder("resume")
        r = os.path.join(d, "run")
        shutil.copytree(run, r)
        target = os.path.join(r, f)
        if data is None:
            shutil.rmtree(target) if os.path.isdir(target) else os.remove(target)
        else:
            write(target, data)
        c.add("run folders", "--resume with %s %s" % (f, "missing" if data is None else repr(data)),
              ["--resume", r, "--steps", "6", "--quiet", "--threads", "1"], [r, "--resume"], may_run)


# ------------------------------------------------------------------ run configs (--config)
CONFIG_KEYS = ["model", "data", "tfrecord_features", "batch", "steps", "epochs", "optimizer", "lr", "momentum",
               "lr_decay_steps", "lr_decay_rate", "lr_staircase", "ema_decay", "seed", "eval_every", "validation",
               "shuffle_buffer", "prefetch", "threads", "metrics", "quiet", "towers", "variables", "reduce", "update",
               "average_every", "ps_shards", "batch_per_tower", "slow", "tf32", "transfers", "checkpoint_every",
               "checkpoint_minutes", "keep_checkpoints", "init_from", "precision", "comm_precision", "stream",
               "loader_threads"]
TINY = ["--model", "tiny_mlp", "--data", "synthetic:blobs", "--steps", "2", "--threads", "1", "--quiet"]


def config_cases(c):
    base = {"model": "tiny_mlp", "data": "synthetic:blobs", "batch": 16, "lr": 0.05}

    def case(name, text, may_run=False, override=True, value=None):
        d = c.folder("cfg")
        path = os.path.join(d, "config.json")
        write(path, text)
        # Flags after --config pin what keeps a valid run short (they override the file).
        args = ["--config", path] + (["--steps", "2", "--threads", "1", "--quiet"] if override else ["--quiet"])
        # A value naming a file (init_from, model) may be named by the message instead.
        c.add("run configs", name, args, [path] + ([value[:30]] if isinstance(value, str) and value.strip() else []),
              may_run)

    case("valid (control)", json.dumps(base), may_run=True)
    for key in CONFIG_KEYS:
        for value in ([], {}, None, [1, 2], {"a": 1}):
            case("%s: %s" % (key, json.dumps(value)), json.dumps(dict(base, **{key: value})))
        for value in (-1, 0, 0.5, 1e300, -1e300, 2 ** 63, 2 ** 64, "", "x" * 300, "\u00e9\u2603", "a\nb", True):
            # May be a valid value of this key (the control decides nothing here): a clean
            # refusal or a short run are both right; a crash, hang or blow-up is not.
            if key in ("steps", "epochs") and isinstance(value, (int, float)) and not isinstance(value, bool):
                continue  # --steps 2 pins the length; epochs is overridden by it
            case("%s: %s" % (key, json.dumps(value)[:40]), json.dumps(dict(base, **{key: value})), may_run=True,
                 value=value.replace("\n", "\\n") if isinstance(value, str) else None)
    text = json.dumps(base)
    for cut in range(1, len(text) - 1, 3):
        case("cut at %d of %d characters" % (cut, len(text)), text[:cut])
    case("trailing garbage", text + " x")
    case("two objects", text + text)
    case("an array", "[" + text + "]")
    case("a number", "42")
    case("empty", "")
    case("NUL bytes", text[:10] + "\0" + text[10:])
    case("invalid UTF-8", text[:-1] + ', "model": "\xff\xfe"}')
    case("nested 100000 deep", '{"model": ' + "[" * 100000 + "]" * 100000 + "}")
    case("nested 400000 deep", "[" * 400000)
    case("duplicate key", text[:-1] + ', "batch": 8}', may_run=True)
    case("a key in another case", json.dumps(dict(base, Batch=3)))
    case("comment", "// settings\n" + text)
    case("byte-order mark", "\ufeff" + text, may_run=True)
    case("1.5 MiB of spaces", text[:-1] + " " * (3 << 19) + "}")
    case("a 1 MB string", json.dumps(dict(base, model="m" * 1000000)))


# ------------------------------------------------------------------ model files (--model FILE)
def model_cases(c):
    base = {"name": "m", "input": [1, 28, 28], "layers": [
        {"type": "conv2d", "filters": 4, "kernel": 3, "stride": 1, "padding": "same",
         "init": {"type": "truncated_normal", "stddev": 0.1}, "bias": 0.1, "weight_decay": 0.001},
        {"type": "relu"}, {"type": "maxpool", "size": 2, "stride": 2, "padding": "same"},
        {"type": "lrn", "depth_radius": 2, "bias": 1.0, "alpha": 0.001, "beta": 0.75},
        {"type": "flatten"}, {"type": "dropout", "keep": 0.9}, {"type": "dense", "units": 10}]}
    run = ["--data", "idx:" + SLICE, "--steps", "1", "--batch", "8", "--threads", "1", "--quiet"]

    def case(name, model, may_run=False, needs_limit=False):
        d = c.folder("model")
        path = os.path.join(d, "model.json")
        write(path, model if isinstance(model, str) else json.dumps(model))
        c.add("model files", name, ["--model", path] + run, [path, "--model"], may_run, needs_limit)

    case("valid (control)", base, may_run=True)
    for li, layer in enumerate(base["layers"]):
        for field in list(layer) + ["bogus"]:
            if field == "type":
                values = ["conv3d", "", 7, None, "Dense"]
            else:
                values = [-1, 0, 1e9, 2 ** 31, 2 ** 63, "x", [], None, 1e-300]
            for value in values:
                m = json.loads(json.dumps(base))
                m["layers"][li][field] = value
                # Some values are valid for some fields (a stride of 1e-300 is not; a bias of
                # 1e9 is, if silly): a refusal or a short run are both right there.
                may = field in ("bias", "weight_decay", "alpha", "beta", "stddev", "init") and \
                    isinstance(value, (int, float)) or (field == "depth_radius" and value == 0)
                case("layer %d %s: %s" % (li, field, json.dumps(value)), m, may_run=may)
    for value in ([0, 28, 28], [-1, 28, 28], [1, 28], [], "x", [1, 1e9, 1e9], [1, 2 ** 31, 1], [3, 28, 28], None):
        case("input %s" % json.dumps(value), dict(base, input=value))
    for value in ([], None, "x", [{}], [1], [{"type": "dense"}]):
        case("layers %s" % json.dumps(value), dict(base, layers=value))
    # Sizes that would take gigabytes: refused from the configuration, never allocated.
    for units in (10 ** 6, 10 ** 8, 2 ** 31 - 1):
        m = json.loads(json.dumps(base))
        m["layers"][-1]["units"] = units
        case("dense of %d units" % units, m, needs_limit=units < 10 ** 7)
        m = json.loads(json.dumps(base))
        m["layers"][0]["filters"] = units
        case("conv of %d filters" % units, m)
    for extra in ("bogus", "Layers", "inputs"):
        case("top-level field %s" % extra, dict(base, **{extra: 1}))
    text = json.dumps(base)
    for cut in range(1, len(text) - 1, 23):
        case("cut at %d of %d characters" % (cut, len(text)), text[:cut])
    case("empty", "")
    case("nested 200000 deep", "[" * 200000 + "]" * 200000)


# ------------------------------------------------------------------ flags
FLAGS = ["--model", "--data", "--batch", "--steps", "--epochs", "--optimizer", "--lr", "--momentum", "--lr-decay-steps",
         "--lr-decay-rate", "--lr-staircase", "--ema-decay", "--seed", "--eval-every", "--validation", "--shuffle-buffer",
         "--prefetch", "--threads", "--towers", "--variables", "--reduce", "--update", "--average-every", "--ps-shards",
         "--batch-per-tower", "--slow", "--tf32", "--transfers", "--checkpoint-every", "--checkpoint-minutes",
         "--keep-checkpoints", "--init-from", "--tfrecord-features", "--metrics", "--run-dir", "--config", "--resume",
         "--precision", "--comm-precision", "--stream", "--loader-threads"]


def flag_cases(c):
    for flag in FLAGS:
        for value in ("", "-1", "0", "0.5", "1e300", "abc", "\x01", "99999999999999999999", "nan", "inf", "-0",
                      "1,2", " 7"):
            if flag == "--steps" and value in ("1e300", "99999999999999999999", "inf"):
                continue  # legitimately long runs; --steps' range is covered by tst_cli
            args = [a for a in TINY]
            if flag in ("--steps",):
                args = args[:4] + args[6:]
            d = c.folder("flag")
            if flag in ("--metrics", "--run-dir"):
                value = os.path.join(d, value) if value else value
            c.add("flags", "%s %r" % (flag, value), args + [flag, value], [flag], may_run=True)
    c.add("flags", "a flag twice", TINY + ["--batch", "4", "--batch", "8"], ["--batch"], may_run=True)
    c.add("flags", "no value at the end", TINY + ["--lr"], ["--lr"])
    c.add("flags", "unknown flag", TINY + ["--lrr", "1"], ["--lrr"])
    c.add("flags", "a single dash", TINY + ["-lr", "1"], ["-lr"])
    c.add("flags", "a bare value", TINY + ["stray"], ["stray"])
    c.add("flags", "eval without a target", ["eval"], ["eval"])
    c.add("flags", "eval of a missing file", ["eval", "/nonexistent.safetensors"], ["/nonexistent.safetensors"])
    c.add("flags", "convert to a bad target", ["convert", "idx:" + SLICE, "nowhere"], ["convert", "nowhere"])
    c.add("flags", "runs with a bad sort", ["runs", "--sort", "bogus"], ["--sort", "bogus"])
    c.add("flags", "selftest with an argument", ["selftest", "x"], ["selftest"])


# ------------------------------------------------------------------ running
def wait_with_usage(p, timeout):
    """The child's stdout, stderr, exit code (negative: signal) and its own largest resident size
    (KiB, from wait4), or None for the code when it ran past `timeout` (then killed). The pipes are
    read on threads while this one waits, so a chatty child never blocks on a full pipe."""
    chunks = {}

    def drain(name, pipe):
        chunks[name] = pipe.read()

    readers = [threading.Thread(target=drain, args=(n, f)) for n, f in (("out", p.stdout), ("err", p.stderr))]
    for r in readers:
        r.start()
    deadline, code, usage = time.monotonic() + timeout, None, None
    while True:
        pid, status, usage = os.wait4(p.pid, os.WNOHANG)
        if pid:
            code = os.waitstatus_to_exitcode(status)
            break
        if time.monotonic() > deadline:
            p.kill()
            _, _, usage = os.wait4(p.pid, 0)
            break
        time.sleep(0.005)
    p.returncode = code if code is not None else -signal.SIGKILL  # reaped here: Popen must not wait again
    for r in readers:
        r.join()
    return chunks["out"], chunks["err"], code, usage.ru_maxrss


def run_case(binary, case, cwd, env, asan):
    start = time.monotonic()
    # AddressSanitizer reserves terabytes of address space for its shadow: no ulimit -v there;
    # its allocator refuses single allocations over 4 GiB instead.
    limit = None if asan else lambda: resource.setrlimit(resource.RLIMIT_AS, (AS_LIMIT, AS_LIMIT))
    p = subprocess.Popen([binary] + case.args, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         preexec_fn=limit)
    out, err, code, rss_kb = wait_with_usage(p, TIMEOUT_S)
    seconds = time.monotonic() - start
    if code is None:
        return "hang", "over %d s" % TIMEOUT_S, seconds
    run_case.peak_kb = max(run_case.peak_kb, rss_kb)
    if rss_kb > RSS_LIMIT_KB:  # this case's own process, its largest resident size
        return "memory", "%.0f MiB resident" % (rss_kb / 1024), seconds
    err_text = err.decode("utf-8", "replace")
    lines = [l for l in err_text.split("\n") if l.strip()]
    if code < 0:
        return "crash", "signal %d: %s" % (-code, err_text[-300:]), seconds
    if "out of memory" in err_text:
        return "memory", err_text.strip()[:300], seconds
    if code == 0:
        last = out.decode("utf-8", "replace").strip().split("\n")[-1] if out.strip() else ""
        if not case.may_run:
            return "silent success", last[:200], seconds
        return ("ran", "", seconds) if last.startswith("{") or case.args[:1] in (["runs"],) else \
            ("bad message", "exit 0 without a summary: " + last[:200], seconds)
    if code == 2:
        if len(lines) != 1:
            return "bad message", "%d lines: %s" % (len(lines), err_text[:300]), seconds
        line = lines[0]
        if any(ord(ch) < 0x20 and ch != "\t" for ch in line) or "\ufffd" in line and "\ufffd" not in " ".join(case.args):
            return "bad message", "unprintable: " + repr(line[:200]), seconds
        if LIBRARY_TEXT.search(line):
            return "bad message", "library text: " + line[:300], seconds
        if not any(n and n in line for n in case.names):
            return "bad message", "names none of %s: %s" % (case.names, line[:300]), seconds
        if out.strip():
            return "bad message", "stdout not empty: " + out.decode()[:100], seconds
        return "refused", line, seconds
    return "crash", "exit %d: %s" % (code, err_text[-300:]), seconds


run_case.peak_kb = 0


def every_nth(cases, n):
    """Every n-th case of each group, from its first, in the order listed."""
    seen, kept = collections.Counter(), []
    for x in cases:
        if seen[x.group] % n == 0:
            kept.append(x)
        seen[x.group] += 1
    return kept


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("binary")
    ap.add_argument("--table", help="also write the outcome table (Markdown) to this file")
    ap.add_argument("--only", help="only the groups whose name contains this")
    ap.add_argument("--list", action="store_true", help="every case with its outcome and line")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="cases at once (default: the cores)")
    ap.add_argument("--every", type=int, default=1,
                    help="only every N-th case of each group, from its first (the sanitizer build's share)")
    a = ap.parse_args()
    binary = os.path.abspath(a.binary)
    with tempfile.TemporaryDirectory(prefix="tb-bad-input-") as work:
        c = Campaign(work)
        for gen in (idx_cases, cifar_cases, lambda c: tfrecord_cases(c, binary), lambda c: folder_cases(c, binary),
                    lambda c: checkpoint_cases(c, binary),
                    config_cases, model_cases, flag_cases):
            gen(c)
        with open(binary, "rb") as f:
            asan = b"__asan_init" in f.read()
        if a.every < 1:
            ap.error("--every: %d is not a number of cases above 0" % a.every)
        cases = [x for x in c.cases if (not a.only or a.only in x.group) and not (asan and x.needs_limit)]
        cases = every_nth(cases, a.every)
        if asan:
            print("AddressSanitizer build: %d cases that need ulimit -v left out" %
                  sum(1 for x in c.cases if x.needs_limit))
        env = dict(os.environ, TOWERBENCH_RUNS_DIR=os.path.join(work, "runs-out"), OMP_NUM_THREADS="1",
                   QT_QPA_PLATFORM="offscreen")
        if asan:
            env["ASAN_OPTIONS"] = env.get("ASAN_OPTIONS", "") + ":max_allocation_size_mb=4096:allocator_may_return_null=1"
        cwd = os.path.join(work, "cwd")
        os.makedirs(cwd)
        outcomes = collections.OrderedDict()
        bad = []
        t0 = time.monotonic()
        slowest = (0, None)
        # The cases are independent (each its own folder; runs make their folders atomically), so
        # they run a core each, in the order listed.
        with concurrent.futures.ThreadPoolExecutor(max_workers=a.jobs) as pool:
            results = list(pool.map(lambda case: run_case(binary, case, cwd, env, asan), cases))
        for case, (outcome, detail, seconds) in zip(cases, results):
            slowest = max(slowest, (seconds, case.name))
            outcomes.setdefault(case.group, collections.Counter())[outcome] += 1
            if outcome not in ("refused", "ran"):
                bad.append((case, outcome, detail))
            if a.list:
                print("%-15s %-14s %-60s %s" % (case.group[:15], outcome, case.name[:60], detail[:150]))
        rss_mb = run_case.peak_kb / 1024
    cols = ["refused", "ran", "silent success", "bad message", "crash", "hang", "memory"]
    rows = ["| group | cases | " + " | ".join(cols) + " |", "|---|---:|" + "---:|" * len(cols)]
    total = collections.Counter()
    for group, counts in outcomes.items():
        total.update(counts)
        rows.append("| %s | %d | " % (group, sum(counts.values())) + " | ".join(str(counts[k]) for k in cols) + " |")
    rows.append("| **all** | **%d** | " % sum(total.values()) + " | ".join("**%d**" % total[k] for k in cols) + " |")
    summary = "%d cases in %.0f s (slowest %.1f s: %s); largest resident size of any case %.0f MiB" % (
        sum(total.values()), time.monotonic() - t0, slowest[0], slowest[1], rss_mb)
    print("\n".join(rows))
    print(summary)
    for case, outcome, detail in bad:
        print("%s: %s / %s: %s\n    args: %s" % (outcome.upper(), case.group, case.name, detail, " ".join(case.args)[:300]))
    if a.table:
        with open(a.table, "w") as f:
            f.write("\n".join(rows) + "\n\n" + summary + "\n")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
