#!/usr/bin/env python3
"""Writes the ONNX model zoo that tests/unit/test_onnx_zoo.c runs through Ember.

Two steps, so that a machine without PyTorch still tests real torch exports
(CI: PyTorch's CPU index is out of its reach, and PyPI's torch wheel needs
3 GB of CUDA wheels beside it):

  make_zoo.py export OUT      needs torch (and onnx, onnxscript)
    exports the models of zoo_models.py into OUT/<model>_<exporter><opset>/:
      model.onnx            the exported model (and model.onnx.data, its
                            weights, for the exporter's defaults)
      input_<i>.npy         its fixed inputs (float32; int64 for sequence lengths)
      torch_output_<i>.npy  what torch itself computes for them
    plus OUT/exports.txt: a "# torch <version>, zoo_models.py sha256 <hex>"
    line, then one model directory per line; and OUT/exporters.txt: which
    export failed and why (such a model is left out). `make zoo-models` runs
    this into tests/onnx_zoo/models, which is committed: zoo.sh uses those
    where torch is missing.

  make_zoo.py reference OUT   needs onnx and onnxruntime only
    runs onnxruntime on each model of OUT/exports.txt and writes its outputs,
    the expected values, as output_<i>.npy, then OUT/manifest.txt, one line
    per model directory:
      <dir> <n_inputs> <input names...> <n_outputs> <output names...>

onnxruntime is the independent reference: Ember never computes an expected
value. Each onnxruntime output is also checked against torch's own output
(the export is what is tested, not torch), so a wrong export fails here.

usage: make_zoo.py export|reference OUT
"""
import hashlib
import os
import re
import shutil
import sys
import warnings

import numpy as np
import onnx

warnings.filterwarnings("ignore")
HERE = os.path.dirname(os.path.abspath(__file__))


def models_sha256():
    with open(os.path.join(HERE, "zoo_models.py"), "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def export_all(out):
    import torch  # noqa: PLC0415 -- only this step needs torch

    import zoo_models as zm  # noqa: PLC0415

    torch.set_num_threads(1)
    # The fused "fast path" of nn.TransformerEncoderLayer in eval mode is an op
    # the legacy exporter lacks; the unfused layer computes the same.
    torch.backends.mha.set_fastpath_enabled(False)
    dirs, notes = [], []
    for name, make, make_inputs, in_names in zm.MODELS:
        torch.manual_seed(1234)
        model = make()
        with torch.no_grad():
            zm.randomize_bn(model)
        model.eval()
        inputs = make_inputs()
        with torch.no_grad():
            want = model(*inputs)
        want = [t.numpy() for t in (want if isinstance(want, tuple) else (want,))]
        for tag, opset, dynamo in zm.EXPORTS:
            d = f"{name}_{tag}{opset or ''}"
            os.makedirs(os.path.join(out, d), exist_ok=True)
            path = os.path.join(out, d, "model.onnx")
            try:
                zm.export(model, inputs, in_names, path, opset, dynamo)
                if opset is None:  # name the directory for the opset torch chose
                    chosen = next(o.version for o in onnx.load(path, load_external_data=False).opset_import
                                  if o.domain in ("", "ai.onnx"))
                    os.rename(os.path.join(out, d), os.path.join(out, f"{d}{chosen}"))
                    d = f"{d}{chosen}"
            except Exception as e:  # noqa: BLE001 -- any exporter failure is recorded, not fatal
                text = re.sub(r"\x1b\[[0-9;]*m", "", str(e)).strip()
                # the dynamo exporter's message starts with advice; its cause follows "## Exception summary"
                cause = text.split("## Exception summary", 1)[-1].strip()
                msg = cause.splitlines()[0][:240] if cause else type(e).__name__
                notes.append(f"{d}: torch {torch.__version__} cannot export: {msg}")
                shutil.rmtree(os.path.join(out, d), ignore_errors=True)
                continue
            for i, t in enumerate(inputs):
                np.save(os.path.join(out, d, f"input_{i}.npy"), t.numpy())
            for i, w in enumerate(want):
                np.save(os.path.join(out, d, f"torch_output_{i}.npy"), w)
            dirs.append(d)
    with open(os.path.join(out, "exporters.txt"), "w") as f:
        f.write("".join(n + "\n" for n in notes))
    with open(os.path.join(out, "exports.txt"), "w") as f:
        f.write(f"# torch {torch.__version__}, zoo_models.py sha256 {models_sha256()}\n")
        f.write("".join(d + "\n" for d in dirs))


def read_exports(out):
    with open(os.path.join(out, "exports.txt")) as f:
        lines = f.read().splitlines()
    if not lines or not lines[0].startswith("# torch "):
        raise SystemExit(f"{out}/exports.txt: no '# torch <version>, ...' first line")
    return lines[0][2:], [d for d in lines[1:] if d and not d.startswith("#")]


def reference_all(out):
    import onnxruntime as ort  # noqa: PLC0415

    provenance, dirs = read_exports(out)
    manifest = []
    for d in dirs:
        sess = ort.InferenceSession(os.path.join(out, d, "model.onnx"), providers=["CPUExecutionProvider"])
        feeds = {spec.name: np.load(os.path.join(out, d, f"input_{i}.npy"))
                 for i, spec in enumerate(sess.get_inputs())}
        outs = sess.run(None, feeds)
        for i, got in enumerate(outs):
            ref = np.load(os.path.join(out, d, f"torch_output_{i}.npy"))
            # onnxruntime must agree with torch: a wrong export is no reference.
            if got.shape != ref.shape or not np.allclose(got, ref, rtol=1e-4, atol=1e-5):
                raise SystemExit(f"{d}: onnxruntime output {i} differs from torch's")
            np.save(os.path.join(out, d, f"output_{i}.npy"), got)
        ins = [s.name for s in sess.get_inputs()]
        outs_n = [s.name for s in sess.get_outputs()]
        manifest.append(" ".join([d, str(len(ins)), *ins, str(len(outs_n)), *outs_n]))
    tmp = os.path.join(out, "manifest.txt.tmp")
    with open(tmp, "w") as f:
        f.write(f"# {provenance}; expected values by onnxruntime {ort.__version__}\n")
        f.write("".join(m + "\n" for m in manifest))
    os.replace(tmp, os.path.join(out, "manifest.txt"))  # written last: its presence means the zoo is complete


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("export", "reference"):
        raise SystemExit("usage: make_zoo.py export|reference OUT")
    out = sys.argv[2]
    os.makedirs(out, exist_ok=True)
    if sys.argv[1] == "export":
        export_all(out)
    else:
        reference_all(out)


if __name__ == "__main__":
    main()
