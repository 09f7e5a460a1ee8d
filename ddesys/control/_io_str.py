"""The readable text of a :class:`~ddesys.DelayIOSystem` (its ``str``), in python-control's layout plus the delays.

A system whose delays sit only on its inputs, outputs and feedthrough (no state read late) has, from
input ``j`` to output ``i``, a sum over the distinct total delays ``d`` of ``R_d(s) exp(-d s)`` with
``R_d`` rational; each ``R_d`` is shown as a fraction of polynomials in ``s`` (common roots of numerator and
denominator cancelled). A system with internal delays (a state read late: a loop closed around a delay)
has quasi-polynomial fractions; it is described compactly instead.
"""
from __future__ import annotations

import numpy as np

MAX_PAIRS = 9              # input-output pairs written out; beyond, the compact description
MAX_STATES = 12            # states of a realization written out as fractions
CANCEL_RTOL = 1e-6         # a numerator root this close (relative) to a denominator root cancels it
TINY = 1e-12               # coefficients below this (relative to the largest) are zero


def _fmt(c):
    return f"{c:.4g}"


def poly_str(c, var="s"):
    """``[3, 0, 1] -> "3 s^2 + 1"`` (highest power first, four significant digits)."""
    c = np.asarray(c, float)
    deg = c.size - 1
    terms = []
    for k, a in enumerate(c):
        if a == 0:
            continue
        p = deg - k
        mag = abs(a)
        coef = "" if (p > 0 and _fmt(mag) == "1") else _fmt(mag)
        mon = "" if p == 0 else (var if p == 1 else f"{var}^{p}")
        body = " ".join(x for x in (coef, mon) if x)
        terms.append(("-" if a < 0 else "+", body))
    if not terms:
        return "0"
    out = ("-" if terms[0][0] == "-" else "") + terms[0][1]
    for sign, body in terms[1:]:
        out += f" {sign} {body}"
    return out


def _trim(c):
    c = np.asarray(c, float)
    scale = np.abs(c).max(initial=0.0)
    c = np.where(np.abs(c) <= TINY * scale, 0.0, c)
    nz = np.flatnonzero(c)
    return c[nz[0]:] if nz.size else np.zeros(1)


def _cancel(num, den):
    """``num / den`` with the common roots removed (within :data:`CANCEL_RTOL`)."""
    num, den = _trim(num), _trim(den)
    if not num.any() or den.size == 1 or num.size == 1:
        return num, den
    zn, zd = list(np.roots(num)), list(np.roots(den))
    keep_n = []
    for z in zn:
        dist = [abs(z - p) for p in zd]
        k = int(np.argmin(dist)) if dist else -1
        if k >= 0 and dist[k] <= CANCEL_RTOL * (1 + abs(zd[k])):
            zd.pop(k)
        else:
            keep_n.append(z)
    n = num[0] * np.real_if_close(np.poly(keep_n)) if keep_n else num[:1]
    d = den[0] * np.real_if_close(np.poly(zd)) if zd else den[:1]
    return _trim(np.real(n)), _trim(np.real(d))


def _normalize(num, den):
    """Scale the fraction so that its text is shortest: a monic denominator, or one with the lowest
    nonzero coefficient 1 (time-constant form, as ``3 s + 1``)."""
    options = []
    for k in (den[0], den[np.flatnonzero(den)[-1]]):
        n, d = num / k, den / k
        options.append((len(poly_str(n)) + len(poly_str(d)), n, d))
    _, n, d = min(options, key=lambda o: o[0])
    return n, d


def _block(num, den, delay):
    """Three text lines: numerator, bar (with ``exp(-d s)``), denominator; or one line when the
    denominator is a constant."""
    ds = f" exp(-{delay:g} s)" if delay > 0 else ""
    if den.size == 1:
        n = num / den[0]
        text = poly_str(n)
        if ds and np.count_nonzero(n) > 1:
            text = f"({text})"
        return ["", text + ds, ""]
    a, b = poly_str(num), poly_str(den)
    w = max(len(a), len(b))
    return [a.center(w) + " " * len(ds), "-" * w + ds, b.center(w) + " " * len(ds)]


def _join(blocks):
    if not blocks:
        return ["", "0", ""]
    out = blocks[0]
    for b in blocks[1:]:
        out = [out[0] + "   " + b[0], out[1] + " + " + b[1], out[2] + "   " + b[2]]
    return out


def _pair_terms(f, i, j):
    """``{delay: (num, den)}`` of the pair ``u_j -> y_i`` of an explicit form without state delays."""
    n = f.A.shape[0]
    den = np.poly(f.A) if n else np.ones(1)
    ins = [(0.0, f.B0)] + list(zip(f.input_delays, f.Bd))
    outs = [(0.0, f.C0)] + list(zip(f.output_delays, f.Cd))
    terms = {}

    def add(d, num):
        key = round(float(d), 12)
        terms[key] = terms.get(key, np.zeros(n + 1)) + np.pad(num, (n + 1 - num.size, 0))

    if n:
        for a, B in ins:
            for b, C in outs:
                bj, ci = B[:, j:j + 1], C[i:i + 1]
                if not (bj.any() and ci.any()):
                    continue
                add(a + b, np.poly(f.A - bj @ ci) - den)         # C (sI - A)^-1 B = num / det(sI - A)
    for d, D in [(0.0, f.D0)] + list(zip(f.feed_delays, f.Dd)):
        if D[i, j] != 0:
            add(d, D[i, j] * den)
    return {d: _normalize(*_cancel(num, den)) for d, num in sorted(terms.items()) if _trim(num).any()}


def _header(sys):
    def plural(k, word):
        return f"{k} {word}{'' if k == 1 else 's'}"

    return (f"{type(sys).__name__}: {plural(sys.n_inputs, 'input')}, {plural(sys.n_outputs, 'output')}, "
            f"{plural(sys.n_states, 'state')}")


def _compact(sys, why):
    taus = ", ".join(f"{t:g}" for t in sorted({float(t) for t in sys.tau}))
    lines = [_header(sys) + (f", delays [{taus}]" if taus else ""), f"  {why}"]
    return "\n".join(lines)


def io_str(sys):
    """The text of ``str(sys)`` for a :class:`~ddesys.DelayIOSystem` (see the module docstring)."""
    from ..matrix.errors import AlgebraicLoopError

    p, m = sys.n_outputs, sys.n_inputs
    try:
        f = sys.explicit_form()
    except AlgebraicLoopError:
        return _compact(sys, "the delay channels close a loop among themselves (a delay-difference part): "
                             "no transfer function is written out")
    if f.state_delays.size:
        sd = ", ".join(f"{d:g}" for d in f.state_delays)
        return _compact(sys, f"internal delays (a loop closed around a delay): the state is read late at [{sd}];\n"
                             "  the transfer function is a ratio of quasi-polynomials in s and exp(-d s) "
                             "(see explicit_form())")
    if p * m > MAX_PAIRS or sys.n_states > MAX_STATES:
        return _compact(sys, "delays on inputs and outputs only; too large to write out (see explicit_form())")
    lines = [_header(sys)]
    for j in range(m):
        for i in range(p):
            lines.append("")
            if p * m > 1:
                lines.append(f"Input {j} to output {i}:")
            blk = _join([_block(num, den, d) for d, (num, den) in _pair_terms(f, i, j).items()])
            lines += ["  " + x.rstrip() for x in blk if x.strip()]
    return "\n".join(lines)
