"""Just enough PNG decoding (stdlib zlib) to name an image's dominant colour.

Supports 8-bit, non-interlaced grey / RGB / palette / grey+alpha / RGBA images: what a test writes.
"""
import struct
import zlib

BASIC_COLOURS = {
    "black": (0, 0, 0), "white": (255, 255, 255), "gray": (128, 128, 128),
    "red": (255, 0, 0), "green": (0, 160, 0), "blue": (0, 0, 255),
    "yellow": (255, 255, 0), "cyan": (0, 255, 255), "magenta": (255, 0, 255),
    "orange": (255, 140, 0), "purple": (128, 0, 128), "pink": (255, 182, 193), "brown": (139, 69, 19),
}
_CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}


class PNGError(ValueError):
    pass


def _paeth(a, b, c):
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    return a if pa <= pb and pa <= pc else (b if pb <= pc else c)


def decode(data):
    """Return (width, height, rows) with rows a list of lists of (r, g, b, a) tuples."""
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise PNGError("not a PNG")
    pos, idat, palette, ihdr = 8, b"", None, None
    while pos + 8 <= len(data):
        length, ctype = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        pos += 12 + length
        if ctype == b"IHDR":
            ihdr = struct.unpack(">IIBBBBB", body)
        elif ctype == b"PLTE":
            palette = [tuple(body[i:i + 3]) for i in range(0, len(body), 3)]
        elif ctype == b"IDAT":
            idat += body
        elif ctype == b"IEND":
            break
    if ihdr is None:
        raise PNGError("no IHDR")
    width, height, depth, colour, _comp, _filt, interlace = ihdr
    if depth != 8 or interlace or colour not in _CHANNELS or (colour == 3 and not palette):
        raise PNGError("unsupported PNG (depth %d, colour type %d, interlace %d)" % (depth, colour, interlace))
    bpp = _CHANNELS[colour]
    raw = zlib.decompress(idat)
    stride = width * bpp
    prev = bytearray(stride)
    rows = []
    for y in range(height):
        ftype = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for x in range(stride):
            a = line[x - bpp] if x >= bpp else 0
            b = prev[x]
            c = prev[x - bpp] if x >= bpp else 0
            if ftype == 1:
                line[x] = (line[x] + a) & 255
            elif ftype == 2:
                line[x] = (line[x] + b) & 255
            elif ftype == 3:
                line[x] = (line[x] + ((a + b) >> 1)) & 255
            elif ftype == 4:
                line[x] = (line[x] + _paeth(a, b, c)) & 255
        prev = line
        px = []
        for x in range(0, stride, bpp):
            p = line[x:x + bpp]
            if colour == 0:
                px.append((p[0], p[0], p[0], 255))
            elif colour == 2:
                px.append((p[0], p[1], p[2], 255))
            elif colour == 3:
                px.append(palette[p[0]] + (255,))
            elif colour == 4:
                px.append((p[0], p[0], p[0], p[1]))
            else:
                px.append(tuple(p))
        rows.append(px)
    return width, height, rows


def colour_name(rgb):
    return min(BASIC_COLOURS, key=lambda n: sum((a - b) ** 2 for a, b in zip(rgb, BASIC_COLOURS[n])))


def dominant_colour(data):
    """Name of the basic colour covering most opaque pixels of a PNG."""
    _w, _h, rows = decode(data)
    counts = {}
    for row in rows[::max(1, len(rows) // 64)]:
        for px in row[::max(1, len(row) // 64)]:
            if px[3] >= 128:
                name = colour_name(px[:3])
                counts[name] = counts.get(name, 0) + 1
    if not counts:
        return "transparent"
    return max(counts, key=counts.get)


def make_png(width, height, rgb):
    """Write a solid-colour RGB PNG (used by tests and by anyone needing a fixture)."""
    def chunk(ctype, body):
        return struct.pack(">I", len(body)) + ctype + body + struct.pack(">I", zlib.crc32(ctype + body))
    raw = b"".join(b"\x00" + bytes(rgb) * width for _row in range(height))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
