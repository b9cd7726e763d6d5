#!/usr/bin/env python3
"""
Derives every constant of the vector math in vecmath_*.c (mpmath, no other
dependency) and prints the C tables that backends/llvm/vecmath_coeffs.h holds.

    python3 backends/llvm/vecmath_fit.py > backends/llvm/vecmath_coeffs.h

Polynomials are minimax (weighted Remez exchange at 80 digits) for the reduced
functions below, then rounded to double; the printed comment of each table is
the maximum weighted error of the ROUNDED polynomial measured on a dense grid.
The reductions around them follow fdlibm / Cephes / SLEEF (cited in the C
files); no coefficient is copied from those libraries.

F32 kernels evaluate in double (as glibc's expf/logf/sinf have done since
2.28), so their polynomials only need about 2^-32 relative error; the F64
ones need about 2^-56. F32 exp and tanh, which run in float arithmetic, have
their own fits with coefficients rounded to float.

Takes about half a minute.
"""
import sys

from mpmath import mp, mpf, exp, log, atanh, sin, cos, tanh, sqrt, erf, erfc, pi, chebyt, matrix, lu_solve

mp.dps = 60


# ------------------------------------------------------------------ Remez

def remez(f, w, a, b, n, iters=40):
    """Coefficients c[0..n-1] of p(t) = sum c_i t^i minimizing max |w(t) (p(t) - f(t))| on [a, b]."""
    a, b = mpf(a), mpf(b)
    m = n + 1
    ref = [(a + b) / 2 - (b - a) / 2 * mp.cos(pi * i / (m - 1)) for i in range(m)]
    grid = [(a + b) / 2 - (b - a) / 2 * mp.cos(pi * i / 4000) for i in range(4001)]
    fg = [f(t) for t in grid]
    wg = [w(t) for t in grid]
    best = None
    for _ in range(iters):
        A = matrix(m, m)
        rhs = matrix(m, 1)
        for i, t in enumerate(ref):
            for j in range(n):
                A[i, j] = t ** j
            A[i, n] = (-1) ** i / w(t)
            rhs[i] = f(t)
        sol = lu_solve(A, rhs)
        c = [sol[j] for j in range(n)]
        err = [wg[k] * (poly(c, grid[k]) - fg[k]) for k in range(len(grid))]
        # local extrema of err (with the end points), merged to alternate in sign
        ext = []
        for k in range(len(grid)):
            left = err[k - 1] if k > 0 else None
            right = err[k + 1] if k + 1 < len(grid) else None
            e = err[k]
            if (left is None or abs(e) >= abs(left)) and (right is None or abs(e) >= abs(right)):
                ext.append(k)
        alt = []
        for k in ext:
            if alt and (err[k] > 0) == (err[alt[-1]] > 0):
                if abs(err[k]) > abs(err[alt[-1]]):
                    alt[-1] = k
            else:
                alt.append(k)
        while len(alt) > m:  # drop the smaller end
            if abs(err[alt[0]]) < abs(err[alt[-1]]):
                alt.pop(0)
            else:
                alt.pop()
        emax = max(abs(e) for e in err)
        best = c
        if len(alt) < m:
            break
        ref = [grid[k] for k in alt]
        emin = min(abs(err[k]) for k in alt)
        if emax - emin < emax * mpf("1e-4"):
            break
    return best


def poly(c, t):
    r = mpf(0)
    for x in reversed(c):
        r = r * t + x
    return r


def rounded(c, single=False):
    if single:
        import struct
        return [mpf(struct.unpack("f", struct.pack("f", float(x)))[0]) for x in c]
    return [mpf(float(x)) for x in c]


def max_err(c, f, w, a, b, pts=20000):
    a, b = mpf(a), mpf(b)
    e = mpf(0)
    for i in range(pts + 1):
        t = a + (b - a) * i / pts
        e = max(e, abs(w(t) * (poly(c, t) - f(t))))
    return e


def emit(name, comment, c, f, w, a, b, single=False):
    cr = rounded(c, single)
    e = max_err(cr, f, w, a, b)
    lg = mp.log(e, 2) if e > 0 else mpf(-999)
    print("/* %s\n * (max weighted error %.3g = 2^%.1f) */" % (comment, float(e), float(lg)))
    print("static const double %s[%d] = {" % (name, len(cr)))
    for x in cr:
        print("    %s," % float.hex(float(x)))
    print("};")
    sys.stdout.flush()


TINY = mpf("1e-40")

# ------------------------------------------------------------------ the reduced functions


def exp_p(r):  # e^r = 1 + r + r^2 P(r)
    if abs(r) < TINY:
        return mpf(1) / 2
    return (exp(r) - 1 - r) / r ** 2


def exp_w(r):  # error of P, relative to e^r
    return r ** 2 / exp(r) if abs(r) > TINY else mpf(0) + TINY


LN2_HALF = log(2) / 2 * mpf("1.0001")


def log_r(z):  # log(1+f) = 2 atanh(s) = 2s + s R(z), z = s^2, R(z) = z Q(z)
    if z < TINY:
        return mpf(2) / 3
    s = sqrt(z)
    return (2 * atanh(s) - 2 * s) / (s * z)


def log_w(z):  # absolute error of s R relative to log(1+f) ~ 2s: z/2 per unit of Q
    return z / 2 if z > TINY else TINY


ZMAX_LOG = ((sqrt(2) - 1) / (sqrt(2) + 1)) ** 2 * mpf("1.0001")


def logdd_t(z):  # Q(z) = 2/3 + z T(z)
    if z < TINY:
        return mpf(2) / 5
    return (log_r(z) - mpf(2) / 3) / z


def sin_s(z):  # sin x = x + x^3 S(z), z = x^2
    if z < TINY:
        return -mpf(1) / 6
    s = sqrt(z)
    return (sin(s) - s) / (s * z)


def sin_w(z):  # relative to sin x
    if z < TINY:
        return TINY
    s = sqrt(z)
    return s * z / sin(s)


def cos_c(z):  # cos x = 1 - z/2 + z^2 C(z)
    if z < TINY:
        return mpf(1) / 24
    return (cos(sqrt(z)) - 1 + z / 2) / z ** 2


def cos_w(z):
    return z ** 2 / cos(sqrt(z)) if z > TINY else TINY


PIO4_SQ = (pi / 4) ** 2 * mpf("1.0001")


ERF_SPLIT = mpf("0.875")


def erf_small(z):  # erf(x) = x + x P(z), z = x^2, |x| <= ERF_SPLIT
    if z < TINY:
        return 2 / sqrt(pi) - 1
    x = sqrt(z)
    return erf(x) / x - 1


def erf_small_w(z):  # absolute error of x P relative to erf(x)
    if z < TINY:
        return 1 / (2 / sqrt(pi))
    x = sqrt(z)
    return x / erf(x)


def erfc_at(center):
    # erfc(x) as a polynomial in t = x - center (absolute error: erf = 1 - erfc >= 0.78)
    return lambda t: erfc(t + center)


# |x| intervals above ERF_SPLIT where erf = 1 - erfc(x); beyond the last one erf
# rounds to 1 (F64: erfc(5.93) < 2^-54; F32: erfc(3.84) < 2^-25).
ERFC_F64 = (18, ["0.875", "1.75", "2.75", "4", "5.95"])
ERFC_F32 = (10, ["0.875", "1.75", "2.75", "3.95"])


def emit_erfc(name, spec):
    n, bounds = spec
    bounds = [mpf(b) for b in bounds]
    print("/* erf: erf(x) = 1 - E_i(|x| - center_i) on interval i; absolute errors of E_i:")
    rows = []
    for i in range(len(bounds) - 1):
        a, b = bounds[i], bounds[i + 1]
        ctr = (a + b) / 2
        f = erfc_at(ctr)
        one = lambda t: mpf(1)
        c = rounded(remez(f, one, a - ctr, b - ctr, n, iters=30))
        e = max_err(c, f, one, a - ctr, b - ctr, 4000)
        print(" *   [%s, %s]: %.3g = 2^%.1f" % (mp.nstr(a, 5), mp.nstr(b, 5), float(e),
                                                 float(mp.log(e, 2))))
        rows.append((ctr, c))
    print(" */")
    print("static const double %s_BOUND[%d] = {" % (name, len(bounds)))
    for b in bounds:
        print("    %s," % float.hex(float(b)))
    print("};")
    print("static const double %s_CENTER[%d] = {" % (name, len(rows)))
    for r in rows:
        print("    %s," % float.hex(float(r[0])))
    print("};")
    print("static const double %s[%d][%d] = {" % (name, len(rows), n))
    for _, c in rows:
        print("    {")
        for x in c:
            print("        %s," % float.hex(float(x)))
        print("    },")
    print("};")
    sys.stdout.flush()


def bits_of(x, nbits):
    """x (0 < x < 4) truncated to its leading nbits significant bits."""
    e = mp.floor(mp.log(x, 2))
    scale = mpf(2) ** (nbits - 1 - e)
    return mp.floor(x * scale) / scale


def hexd(x):
    return float.hex(float(x))


def emit_constants():
    ln2 = log(2)
    hi42 = bits_of(ln2, 42)
    print("/* ln 2 = LN2_HI + LN2_LO; LN2_HI has 42 significant bits so k * LN2_HI is exact for")
    print(" * |k| < 2^11 (Cody-Waite). */")
    print("static const double LN2_HI = %s;" % hexd(hi42))
    print("static const double LN2_LO = %s;" % hexd(ln2 - hi42))
    print("static const double LOG2E = %s;" % hexd(1 / ln2))
    import struct
    f32 = lambda x: mpf(struct.unpack("f", struct.pack("f", float(x)))[0])
    l1 = f32(ln2)
    print("/* The same for float arithmetic: with fma, x - k LN2_HI_F32 is exact for |k| <= 2^8. */")
    print("static const double LN2_HI_F32 = %s;" % hexd(l1))
    print("static const double LN2_LO_F32 = %s;" % hexd(f32(ln2 - l1)))
    print("static const double LOG2E_F32 = %s;" % hexd(f32(1 / ln2)))
    two3 = mpf(2) / 3
    print("/* 2/3 as a double-double (the leading term of log's series in pow). */")
    print("static const double TWO_THIRDS_HI = %s;" % hexd(two3))
    print("static const double TWO_THIRDS_LO = %s;" % hexd(two3 - mpf(float(two3))))
    pio2 = pi / 2
    p1 = bits_of(pio2, 33)
    p2 = bits_of(pio2 - p1, 33)
    p3 = bits_of(pio2 - p1 - p2, 33)
    p3t = pio2 - p1 - p2 - p3
    print("/* pi/2 = PIO2_1 + PIO2_2 + PIO2_3 + PIO2_3T, the first three of 33 bits each, so k *")
    print(" * PIO2_i is exact for k <= 2^20 (Cody-Waite in three exact steps, as fdlibm's")
    print(" * __ieee754_rem_pio2 does for medium arguments). */")
    for name, value in (("PIO2_1", p1), ("PIO2_2", p2), ("PIO2_3", p3), ("PIO2_3T", p3t),
                        ("PIO2_HI", pio2), ("PIO2_LO", pio2 - mpf(float(pio2)))):
        print("static const double %s = %s;" % (name, hexd(value)))
    print("static const double TWO_OVER_PI = %s;" % hexd(2 / pi))
    # 2/pi in hex: 1200 bits after the binary point
    nbits = 1200
    with mp.workdps(nbits // 3 + 50):
        v = int(mp.floor((2 / mp.pi) * mpf(2) ** nbits))
    h = "%0*x" % (nbits // 4, v)
    print("/* The first %d bits of 2/pi after the binary point (Payne-Hanek). */" % nbits)
    print("static const char TWO_OVER_PI_HEX[] =")
    for i in range(0, len(h), 72):
        print('    "%s"' % h[i:i + 72])
    print("    ;")


def main():
    print("/*\n * Generated by backends/llvm/vecmath_fit.py (mpmath minimax fits); do not edit.")
    print(" * Coefficients are in increasing powers; hex floats are exact. */")
    print("#ifndef LOOM_BACKENDS_LLVM_VECMATH_COEFFS_H\n#define LOOM_BACKENDS_LLVM_VECMATH_COEFFS_H\n")
    print("/* clang-format off */")

    # exp: P(r) on [-ln2/2, ln2/2]
    for name, n in (("EXP_P_F64", 11), ("EXP_P_F32", 6)):
        c = remez(exp_p, exp_w, -LN2_HALF, LN2_HALF, n)
        emit(name, "exp: e^r = 1 + r + r^2 P(r), |r| <= ln2/2; error of e^r relative", c, exp_p,
             exp_w, -LN2_HALF, LN2_HALF)

    # exp computed in float: coefficients are floats
    c = remez(exp_p, exp_w, -LN2_HALF, LN2_HALF, 5)
    emit("EXP_P_F32_NATIVE", "exp in float arithmetic: e^r = 1 + r + r^2 P(r), float coefficients",
         c, exp_p, exp_w, -LN2_HALF, LN2_HALF, single=True)

    # log: Q(z) on [0, zmax]
    for name, n in (("LOG_Q_F64", 7), ("LOG_Q_F32", 3)):
        c = remez(log_r, log_w, 0, ZMAX_LOG, n)
        emit(name, "log: log(1+f) = 2s + s z Q(z), s = f/(2+f), z = s^2 <= 0.0295; error relative "
             "to 2s", c, log_r, log_w, 0, ZMAX_LOG)

    # log in double-double (pow): T(z) with Q = 2/3 + z T
    c = remez(logdd_t, lambda z: 1 / logdd_t(z), 0, ZMAX_LOG, 9)
    emit("LOGDD_T_F64", "log for pow: Q(z) = 2/3 + z T(z); relative error of T", c, logdd_t,
         lambda z: 1 / logdd_t(z), 0, ZMAX_LOG)

    # sin / cos on [-pi/4, pi/4]
    for name, n in (("SIN_S_F64", 6), ("SIN_S_F32", 4)):
        c = remez(sin_s, sin_w, 0, PIO4_SQ, n)
        emit(name, "sin: sin x = x + x^3 S(x^2), |x| <= pi/4; error relative to sin x", c, sin_s,
             sin_w, 0, PIO4_SQ)
    for name, n in (("COS_C_F64", 6), ("COS_C_F32", 4)):
        c = remez(cos_c, cos_w, 0, PIO4_SQ, n)
        emit(name, "cos: cos x = 1 - x^2/2 + x^4 C(x^2), |x| <= pi/4; error relative to cos x", c,
             cos_c, cos_w, 0, PIO4_SQ)

    # erf, |x| <= ERF_SPLIT
    zs = ERF_SPLIT ** 2
    for name, n in (("ERF_P_F64", 12), ("ERF_P_F32", 7)):
        c = remez(erf_small, erf_small_w, 0, zs, n)
        emit(name, "erf: erf(x) = x + x P(x^2), |x| <= 0.875; error relative to erf(x)", c,
             erf_small, erf_small_w, 0, zs)

    emit_erfc("ERFC_F64", ERFC_F64)
    emit_erfc("ERFC_F32", ERFC_F32)
    emit_constants()
    print("/* clang-format on */")
    print("\n#endif")


if __name__ == "__main__":
    main()
