# onnx.checker and onnxruntime over the cases a test left in a folder
# (tests/support/ort_check.h writes them): each case a folder holding
# model.onnx, meta.txt and raw .bin tensors. meta.txt lines:
#   in NAME ONNX_TYPE NDIM DIMS...    an input (in_K.bin)
#   out - ONNX_TYPE NDIM DIMS...      an expected output (out_K.bin)
#   origin DIR                        a node test the model came from
#   tolerance scaled X                compare max|ort - want| / max|want| <= X
#                                     (else |ort - want| <= 1e-5 + 1e-4 |want|)
# Every model must pass onnx.checker (full_check), and onnxruntime's outputs
# on the inputs must match the expected ones. Usage: onnx_check.py FOLDER
import os, sys
import numpy as np, onnx, onnxruntime as ort
import ml_dtypes
DT = {1: np.float32, 11: np.float64, 10: np.float16, 16: ml_dtypes.bfloat16, 6: np.int32, 7: np.int64,
      2: np.uint8, 9: np.bool_}
from onnx import numpy_helper
def compare(got, want, scaled=None):
    worst = 0.0
    for j, (g, w) in enumerate(zip(got, want)):
        if g.dtype != w.dtype or g.shape != w.shape:
            raise Exception('output %d: onnxruntime %s%s, Ember %s%s' % (j, g.dtype, g.shape, w.dtype, w.shape))
        if w.dtype.kind == 'f' and scaled is not None:
            diff = float(np.max(np.abs(g.astype(np.float64) - w))) if w.size else 0.0
            scale = float(np.max(np.abs(w.astype(np.float64)))) if w.size else 0.0
            rel = diff / (scale if scale > 0 else 1.0)
            if not rel <= scaled:
                raise Exception('output %d: max relative error %g above %g' % (j, rel, scaled))
            worst = max(worst, rel)
        elif w.dtype.kind == 'f':
            err = np.abs(g.astype(np.float64) - w) - 1e-4 * np.abs(w.astype(np.float64))
            if err.size and not (err <= 1e-5).all():
                raise Exception('output %d: max deviation %g' % (j, float(np.nanmax(err))))
            if w.size: worst = max(worst, float(np.max(np.abs(g.astype(np.float64) - w))))
        elif not np.array_equal(g, w):
            raise Exception('output %d differs' % j)
    return worst
bad = same_as_original = not_run = 0
cases = sorted(c for c in os.listdir(sys.argv[1]) if os.path.isdir(os.path.join(sys.argv[1], c)))
for c in cases:
    d = os.path.join(sys.argv[1], c)
    path = os.path.join(d, 'model.onnx')
    try:
        onnx.checker.check_model(path, full_check=True)
        feeds, want, origin, scaled = {}, [], None, None
        for line in open(os.path.join(d, 'meta.txt')):
            if line.startswith('origin '):
                origin = line.split(None, 1)[1].strip()
                continue
            if line.startswith('tolerance scaled '):
                scaled = float(line.split()[2])
                continue
            kind, name, code, nd, *dims = line.split()
            k = len(feeds) if kind == 'in' else len(want)
            a = np.fromfile(os.path.join(d, '%s_%d.bin' % (kind, k)), dtype=DT[int(code)])
            a = a.reshape([int(x) for x in dims])
            if kind == 'in': feeds[name] = a
            else: want.append(a)
        if any(w.dtype == ml_dtypes.bfloat16 for w in want):
            print('  %-48s checker ok; not run: onnxruntime returns no bfloat16 to numpy' % c)
            not_run += 1
            continue
        sess = ort.InferenceSession(path, providers=['CPUExecutionProvider'])
        got = sess.run(None, feeds)
        # compare() zips: a missing output must fail, not pass.
        if len(got) != len(want):
            raise Exception('onnxruntime gives %d outputs, Ember %d' % (len(got), len(want)))
        try:
            worst = compare(got, want, scaled)
        except Exception as e:
            if not origin: raise
            # onnxruntime on the node test's own model: the same numbers means onnxruntime differs
            # from Ember (and from ONNX's reference outputs) on the original too: not the export.
            om = onnx.load(os.path.join(origin, 'model.onnx'))
            ofeeds = {i.name: numpy_helper.to_array(onnx.load_tensor(os.path.join(origin, 'test_data_set_0',
                      'input_%d.pb' % k))) for k, i in enumerate(om.graph.input)}
            ref = ort.InferenceSession(os.path.join(origin, 'model.onnx'),
                                       providers=['CPUExecutionProvider']).run(None, ofeeds)
            compare(got, ref)
            print('  %-48s checker ok; onnxruntime differs from Ember (%s) as much on the original '
                  'node-test model: its own difference, not the export' % (c, e))
            same_as_original += 1
            continue
        print('  %-48s checker ok, onnxruntime max %s %.3g' % (c, '|diff|/max|want|' if scaled is not None
                                                                   else '|diff|', worst))
    except Exception as e:
        bad += 1
        print('  %-48s FAILED: %s' % (c, str(e).splitlines()[0] if str(e) else type(e).__name__))
print('%d exported models: %d pass onnx.checker and match onnxruntime; %d differ from Ember as onnxruntime does '
      'on the original model; %d checked only (bfloat16); %d FAILED' % (len(cases),
      len(cases) - bad - same_as_original - not_run, same_as_original, not_run, bad))
sys.exit(1 if bad else 0)
