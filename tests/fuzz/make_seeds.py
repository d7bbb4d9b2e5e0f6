#!/usr/bin/env python3
"""Writes the fuzz targets' seed corpora (tests/fuzz/corpus/<target>/) from real files: small
slices of Fashion-MNIST (plain and gzip), CIFAR-10-shaped records, the shipped configs and
models, command lines, and a tiny_mlp run made by towerbench-run (its checkpoint, run folder,
metrics lines and index) and its TFRecord conversion. Run once after a format changes:
    python3 tests/fuzz/make_seeds.py build/app/towerbench-run
The corpora are kept in the repository; libFuzzer adds what it finds to a copy (make fuzz)."""
import gzip, json, os, shutil, struct, subprocess, sys, tempfile

CUT = b"\n#TB-CUT#\n"
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CORPUS = os.path.join(HERE, "corpus")
RUN = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build/app/towerbench-run")
FASHION = "/usr/share/datasets/fashion-mnist"


def put(target, name, data):
    os.makedirs(os.path.join(CORPUS, target), exist_ok=True)
    with open(os.path.join(CORPUS, target, name), "wb") as f:
        f.write(data)


def idx_images(n, rows, cols, pixels):
    return struct.pack(">IIII", 0x803, n, rows, cols) + pixels[: n * rows * cols]


def idx_labels(n, labels):
    return struct.pack(">II", 0x801, n) + labels[:n]


def fashion(name, header):
    with gzip.open(os.path.join(FASHION, name)) as f:
        return f.read()[header:header + 28 * 28 * 16]


def main():
    shutil.rmtree(CORPUS, ignore_errors=True)
    pixels, labels = fashion("train-images-idx3-ubyte.gz", 16), fashion("train-labels-idx1-ubyte.gz", 8)
    files = [idx_images(6, 28, 28, pixels), idx_labels(6, labels), idx_images(3, 28, 28, pixels[6 * 784:]),
             idx_labels(3, labels[6:])]
    put("fuzz_idx", "plain", CUT.join(files))
    put("fuzz_idx", "gzip", CUT.join(gzip.compress(f, mtime=0) for f in files))
    small = [idx_images(4, 4, 4, pixels), idx_labels(4, labels), idx_images(2, 4, 4, pixels), idx_labels(2, labels)]
    put("fuzz_idx", "small", CUT.join(small))
    put("fuzz_idx", "mixed", CUT.join([gzip.compress(small[0], mtime=0)] + small[1:]))

    record = lambda label, seed: bytes([label]) + bytes((seed * 31 + i * 7) % 256 for i in range(3072))
    batches = [record(3, 1) + record(9, 2)] + [record(i, i) for i in range(5)]
    put("fuzz_cifar", "six_files", CUT.join(batches))
    put("fuzz_cifar", "test_only", batches[0])

    for d, target in ((os.path.join(ROOT, "samples/configs"), "fuzz_run_config"),
                      (os.path.join(ROOT, "resources/models"), "fuzz_model_json")):
        for name in sorted(os.listdir(d)):
            with open(os.path.join(d, name), "rb") as f:
                put(target, name, f.read())
    put("fuzz_run_config", "all_keys.json", json.dumps({
        "model": "tiny_mlp", "data": "synthetic:blobs", "batch": 64, "steps": 10, "optimizer": "adam",
        "lr": 0.001, "towers": "cpu:0,cpu:1", "variables": "replicated", "reduce": "allreduce",
        "update": "sync", "average_every": 2, "ps_shards": 2, "slow": "1=2", "ema_decay": 0.99,
        "eval_every": 5, "validation": 100, "threads": 2, "checkpoint_every": 5}).encode())

    flags = [["--model", "tiny_mlp", "--data", "synthetic:blobs", "--steps", "3", "--batch", "32"],
             ["--towers", "cpu:0,cpu:1", "--update", "async", "--slow", "1=2", "--ps-shards", "2"],
             ["--variables", "replicated", "--reduce", "allreduce", "--average-every", "4", "--lr", "0.1"],
             ["--batch-per-tower", "16", "--epochs", "0.5", "--optimizer", "nesterov", "--momentum", "0.8"],
             ["eval", "run-1", "--data", "idx:dir", "--batch", "64"], ["runs", "--filter", "mlp", "--sort", "steps"],
             ["convert", "idx:a", "tfrecord:b"], ["--config", os.path.join(ROOT, "samples/configs/default.json"), "--quiet"],
             ["--lr-decay-steps", "100", "--lr-decay-rate", "0.5", "--lr-staircase", "true", "--tf32", "false"],
             ["scale", "--sweep-towers", "1,2,4", "--sweep-strategies", "mean,allreduce,async,average:4",
              "--sweep-warmup", "3", "--sweep-steps", "10", "--model", "mlp"],
             ["predict", "sweep-1", "--towers", "8", "--device", "h100", "--link", "nvlink", "--machines", "2",
              "--network", "infiniband", "--ps-shards", "2", "--slow", "1=3", "--assume", "serial_share=0.2,host_gbps=5"]]
    for i, f in enumerate(flags):
        put("fuzz_flags", "line%d" % i, b"\0".join(a.encode() for a in f))

    with tempfile.TemporaryDirectory() as tmp:
        runs = os.path.join(tmp, "runs")
        env = dict(os.environ, TOWERBENCH_RUNS_DIR=runs, OMP_NUM_THREADS="1")
        run = os.path.join(runs, "run-1")
        subprocess.run([RUN, "--model", "tiny_mlp", "--data", "synthetic:blobs", "--steps", "6", "--eval-every", "3",
                        "--checkpoint-every", "3", "--ema-decay", "0.9", "--run-dir", run, "--quiet"],
                       env=env, check=True, stdout=subprocess.DEVNULL)
        subprocess.run([RUN, "runs"], env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        ckpts = sorted(os.listdir(os.path.join(run, "checkpoints")))
        for c in ckpts[:2]:
            with open(os.path.join(run, "checkpoints", c), "rb") as f:
                put("fuzz_checkpoint", c, f.read())
        read = lambda *p: open(os.path.join(*p), "rb").read()
        names = ["run.json", "config.json", "plan.json", "summary.json", "model.json", "metrics.jsonl"]
        put("fuzz_run_folder", "finished", CUT.join(read(run, n) for n in names))
        put("fuzz_run_folder", "with_index", CUT.join([read(run, n) for n in names] + [read(runs, "index.sqlite")]))
        put("fuzz_run_folder", "running", CUT.join(read(run, n) if n != "summary.json" else b"" for n in names))
        put("fuzz_metrics_lines", "metrics.jsonl", read(run, "metrics.jsonl"))

        sweep = os.path.join(tmp, "sweep")
        subprocess.run([RUN, "scale", "--model", "tiny_mlp", "--data", "synthetic:blobs", "--batch", "32",
                        "--sweep-towers", "2", "--sweep-strategies", "mean,async,average:2", "--sweep-warmup", "1",
                        "--sweep-steps", "3", "--run-dir", sweep, "--quiet"], env=env, check=True, stdout=subprocess.DEVNULL)
        put("fuzz_sweep", "sweep.json", read(sweep, "sweep.json"))

        idx = os.path.join(tmp, "idx")
        os.makedirs(idx)
        for name, data in zip(["train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
                               "t10k-labels-idx1-ubyte"], files):
            with open(os.path.join(idx, name), "wb") as f:
                f.write(data)
        subprocess.run([RUN, "convert", "idx:" + idx, "tfrecord:" + os.path.join(tmp, "tf")], env=env, check=True,
                       stdout=subprocess.DEVNULL)
        put("fuzz_tfrecord", "train.tfrecords", read(tmp, "tf", "train.tfrecords"))
        put("fuzz_tfrecord", "test.tfrecords", read(tmp, "tf", "test.tfrecords"))
        # fuzz_stream: an options byte, then shards cut apart (two of the same set, one other).
        train, test = read(tmp, "tf", "train.tfrecords"), read(tmp, "tf", "test.tfrecords")
        for pick in (0x00, 0x55, 0xAA, 0xFF):
            put("fuzz_stream", "shards-%02x" % pick, bytes([pick]) + train + CUT + test + CUT + train)

        # Image files as convert writes them (gray PNG, gray JPEG), and a JPEG carrying an EXIF
        # orientation (APP1 after SOI: a little-endian TIFF block with one IFD entry, 0x0112 = 6).
        for fmt, extra in (("png", []), ("jpeg", ["--jpeg-quality", "90"])):
            out = os.path.join(tmp, "img-" + fmt)
            subprocess.run([RUN, "convert", "idx:" + idx, "folder:" + out] + extra, env=env, check=True,
                           stdout=subprocess.DEVNULL)
            first = sorted(os.listdir(os.path.join(out, "train")))[0]
            name = sorted(os.listdir(os.path.join(out, "train", first)))[0]
            data = read(out, "train", first, name)
            put("fuzz_image", "gray." + fmt, data)
            if fmt == "jpeg":
                tiff = b"II*\0\x08\0\0\0\x01\0" + b"\x12\x01\x03\0\x01\0\0\0\x06\0\0\0" + b"\0\0\0\0"
                app1 = b"Exif\0\0" + tiff
                put("fuzz_image", "exif6.jpeg", data[:2] + b"\xff\xe1" + struct.pack(">H", len(app1) + 2) + app1 + data[2:])


if __name__ == "__main__":
    main()
