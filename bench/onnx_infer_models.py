"""Issue 12's inference benchmark, Python side (bench/onnx_infer_bench.sh).

  export DIR             writes DIR/<model>.onnx and DIR/<model>.in (the input,
                         raw little-endian float32) for every model below
  ort DIR MODEL THREADS RUNS
                         times onnxruntime on DIR/MODEL.onnx with
                         intra_op_num_threads = THREADS (graph optimizations
                         at their default), RUNS timed runs after warm-up:
                         prints "R ort.<model>.t<threads> <ms>" per run and
                         writes DIR/MODEL.ort.out (the output, float32)
  pair DIR MODEL THREADS RUNS LIB SIDE
                         Ember (LIB: a libember.so, through ctypes) and
                         onnxruntime in one process, run by run alternating
                         which goes first: "R pair.<side>.<model>.t<threads>
                         <ember ms> <ort ms>" per pair, so both see the same
                         moment of a noisy machine; writes DIR/MODEL.SIDE.out
  compare DIR MODEL SIDE max relative error (max |a - b| / max |b|) of
                         DIR/MODEL.SIDE.out against DIR/MODEL.ort.out:
                         "R err.<side>.<model> <value>"
  report RAW OUT.md      the Markdown result file from the raw "R" lines

The models are written here rather than taken from torchvision (no wheel of
it matches the torch in .tools/torch): ResNet-18, MobileNet-V2, SqueezeNet
1.1 and EfficientNet-B0 as torchvision defines them, and a BERT-small style
transformer encoder (4 layers, d_model 256, 4 heads, feed-forward 1024,
sequence 128). Batch 1, 224x224 images, random weights from a fixed seed,
batch-norm statistics randomised so that folding them is not a no-op, eval
mode, exported by the TorchScript exporter at opset 17 with constant folding
(as most published ONNX vision models were made).
"""
import math
import os
import sys
import time

import numpy as np

MODELS = ["resnet18", "mobilenet_v2", "squeezenet1_1", "efficientnet_b0", "encoder"]


def build(name):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    def bn(c):
        return nn.BatchNorm2d(c)

    class BasicBlock(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.b1 = bn(cout)
            self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.b2 = bn(cout)
            self.down = None
            if stride != 1 or cin != cout:
                self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), bn(cout))

        def forward(self, x):
            y = F.relu(self.b1(self.c1(x)))
            y = self.b2(self.c2(y))
            return F.relu(y + (x if self.down is None else self.down(x)))

    class ResNet18(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), bn(64), nn.ReLU(),
                                      nn.MaxPool2d(3, 2, 1))
            layers, cin = [], 64
            for cout, stride in [(64, 1), (128, 2), (256, 2), (512, 2)]:
                layers += [BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)]
                cin = cout
            self.layers = nn.Sequential(*layers)
            self.fc = nn.Linear(512, 1000)

        def forward(self, x):
            x = self.layers(self.stem(x))
            return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))

    def conv_bn(cin, cout, k, s, groups=1, act=nn.ReLU6):
        layers = [nn.Conv2d(cin, cout, k, s, (k - 1) // 2, groups=groups, bias=False), bn(cout)]
        if act is not None:
            layers.append(act())
        return nn.Sequential(*layers)

    class InvertedResidual(nn.Module):
        def __init__(self, cin, cout, s, t):
            super().__init__()
            hid = cin * t
            layers = [] if t == 1 else [conv_bn(cin, hid, 1, 1)]
            layers += [conv_bn(hid, hid, 3, s, groups=hid), conv_bn(hid, cout, 1, 1, act=None)]
            self.body = nn.Sequential(*layers)
            self.res = s == 1 and cin == cout

        def forward(self, x):
            return x + self.body(x) if self.res else self.body(x)

    class MobileNetV2(nn.Module):
        def __init__(self):
            super().__init__()
            cfg = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
                   (6, 320, 1, 1)]
            layers, cin = [conv_bn(3, 32, 3, 2)], 32
            for t, c, n, s in cfg:
                for i in range(n):
                    layers.append(InvertedResidual(cin, c, s if i == 0 else 1, t))
                    cin = c
            layers.append(conv_bn(cin, 1280, 1, 1))
            self.features = nn.Sequential(*layers)
            self.fc = nn.Linear(1280, 1000)

        def forward(self, x):
            x = F.adaptive_avg_pool2d(self.features(x), 1)
            return self.fc(torch.flatten(x, 1))

    class Fire(nn.Module):
        def __init__(self, cin, sq, e1, e3):
            super().__init__()
            self.sq = nn.Conv2d(cin, sq, 1)
            self.e1 = nn.Conv2d(sq, e1, 1)
            self.e3 = nn.Conv2d(sq, e3, 3, padding=1)

        def forward(self, x):
            x = F.relu(self.sq(x))
            return torch.cat([F.relu(self.e1(x)), F.relu(self.e3(x))], 1)

    class SqueezeNet11(nn.Module):
        def __init__(self):
            super().__init__()
            pool = lambda: nn.MaxPool2d(3, 2, ceil_mode=True)  # noqa: E731
            self.features = nn.Sequential(
                nn.Conv2d(3, 64, 3, 2), nn.ReLU(), pool(), Fire(64, 16, 64, 64), Fire(128, 16, 64, 64), pool(),
                Fire(128, 32, 128, 128), Fire(256, 32, 128, 128), pool(), Fire(256, 48, 192, 192),
                Fire(384, 48, 192, 192), Fire(384, 64, 256, 256), Fire(512, 64, 256, 256))
            self.head = nn.Conv2d(512, 1000, 1)

        def forward(self, x):
            x = F.relu(self.head(self.features(x)))
            return torch.flatten(F.adaptive_avg_pool2d(x, 1), 1)

    class SqueezeExcite(nn.Module):
        def __init__(self, c, sq):
            super().__init__()
            self.fc1 = nn.Conv2d(c, sq, 1)
            self.fc2 = nn.Conv2d(sq, c, 1)

        def forward(self, x):
            s = F.adaptive_avg_pool2d(x, 1)
            return x * torch.sigmoid(self.fc2(F.silu(self.fc1(s))))

    class MBConv(nn.Module):
        def __init__(self, cin, cout, k, s, t):
            super().__init__()
            hid = cin * t
            layers = [] if t == 1 else [conv_bn(cin, hid, 1, 1, act=nn.SiLU)]
            layers += [conv_bn(hid, hid, k, s, groups=hid, act=nn.SiLU), SqueezeExcite(hid, max(1, cin // 4)),
                       conv_bn(hid, cout, 1, 1, act=None)]
            self.body = nn.Sequential(*layers)
            self.res = s == 1 and cin == cout

        def forward(self, x):
            return x + self.body(x) if self.res else self.body(x)

    class EfficientNetB0(nn.Module):
        def __init__(self):
            super().__init__()
            cfg = [(1, 3, 1, 16, 1), (6, 3, 2, 24, 2), (6, 5, 2, 40, 2), (6, 3, 2, 80, 3), (6, 5, 1, 112, 3),
                   (6, 5, 2, 192, 4), (6, 3, 1, 320, 1)]
            layers, cin = [conv_bn(3, 32, 3, 2, act=nn.SiLU)], 32
            for t, k, s, c, n in cfg:
                for i in range(n):
                    layers.append(MBConv(cin, c, k, s if i == 0 else 1, t))
                    cin = c
            layers.append(conv_bn(cin, 1280, 1, 1, act=nn.SiLU))
            self.features = nn.Sequential(*layers)
            self.fc = nn.Linear(1280, 1000)

        def forward(self, x):
            x = F.adaptive_avg_pool2d(self.features(x), 1)
            return self.fc(torch.flatten(x, 1))

    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            layer = nn.TransformerEncoderLayer(d_model=256, nhead=4, dim_feedforward=1024, dropout=0.0,
                                               batch_first=True)
            self.enc = nn.TransformerEncoder(layer, num_layers=4, enable_nested_tensor=False)

        def forward(self, x):
            return self.enc(x)

    torch.manual_seed(12)
    model = {"resnet18": ResNet18, "mobilenet_v2": MobileNetV2, "squeezenet1_1": SqueezeNet11,
             "efficientnet_b0": EfficientNetB0, "encoder": Encoder}[name]()
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            with torch.no_grad():
                m.running_mean.uniform_(-0.1, 0.1)
                m.running_var.uniform_(0.5, 1.5)
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.1, 0.1)
    model.eval()
    shape = (1, 128, 256) if name == "encoder" else (1, 3, 224, 224)
    return model, shape


def export(outdir):
    import torch

    os.makedirs(outdir, exist_ok=True)
    # the fused encoder-layer kernel of eval mode has no ONNX form: export the plain ops
    torch.backends.mha.set_fastpath_enabled(False)
    for name in MODELS:
        model, shape = build(name)
        x = torch.from_numpy(np.random.default_rng(7).standard_normal(shape).astype(np.float32))
        path = os.path.join(outdir, name + ".onnx")
        with torch.no_grad():
            torch.onnx.export(model, (x,), path, input_names=["x"], output_names=["y"], opset_version=17,
                              do_constant_folding=True, dynamo=False)
        x.numpy().tofile(os.path.join(outdir, name + ".in"))
        with open(os.path.join(outdir, name + ".shape"), "w") as f:
            f.write(" ".join(str(d) for d in shape) + "\n")
        print("exported", path, file=sys.stderr)


def ort(outdir, name, threads, runs):
    import onnxruntime as rt

    so = rt.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    sess = rt.InferenceSession(os.path.join(outdir, name + ".onnx"), so, providers=["CPUExecutionProvider"])
    shape = [int(d) for d in open(os.path.join(outdir, name + ".shape")).read().split()]
    x = np.fromfile(os.path.join(outdir, name + ".in"), dtype=np.float32).reshape(shape)
    for _ in range(3):
        y = sess.run(None, {"x": x})[0]
    for _ in range(runs):
        t0 = time.perf_counter()
        y = sess.run(None, {"x": x})[0]
        print("R ort.%s.t%d %.4f" % (name, threads, 1e3 * (time.perf_counter() - t0)))
    np.ascontiguousarray(y, dtype=np.float32).tofile(os.path.join(outdir, name + ".ort.out"))


def pair(outdir, name, threads, runs, lib, side):
    """Ember and onnxruntime alternating run by run in this process. onnxruntime's
    intra-op threads may not spin here (session.intra_op.allow_spinning 0): a spinning
    pool thread would hold a CPU while Ember runs; Ember's OpenMP threads follow
    OMP_WAIT_POLICY from the environment."""
    import ctypes as C
    import onnxruntime as rt

    class Device(C.Structure):
        _fields_ = [("kind", C.c_int), ("ordinal", C.c_int)]

    class Options(C.Structure):
        _fields_ = [("device", Device), ("mode", C.c_int), ("input_values", C.c_void_p), ("n_input_values", C.c_int),
                    ("metadata_only", C.c_int), ("external_data_dir", C.c_char_p)]

    class Named(C.Structure):
        _fields_ = [("name", C.c_char_p), ("value", C.c_void_p)]

    em = C.CDLL(lib)
    em.em_last_error.restype = C.c_char_p
    em.em_tensor_numel.restype = C.c_int64
    em.em_onnx_output_count.restype = C.c_size_t

    def check(st, what):
        if st:
            sys.exit("%s: %s" % (what, em.em_last_error().decode()))

    shape = [int(d) for d in open(os.path.join(outdir, name + ".shape")).read().split()]
    x = np.fromfile(os.path.join(outdir, name + ".in"), dtype=np.float32).reshape(shape)
    m = C.c_void_p()
    check(em.em_onnx_load(os.path.join(outdir, name + ".onnx").encode(), C.byref(Options(mode=1)), C.byref(m)),
          "em_onnx_load")
    xt = C.c_void_p()
    dims = (C.c_int64 * len(shape))(*shape)
    check(em.em_tensor_from_host(Device(0, 0), 0, len(shape), dims, x.ctypes.data_as(C.c_void_p), C.c_size_t(x.nbytes),
                                 C.byref(xt)), "em_tensor_from_host")
    feeds = (Named * 1)(Named(b"x", xt))
    n_out = em.em_onnx_output_count(m)
    outs = (C.c_void_p * n_out)()

    def ember_run(keep=False):
        check(em.em_onnx_run(m, feeds, 1, outs), "em_onnx_run")
        y = None
        if keep:
            y = np.empty(em.em_tensor_numel(C.c_void_p(outs[0])), dtype=np.float32)
            check(em.em_tensor_to_host(C.c_void_p(outs[0]), y.ctypes.data_as(C.c_void_p), C.c_size_t(y.nbytes)),
                  "em_tensor_to_host")
        for k in range(n_out):
            em.em_tensor_release(C.c_void_p(outs[k]))
        return y

    so = rt.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    sess = rt.InferenceSession(os.path.join(outdir, name + ".onnx"), so, providers=["CPUExecutionProvider"])
    for _ in range(3):
        ember_run()
        sess.run(None, {"x": x})
    ember_run(keep=True).tofile(os.path.join(outdir, "%s.%s.out" % (name, side)))
    np.ascontiguousarray(sess.run(None, {"x": x})[0], dtype=np.float32).tofile(os.path.join(outdir, name + ".ort.out"))
    for i in range(runs):
        t = {}
        for who in (("ember", "ort") if i % 2 == 0 else ("ort", "ember")):
            t0 = time.perf_counter()
            ember_run() if who == "ember" else sess.run(None, {"x": x})
            t[who] = 1e3 * (time.perf_counter() - t0)
        print("R pair.%s.%s.t%d %.4f %.4f" % (side, name, threads, t["ember"], t["ort"]))
    em.em_tensor_release(xt)
    em.em_onnx_free(m)


def compare(outdir, name, side):
    a = np.fromfile(os.path.join(outdir, "%s.%s.out" % (name, side)), dtype=np.float32).astype(np.float64)
    b = np.fromfile(os.path.join(outdir, name + ".ort.out"), dtype=np.float32).astype(np.float64)
    if a.size != b.size:
        print("R err.%s.%s size-mismatch:%d/%d" % (side, name, a.size, b.size))
        return
    # relative to the output's scale, so near-zero elements do not blow it up
    err = float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-30))
    print("R err.%s.%s %.3g" % (side, name, err if math.isfinite(err) else float("inf")))


def report(raw, out):
    """Per model and thread count: each side's median ms (over all runs of all rounds), and
    Ember/onnxruntime as the median over rounds of the per-round ratio of medians, with the
    lowest and highest round (the machine is shared: the spread says how much to trust it)."""
    import re
    import statistics as st

    meta, samples, errs, pairs = {}, {}, {}, {}
    for line in open(raw):
        if not line.startswith("R "):
            continue
        _, key, val = line.rstrip("\n").split(" ", 2)
        if key.startswith("meta."):
            meta[key[5:]] = val
        elif key.startswith("err."):
            errs[key[4:]] = val
        elif re.match(r"r\d+\.pair\.", key):
            m = re.match(r"r\d+\.pair\.(ember|base)\.(.+)\.t(\d+)$", key)
            e, o = (float(v) for v in val.split())
            pairs.setdefault((m.group(1), m.group(2), int(m.group(3))), []).append((e, o))
        else:
            m = re.match(r"r(\d+)\.(ember|base|ort)\.(.+)\.t(\d+)$", key)
            if m:
                r, side, model, t = int(m.group(1)), m.group(2), m.group(3), int(m.group(4))
                samples.setdefault((model, t, side, r), []).append(float(val))
    sides = ["ember"] + (["base"] if any(k[2] == "base" for k in samples) or any(k[0] == "base" for k in pairs)
                         else [])
    models = [m for m in MODELS if any(k[0] == m for k in samples) or any(k[1] == m for k in pairs)]
    threads = sorted({k[1] for k in samples} | {k[2] for k in pairs})
    rounds = sorted({k[3] for k in samples})

    def ratio(model, t, side):
        rs = [st.median(samples[(model, t, side, r)]) / st.median(samples[(model, t, "ort", r)]) for r in rounds
              if (model, t, side, r) in samples and (model, t, "ort", r) in samples]
        return (st.median(rs), min(rs), max(rs)) if rs else None

    def ms(model, t, side):
        v = [x for r in rounds for x in samples.get((model, t, side, r), [])]
        return "%.1f" % st.median(v) if v else "-"

    L = ["# Inference vs onnxruntime, CPU (issue 12)", ""]
    L.append("Date %s; commit %s%s; %s, %s CPUs; load before %s, after %s." % (
        meta.get("date", "?"), meta.get("commit", "?"),
        "; before = %s (--base)" % meta["base"] if "base" in meta else "", meta.get("cpu", "?"), meta.get("nproc", "?"),
        meta.get("load_before", "?"), meta.get("load_after", "?")))
    L.append("onnxruntime %s (CPUExecutionProvider, intra_op_num_threads = threads, default graph optimizations); "
             "torch %s (export: TorchScript exporter, opset 17, constant folding); %s; %s; Ember: "
             "em_onnx_run on the CPU, fast mode, OMP_WAIT_POLICY=%s, OMP_NUM_THREADS = threads, "
             "OPENBLAS_CORETYPE %s." % (
                 meta.get("ort", "?"), meta.get("torch", "?"), meta.get("cc", "?"), meta.get("openblas", "?"),
                 meta.get("omp_wait", "?"), meta.get("openblas_coretype", "?")))
    L.append("%s rounds; per round and side one process, 3 warm-up runs then %s timed runs (median); sides "
             "alternate which goes first. Batch 1; images 3x224x224, the encoder 128 tokens x 256." % (
                 meta.get("rounds", "?"), meta.get("runs", "?")))
    L.append("")
    L.append("Goal: Ember / onnxruntime time <= 1.0. Ratio = median over rounds of the per-round ratio of "
             "medians [lowest, highest round].")
    L.append("")
    hdr = "| model | threads | onnxruntime ms |"
    sep = "| --- | --- | --- |"
    for s in sides:
        name = "Ember" if s == "ember" else "Ember before"
        hdr += " %s ms | %s / ort |" % (name, name)
        sep += " --- | --- |"
    L += [hdr, sep]
    for t in threads:
        for model in models:
            row = "| %s | %d | %s |" % (model, t, ms(model, t, "ort"))
            for s in sides:
                rt = ratio(model, t, s)
                row += " %s | %s |" % (ms(model, t, s), "%.2f [%.2f, %.2f]" % rt if rt else "-")
            L.append(row)
    if pairs:
        L += ["", "## Paired in one process", "",
              "Ember (ctypes, libember.so) and onnxruntime alternating run by run in one process "
              "(onnxruntime's intra-op spinning off there, see onnx_infer_models.py pair): ratio = median over "
              "all pairs of Ember ms / onnxruntime ms [25th, 75th percentile].", ""]
        hdr, sep = "| model | threads |", "| --- | --- |"
        for s_ in sides:
            name = "Ember" if s_ == "ember" else "Ember before"
            hdr += " %s ms | ort ms | %s / ort |" % (name, name)
            sep += " --- | --- | --- |"
        L += [hdr, sep]
        for t in threads:
            for model in models:
                row = "| %s | %d |" % (model, t)
                for s_ in sides:
                    v = pairs.get((s_, model, t), [])
                    if not v:
                        row += " - | - | - |"
                        continue
                    r = sorted(e / o for e, o in v)
                    q = lambda f: r[min(len(r) - 1, int(f * (len(r) - 1) + 0.5))]  # noqa: E731
                    row += " %.1f | %.1f | %.2f [%.2f, %.2f] |" % (st.median([e for e, _ in v]),
                                                                 st.median([o for _, o in v]), st.median(r), q(0.25),
                                                                 q(0.75))
                L.append(row)
    L += ["", "Max relative error against onnxruntime (max |Ember - ort| / max |ort|, same input):", ""]
    L.append("| model | " + " | ".join("Ember" if s == "ember" else "Ember before" for s in sides) + " |")
    L.append("| --- |" + " --- |" * len(sides))
    for model in models:
        L.append("| %s | %s |" % (model, " | ".join(errs.get("%s.%s" % (s, model), "-") for s in sides)))
    L += ["", "Raw samples (ms): see the raw file; per round medians:", ""]
    for t in threads:
        for model in models:
            for s in ["ort"] + sides:
                v = ["%.1f" % st.median(samples[(model, t, s, r)]) for r in rounds if (model, t, s, r) in samples]
                L.append("- %s t%d %s: %s" % (model, t, s, " ".join(v)))
    with open(out, "w") as f:
        f.write("\n".join(L) + "\n")


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "export":
        export(sys.argv[2])
    elif cmd == "ort":
        ort(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
    elif cmd == "pair":
        pair(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), sys.argv[6], sys.argv[7])
    elif cmd == "compare":
        compare(sys.argv[2], sys.argv[3], sys.argv[4])
    elif cmd == "report":
        report(sys.argv[2], sys.argv[3])
    else:
        sys.exit("usage: onnx_infer_models.py export DIR | ort DIR MODEL THREADS RUNS | compare DIR MODEL SIDE | "
                 "report RAW OUT.md")
