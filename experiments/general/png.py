"""Reading 8-bit PNG images as grayscale arrays: Pillow when it is installed, else a small decoder
(standard library ``zlib``; non-interlaced, bit depth 8, gray / gray+alpha / RGB / RGBA, every
filter type), enough for LRA's Pathfinder images (8-bit grayscale)."""
from __future__ import annotations

import struct
import zlib
from pathlib import Path

import numpy as np

SIGNATURE = b"\x89PNG\r\n\x1a\n"
_CHANNELS = {0: 1, 2: 3, 4: 2, 6: 4}                    # PNG colour type -> samples per pixel


def _paeth(a, b, c):
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    return a if pa <= pb and pa <= pc else b if pb <= pc else c


def decode_png(raw, name="PNG"):
    """uint8 ``(H, W, C)`` samples of the PNG bytes ``raw`` (``C``: 1 gray, 2 gray+alpha, 3 RGB, 4 RGBA)."""
    if raw[:8] != SIGNATURE:
        raise ValueError(f"{name}: not a PNG file")
    pos, head, idat = 8, None, []
    while pos + 8 <= len(raw):
        n, kind = struct.unpack(">I4s", raw[pos:pos + 8])
        body = raw[pos + 8:pos + 8 + n]
        pos += 12 + n
        if kind == b"IHDR":
            head = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
        elif kind == b"IEND":
            break
    if head is None or not idat:
        raise ValueError(f"{name}: PNG without IHDR or IDAT")
    w, h, depth, ctype, _, _, interlace = head
    if depth != 8 or ctype not in _CHANNELS or interlace:
        raise ValueError(f"{name}: only non-interlaced 8-bit gray/RGB(A) PNGs are read without Pillow "
                         f"(depth {depth}, colour type {ctype}, interlace {interlace}); install Pillow")
    bpp = _CHANNELS[ctype]
    stride = w * bpp
    buf = zlib.decompress(b"".join(idat))
    if len(buf) != h * (stride + 1):
        raise ValueError(f"{name}: image data has {len(buf)} bytes, {h * (stride + 1)} expected for {w}x{h}")
    rows = np.frombuffer(buf, np.uint8).reshape(h, stride + 1)
    out = np.zeros((h, stride), np.int64)
    prev = np.zeros(stride, np.int64)
    for r in range(h):
        f, line = rows[r, 0], rows[r, 1:].astype(np.int64)
        if f == 0:
            cur = line
        elif f == 1:                                    # Sub: a running sum per channel
            cur = np.cumsum(line.reshape(w, bpp), axis=0).reshape(-1) % 256
        elif f == 2:                                    # Up
            cur = (line + prev) % 256
        elif f in (3, 4):                               # Average, Paeth: left to right
            cur = line.copy()
            for i in range(stride):
                a = int(cur[i - bpp]) if i >= bpp else 0
                c = int(prev[i - bpp]) if i >= bpp else 0
                cur[i] = (cur[i] + ((a + int(prev[i])) // 2 if f == 3 else _paeth(a, int(prev[i]), c))) % 256
        else:
            raise ValueError(f"{name}: unknown PNG filter type {f} in row {r}")
        out[r] = prev = cur
    return out.astype(np.uint8).reshape(h, w, bpp)


def read_gray(path):
    """The image at ``path`` as uint8 ``(H, W)`` luma (Pillow's ``convert("L")`` where Pillow exists)."""
    path = Path(path)
    try:
        from PIL import Image
    except ImportError:
        a = decode_png(path.read_bytes(), str(path))
        if a.shape[2] <= 2:
            return a[:, :, 0]
        r, g, b = (a[:, :, c].astype(np.uint32) for c in range(3))
        return ((19595 * r + 38470 * g + 7471 * b + 0x8000) >> 16).astype(np.uint8)
    with Image.open(path) as im:
        return np.asarray(im.convert("L"), dtype=np.uint8)


__all__ = ["decode_png", "read_gray"]
