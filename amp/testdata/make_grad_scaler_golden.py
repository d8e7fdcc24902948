#!/usr/bin/python3
"""Regenerates grad_scaler_golden.txt from PyTorch's torch.cuda.amp.GradScaler.

    /usr/bin/python3 amp/testdata/make_grad_scaler_golden.py > amp/testdata/grad_scaler_golden.txt

Needs Debian's python3-torch (1.13, CPU only). GradScaler's Python logic (the
per-iteration state machine, step skipping, update(), state_dict()) is the
real one from torch/cuda/amp/grad_scaler.py. Its two device kernels,
torch._amp_foreach_non_finite_check_and_unscale_ and torch._amp_update_scale_,
exist only for CUDA in 1.13 (the script checks): where they are missing they
are replaced by transcriptions of aten/src/ATen/native/cuda/AmpKernels.cu
(PyTorch 1.13) written with torch tensor ops, and three CUDA-only guards are
lifted (see enable_gradscaler_on_cpu). The first comment line of the output
says which path produced the file.

Line formats (floats as raw IEEE bits in hex, decimal only for reading):
    series NAME init_scale growth_factor backoff_factor growth_interval
    STEP EVENT NEW_SCALE STEPPED FOUND_INF SCALE_BITS TRACKER  # scale
        EVENT: ok | inf | -inf | nan (where the bad value sits: see bad_grads);
        NEW_SCALE: '-' for update(), else the f32 bits passed to update(x);
        STEPPED: whether optimizer.step() ran; SCALE_BITS, TRACKER: after update.
    unscale DTYPE SCALE_BITS INV_SCALE_BITS IN_BITS OUT_BITS
    scale DTYPE SCALE_BITS IN_BITS OUT_BITS
    state_keys k1 k2 ...
    multi_series init_scale growth_factor backoff_factor growth_interval
    multi STEP EVENT_A EVENT_B UNSCALED_A STEPPED_A STEPPED_B SCALE_BITS TRACKER  # scale
        two optimizers, A over a gradient of 4 elements, B over one of 3
        (bad_grads' split); UNSCALED_A: unscale_(A) was called before the
        steps (as to clip A's gradients); STEPPED_*: whether each stepped;
        then one update(). EVENT_*: each optimizer's gradient (ok | inf | nan).
"""
import inspect
import math
import struct
import warnings

import torch
from torch.cuda.amp import grad_scaler
from torch.cuda.amp import GradScaler

FLT_MAX = struct.unpack("<f", struct.pack("<I", 0x7F7FFFFF))[0]


def f32_bits(t):
    return "0x%08x" % struct.unpack("<I", struct.pack("<f", float(t)))[0]


def bits(t):
    """Raw bits of a one-element tensor of any float dtype."""
    width = {torch.float32: (torch.int32, 8), torch.float64: (torch.int64, 16),
             torch.float16: (torch.int16, 4), torch.bfloat16: (torch.int16, 4)}[t.dtype]
    raw = int(t.reshape(1).view(width[0]).item())
    return "0x%0*x" % (width[1], raw & ((1 << (4 * width[1])) - 1))


DTYPE_NAMES = {torch.float32: "f32", torch.float64: "f64", torch.float16: "f16",
               torch.bfloat16: "bf16"}


# --- the kernels -----------------------------------------------------------

def transcribed_foreach_non_finite_check_and_unscale_(grads, found_inf, inv_scale):
    # AmpKernels.cu, _amp_foreach_non_finite_check_and_unscale_cuda (1.13): per
    # element, val = opmath_t(grad) (f32 for f16/bf16/f32, f64 for f64);
    # if (!isfinite(val)) *found_inf = 1.f;
    # grad = scalar_t(inv_scale == 1.f ? val : val * inv_scale).
    inv = inv_scale.item()
    for g in grads:
        opmath = torch.float64 if g.dtype == torch.float64 else torch.float32
        val = g.to(opmath)
        if not bool(torch.isfinite(val).all()):
            found_inf.fill_(1.0)
        if inv != 1.0:
            g.copy_((val * inv_scale.to(opmath)).to(g.dtype))


def transcribed_amp_update_scale_(current_scale, growth_tracker, found_inf,
                                  growth_factor, backoff_factor, growth_interval):
    # AmpKernels.cu, amp_update_scale_cuda_kernel (1.13), with float*
    # current_scale, int* growth_tracker, double factors and int interval:
    #   if (*found_inf) {
    #     *current_scale = (*current_scale)*backoff_factor;   // in double, stored as float
    #     *growth_tracker = 0;
    #   } else {
    #     auto successful = (*growth_tracker) + 1;
    #     if (successful == growth_interval) {
    #       auto new_scale = static_cast<float>((*current_scale)*growth_factor);
    #       if (isfinite(new_scale)) *current_scale = new_scale;
    #       *growth_tracker = 0;
    #     } else {
    #       *growth_tracker = successful;
    #     }
    #   }
    assert current_scale.dtype == torch.float32 and growth_tracker.dtype == torch.int32
    if found_inf.item():
        current_scale.copy_((current_scale.double() * backoff_factor).float())
        growth_tracker.fill_(0)
    else:
        successful = growth_tracker + 1
        if int(successful.item()) == growth_interval:
            new_scale = (current_scale.double() * growth_factor).float()
            if bool(torch.isfinite(new_scale).all()):
                current_scale.copy_(new_scale)
            growth_tracker.fill_(0)
        else:
            growth_tracker.copy_(successful)
    return current_scale


def kernel_available(fn, *args):
    try:
        fn(*args)
        return True
    except (NotImplementedError, RuntimeError):
        return False


UPDATE_NATIVE = kernel_available(torch._amp_update_scale_, torch.full((1,), 2.0),
                                 torch.zeros(1, dtype=torch.int32), torch.zeros(1), 2.0, 0.5, 3)
UNSCALE_NATIVE = kernel_available(torch._amp_foreach_non_finite_check_and_unscale_,
                                  [torch.ones(2)], torch.zeros(1), torch.full((1,), 0.5))
unscale_kernel = (torch._amp_foreach_non_finite_check_and_unscale_ if UNSCALE_NATIVE
                  else transcribed_foreach_non_finite_check_and_unscale_)


class _CpuReplicator(grad_scaler._MultiDeviceReplicator):
    # The original asserts a CUDA master tensor; otherwise identical.
    def __init__(self, master_tensor):
        self.master = master_tensor
        self._per_device_tensors = {}


def enable_gradscaler_on_cpu():
    """Lets a real GradScaler run on CPU tensors.

    Lifted: the CUDA-availability check that disables the scaler, the
    replicator's is_cuda assertion, and (when missing on CPU) the two kernels.
    scale() asserts is_cuda too; it is bypassed by initializing _scale with
    _lazy_init_scale_growth_tracker and multiplying like scale() does.
    """
    grad_scaler.amp_definitely_not_available = lambda: False
    grad_scaler._MultiDeviceReplicator = _CpuReplicator
    if not UPDATE_NATIVE:
        torch._amp_update_scale_ = transcribed_amp_update_scale_
    if not UNSCALE_NATIVE:
        torch._amp_foreach_non_finite_check_and_unscale_ = (
            transcribed_foreach_non_finite_check_and_unscale_)


# Facts about the unmodified class, checked before anything is patched.
_sig = inspect.signature(GradScaler.__init__).parameters
DEFAULTS = {k: _sig[k].default for k in
            ["init_scale", "growth_factor", "backoff_factor", "growth_interval", "enabled"]}
assert DEFAULTS == {"init_scale": 65536.0, "growth_factor": 2.0, "backoff_factor": 0.5,
                    "growth_interval": 2000, "enabled": True}, DEFAULTS
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    _disabled = GradScaler(enabled=False)
assert not _disabled.is_enabled() and _disabled.get_scale() == 1.0
assert _disabled.state_dict() == {}

enable_gradscaler_on_cpu()


class FakeOptimizer:
    """What GradScaler touches of an optimizer: param_groups and step()."""

    def __init__(self, params):
        self.param_groups = [{"params": params}]
        self.steps = 0

    def step(self):
        self.steps += 1


def make_scaler(**kwargs):
    s = GradScaler(**kwargs)
    assert s.is_enabled()
    s._lazy_init_scale_growth_tracker(torch.device("cpu"))
    return s


# --- the series ------------------------------------------------------------

# Two parameters; a bad value sits at flat position (step * 5) % 7 of their
# concatenation (sizes 4 and 3). amp/grad_scaler_test.cc builds the same.
GRAD_SIZES = (4, 3)
BAD = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}


def bad_grads(step, event, scale):
    flat = torch.full((sum(GRAD_SIZES),), 0.25, dtype=torch.float32) * scale
    if event != "ok":
        flat[(step * 5) % len(flat)] = BAD[event]
    return list(flat.split(GRAD_SIZES))


def series(name, steps, events, new_scales=None, **options):
    """events: {step: 'inf'|'-inf'|'nan'}; new_scales: {step: float} for update(x)."""
    new_scales = new_scales or {}
    s = make_scaler(**options)
    o = dict(DEFAULTS)
    o.update(options)
    print(f"series {name} {o['init_scale']!r} {o['growth_factor']!r} {o['backoff_factor']!r} "
          f"{o['growth_interval']}")
    params = [torch.zeros(n) for n in GRAD_SIZES]
    opt = FakeOptimizer(params)
    for step in range(1, steps + 1):
        event = events.get(step, "ok")
        for p, g in zip(params, bad_grads(step, event, s.get_scale())):
            p.grad = g
        before = opt.steps
        s.step(opt)
        stepped = opt.steps - before
        found_inf = sum(v.item() for v in
                        s._per_optimizer_states[id(opt)]["found_inf_per_device"].values())
        assert bool(found_inf) == (event != "ok") and stepped == (event == "ok")
        if step in new_scales:
            s.update(new_scales[step])
            new = f32_bits(new_scales[step])
        else:
            s.update()
            new = "-"
        scale = s._scale.item()
        print(f"{step} {event} {new} {stepped} {int(bool(found_inf))} {f32_bits(scale)} "
              f"{s._get_growth_tracker()}  # {scale:.9g}")
    st = s.state_dict()
    assert st["scale"] == s.get_scale() and st["_growth_tracker"] == s._get_growth_tracker()


print(f"# torch {torch.__version__}: torch.cuda.amp.GradScaler driven on CPU; kernels: "
      f"_amp_update_scale_ {'native' if UPDATE_NATIVE else 'transcribed from AmpKernels.cu'}, "
      f"_amp_foreach_non_finite_check_and_unscale_ "
      f"{'native' if UNSCALE_NATIVE else 'transcribed from AmpKernels.cu'}")
print("# formats: see amp/testdata/make_grad_scaler_golden.py")
print("state_keys " + " ".join(make_scaler().state_dict().keys()))

# The defaults over 5000 steps: growth every 2000 clean steps, backoff on inf,
# NaN and -inf, consecutive bad steps, and one explicit update(new_scale)
# (which keeps the growth tracker).
series("defaults", 5000,
       {3: "inf", 2500: "inf", 2501: "nan", 3999: "-inf", 4100: "-inf", 4101: "nan"},
       new_scales={4500: 1024.0, 4600: 3.0})

# Near FLT_MAX: growth that would overflow to inf is refused (tracker still
# resets), both with an exact factor and one whose product rounds back to
# FLT_MAX (which counts as finite growth).
series("near_max_gi1", 12, {5: "inf", 9: "nan"},
       init_scale=FLT_MAX / 2, growth_interval=1)
series("near_max_gi3", 20, {7: "inf", 8: "inf"},
       init_scale=3.0e38, growth_factor=1.00000001, backoff_factor=0.7, growth_interval=3)
series("near_max_gf1_5", 15, {4: "nan"},
       init_scale=2.0e38, growth_factor=1.5, growth_interval=1)

# Tiny scales: backing off through the subnormals to zero (round half to even
# at each halving), then staying at zero. Clean steps only while 1/scale is a
# finite float (below that the unscaled gradients would be inf: see
# grad_scaler.h).
tiny = {i: ["inf", "nan", "-inf"][i % 3] for i in range(1, 200)}
for i in (2, 3, 5, 6):
    del tiny[i]
series("tiny_to_zero", 199, tiny, init_scale=1e-36, growth_interval=2)
series("tiny_backoff_0_3", 100, {i: "inf" for i in range(2, 101)},
       init_scale=1e-37, growth_factor=3.0, backoff_factor=0.3, growth_interval=1)

# Factors that are not powers of two: products rounded from double to float.
odd = {i: "inf" for i in range(1, 401) if (i * 7919) % 11 in (0, 3)}
odd.update({i: "nan" for i in range(1, 401) if (i * 104729) % 13 == 5 and i not in odd})
series("odd_factors", 400, odd, init_scale=1000.0, growth_factor=1.7, backoff_factor=0.37,
       growth_interval=2)
series("odd_interval_7", 300, {i: "inf" for i in range(1, 301) if i % 23 == 0},
       init_scale=12345.678, growth_factor=1.0001, backoff_factor=0.999, growth_interval=7)

# --- two optimizers, one scaler ---------------------------------------------

def multi_series(steps, events_a, events_b, unscale_a_every, **options):
    """Optimizer A and B each with their own parameter; A is unscale_()d
    explicitly every `unscale_a_every`-th step, before both step()s."""
    s = make_scaler(**options)
    o = dict(DEFAULTS)
    o.update(options)
    print(f"multi_series {o['init_scale']!r} {o['growth_factor']!r} {o['backoff_factor']!r} "
          f"{o['growth_interval']}")
    pa, pb = torch.zeros(GRAD_SIZES[0]), torch.zeros(GRAD_SIZES[1])
    oa, ob = FakeOptimizer([pa]), FakeOptimizer([pb])
    for step in range(1, steps + 1):
        ea, eb = events_a.get(step, "ok"), events_b.get(step, "ok")
        ga = bad_grads(step, ea, s.get_scale())
        gb = bad_grads(step, eb, s.get_scale())
        pa.grad, pb.grad = ga[0], gb[1]
        # bad_grads puts the bad value at (step * 5) % 7: make sure it lands
        # in the part each optimizer owns.
        if ea != "ok":
            pa.grad[step % GRAD_SIZES[0]] = BAD[ea]
        if eb != "ok":
            pb.grad[step % GRAD_SIZES[1]] = BAD[eb]
        unscaled = step % unscale_a_every == 0
        if unscaled:
            s.unscale_(oa)
        before_a, before_b = oa.steps, ob.steps
        s.step(oa)
        s.step(ob)
        s.update()
        scale = s._scale.item()
        print(f"multi {step} {ea} {eb} {int(unscaled)} {oa.steps - before_a} {ob.steps - before_b} "
              f"{f32_bits(scale)} {s._get_growth_tracker()}  # {scale:.9g}")


multi_series(40, {3: "inf", 10: "nan", 11: "inf", 30: "inf"}, {5: "nan", 10: "inf", 12: "inf", 31: "nan"},
             unscale_a_every=3, init_scale=1024.0, growth_interval=4)

# --- unscale and scale values ------------------------------------------------

torch.manual_seed(0)
VALUES = [1.0, -1.0, 3.0, 0.1, 1.0 / 3.0, 6553.6, 7.0, -12345.678, 1e-30, 1e30, 1e-40,
          1.4e-45, 1.17549435e-38, FLT_MAX, -FLT_MAX, 0.0, -0.0, 65504.0, 2.0 ** 24 + 2,
          98765.4321]
VALUES += (torch.randn(24, dtype=torch.float64) * 10.0 ** torch.randint(-6, 7, (24,))).tolist()


def unscale_golden(scale_value, dtype):
    s = make_scaler(init_scale=scale_value)
    inv = s._scale.double().reciprocal().float()  # As in GradScaler.unscale_.
    grads = [torch.tensor([v], dtype=torch.float64).to(dtype) for v in VALUES]
    inputs = [g.clone() for g in grads]
    if dtype == torch.float16:
        # unscale_() refuses f16 grads ("Attempting to unscale FP16
        # gradients."); the kernel itself takes them, called as unscale_ would.
        unscale_kernel(grads, torch.zeros(1), inv)
    else:
        params = []
        for g in grads:
            p = torch.zeros(1, dtype=dtype)
            p.grad = g
            params.append(p)
        s.unscale_(FakeOptimizer(params))
    for a, b in zip(inputs, grads):
        print(f"unscale {DTYPE_NAMES[dtype]} {bits(s._scale)} {bits(inv)} {bits(a)} {bits(b)}")


def scale_golden(scale_value, dtype):
    s = make_scaler(init_scale=scale_value)
    for v in VALUES:
        loss = torch.tensor([v], dtype=torch.float64).to(dtype)
        out = loss * s._scale.to(device=loss.device)  # As in GradScaler.scale.
        assert out.dtype == dtype
        print(f"scale {DTYPE_NAMES[dtype]} {bits(s._scale)} {bits(loss)} {bits(out)}")


for scale_value in [65536.0, 3.0, 1e-3, 1e-38, 3.0e38]:
    for dtype in [torch.float32, torch.float64, torch.bfloat16, torch.float16]:
        unscale_golden(scale_value, dtype)
    for dtype in [torch.float32, torch.float64]:
        scale_golden(scale_value, dtype)
