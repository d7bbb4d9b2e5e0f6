#!/usr/bin/python3
"""ONNX export against ONNX's own checker and an independent runtime (OpenCV's dnn module).

For each model (the layer kinds between them: conv, max and average pools, global average pool,
LRN, dense, dropout, batch norm, add, flatten; the input scaling x/255 and x/255 - 0.5; a
CIFAR-10 run's crop and standardisation; --normalise mean-std's channel statistics) a short run trains, `towerbench-run export --onnx`
writes its model, onnx.checker.check_model(full_check=True) must accept the file, and OpenCV
runs it on the run's whole test split given as raw pixels (floats 0-255, NCHW): every image's
most probable class must be the one the run's own evaluation wrote to predictions.json and its
probability within 1e-4 of it; the probabilities must sum to 1.
    /usr/bin/python3 tests/onnx/check_export.py build/app/towerbench-run [--table FILE]
Exit 77 (skipped) when python3-onnx or python3-opencv is missing."""
import gzip, json, os, struct, subprocess, sys, tempfile

try:
    import numpy as np
    import onnx
    import onnx.numpy_helper
    import onnx.utils
    import cv2
except ImportError as e:
    print("skipped: %s (install python3-onnx and python3-opencv)" % e)
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SLICE = os.path.join(ROOT, "samples/fashion-mnist-slice")
TOLERANCE = 1e-4


def idx_test_images():
    with gzip.open(os.path.join(SLICE, "t10k-images-idx3-ubyte.gz")) as f:
        raw = f.read()
    n = struct.unpack(">I", raw[4:8])[0]
    return np.frombuffer(raw[16:], np.uint8).reshape(n, 1, 28, 28)


def synthetic_cifar(folder, rng):
    """CIFAR-10's binary layout: label byte, then 1024 R, 1024 G, 1024 B; smooth random images."""
    os.makedirs(folder)
    images = {}
    for name, count in [("data_batch_%d.bin" % i, 40) for i in range(1, 6)] + [("test_batch.bin", 60)]:
        labels = rng.integers(0, 10, count, dtype=np.uint8)
        base = rng.integers(0, 256, (count, 3, 4, 4)).astype(np.float64)
        pix = np.kron(base, np.ones((1, 1, 8, 8)))  # (count, 3, 32, 32) blocks
        pix = np.clip(pix + rng.normal(0, 12, pix.shape), 0, 255).astype(np.uint8)
        with open(os.path.join(folder, name), "wb") as f:
            for k in range(count):
                f.write(bytes([labels[k]]) + pix[k].tobytes())
        images[name] = pix
    return images["test_batch.bin"]


def standardise_as_onnx_defines(model, x):
    """The CIFAR prefix of the graph (Slice, Mul, ReduceMean, Sub, Sqrt, Mul, Add, Max, Div), each
    op as the ONNX operator specification defines it, in float32: OpenCV 4.6 cannot broadcast a
    per-image (N, 1, 1, 1) tensor (Sub, Div) or take Max of a constant, so it runs the rest."""
    init = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    v = {"pixels": x}
    for n in model.graph.node:
        a = [v[i] if i in v else init[i] for i in n.input]
        attrs = {at.name: onnx.helper.get_attribute_value(at) for at in n.attribute}
        if n.op_type == "Slice":
            starts, ends, axes = a[1], a[2], a[3]
            sl = [slice(None)] * a[0].ndim
            for s_, e_, ax in zip(starts, ends, axes):
                sl[ax] = slice(s_, e_)
            out = a[0][tuple(sl)]
        elif n.op_type == "ReduceMean":
            out = a[0].mean(axis=tuple(attrs["axes"]), keepdims=bool(attrs["keepdims"]), dtype=np.float64).astype(np.float32)
        else:
            out = {"Mul": np.multiply, "Add": np.add, "Sub": np.subtract, "Div": np.divide, "Max": np.maximum,
                   "Sqrt": lambda t: np.sqrt(t)}[n.op_type](*a).astype(np.float32)
        v[n.output[0]] = out
        if n.output[0] == "standardised":
            return out
    raise SystemExit("the graph has no 'standardised' value")


def opencv_probabilities(path, images, tmp):
    model = onnx.load(path)
    names = {n.output[0] for n in model.graph.node}
    if "standardised" in names:
        x = standardise_as_onnx_defines(model, images)
        rest = os.path.join(tmp, "after_standardisation.onnx")
        onnx.utils.extract_model(path, rest, ["standardised"], ["probabilities"])
        net = cv2.dnn.readNetFromONNX(rest)
        net.setInput(x)
    else:
        net = cv2.dnn.readNetFromONNX(path)
        net.setInput(images)
    return net.forward()


def run(binary, args, env):
    p = subprocess.run([binary] + args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        raise SystemExit("towerbench-run %s failed: %s" % (" ".join(args), p.stderr.strip()))
    return json.loads(p.stdout.strip().split("\n")[-1])


def main():
    binary = os.path.abspath(sys.argv[1])
    table = sys.argv[sys.argv.index("--table") + 1] if "--table" in sys.argv else None
    rng = np.random.default_rng(7)
    rows, failures = [], []
    with tempfile.TemporaryDirectory(prefix="tb-onnx-") as tmp:
        env = dict(os.environ, TOWERBENCH_RUNS_DIR=os.path.join(tmp, "runs"), OMP_NUM_THREADS="2")
        cifar = os.path.join(tmp, "cifar")
        cifar_test = synthetic_cifar(cifar, rng)
        fashion = "idx:" + SLICE
        cases = [("mlp", fashion, 30, []), ("mnist_cnn", fashion, 30, []), ("mnist_seed", fashion, 30, []),
                 ("resnet20_mnist", fashion, 8, []), ("vgg_bn", fashion, 8, []), ("cifar10_cnn", "cifar10:" + cifar, 6, []),
                 ("mnist_cnn", fashion, 30, ["--normalise", "mean-std"])]
        for model, data, steps, extra in cases:
            name = model + "".join("_" + a.strip("-") for a in extra)
            folder = os.path.join(tmp, name)
            summary = run(binary, ["--model", model, "--data", data, "--steps", str(steps), "--batch", "32", "--validation",
                                   "0", "--threads", "2", "--run-dir", folder, "--quiet"] + extra, env)
            # towerbench-run eval of the same checkpoint gives the run's own test accuracy (its input
            # scaling and normalisation are the checkpoint's, whatever eval's flags default to).
            evaluated = run(binary, ["eval", folder, "--threads", "2"], env)
            if abs(evaluated["test_accuracy"] - summary["test_accuracy"]) > 1e-9:
                failures.append("%s: eval gives %.4f, the run %.4f" % (name, evaluated["test_accuracy"], summary["test_accuracy"]))
            path = os.path.join(tmp, name + ".onnx")
            exported = run(binary, ["export", folder, "--onnx", path], env)
            verdict = "accepted"
            try:
                onnx.checker.check_model(onnx.load(path), full_check=True)
            except Exception as e:  # the checker's own exceptions: ValidationError, InferenceError
                verdict = "refused: %s" % str(e).split("\n")[0][:200]
                failures.append("%s: the ONNX checker %s" % (name, verdict))
            pred = json.load(open(os.path.join(folder, "predictions.json")))
            images = (cifar_test if data.startswith("cifar10:") else idx_test_images()).astype(np.float32)
            probs = opencv_probabilities(path, images, tmp)
            predicted = np.array(pred["predicted"])
            confidence = np.array(pred["confidence"])
            top = probs.argmax(axis=1)
            agree = int((top == predicted).sum())
            diff = float(np.abs(probs[np.arange(len(predicted)), predicted] - confidence).max())
            sums = float(np.abs(probs.sum(axis=1) - 1).max())
            rows.append("| %s | %s | %d | %s | %d / %d | %.2e | %.1e |" % (" ".join([model] + extra), data.split(":")[0], exported["nodes"], verdict,
                                                                          agree, len(predicted), diff, sums))
            if agree != len(predicted) or diff > TOLERANCE or sums > 1e-5:
                failures.append("%s: OpenCV agrees on %d of %d images, top probabilities within %.2e (limit %.0e)"
                                % (name, agree, len(predicted), diff, TOLERANCE))
    head = ["| model | data | nodes | onnx.checker (full) | same class as the run | max difference of its probability | probabilities' sum - 1 |",
            "|---|---|---:|---|---:|---:|---:|"]
    text = "\n".join(head + rows) + "\n\nONNX %s, OpenCV %s (cv2.dnn.readNetFromONNX), limit %.0e\n" % (
        onnx.__version__, cv2.__version__, TOLERANCE)
    print(text)
    if table:
        open(table, "w").write(text)
    for f in failures:
        print("FAIL: " + f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
